//! Real GPUs through NVML (`nvml-wrapper`): the daemon's GPU backend on a
//! server.
//!
//! The library is loaded at run time, from the path the configuration
//! names or the driver's own `libnvidia-ml.so.1`, so one carma binary runs
//! with any driver, and on machines without one (where the daemon then
//! asks for `--simulate-gpus`).
//!
//! Each reading holds, per GPU: memory in use (total minus free), SM
//! activity, occupancy and DRAM activity (`activity`: DCGM, GPM or the
//! utilization counter, as `[gpu] metrics` allows), power, the
//! total-energy counter, temperature, SM clock, and the memory of each compute process and MPS
//! client, which the daemon attributes to jobs by session. Errors are
//! sorted by consequence (`failure`): what a GPU cannot measure is left
//! out and said once; a GPU whose calls fail is reported in its reading,
//! skipped by placement, and read again every interval until it answers.
//! Nothing here panics or stops the monitor.
//!
//! A GPU the operator has partitioned is read through its MIG instances
//! ([`crate::gpu::mig`]): each instance's own memory and compute processes
//! (NVML answers both on a MIG device handle). Its SM activity is not
//! measured ([`crate::gpu::MetricSource::Unmeasured`]), and power, energy, temperature
//! and clock, which belong to the whole board, are not read for instances.
//! Instances are found once, at start: the operator repartitions a GPU
//! with no jobs on it and restarts carma.
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
use super::mig::{self, Found, Instance, Partition};
use super::{GpuBackend, GpuConfig, GpuInfo, GpuReading, MetricsSetting};
use activity::{Activity, ActivityReader};
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

