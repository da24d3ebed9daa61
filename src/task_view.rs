//! One task as people ask about it (`carma show`, the failures `carma
//! status` lists): state, owner, times, GPUs, estimate, and every run with
//! how it ended and the end of its stderr.
//!
//! It is gathered with the caller's own rights, never more. carma's records
//! (`task.json`, `launch.json`, `exit.json`) are root's and mode 0600: root
//! (the daemon's user) reads them, through [`read_state`] only.
//! Anyone else gets what the files they may read and the daemon's public
//! `status.json` say: the task's state, and, for their own task, its
//! `reason` and their runs' stderr (theirs, mode 0600) — the kernel, not
//! this code, keeps other users' output from them. Nothing is read through
//! a link or from a FIFO, and a job's text is escaped before it can reach a
//! terminal.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::journal::one_line;
use crate::oom::OomRules;
use crate::safe::{read_beneath, read_tail_beneath};
use crate::spool::record::{
    EstimateNote, Launch, OWNER_COPY, OwnerRun, REASON, RunExit, TaskRecord, read_owner_copy,
    read_state,
};
use crate::spool::status::Status;
use crate::spool::{Spool, State, TaskName};
use crate::supervisor;

/// What the caller may know of one task.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    pub name: String,
    /// The state directory it is in: `pending`, `running`, ... `failed`.
    pub state: String,
    /// The user the job runs as, and their name where it resolves.
    pub owner_uid: Option<u32>,
    pub owner: Option<String>,
    /// Unix seconds.
    pub submitted_at: Option<f64>,
    pub started_at: Option<f64>,
    pub ended_at: Option<f64>,
    /// The GPUs of the latest run.
    pub gpus: Vec<usize>,
    /// The estimate placement used, and which estimator gave it.
    pub estimate: Option<EstimateNote>,
    /// Why it waits (held, behind another task, what it needs), when it
    /// waits.
    pub waiting: Option<String>,
    /// Its priority and whether it is held, when it waits.
    pub priority: Option<i32>,
    pub held: bool,
    /// The most GPU memory the job was seen to use, MiB.
    pub peak_mib: Option<u64>,
    /// Why it failed.
    pub reason: Option<String>,
    pub runs: Vec<RunView>,
    /// Why carma's record could not be read (it is root's): what this view
    /// lacks then (times, estimate, how runs ended) is not the task's
    /// fault.
    pub record_error: Option<String>,
}

/// One run of a task: `run-1`, and `run-2` after an OOM crash, ...
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunView {
    pub run: u32,
    pub gpus: Vec<usize>,
    /// Unix seconds.
    pub launched_at: Option<f64>,
    pub started_at: Option<f64>,
    pub ended_at: Option<f64>,
    /// How it ended, for people (`exit status 2`, `killed by SIGKILL`);
    /// `None` while it runs or when the caller cannot read `exit.json`.
    pub exit: Option<String>,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub cancelled: bool,
    /// Its stderr shows one of the `[oom]` signatures of a run that did
    /// not succeed; `None` when its stderr cannot be read.
    pub oom: Option<bool>,
    pub peak_mib: Option<u64>,
    /// Its processes' peak host memory together and their CPU seconds,
    /// where its cgroup measured them.
    pub host_peak_mib: Option<u64>,
    pub cpu_s: Option<f64>,
    /// The last lines of its stderr, control characters escaped.
    pub stderr_tail: Vec<String>,
    /// Why its stderr could not be read (another user's, or gone).
    pub stderr_error: Option<String>,
    /// Where the job's output is (readable by its owner).
    pub stdout_path: PathBuf,
    pub stderr_path: PathBuf,
}

/// How much to gather.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// Lines of each run's stderr.
    pub tail_lines: usize,
    /// How an OOM crash shows in stderr.
    pub oom: &'a OomRules,
    /// The daemon's status, for a running task (who, where, its peak so far).
    pub status: Option<&'a Status>,
}

/// Most runs looked for: a task re-runs only after an OOM crash, at most
/// `max_retries` times, so this bound is never reached by a real task.
const MAX_RUNS: u32 = 1000;

/// Least of a stderr read for its last lines, when the OOM tail is smaller.
const TAIL_BYTES: u64 = 64 << 10;

/// Largest `reason` read: it is one line.
const MAX_REASON_BYTES: u64 = 64 << 10;

