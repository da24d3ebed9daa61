//! What a task directory holds, and carma's records in it, as JSON.
//!
//! ```text
//! 000042-resnet50/         carma's, mode 0711: its owner reaches their files
//!                          by name, nobody lists it
//!   task.json        0600  TaskRecord: owner, submission, estimate, outcome
//!   reason           0400  why it failed (failed/ only), one line; the owner's
//!   job/             0700  carma's copies of what the user submitted:
//!     resnet50.rad         the job file
//!     resnet50_32.model    its model summary, at the path the .rad names
//!   dropped/         0700  a dropped entry that could not be read, kept as is
//!   work/            0700  the working directory of a dropped job; the owner's
//!   run-1/           0711  one directory per run (an OOM re-run is run-2)
//!     launch.json    0600  Launch: what the daemon asked the supervisor to run
//!     supervisor.json 0600 procfs::ProcessId: who runs it (pid + start time)
//!     supervisor.lock 0600 held by the supervisor while it lives
//!     job.sh         0400  the script bash runs; the owner's
//!     stdout, stderr 0600  the job's output; the owner's
//!     peak_mib       0600  the most GPU memory the daemon saw it use
//!     exit.json      0600  RunExit: how it ended (written last, atomically)
//! ```
//!
//! User files and carma's state never share a namespace: whatever a user
//! submits lands below `job/` (or `dropped/`), whatever its name, so no
//! submission can plant a `task.json` or a `run-1/`. carma's records are
//! written by carma (root, on a server) with mode 0600 and read back only
//! through [`read_state`], which refuses a file that someone else owns or
//! could have written.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use super::json::{MAX_RECORD_BYTES, read_json, read_state, to_json, unix_now, write_json};
use crate::sched::{DependencyKind, Need};
use crate::summary::hex_digest;

/// The longest command a fingerprint keeps as it is.
pub const COMMAND_KEPT: usize = 4096;

/// What identifies "the same job": its command, its model (the summary's
/// digest) and its batch size, and whose it is: one user's runs must not
/// set another user's estimates (unless the configuration shares them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The command ([`Fingerprint::command_identity`]).
    pub command: String,
    pub summary_digest: Option<String>,
    pub batch_size: Option<u64>,
    /// The job's user; `None` for history shared by all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<u32>,
}

impl Fingerprint {
    /// What of a job's command a fingerprint keeps: the command itself
    /// (trimmed) up to [`COMMAND_KEPT`] bytes, else its SHA-256. Every
    /// ended task's record and every history file holds a fingerprint: a
    /// script of a megabyte (of quotes, which JSON doubles) made each one
    /// megabytes on root's disk, past what a record may be to be read back.
    pub fn command_identity(command: &str) -> String {
        let command = command.trim();
        match command.len() <= COMMAND_KEPT {
            true => command.to_string(),
            false => format!("sha256:{}", hex_digest(command.as_bytes())),
        }
    }

    /// A file-name-safe key: SHA-256 over the parts, each
    /// length-prefixed so that no two fingerprints share a key by
    /// concatenation. Shared history keeps the keys it had before users
    /// were part of a job's identity.
    pub fn key(&self) -> String {
        let digest = self.summary_digest.as_deref().unwrap_or("");
        let batch = self.batch_size.map(|b| b.to_string()).unwrap_or_default();
        let mut text = String::new();
        for part in [self.command.trim(), digest, batch.as_str()] {
            text.push_str(&format!("{}:{part};", part.len()));
        }
        if let Some(user) = self.user {
            text.push_str(&format!("user:{user};"));
        }
        hex_digest(text.as_bytes())
    }
}

/// carma's record of a task, in the task directory.
pub const RECORD: &str = "task.json";
/// Why a task failed, for its owner, in the task directory.
pub const REASON: &str = "reason";
/// A run directory's records: how its job was launched, and how it ended
/// (written by its supervisor as its last act).
pub const LAUNCH: &str = "launch.json";
pub const EXIT: &str = "exit.json";
/// The owner's copy of an ended task's record and runs ([`OwnerCopy`]).
pub const OWNER_COPY: &str = "owner.json";
/// The subdirectory holding carma's copies of the user's files.
pub const JOB: &str = "job";
/// The subdirectory holding a dropped entry that could not be used.
pub const DROPPED: &str = "dropped";
/// The name a drop has inside its claim until its copy is durable: hidden
/// (never taken for a task's file) and keeping the original name, so an
/// interrupted claim can give it back.
pub const ORIGINAL: &[u8] = b".orig-";
/// The working directory of a job dropped as a bare file.
pub const WORK: &str = "work";

