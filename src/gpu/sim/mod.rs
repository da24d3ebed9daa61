//! Simulated GPUs: the daemon's GPU backend on machines without GPUs.
//!
//! Only NVML is replaced: jobs are real processes (`carma fake-train`), and
//! what they "allocate" is recorded in a state file in the spool
//! ([`state`]). The backend reads that file each sample, like NVML reads the
//! driver. A fake job claims memory under the file's lock and dies with
//! PyTorch's OOM message when the memory is not there ([`fake_train`]), so
//! the daemon meets the same situations as on a real server: collocated
//! jobs, OOM crashes, processes killed with their memory still counted until
//! the next sample notices they are gone.
//!
//! Partitioned GPUs ([`spec`]) are numbered by the same code as NVML's
//! ([`crate::gpu::mig`]): their instances get `MIG-SIM-<gpu>-<i>` UUIDs,
//! which fake jobs find in `CUDA_VISIBLE_DEVICES`, and they are read as
//! NVML reads instances: memory and processes, SM activity not measured,
//! no board power.
//!
//! The state lives in the spool so that it outlives the daemon: a restarted
//! daemon finds the claims of the fake jobs that kept running.

pub mod fake_train;
mod oom;
pub mod spec;
pub mod state;

use std::path::{Path, PathBuf};
use std::time::Instant;

use thiserror::Error;

use super::mig::{self, Found, Instance, Partition};
use super::power::PowerCurve;
use super::{GpuBackend, GpuInfo, GpuReading, MetricSource, ProcessMemory};
use spec::Declared;
use state::{State, StateDir};

/// The variable that tells a fake job where the simulated GPUs keep their
/// state (an absolute directory).
pub const STATE_DIR_VAR: &str = "CARMA_SIMGPU";

/// Name of the state directory inside the spool.
const STATE_DIR: &str = "simgpu";

/// Something the simulation could not do.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no simulated GPUs in {dir} (is `carma daemon --simulate-gpus` running on it?)")]
    Missing { dir: PathBuf },
    #[error("{path}: not a simulated-GPU state: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("{path}: locked by another process for too long")]
    Busy { path: PathBuf },
    #[error("simulated GPUs: {0}")]
    Invalid(String),
}

/// The simulated GPUs of one spool.
pub struct SimGpus {
    /// Where the state lives; jobs find it through [`STATE_DIR_VAR`].
    state: StateDir,
    inventory: Vec<GpuInfo>,
    power: PowerCurve,
    /// The last good readings and when they were taken: returned, marked
    /// with the error, while the state cannot be read, and the start of the
    /// next energy integration.
    last: Option<(Instant, Vec<GpuReading>)>,
}

impl SimGpus {
    /// Opens the simulated GPUs `declared` of the spool at `spool`, drawing
    /// the watts `power` gives for their SM activity.
    ///
    /// An existing state with the same units is kept, with its claims: the
    /// daemon restarts while fake jobs run. A state with other units, or
    /// one that cannot be read, is replaced (and the log says so): its
    /// claims would not fit the new GPUs.
    pub fn open(
        spool: &Path,
        declared: &[Declared],
        power: PowerCurve,
    ) -> Result<SimGpus, SimError> {
        if declared.is_empty() || declared.iter().any(|gpu| gpu.total_mib == 0) {
            return Err(SimError::Invalid(format!(
                "every GPU needs memory, got {declared:?}"
            )));
        }
        power.validate().map_err(SimError::Invalid)?;
        let inventory: Vec<GpuInfo> = mig::units(found(declared))
            .into_iter()
            .map(|(info, ())| info)
            .collect();
        if inventory.is_empty() {
            return Err(SimError::Invalid(
                "no GPU or MIG instance to place jobs on".into(),
            ));
        }
        let fresh = State::new(&inventory);
        let state = StateDir::create(&spool.join(STATE_DIR))?;
        {
            let locked = state.lock()?;
            match locked.read() {
                Ok(old) if old.layout() == fresh.layout() => {
                    let claims: usize = old.gpus.iter().map(|gpu| gpu.claims.len()).sum();
                    log::info!(
                        "simulated GPUs: keeping {} with {claims} claim(s)",
                        state.path().display()
                    );
                }
                Ok(old) => {
                    log::warn!(
                        "simulated GPUs: replacing {}: it has GPUs {:?} (name, MiB), asked for {:?}",
                        state.path().display(),
                        old.layout(),
                        fresh.layout()
                    );
                    locked.write(&fresh)?;
                }
                Err(SimError::Missing { .. }) => locked.write(&fresh)?,
                Err(e) => {
                    log::warn!("simulated GPUs: replacing unreadable state: {e}");
                    locked.write(&fresh)?;
                }
            }
        }
        Ok(SimGpus {
            state,
            inventory,
            power,
            last: None,
        })
    }

