//! Real GPUs through NVML (`nvml-wrapper`): the daemon's GPU backend on a
//! server.
//!
//! The library is loaded at run time, from the path the configuration
//! names or the driver's own `libnvidia-ml.so.1`, so one carma binary runs
//! with any driver, and on machines without one (where the daemon then
//! asks for `--simulate-gpus`).
//!
//! Each reading holds, per GPU: memory in use (total minus free), SM
//! activity, occupancy and DRAM activity ([`activity`]: DCGM, GPM or the
//! utilization counter, as `[gpu] metrics` allows), power, the
//! total-energy counter, temperature, SM clock, and the memory of each compute process and MPS
//! client, which the daemon attributes to jobs by session. Errors are
//! sorted by consequence ([`failure`]): what a GPU cannot measure is left
//! out and said once; a GPU whose calls fail is reported in its reading,
//! skipped by placement, and read again every interval until it answers.
//! Nothing here panics or stops the monitor.
//!
//! NVML stays loaded for the life of the process: the backend leaks its
//! handle, so the device handles and the previous GPM sample, which borrow
//! it, live in the backend between readings. The daemon makes one backend
//! and keeps it to the end; the driver releases everything at exit.

mod activity;
mod failure;
mod values;

use std::path::Path;
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};
use thiserror::Error;

use super::dcgm::Dmon;
use super::{GpuBackend, GpuConfig, GpuInfo, GpuReading, MetricsSetting};
use activity::ActivityReader;
use failure::{Failure, Quantity, Said, classify, optional, required};
use values::Raw;

/// `nvmlDeviceGetMigMode`'s value for "enabled".
const MIG_ENABLED: u32 = 1;

/// NVML could not be started; the daemon cannot run on real GPUs.
#[derive(Debug, Error)]
pub enum OpenError {
    #[error("cannot load NVML from {library}: {source}")]
    Load { library: String, source: NvmlError },
    #[error("NVML from {library} cannot count the GPUs: {source}")]
    Count { library: String, source: NvmlError },
    #[error("NVML from {library} finds no GPUs")]
    NoGpus { library: String },
}

/// The GPUs of this server, as NVML shows them.
pub struct NvmlGpus {
    /// The library's path as given, or the loader's default name.
    library: String,
    driver: String,
    inventory: Vec<GpuInfo>,
    /// Per GPU, in index order.
    gpus: Vec<Gpu>,
    said: Said,
    /// `[gpu] metrics`.
    metrics: MetricsSetting,
    /// DCGM's profiling fields, when the setting allows them.
    dcgm: Option<Dmon>,
}

/// One GPU's handle and what its readings carry over.
struct Gpu {
    /// `None` when the GPU could not be read at start: its size is unknown
    /// to the core, so it stays out until the daemon restarts.
    device: Option<(Device<'static>, ActivityReader)>,
    /// The last good reading: returned, marked with the error, while the
    /// GPU cannot be read.
    last: Option<GpuReading>,
}

impl NvmlGpus {
    /// Loads NVML from `library` (the dynamic loader's `libnvidia-ml.so.1`
    /// when `None`), takes stock of the GPUs, and starts `dcgmi dmon`
    /// reading every `interval` when `config` allows DCGM.
    ///
    /// A GPU that cannot be read now keeps its index (jobs name GPUs by
    /// NVML index) but is never placed on; the log says so.
    pub fn open(
        library: Option<&Path>,
        config: &GpuConfig,
        interval: Duration,
    ) -> Result<NvmlGpus, OpenError> {
        let name = library.map_or_else(
            || "libnvidia-ml.so.1".to_owned(),
            |p| p.display().to_string(),
        );
        let mut builder = Nvml::builder();
        if let Some(path) = library {
            builder.lib_path(path.as_os_str());
        }
        let nvml = builder.init().map_err(|source| OpenError::Load {
            library: name.clone(),
            source,
        })?;
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let count = nvml.device_count().map_err(|source| OpenError::Count {
            library: name.clone(),
            source,
        })?;
        if count == 0 {
            return Err(OpenError::NoGpus { library: name });
        }
        let driver = nvml
            .sys_driver_version()
            .unwrap_or_else(|e| format!("unknown ({e})"));
        let mut inventory = Vec::new();
        let mut gpus = Vec::new();
        for index in 0..count as usize {
            let (info, device) = match identify(nvml, index) {
                Ok((info, device)) => {
                    let reader = ActivityReader::start(&device, config.metrics);
                    (info, Some((device, reader)))
                }
                Err(why) => {
                    log::error!("GPU {index}: {why}; not used until the daemon restarts");
                    let info = GpuInfo {
                        index,
                        uuid: "unknown".into(),
                        name: "unreadable GPU".into(),
                        total_mib: 0,
                        mig: false,
                    };
                    (info, None)
                }
            };
            inventory.push(info);
            gpus.push(Gpu { device, last: None });
        }
        Ok(NvmlGpus {
            library: name,
            driver,
            inventory,
            gpus,
            said: Said::default(),
            metrics: config.metrics,
            dcgm: config
                .metrics
                .uses_dcgm()
                .then(|| Dmon::start(&config.dcgmi, interval)),
        })
    }

