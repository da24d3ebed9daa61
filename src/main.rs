//! The `carma` command line: argument parsing and dispatch; each command
//! lives in `commands/`.

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand};

use carma::config::Config;
use commands::deferred::Deferred;

/// Collocation-aware GPU job runner: shares GPUs between training jobs
/// without out-of-memory crashes.
#[derive(Parser)]
#[command(name = "carma", version)]
struct Cli {
    /// Configuration file overriding the built-in defaults (`carma config`
    /// prints them) [default: /etc/carma/carma.toml if it exists].
    #[arg(long, global = true, env = "CARMA_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the built-in default configuration (every key, commented).
    Config,
    /// Validate `.rad` job files without submitting them: print what carma
    /// reads from each valid one, and `FILE:LINE:COL: message` on stderr for
    /// each invalid one. Exits 1 if any file is invalid.
    Check {
        /// The `.rad` files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print one JSON object per valid file, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Replay a trace in virtual time on simulated GPUs and print its
    /// figures: what would this policy do on this trace?
    Simulate(Deferred<commands::simulate::Args>),
    /// Run job files on a Slurm cluster: memory as shards, OOM recovery
    /// inside the allocation.
    // Built before parsing, unlike the others: `help slurm` lists its own
    // subcommands, which clap copies from what is built by then.
    Slurm(commands::slurm::Args),
    /// A fake training job for simulated GPUs (tests and demos).
    #[command(hide = true)]
    FakeTrain(Deferred<commands::fake_train::Args>),
    /// Serve a spool: watch it, place jobs on GPUs, run them, recover
    /// them from out-of-memory crashes.
    #[command(after_long_help = commands::daemon::EXIT_STATUS)]
    Daemon(Deferred<commands::daemon::Args>),
    /// Check `.rad` files and submit them; prints each task's name.
    Submit(Deferred<commands::submit::Args>),
    /// Show queues and GPUs as the daemon sees them.
    Status(Deferred<commands::status::Args>),
    /// Show one task in full: state, owner, times, GPUs, estimate, and
    /// every run with how it ended and the end of its stderr.
    Show(Deferred<commands::show::Args>),
    /// Cancel a waiting or running task.
    Cancel(Deferred<commands::cancel::Args>),
    /// Keep a waiting task from starting until `carma release`.
    Hold(Deferred<commands::adjust::TaskArgs>),
    /// Let a held task start again.
    Release(Deferred<commands::adjust::TaskArgs>),
    /// Change a task's priority: higher runs first among waiting tasks.
    Priority(Deferred<commands::adjust::PriorityArgs>),
    /// Put a running task (its job stopped) or an ended one back in the
    /// queue.
    Requeue(Deferred<commands::adjust::TaskArgs>),
    /// Figures of what ran in a spool (the keys of `simulate --json`).
    Report(Deferred<commands::report::Args>),
    /// Turn a trace into fake-train job files and print a staggered
    /// submission script.
    Replay(Deferred<commands::replay::Args>),
    /// Estimate a job's GPU memory from its `.rad` file or a model summary.
    Estimate(Deferred<commands::estimate::Args>),
    /// Train the memory-estimator ensembles on the GPUMemNet data, or
    /// cross-validate them.
    Train(Deferred<commands::train::Args>),
    /// Print the completion script for a shell (bash, zsh, fish, elvish,
    /// powershell).
    Completions(Deferred<commands::completions::Args>),
    /// Print the manual page, or write every command's into a directory.
    Man(Deferred<commands::man::Args>),
    /// Run one job under supervision (started by the daemon).
    #[command(hide = true)]
    Supervise(Deferred<carma::supervise::Args>),
}

fn main() -> ExitCode {
    carma::journal::init();
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Daemon(_) | Command::Supervise(_)) {
        // Commands that print behave like other Unix tools when their
        // reader goes away (`carma status | head`): they end quietly. The
        // daemon and the supervisor keep Rust's default (SIGPIPE ignored,
        // errors returned), so a closed log stream cannot kill them.
        // SAFETY: no other thread exists yet, and SIG_DFL installs no code.
        let _ = unsafe {
            nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGPIPE,
                nix::sys::signal::SigHandler::SigDfl,
            )
        };
    }
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // In the journal, at error priority (`journalctl -p err`).
            let priority = if carma::journal::stderr_is_journal() {
                "<3>"
            } else {
                ""
            };
            eprintln!("{priority}carma: {}", carma::journal::shown(&describe(&e)));
            if e.is::<commands::daemon::NoNvml>() {
                ExitCode::from(commands::daemon::EXIT_NO_GPUS)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// An error and its causes on one line, each said once: many errors
/// already quote their cause (`spool X: Permission denied`), and repeating
/// it only confuses.
fn describe(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

/// The system-wide configuration, used when none is named.
const SYSTEM_CONFIG: &str = "/etc/carma/carma.toml";

fn run(mut cli: Cli) -> Result<ExitCode> {
    if cli.config.is_none() && std::path::Path::new(SYSTEM_CONFIG).exists() {
        cli.config = Some(PathBuf::from(SYSTEM_CONFIG));
    }
    match cli.command {
        Command::Config => {
            Config::load(cli.config.as_deref())?;
            print!("{}", carma::config::DEFAULT_TOML);
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { files, json } => commands::check::run(&files, json),
        Command::Simulate(Deferred(args)) => commands::simulate::run(cli.config.as_deref(), args),
        Command::Slurm(args) => commands::slurm::run(cli.config.as_deref(), args),
        Command::FakeTrain(Deferred(args)) => Ok(commands::fake_train::run(args)),
        Command::Daemon(Deferred(args)) => commands::daemon::run(cli.config.as_deref(), args),
        Command::Submit(Deferred(args)) => commands::submit::run(cli.config.as_deref(), args),
        Command::Status(Deferred(args)) => commands::status::run(cli.config.as_deref(), args),
        Command::Show(Deferred(args)) => commands::show::run(cli.config.as_deref(), args),
        Command::Cancel(Deferred(args)) => commands::cancel::run(cli.config.as_deref(), args),
        Command::Hold(Deferred(args)) => commands::adjust::hold(cli.config.as_deref(), args),
        Command::Release(Deferred(args)) => commands::adjust::release(cli.config.as_deref(), args),
        Command::Priority(Deferred(args)) => {
            commands::adjust::priority(cli.config.as_deref(), args)
        }
        Command::Requeue(Deferred(args)) => commands::adjust::requeue(cli.config.as_deref(), args),
        Command::Report(Deferred(args)) => commands::report::run(cli.config.as_deref(), args),
        Command::Replay(Deferred(args)) => commands::replay::run(args),
        Command::Estimate(Deferred(args)) => commands::estimate::run(cli.config.as_deref(), args),
        Command::Train(Deferred(args)) => commands::train::run(cli.config.as_deref(), args),
        Command::Completions(Deferred(args)) => commands::completions::run(Cli::command(), args),
        Command::Man(Deferred(args)) => commands::man::run(Cli::command(), args),
        Command::Supervise(Deferred(args)) => {
            carma::supervise::run(args)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
