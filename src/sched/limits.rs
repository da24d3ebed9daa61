//! Per-user limits: how many jobs a user may run, how many GPUs hold, how
//! many have waiting; and how many elements of an array job run at once.
//!
//! A task over a limit is passed over like a held one, with the limit as
//! its reason, so one user's backlog never blocks another's jobs. Tasks
//! without a user (the simulator, tests) are never limited.

use std::collections::HashMap;

use super::queue::Queue;
use super::{ArrayOf, QueueRules, Task, TaskId};

/// What each user has running, as limits see it: kept up to date as
/// tasks start and stop, so a dispatch need not count.
#[derive(Debug, Clone, Default)]
pub(super) struct Loads {
    /// Per user: running jobs and the GPUs they hold.
    running: HashMap<u32, (u32, u32)>,
    /// Per array job: elements running.
    arrays: HashMap<u64, u32>,
}

/// Per user over the queued-jobs limit: the first of their waiting tasks
/// beyond it (by arrival); it and those after it may not start.
#[derive(Debug, Default)]
pub(super) struct QueueCut(HashMap<u32, (u64, TaskId)>);

impl QueueCut {
    /// Where `waiting` is cut for `rules`; empty with no limit.
    pub fn of(waiting: &Queue, rules: &QueueRules) -> QueueCut {
        let keep = rules.max_queued_per_user as usize;
        if keep == 0 {
            return QueueCut::default();
        }
        QueueCut(
            waiting
                .per_user()
                .filter_map(|(user, queued)| Some((user, *queued.iter().nth(keep)?)))
                .collect(),
        )
    }

    fn cuts(&self, user: u32, id: TaskId, t: &Task) -> bool {
        self.0.get(&user).is_some_and(|&cut| (t.arrival, id) >= cut)
    }
}

impl Loads {
    /// Counts a launch of `t`.
    pub fn launched(&mut self, t: &Task) {
        if let Some(user) = t.demand.user {
            let (jobs, held) = self.running.entry(user).or_default();
            *jobs += 1;
            *held += t.demand.gpus;
        }
        if let Some(array) = t.demand.array {
            *self.arrays.entry(array.job).or_default() += 1;
        }
    }

    /// Counts the end of a run of `t`.
    pub fn stopped(&mut self, t: &Task) {
        if let Some(user) = t.demand.user
            && let Some((jobs, held)) = self.running.get_mut(&user)
        {
            *jobs = jobs.saturating_sub(1);
            *held = held.saturating_sub(t.demand.gpus);
            if *jobs == 0 {
                self.running.remove(&user);
            }
        }
        if let Some(array) = t.demand.array
            && let Some(running) = self.arrays.get_mut(&array.job)
        {
            *running = running.saturating_sub(1);
            if *running == 0 {
                self.arrays.remove(&array.job);
            }
        }
    }

    /// GPUs held per user.
    pub fn gpus_held(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.running.iter().map(|(&user, &(_, gpus))| (user, gpus))
    }

    /// Why task `id` may not start now for its user's limits or its
    /// array's, if so: asked of every waiting task a pass steps over, so
    /// it only points at the limit (its text is made when shown).
    pub fn refuses(
        &self,
        id: TaskId,
        t: &Task,
        rules: &QueueRules,
        cut: &QueueCut,
    ) -> Option<Limit> {
        if let Some(ArrayOf {
            job,
            at_once: Some(max),
        }) = t.demand.array
        {
            let running = self.arrays.get(&job).copied().unwrap_or(0);
            if running >= max {
                return Some(Limit::ArrayAtOnce { job, running, max });
            }
        }
        let user = t.demand.user?;
        if cut.cuts(user, id, t) {
            return Some(Limit::Queued {
                max: rules.max_queued_per_user,
            });
        }
        let (jobs, held) = self.running.get(&user).copied().unwrap_or_default();
        if rules.max_running_per_user > 0 && jobs >= rules.max_running_per_user {
            return Some(Limit::Running { jobs });
        }
        let max = rules.max_gpus_per_user;
        if max > 0 && held + t.demand.gpus > max {
            return Some(Limit::Gpus {
                held,
                more: t.demand.gpus,
                max,
            });
        }
        None
    }
}

/// The per-user or per-array limit a waiting task is over, with the
/// figures its text gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `running` elements of array job `job` run, its most at once.
    ArrayAtOnce { job: u64, running: u32, max: u32 },
    /// Beyond the `max` queued jobs of its user considered.
    Queued { max: u32 },
    /// Its user runs `jobs` jobs, the most a user may.
    Running { jobs: u32 },
    /// Its user holds `held` GPUs, and `more` would pass `max`.
    Gpus { held: u32, more: u32, max: u32 },
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Limit::ArrayAtOnce { job, running, max } => write!(
                f,
                "{running} tasks of array {job} run, the most it allows at once (%{max})"
            ),
            Limit::Queued { max } => write!(
                f,
                "beyond its user's {max} queued jobs (queue.max_queued_per_user)"
            ),
            Limit::Running { jobs } => write!(
                f,
                "its user runs {jobs} jobs, the most a user may (queue.max_running_per_user)"
            ),
            Limit::Gpus { held, more, max } => write!(
                f,
                "its user holds {held} GPUs; {more} more would pass the limit of {max} \
                 (queue.max_gpus_per_user)"
            ),
        }
    }
}
