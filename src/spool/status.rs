//! `status.json`: the daemon's view of queues and GPUs, refreshed every
//! second for `carma status` and anyone else who wants to look. Part of
//! the spool's protocol (commands read it to learn receipts and verdicts),
//! so it lives with the spool.
//!
//! It is a cache, not state: the spool directories are the truth, and a
//! reader checks `updated_at` and the daemon lock to tell a live view from
//! a stale one.

use serde::{Deserialize, Serialize};

use crate::gpu::MetricSource;

/// Largest status file read. It lists every waiting task, about 190
/// bytes each, and each user may have 10,000 (`queue.user_max_tasks`):
/// capped at 1 MiB like a record, a queue of 6,000 made `carma status`
/// say there was no status at all.
pub const MAX_STATUS_BYTES: u64 = 256 << 20;

impl Status {
    /// Reads the status file at `path` (see [`MAX_STATUS_BYTES`]).
    pub fn read(path: &std::path::Path) -> std::io::Result<Status> {
        super::json::read_json_at_most(path, MAX_STATUS_BYTES)
    }
}

/// The whole status file. `W` is how the waiting tasks are held, and `A`
/// the adopted submissions: lists for those who read the file, and for
/// the daemon that writes it, anything that serialises as one (the
/// waiting tasks made one at a time as they are written, the submissions
/// read where the daemon keeps them, never copied whole).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status<W = Vec<WaitingTask>, A = Vec<(String, String)>> {
    /// When it was written (Unix seconds).
    pub updated_at: f64,
    pub daemon_pid: u32,
    /// The device and inode of the daemon's lock (which users cannot
    /// open): `/proc/locks` tells anyone whether `daemon_pid` holds it.
    #[serde(default)]
    pub lock: Option<(u64, u64)>,
    /// The GPU backend, for people ("4 simulated GPUs", "NVML 550.54").
    pub backend: String,
    pub gpus: Vec<GpuStatus>,
    pub running: Vec<RunningTask>,
    /// Waiting tasks in the order they will be placed.
    pub recovery: Vec<String>,
    pub pending: Vec<String>,
    /// Every waiting task in the order it will be placed (recovery first),
    /// with its priority, hold and why it waits.
    #[serde(default)]
    pub waiting: W,
    /// Why the head of the queue waits, when something waits: its name and
    /// what it needs, then per GPU what is missing (`000042-resnet50 needs
    /// 8GiB free on a GPU; GPU 0: 3GiB free < 8GiB`).
    pub head_waits_for: Option<String>,
    /// Submissions by other users taken in lately: (the submission's name
    /// in `pending/`, the task's name), so that their `carma submit` can
    /// say which task it made.
    #[serde(default)]
    pub adopted: A,
    /// Tasks that ended but could not yet be moved to `done/` or `failed/`
    /// (a full disk, an I/O error): they are retried until they can.
    #[serde(default)]
    pub ending: Vec<String>,
    /// What the daemon made of users' recent requests (`carma cancel`,
    /// `hold`, ...), so that the command that left one can say the verdict
    /// in words and exit accordingly.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
}

/// The daemon's answer to one request in `cancel/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The request's file name (`hold.000012-train`).
    pub request: String,
    /// Who left it.
    pub uid: u32,
    /// When it was decided (Unix seconds).
    pub at: f64,
    /// Refused (or impossible) rather than done.
    pub refused: bool,
    /// What happened, for people: `held`, `refused: carma-bob does not
    /// own it`.
    pub said: String,
}

/// One GPU's last reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    pub index: usize,
    pub uuid: String,
    pub name: String,
    pub total_mib: u64,
    /// A MIG instance: single-GPU tasks only, SM activity not measured.
    #[serde(default)]
    pub mig: bool,
    pub used_mib: u64,
    /// Memory booked for tasks that started lately, not yet in
    /// `used_mib`: placement counts it as used.
    #[serde(default)]
    pub reserved_mib: u64,
    pub smact: f64,
    /// SM occupancy and DRAM activity, where the source measures them.
    #[serde(default)]
    pub occupancy: Option<f64>,
    #[serde(default)]
    pub dram: Option<f64>,
    /// Where the last reading's SM metrics came from; `None` before the
    /// first good reading.
    #[serde(default)]
    pub source: Option<MetricSource>,
    pub power_w: Option<f64>,
    pub error: Option<String>,
    /// carma tasks running on it.
    pub tasks: Vec<String>,
}

/// A task waiting for its turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitingTask {
    pub name: String,
    pub user: String,
    pub priority: i32,
    pub held: bool,
    /// `JOB_INDEX` for an element of an array job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// Why it waits, for people: `held (carma release ...)`, `behind
    /// 000041-bert (priority 5 > 0)`, or, for the head, what it needs.
    pub why: String,
    /// The memory it will be placed by (the head's reason says it
    /// anyway), and which estimator gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<super::record::EstimateNote>,
}

/// A task whose job runs now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningTask {
    pub name: String,
    pub run: u32,
    pub gpus: Vec<usize>,
    /// When this run was launched (Unix seconds).
    pub since: f64,
    /// Its wall-time limit, seconds, if it has one.
    #[serde(default)]
    pub time_limit_s: Option<f64>,
    /// `JOB_INDEX` for an element of an array job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    pub peak_mib: u64,
    pub user: String,
}

/// Waits, at most `patience`, until the daemon's status file under `spool`
/// says what `find` looks for (a receipt, a verdict), reading it again each
/// time the daemon replaces it: the kernel says when (`super::arrivals`),
/// so the answer arrives as soon as it is written, not at the next poll. A
/// daemon that rewrites it often (a queue of thousands, each taken in) is
/// read at most every 20 ms after its first few changes, as when it was
/// polled. Where no watch can be made, it reads every 20 ms.
pub fn wait_for<T>(
    spool: &super::Spool,
    patience: std::time::Duration,
    mut find: impl FnMut(Option<&Status>) -> Option<T>,
) -> Option<T> {
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + patience;
    let file = spool.status_file();
    let arrivals = super::arrivals::Arrivals::watch(spool.root()).ok();
    const SPACING: Duration = Duration::from_millis(20);
    const QUICK_READS: u32 = 5;
    let mut reads = 0;
    loop {
        // Read after the watch is made: a write in between is not missed.
        let read_at = Instant::now();
        reads += 1;
        let status = Status::read(&file).ok();
        if let Some(found) = find(status.as_ref()) {
            return Some(found);
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        match &arrivals {
            // A second at most: `find` may also watch for something that
            // writes nothing (the daemon's end).
            Some(arrivals) => {
                if arrivals.wait(left.min(Duration::from_secs(1))) && reads > QUICK_READS {
                    let next = (read_at + SPACING).min(deadline);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            }
            None => std::thread::sleep(left.min(SPACING)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_of_ten_thousand_waiting_tasks_reads_back() {
        let waiting = (0..10_000)
            .map(|i| WaitingTask {
                name: format!("{i:06}-a-job-of-an-ordinary-name"),
                user: "alice".into(),
                priority: 0,
                held: false,
                array: None,
                why: format!(
                    "behind {:06}-a-job-of-an-ordinary-name (submitted first)",
                    i
                ),
                estimate: None,
            })
            .collect();
        let status = Status {
            waiting,
            ..Status::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("status.json");
        std::fs::write(&path, serde_json::to_vec(&status).unwrap()).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1 << 20);
        assert_eq!(Status::read(&path).unwrap(), status);
    }
}
