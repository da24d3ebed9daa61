//! The `carma` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use carma::config::Config;
use carma::estimate::{EstimatorKind, TrainParams};

mod cli;

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
    /// Estimate a job's GPU memory from its `.rad` file or a model summary.
    Estimate {
        /// A `.rad` job file, or a model summary (torchsummary, torchinfo
        /// or annotated module print).
        input: PathBuf,
        /// Batch size (required for a bare summary without one).
        #[arg(long)]
        batch_size: Option<u64>,
        /// Estimators to ask, in order, instead of the configured chain
        /// (e.g. `ensemble,analytic`).
        #[arg(long, value_delimiter = ',')]
        estimators: Option<Vec<EstimatorKind>>,
        /// Print JSON (`mib`, `source`, `bucket`, `features`, ...).
        #[arg(long)]
        json: bool,
    },
    /// Train the memory-estimator ensembles on the GPUMemNet data, or
    /// cross-validate them.
    Train {
        /// Directory with mlp_data.csv and cnn_data.csv.
        #[arg(long)]
        data: PathBuf,
        /// Write the models (memory-ensemble.json) into this directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Cross-validate with this many stratified folds and print the
        /// scores.
        #[arg(long)]
        cv: Option<usize>,
        /// Print cross-validation scores as JSON.
        #[arg(long)]
        json: bool,
        /// Seed of every random choice (bootstrap samples, folds).
        #[arg(long, default_value_t = TrainParams::default().seed)]
        seed: u64,
        /// Trees per ensemble.
        #[arg(long, default_value_t = TrainParams::default().trees)]
        trees: usize,
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
        Command::Estimate {
            input,
            batch_size,
            estimators,
            json,
        } => {
            let config = Config::load(cli.config.as_deref())?;
            let args = cli::estimate::EstimateArgs {
                input,
                batch_size,
                estimators,
                json,
            };
            cli::estimate::run(&args, &config.estimate)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Train {
            data,
            out,
            cv,
            json,
            seed,
            trees,
        } => {
            let config = Config::load(cli.config.as_deref())?;
            let args = cli::train::TrainArgs {
                data,
                out,
                cv,
                json,
                params: TrainParams {
                    trees,
                    seed,
                    ..TrainParams::default()
                },
                quantile: config.estimate.quantile,
            };
            cli::train::run(&args)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
