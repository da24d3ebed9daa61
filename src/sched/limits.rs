//! Per-user limits: how many jobs a user may run, how many GPUs hold, how
//! many have waiting; and how many elements of an array job run at once.
//!
//! A task over a limit is passed over like a held one, with the limit as
//! its reason, so one user's backlog never blocks another's jobs. Tasks
//! without a user (the simulator, tests) are never limited.

use std::collections::{HashMap, HashSet};

use super::{ArrayOf, QueueRules, Task, TaskId};

/// What each user has running and waiting, as limits see it.
#[derive(Debug, Default)]
pub(super) struct Loads {
    /// Per user: running jobs and the GPUs they hold.
    running: HashMap<u32, (u32, u32)>,
    /// Per array job: elements running.
    arrays: HashMap<u64, u32>,
    /// Waiting tasks beyond their user's queued-jobs limit (the latest
    /// arrivals).
    beyond_queue: HashSet<TaskId>,
}

impl Loads {
    /// The loads of `tasks`; `waiting` are those not running.
    pub fn of(tasks: &HashMap<TaskId, Task>, waiting: &[TaskId], rules: &QueueRules) -> Loads {
        let mut loads = Loads::default();
        for t in tasks.values().filter(|t| t.running) {
            loads.launched(t);
        }
        if rules.max_queued_per_user > 0 {
            let mut per_user: HashMap<u32, Vec<(u64, TaskId)>> = HashMap::new();
            for &id in waiting {
                if let Some(t) = tasks.get(&id) {
                    if let Some(user) = t.demand.user {
                        per_user.entry(user).or_default().push((t.arrival, id));
                    }
                }
            }
            for mut queued in per_user.into_values() {
                queued.sort_unstable();
                let keep = rules.max_queued_per_user as usize;
                loads
                    .beyond_queue
                    .extend(queued.into_iter().skip(keep).map(|(_, id)| id));
            }
        }
        loads
    }

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

    /// Why task `id` may not start now for its user's limits or its
    /// array's, if so.
    pub fn refuses(&self, id: TaskId, t: &Task, rules: &QueueRules) -> Option<String> {
        if let Some(ArrayOf {
            job,
            at_once: Some(max),
        }) = t.demand.array
        {
            let running = self.arrays.get(&job).copied().unwrap_or(0);
            if running >= max {
                return Some(format!(
                    "{running} tasks of array {job} run, the most it allows at once (%{max})"
                ));
            }
        }
        let user = t.demand.user?;
        if self.beyond_queue.contains(&id) {
            return Some(format!(
                "beyond its user's {} queued jobs (queue.max_queued_per_user)",
                rules.max_queued_per_user
            ));
        }
        let (jobs, gpus) = self.running.get(&user).copied().unwrap_or_default();
        if rules.max_running_per_user > 0 && jobs >= rules.max_running_per_user {
            return Some(format!(
                "its user runs {jobs} jobs, the most a user may (queue.max_running_per_user)"
            ));
        }
        let max = rules.max_gpus_per_user;
        if max > 0 && gpus + t.demand.gpus > max {
            return Some(format!(
                "its user holds {gpus} GPUs; {} more would pass the limit of {max} \
                 (queue.max_gpus_per_user)",
                t.demand.gpus
            ));
        }
        None
    }
}
