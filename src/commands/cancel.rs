//! `carma cancel`: stop a waiting or running task.
//!
//! The request goes through the daemon (a file in `cancel/`), which knows
//! whether the task waits or runs and may signal supervisors that run as
//! root; this command waits until the task reaches `failed/`.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use carma::config::Config;
use carma::spool::State;
use carma::spool::request::{Request, Verb};

use super::spool_arg::SpoolArg;
use super::task_arg::find;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// The task: its full name, its number, a unique prefix, or its job
    /// name when exactly one waiting or running task has it.
    task: String,
    /// Cancel every task of the array job TASK belongs to (`array:`), not
    /// only TASK.
    #[arg(long)]
    array: bool,
    /// Seconds to wait for the task to stop [default: the cancel grace
    /// period + 10].
    #[arg(long)]
    wait: Option<f64>,
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    let (state, name) = find(&spool, &args.task)?;
    if matches!(state, State::Done | State::Failed) {
        eprintln!("carma: {name} already ended (it is in {state}/)");
        return Ok(ExitCode::FAILURE);
    }
    let request = Request {
        verb: if args.array {
            Verb::CancelArray
        } else {
            Verb::Cancel
        },
        task: name.to_string(),
    };
    spool
        .leave_request(&request)
        .with_context(|| format!("cannot leave the request cancel/{request}"))?;
    if !spool.daemon_running() {
        println!(
            "{name}: cancellation requested; no daemon runs now, it takes effect when one starts"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let wait = args.wait.unwrap_or(config.daemon.cancel_grace_s + 10.0);
    let deadline = Instant::now() + Duration::from_secs_f64(wait.max(0.0));
    while Instant::now() < deadline {
        if spool.task_dir(State::Failed, &name).exists()
            || spool.task_dir(State::Done, &name).exists()
        {
            let (state, _) = find(&spool, name.as_str())?;
            println!(
                "{name}: {}",
                if state == State::Failed {
                    "cancelled"
                } else {
                    "finished before it could be cancelled"
                }
            );
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "carma: {name}: cancellation requested, but the task has not stopped within {wait:.0} s"
    );
    Ok(ExitCode::FAILURE)
}