/// `task.json`: what is known about a task across its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The task's directory name.
    pub name: String,
    /// The `.rad` file's name inside the task directory.
    pub rad: String,
    /// When it entered the spool (Unix seconds).
    pub submitted_at: f64,
    /// Where the job runs: the directory `carma submit` was given the
    /// `.rad` from; `None` (a file dropped into `pending/`) means the task
    /// directory.
    #[serde(default)]
    pub workdir: Option<PathBuf>,
    /// The file mode creation mask the job runs with: its submitter's
    /// (`carma submit`'s own, as a shell's umask goes to the programs it
    /// starts); `None` (a dropped file) keeps the daemon's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// The user the job runs as: the owner of the `.rad` (or of the
    /// submitted directory) as the file system showed it when carma took it
    /// in, never anything a user wrote. This record is carma's own (mode
    /// 0600, read through [`read_state`]), so it can be trusted where the
    /// owner of a file the user could still change could not.
    #[serde(default)]
    pub owner: Option<u32>,
    /// The name the owner's submission had in `pending/` when it was not a
    /// task name carma gave (another user's `carma submit`), so that the
    /// submitter can learn the task's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_as: Option<String>,
    /// The estimate placement used, and where it came from.
    #[serde(default)]
    pub estimate: Option<EstimateNote>,
    /// OOM crashes so far.
    #[serde(default)]
    pub crashes: u32,
    /// The GPUs of the latest run, so a restarted daemon knows where a
    /// live run is even if its `launch.json` cannot be read.
    #[serde(default)]
    pub gpus: Vec<usize>,
    /// The job's identity in the estimators' history, once the task ended
    /// (boxed: a waiting task's record holds none).
    #[serde(default)]
    pub fingerprint: Option<Box<Fingerprint>>,
    /// The most GPU memory the job was seen to use, MiB (once it ended).
    /// With the fingerprint, what a restarted daemon rebuilds history from.
    #[serde(default)]
    pub peak_mib: Option<u64>,
    /// Seconds its last run took, when it ended in `done/` or `failed/`:
    /// history keeps the longest, for backfill to plan with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_s: Option<f64>,
    /// How it ended, once it has.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// Held by `carma hold`: it waits until `carma release`. Kept here,
    /// in carma's own record, so a hold survives the daemon's death.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// The priority `carma priority` gave, over the job file's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// The tasks the job waits for, by number, once its dependencies'
    /// names were resolved (`None` before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<ResolvedDependency>>,
    /// Dependencies given at submission (`carma submit --afterok 12`) on
    /// top of the job file's, as written; resolved with them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submitted_after: Vec<crate::rad::DependencyRef>,
    /// `carma requeue` asked for the running job to stop and the task to
    /// wait again: when the run ends, it goes back to `pending/`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requeue: bool,
    /// The array this task is an element of (`array:`), once the daemon
    /// took the submitted task in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<ArrayMember>,
}

/// A task's place in an array job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayMember {
    /// The array's number: that of the task submitted (its first element).
    pub job: u64,
    /// This element's index (`CARMA_ARRAY_INDEX`).
    pub index: u32,
    /// At most this many of the array's elements run at once (`%N`).
    #[serde(default)]
    pub at_once: Option<u32>,
    /// The first element only: every other element has been made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expanded: bool,
}

/// A dependency with the task it names found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedDependency {
    pub kind: DependencyKind,
    /// The task's number.
    pub task: u64,
}

impl TaskRecord {
    /// A task that just entered the spool and has not run.
    pub fn new(name: impl ToString, rad: impl Into<String>, submitted_at: f64) -> TaskRecord {
        TaskRecord {
            name: name.to_string(),
            rad: rad.into(),
            submitted_at,
            workdir: None,
            umask: None,
            owner: None,
            submitted_as: None,
            estimate: None,
            crashes: 0,
            gpus: Vec::new(),
            fingerprint: None,
            peak_mib: None,
            run_s: None,
            outcome: None,
            held: false,
            priority: None,
            after: None,
            submitted_after: Vec::new(),
            requeue: false,
            array: None,
        }
    }

