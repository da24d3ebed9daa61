//! Pacing: a pause after each launch, for the whole server.
//!
//! The research prototype placed at most one task per turn of its loop,
//! and its turns were slow on purpose: each slept 5 s in its crash check
//! and 30 s more "as some tasks take time to start using the GPU" before
//! it looked for idle GPUs, and another 30 s "so the behavior of tasks can
//! stabilize" before it put a task beside others. After a launch the next
//! one therefore came 35 s later at the earliest, and 65 s later if it
//! shared a GPU. `placement.launch_gap_s` and
//! `placement.shared_launch_gap_s` are those two pauses, counted from the
//! server's last launch; `carma simulate --compare-paper` sets them to 35
//! and 65 s to run as the prototype did.
//!
//! carma's own rules need neither (both 0 by default): the reservation
//! ledger and the wait for a newcomer's readings keep, per GPU, the races
//! the pause kept off the whole server. A daemon may still set them to
//! stagger job start-ups.
//!
//! Backfill respects them: a task from behind a blocked head starts only
//! if the pause its launch puts on the head is over by the head's shadow
//! time, so under exact plans the head is still never delayed.

use super::{Scheduler, Time, Want};

/// When the server last launched a task, and when it last launched one
/// in queue order (not backfilled): the pause that backfill must not put
/// on the head is the difference.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Launches {
    last: Option<Time>,
    last_in_order: Option<Time>,
}

impl Scheduler {
    /// Until when the server launches nothing at all, if it is pausing
    /// now.
    pub(super) fn launch_pause(&self) -> Option<Time> {
        self.pause_after(self.launches.last, self.rules.placement.launch_gap_s)
    }

    /// Until when no task may join a GPU that runs tasks, if that pause
    /// is on now.
    pub(super) fn sharing_pause(&self) -> Option<Time> {
        self.pause_after(self.launches.last, self.rules.placement.shared_launch_gap_s)
    }

    fn pause_after(&self, launch: Option<Time>, gap: crate::wall_time::Seconds) -> Option<Time> {
        let until = launch? + gap.duration();
        (until > self.now).then_some(until)
    }

    /// Notes a launch now; `backfilled` when it came from behind a blocked
    /// head.
    pub(super) fn note_launch(&mut self, backfilled: bool) {
        self.launches.last = Some(self.now);
        if !backfilled {
            self.launches.last_in_order = Some(self.now);
        }
    }

    /// The pause a launch now would put on a head that asks `want`: what
    /// backfill must fit before the head's shadow time.
    pub(super) fn pause_on(&self, want: Want) -> Time {
        let p = &self.rules.placement;
        match want {
            Want::Idle(_) => p.launch_gap_s.duration(),
            Want::Free { .. } => p
                .launch_gap_s
                .duration()
                .max(p.shared_launch_gap_s.duration()),
        }
    }

    /// Forgets the pauses that backfilled launches set (see
    /// [`Scheduler::backfill_delays_head`]).
    pub(super) fn forget_backfilled_launches(&mut self) {
        self.launches.last = self.launches.last_in_order;
    }
}
