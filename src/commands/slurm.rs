//! `carma slurm`: submit job files to a Slurm cluster with their memory as
//! shards, and run them there under carma's OOM watch (see
//! [`carma::slurm`] for the design).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};

use carma::config::Config;
use carma::estimate::{Chain, EstimateInput};
use carma::job_script::conda::Search;
use carma::rad;
use carma::shell::quote;
use carma::slurm::request::Request;
use carma::slurm::script::{STEP_VAR, Submission};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SlurmCommand,
}

#[derive(clap::Subcommand)]
enum SlurmCommand {
    /// Estimate a `.rad` job file and submit it with `sbatch`: its memory
    /// as `--gres=shard:K`, a whole GPU as all the shards of one, N GPUs as
    /// `gpu:N` on a node of its own. Prints the Slurm job id alone on
    /// stdout, everything else on stderr.
    Submit {
        /// The job file (either syntax).
        file: PathBuf,
        /// Print the batch script and the `sbatch` arguments instead of
        /// submitting.
        #[arg(long)]
        dry_run: bool,
    },
    /// Run a job inside its Slurm allocation (the batch script calls
    /// this): its lines in one bash, its stderr watched for out-of-memory
    /// crashes, which are resubmitted with a whole GPU.
    Run {
        /// The job file, for a resubmission.
        #[arg(long)]
        rad: PathBuf,
        /// Which submission of the job this is, from 1.
        #[arg(long, default_value_t = 1)]
        attempt: u32,
        /// Memory granted per GPU, MiB: the MPS cap when the node runs
        /// MPS; absent for a whole GPU.
        #[arg(long)]
        granted_mib: Option<u64>,
        /// The batch script to run as the job.
        script: PathBuf,
    },
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let config_path = config_path
        .map(std::path::absolute)
        .transpose()
        .context("the configuration's path")?;
    match args.command {
        SlurmCommand::Submit { file, dry_run } => {
            let prepared = prepare(&config, config_path.as_deref(), &file, None)?;
            if dry_run {
                print!("{}", prepared.script);
                let args: Vec<String> = prepared.args.iter().map(|a| quote(a)).collect();
                println!(
                    "# {} {}",
                    quote(&config.slurm.sbatch.display().to_string()),
                    args.join(" ")
                );
                return Ok(ExitCode::SUCCESS);
            }
            println!("{}", sbatch(&config, &prepared)?);
            Ok(ExitCode::SUCCESS)
        }
        SlurmCommand::Run {
            rad,
            attempt,
            granted_mib,
            script,
        } => run_job(
            &config,
            config_path.as_deref(),
            &rad,
            attempt,
            granted_mib,
            &script,
        ),
    }
}

/// A submission ready for `sbatch`.
struct Prepared {
    script: String,
    args: Vec<String>,
}

/// Why a job is submitted again: its attempt, the Slurm job it replaces
/// and the signature that job died of.
struct Retry<'a> {
    attempt: u32,
    job_id: &'a str,
    signature: &'a str,
}

/// Reads and estimates `file` (or, for a retry, gives it a whole GPU) and
/// writes its batch script and `sbatch` arguments.
fn prepare(
    config: &Config,
    config_path: Option<&Path>,
    file: &Path,
    retry: Option<Retry<'_>>,
) -> Result<Prepared> {
    let job = rad::check_file(file)?;
    for warning in &job.warnings {
        eprintln!("{warning}");
    }
    let spec = job.spec;
    let rad = std::fs::canonicalize(file)
        .with_context(|| format!("cannot resolve {}", file.display()))?;
    let workdir = rad.parent().unwrap_or(Path::new("/")).to_owned();
    let name = spec.name.clone().unwrap_or_else(|| {
        file.file_stem()
            .map_or_else(|| "job".into(), |s| s.to_string_lossy().into_owned())
    });
    let retries = spec.retries.unwrap_or(config.recovery.max_retries);
    let (request, comment, attempt) = match &retry {
        Some(r) => (
            Request::whole(spec.gpus, &config.slurm),
            format!(
                "carma: attempt {} with a whole GPU after Slurm job {} ran out of memory ({})",
                r.attempt, r.job_id, r.signature
            ),
            r.attempt,
        ),
        None => {
            let (input, warning) = EstimateInput::from_spec(&spec, &workdir, &config.legacy);
            if let Some(warning) = warning {
                eprintln!("{}: warning: {warning}", file.display());
            }
            let estimate = Chain::new(&config.estimate).estimate(&input);
            eprintln!("{}: {}", file.display(), estimate.describe());
            let request = Request::new(
                estimate.need,
                spec.gpus,
                config.placement.margin_mib,
                &config.slurm,
            );
            let comment = format!("carma: {} from {}", estimate.need, estimate.source_text());
            (request, comment, 1)
        }
    };
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    let lines = carma::job_script::build(&spec.script, &Search::new(&config.daemon.conda, &home));
    let carma = if config.slurm.carma.as_os_str().is_empty() {
        std::env::current_exe().context("cannot find this carma's own path")?
    } else {
        config.slurm.carma.clone()
    };
    let submission = Submission {
        rad: &rad,
        name: &name,
        workdir: &workdir,
        lines: &lines,
        request: &request,
        time: spec.time,
        attempt,
        retries,
        comment: &comment,
        carma: &carma,
        config: config_path,
    };
    Ok(Prepared {
        script: submission.script(),
        args: submission.sbatch_args(),
    })
}

