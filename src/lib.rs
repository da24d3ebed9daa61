//! carma: a collocation-aware GPU job runner for one server.
//!
//! Users drop `.rad` job files into a spool; carma estimates each job's GPU
//! memory, places it on a GPU that can take it (possibly beside other jobs),
//! runs it, and re-runs it safely when it dies of out-of-memory. See
//! `README.md` and `docs/` in the repository for the whole picture (job
//! files: `README.md#a-job-file`, `docs/job-files.md`).
//!
//! The crate is split by concept: [`sched`] is the pure scheduling core,
//! [`simulate`] drives it in virtual time, [`config`] holds every threshold,
//! [`rad`] reads job files, [`gpu`] reads GPUs (real or simulated),
//! [`procfs`] names processes by pid and start time, [`summary`] reads
//! model summaries and [`estimate`] turns them into memory needs.

/// This build of carma: its version and a digest of the sources it was
/// built from. The daemon runs `carma-supervise` only if it is of the same
/// build ([`supervisor::program`]).
pub const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("CARMA_BUILD_ID"));

pub mod accounts;
pub mod cgroup;
pub mod config;
pub mod daemon;
pub mod estimate;
pub mod gpu;
pub mod http;
pub mod job_script;
pub mod journal;
pub mod lifecycle;
pub mod metrics;
pub mod mps;
pub mod nursery;
pub mod oom;
pub mod plot;
pub mod procfs;
pub mod rad;
pub mod refusal;
pub mod report;
pub mod safe;
pub mod sched;
pub mod shell;
pub mod simulate;
pub mod size;
pub mod slurm;
pub mod spawn;
pub mod spool;
pub mod summary;
pub mod supervise;
pub mod supervisor;
pub mod task_view;
pub mod wall_time;