    /// The record of a task sent back to the queue (`carma requeue`): it
    /// waits afresh, with no outcome and no crashes counted, keeping what
    /// was learnt (estimate, peak) and what its owner set (hold, priority,
    /// dependencies).
    pub fn requeued(&mut self) {
        self.outcome = None;
        self.crashes = 0;
        self.gpus.clear();
        self.requeue = false;
    }
}

/// An estimate as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateNote {
    pub need: Need,
    /// Which estimator answered (`history`, `declared: legacy line 9,
    /// oracle`, ...).
    pub source: String,
}

/// A task's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// `done` or `failed`.
    pub state: String,
    /// Why it failed.
    #[serde(default)]
    pub reason: Option<String>,
    /// When (Unix seconds).
    pub at: f64,
}

impl Outcome {
    /// A failure now, for `reason`.
    pub fn failed(reason: &str) -> Outcome {
        Outcome::failed_at(reason, unix_now())
    }

    /// A failure at Unix time `at`, for `reason`, kept as one line: a
    /// reason may quote a user's file name, and goes to the `reason`
    /// file, the administrator's notify hook (`CARMA_REASON`), `carma
    /// report --csv` and `status.json`, where an escape or a line break of
    /// the user's would act on whoever reads them.
    pub fn failed_at(reason: &str, at: f64) -> Outcome {
        Outcome {
            state: "failed".into(),
            reason: Some(crate::journal::one_line(reason)),
            at,
        }
    }
}

/// `launch.json`: everything the supervisor needs to run one run, written
/// by the daemon before the supervisor starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The task's name (`CARMA_TASK_ID`).
    pub task: String,
    /// 1 for the first run, 2 after one OOM crash, ...
    pub run: u32,
    /// GPU indices (`CARMA_GPUS`).
    pub gpus: Vec<usize>,
    /// Memory granted per GPU, MiB, when the placement granted a share.
    #[serde(default)]
    pub limit_mib: Option<u64>,
    /// The placement's explanation, for people.
    pub why: String,
    /// When the daemon launched it (Unix seconds).
    pub launched_at: f64,
    /// The job's script lines; one bash runs them.
    pub script: Vec<String>,
    /// The job's working directory.
    pub workdir: PathBuf,
    /// The job's file mode creation mask (see [`TaskRecord::umask`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// The user to become before running the job, when the supervisor is
    /// root; `None` runs it as the supervisor's own user.
    #[serde(default)]
    pub run_as: Option<RunAs>,
    /// `run_as`'s supplementary groups, looked up by the daemon as it
    /// launches (where its name service is loaded once, not in each
    /// supervisor: 1-2 ms of a job's start); `None` in launches from before
    /// and where the lookup failed, and the supervisor looks them up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<u32>>,
    /// The job's whole environment: nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Seconds between SIGTERM and SIGKILL when the job is cancelled.
    pub grace_s: f64,
    /// Wall time the job may run, seconds; the supervisor stops it there.
    #[serde(default)]
    pub time_limit_s: Option<f64>,
    /// Seconds between SIGTERM and SIGKILL at the time limit.
    #[serde(default)]
    pub time_limit_grace_s: f64,
    /// The cgroup the run's own cgroup is made under (see
    /// [`crate::cgroup`]); none: the job runs in a process group only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<PathBuf>,
    /// Host CPUs the run's cgroup allows, where its cpu controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Host memory the run's cgroup allows, MiB, where its memory
    /// controller is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory_mib: Option<u64>,
    /// Processes and threads the run's cgroup allows at once, where its
    /// pids controller is on (`queue.max_processes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_processes: Option<u64>,
    /// The task's OOM crashes before this run, as the daemon judged them:
    /// a run was an OOM crash when the next one counts more. `None` in a
    /// launch written before carma recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashes: Option<u32>,
    /// The boot it was launched in (`/proc/sys/kernel/random/boot_id`).
    /// Within that boot the page cache is the truth, so the supervisor's
    /// name need not be flushed before the job starts
    /// ([`crate::supervisor::may_have_started`]); `None` in launches from
    /// before, whose supervisors flushed it, and where the boot is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
}