    /// Reads every GPU as of `now`; [`GpuBackend::sample`] with the clock
    /// injected, so tests can integrate energy over known intervals.
    fn sample_at(&mut self, now: Instant) -> Vec<GpuReading> {
        let state = match self.read_state() {
            Ok(state) => state,
            Err(e) => return self.failed(&e.to_string()),
        };
        let readings: Vec<GpuReading> = state
            .gpus
            .iter()
            .enumerate()
            .map(|(index, gpu)| {
                let processes = gpu
                    .claims
                    .iter()
                    .map(|claim| ProcessMemory {
                        pid: claim.process.pid,
                        used_mib: claim.mib,
                    })
                    .collect();
                if self.inventory[index].mig.is_some() {
                    // As NVML reads an instance: memory and processes only.
                    return GpuReading {
                        used_mib: gpu.used_mib(),
                        total_mib: gpu.total_mib,
                        processes,
                        source: Some(MetricSource::Unmeasured),
                        ..GpuReading::unknown(index)
                    };
                }
                let smact = gpu.smact();
                let power_w = self.power.watts(smact);
                // NVML's counter integrates power continuously; between two
                // samples we know only the ends, so take the mean of both.
                let energy_j = match &self.last {
                    Some((then, last)) => {
                        let secs = now.saturating_duration_since(*then).as_secs_f64();
                        let before = &last[index];
                        before.energy_j.unwrap_or(0.0)
                            + secs * (before.power_w.unwrap_or(power_w) + power_w) / 2.0
                    }
                    None => 0.0,
                };
                GpuReading {
                    index,
                    used_mib: gpu.used_mib(),
                    total_mib: gpu.total_mib,
                    smact,
                    occupancy: Some(gpu.occupancy()),
                    dram: Some(gpu.dram()),
                    power_w: Some(power_w),
                    energy_j: Some(energy_j),
                    temperature_c: Some(gpu.temperature_c()),
                    sm_clock_mhz: Some(gpu.sm_clock_mhz()),
                    processes,
                    source: Some(MetricSource::Simulated),
                    error: None,
                }
            })
            .collect();
        self.last = Some((now, readings.clone()));
        readings
    }

    /// The state with the claims of dead processes dropped (and written
    /// back, so fake jobs do not count them either).
    fn read_state(&self) -> Result<State, SimError> {
        let locked = self.state.lock()?;
        let mut state = locked.read()?;
        let expected: Vec<(&str, u64)> = self
            .inventory
            .iter()
            .map(|gpu| (gpu.device.as_str(), gpu.total_mib))
            .collect();
        if state.layout() != expected {
            return Err(SimError::Invalid(format!(
                "{} now has GPUs {:?} (name, MiB), this backend {expected:?} (another daemon \
                 on this spool?)",
                self.state.path().display(),
                state.layout(),
            )));
        }
        if state.prune() {
            locked.write(&state)?;
        }
        Ok(state)
    }

    /// The last good readings (zero before the first) marked with `error`.
    /// Their time is left alone, so the next good reading integrates energy
    /// across the gap.
    fn failed(&self, error: &str) -> Vec<GpuReading> {
        let mut readings = match &self.last {
            Some((_, last)) => last.clone(),
            None => (0..self.inventory.len()).map(GpuReading::unknown).collect(),
        };
        for reading in &mut readings {
            reading.error = Some(error.to_owned());
        }
        readings
    }
}

/// The simulated GPUs as a backend finds them: `SIM-<n>` for GPU `n`,
/// `MIG-SIM-<n>-<i>` for its instance `i`.
fn found(declared: &[Declared]) -> Vec<Found<()>> {
    declared
        .iter()
        .enumerate()
        .map(|(n, gpu)| Found {
            uuid: format!("SIM-{n}"),
            name: "Simulated GPU".into(),
            total_mib: gpu.total_mib,
            partition: match &gpu.mig {
                None => Partition::Whole(()),
                Some(profiles) => Partition::Mig(
                    profiles
                        .iter()
                        .enumerate()
                        .map(|(i, profile)| Instance {
                            uuid: format!("MIG-SIM-{n}-{i}"),
                            profile: profile.name.clone(),
                            total_mib: profile.total_mib,
                            handle: (),
                        })
                        .collect(),
                ),
            },
        })
        .collect()
}

impl GpuBackend for SimGpus {
    fn inventory(&self) -> &[GpuInfo] {
        &self.inventory
    }

    fn sample(&mut self) -> Vec<GpuReading> {
        self.sample_at(Instant::now())
    }

    fn job_env(&self) -> Vec<(String, String)> {
        vec![(
            STATE_DIR_VAR.to_owned(),
            self.state.path().display().to_string(),
        )]
    }

    fn simulated(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        let sizes: Vec<String> = self
            .inventory
            .iter()
            .map(|gpu| crate::size::format_mib(gpu.total_mib))
            .collect();
        format!(
            "{} simulated GPU(s) ({}) in {}",
            self.inventory.len(),
            sizes.join(", "),
            self.state.path().display()
        )
    }
}

#[cfg(test)]
mod tests;
