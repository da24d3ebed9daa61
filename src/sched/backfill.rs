//! Backfill: starting tasks from behind a blocked head without delaying it.
//!
//! When the head of the queue cannot be placed, the core works out when
//! and where it could be: each GPU is free for it when every task on it
//! has ended, by its expected end (its start plus its time limit, history
//! or the configured default); a GPU with a task of unknown end, or that
//! fails the head's needs for reasons no task of ours explains, cannot be
//! counted on. The GPUs that free up first are reserved for the head,
//! from the time the last of them does (the shadow time, as in Slurm's
//! EASY backfill).
//!
//! A task further back may then start now if it fits and either ends by
//! the shadow time, or stays off the reserved GPUs. Either way the head
//! finds its GPUs as the reservation planned. Time limits are upper
//! bounds, so planning with them never reserves too late; history is an
//! expectation, and a task that overruns it can still delay the head.
//! [`Scheduler::backfill_delays_head`] measures whether that happens.

use super::{Activity, Scheduler, TaskId, Time};

/// Where and from when the head of the queue is expected to start.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reservation {
    /// The shadow time.
    pub at: Time,
    /// The GPUs held for the head, each with the time it is expected to
    /// be free for it.
    pub gpus: Vec<(usize, Time)>,
}

impl Scheduler {
    /// The head's reservation, if its GPUs can be foreseen.
    pub(super) fn reservation(&self, head: TaskId) -> Option<Reservation> {
        let t = self.tasks.get(&head)?;
        let want = self.want(&t.demand, t.crashes);
        let mut free_at: Vec<(Time, usize)> = Vec::new();
        for (g, gpu) in self.gpus.iter().enumerate() {
            if self.passes(g, &t.demand, self.on_gpu(want, g)).is_some() {
                free_at.push((self.now, g));
                continue;
            }
            if !gpu.healthy || gpu.occupants.is_empty() {
                continue;
            }
            let ends: Option<Vec<Time>> = gpu
                .occupants
                .iter()
                .map(|o| self.expected_end(o.task))
                .collect();
            if let Some(end) = ends.and_then(|e| e.into_iter().max()) {
                free_at.push((end, g));
            }
        }
        free_at.sort_unstable();
        let chosen = free_at.get(..t.demand.gpus as usize)?;
        Some(Reservation {
            at: chosen.last()?.0,
            gpus: chosen.iter().map(|&(at, g)| (g, at)).collect(),
        })
    }

    /// When a running task is expected to end (not before now).
    fn expected_end(&self, task: TaskId) -> Option<Time> {
        let t = self.tasks.get(&task)?;
        let run = self.rules.queue.expected_run(&t.demand)?;
        Some((t.started + run).max(self.now))
    }

    /// The GPUs a task from behind the head must stay off to start now:
    /// the reserved ones, except those it would leave in time. A task
    /// leaves an idle reserved GPU in time if it ends by the shadow time;
    /// one that is busy, also before the tasks there are expected to end:
    /// tasks sharing a GPU slow each other alike, so it then ends before
    /// them even if all run slower than planned.
    pub(super) fn off_limits(&self, task: TaskId, r: &Reservation) -> Vec<usize> {
        let run = self
            .tasks
            .get(&task)
            .and_then(|t| self.rules.queue.expected_run(&t.demand));
        r.gpus
            .iter()
            .filter(|&&(g, free_at)| {
                let end = run.map(|run| self.now + run);
                let busy = !self.gpus[g].occupants.is_empty();
                !end.is_some_and(|end| end <= r.at && (!busy || end <= free_at))
            })
            .map(|&(g, _)| g)
            .collect()
    }

    /// Whether the head of the queue could start now but for tasks that
    /// were backfilled: the delay backfill must not cause, measured (the
    /// simulator sums the time it is true).
    pub fn backfill_delays_head(&self) -> bool {
        if self.backfilled.is_empty() {
            return false;
        }
        let Some(head) = self.head() else {
            return false;
        };
        let mut without = self.clone();
        for &task in &self.backfilled {
            without.forget_running(task);
        }
        without.place(head, &[]).is_some()
    }

    /// Takes a running task off its GPUs as if it had never run: its
    /// occupancy, bookings and the memory the GPUs last showed for it.
    /// Its SM activity stays in the GPUs' windows: the measure asks
    /// whether the head's memory and GPUs were taken, not whether the
    /// gate would have let it in.
    fn forget_running(&mut self, task: TaskId) {
        for gpu in &mut self.gpus {
            if let Some(&(_, mib)) = gpu.seen.iter().find(|(t, _)| *t == task) {
                gpu.used_mib = gpu.used_mib.saturating_sub(mib);
            }
        }
        let activity: Vec<Activity> = self.gpus.iter().map(|g| g.activity.clone()).collect();
        self.stop_running(task);
        for (gpu, activity) in self.gpus.iter_mut().zip(activity) {
            gpu.activity = activity;
            gpu.activity.forget_joined(task);
        }
    }
}
