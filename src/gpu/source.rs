//! Where a GPU's SM activity, occupancy and DRAM activity come from, and
//! which sources the operator allows (`[gpu] metrics`).
//!
//! The sources differ in what they mean, not only in how they are read:
//! DCGM's profiling fields and GPM count SM cycles with work (and resident
//! warps, and busy DRAM cycles), while NVML's utilization counter is the
//! fraction of time any kernel ran, so one busy SM reads as a busy GPU.
//! The placement cap was set with SM activity in mind; `carma status`
//! shows each GPU's source so an operator knows which one the cap sees.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The source of one reading's SM metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricSource {
    /// DCGM profiling fields 1002 (SM active), 1003 (SM occupancy) and
    /// 1005 (DRAM active), through `dcgmi dmon`.
    Dcgm,
    /// NVML GPM metrics (Hopper and newer): SM utilization, SM occupancy,
    /// DRAM bandwidth utilization.
    Gpm,
    /// NVML's utilization counter; no occupancy or DRAM activity.
    Utilization,
    /// The simulated GPUs' own model.
    Simulated,
    /// Not measured: a MIG instance. NVML's utilization counter does not
    /// answer on MIG instances and DCGM numbers them apart from NVML, so
    /// its SM activity reads 0 and the SM-activity cap never refuses it;
    /// MIG isolates its instances' SMs from each other anyway.
    Unmeasured,
}

impl MetricSource {
    /// Its name in `status.json` and the GPU log (as serde writes it).
    pub fn key(self) -> &'static str {
        match self {
            MetricSource::Dcgm => "dcgm",
            MetricSource::Gpm => "gpm",
            MetricSource::Utilization => "utilization",
            MetricSource::Simulated => "simulated",
            MetricSource::Unmeasured => "unmeasured",
        }
    }
}

impl fmt::Display for MetricSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MetricSource::Dcgm => "DCGM",
            MetricSource::Gpm => "GPM",
            MetricSource::Utilization => "utilization counter",
            MetricSource::Simulated => "simulated",
            MetricSource::Unmeasured => "not measured (MIG)",
        })
    }
}

/// `[gpu] metrics`: the sources the NVML backend may use, best first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricsSetting {
    /// DCGM while it answers for the GPU, else GPM where the GPU has it,
    /// else the utilization counter.
    #[default]
    Auto,
    /// DCGM only (GPM is never sampled); the utilization counter fills
    /// in while DCGM has no fresh value.
    Dcgm,
    /// GPM where the GPU has it, else the counter; DCGM is not started.
    Gpm,
    /// The utilization counter only.
    Utilization,
}

impl MetricsSetting {
    /// Whether `dcgmi dmon` is started.
    pub fn uses_dcgm(self) -> bool {
        matches!(self, MetricsSetting::Auto | MetricsSetting::Dcgm)
    }

    /// Whether GPM is sampled on GPUs that support it.
    pub fn uses_gpm(self) -> bool {
        matches!(self, MetricsSetting::Auto | MetricsSetting::Gpm)
    }

    /// The chain in words, for the log and `carma status`.
    pub fn describe(self) -> &'static str {
        match self {
            MetricsSetting::Auto => "DCGM, else GPM, else the utilization counter",
            MetricsSetting::Dcgm => "DCGM, else the utilization counter",
            MetricsSetting::Gpm => "GPM, else the utilization counter",
            MetricsSetting::Utilization => "the utilization counter",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_serde_names() {
        for source in [
            MetricSource::Dcgm,
            MetricSource::Gpm,
            MetricSource::Utilization,
            MetricSource::Simulated,
        ] {
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                serde_json::Value::from(source.key())
            );
        }
    }
}