/// Everything the caller may know of task `name`, which is in `state`;
/// refused when that is not a directory of carma's (anyone may make an
/// entry under a task's name in `pending/`, with files and links of their
/// choosing inside).
pub fn gather(spool: &Spool, state: State, name: &TaskName, scope: Scope) -> io::Result<TaskView> {
    let dir = spool.task_dir(state, name);
    let carmas = std::fs::symlink_metadata(spool.dir(state))?.uid();
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != carmas {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{state}/{name} is not a task of carma's (owner uid {}); refused",
                meta.uid()
            ),
        ));
    }
    // carma's record is root's; a task's owner reads the copy carma gave
    // them when the task ended.
    let (record, copy, record_error) = match spool.load_record(state, name) {
        Ok(record) => (Some(record), None, None),
        Err(e) => match read_owner_copy(&dir) {
            Some(copy) => (Some(copy.record.clone()), Some(copy), None),
            None => (None, None, Some(e.to_string())),
        },
    };
    let live = scope
        .status
        .and_then(|s| s.running.iter().find(|t| t.name == name.as_str()))
        .filter(|_| state == State::Running);
    let runs: Vec<RunView> = (1..=MAX_RUNS)
        .map_while(|run| {
            let run_dir = dir.join(format!("run-{run}"));
            let is_dir = std::fs::symlink_metadata(&run_dir).is_ok_and(|m| m.is_dir());
            let copied = copy
                .as_ref()
                .and_then(|c| c.runs.iter().find(|r| r.run == run));
            is_dir.then(|| gather_run(&dir, run, copied, scope))
        })
        .map(|mut run| {
            if let Some(t) = live.filter(|t| t.run == run.run) {
                run.gpus.clone_from(&t.gpus);
                run.launched_at = run.launched_at.or(Some(t.since));
                run.peak_mib = run.peak_mib.or(Some(t.peak_mib).filter(|&p| p > 0));
            }
            run
        })
        .collect();
    let owner_uid = record
        .as_ref()
        .and_then(|r| r.owner)
        .or_else(|| owner_by_files(&dir));
    let owner = live.map(|t| t.user.clone()).or_else(|| {
        let uid = nix::unistd::Uid::from_raw(owner_uid?);
        Some(nix::unistd::User::from_uid(uid).ok()??.name)
    });
    // A running task's are its run's: its record may still be the one of
    // before the launch (written once the job is on its way).
    let gpus = match &record {
        Some(r) if !r.gpus.is_empty() && state != State::Running => r.gpus.clone(),
        _ => runs.last().map(|r| r.gpus.clone()).unwrap_or_default(),
    };
    let run_peak = runs.iter().filter_map(|r| r.peak_mib).max();
    let queued = scope
        .status
        .filter(|_| matches!(state, State::Pending | State::Recovery))
        .and_then(|s| s.waiting.iter().find(|w| w.name == name.as_str()));
    Ok(TaskView {
        name: name.to_string(),
        state: state.to_string(),
        owner_uid,
        owner,
        submitted_at: record.as_ref().map(|r| r.submitted_at),
        started_at: runs.first().and_then(|r| r.started_at.or(r.launched_at)),
        ended_at: record.as_ref().and_then(|r| Some(r.outcome.as_ref()?.at)),
        gpus,
        estimate: record
            .as_ref()
            .and_then(|r| r.estimate.clone())
            .or_else(|| queued.and_then(|w| w.estimate.clone())),
        waiting: queued.map(|w| w.why.clone()),
        priority: queued.map(|w| w.priority),
        held: queued.is_some_and(|w| w.held),
        peak_mib: record.as_ref().and_then(|r| r.peak_mib).or(run_peak),
        reason: reason(&dir, record.as_ref()),
        runs,
        record_error,
    })
}

/// Who owns task `name` in `state`, as far as the caller can tell: carma's
/// record (root), else who owns the files carma gave the owner.
pub fn owner_uid(spool: &Spool, state: State, name: &TaskName) -> Option<u32> {
    spool
        .load_record(state, name)
        .ok()
        .and_then(|r| r.owner)
        .or_else(|| owner_by_files(&spool.task_dir(state, name)))
}

/// Who owns the files of a task's that are its owner's (anyone may see
/// that).
fn owner_by_files(dir: &Path) -> Option<u32> {
    [REASON, OWNER_COPY, "run-1/stderr"]
        .iter()
        .find_map(|f| std::fs::symlink_metadata(dir.join(f)).ok())
        .map(|m| m.uid())
}

/// Why a failed task failed, when the caller may know: from carma's record
/// (root), else from the `reason` file (its owner: the file is theirs, so
/// they could rewrite it, and what it says is shown to them alone).
pub fn failure_reason(spool: &Spool, name: &TaskName) -> Option<String> {
    let record = spool.load_record(State::Failed, name).ok();
    reason(&spool.task_dir(State::Failed, name), record.as_ref())
}

fn reason(dir: &Path, record: Option<&TaskRecord>) -> Option<String> {
    if let Some(reason) = record.and_then(|r| r.outcome.as_ref()?.reason.clone()) {
        return Some(one_line(&reason));
    }
    let (bytes, meta) = read_beneath(dir, REASON, MAX_REASON_BYTES).ok()?;
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return None;
    }
    let text = String::from_utf8_lossy(&bytes);
    Some(one_line(text.lines().next().unwrap_or_default()))
}

