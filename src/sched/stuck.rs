//! Knowing when a dispatch would launch nothing, without running it.
//!
//! Under load the queue's head waits for memory most of the time, and most
//! events change nothing it waits for: a task's memory grows into its
//! reservation, a GPU reads as busy as before, a newcomer files in behind
//! the head. A dispatch that launched nothing therefore leaves a memo: until
//! its deadline (the earliest time a reservation lapses, a GPU's gate
//! opens or a hold ends, as [`Scheduler::next_deadline`] computes it), only
//! an event that could help keeps the next dispatch from being skipped.
//! What could help is decided conservatively: any event but a sample or a
//! newcomer behind the head (a tick comes when the deadline is due); a sample that frees memory (after
//! reservations), lowers a GPU's use, changes its health or lowers one of
//! its activity metrics; a newcomer ahead of the head. Skipping then
//! changes no decision, only what it costs (the simulator's figures stay
//! exactly what they were).
//!
//! The memo is only left where the queue's order does not move by itself:
//! without backfill (whose reservations move with the clock) or while no
//! GPU is empty (the only place backfill starts a task) and, with fair
//! share, while the waiting tasks are one user's (usage that grows and
//! decays reorders users as time passes).

use super::{GpuSample, Scheduler, TaskId, Time};

/// A dispatch that launched nothing, and what it stopped at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stuck {
    /// The unplaceable head; `None` when every waiting task was blocked.
    head: Option<TaskId>,
    /// Until when only an event can help; `None`: no deadline at all.
    deadline: Option<Time>,
}

impl Scheduler {
    /// Whether a dispatch now can be skipped: one launched nothing and
    /// nothing that could change that happened since.
    pub(super) fn still_stuck(&self) -> bool {
        self.stuck
            .is_some_and(|s| s.deadline.is_none_or(|d| self.now < d))
    }

    /// The memo's deadline while it holds: the core wants a tick then.
    pub(super) fn stuck_deadline(&self) -> Option<Option<Time>> {
        self.still_stuck()
            .then(|| self.stuck.and_then(|s| s.deadline))
    }

    /// Leaves the memo after a dispatch that launched nothing and stopped
    /// at `head`, where the order cannot move by itself.
    pub(super) fn note_stuck(&mut self, head: Option<TaskId>) {
        // With backfill, only while a GPU is empty: a task from behind the
        // head may start only there, so with none the pass stopped at the
        // head without a reservation, as it does without backfill, and
        // only a task's end (an event, which forgets the memo) empties one.
        let backfilling = self.rules.queue.backfill && self.empty_gpus() > 0;
        let moving = backfilling || (self.rules.queue.fair_share && self.waiting.users() > 1);
        self.stuck = (!moving).then(|| Stuck {
            head,
            deadline: self.deadline(),
        });
    }

    /// A newcomer was filed: it can only help if it goes before the head
    /// (or there is none) or brings a second user under fair share.
    pub(super) fn note_queued(&mut self, task: TaskId) {
        let Some(Stuck {
            head: Some(head), ..
        }) = self.stuck
        else {
            self.stuck = None;
            return;
        };
        let behind = self.waiting.comes_before(head, task) == Some(true);
        if !behind || (self.rules.queue.fair_share && self.waiting.users() > 1) {
            self.stuck = None;
        }
    }

    /// Applies one GPU's sample; forgets the memo if it could let a task
    /// in that could not go before.
    pub(super) fn apply_sample(&mut self, s: &GpuSample) {
        let Some(before) = self.room(s.gpu) else {
            return;
        };
        let gpu = &mut self.gpus[s.gpu];
        gpu.used_mib = s.used_mib;
        gpu.healthy = s.healthy;
        let calmer = gpu.activity.record(self.now, s);
        gpu.seen.clone_from(&s.tasks);
        for &(task, mib) in &s.tasks {
            self.ledger.observe(task, s.gpu, mib);
        }
        let helps = self.room(s.gpu).is_none_or(|after| {
            after.free_mib > before.free_mib
                || after.used_mib < before.used_mib
                || after.healthy != before.healthy
        });
        if calmer || helps {
            self.stuck = None;
        }
    }

    /// What placement sees of GPU `g` apart from its activity.
    fn room(&self, g: usize) -> Option<Room> {
        let gpu = self.gpus.get(g)?;
        Some(Room {
            free_mib: gpu
                .total_mib
                .saturating_sub(gpu.used_mib)
                .saturating_sub(self.ledger.outstanding(g, self.now)),
            used_mib: gpu.used_mib,
            healthy: gpu.healthy,
        })
    }
}

/// What placement reads of a GPU besides its activity.
#[derive(Debug, Clone, Copy)]
struct Room {
    free_mib: u64,
    used_mib: u64,
    healthy: bool,
}
