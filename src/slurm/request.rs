//! What a job asks Slurm for: generic resources from the estimate, and the
//! time limit in Slurm's words.

use std::time::Duration;

use super::Settings;
use crate::sched::Need;

/// The resources of one submission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `shard:K` or `gpu:N`.
    pub gres: String,
    /// The whole node: multi-GPU jobs (see the module doc of
    /// [`crate::slurm`]).
    pub exclusive: bool,
    /// Memory per GPU the job was granted, MiB: the MPS cap. `None` for a
    /// whole GPU, which needs no cap.
    pub granted_mib: Option<u64>,
}

impl Request {
    /// The request for a job of `gpus` GPUs needing `need` per GPU, with
    /// `margin_mib` added to a figure.
    pub fn new(need: Need, gpus: u32, margin_mib: u64, settings: &Settings) -> Request {
        if gpus > 1 {
            return Request {
                gres: format!("gpu:{gpus}"),
                exclusive: true,
                granted_mib: None,
            };
        }
        let whole = Request {
            gres: format!("shard:{}", settings.shards_per_gpu),
            exclusive: false,
            granted_mib: None,
        };
        let Need::Mib(mib) = need else {
            return whole;
        };
        let shards = mib
            .saturating_add(margin_mib)
            .div_ceil(settings.shard_mib)
            .max(1);
        if shards >= settings.shards_per_gpu {
            return whole;
        }
        Request {
            gres: format!("shard:{shards}"),
            exclusive: false,
            granted_mib: Some(shards * settings.shard_mib),
        }
    }

    /// The request for a retry after an OOM crash: a whole GPU (multi-GPU
    /// jobs have theirs already).
    pub fn whole(gpus: u32, settings: &Settings) -> Request {
        Request::new(Need::WholeGpu, gpus, 0, settings)
    }
}

/// `--time` in `days-hours:minutes:seconds`, rounded up to whole seconds;
/// at least one second (Slurm reads 0 as "no limit").
pub fn slurm_time(limit: Duration) -> String {
    let total = limit.as_secs() + u64::from(limit.subsec_nanos() > 0);
    let total = total.max(1);
    let (days, rest) = (total / 86_400, total % 86_400);
    format!(
        "{days}-{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            shard_mib: 1024,
            shards_per_gpu: 40,
            sbatch: "sbatch".into(),
            carma: "".into(),
        }
    }

    #[test]
    fn memory_becomes_shards_rounded_up() {
        let s = settings();
        let r = Request::new(Need::Mib(10 * 1024), 1, 0, &s);
        assert_eq!((r.gres.as_str(), r.granted_mib), ("shard:10", Some(10_240)));
        assert_eq!(Request::new(Need::Mib(10_241), 1, 0, &s).gres, "shard:11");
        assert_eq!(
            Request::new(Need::Mib(9_000), 1, 1_500, &s).gres,
            "shard:11"
        );
        assert_eq!(Request::new(Need::Mib(0), 1, 0, &s).gres, "shard:1");
    }

    #[test]
    fn a_gpu_or_more_is_every_shard_of_one_gpu() {
        let s = settings();
        for need in [
            Need::Mib(40 * 1024),
            Need::Mib(u64::MAX),
            Need::WholeGpu,
            Need::Unknown,
        ] {
            let r = Request::new(need, 1, 0, &s);
            assert_eq!(
                (r.gres.as_str(), r.exclusive, r.granted_mib),
                ("shard:40", false, None)
            );
        }
        assert_eq!(
            Request::new(Need::Mib(39 * 1024), 1, 0, &s).gres,
            "shard:39"
        );
        assert_eq!(Request::whole(1, &s).gres, "shard:40");
    }

    #[test]
    fn multi_gpu_jobs_get_gpus_and_the_node() {
        let r = Request::new(Need::Mib(1024), 2, 0, &settings());
        assert_eq!((r.gres.as_str(), r.exclusive), ("gpu:2", true));
        assert_eq!(Request::whole(4, &settings()).gres, "gpu:4");
    }

    #[test]
    fn times_read_as_slurm_writes_them() {
        assert_eq!(slurm_time(Duration::from_secs(90)), "0-00:01:30");
        assert_eq!(
            slurm_time(Duration::from_secs(2 * 86_400 + 3661)),
            "2-01:01:01"
        );
        assert_eq!(slurm_time(Duration::from_millis(1500)), "0-00:00:02");
        assert_eq!(slurm_time(Duration::ZERO), "0-00:00:01");
    }
}