fn gather_run(dir: &Path, run: u32, copied: Option<&OwnerRun>, scope: Scope) -> RunView {
    let run_dir = dir.join(format!("run-{run}"));
    let launch = read_state::<Launch>(&run_dir.join(supervisor::LAUNCH))
        .ok()
        .or_else(|| copied?.launch.clone());
    let exit = read_state::<RunExit>(&run_dir.join(supervisor::EXIT))
        .ok()
        .or_else(|| copied?.exit.clone());
    let stderr = format!("run-{run}/{}", supervisor::STDERR);
    let bytes = scope.oom.stderr_tail_bytes.max(TAIL_BYTES);
    let (stderr_tail, oom, stderr_error) = match read_tail_beneath(dir, &stderr, bytes) {
        Ok(tail) => {
            let text = String::from_utf8_lossy(&tail);
            let ended_well = exit.as_ref().is_some_and(|e| e.succeeded() || e.cancelled);
            let oom = !ended_well && scope.oom.find(text.as_bytes()).is_some();
            (last_lines(&text, scope.tail_lines), Some(oom), None)
        }
        Err(e) => (Vec::new(), None, Some(unreadable(&e))),
    };
    RunView {
        run,
        gpus: launch.as_ref().map(|l| l.gpus.clone()).unwrap_or_default(),
        launched_at: launch.as_ref().map(|l| l.launched_at),
        started_at: exit.as_ref().map(|e| e.started_at),
        ended_at: exit.as_ref().map(|e| e.ended_at),
        exit: exit.as_ref().map(RunExit::describe),
        code: exit.as_ref().and_then(|e| e.code),
        signal: exit.as_ref().and_then(|e| e.signal),
        cancelled: exit.as_ref().is_some_and(|e| e.cancelled),
        oom,
        peak_mib: exit.as_ref().and_then(|e| e.peak_mib),
        host_peak_mib: exit.as_ref().and_then(|e| e.host_peak_mib),
        cpu_s: exit.as_ref().and_then(|e| e.cpu_s),
        stderr_tail,
        stderr_error,
        stdout_path: run_dir.join(supervisor::STDOUT),
        stderr_path: run_dir.join(supervisor::STDERR),
    }
}

/// Why a file could not be read, said plainly.
fn unreadable(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::PermissionDenied => "not readable by you".into(),
        io::ErrorKind::NotFound => "none".into(),
        _ => e.to_string(),
    }
}

/// The last `n` lines of a job's output as a terminal would show them: of
/// a line rewritten with carriage returns (a progress bar) only its last
/// state, control characters escaped so no output can drive the reader's
/// terminal.
pub fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<String> = text
        .lines()
        .map(|line| one_line(line.rsplit('\r').next().unwrap_or_default()))
        .collect();
    let trimmed = lines.len() - lines.iter().rev().take_while(|l| l.is_empty()).count();
    lines[trimmed.saturating_sub(n)..trimmed].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_are_what_a_terminal_shows_and_nothing_more() {
        let text = "a\nepoch 1: 10%\repoch 1: 100%\nb\x1b[31mred\n\n\n";
        assert_eq!(last_lines(text, 2), ["epoch 1: 100%", "b\\u{1b}[31mred"]);
        assert_eq!(last_lines(text, 10).len(), 3);
        assert!(last_lines("", 10).is_empty());
        assert!(last_lines("x\n", 0).is_empty());
    }

    #[test]
    fn a_running_task_shows_its_runs_gpus_over_a_record_from_before_the_launch() {
        // The daemon brings task.json up to date only once the job is on
        // its way: in between (or after a crash there) the record still
        // names the GPUs of the run before.
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        spool.create().unwrap();
        let name = TaskName::new(7, "train");
        let task = spool.task_dir(State::Running, &name);
        for run in ["run-1", "run-2"] {
            std::fs::create_dir_all(task.join(run)).unwrap();
        }
        let mut record = TaskRecord::new(&name, "train.rad", 1.0);
        record.gpus = vec![0];
        crate::spool::record::write_json(&task.join(crate::spool::record::RECORD), &record)
            .unwrap();
        for (run, gpu) in [(1, 0), (2, 3)] {
            let launch = serde_json::json!({
                "task": name.to_string(), "run": run, "gpus": [gpu], "why": "",
                "launched_at": 2.0, "script": ["true"], "workdir": "/", "env": [], "grace_s": 1.0,
            });
            let path = task.join(format!("run-{run}")).join(supervisor::LAUNCH);
            std::fs::write(path, launch.to_string()).unwrap();
        }
        let config = crate::config::Config::load(None).unwrap();
        let scope = Scope {
            tail_lines: 1,
            oom: &config.oom,
            status: None,
        };
        let view = gather(&spool, State::Running, &name, scope).unwrap();
        assert_eq!(view.gpus, [3]);
        std::fs::rename(&task, spool.task_dir(State::Done, &name)).unwrap();
        let view = gather(&spool, State::Done, &name, scope).unwrap();
        assert_eq!(view.gpus, [0], "an ended task's record is its last word");
    }
}
