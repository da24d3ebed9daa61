//! The supervisor's command line, the same in `carma supervise` (hidden)
//! and in `carma-supervise` ([`crate::supervisor::program`]): one run's
//! supervisor ([`crate::supervisor`]) or the nursery that forks them
//! ([`crate::nursery`]).

use std::os::fd::RawFd;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The run directory holding `launch.json`.
    #[arg(required_unless_present = "nursery")]
    run_dir: Option<PathBuf>,
    /// The locked `supervisor.lock` the daemon handed down.
    #[arg(long, required_unless_present = "nursery")]
    lock_fd: Option<RawFd>,
    /// Fork a supervisor for each run the daemon hands over on standard
    /// input, a socket to it.
    #[arg(long, conflicts_with_all = ["run_dir", "lock_fd"])]
    nursery: bool,
}

/// Supervises the run, or serves as the nursery, as `args` say.
pub fn run(args: Args) -> std::io::Result<()> {
    match (args.run_dir, args.lock_fd) {
        (Some(run_dir), Some(lock_fd)) => crate::supervisor::supervise_handed(&run_dir, lock_fd),
        _ => crate::nursery::nursery(),
    }
}
