//! `carma report`: the figures of what really ran in a spool, computed from
//! the task records in `done/` and `failed/` and the GPU samples the daemon
//! appends, with the same keys as `carma simulate` so a replayed trace can
//! be compared with its simulation.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::simulate::{Metrics, TaskRecord};
use crate::spool::record::{Launch, RunExit, read_json};
use crate::spool::{Spool, SpoolError, State};
use crate::supervisor;

/// The file the daemon appends GPU readings to, in the spool's root.
pub const GPU_SAMPLES: &str = "gpu-samples.csv";
/// Its header line.
pub const GPU_SAMPLES_HEADER: &str = "time,gpu,used_mib,smact,power_w,energy_j";

/// The report: the simulator's figures plus the re-runs OOM crashes caused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Runs beyond each task's first.
    pub reruns: u32,
    /// Tasks that never ran (refused input, an unplaceable demand), and
    /// tasks cancelled by a user: listed in the rows, kept out of the
    /// figures above, whose waits and completion times they would distort.
    pub refused: u32,
    pub cancelled: u32,
}

/// One task in the per-task CSV.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    pub task: String,
    pub state: String,
    /// Unix seconds.
    pub submitted_at: f64,
    pub first_launch_at: Option<f64>,
    pub ended_at: Option<f64>,
    pub wait_s: Option<f64>,
    pub exec_s: f64,
    pub jct_s: Option<f64>,
    pub runs: u32,
    pub oom_crashes: u32,
    pub peak_mib: Option<u64>,
    pub gpus: String,
    pub reason: String,
}

/// One row of `gpu-samples.csv`.
#[derive(Debug, Clone, Deserialize)]
struct GpuRow {
    time: f64,
    gpu: usize,
    smact: f64,
    power_w: Option<f64>,
    energy_j: Option<f64>,
}

/// Builds the report of a spool.
pub fn build(spool: &Spool) -> Result<(Report, Vec<TaskRow>), SpoolError> {
    let mut records = Vec::new();
    let mut rows = Vec::new();
    let mut reruns = 0;
    let (mut refused, mut cancelled) = (0, 0);
    for state in [State::Done, State::Failed] {
        for name in spool.list(state)?.tasks {
            let record = spool.load_record(state, &name)?;
            let dir = spool.task_dir(state, &name);
            let end = record.outcome.as_ref().map(|o| o.at);
            let mut metrics = TaskRecord::submitted(record.submitted_at);
            let runs = runs_of(&dir);
            let mut first_launch = None;
            let mut exec = 0.0;
            let mut peak = None;
            let mut gpus = String::new();
            for (i, (launch, exit)) in runs.iter().enumerate() {
                metrics.launched(launch.launched_at);
                first_launch.get_or_insert(launch.launched_at);
                let stopped = exit
                    .as_ref()
                    .map(|e| e.ended_at)
                    .or(end)
                    .unwrap_or(launch.launched_at);
                exec += stopped - launch.launched_at;
                let crashed = i + 1 < runs.len() || record.crashes as usize > i;
                metrics.stopped(stopped, crashed);
                peak = peak.max(exit.as_ref().and_then(|e| e.peak_mib));
                gpus = launch
                    .gpus
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ");
            }
            reruns += runs.len().saturating_sub(1) as u32;
            match (state, end) {
                (State::Done, Some(at)) => metrics.completed(at),
                (_, Some(at)) => metrics.failed(at),
                (_, None) => {}
            }
            let reason = record.outcome.as_ref().and_then(|o| o.reason.as_deref());
            if reason == Some(crate::sched::FailReason::Cancelled.to_string().as_str()) {
                cancelled += 1;
            } else if runs.is_empty() {
                refused += 1;
            } else {
                records.push(metrics);
            }
            let jct = end.map(|e| e - record.submitted_at);
            rows.push(TaskRow {
                task: name.to_string(),
                state: state.to_string(),
                submitted_at: record.submitted_at,
                first_launch_at: first_launch,
                ended_at: end,
                wait_s: jct.map(|j| j - exec),
                exec_s: exec,
                jct_s: jct,
                runs: runs.len() as u32,
                oom_crashes: record.crashes,
                peak_mib: peak,
                gpus,
                reason: record.outcome.and_then(|o| o.reason).unwrap_or_default(),
            });
        }
    }
    let start = rows
        .iter()
        .map(|r| r.submitted_at)
        .fold(f64::INFINITY, f64::min);
    let end = rows
        .iter()
        .filter_map(|r| r.ended_at)
        .fold(f64::NEG_INFINITY, f64::max);
    let gpus = gpu_integrals(&spool.root().join(GPU_SAMPLES), start, end);
    let metrics = Metrics::new(&records, &gpus, None);
    Ok((
        Report {
            metrics,
            reruns,
            refused,
            cancelled,
        },
        rows,
    ))
}

