//! Runs that outlived the moment their supervisor should have ended
//! them: the daemon's backstop behind a supervisor that cannot act.
//!
//! A supervisor keeps its job's time limit and carries out a
//! cancellation, and that holds while the daemon is away. But until the
//! job's first process has called `exec`, the supervisor waits for it in
//! the kernel: the two share their memory ([`crate::spawn`]), and no
//! signal but SIGKILL wakes that wait. Once its ids are the user's, that
//! process is the user's to signal: a SIGSTOP, or a working directory on
//! a FUSE mount that never answers, holds it there, and with it its
//! supervisor, its time limit not yet counting and a cancellation only
//! queued. The GPU it was placed on stays taken. The daemon therefore
//! watches every run against the same deadlines, and kills a job its
//! supervisor should have ended long before ([`crate::daemon`]); the
//! supervisor, woken, records the end as its own.

use super::{Lifecycle, Moment};
use crate::procfs::ProcessId;
use crate::spool::{State, TaskName};

/// Seconds past the moment its supervisor should have killed a run's job
/// (its time limit and that limit's grace, or a cancellation and its
/// grace) before the daemon kills it itself: they cover how much later
/// than the launch a supervisor starts to count, and a moment for its
/// kill. A kill that meets a supervisor still ending the run (it waits
/// up to twenty seconds for what the job left) finds only what it is
/// killing too. Short enough that `carma cancel`, which waits for the
/// grace and ten seconds, sees a held job stop.
pub const MARGIN_S: f64 = 5.0;

/// What made a run overdue: [`Overdue::why`].
pub const TIME_LIMIT: &str = "its time limit";
pub const CANCELLATION: &str = "a cancellation";

/// The graces a supervisor gives a job between SIGTERM and SIGKILL, as
/// the daemon's configuration sets them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Graces {
    pub cancel_s: f64,
    pub time_limit_s: f64,
}

/// A run that should have ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Overdue {
    pub name: TaskName,
    pub run: u32,
    /// Its supervisor, when the daemon knows it.
    pub supervisor: Option<ProcessId>,
    /// What should have ended it, for the log.
    pub why: &'static str,
}

impl Lifecycle {
    /// The running tasks whose run should have ended more than
    /// [`MARGIN_S`] before `now`: past their time limit and its grace,
    /// counted from the launch, or past a cancellation and its grace.
    /// The wall clock counts, as it does for `since`, which an adopted
    /// run has from its `launch.json`.
    pub fn overdue(&self, now: Moment, graces: Graces) -> Vec<Overdue> {
        self.tasks
            .values()
            .filter(|t| t.state == State::Running && t.run > 0)
            .filter_map(|t| {
                let limit = t
                    .time_limit_s
                    .map(|limit| (t.since + limit + graces.time_limit_s, TIME_LIMIT));
                let cancel = t.stop_asked.map(|at| (at + graces.cancel_s, CANCELLATION));
                let (due, why) = [limit, cancel]
                    .into_iter()
                    .flatten()
                    .min_by(|a, b| a.0.total_cmp(&b.0))?;
                (now.unix >= due + MARGIN_S).then(|| Overdue {
                    name: t.name.clone(),
                    run: t.run,
                    supervisor: t.supervisor,
                    why,
                })
            })
            .collect()
    }
}
