//! `carma submit`: check job files and hand them to the spool.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};

use carma::config::Config;
use carma::rad;

use super::spool_arg::SpoolArg;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// The `.rad` files to submit; none is submitted unless all are valid.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    if !spool.root().is_dir() {
        bail!(
            "no spool at {}: start `carma daemon --spool {}` first (or set CARMA_SPOOL)",
            spool.root().display(),
            spool.root().display()
        );
    }
    let mut specs = Vec::new();
    let mut bad = 0;
    for file in &args.files {
        match rad::check_file(file) {
            Ok(spec) => specs.push((file, spec)),
            Err(e) => {
                eprintln!("{e}");
                bad += 1;
            }
        }
    }
    if bad > 0 {
        eprintln!("carma: {bad} invalid file(s); nothing submitted");
        return Ok(ExitCode::FAILURE);
    }
    spool.create()?;
    for (file, spec) in specs {
        let name = spool.submit(file, &spec)?;
        println!("{name}");
    }
    if !spool.daemon_running() {
        eprintln!(
            "carma: note: no daemon serves {} now; the jobs wait until one starts",
            spool.root().display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
