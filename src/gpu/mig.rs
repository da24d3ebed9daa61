//! From the GPUs a backend finds to the units carma places tasks on.
//!
//! A GPU the operator has partitioned (MIG mode on) is not one device to a
//! CUDA program but as many as it has instances: a job must name an
//! instance's UUID in `CUDA_VISIBLE_DEVICES`, and then sees that instance
//! alone, with its own memory. So each instance becomes a unit of its own,
//! and the partitioned GPU itself none. Both backends (NVML, simulated)
//! describe what they find as [`Found`] GPUs and number them here, so the
//! simulated GPUs exercise the same enumeration as a real server.

use super::{GpuInfo, MigInstance};

/// One GPU as a backend finds it, with the backend's handle `H` for each
/// unit it may become.
#[derive(Debug)]
pub struct Found<H> {
    pub uuid: String,
    pub name: String,
    pub total_mib: u64,
    pub partition: Partition<H>,
}

/// Whether a GPU is used whole or through its MIG instances.
#[derive(Debug)]
pub enum Partition<H> {
    /// MIG mode off (or no MIG): the GPU is one unit, read through `H`.
    Whole(H),
    /// MIG mode on: the instances that exist now, in the backend's order.
    Mig(Vec<Instance<H>>),
}

/// One MIG instance as a backend finds it.
#[derive(Debug)]
pub struct Instance<H> {
    pub uuid: String,
    /// E.g. `3g.20gb`.
    pub profile: String,
    pub total_mib: u64,
    pub handle: H,
}

/// The units of `found` (in NVML index order), numbered from 0: a whole
/// GPU is one, each MIG instance one, a partitioned GPU none. A
/// partitioned GPU without instances is logged: it is the operator's to
/// fix, and carma cannot use it until then.
pub fn units<H>(found: Vec<Found<H>>) -> Vec<(GpuInfo, H)> {
    let mut units = Vec::new();
    for (parent, gpu) in found.into_iter().enumerate() {
        match gpu.partition {
            Partition::Whole(handle) => units.push((
                GpuInfo {
                    index: units.len(),
                    uuid: gpu.uuid,
                    name: gpu.name,
                    total_mib: gpu.total_mib,
                    device: parent.to_string(),
                    mig: None,
                },
                handle,
            )),
            Partition::Mig(instances) if instances.is_empty() => log::warn!(
                "GPU {parent} {} ({}): MIG mode is on but it has no MIG instances, so \
                 carma has nothing to place on it; create instances (nvidia-smi mig -cgi \
                 ... -C) or turn MIG off, then restart carma",
                gpu.name,
                gpu.uuid
            ),
            Partition::Mig(instances) => {
                for instance in instances {
                    units.push((
                        GpuInfo {
                            index: units.len(),
                            name: format!("{} GPU {parent} MIG {}", gpu.name, instance.profile),
                            device: instance.uuid.clone(),
                            uuid: instance.uuid,
                            total_mib: instance.total_mib,
                            mig: Some(MigInstance {
                                parent,
                                profile: instance.profile,
                            }),
                        },
                        instance.handle,
                    ));
                }
            }
        }
    }
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(uuid: &str, handle: u8) -> Found<u8> {
        Found {
            uuid: uuid.into(),
            name: "A100".into(),
            total_mib: 40960,
            partition: Partition::Whole(handle),
        }
    }

    fn partitioned(uuid: &str, instances: &[(&str, u64, u8)]) -> Found<u8> {
        Found {
            uuid: uuid.into(),
            name: "A100".into(),
            total_mib: 40960,
            partition: Partition::Mig(
                instances
                    .iter()
                    .map(|&(profile, total_mib, handle)| Instance {
                        uuid: format!("MIG-{uuid}-{handle}"),
                        profile: profile.into(),
                        total_mib,
                        handle,
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn instances_are_units_and_their_parent_is_not() {
        let units = units(vec![
            partitioned("a", &[("3g.20gb", 19968, 1), ("1g.5gb", 4864, 2)]),
            whole("b", 3),
        ]);
        let summary: Vec<(usize, &str, &str, u64, u8)> = units
            .iter()
            .map(|(g, h)| (g.index, g.uuid.as_str(), g.device.as_str(), g.total_mib, *h))
            .collect();
        assert_eq!(
            summary,
            [
                (0, "MIG-a-1", "MIG-a-1", 19968, 1),
                (1, "MIG-a-2", "MIG-a-2", 4864, 2),
                // CUDA still numbers the whole GPU as NVML does: 1, not 2.
                (2, "b", "1", 40960, 3),
            ]
        );
        assert_eq!(units[0].0.name, "A100 GPU 0 MIG 3g.20gb");
        assert_eq!(
            units[1].0.mig,
            Some(MigInstance {
                parent: 0,
                profile: "1g.5gb".into()
            })
        );
        assert_eq!(units[2].0.mig, None);
    }

    #[test]
    fn a_partitioned_gpu_without_instances_yields_nothing() {
        let units = units(vec![whole("a", 1), partitioned("b", &[]), whole("c", 3)]);
        let devices: Vec<(usize, &str)> = units
            .iter()
            .map(|(g, _)| (g.index, g.device.as_str()))
            .collect();
        assert_eq!(devices, [(0, "0"), (1, "2")]);
    }
}
