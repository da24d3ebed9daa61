//! `carma supervise` (hidden): the per-run supervisor the daemon starts.

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// The run directory holding `launch.json`.
    run_dir: PathBuf,
    /// The locked `supervisor.lock` the daemon handed down.
    #[arg(long)]
    lock_fd: RawFd,
}

pub fn run(args: Args) -> Result<ExitCode> {
    carma::supervisor::supervise(&args.run_dir, args.lock_fd)?;
    Ok(ExitCode::SUCCESS)
}
