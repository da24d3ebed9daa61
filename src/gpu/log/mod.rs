//! The GPU log: what every GPU did, one CSV row per GPU per
//! `daemon.metrics_interval_s` (1 s by default), in the spool's root, for
//! `carma report` and for plotting.
//!
//! # Format
//!
//! `gpu-log.csv` is written now; when it would pass
//! `daemon.gpu_log_max_mib` it becomes `gpu-log.1.csv` (which becomes
//! `gpu-log.2.csv`, ...) and a new one starts; at most
//! `daemon.gpu_log_keep` old files are kept, so the log never takes more
//! than `(keep + 1) x max` bytes. Every file starts with the header:
//!
//! ```text
//! time,gpu,source,smact,occupancy,dram,used_mib,total_mib,power_w,energy_j,temperature_c,sm_clock_mhz,processes
//! 1718000000.000,0,dcgm,0.8120,0.4560,0.1230,12034,40960,250.1,123456.7,65,1410,4242:11000:000042-resnet50 4300:500
//! ```
//!
//! - `time`: Unix seconds of the reading; `gpu`: carma's (NVML's) index.
//! - `source`: where `smact`, `occupancy` and `dram` came from: `dcgm`,
//!   `gpm`, `utilization` (the counter), `simulated`, or `unmeasured` (a
//!   MIG instance: `smact` 0, `occupancy` and `dram` empty).
//! - `smact`, `occupancy`, `dram`: fractions 0..1 (SM active, SM occupancy,
//!   DRAM active); empty where the source does not measure them.
//! - `used_mib`, `total_mib`: memory, MiB; `power_w`: watts; `energy_j`:
//!   the GPU's energy counter, joules from an arbitrary origin (it restarts
//!   with the driver or, for simulated GPUs, the daemon); `temperature_c`:
//!   °C; `sm_clock_mhz`: MHz. Empty where the GPU cannot tell.
//! - `processes`: space-separated `pid:MiB` or `pid:MiB:task` (the carma
//!   task whose job owns the process). Task names use only `A-Za-z0-9-_.`,
//!   so no field ever needs quoting.
//!
//! A GPU that cannot be read has no rows while it cannot. The daemon
//! writes each interval's rows with one `write` (no fsync: a crash loses
//! at most the last rows), so readers see whole rows. Old files are not
//! compressed: the bound is what keeps the log small.
//!
//! Before this log, the daemon appended `time,gpu,used_mib,smact,power_w,
//! energy_j` rows to `gpu-samples.csv`; [`read`] reads that file too.

mod rotate;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

pub use rotate::RotatingLog;

use super::{GpuReading, MetricSource};

/// The file written now, in the spool's root.
pub const CURRENT: &str = "gpu-log.csv";
/// The file the daemon wrote before this log, read for old spools.
pub const LEGACY: &str = "gpu-samples.csv";
/// The first line of every file.
pub const HEADER: &str = "time,gpu,source,smact,occupancy,dram,used_mib,total_mib,power_w,\
                          energy_j,temperature_c,sm_clock_mhz,processes";

/// The name of the `n`th old file (1 the newest).
pub fn rotated(n: usize) -> String {
    format!("gpu-log.{n}.csv")
}

/// The rows of `readings` taken at `time` (Unix seconds), each process
/// with its task where `owners` (pid to task name) knows it. GPUs that
/// could not be read are left out.
pub fn rows(time: f64, readings: &[GpuReading], owners: &HashMap<u32, String>) -> String {
    let mut text = String::new();
    let fraction = |value: Option<f64>| value.map_or_else(String::new, |v| format!("{v:.4}"));
    let tenth = |value: Option<f64>| value.map_or_else(String::new, |v| format!("{v:.1}"));
    let whole = |value: Option<u32>| value.map_or_else(String::new, |v| v.to_string());
    for r in readings.iter().filter(|r| r.error.is_none()) {
        let source = r.source.map_or("", MetricSource::key);
        let processes: Vec<String> = r
            .processes
            .iter()
            .map(|p| match owners.get(&p.pid) {
                Some(task) => format!("{}:{}:{task}", p.pid, p.used_mib),
                None => format!("{}:{}", p.pid, p.used_mib),
            })
            .collect();
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "{time:.3},{},{source},{:.4},{},{},{},{},{},{},{},{},{}",
            r.index,
            r.smact,
            fraction(r.occupancy),
            fraction(r.dram),
            r.used_mib,
            r.total_mib,
            tenth(r.power_w),
            tenth(r.energy_j),
            whole(r.temperature_c),
            whole(r.sm_clock_mhz),
            processes.join(" "),
        );
    }
    text
}

/// One row, as the report reads it: the columns both formats share, and
/// the newer ones where the file has them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Row {
    pub time: f64,
    pub gpu: usize,
    pub smact: f64,
    pub power_w: Option<f64>,
    pub energy_j: Option<f64>,
    pub used_mib: u64,
    #[serde(default)]
    pub occupancy: Option<f64>,
    #[serde(default)]
    pub dram: Option<f64>,
}

/// Every readable row of the log in `dir`: `gpu-samples.csv`, then the
/// old files, oldest first, then the current one. Rows that do not parse
/// (a torn last row after a crash, a full disk) are skipped.
pub fn read(dir: &Path) -> Vec<Row> {
    let mut old: Vec<(usize, std::path::PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let n = name
                .to_str()?
                .strip_prefix("gpu-log.")?
                .strip_suffix(".csv")?;
            Some((n.parse().ok()?, entry.path()))
        })
        .collect();
    old.sort_by_key(|(n, _)| std::cmp::Reverse(*n));
    let files = std::iter::once(dir.join(LEGACY))
        .chain(old.into_iter().map(|(_, path)| path))
        .chain(std::iter::once(dir.join(CURRENT)));
    files
        .filter_map(|path| csv::Reader::from_path(path).ok())
        .flat_map(|mut reader| reader.deserialize::<Row>().flatten().collect::<Vec<_>>())
        .collect()
}

#[cfg(test)]
mod tests;
