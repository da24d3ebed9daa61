//! `carma status`: queues and GPUs as the daemon last saw them.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use carma::config::Config;
use carma::size::format_mib;
use carma::spool::record::unix_now;
use carma::spool::status::Status;
use carma::spool::{Spool, State, TaskName};
use carma::task_view::{failure_reason, owner_uid as task_owner};
use carma::wall_time;

use super::spool_arg::SpoolArg;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Only this user's tasks.
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// Only tasks in this state.
    #[arg(long, value_enum)]
    state: Option<Shown>,
    /// Every waiting task and every failure, however many.
    #[arg(long)]
    all: bool,
}

/// The states `--state` picks.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Shown {
    Running,
    /// Waiting in pending/ or recovery/.
    Waiting,
    Done,
    Failed,
}

/// Lines of waiting tasks or failures shown without `--all`.
const LISTED: usize = 20;

/// Widest line printed: a terminal's, and a journal's.
const WIDTH: usize = 100;

/// A status this much older than its daemon's 1 s refresh is stale: the
/// daemon is stuck or overloaded, and what it says may be past.
const STALE_S: f64 = 5.0;

/// `--json`: the daemon's status plus what only the directories know.
#[derive(Serialize)]
struct Output {
    spool: String,
    daemon_running: bool,
    /// Seconds since the daemon last wrote its status.
    age_s: Option<f64>,
    done: usize,
    failed: usize,
    /// The latest failures, newest last, with their reasons where this
    /// user may read them.
    recent_failures: Vec<Failure>,
    #[serde(flatten)]
    status: Option<Status>,
}

/// A failed task and why, in one line.
#[derive(Serialize)]
struct Failure {
    name: String,
    /// `None` when this user may not read it (another user's task).
    reason: Option<String>,
}

/// Failures listed: the latest few say what went wrong lately; `carma
/// show` tells the rest.
const RECENT_FAILURES: usize = 10;

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    if !spool.root().is_dir() {
        anyhow::bail!(
            "no spool at {} (is it the daemon's? see daemon.spool in the configuration, \
             --spool or CARMA_SPOOL)",
            spool.root().display()
        );
    }
    let status: Option<Status> = Status::read(&spool.status_file())
        .ok()
        .map(|s| current(&spool, s));
    let failed = spool
        .list(State::Failed)
        .map(|l| l.tasks)
        .unwrap_or_default();
    let kept = if args.all {
        failed.len()
    } else {
        RECENT_FAILURES
    };
    let recent_failures = failed[failed.len().saturating_sub(kept)..]
        .iter()
        .map(|name| Failure {
            name: name.to_string(),
            reason: failure_reason(&spool, name),
        })
        .collect();
    let out = Output {
        spool: spool.root().display().to_string(),
        daemon_running: spool.daemon_running(),
        age_s: status
            .as_ref()
            .map(|s| (unix_now() - s.updated_at).max(0.0)),
        done: spool.list(State::Done).map_or(0, |l| l.tasks.len()),
        failed: failed.len(),
        recent_failures,
        status,
    };
    let out = match &args.user {
        Some(user) => only_user(out, user, &spool),
        None => out,
    };
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        print_human(&out, &args);
    }
    Ok(ExitCode::SUCCESS)
}

/// The snapshot without the tasks that have moved on since it was written
/// (the directories are the truth; anyone may look a task up by name).
fn current(spool: &Spool, mut status: Status) -> Status {
    let is = |state: State, name: &str| {
        TaskName::parse(name).is_some_and(|n| spool.task_dir(state, &n).is_dir())
    };
    status.running.retain(|t| is(State::Running, &t.name));
    status
        .recovery
        .retain(|n| is(State::Recovery, n) || is(State::Running, n));
    status.pending.retain(|n| is(State::Pending, n));
    status.waiting.retain(|w| {
        is(State::Pending, &w.name) || is(State::Recovery, &w.name) || is(State::Running, &w.name)
    });
    let running: Vec<String> = status.running.iter().map(|t| t.name.clone()).collect();
    for gpu in &mut status.gpus {
        gpu.tasks.retain(|t| running.contains(t));
    }
    status
}

/// Only `user`'s tasks (running, waiting, failed; the totals count theirs).
fn only_user(mut out: Output, user: &str, spool: &Spool) -> Output {
    let uid = nix::unistd::User::from_name(user)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw());
    if let Some(status) = &mut out.status {
        status.running.retain(|t| t.user == user);
        status.waiting.retain(|w| w.user == user);
        let waiting: Vec<String> = status.waiting.iter().map(|w| w.name.clone()).collect();
        status.recovery.retain(|n| waiting.contains(n));
        status.pending.retain(|n| waiting.contains(n));
    }
    let theirs =
        |state: State, name: &TaskName| uid.is_some() && task_owner(spool, state, name) == uid;
    let failed = spool
        .list(State::Failed)
        .map(|l| l.tasks)
        .unwrap_or_default();
    let failed: Vec<&TaskName> = failed.iter().filter(|n| theirs(State::Failed, n)).collect();
    out.recent_failures
        .retain(|f| failed.iter().any(|n| n.as_str() == f.name));
    out.failed = failed.len();
    out.done = spool
        .list(State::Done)
        .map(|l| l.tasks.iter().filter(|n| theirs(State::Done, n)).count())
        .unwrap_or(0);
    out
}

