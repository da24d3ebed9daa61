//! Reservations: memory promised to launched tasks that the GPU's own
//! reading does not show yet.
//!
//! A job allocates its memory seconds to minutes after it starts. Without a
//! ledger, two tasks dispatched in quick succession would both see the same
//! free memory and the second would crash. With it, each launch books its
//! estimate on its GPUs at once; a booking shrinks as the GPU's per-task
//! reading grows and lapses after the ramp-up time, so the core never needs
//! to sleep between dispatches.

use super::{TaskId, Time};

#[derive(Debug, Clone)]
struct Booking {
    task: TaskId,
    mib: u64,
    /// What the last sample attributed to this task on this GPU.
    seen_mib: u64,
    until: Time,
}

/// All outstanding bookings of one server, per GPU.
#[derive(Debug, Clone)]
pub struct Ledger {
    per_gpu: Vec<Vec<Booking>>,
    /// No booking lapses before this (`None`: there is none)...
    lapses_from: Option<Time>,
    /// ...and none is fully seen unless this is set: until then
    /// [`Ledger::expire`], on every dispatch's path, has nothing to drop.
    seen_in_full: bool,
}

impl Ledger {
    pub fn new(gpus: usize) -> Ledger {
        Ledger {
            per_gpu: vec![Vec::new(); gpus],
            lapses_from: None,
            seen_in_full: false,
        }
    }

    /// Books `mib` on each of `gpus` for `task` until `until`.
    pub fn book(
        &mut self,
        task: TaskId,
        gpus: impl IntoIterator<Item = usize>,
        mib: u64,
        until: Time,
    ) {
        self.lapses_from = Some(self.lapses_from.map_or(until, |t| t.min(until)));
        for gpu in gpus {
            self.per_gpu[gpu].push(Booking {
                task,
                mib,
                seen_mib: 0,
                until,
            });
        }
    }

    /// Records how much memory a sample attributes to `task` on `gpu`.
    pub fn observe(&mut self, task: TaskId, gpu: usize, mib: u64) {
        if let Some(b) = self.per_gpu[gpu].iter_mut().find(|b| b.task == task) {
            b.seen_mib = b.seen_mib.max(mib);
            self.seen_in_full |= b.seen_mib >= b.mib;
        }
    }

    /// Drops `task`'s bookings on `gpus` (it ended).
    pub fn release(&mut self, task: TaskId, gpus: &[usize]) {
        for &gpu in gpus {
            self.per_gpu[gpu].retain(|b| b.task != task);
        }
    }

    /// Drops bookings that have lapsed by `now` or are fully visible in the
    /// GPU readings.
    pub fn expire(&mut self, now: Time) {
        if !self.seen_in_full && self.lapses_from.is_none_or(|t| now < t) {
            return;
        }
        for bookings in &mut self.per_gpu {
            bookings.retain(|b| b.until > now && b.seen_mib < b.mib);
        }
        self.seen_in_full = false;
        self.lapses_from = self.next_lapse();
    }

    /// Memory on `gpu` promised but not yet visible in its reading.
    pub fn outstanding(&self, gpu: usize, now: Time) -> u64 {
        self.per_gpu[gpu]
            .iter()
            .filter(|b| b.until > now)
            .map(|b| b.mib.saturating_sub(b.seen_mib))
            .sum()
    }

    /// When a booking on `gpu` next lapses with part of it unseen (more
    /// memory then counts as free there), if one does after `now`.
    pub fn lapses_on(&self, gpu: usize, now: Time) -> Option<Time> {
        self.per_gpu[gpu]
            .iter()
            .filter(|b| b.until > now && b.seen_mib < b.mib)
            .map(|b| b.until)
            .min()
    }

    /// When the next booking lapses, if any.
    pub fn next_lapse(&self) -> Option<Time> {
        self.per_gpu.iter().flatten().map(|b| b.until).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: u64) -> Time {
        Time::from_secs(x)
    }

    #[test]
    fn a_booking_counts_until_seen_or_lapsed() {
        let mut l = Ledger::new(2);
        l.book(TaskId(1), [0, 1], 4000, s(120));
        assert_eq!(l.outstanding(0, s(1)), 4000);
        assert_eq!(l.outstanding(1, s(1)), 4000);
        // The GPU shows 1500 MiB of the task: 2500 still outstanding.
        l.observe(TaskId(1), 0, 1500);
        assert_eq!(l.outstanding(0, s(2)), 2500);
        // The task allocated more than its estimate: nothing outstanding.
        l.observe(TaskId(1), 0, 5000);
        assert_eq!(l.outstanding(0, s(3)), 0);
        // The other GPU's booking lapses at 120 s.
        assert_eq!(l.outstanding(1, s(119)), 4000);
        assert_eq!(l.outstanding(1, s(120)), 0);
        l.expire(s(120));
        assert_eq!(l.next_lapse(), None);
    }

    #[test]
    fn release_drops_all_of_a_tasks_bookings() {
        let mut l = Ledger::new(1);
        l.book(TaskId(1), [0], 1000, s(10));
        l.book(TaskId(2), [0], 2000, s(20));
        l.release(TaskId(1), &[0]);
        assert_eq!(l.outstanding(0, s(0)), 2000);
        assert_eq!(l.next_lapse(), Some(s(20)));
    }
}
