//! `carma simulate`: replay a trace through the scheduling core in virtual
//! time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use carma::config::Config;
use carma::rad::MemoryLine;
use carma::sched::Policy;
use carma::simulate::{self, Sharing};

#[derive(clap::Args)]
pub struct Args {
    /// Trace CSV (the format of shared/data/carma/traces).
    #[arg(long)]
    trace: PathBuf,
    /// GPUs and their memory, e.g. 4x40GiB or 2x40GiB,2x80GiB.
    #[arg(long, default_value = "4x40GiB")]
    gpus: String,
    /// Placement policy [default: placement.policy of the configuration].
    #[arg(long)]
    policy: Option<Policy>,
    /// Which trace column the scheduler sees as each task's estimate.
    #[arg(long, value_enum, default_value = "oracle")]
    estimator: MemoryLine,
    /// How collocated tasks share a GPU [default: simulate.sharing].
    #[arg(long, value_enum)]
    sharing: Option<SharingArg>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum SharingArg {
    Mps,
    Streams,
}

pub fn run(config: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config)?;
    let trace = simulate::trace::load(&args.trace)?;
    let gpus = carma::size::parse_gpu_set(&args.gpus)
        .map_err(|e| anyhow::anyhow!("--gpus {}: column {}: {}", args.gpus, e.column, e.message))?;
    let mut rules = config.rules();
    if let Some(policy) = args.policy {
        rules.placement.policy = policy;
    }
    let mut model = config.simulate.clone();
    if let Some(sharing) = args.sharing {
        model.sharing = match sharing {
            SharingArg::Mps => Sharing::Mps,
            SharingArg::Streams => Sharing::Streams,
        };
    }
    let policy = rules.placement.policy;
    let setup = simulate::Setup {
        gpus,
        estimator: args.estimator,
        rules,
        model,
    };
    let m = simulate::run(&trace, &setup);
    if args.json {
        println!("{}", serde_json::to_string(&m)?);
    } else {
        println!(
            "trace {} on {} with {policy}, estimator {}:",
            args.trace.display(),
            args.gpus,
            args.estimator
        );
        println!("{m}");
    }
    Ok(ExitCode::SUCCESS)
}
