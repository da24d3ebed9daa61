//! `carma hold`, `carma release`, `carma priority`: change a waiting task's
//! place in the queue; `carma requeue`: put a running or ended task back
//! in it.
//!
//! Like `carma cancel`, each leaves a request in `cancel/` for the daemon,
//! which checks that the caller owns the task (or is root), records the
//! change in the task's record and tells the scheduling core. The command
//! then waits for the daemon's next status and reports what it shows, so
//! a refused request is said, not assumed to have worked.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use carma::config::Config;
use carma::daemon::status::Status;
use carma::spool::record::{read_json, unix_now};
use carma::spool::request::{Request, Verb};
use carma::spool::{Spool, State, TaskName};

use super::spool_arg::SpoolArg;
use super::task_arg::find;

/// How long to wait for the daemon to act and say so.
const WAIT: Duration = Duration::from_secs(10);

#[derive(clap::Args)]
pub struct TaskArgs {
    #[command(flatten)]
    spool: SpoolArg,
    /// The task: its full name, its number, a unique prefix, or its job
    /// name when exactly one waiting or running task has it.
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
    let runs_before = runs(&spool, state, &name);
    let Some(path) = leave(&spool, &name, Verb::Requeue)? else {
        return Ok(ExitCode::SUCCESS);
    };
    if state == State::Running {
        println!("{name}: its job is being stopped; then it waits in the queue again");
        return Ok(ExitCode::SUCCESS);
    }
    if after_request(&spool, &path).is_none() {
        eprintln!("carma: {name}: the daemon has not acted on the request within {WAIT:?}");
        return Ok(ExitCode::FAILURE);
    }
    // Ended again already (a short job) shows as a new run.
    match find(&spool, name.as_str())? {
        (state @ (State::Done | State::Failed), _) if runs(&spool, state, &name) == runs_before => {
            eprintln!("carma: {name}: refused (only its owner or root may requeue it)");
            Ok(ExitCode::FAILURE)
        }
        (state, _) => {
            println!("{name}: requeued; it is in {state}/");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Leaves the request `verb` on `name` for the daemon; its path to watch,
/// or `None` when no daemon runs (it is said so: the request waits for the
/// next one).
fn leave(spool: &Spool, name: &TaskName, verb: Verb) -> Result<Option<PathBuf>> {
    let request = Request {
        verb,
        task: name.to_string(),
    };
    let path = spool
        .leave_request(&request)
        .with_context(|| format!("cannot leave the request cancel/{request}"))?;
    if !spool.daemon_running() {
        println!("{name}: requested; no daemon runs now, it takes effect when one starts");
        return Ok(None);
    }
    Ok(Some(path))
}

/// How many runs task `name` in `state` has had: its `run-N` directories,
/// which anyone may look up by name (a task directory can be entered, not
/// listed).
fn runs(spool: &Spool, state: State, name: &TaskName) -> u32 {
    let dir = spool.task_dir(state, name);
    (1..)
        .take_while(|n| dir.join(format!("run-{n}")).is_dir())
        .count() as u32
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
    let Some(path) = leave(&spool, &name, verb)? else {
        return Ok(ExitCode::SUCCESS);
    };
    let Some(status) = after_request(&spool, &path) else {
        eprintln!("carma: {name}: the daemon has not acted on the request within {WAIT:?}");
        return Ok(ExitCode::FAILURE);
    };
    let Some(shown) = status.waiting.iter().find(|w| w.name == name.as_str()) else {
        // Only waiting tasks are listed with their priority and hold.
        return Ok(match verb {
            Verb::Hold => {
                eprintln!("carma: {name}: it started before it could be held");
                ExitCode::FAILURE
            }
            Verb::Release => {
                println!("{name}: released; it started");
                ExitCode::SUCCESS
            }
            _ => {
                println!("{name}: priority requested; it counts if the task waits again");
                ExitCode::SUCCESS
            }
        });
    };
    let took = match verb {
        Verb::Hold => shown.held,
        Verb::Release => !shown.held,
        Verb::Priority(p) => shown.priority == p,
        Verb::Cancel | Verb::Requeue | Verb::CancelArray => true,
    };
    if !took {
        eprintln!(
            "carma: {name}: refused (only its owner or root may change it; users' \
             priorities are limited by the configuration); the daemon's log says why"
        );
        return Ok(ExitCode::FAILURE);
    }
    let held = if shown.held { "held, " } else { "" };
    println!("{name}: {held}priority {}; {}", shown.priority, shown.why);
    Ok(ExitCode::SUCCESS)
}

/// The first status written after the daemon took the request; `None` if
/// that does not happen within [`WAIT`].
fn after_request(spool: &Spool, request: &Path) -> Option<Status> {
    let deadline = Instant::now() + WAIT;
    let mut taken_at = None;
    while Instant::now() < deadline {
        if taken_at.is_none() && !request.exists() {
            taken_at = Some(unix_now());
        }
        if let Some(taken_at) = taken_at {
            let status = read_json::<Status>(&spool.status_file()).ok();
            if let Some(status) = status.filter(|s| s.updated_at >= taken_at) {
                return Some(status);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
