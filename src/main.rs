//! The `carma` command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use serde::Serialize;

use carma::config::Config;
use carma::rad::{self, TaskSpec};

/// Collocation-aware GPU job runner: shares GPUs between training jobs
/// without out-of-memory crashes.
#[derive(Parser)]
#[command(name = "carma", version)]
struct Cli {
    /// Configuration file overriding the built-in defaults
    /// (`carma config` prints them).
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
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("carma: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Config => {
            Config::load(cli.config.as_deref())?;
            print!("{}", carma::config::DEFAULT_TOML);
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { files, json } => check(&files, json),
    }
}

/// One valid file in `carma check --json` output.
#[derive(Serialize)]
struct Checked<'a> {
    /// The path as given on the command line.
    file: String,
    #[serde(flatten)]
    spec: &'a TaskSpec,
}

/// Checks every file, reporting each bad one and going on: a user fixing a
/// directory of jobs wants all the errors at once.
fn check(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    // Written with `writeln!` so that a closed pipe (`| head`) ends the
    // command with an error instead of a panic.
    let mut out = std::io::stdout().lock();
    let mut all_valid = true;
    for file in files {
        match rad::check_file(file) {
            Ok(spec) if json => {
                let checked = Checked {
                    file: file.display().to_string(),
                    spec: &spec,
                };
                writeln!(out, "{}", serde_json::to_string(&checked)?)?;
            }
            Ok(spec) => writeln!(out, "{}: ok\n{spec}", file.display())?,
            Err(e) => {
                eprintln!("{e}");
                all_valid = false;
            }
        }
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
