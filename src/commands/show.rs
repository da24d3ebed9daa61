//! `carma show TASK`: one task in full, like Slurm's `scontrol show job`:
//! its state, owner, times, GPUs, estimate, and every run with how it
//! ended and the last lines of its stderr. A failure then says more than
//! "exit status 2" without anyone digging through the spool.
//!
//! Root sees everything; other users see their own task's reason and
//! output, and of anyone's only what `carma status` shows (see
//! [`carma::task_view`]).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use carma::config::Config;
use carma::size::format_mib;
use carma::spool::status::Status;
use carma::task_view::{self, RunView, Scope, TaskView};
use carma::wall_time::{length as duration, utc};

use super::spool_arg::SpoolArg;
use super::task_arg::find_with;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// The task: its full name, its number, a unique prefix, or its job
    /// name (the waiting or running task of that name, else the one that
    /// ended).
    task: String,
    /// Lines of each run's stderr to show.
    #[arg(long, short = 'n', default_value_t = 10)]
    lines: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    let status = Status::read(&spool.status_file()).ok();
    let (state, name) = find_with(&spool, &args.task, status.as_ref())?;
    let scope = Scope {
        tail_lines: args.lines,
        oom: &config.oom,
        status: status.as_ref(),
    };
    let view = task_view::gather(&spool, state, &name, scope)?;
    if args.json {
        println!("{}", serde_json::to_string(&view)?);
    } else {
        print_human(&view, args.lines);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_human(view: &TaskView, lines: usize) {
    println!("{}: {}", view.name, view.state);
    let field = |label: &str, value: Option<String>| {
        if let Some(value) = value {
            println!("  {label:<9}  {value}");
        }
    };
    field("reason", view.reason.clone());
    field("waiting", view.waiting.clone());
    field(
        "priority",
        view.priority
            .map(|p| format!("{p}{}", if view.held { ", held" } else { "" })),
    );
    field(
        "owner",
        match (&view.owner, view.owner_uid) {
            (Some(name), Some(uid)) => Some(format!("{name} (uid {uid})")),
            (Some(name), None) => Some(name.clone()),
            (None, Some(uid)) => Some(format!("uid {uid}")),
            (None, None) => None,
        },
    );
    field("submitted", view.submitted_at.map(utc));
    field("started", view.started_at.map(utc));
    field(
        "ended",
        view.ended_at.map(|end| match view.started_at {
            Some(start) => format!("{} (after {})", utc(end), duration(end - start)),
            None => utc(end),
        }),
    );
    field(
        "GPUs",
        (!view.gpus.is_empty()).then(|| gpu_list(&view.gpus)),
    );
    field(
        "estimate",
        view.estimate
            .as_ref()
            .map(|e| format!("{} per GPU, from {}", e.need, e.source)),
    );
    field("peak", view.peak_mib.map(format_mib));
    if view.record_error.is_some() {
        println!(
            "  (carma's record of the task is root's: its times, estimate and how each run \
             ended are for root to see)"
        );
    }
    for run in &view.runs {
        print_run(run, lines);
    }
}

fn print_run(run: &RunView, lines: usize) {
    let mut about = Vec::new();
    if !run.gpus.is_empty() {
        about.push(format!("GPU {}", gpu_list(&run.gpus)));
    }
    if let Some(start) = run.started_at.or(run.launched_at) {
        about.push(format!("started {}", utc(start)));
    }
    match (&run.exit, run.ended_at, run.started_at) {
        (Some(exit), Some(end), Some(start)) => {
            about.push(format!("{exit} after {}", duration(end - start)));
        }
        (Some(exit), _, _) => about.push(exit.clone()),
        (None, _, _) => {}
    }
    match run.oom {
        Some(true) => about.push("out of GPU memory".into()),
        Some(false) if run.exit.is_some() => about.push("no OOM".into()),
        _ => {}
    }
    if let Some(peak) = run.peak_mib {
        about.push(format!("peak {}", format_mib(peak)));
    }
    if let Some(host) = run.host_peak_mib {
        about.push(format!("host memory peak {}", format_mib(host)));
    }
    if let Some(cpu) = run.cpu_s {
        about.push(format!("{cpu:.1} CPU s"));
    }
    match about.is_empty() {
        true => println!("\nrun-{}", run.run),
        false => println!("\nrun-{}: {}", run.run, about.join(", ")),
    }
    println!("  stdout at {}", run.stdout_path.display());
    println!("  stderr at {}", run.stderr_path.display());
    match &run.stderr_error {
        Some(why) => println!("  stderr: {why}"),
        None if run.stderr_tail.is_empty() => println!("  stderr: empty"),
        None => {
            let shown = run.stderr_tail.len();
            let last = if shown < lines {
                "all".to_string()
            } else {
                format!("last {shown} lines")
            };
            println!("  stderr ({last}):");
            for line in &run.stderr_tail {
                println!("    {line}");
            }
        }
    }
}

fn gpu_list(gpus: &[usize]) -> String {
    gpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
