//! Backfill: starting tasks from behind a blocked head without delaying it.
//!
//! When the head of the queue cannot be placed, the core works out the
//! earliest time it could be (the shadow time, as in Slurm's EASY
//! backfill): each GPU could take it from the time something there may
//! change for it by plan — at once if it passes now; else, for a head that
//! needs a GPU to itself, when every task there has ended (by its expected
//! end: its start plus its time limit, history or the configured
//! default); for a head that shares, when the first of them ends, a
//! memory booking there lapses, its gate opens, its newcomer's wait
//! lapses or the pause after the last launch ends. A task there whose
//! end is unknown may end at any time. The shadow time is the latest of
//! the head's GPU count of earliest such times.
//!
//! A task further back may then start now if it fits on GPUs that hold no
//! task, ends by the shadow time, and the pause its launch puts on the
//! head ([`super::pace`]) is over by then too. Alone there it runs as fast
//! as it ever does, slows nobody, and no one joins it while the head waits, so
//! under the simulator's model (no task runs faster than alone, and alone
//! at its history's pace) it has left before the head could start: the
//! head is never delayed. The rule that let a task share a reserved GPU
//! when it ended before the tasks there, as sharing was taken to slow all
//! alike, delayed the head as soon as sharing slowed light tasks more
//! than busy ones; a task kept off the reserved GPUs but running past the
//! shadow time delayed it when a reserved GPU's tasks overran, slowed by
//! sharing.
//!
//! The head can still be delayed when a plan is wrong: a task ends before
//! its expected end (an OOM crash; in the daemon, a task under a time
//! limit that ends early, or one faster than its history), memory is
//! freed by something carma does not run, an unreadable GPU comes back,
//! or a task that goes ahead of the head later (a higher priority, a
//! re-run after a crash) takes GPUs it was not planned for. A time limit
//! is an upper bound, so there the head still starts by its shadow time
//! at the latest. [`Scheduler::backfill_delays_head`] measures whether it
//! could have started sooner.

use super::{Scheduler, TaskId, Time, Want};

/// When the head of the queue could start at the earliest.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reservation {
    /// The shadow time.
    pub at: Time,
    /// How long a launch keeps the head from starting ([`super::pace`]).
    pub pause: Time,
}

impl Scheduler {
    /// The head's reservation, if its GPUs can be foreseen.
    pub(super) fn reservation(&self, head: TaskId) -> Option<Reservation> {
        let t = self.tasks.get(&head)?;
        let want = self.want(&t.demand, t.crashes);
        let mut free_at: Vec<Time> = self
            .gpus
            .iter()
            .enumerate()
            .filter_map(|(g, _)| self.earliest_for(g, &t.demand, self.on_gpu(want, g)))
            .collect();
        free_at.sort_unstable();
        Some(Reservation {
            at: *free_at.get(t.demand.gpus as usize - 1)?,
            pause: self.pause_on(want),
        })
    }

    /// The earliest time GPU `g` could take a task that asks `want` of
    /// it, by plan; `None` if nothing carma plans frees it.
    fn earliest_for(&self, g: usize, demand: &super::Demand, want: Want) -> Option<Time> {
        if self.passes(g, demand, want).is_some() {
            return Some(self.now);
        }
        let gpu = &self.gpus[g];
        if !gpu.healthy || gpu.occupants.is_empty() || (gpu.mig_instance && demand.gpus > 1) {
            return None;
        }
        let ends = gpu.occupants.iter().map(|o| self.expected_end(o.task));
        let Some(ends) = ends.collect::<Option<Vec<Time>>>() else {
            return Some(self.now);
        };
        if want.is_sole() {
            return ends.into_iter().max();
        }
        let p = &self.rules.placement;
        let opens = gpu.activity.cools_at(self.now, p);
        ends.into_iter()
            .chain(self.ledger.lapses_on(g, self.now))
            .chain(opens)
            .chain(gpu.activity.awaits(self.now))
            .chain((gpu.settles_at > self.now).then_some(gpu.settles_at))
            .chain(self.sharing_pause())
            .min()
    }

    /// When a running task is expected to end (not before now).
    fn expected_end(&self, task: TaskId) -> Option<Time> {
        let t = self.tasks.get(&task)?;
        let run = self.rules.queue.expected_run(&t.demand)?;
        Some((t.started + run).max(self.now))
    }

    /// The GPUs a task from behind the head must stay off to start now:
    /// every GPU that holds a task. `None` (all of them) unless it is
    /// expected to end by the shadow time and its launch's pause to be
    /// over by then.
    pub(super) fn off_limits(&self, task: TaskId, r: &Reservation) -> Option<Vec<usize>> {
        let run = self
            .tasks
            .get(&task)
            .and_then(|t| self.rules.queue.expected_run(&t.demand))?;
        let in_time = self.now + run <= r.at && self.now + r.pause <= r.at;
        in_time.then(|| {
            (0..self.gpus.len())
                .filter(|&g| !self.gpus[g].occupants.is_empty())
                .collect()
        })
    }

    /// How many GPUs hold no task: the most a task from behind the head
    /// may start on.
    pub(super) fn empty_gpus(&self) -> usize {
        self.gpus.iter().filter(|g| g.occupants.is_empty()).count()
    }

    /// Whether the head of the queue could start now but for tasks that
    /// were backfilled: the delay backfill must not cause, measured (the
    /// simulator sums the time it is true). The backfilled tasks are
    /// forgotten whole, their SM activity and the pauses their launches
    /// set included.
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
        without.forget_backfilled_launches();
        without.launch_pause().is_none() && without.place(head, &[]).is_some()
    }

    /// Takes a running task off its GPUs as if it had never run: its
    /// occupancy, bookings, activity and the memory the GPUs last showed
    /// for it.
    fn forget_running(&mut self, task: TaskId) {
        for gpu in &mut self.gpus {
            if let Some(&(_, mib)) = gpu.seen.iter().find(|(t, _)| *t == task) {
                gpu.used_mib = gpu.used_mib.saturating_sub(mib);
            }
        }
        self.stop_running(task);
    }
}
