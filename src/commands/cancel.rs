//! `carma cancel`: stop a waiting or running task.
//!
//! The request goes through the daemon (a file in `cancel/`), which knows
//! whether the task waits or runs and may signal supervisors that run as
//! root; this command says the daemon's verdict, then waits until the
//! task reaches `failed/`.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;

use carma::config::Config;
use carma::spool::State;
use carma::spool::request::Verb;

use super::request::{self, Answer};
use super::spool_arg::SpoolArg;
use super::task_arg::find;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// The task: its full name, its number, a unique prefix, or its job
    /// name (the waiting or running task of that name, else the one that
    /// ended).
    task: String,
    /// Cancel every task of the array job TASK belongs to (`array:`), not
    /// only TASK.
    #[arg(long)]
    array: bool,
    /// Seconds to wait for the task to stop [default: the cancel grace
    /// period + 20: time for the daemon to kill a job its supervisor
    /// could not stop].
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
    let verb = if args.array {
        Verb::CancelArray
    } else {
        Verb::Cancel
    };
    let answer = request::ask(&spool, &config, state, &name, verb)?;
    if let Some(code) = request::said(&name, verb, &answer) {
        return Ok(code);
    }
    if let Answer::Done(said) = &answer {
        println!("{said}");
    }
    if args.array {
        return Ok(ExitCode::SUCCESS);
    }
    let wait = args
        .wait
        .unwrap_or(config.daemon.cancel_grace_s.get() + 20.0);
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
    eprintln!("carma: {name}: its job was asked to stop, but has not stopped within {wait:.0} s");
    Ok(ExitCode::FAILURE)
}
