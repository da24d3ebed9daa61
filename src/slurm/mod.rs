//! carma on a Slurm cluster: the estimate as Slurm shards, and OOM
//! recovery inside the allocation. Slurm keeps what it does well
//! (queueing, backfill, fair share, limits, accounting, nodes); carma adds
//! what it lacks: a memory figure for each job and the crash-and-retry
//! loop around it.
//!
//! # Design
//!
//! - **Memory as shards.** The administrator splits each GPU into
//!   `gres/shard` units of [`Settings::shard_mib`] (Slurm 22.05+:
//!   `Name=shard Count=40 File=/dev/nvidia0` for a 40 GiB GPU). A job's
//!   estimate plus `placement.margin_mib` becomes `--gres=shard:K`
//!   ([`request::Request`]), and Slurm packs jobs onto GPUs by memory with
//!   its own scheduler. A need of a GPU or more (or "unknown") asks for all
//!   the shards of one GPU, which keeps every other shard job off it.
//! - **Multi-GPU jobs** ask for `--gres=gpu:N --exclusive`. Slurm 22.05
//!   neither lets one job's shards span GPUs nor keeps shard jobs off a GPU
//!   allocated as `gpu` (measured on 22.05.8: a `gpu:1` job and two
//!   `shard:10` jobs all got device 0), so a whole node is the only way to
//!   give N GPUs to one job without strangers on them.
//! - **Inside the allocation** the batch script hands itself to
//!   `carma slurm run`, which runs the job's lines in one `bash` (conda hook
//!   and guarded activations as the daemon writes them), caps its memory
//!   under MPS at what it was granted when the node runs MPS
//!   (`mps.enabled`, `mps.limit_memory`), copies its stderr through and
//!   keeps the tail. A failure whose tail shows an OOM signature (`[oom]`)
//!   is resubmitted with a whole GPU, recording the link in the new job's
//!   comment, at most `recovery.max_retries` times (or the job's
//!   `retries:`): the daemon's recovery, with Slurm's queue in place of
//!   carma's.
//!
//! # Limits
//!
//! - Slurm does not see SM activity, so the interference gate (refuse a
//!   GPU whose SMACT is above the cap) has no counterpart: sharing is
//!   bounded by memory only. An administrator who wants fewer jobs per GPU
//!   gives a GPU fewer, larger shards (`shard_mib`) or caps the shards a
//!   node offers; carma's `smact_cap` is not enforced on Slurm.
//! - Peaks are not written to history from the cluster (the wrapper has no
//!   NVML reading of its own process yet); repeated jobs are estimated
//!   like new ones unless they declare `memory:`.
//! - A retry reads the `.rad` again, as a resubmission by hand would.

pub mod request;
pub mod script;

use std::path::PathBuf;

use serde::Deserialize;

/// `[slurm]` in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// GPU memory one shard stands for, MiB.
    pub shard_mib: u64,
    /// Shards of one GPU (gres.conf's `Count` per GPU).
    pub shards_per_gpu: u64,
    /// The `sbatch` to submit with.
    pub sbatch: PathBuf,
    /// The carma the job's node runs as the wrapper; empty: this binary.
    pub carma: PathBuf,
}

impl Settings {
    pub fn validate(&self) -> Result<(), String> {
        if self.shard_mib == 0 || self.shards_per_gpu == 0 {
            return Err("slurm.shard_mib and slurm.shards_per_gpu must be at least 1".into());
        }
        Ok(())
    }
}
