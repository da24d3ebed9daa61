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

use std::time::Duration;

use super::{Lifecycle, Moment};
use crate::procfs::ProcessId;
use crate::sched::Time;
use crate::spool::{State, TaskName};

/// How long past the moment its supervisor should have killed a run's job
/// (its time limit and that limit's grace, or a cancellation and its
/// grace) the daemon waits before it kills it itself: it covers how much
/// later than the daemon's count a supervisor starts its own (the
/// daemon counts from the moment the supervisor was forked), and a
/// moment for its kill. A kill that meets a supervisor still ending the
/// run (it waits up to twenty seconds for what the job left) finds only
/// what it is killing too. Short enough that `carma cancel`, which waits
/// for the grace and twenty seconds, sees a held job stop.
pub const MARGIN: Duration = Duration::from_secs(5);

/// What made a run overdue: [`Overdue::why`].
pub const TIME_LIMIT: &str = "its time limit";
pub const CANCELLATION: &str = "a cancellation";

/// The graces a supervisor gives a job between SIGTERM and SIGKILL, in
/// seconds, as its launch set them (a reload of the configuration does
/// not change a running job's).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Graces {
    pub cancel_s: f64,
    pub time_limit_s: f64,
}

/// When the current run's supervisor should have ended its job, on the
/// core's monotonic clock: a wall clock set forward (NTP stepping at
/// boot, a VM paused) must not make a healthy job overdue.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Deadlines {
    /// When its supervisor began: when the daemon saw it forked (or
    /// launched it, or, for a run of an earlier daemon, its launch as far
    /// back as the wall clock says).
    pub since: Time,
    pub graces: Graces,
    /// When its supervisor was first asked to stop the job.
    pub stop_asked: Option<Time>,
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
    /// [`MARGIN`] before `now`: past their time limit and its grace, or
    /// past a cancellation and its grace.
    pub fn overdue(&self, now: Moment) -> Vec<Overdue> {
        let secs = |s: f64| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX);
        self.tasks
            .values()
            .filter(|t| t.state == State::Running && t.run > 0)
            .filter_map(|t| {
                let d = &t.deadlines;
                let limit = t.time_limit_s.map(|limit| {
                    let due = d.since.saturating_add(secs(limit + d.graces.time_limit_s));
                    (due, TIME_LIMIT)
                });
                let cancel = d
                    .stop_asked
                    .map(|at| (at.saturating_add(secs(d.graces.cancel_s)), CANCELLATION));
                let (due, why) = [limit, cancel].into_iter().flatten().min()?;
                (now.at >= due.saturating_add(MARGIN)).then(|| Overdue {
                    name: t.name.clone(),
                    run: t.run,
                    supervisor: t.supervisor,
                    why,
                })
            })
            .collect()
    }
}
