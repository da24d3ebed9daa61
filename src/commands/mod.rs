//! One module per `carma` subcommand.

pub mod adjust;
pub mod cancel;
pub mod check;
pub mod completions;
pub mod daemon;
pub mod deferred;
pub mod estimate;
pub mod fake_train;
pub mod man;
pub mod replay;
pub mod report;
pub mod request;
pub mod show;
pub mod simulate;
pub mod slurm;
pub mod spool_arg;
pub mod status;
pub mod submit;
pub mod task_arg;
pub mod train;
