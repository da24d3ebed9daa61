//! `carma hold`, `carma release`, `carma priority`: change a waiting task's
//! place in the queue; `carma requeue`: put a running or ended task back
//! in it.
//!
//! Like `carma cancel`, each leaves a request in `cancel/` for the daemon,
//! which checks that the caller owns the task (or is root), records the
//! change in the task's record and tells the scheduling core. The command
//! says the daemon's verdict (see [`super::request`]) and, for a task that
//! still waits, its place in the queue; a refusal exits non-zero.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use carma::config::Config;
use carma::spool::State;
use carma::spool::request::Verb;
use carma::spool::status::Status;

use super::request::{self, Answer};
use super::spool_arg::SpoolArg;
use super::task_arg::find;

#[derive(clap::Args)]
pub struct TaskArgs {
    #[command(flatten)]
    spool: SpoolArg,
    /// The task: its full name, its number, a unique prefix, or its job
    /// name (the waiting or running task of that name, else the one that
    /// ended).
    task: String,
}

#[derive(clap::Args)]
pub struct PriorityArgs {
    #[command(flatten)]
    task: TaskArgs,
    /// The new priority: higher runs first. Users may give what
    /// `queue.user_priority_min` to `queue.user_priority_max` allow (by
    /// default only lower than 0); root any.
    #[arg(allow_negative_numbers = true)]
    priority: i32,
}

pub fn hold(config_path: Option<&Path>, args: TaskArgs) -> Result<ExitCode> {
    adjust(config_path, args, Verb::Hold)
}

pub fn release(config_path: Option<&Path>, args: TaskArgs) -> Result<ExitCode> {
    adjust(config_path, args, Verb::Release)
}

pub fn priority(config_path: Option<&Path>, args: PriorityArgs) -> Result<ExitCode> {
    adjust(config_path, args.task, Verb::Priority(args.priority))
}

pub fn requeue(config_path: Option<&Path>, args: TaskArgs) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    let (state, name) = find(&spool, &args.task)?;
    if matches!(state, State::Pending | State::Recovery) {
        eprintln!("carma: {name} waits in the queue already (it is in {state}/)");
        return Ok(ExitCode::FAILURE);
    }
    let answer = request::ask(&spool, &config, state, &name, Verb::Requeue)?;
    if let Some(code) = request::said(&name, Verb::Requeue, &answer) {
        return Ok(code);
    }
    if let Answer::Done(said) = answer {
        println!("{said}");
    }
    Ok(ExitCode::SUCCESS)
}

fn adjust(config_path: Option<&Path>, args: TaskArgs, verb: Verb) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    let (state, name) = find(&spool, &args.task)?;
    match (state, verb) {
        (State::Done | State::Failed, _) => {
            eprintln!("carma: {name} already ended (it is in {state}/)");
            return Ok(ExitCode::FAILURE);
        }
        (State::Running, Verb::Hold | Verb::Release) => {
            eprintln!("carma: {name} runs already; `carma cancel` stops it");
            return Ok(ExitCode::FAILURE);
        }
        _ => {}
    }
    let answer = request::ask(&spool, &config, state, &name, verb)?;
    if let Some(code) = request::said(&name, verb, &answer) {
        return Ok(code);
    }
    if let Answer::Done(said) = answer {
        println!("{said}");
    }
    // Where it now stands in the queue, when the status says (it may have
    // started meanwhile).
    let status = Status::read(&spool.status_file()).ok();
    let shown = status.and_then(|s| s.waiting.into_iter().find(|w| w.name == name.as_str()));
    if let Some(shown) = shown {
        let held = if shown.held { "held, " } else { "" };
        println!("{name}: {held}priority {}; {}", shown.priority, shown.why);
    }
    Ok(ExitCode::SUCCESS)
}
