//! GPUs as the daemon sees them: an inventory and periodic readings, from
//! NVML on a real server or from the simulated backend elsewhere.
//!
//! The scheduling core never sees this module's types: the daemon turns
//! readings into [`crate::sched::GpuSample`]s, attributing per-process
//! memory to tasks on the way. Backends own their edge types (NVML handles,
//! the simulator's state file) and report failures per GPU, so one broken
//! GPU never stops the monitor.

mod config;
pub mod dcgm;
pub mod log;
pub mod mig;
pub mod nvml;
pub mod power;
pub mod sim;
mod source;

use std::fmt;

pub use config::GpuConfig;
pub use source::{MetricSource, MetricsSetting};

/// What carma places tasks on, read once at start: a whole GPU, or one
/// MIG instance of a GPU the operator has partitioned (the partitioned GPU
/// itself is never placed on: a job that sees it without an instance finds
/// no usable device).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    /// Index in carma's enumeration ([`mig::units`]); what the scheduling
    /// core, `CARMA_GPUS` and `carma status` number. Not NVML's index as
    /// soon as a partitioned GPU is present.
    pub index: usize,
    /// Stable identity (NVML UUID, `MIG-...` for an instance; `SIM-<n>`
    /// and `MIG-SIM-<n>-<i>` for simulated ones).
    pub uuid: String,
    /// Marketing name, for people; an instance's says its parent and
    /// profile.
    pub name: String,
    /// Memory, MiB.
    pub total_mib: u64,
    /// How `CUDA_VISIBLE_DEVICES` names it: a whole GPU by its NVML index
    /// (the daemon sets `CUDA_DEVICE_ORDER=PCI_BUS_ID`, so CUDA numbers as
    /// NVML does), an instance by its UUID, the only way CUDA accepts.
    pub device: String,
    /// Set for a MIG instance.
    pub mig: Option<MigInstance>,
}

/// Where a MIG instance lives.
#[derive(Debug, Clone, PartialEq)]
pub struct MigInstance {
    /// The partitioned GPU's NVML index.
    pub parent: usize,
    /// The instance's profile, e.g. `3g.20gb`, where known.
    pub profile: String,
}

/// One process's GPU memory, for attributing usage to tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    pub pid: u32,
    pub used_mib: u64,
}

/// One GPU's state at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    pub index: usize,
    /// Memory in use by all processes, MiB.
    pub used_mib: u64,
    /// Memory, MiB (as the inventory says, unless the driver changed its
    /// mind); 0 before the first good reading.
    pub total_mib: u64,
    /// SM activity since the previous reading, 0..1.
    pub smact: f64,
    /// SM occupancy (resident warps over the maximum), 0..1, where the
    /// metric source measures it (DCGM field 1003, GPM).
    pub occupancy: Option<f64>,
    /// DRAM activity (fraction of cycles the memory interface is busy),
    /// 0..1, where the metric source measures it (DCGM field 1005, GPM).
    pub dram: Option<f64>,
    /// Board power, watts, where known.
    pub power_w: Option<f64>,
    /// Energy counter since an arbitrary origin, joules, where known; the
    /// report takes differences.
    pub energy_j: Option<f64>,
    /// GPU core temperature, °C, where known.
    pub temperature_c: Option<u32>,
    /// SM clock, MHz, where known: a GPU that throttles (power, heat) shows
    /// it here first.
    pub sm_clock_mhz: Option<u32>,
    /// Per-process memory, where the backend can tell.
    pub processes: Vec<ProcessMemory>,
    /// Where `smact`, `occupancy` and `dram` came from; `None` before the
    /// GPU's first good reading.
    pub source: Option<MetricSource>,
    /// Set when this GPU could not be read; the other fields are then the
    /// last known values or zero and the GPU is skipped by placement.
    pub error: Option<String>,
}

impl GpuReading {
    /// GPU `index` with nothing known about it yet: what a GPU that failed
    /// before its first good reading reports (with `error` set).
    pub fn unknown(index: usize) -> GpuReading {
        GpuReading {
            index,
            used_mib: 0,
            total_mib: 0,
            smact: 0.0,
            occupancy: None,
            dram: None,
            power_w: None,
            energy_j: None,
            temperature_c: None,
            sm_clock_mhz: None,
            processes: Vec::new(),
            source: None,
            error: None,
        }
    }
}

/// A source of GPU readings.
pub trait GpuBackend: Send {
    /// The GPUs, in index order.
    fn inventory(&self) -> &[GpuInfo];
    /// Reads every GPU now.
    fn sample(&mut self) -> Vec<GpuReading>;
    /// Environment a job on `gpus` needs beyond `CUDA_VISIBLE_DEVICES` (e.g.
    /// where the simulated GPUs keep their state).
    fn job_env(&self) -> Vec<(String, String)>;
    /// A short description for logs and `carma status`.
    fn describe(&self) -> String;
    /// The GPUs exist only in carma's imagination: nothing of the
    /// machine's (MPS, compute modes) may be set up for them.
    fn simulated(&self) -> bool {
        false
    }
}

impl fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GPU {} {} ({}, {})",
            self.index,
            self.name,
            crate::size::format_mib(self.total_mib),
            self.uuid
        )?;
        if self.mig.is_some() {
            f.write_str(", MIG instance: single-GPU tasks only, SM activity not measured")?;
        }
        Ok(())
    }
}