impl Launch {
    /// The launch without the job's script and environment: what is kept
    /// of it beyond its run (the archive, the owner's copy), where a
    /// user's script of a megabyte, copied at every end, would be
    /// megabytes more on root's disk for each.
    pub fn without_script(self) -> Launch {
        Launch {
            script: Vec::new(),
            env: Vec::new(),
            ..self
        }
    }
}

/// A Linux user a job runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub home: PathBuf,
    /// The login shell, for the job's `SHELL`.
    #[serde(default)]
    pub shell: Option<PathBuf>,
}

/// `exit.json`: how a run ended, written by the supervisor as its last act.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunExit {
    /// When the job process started (Unix seconds).
    pub started_at: f64,
    /// When it ended.
    pub ended_at: f64,
    /// Exit status, when it exited.
    #[serde(default)]
    pub code: Option<i32>,
    /// Terminating signal, when it was killed.
    #[serde(default)]
    pub signal: Option<i32>,
    /// It was stopped on a user's request.
    #[serde(default)]
    pub cancelled: bool,
    /// It was stopped at its wall-time limit.
    #[serde(default)]
    pub timed_out: bool,
    /// The most GPU memory seen in use by the job, MiB (from the daemon's
    /// monitor).
    #[serde(default)]
    pub peak_mib: Option<u64>,
    /// The job could not be started at all (bad user, missing bash, ...).
    #[serde(default)]
    pub error: Option<String>,
    /// The start failed for a reason that passes (no memory, too many open
    /// files or processes, a full disk): the task waits and is started
    /// again, instead of failing for good.
    #[serde(default)]
    pub transient: bool,
    /// The start failed once the job's process was its user's (its
    /// working directory, its `exec`): the user may make it happen every
    /// time, so it is retried only a few times.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_its_user: bool,
    /// The most host memory the job's processes held together, MiB, where
    /// its cgroup measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_peak_mib: Option<u64>,
    /// CPU time the job's processes used, seconds, where its cgroup
    /// measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_s: Option<f64>,
    /// Processes of the job the kernel's OOM killer ended because the
    /// run's host memory reached its cap (`host_memory:`, the cgroup's
    /// `memory.max`); absent when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_oom_kills: Option<u64>,
}

impl RunExit {
    /// A run that started at `at` and of which nothing else is known yet:
    /// what the supervisor fills in as the run goes.
    pub fn started(at: f64) -> RunExit {
        RunExit {
            started_at: at,
            ended_at: at,
            code: None,
            signal: None,
            cancelled: false,
            timed_out: false,
            peak_mib: None,
            error: None,
            transient: false,
            as_its_user: false,
            host_peak_mib: None,
            cpu_s: None,
            host_oom_kills: None,
        }
    }

    /// The run ended with status 0.
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && self.error.is_none() && !self.cancelled && !self.timed_out
    }

    /// How it ended, for people: `exit status 3`, `killed by SIGKILL`.
    pub fn describe(&self) -> String {
        if let Some(error) = &self.error {
            return format!("could not start: {error}");
        }
        let how = match (self.code, self.signal) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
                Ok(s) => format!("killed by {s}"),
                Err(_) => format!("killed by signal {signal}"),
            },
            (None, None) => "ended without a status".into(),
        };
        match self.host_oom_kills {
            Some(n) if n > 0 => format!(
                "{how}, out of host memory: the kernel ended {n} of its processes at its \
                 host_memory: cap"
            ),
            _ => how,
        }
    }
}

/// Writes a task's `reason` file: one line, for its owner to read (mode
/// 0400, owned by the job's user when carma is root). carma itself never
/// reads it back; the reason it acts on is in the record.
pub fn write_reason(dir: &Path, owner: Option<u32>, reason: &str) -> io::Result<()> {
    let text = format!("{}\n", crate::journal::one_line(reason));
    super::atomic::write_durable_as(&dir.join(REASON), text.as_bytes(), 0o400, owner_ids(owner))
}

/// What a task's owner may read of carma's own files about it, which are
/// root's: the record and how each run started and ended. Written, the
/// owner's, when the task ends; carma never reads it back (its owner could
/// have changed it), only the owner's own `carma show` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerCopy {
    pub record: TaskRecord,
    pub runs: Vec<OwnerRun>,
}

