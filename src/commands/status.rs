//! `carma status`: queues and GPUs as the daemon last saw them.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use carma::config::Config;
use carma::daemon::status::Status;
use carma::size::format_mib;
use carma::spool::State;
use carma::spool::record::{read_json, unix_now};
use carma::task_view::failure_reason;
use carma::wall_time;

use super::spool_arg::SpoolArg;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

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
    let status: Option<Status> = read_json(&spool.status_file()).ok();
    let failed = spool
        .list(State::Failed)
        .map(|l| l.tasks)
        .unwrap_or_default();
    let recent_failures = failed[failed.len().saturating_sub(RECENT_FAILURES)..]
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
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        print_human(&out);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(out: &Output) {
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
        print_totals(out);
        return;
    };
    let age = out.age_s.unwrap_or(0.0);
    if out.daemon_running {
        println!(
            "carma daemon (pid {}) serving {} on {}; updated {age:.1} s ago",
            status.daemon_pid, out.spool, status.backend
        );
    } else {
        println!(
            "NO DAEMON serving {}; last status from pid {}, {age:.0} s ago:",
            out.spool, status.daemon_pid
        );
    }
    println!("\nGPU  memory used        SMACT  OCC   DRAM  source               tasks");
    let fraction = |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
    for g in &status.gpus {
        let memory = format!("{} / {}", format_mib(g.used_mib), format_mib(g.total_mib));
        let mut tasks = match &g.error {
            Some(e) => format!("ERROR: {e}"),
            None => g.tasks.join(", "),
        };
        if g.mig {
            tasks.push_str(" [MIG instance: single-GPU tasks, SMACT not measured]");
        }
        let source = g.source.map_or_else(|| "-".to_owned(), |s| s.to_string());
        println!(
            "{:<4} {memory:<20} {:<6.2} {:<5} {:<5} {source:<20} {tasks}",
            g.index,
            g.smact,
            fraction(g.occupancy),
            fraction(g.dram),
        );
    }
    let now = unix_now();
    println!("\nrunning ({})", status.running.len());
    for t in &status.running {
        let gpus: Vec<String> = t.gpus.iter().map(ToString::to_string).collect();
        let limit = t
            .time_limit_s
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .map_or_else(String::new, |l| format!(" of {}", wall_time::format(l)));
        println!(
            "  {}  run {} on GPU {} as {}, {:.0} s{limit}, peak {}",
            t.name,
            t.run,
            gpus.join(","),
            t.user,
            (now - t.since).max(0.0),
            format_mib(t.peak_mib)
        );
    }
    for (label, names) in [("recovery", &status.recovery), ("pending", &status.pending)] {
        println!("{label} ({})", names.len());
        for name in names.iter().take(20) {
            match status.waiting.iter().find(|w| w.name == *name) {
                Some(w) => println!(
                    "  {name}  {}{}, priority {}: {}",
                    w.user,
                    w.array
                        .as_ref()
                        .map_or_else(String::new, |a| format!(", array {a}")),
                    w.priority,
                    shorten(&w.why)
                ),
                None => println!("  {name}"),
            }
        }
        if names.len() > 20 {
            println!("  ... and {} more", names.len() - 20);
        }
    }
    if let Some(why) = &status.head_waits_for {
        println!("\nwaiting: {why}");
    }
    println!();
    print_totals(out);
}

/// Tasks that ended, and why the latest failures failed.
fn print_totals(out: &Output) {
    println!("done {}, failed {}", out.done, out.failed);
    if out.failed > out.recent_failures.len() {
        println!("  latest {}:", out.recent_failures.len());
    }
    for f in &out.recent_failures {
        match &f.reason {
            Some(reason) => println!("  {}  {}", f.name, shorten(reason)),
            None => println!("  {}", f.name),
        }
    }
}

/// At most one terminal line of a reason; `carma show` has the rest.
fn shorten(reason: &str) -> String {
    const WIDTH: usize = 100;
    match reason.char_indices().nth(WIDTH) {
        Some((end, _)) => format!("{}...", &reason[..end]),
        None => reason.to_string(),
    }
}