/// One unit's handle and what its readings carry over.
struct Gpu {
    /// NVML's index of the GPU (of the partitioned GPU, for an instance);
    /// DCGM numbers GPUs the same way.
    nvml_index: usize,
    /// `None` when the GPU could not be read at start: its size is unknown
    /// to the core, so it stays out until the daemon restarts.
    device: Option<(Device<'static>, Kind)>,
    /// The last good reading: returned, marked with the error, while the
    /// GPU cannot be read.
    last: Option<GpuReading>,
}

/// What a unit is, which decides what is read from it.
enum Kind {
    /// A whole GPU, with its SM-metric reader.
    Board(ActivityReader),
    /// A MIG instance: memory and processes only.
    Instance,
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
        let found = (0..count as usize)
            .map(|index| {
                identify(nvml, index).unwrap_or_else(|why| {
                    log::error!("GPU {index}: {why}; not used until the daemon restarts");
                    Found {
                        uuid: "unknown".into(),
                        name: "unreadable GPU".into(),
                        total_mib: 0,
                        partition: Partition::Whole((index, None)),
                    }
                })
            })
            .collect();
        let mut inventory = Vec::new();
        let mut gpus = Vec::new();
        for (info, (nvml_index, device)) in mig::units(found) {
            let device = device.map(|device| {
                let kind = match info.mig {
                    Some(_) => Kind::Instance,
                    None => Kind::Board(ActivityReader::start(&device, config.metrics)),
                };
                (device, kind)
            });
            inventory.push(info);
            gpus.push(Gpu {
                nvml_index,
                device,
                last: None,
            });
        }
        if inventory.is_empty() {
            return Err(OpenError::NoGpus { library: name });
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
        let Some((device, kind)) = &mut self.gpus[index].device else {
            return Err(
                "could not be read when the daemon started; restart it to use this GPU".into(),
            );
        };
        let memory = required(Quantity::Memory, device.memory_info())?;
        let (activity, board) = match kind {
            Kind::Board(activity) => (
                activity.read(index, device, dcgm, said)?,
                read_board(said, index, device)?,
            ),
            Kind::Instance => (Activity::unmeasured(), Board::default()),
        };
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
                power_mw: board.power_mw,
                energy_mj: board.energy_mj,
                temperature_c: board.temperature_c,
                sm_clock_mhz: board.sm_clock_mhz,
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

/// What belongs to the whole board: read for whole GPUs only.
#[derive(Debug, Default)]
struct Board {
    power_mw: Option<u32>,
    energy_mj: Option<u64>,
    temperature_c: Option<u32>,
    sm_clock_mhz: Option<u32>,
}

/// The board quantities of GPU `index`, each left out (said once) where
/// the GPU cannot give it.
fn read_board(said: &mut Said, index: usize, device: &Device<'static>) -> Result<Board, String> {
    Ok(Board {
        power_mw: optional(said, index, Quantity::Power, device.power_usage())?,
        energy_mj: optional(
            said,
            index,
            Quantity::Energy,
            device.total_energy_consumption(),
        )?,
        temperature_c: optional(
            said,
            index,
            Quantity::Temperature,
            device.temperature(TemperatureSensor::Gpu),
        )?,
        sm_clock_mhz: optional(said, index, Quantity::SmClock, device.clock_info(Clock::SM))?,
    })
}

/// The handle a unit is read through: NVML's index of the GPU and, when it
/// could be opened, the device (the GPU's, or a MIG instance's).
type Handle = (usize, Option<Device<'static>>);

/// GPU `index` as NVML shows it, MIG instances included; the reason when
/// it cannot be read.
fn identify(nvml: &'static Nvml, index: usize) -> Result<Found<Handle>, String> {
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
            // Unsure: without instances there is nothing to place on.
            Failure::Broken(why) => return Err(why),
        },
    };
    let partition = match mig {
        true => Partition::Mig(instances(index, &device, &name)?),
        false => Partition::Whole((index, Some(device))),
    };
    Ok(Found {
        uuid,
        name,
        total_mib: values::mib_down(memory.total),
        partition,
    })
}

/// The MIG instances of partitioned GPU `index` (named `name`), in NVML's
/// order. NVML counts the slots an instance may take; an empty slot
/// answers "not found". An instance that cannot be read is logged and left
/// out: the others are still usable.
fn instances(
    index: usize,
    device: &Device<'static>,
    name: &str,
) -> Result<Vec<Instance<Handle>>, String> {
    let slots = device
        .mig_device_count()
        .map_err(|e| format!("NVML cannot count its MIG instances: {e}"))?;
    let mut found = Vec::new();
    for slot in 0..slots {
        let instance = match device.mig_device_by_index(slot) {
            Ok(instance) => instance,
            Err(NvmlError::NotFound) => continue,
            Err(e) => {
                log::error!("GPU {index}: NVML cannot open its MIG instance {slot}: {e}; left out");
                continue;
            }
        };
        match describe_instance(&instance, name) {
            Ok((uuid, profile, total_mib)) => found.push(Instance {
                uuid,
                profile,
                total_mib,
                handle: (index, Some(instance)),
            }),
            Err(why) => log::error!("GPU {index}: MIG instance {slot}: {why}; left out"),
        }
    }
    Ok(found)
}

/// A MIG instance's UUID, profile and memory (MiB). NVML names an
/// instance `<GPU name> MIG <profile>`; the profile is what follows.
fn describe_instance(
    instance: &Device<'static>,
    parent_name: &str,
) -> Result<(String, String, u64), String> {
    let uuid = instance
        .uuid()
        .map_err(|e| format!("NVML cannot read its UUID: {e}"))?;
    let memory = required(Quantity::Memory, instance.memory_info())?;
    let name = instance.name().unwrap_or_default();
    Ok((
        uuid,
        values::mig_profile(&name, parent_name),
        values::mib_down(memory.total),
    ))
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
            .map(
                |index| match self.read(index, dcgm.get(&self.gpus[index].nvml_index).copied()) {
                    Ok(reading) => {
                        self.gpus[index].last = Some(reading.clone());
                        reading
                    }
                    Err(why) => self.failed(index, why),
                },
            )
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
