//! `carma supervise` (hidden): the per-run supervisor the daemon starts,
//! for a run, or as the nursery that forks one for each run.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

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

pub fn run(args: Args) -> Result<ExitCode> {
    match (args.run_dir, args.lock_fd) {
        (Some(run_dir), Some(lock_fd)) => carma::supervisor::supervise_handed(&run_dir, lock_fd)?,
        _ => carma::nursery::nursery()?,
    }
    Ok(ExitCode::SUCCESS)
}