/// Submits with `sbatch --parsable`, the script on its standard input;
/// the job id. Not with what a job of carma's has in its environment
/// (sbatch passes it all on): a job that submits the next would hand it
/// the marker that says it runs under `carma slurm run` already, and its
/// own MPS settings.
fn sbatch(config: &Config, prepared: &Prepared) -> Result<String> {
    let sbatch = &config.slurm.sbatch;
    let mut command = Command::new(sbatch);
    command.env_remove(STEP_VAR);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CUDA_MPS_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .args(&prepared.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", sbatch.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(prepared.script.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{} failed ({})", sbatch.display(), out.status);
    }
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or_default();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
        bail!("{} printed no job id: {text:?}", sbatch.display());
    }
    Ok(id.to_string())
}

/// Whether an MPS control daemon serves `pipe_dir` from a directory no
/// other user could have made: on a node, nothing but its administrator
/// makes it, and a job pointed at a user's directory would be that
/// user's client.
fn mps_served(pipe_dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    carma::safe::private_dir(pipe_dir)?;
    // Checked as a user, `private_dir` lets a group write: here, as for
    // root, only root (or this user) may.
    let meta = std::fs::metadata(pipe_dir).map_err(|e| format!("{}: {e}", pipe_dir.display()))?;
    if meta.mode() & 0o022 != 0 {
        return Err(format!("{} is writable by others", pipe_dir.display()));
    }
    match pipe_dir.join("control").exists() {
        true => Ok(()),
        false => Err(format!(
            "no MPS control daemon serves {} (no control pipe)",
            pipe_dir.display()
        )),
    }
}

/// Runs the batch script as the job, copies its stderr through keeping
/// the tail, and on an OOM crash resubmits the job with a whole GPU while
/// retries last. Exits as the job did.
fn run_job(
    config: &Config,
    config_path: Option<&Path>,
    rad: &Path,
    attempt: u32,
    granted_mib: Option<u64>,
    script: &Path,
) -> Result<ExitCode> {
    let mut command = Command::new("bash");
    command
        .args(["--noprofile", "--norc"])
        .arg(script)
        .env(STEP_VAR, "job")
        .stderr(Stdio::piped());
    if config.mps.enabled {
        match mps_served(&config.mps.pipe_dir) {
            Ok(()) => {
                let gpus = std::env::var("CUDA_VISIBLE_DEVICES")
                    .map_or(1, |v| v.split(',').filter(|d| !d.is_empty()).count().max(1));
                command.envs(config.mps.job_env(gpus, granted_mib));
            }
            Err(why) => eprintln!(
                "carma: mps.enabled, but {why}: the job runs without MPS, and without a cap on \
                 its GPU memory"
            ),
        }
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot run bash {}", script.display()))?;
    let mut stderr = child.stderr.take().context("the job's stderr")?;
    let keep = usize::try_from(config.oom.stderr_tail_bytes).unwrap_or(usize::MAX);
    let mut tail = VecDeque::new();
    let mut buffer = [0u8; 8192];
    let mut ours = std::io::stderr();
    loop {
        let n = match stderr.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("reading the job's stderr"),
        };
        // The copy is best effort: the job must not die of a full or
        // closed output file; the tail is what matters.
        let _ = ours.write_all(&buffer[..n]);
        tail.extend(&buffer[..n]);
        let excess = tail.len().saturating_sub(keep);
        tail.drain(..excess);
    }
    let status = child.wait()?;
    let code = status.code().unwrap_or(1);
    if status.success() {
        return Ok(ExitCode::SUCCESS);
    }
    let text = String::from_utf8_lossy(tail.make_contiguous()).into_owned();
    let job_id = std::env::var("SLURM_JOB_ID").unwrap_or_else(|_| "?".into());
    let exit = ExitCode::from(u8::try_from(code).unwrap_or(1));
    let Some(signature) = config.oom.find(text.as_bytes()) else {
        return Ok(exit);
    };
    if granted_mib.is_none() {
        eprintln!(
            "carma: out of memory ({signature}) with a whole GPU: not resubmitted, the job needs more than a GPU holds"
        );
        return Ok(exit);
    }
    let retries = rad::check_file(rad)
        .ok()
        .and_then(|job| job.spec.retries)
        .unwrap_or(config.recovery.max_retries);
    if attempt > retries {
        eprintln!("carma: out of memory ({signature}); {retries} retries used, not resubmitted");
        return Ok(exit);
    }
    let retry = Retry {
        attempt: attempt + 1,
        job_id: &job_id,
        signature,
    };
    match prepare(config, config_path, rad, Some(retry)).and_then(|p| sbatch(config, &p)) {
        Ok(id) => eprintln!(
            "carma: out of memory ({signature}); resubmitted with a whole GPU as Slurm job {id}"
        ),
        Err(e) => eprintln!("carma: out of memory ({signature}); resubmitting failed: {e:#}"),
    }
    Ok(exit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mps_is_used_only_where_a_control_daemon_serves_a_private_directory() {
        let top = tempfile::tempdir().unwrap();
        let pipes = top.path().join("mps");
        std::fs::create_dir(&pipes).unwrap();
        std::fs::set_permissions(&pipes, std::fs::Permissions::from_mode(0o755)).unwrap();
        let why = mps_served(&pipes).unwrap_err();
        assert!(why.contains("no MPS control daemon serves"), "{why}");
        std::fs::write(pipes.join("control"), "").unwrap();
        assert_eq!(mps_served(&pipes), Ok(()));
        // A group's to write in (0775 root:gpu).
        std::fs::set_permissions(&pipes, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(
            mps_served(&pipes)
                .unwrap_err()
                .contains("writable by others")
        );
        // Anyone's to make names in (CUDA's default, /tmp/nvidia-mps).
        std::fs::set_permissions(&pipes, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let why = mps_served(&pipes).unwrap_err();
        assert!(why.contains("writable by others"), "{why}");
    }
}
