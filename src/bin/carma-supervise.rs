//! `carma-supervise`: what `carma supervise` does, in a binary of its own
//! that holds little else, so that the supervisor of each run maps less
//! of it ([`carma::supervisor::program`] says why and when the daemon uses
//! it). Started by the daemon, not by people.

use std::process::ExitCode;

use clap::Parser;

/// The supervisor of one run, or the nursery that forks one per run.
#[derive(Parser)]
#[command(name = "carma-supervise", version = carma::BUILD)]
struct Cli {
    #[command(flatten)]
    args: carma::supervise::Args,
}

fn main() -> ExitCode {
    carma::journal::init();
    match carma::supervise::run(Cli::parse().args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("carma-supervise: {e}");
            ExitCode::FAILURE
        }
    }
}