/// One run in an [`OwnerCopy`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnerRun {
    pub run: u32,
    pub launch: Option<Launch>,
    pub exit: Option<RunExit>,
}

/// Writes the owner's copy of ended task `record` into its directory
/// `dir`; nothing where the owner can read carma's files already (a daemon
/// that is not root runs only its own user's jobs).
pub fn write_owner_copy(dir: &Path, owner: Option<u32>, record: &TaskRecord) -> io::Result<()> {
    let Some(ids) = owner_ids(owner).filter(|&(uid, _)| uid != 0) else {
        return Ok(());
    };
    let runs = kept_runs(dir)
        .map(|run| {
            let run_dir = dir.join(format!("run-{run}"));
            OwnerRun {
                run,
                launch: read_state(&run_dir.join(LAUNCH))
                    .ok()
                    .map(Launch::without_script),
                exit: read_state(&run_dir.join(EXIT)).ok(),
            }
        })
        .collect();
    let copy = OwnerCopy {
        record: record.clone(),
        runs,
    };
    super::atomic::write_durable_as(&dir.join(OWNER_COPY), &to_json(&copy), 0o400, Some(ids))
}

/// Runs whose `launch.json` a task keeps: the latest. A task requeued
/// again and again gathers runs, each `launch.json` as large as its job's
/// script and root's, on root's disk: an older run keeps its exit and its
/// output, not its launch, so that a task holds at most this many
/// launches, which count against its owner's limits
/// (`queue.user_max_spool_mib`, `user_max_ended_mib`). An owner's copy,
/// written as the task ends on the daemon's loop, tells of these runs too:
/// reading every run at every end grew with the square of the requeues.
pub const KEPT_RUNS: u32 = 32;

/// The runs of the task directory `dir` that keep their launch: the
/// latest [`KEPT_RUNS`] (runs are numbered from 1 without a gap).
pub fn kept_runs(dir: &Path) -> std::ops::RangeInclusive<u32> {
    let ran = |run: u32| {
        std::fs::symlink_metadata(dir.join(format!("run-{run}"))).is_ok_and(|m| m.is_dir())
    };
    // Found in a few looks however many runs there were (doubling, then
    // halving): a task requeued again and again is looked at at each
    // intake and end.
    let (mut last, mut missing) = (0u32, 1u32);
    while ran(missing) {
        last = missing;
        missing = missing.saturating_mul(2);
        if missing == u32::MAX {
            break;
        }
    }
    while missing - last > 1 {
        let middle = last + (missing - last) / 2;
        match ran(middle) {
            true => last = middle,
            false => missing = middle,
        }
    }
    last.saturating_sub(KEPT_RUNS - 1).max(1)..=last
}

