//! NVML's raw values in carma's units, with no library in sight: bytes to
//! MiB, milliwatts and millijoules to watts and joules, two process lists
//! to one.

use super::activity::Activity;
use crate::gpu::{GpuReading, ProcessMemory};

const MIB: u64 = 1024 * 1024;

/// One GPU's values as NVML gives them.
#[derive(Debug, Clone, PartialEq)]
pub struct Raw {
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// SM metrics, from the GPU's best source.
    pub activity: Activity,
    pub power_mw: Option<u32>,
    /// The total-energy counter, millijoules since the driver loaded.
    pub energy_mj: Option<u64>,
    pub temperature_c: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    /// Compute processes and MPS clients: pid and used bytes where known.
    pub processes: Vec<(u32, Option<u64>)>,
}

/// Memory size in whole MiB, rounded down: a GPU's capacity.
pub fn mib_down(bytes: u64) -> u64 {
    bytes / MIB
}

/// Memory in use in whole MiB, rounded up: placement never counts on a
/// fraction of a MiB that is not there.
pub fn mib_up(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

/// The profile in a MIG instance's NVML name (`NVIDIA A100-SXM4-40GB MIG
/// 3g.20gb` on GPU `NVIDIA A100-SXM4-40GB`): what follows the last `MIG `,
/// else the name without its GPU's, else `unknown profile`.
pub fn mig_profile(instance_name: &str, parent_name: &str) -> String {
    let profile = match instance_name.rsplit_once("MIG ") {
        Some((_, profile)) => profile,
        None => instance_name
            .strip_prefix(parent_name)
            .unwrap_or(instance_name),
    };
    match profile.trim() {
        "" => "unknown profile".to_owned(),
        profile => profile.to_owned(),
    }
}

/// The reading of GPU `index`.
///
/// Used memory is total minus free, so memory the driver reserves counts
/// as used and the core's free memory is exactly NVML's. A process listed
/// twice (a compute process that is also an MPS client) counts once, with
/// its larger figure; one whose memory NVML cannot tell (no permission,
/// some virtualised setups) is left out rather than counted as zero.
pub fn reading(index: usize, raw: &Raw) -> GpuReading {
    let mut processes: Vec<ProcessMemory> = Vec::new();
    let mut known: Vec<(u32, u64)> = raw
        .processes
        .iter()
        .filter_map(|&(pid, bytes)| Some((pid, mib_up(bytes?))))
        .collect();
    known.sort_unstable();
    for (pid, used_mib) in known {
        match processes.last_mut() {
            Some(last) if last.pid == pid => last.used_mib = last.used_mib.max(used_mib),
            _ => processes.push(ProcessMemory { pid, used_mib }),
        }
    }
    GpuReading {
        index,
        used_mib: mib_up(raw.total_bytes.saturating_sub(raw.free_bytes)),
        total_mib: mib_down(raw.total_bytes),
        smact: raw.activity.smact,
        occupancy: raw.activity.occupancy,
        dram: raw.activity.dram,
        source: Some(raw.activity.source),
        power_w: raw.power_mw.map(|mw| f64::from(mw) / 1000.0),
        energy_j: raw.energy_mj.map(|mj| mj as f64 / 1000.0),
        temperature_c: raw.temperature_c,
        sm_clock_mhz: raw.sm_clock_mhz,
        processes,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::MetricSource;

    #[test]
    fn a_mig_profile_is_read_from_the_instance_name() {
        let gpu = "NVIDIA A100-SXM4-40GB";
        assert_eq!(
            mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb", gpu),
            "3g.20gb"
        );
        assert_eq!(mig_profile("NVIDIA A100-SXM4-40GB 1g.5gb", gpu), "1g.5gb");
        assert_eq!(mig_profile("", gpu), "unknown profile");
    }

    #[test]
    fn memory_rounds_capacity_down_and_use_up() {
        assert_eq!(mib_down(40 * 1024 * MIB + 5), 40 * 1024);
        assert_eq!(mib_up(MIB), 1);
        assert_eq!(mib_up(MIB + 1), 2);
        assert_eq!(mib_up(0), 0);
    }

    /// A GPU with nothing known but its counter's 0%.
    fn idle() -> Raw {
        Raw {
            total_bytes: 0,
            free_bytes: 0,
            activity: Activity {
                smact: 0.0,
                occupancy: None,
                dram: None,
                source: MetricSource::Utilization,
            },
            power_mw: None,
            energy_mj: None,
            temperature_c: None,
            sm_clock_mhz: None,
            processes: Vec::new(),
        }
    }

    #[test]
    fn a_reading_in_carma_units() {
        let raw = Raw {
            total_bytes: 40 * 1024 * MIB,
            free_bytes: 30 * 1024 * MIB,
            activity: Activity {
                smact: 0.55,
                occupancy: Some(0.25),
                dram: None,
                source: MetricSource::Dcgm,
            },
            power_mw: Some(123_500),
            energy_mj: Some(9_876_543),
            temperature_c: Some(61),
            sm_clock_mhz: Some(1410),
            processes: vec![(300, Some(512 * MIB)), (100, None), (200, Some(10))],
        };
        let reading = reading(3, &raw);
        assert_eq!(reading.index, 3);
        assert_eq!(reading.used_mib, 10 * 1024);
        assert_eq!(reading.total_mib, 40 * 1024);
        assert_eq!(
            (reading.temperature_c, reading.sm_clock_mhz),
            (Some(61), Some(1410))
        );
        assert_eq!(reading.smact, 0.55);
        assert_eq!((reading.occupancy, reading.dram), (Some(0.25), None));
        assert_eq!(reading.source, Some(MetricSource::Dcgm));
        assert_eq!(reading.power_w, Some(123.5));
        assert_eq!(reading.energy_j, Some(9876.543));
        assert_eq!(
            reading.processes,
            [
                ProcessMemory {
                    pid: 200,
                    used_mib: 1
                },
                ProcessMemory {
                    pid: 300,
                    used_mib: 512
                },
            ]
        );
        assert_eq!(reading.error, None);
    }

    #[test]
    fn a_process_in_both_lists_counts_once_with_its_larger_figure() {
        let raw = Raw {
            processes: vec![(7, Some(100 * MIB)), (7, Some(300 * MIB))],
            ..idle()
        };
        assert_eq!(
            reading(0, &raw).processes,
            [ProcessMemory {
                pid: 7,
                used_mib: 300
            }]
        );
    }

    #[test]
    fn absent_power_and_energy_stay_absent() {
        let reading = reading(0, &idle());
        assert_eq!((reading.power_w, reading.energy_j), (None, None));
        assert_eq!(reading.used_mib, 0);
    }
}
