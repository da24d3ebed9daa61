//! `carma fake-train` (hidden): a training job for simulated GPUs. It
//! claims memory on the GPUs in `CUDA_VISIBLE_DEVICES`, runs for a while,
//! and dies of a PyTorch-style OOM when the memory is not there. The logic
//! lives in `carma::gpu::sim::fake_train`; this module reads the
//! environment, installs the signal handlers and maps outcomes to exit
//! statuses (0 done, 1 OOM, 2 setup error, 128 + signal when stopped).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

use carma::gpu::sim::STATE_DIR_VAR;
use carma::gpu::sim::fake_train::{FakeTrain, Outcome, Placement};

#[derive(clap::Args)]
pub struct Args {
    /// Memory to claim on every visible GPU, e.g. 6G or 1500M.
    #[arg(long, value_parser = parse_mem)]
    mem: u64,
    /// Total run time in seconds, warm-up included; fractions allowed.
    #[arg(long)]
    secs: f64,
    /// SM activity to claim on every visible GPU, 0..1.
    #[arg(long, default_value_t = 0.5)]
    smact: f64,
    /// Seconds of warm-up before the memory is claimed.
    #[arg(long, default_value_t = 0.0)]
    ramp: f64,
}

fn parse_mem(text: &str) -> Result<u64, String> {
    carma::size::parse_mib(text).map_err(|e| format!("column {}: {}", e.column, e.message))
}

/// Runs the job; every setup failure exits 2 with a message, because 1 is
/// what an OOM-killed Python script exits with.
pub fn run(args: Args) -> ExitCode {
    match train(args) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e) => {
            eprintln!("carma fake-train: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn train(args: Args) -> Result<Outcome> {
    let job = FakeTrain {
        mem_mib: args.mem,
        secs: args.secs,
        smact: args.smact,
        ramp_secs: args.ramp,
    };
    let stop = Arc::new(AtomicUsize::new(0));
    for signal in [SIGTERM, SIGINT] {
        let number = usize::try_from(signal).context("signal numbers are positive")?;
        signal_hook::flag::register_usize(signal, Arc::clone(&stop), number)
            .context("cannot install signal handlers")?;
    }
    let placement = Placement::from_env(
        std::env::var_os(STATE_DIR_VAR),
        std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
    )?;
    Ok(job.run(
        &placement,
        &stop,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    )?)
}
