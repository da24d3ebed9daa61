//! `carma submit`: check job files and hand them to the spool.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use carma::config::Config;
use carma::journal::shown;
use carma::rad;
use carma::rad::DependencyRef;
use carma::sched::DependencyKind;
use carma::spool::socket::{HandOver, Receipt, Settled, Unsent};
use carma::spool::{Spool, TaskName};

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
                    eprintln!("{}", shown(&warning.to_string()));
                }
                specs.push((file, job.spec));
            }
            Err(e) => {
                eprintln!("{}", shown(&e.to_string()));
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
    let jobs: Vec<(&Path, &carma::rad::TaskSpec)> = specs
        .iter()
        .map(|(file, spec)| (file.as_path(), spec))
        .collect();
    if let Some(code) = hand_over(&spool, &jobs, &after, args.parsable)? {
        return Ok(code);
    }
    let mut batch = spool.submit(&jobs, &after).context("nothing submitted")?;
    if let Some(warning) = &batch.warning {
        eprintln!("carma: {}", shown(warning));
    }
    let mut unnumbered = 0;
    let handed = std::mem::take(&mut batch.submitted);
    for submitted in &handed {
        let name = submitted
            .name
            .clone()
            .or_else(|| task_arg::receipt(&spool, &submitted.entry));
        match (name, args.parsable) {
            (Some(name), true) => println!("{}", name.seq()),
            (Some(name), false) => println!("{name}"),
            (None, parsable) => {
                if let Some(warning) = batch.flush() {
                    eprintln!("carma: {warning}");
                }
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
    if let Some(e) = batch.failed {
        let left = args.files.len() - handed.len();
        eprintln!("carma: {e}; the last {left} file(s) were not submitted");
        return Ok(ExitCode::FAILURE);
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

/// How long a submitter whose daemon died before it answered waits for
/// the next daemon to say what became of its jobs.
const SETTLE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Hands another user's jobs to the daemon over its socket when it
/// listens there ([`carma::spool::socket`]): the exit code once it
/// answered for any of them, `None` when nothing was taken (no daemon
/// listens, it declined, or a job cannot go that way) and the jobs go by
/// the file path. carma's own user makes whole, numbered tasks in the
/// spool by itself, without waiting for the daemon: measured, its jobs
/// ran no sooner by the socket, and a burst of them slower (each submit
/// then waited for a turn of the daemon's loop, launches and all).
fn hand_over(
    spool: &Spool,
    jobs: &[(&Path, &carma::rad::TaskSpec)],
    after: &[DependencyRef],
    parsable: bool,
) -> Result<Option<ExitCode>> {
    if spool.is_mine() || !spool.socket_path().exists() {
        return Ok(None);
    }
    let mut handed = Vec::with_capacity(jobs.len());
    for (file, spec) in jobs {
        match spool.socket_job(file, spec).context("nothing submitted")? {
            Some(job) => handed.push(job),
            None => return Ok(None),
        }
    }
    let token = format!(
        "submit-{}-{}-{}",
        nix::unistd::geteuid(),
        std::process::id(),
        carma::spool::record::unix_now().to_bits()
    );
    let HandOver { mut receipts, rest } = spool.hand_over(handed, after, &token);
    // A request the daemon died over: the next daemon says what became of
    // it.
    let rest = match rest {
        Some(Unsent::Unanswered(unanswered)) => match spool.settle(&unanswered, SETTLE_PATIENCE) {
            Settled::Taken(names) => {
                receipts.extend(names.into_iter().map(|name| Receipt {
                    name: Some(name),
                    refused: None,
                }));
                (receipts.len() < jobs.len())
                    .then(|| Unsent::NotServed("the daemon stopped while it took them in".into()))
            }
            Settled::NotTaken => Some(Unsent::NotServed(
                "the daemon stopped before it took them in".into(),
            )),
            Settled::Unknown => Some(Unsent::Unanswered(unanswered)),
        },
        rest => rest,
    };
    if let (true, Some(Unsent::NotServed(why))) = (receipts.is_empty(), &rest) {
        log::debug!("the daemon's socket did not take the jobs ({why}); by pending/ instead");
        return Ok(None);
    }
    let mut failed = false;
    for ((file, _), receipt) in jobs.iter().zip(&receipts) {
        match (&receipt.name, &receipt.refused) {
            (Some(name), refused) => {
                match TaskName::parse(name) {
                    Some(task) if parsable => println!("{}", task.seq()),
                    _ => println!("{name}"),
                }
                if let Some(why) = refused {
                    eprintln!(
                        "carma: {name} ({}) will not run: {}",
                        shown(&file.display().to_string()),
                        shown(why)
                    );
                    failed = true;
                }
            }
            (None, why) => {
                eprintln!(
                    "carma: {}: not submitted: {}",
                    file.display(),
                    why.as_deref().unwrap_or("no reason given")
                );
                failed = true;
            }
        }
    }
    let left = jobs.len() - receipts.len();
    match rest {
        None => {}
        Some(Unsent::NotServed(why)) => {
            eprintln!("carma: {why}; the last {left} file(s) were not submitted");
            failed = true;
        }
        Some(Unsent::Unanswered(unanswered)) => {
            eprintln!(
                "carma: the daemon stopped before it answered, and no daemon has said since \
                 whether it took the last {left} file(s): the next one runs them if it did \
                 (`carma show {}` finds them once it serves); do not submit them again \
                 before you know",
                unanswered.token
            );
            return Ok(Some(ExitCode::from(3)));
        }
    }
    Ok(Some(match failed {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }))
}