    /// Reads GPU `index` now, with DCGM's `dcgm` values for it if fresh.
    fn read(
        &mut self,
        index: usize,
        dcgm: Option<super::dcgm::Fields>,
    ) -> Result<GpuReading, String> {
        let said = &mut self.said;
        let Some((device, activity)) = &mut self.gpus[index].device else {
            return Err(
                "could not be read when the daemon started; restart it to use this GPU".into(),
            );
        };
        let memory = required(Quantity::Memory, device.memory_info())?;
        let activity = activity.read(index, device, dcgm, said)?;
        let power_mw = optional(said, index, Quantity::Power, device.power_usage())?;
        let energy_mj = optional(
            said,
            index,
            Quantity::Energy,
            device.total_energy_consumption(),
        )?;
        let temperature_c = optional(
            said,
            index,
            Quantity::Temperature,
            device.temperature(TemperatureSensor::Gpu),
        )?;
        let sm_clock_mhz = optional(said, index, Quantity::SmClock, device.clock_info(Clock::SM))?;
        let compute = optional(
            said,
            index,
            Quantity::Processes,
            device.running_compute_processes(),
        )?;
        let mps = optional(
            said,
            index,
            Quantity::MpsProcesses,
            device.mps_running_compute_processes(),
        )?;
        let processes = compute
            .into_iter()
            .chain(mps)
            .flatten()
            .map(|p: ProcessInfo| {
                let bytes = match p.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                };
                (p.pid, bytes)
            })
            .collect();
        Ok(values::reading(
            index,
            &Raw {
                total_bytes: memory.total,
                free_bytes: memory.free,
                activity,
                power_mw,
                energy_mj,
                temperature_c,
                sm_clock_mhz,
                processes,
            },
        ))
    }

    /// The last good reading of GPU `index` (zero before the first),
    /// marked with `error`.
    fn failed(&self, index: usize, error: String) -> GpuReading {
        let mut reading = self.gpus[index]
            .last
            .clone()
            .unwrap_or_else(|| GpuReading::unknown(index));
        reading.error = Some(error);
        reading
    }
}

/// GPU `index`'s identity and handle; the reason when it cannot be read.
fn identify(nvml: &'static Nvml, index: usize) -> Result<(GpuInfo, Device<'static>), String> {
    let index_u32 = u32::try_from(index).map_err(|e| e.to_string())?;
    let device = nvml
        .device_by_index(index_u32)
        .map_err(|e| format!("NVML cannot open it: {e}"))?;
    let uuid = device
        .uuid()
        .map_err(|e| format!("NVML cannot read its UUID: {e}"))?;
    let name = device
        .name()
        .map_err(|e| format!("NVML cannot read its name: {e}"))?;
    let memory = required(Quantity::Memory, device.memory_info())?;
    let mig = match device.mig_mode() {
        Ok(mode) => mode.current == MIG_ENABLED,
        Err(e) => match classify(Quantity::MigMode, &e) {
            // GPUs before Ampere have no MIG.
            Failure::Unavailable => false,
            // Unsure: a whole GPU is the safe way to use it.
            Failure::Broken(why) => {
                log::warn!("GPU {index}: {why}; it is used only whole");
                true
            }
        },
    };
    let info = GpuInfo {
        index,
        uuid,
        name,
        total_mib: values::mib_down(memory.total),
        mig,
    };
    Ok((info, device))
}

impl GpuBackend for NvmlGpus {
    fn inventory(&self) -> &[GpuInfo] {
        &self.inventory
    }

    fn sample(&mut self) -> Vec<GpuReading> {
        let dcgm = self
            .dcgm
            .as_ref()
            .map(|dmon| dmon.fresh(Instant::now()))
            .unwrap_or_default();
        (0..self.gpus.len())
            .map(|index| match self.read(index, dcgm.get(&index).copied()) {
                Ok(reading) => {
                    self.gpus[index].last = Some(reading.clone());
                    reading
                }
                Err(why) => self.failed(index, why),
            })
            .collect()
    }

    /// Nothing: NVML needs no help from jobs, and the daemon already sets
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` so CUDA numbers GPUs as NVML does.
    fn job_env(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Driver, library, and the metric sources allowed (each GPU's own is
    /// in its readings).
    fn describe(&self) -> String {
        let dcgm = match &self.dcgm {
            Some(dmon) => format!(
                "; DCGM values older than {:.1} s are not used",
                dmon.fresh_for().as_secs_f64()
            ),
            None => String::new(),
        };
        format!(
            "NVML {} ({}): {} GPU(s); SM metrics from {}{dcgm}",
            self.driver,
            self.library,
            self.gpus.len(),
            self.metrics.describe()
        )
    }
}
