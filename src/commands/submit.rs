//! `carma submit`: check job files and hand them to the spool.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};

use carma::config::Config;
use carma::rad;
use carma::rad::DependencyRef;
use carma::sched::DependencyKind;

use super::spool_arg::SpoolArg;
use super::task_arg;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// The `.rad` files to submit; none is submitted unless all are valid.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Start once these tasks have started (like `sbatch
    /// --dependency=after:`): numbers, task names or job names, separated
    /// by commas; on top of the job file's own `after:`.
    #[arg(long, value_name = "TASKS")]
    after: Vec<String>,
    /// Start once these tasks have ended successfully (`afterok:`).
    #[arg(long, value_name = "TASKS")]
    afterok: Vec<String>,
    /// Start once these tasks have ended, however (`afterany:`).
    #[arg(long, value_name = "TASKS")]
    afterany: Vec<String>,
    /// Start once these tasks have ended unsuccessfully (`afternotok:`).
    #[arg(long, value_name = "TASKS")]
    afternotok: Vec<String>,
    /// Print only each task's number, one per line, for scripts:
    /// `id=$(carma submit --parsable prep.rad)`, then `--afterok $id`.
    #[arg(long)]
    parsable: bool,
}

impl Args {
    /// The dependencies given on the command line, checked by the rules of
    /// the job file's keys.
    fn dependencies(&self) -> Result<Vec<DependencyRef>> {
        let given = [
            (DependencyKind::After, &self.after),
            (DependencyKind::AfterOk, &self.afterok),
            (DependencyKind::AfterAny, &self.afterany),
            (DependencyKind::AfterNotOk, &self.afternotok),
        ];
        let mut all = Vec::new();
        for (kind, texts) in given {
            for text in texts {
                let refs = rad::dependencies(kind, text)
                    .map_err(|why| anyhow::anyhow!("--{} {text:?}: {why}", kind.key()))?;
                all.extend(refs);
            }
        }
        if all.len() > rad::MAX_DEPENDENCIES {
            bail!(
                "{} dependencies given; at most {} are taken",
                all.len(),
                rad::MAX_DEPENDENCIES
            );
        }
        Ok(all)
    }
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    let after = args.dependencies()?;
    if let Some(why) = spool.not_a_spool() {
        bail!(
            "{why}: start `carma daemon --spool {}` to make one (or set CARMA_SPOOL to the \
             spool a daemon serves); nothing submitted",
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
    let mut unnumbered = 0;
    for (file, spec) in specs {
        let submitted = spool.submit(file, &spec, &after)?;
        if let Some(warning) = &submitted.warning {
            eprintln!("carma: {}: {warning}", submitted.entry);
        }
        let name = submitted
            .name
            .or_else(|| task_arg::receipt(&spool, &submitted.entry));
        match (name, args.parsable) {
            (Some(name), true) => println!("{}", name.seq()),
            (Some(name), false) => println!("{name}"),
            (None, parsable) => {
                eprintln!(
                    "carma: submitted as pending/{}; the daemon gives it a task number when \
                     it takes it in",
                    submitted.entry
                );
                if !parsable {
                    println!("{}", submitted.entry);
                }
                unnumbered += 1;
            }
        }
    }
    if args.parsable && unnumbered > 0 {
        // Submitted all the same: a script must not submit it again, but
        // it has no number to chain on.
        eprintln!(
            "carma: --parsable: {unnumbered} submission(s) got no task number yet (do not \
             submit them again; `carma status` shows them once taken in)"
        );
        return Ok(ExitCode::from(3));
    }
    if !spool.daemon_running() {
        eprintln!(
            "carma: note: no daemon serves {} now; the jobs wait until one starts",
            spool.root().display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
