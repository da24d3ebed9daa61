//! What everyone may know, built from a snapshot: the status page and
//! `/api/status` show [`Overview`], `/task/NAME` shows [`TaskCard`].
//!
//! These mirror what `carma status` and `carma show` tell any user of the
//! machine about other users' tasks: names, owners, states, where and since
//! when a task runs, why it waits, its estimate and priority. Left out:
//! what `status.json` carries for the commands' own use (request verdicts,
//! submission receipts, the daemon's lock), and all that only a task's
//! owner may read (its job file, output, stderr, environment, paths). A
//! failure's reason is carma's own words for it
//! ([`crate::lifecycle::public_reason`]), which quote nothing of the job.

use serde::Serialize;

use super::Published;
use crate::spool::record::EstimateNote;
use crate::spool::status::{GpuStatus, RunningTask, WaitingTask};
use crate::spool::{State, TaskName};

/// Failures listed, as `carma status` lists them.
pub const RECENT_FAILURES: usize = 10;

/// The server at one moment.
#[derive(Debug, Serialize)]
pub struct Overview<'a> {
    /// When the daemon made the snapshot (Unix seconds).
    pub updated_at: f64,
    /// The GPU backend, for people.
    pub backend: &'a str,
    pub gpus: &'a [GpuStatus],
    pub running: &'a [RunningTask],
    /// Waiting tasks in dispatch order (recovery first), with why each
    /// waits.
    pub waiting: &'a [WaitingTask],
    pub recovering: usize,
    /// Why the head of the queue waits, when something waits.
    pub head_waits_for: Option<&'a str>,
    pub done: usize,
    pub failed: usize,
    /// The latest failures, newest first.
    pub recent_failures: Vec<Failure>,
    /// Entries in `pending/` not yet taken in.
    pub intake_backlog: usize,
}

/// One failed task.
#[derive(Debug, Serialize)]
pub struct Failure {
    pub name: String,
    /// Its owner, when the daemon saw it end.
    pub user: Option<String>,
    pub ended_at: Option<f64>,
    /// Why, when the daemon saw it end.
    pub reason: Option<String>,
}

impl<'a> Overview<'a> {
    pub fn of(p: &'a Published) -> Overview<'a> {
        let s = &p.status;
        let recent_failures = p
            .latest_failed
            .iter()
            .take(RECENT_FAILURES)
            .map(|name| {
                let ending = p.endings.iter().rev().find(|e| &e.name == name);
                Failure {
                    name: name.to_string(),
                    user: ending.and_then(|e| e.user.clone()),
                    ended_at: ending.and_then(|e| e.at),
                    reason: ending.and_then(|e| e.why.clone()),
                }
            })
            .collect();
        Overview {
            updated_at: s.updated_at,
            backend: &s.backend,
            gpus: &s.gpus,
            running: &s.running,
            waiting: &s.waiting,
            recovering: s.recovery.len(),
            head_waits_for: s.head_waits_for.as_deref(),
            done: p.done,
            failed: p.failed,
            recent_failures,
            intake_backlog: p.backlog,
        }
    }
}

/// One task, as everyone may see it.
#[derive(Debug, Serialize)]
pub struct TaskCard {
    pub name: String,
    /// The state directory it is in: `pending`, `running`, ... `failed`.
    pub state: &'static str,
    /// Its owner, where known.
    pub user: Option<String>,
    /// Waiting: its place in dispatch order (1 is next), why it waits,
    /// its priority, hold, estimate.
    pub position: Option<usize>,
    pub why: Option<String>,
    pub priority: Option<i32>,
    pub held: bool,
    pub estimate: Option<EstimateNote>,
    /// `JOB_INDEX` for an element of an array job, while it waits or runs.
    pub array: Option<String>,
    /// Running: which run, on which GPUs, since when (Unix seconds), its
    /// wall-time limit and the most memory it used so far.
    pub run: Option<u32>,
    pub gpus: Vec<usize>,
    pub since: Option<f64>,
    pub time_limit_s: Option<f64>,
    pub peak_mib: Option<u64>,
    /// Ended: when, and why it failed, where the daemon saw it end.
    pub ended_at: Option<f64>,
    pub reason: Option<String>,
}

impl TaskCard {
    fn new(name: &str, state: State, user: Option<String>) -> TaskCard {
        TaskCard {
            name: name.to_owned(),
            state: state.dir_name(),
            user,
            position: None,
            why: None,
            priority: None,
            held: false,
            estimate: None,
            array: None,
            run: None,
            gpus: Vec::new(),
            since: None,
            time_limit_s: None,
            peak_mib: None,
            ended_at: None,
            reason: None,
        }
    }

    /// Task `name` in the snapshot: running, waiting or ended lately;
    /// `None` when the snapshot does not know it.
    pub fn find(p: &Published, name: &TaskName) -> Option<TaskCard> {
        let s = &p.status;
        if let Some(t) = s.running.iter().find(|t| t.name == name.as_str()) {
            return Some(TaskCard {
                run: Some(t.run),
                gpus: t.gpus.clone(),
                since: Some(t.since),
                time_limit_s: t.time_limit_s,
                peak_mib: Some(t.peak_mib),
                array: t.array.clone(),
                ..TaskCard::new(&t.name, State::Running, Some(t.user.clone()))
            });
        }
        if let Some((i, w)) = s
            .waiting
            .iter()
            .enumerate()
            .find(|(_, w)| w.name == name.as_str())
        {
            let state = match s.recovery.contains(&w.name) {
                true => State::Recovery,
                false => State::Pending,
            };
            return Some(TaskCard {
                position: Some(i + 1),
                why: Some(w.why.clone()),
                priority: Some(w.priority),
                held: w.held,
                estimate: w.estimate.clone(),
                array: w.array.clone(),
                ..TaskCard::new(&w.name, state, Some(w.user.clone()))
            });
        }
        let e = p.endings.iter().rev().find(|e| &e.name == name)?;
        Some(TaskCard {
            ended_at: e.at,
            reason: e.why.clone(),
            ..TaskCard::new(name.as_str(), e.state, e.user.clone())
        })
    }
}