fn print_human(out: &Output, args: &Args) {
    let shows = |state: Shown| args.state.is_none_or(|s| s == state);
    let Some(status) = &out.status else {
        println!(
            "spool {}: no daemon status yet{}",
            out.spool,
            if out.daemon_running {
                ""
            } else {
                " (no daemon running)"
            }
        );
        print_totals(out, args);
        return;
    };
    let age = out.age_s.unwrap_or(0.0);
    if out.daemon_running && age > STALE_S {
        line(&format!(
            "carma daemon (pid {}): its status is {age:.0} s old (it is refreshed every \
             second; the daemon may be stuck)",
            status.daemon_pid
        ));
    } else if out.daemon_running {
        line(&format!(
            "carma daemon (pid {}), status updated {age:.1} s ago",
            status.daemon_pid
        ));
    } else {
        line(&format!(
            "NO DAEMON serving the spool; its last status, from pid {}, {age:.0} s ago:",
            status.daemon_pid
        ));
    }
    line(&format!(
        "  spool {}\n  GPUs  {}",
        out.spool, status.backend
    ));
    println!("\nGPU  used + reserved / total  SMACT  OCC   DRAM  source     tasks");
    let fraction = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    for g in &status.gpus {
        let memory = format!(
            "{} + {} / {}",
            format_mib(g.used_mib),
            format_mib(g.reserved_mib),
            format_mib(g.total_mib)
        );
        let mut tasks = match g.tasks.len() {
            0 => String::new(),
            1 => g.tasks[0].clone(),
            n => format!("{n}: {}", g.tasks.join(", ")),
        };
        if g.mig {
            tasks.push_str(" [MIG instance: single-GPU tasks, SMACT not measured]");
        }
        let source = g.source.map_or_else(|| "-".to_owned(), |s| s.to_string());
        line(&format!(
            "{:<4} {memory:<26} {:<6.2} {:<5} {:<5} {source:<10} {tasks}",
            g.index,
            g.smact,
            fraction(g.occupancy),
            fraction(g.dram),
        ));
        if let Some(e) = &g.error {
            line(&format!("     ERROR: {e}"));
        }
    }
    let now = unix_now();
    if shows(Shown::Running) {
        println!("\nrunning ({})", status.running.len());
    }
    for t in status.running.iter().filter(|_| shows(Shown::Running)) {
        let gpus: Vec<String> = t.gpus.iter().map(ToString::to_string).collect();
        let limit = t
            .time_limit_s
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map_or_else(String::new, |l| format!(" of {}", wall_time::format(l)));
        line(&format!(
            "  {}  run {} on GPU {} as {}, {:.0} s{limit}, peak {}",
            t.name,
            t.run,
            gpus.join(","),
            t.user,
            (now - t.since).max(0.0),
            format_mib(t.peak_mib)
        ));
    }
    if shows(Shown::Waiting) {
        print_waiting(status, args.all);
    }
    println!();
    print_totals(out, args);
}

/// Waiting tasks in dispatch order (the head first, whatever directory it
/// waits in), the first [`LISTED`] unless `--all`.
fn print_waiting(status: &Status, all: bool) {
    println!(
        "waiting ({}: {} recovering from an OOM crash, {} pending)",
        status.waiting.len(),
        status.recovery.len(),
        status.pending.len()
    );
    let shown = if all { status.waiting.len() } else { LISTED };
    for w in status.waiting.iter().take(shown) {
        let array = w
            .array
            .as_ref()
            .map_or_else(String::new, |a| format!(", array {a}"));
        line(&format!(
            "  {}  {}{array}, priority {}: {}",
            w.name, w.user, w.priority, w.why
        ));
    }
    if status.waiting.len() > shown {
        println!(
            "  ... and {} more (carma status --all lists them)",
            status.waiting.len() - shown
        );
    }
    if let Some(why) = &status.head_waits_for {
        line(&format!("\nhead: {why}"));
    }
}

/// Tasks that ended, and why the latest failures failed.
fn print_totals(out: &Output, args: &Args) {
    println!("done {}, failed {}", out.done, out.failed);
    if args.state.is_some_and(|s| s != Shown::Failed) {
        return;
    }
    if out.failed > out.recent_failures.len() {
        println!("  latest {}:", out.recent_failures.len());
    }
    for f in &out.recent_failures {
        match &f.reason {
            Some(reason) => line(&format!("  {}  {reason}", f.name)),
            None => println!("  {}", f.name),
        }
    }
}

/// Prints `text` cut to [`WIDTH`] columns; `carma show` has the rest.
fn line(text: &str) {
    for part in text.split('\n') {
        match part.char_indices().nth(WIDTH - 3) {
            Some((end, _)) if part.chars().count() > WIDTH => println!("{}...", &part[..end]),
            _ => println!("{part}"),
        }
    }
}
