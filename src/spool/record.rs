//! The files a task directory holds besides the user's `.rad`, as JSON.
//!
//! ```text
//! 000042-resnet50/
//!   resnet50.rad           the user's job file
//!   resnet50_32.model      its model summary (copied by `carma submit`)
//!   task.json              TaskRecord: submission, estimate, outcome
//!   reason                 why it failed (failed/ only), one line
//!   run-1/                 one directory per run (an OOM re-run is run-2)
//!     launch.json          Launch: what the daemon asked the supervisor to run
//!     supervisor.json      procfs::ProcessId: who runs it (pid + start time)
//!     supervisor.lock      held by the supervisor while it lives
//!     job.sh               the script bash runs
//!     stdout, stderr       the job's output
//!     peak_mib             the most GPU memory the daemon saw it use
//!     exit.json            RunExit: how it ended (written last, atomically)
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use super::atomic::write_durable;
use crate::sched::Need;

/// Seconds since the Unix epoch: records use wall-clock time so that they
/// mean the same to every process and survive restarts.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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
    /// The user the job runs as: the owner of the `.rad` as it entered the
    /// spool. Written by the daemon, whose directories users cannot change,
    /// so it can be trusted where the file's own owner could not be.
    #[serde(default)]
    pub owner: Option<u32>,
    /// The estimate placement used, and where it came from.
    #[serde(default)]
    pub estimate: Option<EstimateNote>,
    /// OOM crashes so far.
    #[serde(default)]
    pub crashes: u32,
    /// How it ended, once it has.
    #[serde(default)]
    pub outcome: Option<Outcome>,
}

impl TaskRecord {
    /// A task that just entered the spool and has not run.
    pub fn new(name: impl ToString, rad: impl Into<String>, submitted_at: f64) -> TaskRecord {
        TaskRecord {
            name: name.to_string(),
            rad: rad.into(),
            submitted_at,
            workdir: None,
            owner: None,
            estimate: None,
            crashes: 0,
            outcome: None,
        }
    }
}

/// An estimate as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimateNote {
    pub need: Need,
    /// Which estimator answered (`declared`, `history`, ...).
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
    /// The user to become before running the job, when the supervisor is
    /// root; `None` runs it as the supervisor's own user.
    #[serde(default)]
    pub run_as: Option<RunAs>,
    /// Environment to set for the job, on top of the daemon's.
    pub env: Vec<(String, String)>,
    /// Seconds between SIGTERM and SIGKILL when the job is cancelled.
    pub grace_s: f64,
}

/// A Linux user a job runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub home: PathBuf,
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
    /// The most GPU memory seen in use by the job, MiB (from the daemon's
    /// monitor).
    #[serde(default)]
    pub peak_mib: Option<u64>,
    /// The job could not be started at all (bad user, missing bash, ...).
    #[serde(default)]
    pub error: Option<String>,
}

impl RunExit {
    /// The run ended with status 0.
    pub fn succeeded(&self) -> bool {
        self.code == Some(0) && self.error.is_none() && !self.cancelled
    }

    /// How it ended, for people: `exit status 3`, `killed by SIGKILL`.
    pub fn describe(&self) -> String {
        if let Some(error) = &self.error {
            return format!("could not start: {error}");
        }
        match (self.code, self.signal) {
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(signal)) => match nix::sys::signal::Signal::try_from(signal) {
                Ok(s) => format!("killed by {s}"),
                Err(_) => format!("killed by signal {signal}"),
            },
            (None, None) => "ended without a status".into(),
        }
    }
}

/// Largest record read: real ones are a few kilobytes.
const MAX_RECORD_BYTES: u64 = 1 << 20;

/// Reads a JSON record (a regular file, never through a link, at most
/// 1 MiB: records live where a user may have put something else).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<T> {
    let (bytes, _) = super::safe::read_regular(path, MAX_RECORD_BYTES)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// Writes a JSON record durably (temp file, fsync, rename, directory
/// fsync).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_durable(path, &bytes)
}

#[cfg(test)]
mod tests {
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
        assert_eq!(read_json::<TaskRecord>(&path).unwrap(), record);
        std::fs::write(&path, "{").unwrap();
        let err = read_json::<TaskRecord>(&path).unwrap_err();
        assert!(err.to_string().contains("task.json"), "{err}");
    }

    #[test]
    fn exits_describe_themselves() {
        let mut exit = RunExit {
            started_at: 0.0,
            ended_at: 1.0,
            code: Some(0),
            signal: None,
            cancelled: false,
            peak_mib: None,
            error: None,
        };
        assert!(exit.succeeded());
        exit.code = None;
        exit.signal = Some(9);
        assert_eq!(exit.describe(), "killed by SIGKILL");
        exit.code = Some(3);
        assert_eq!(exit.describe(), "exit status 3");
    }
}
