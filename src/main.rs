//! The `carma` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use carma::config::Config;

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
    }
}