/// Each run's launch and, when it ended normally, its exit, in order.
fn runs_of(dir: &Path) -> Vec<(Launch, Option<RunExit>)> {
    let mut runs: Vec<(u32, Launch, Option<RunExit>)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n: u32 = e.file_name().to_str()?.strip_prefix("run-")?.parse().ok()?;
            let launch = read_json::<Launch>(&e.path().join(supervisor::LAUNCH)).ok()?;
            let exit = read_json::<RunExit>(&e.path().join(supervisor::EXIT)).ok();
            // A launch whose supervisor never started, or whose job could
            // not start for a reason that passed, did not run.
            let started = match &exit {
                Some(exit) => !exit.transient,
                None => e.path().join(supervisor::IDENTITY).exists(),
            };
            started.then_some((n, launch, exit))
        })
        .collect();
    runs.sort_by_key(|r| r.0);
    runs.into_iter().map(|(_, l, e)| (l, e)).collect()
}

/// Per GPU (joules, SMACT-seconds) over `[start, end]` from the samples
/// file. Energy is summed interval by interval: the energy counter's
/// difference where both ends have one and it grew, power x time
/// otherwise. A counter that went backwards was reset (a driver reload
/// restarts NVML's, a daemon restart the simulated one): subtracting across
/// the reset would lose or invert the energy of the whole trace before it.
/// Missing file: no GPUs.
fn gpu_integrals(path: &Path, start: f64, end: f64) -> Vec<(f64, f64)> {
    let Ok(mut reader) = csv::Reader::from_path(path) else {
        return Vec::new();
    };
    let mut by_gpu: BTreeMap<usize, Vec<GpuRow>> = BTreeMap::new();
    for row in reader.deserialize::<GpuRow>().flatten() {
        if row.time >= start && row.time <= end {
            by_gpu.entry(row.gpu).or_default().push(row);
        }
    }
    by_gpu
        .into_values()
        .map(|mut rows| {
            rows.sort_by(|a, b| a.time.total_cmp(&b.time));
            let mut joules = 0.0;
            let mut smact_seconds = 0.0;
            for pair in rows.windows(2) {
                let dt = pair[1].time - pair[0].time;
                smact_seconds += pair[0].smact * dt;
                joules += match (pair[0].energy_j, pair[1].energy_j) {
                    (Some(before), Some(after)) if after >= before => after - before,
                    _ => pair[0].power_w.unwrap_or(0.0) * dt,
                };
            }
            (joules, smact_seconds)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn energy_prefers_the_counter_and_falls_back_to_power() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(GPU_SAMPLES);
        fs::write(
            &path,
            format!(
                "{GPU_SAMPLES_HEADER}\n\
                 0,0,100,0.5,200,1000\n0,1,0,0.0,50,\n\
                 10,0,100,0.5,200,3100\n10,1,0,0.0,50,\n\
                 20,0,100,1.0,400,5000\n20,1,0,0.0,50,\n\
                 99,0,100,1.0,400,9999\n"
            ),
        )
        .unwrap();
        let gpus = gpu_integrals(&path, 0.0, 20.0);
        // GPU 0: counter 5000 - 1000; SMACT 0.5 x 20 s. GPU 1: 50 W x 20 s.
        assert_eq!(gpus, [(4000.0, 10.0), (1000.0, 0.0)]);
        assert!(gpu_integrals(&dir.path().join("missing"), 0.0, 1.0).is_empty());
    }

    #[test]
    fn a_reset_energy_counter_never_subtracts() {
        // The daemon restarts at 15 s: the counter starts again from 0.
        // 0-10 s and 20-30 s come from the counter, 10-20 s from power.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(GPU_SAMPLES);
        fs::write(
            &path,
            format!(
                "{GPU_SAMPLES_HEADER}\n\
                 0,0,0,0.0,100,5000\n\
                 10,0,0,0.0,100,6000\n\
                 20,0,0,0.0,100,300\n\
                 30,0,0,0.0,100,1300\n"
            ),
        )
        .unwrap();
        assert_eq!(gpu_integrals(&path, 0.0, 30.0), [(3000.0, 0.0)]);
    }
}
