//! `carma submit`: check job files and hand them to the spool.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use carma::config::Config;
use carma::daemon::status::Status;
use carma::rad;
use carma::spool::Spool;
use carma::spool::record::read_json;

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
            Ok(job) => {
                for warning in &job.warnings {
                    eprintln!("{warning}");
                }
                specs.push((file, job.spec));
            }
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
    if !config.daemon.allow_root_jobs {
        let root_owned: Vec<String> = specs
            .iter()
            .filter(|(file, _)| std::fs::metadata(file).is_ok_and(|m| m.uid() == 0))
            .map(|(file, _)| file.display().to_string())
            .collect();
        if !root_owned.is_empty() {
            eprintln!(
                "carma: {} owned by root: jobs run as the owner of their .rad, and carma \
                 runs no jobs as root unless daemon.allow_root_jobs is set; \
                 give the file to the user the job should run as (chown)",
                root_owned.join(", ")
            );
            eprintln!("carma: nothing submitted");
            return Ok(ExitCode::FAILURE);
        }
    }
    // The spool's owner (the daemon's user) makes what is missing; anyone
    // else uses the tree as it was installed.
    if !spool.staging().exists() {
        spool.create()?;
    }
    for (file, spec) in specs {
        let submitted = spool.submit(file, &spec)?;
        if let Some(warning) = &submitted.warning {
            eprintln!("carma: {}: {warning}", submitted.entry);
        }
        match submitted.name {
            Some(name) => println!("{name}"),
            None => println!("{}", receipt(&spool, &submitted.entry)),
        }
    }
    if !spool.daemon_running() {
        eprintln!(
            "carma: note: no daemon serves {} now; the jobs wait until one starts",
            spool.root().display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// How long a submitter waits to learn its task's name from the daemon.
const RECEIPT_PATIENCE: Duration = Duration::from_secs(5);

/// The task a submission by someone other than the spool's owner became:
/// the daemon numbers it when it takes it in, and says so in its status
/// file. Without a daemon (or a quick one), the submission's own name.
fn receipt(spool: &Spool, entry: &str) -> String {
    let deadline = Instant::now() + RECEIPT_PATIENCE;
    while spool.daemon_running() && Instant::now() < deadline {
        let status: Option<Status> = read_json(&spool.status_file()).ok();
        let found = status.and_then(|s| {
            s.adopted
                .into_iter()
                .find_map(|(submitted, name)| (submitted == entry).then_some(name))
        });
        if let Some(name) = found {
            return name;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "carma: submitted as pending/{entry}; the daemon gives it a task number when it takes it in"
    );
    entry.to_string()
}