/// Bytes of the launches the task directory `dir` keeps ([`KEPT_RUNS`]):
/// root's copies of its job's script, counted with its job files.
pub fn kept_launch_bytes(dir: &Path) -> u64 {
    kept_runs(dir)
        .filter_map(|run| {
            std::fs::symlink_metadata(dir.join(format!("run-{run}")).join(LAUNCH)).ok()
        })
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Removes the launches of the task directory `dir`'s runs `runs`: the
/// oldest kept one's as a new run starts, and all that are kept when the
/// task's copies go; a missing one is no error.
pub fn drop_launches(dir: &Path, runs: std::ops::RangeInclusive<u32>) -> std::io::Result<()> {
    for run in runs {
        match std::fs::remove_file(dir.join(format!("run-{run}")).join(LAUNCH)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The copy of an ended task's record and runs that carma gave its owner,
/// when the caller is that owner (a file of theirs, read beneath carma's
/// task directory `dir` without following links). Never carma's state.
pub fn read_owner_copy(dir: &Path) -> Option<OwnerCopy> {
    let (bytes, meta) = crate::safe::read_beneath(dir, OWNER_COPY, MAX_RECORD_BYTES * 4).ok()?;
    (meta.uid() == nix::unistd::geteuid().as_raw())
        .then(|| serde_json::from_slice(&bytes).ok())
        .flatten()
}

/// The uid and primary gid a file carma makes for a job's user gets: only
/// when carma is root (anyone else owns what it makes already).
pub fn owner_ids(owner: Option<u32>) -> Option<(u32, u32)> {
    let uid = owner.filter(|_| nix::unistd::geteuid().is_root())?;
    let gid = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or(uid, |u| u.gid.as_raw());
    Some((uid, gid))
}

/// Hands a directory carma just made to the job's user, without following
/// a link at its name (`fchownat(AT_SYMLINK_NOFOLLOW)`).
pub fn give_dir_to_owner(path: &Path, owner: Option<u32>) -> io::Result<()> {
    let Some((uid, gid)) = owner_ids(owner) else {
        return Ok(());
    };
    nix::unistd::fchownat(
        nix::fcntl::AT_FDCWD,
        path,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reason_is_one_line_whatever_the_file_name_it_quotes() {
        // A drop named with an escape sequence and a line break, refused.
        let quoted = "pending/x\u{1b}]0;pwned\u{7}\n<0>forged.rad: empty";
        let outcome = super::Outcome::failed_at(quoted, 0.0);
        let reason = outcome.reason.unwrap();
        assert_eq!(
            reason,
            "pending/x\\u{1b}]0;pwned\\u{7}\\n<0>forged.rad: empty"
        );
        let dir = tempfile::tempdir().unwrap();
        super::write_reason(dir.path(), None, quoted).unwrap();
        let written = std::fs::read_to_string(dir.path().join(super::REASON)).unwrap();
        assert_eq!(written, format!("{reason}\n"));
    }

    #[test]
    fn an_owners_copy_tells_of_the_latest_runs() {
        let dir = tempfile::tempdir().unwrap();
        assert!(super::kept_runs(dir.path()).is_empty());
        for run in 1..=3 {
            std::fs::create_dir(dir.path().join(format!("run-{run}"))).unwrap();
        }
        assert_eq!(super::kept_runs(dir.path()), 1..=3);
        for run in 4..=40 {
            std::fs::create_dir(dir.path().join(format!("run-{run}"))).unwrap();
        }
        assert_eq!(super::kept_runs(dir.path()), 9..=40);
        for run in 41..=100 {
            std::fs::create_dir(dir.path().join(format!("run-{run}"))).unwrap();
        }
        assert_eq!(super::kept_runs(dir.path()), 69..=100);
        let one = tempfile::tempdir().unwrap();
        std::fs::create_dir(one.path().join("run-1")).unwrap();
        assert_eq!(super::kept_runs(one.path()), 1..=1);
    }

    use super::*;

    #[test]
    fn records_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("task.json");
        let record = TaskRecord {
            owner: Some(1000),
            estimate: Some(EstimateNote {
                need: Need::WholeGpu,
                source: "declared".into(),
            }),
            crashes: 1,
            ..TaskRecord::new("000001-x", "x.rad", 1.5)
        };
        write_json(&path, &record).unwrap();
        assert_eq!(read_state::<TaskRecord>(&path).unwrap(), record);
        std::fs::write(&path, "{").unwrap();
        let err = read_json::<TaskRecord>(&path).unwrap_err();
        assert!(err.to_string().contains("task.json"), "{err}");
    }

    #[test]
    fn a_record_someone_else_could_write_is_not_state() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("task.json");
        write_json(&path, &TaskRecord::new("000001-x", "x.rad", 1.5)).unwrap();
        read_state::<TaskRecord>(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = read_state::<TaskRecord>(&path).unwrap_err();
        assert!(err.to_string().contains("not carma's record"), "{err}");
        // Informational reads still work.
        read_json::<TaskRecord>(&path).unwrap();
    }

    #[test]
    fn exits_describe_themselves() {
        let mut exit = RunExit {
            ended_at: 1.0,
            code: Some(0),
            ..RunExit::started(0.0)
        };
        assert!(exit.succeeded());
        exit.code = None;
        exit.signal = Some(9);
        assert_eq!(exit.describe(), "killed by SIGKILL");
        exit.code = Some(3);
        assert_eq!(exit.describe(), "exit status 3");
        // Its cgroup's memory cap ended a process: said, or "exit status
        // 137" would leave its owner guessing.
        exit.code = Some(137);
        exit.host_oom_kills = Some(1);
        assert_eq!(
            exit.describe(),
            "exit status 137, out of host memory: the kernel ended 1 of its processes at its \
             host_memory: cap"
        );
    }
}
