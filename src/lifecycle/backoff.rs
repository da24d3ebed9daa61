//! Retrying what failed for a reason that passes (a full disk, too many
//! open files): soon at first, then less and less often, never giving up.
//! A task whose move failed stays in the daemon's hands and in its
//! directory; it is retried until the disk has room again.
//!
//! Schedules are kept on the core's clock ([`Time`]), given by the caller:
//! nothing here reads a clock, so a test steps time as it likes.

use std::time::Duration;

use crate::sched::Time;

const FIRST: Duration = Duration::from_millis(250);
const LONGEST: Duration = Duration::from_secs(10);

/// The retry schedule of one kind of work.
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    /// The delay after the latest failure; zero while nothing fails.
    delay: Duration,
    /// When to try again; `None` while nothing fails.
    next: Option<Time>,
}

impl Backoff {
    /// Notes a failure; returns the delay until the next try, and whether
    /// this is the first failure of a run of them (worth a log line; the
    /// rest are not).
    pub fn failed(&mut self, now: Time) -> (Duration, bool) {
        // Failures while a retry is already waiting (several launches of
        // one dispatch failing alike) are one failure, not a run of them.
        if let Some(wait) = self
            .next
            .and_then(|t| t.checked_sub(now))
            .filter(|w| !w.is_zero())
        {
            return (wait, false);
        }
        let first = self.next.is_none();
        self.delay = if first {
            FIRST
        } else {
            (self.delay * 2).min(LONGEST)
        };
        self.next = Some(now + self.delay);
        (self.delay, first)
    }

    /// Notes a success: the next failure starts the schedule afresh.
    pub fn succeeded(&mut self) -> bool {
        self.delay = Duration::ZERO;
        self.next.take().is_some()
    }

    /// A retry is waiting and its time has come.
    pub fn due(&self, now: Time) -> bool {
        self.next.is_some_and(|t| t <= now)
    }

    /// When the waiting retry is due.
    pub fn next(&self) -> Option<Time> {
        self.next
    }
}

/// Retry schedules of many things of one kind, each failing on its own
/// (entries of `pending/` whose intake failed): one that fails again and
/// again is tried less and less often, and never holds up the others.
#[derive(Debug, Default)]
pub struct Backoffs<K> {
    each: std::collections::HashMap<K, Backoff>,
}

impl<K: std::hash::Hash + Eq> Backoffs<K> {
    /// Notes a failure of `key`; as [`Backoff::failed`].
    pub fn failed(&mut self, key: K, now: Time) -> (Duration, bool) {
        self.each.entry(key).or_default().failed(now)
    }

    /// Notes a success of `key`: it is no longer retried.
    pub fn succeeded<Q>(&mut self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.each.remove(key);
    }

    /// Whether `key` waits for its retry (and must not be tried before).
    pub fn waiting<Q>(&self, key: &Q, now: Time) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.each.get(key).is_some_and(|b| !b.due(now))
    }

    /// Some retry's time has come.
    pub fn due(&self, now: Time) -> bool {
        self.each.values().any(|b| b.due(now))
    }

    /// When the next retry is due.
    pub fn next(&self) -> Option<Time> {
        self.each.values().filter_map(Backoff::next).min()
    }

    /// Keeps only the keys `keep` says: those whose thing is gone are
    /// never due again.
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.each.retain(|key, _| keep(key));
    }

    /// The keys whose retry is due at `now`.
    pub fn due_keys(&self, now: Time) -> Vec<K>
    where
        K: Clone,
    {
        self.each
            .iter()
            .filter(|(_, b)| b.due(now))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Forgets the keys whose retry is due at `now`: looked at again, they
    /// were left to wait by another clock (a file still being written, a
    /// job waiting for its summary).
    pub fn forget_due(&mut self, now: Time) {
        self.each.retain(|_, b| !b.due(now));
    }

    /// How many things wait for a retry.
    pub fn len(&self) -> usize {
        self.each.len()
    }

    pub fn is_empty(&self) -> bool {
        self.each.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Time = Duration::from_secs(100);

    #[test]
    fn delays_double_up_to_a_ceiling_and_reset_on_success() {
        let mut b = Backoff::default();
        assert!(!b.due(T0) && b.next().is_none());
        assert_eq!(b.failed(T0), (FIRST, true));
        // A second failure while the first one's retry waits: not counted.
        assert_eq!(b.failed(T0 + FIRST / 2), (FIRST / 2, false));
        assert!(!b.due(T0 + FIRST / 2));
        assert!(b.due(T0 + FIRST));
        assert_eq!(b.failed(T0 + FIRST), (FIRST * 2, false));
        let mut now = T0 + FIRST * 3;
        for _ in 0..10 {
            now += b.failed(now).0;
        }
        assert_eq!(b.failed(now).0, LONGEST);
        assert!(b.succeeded());
        assert!(!b.succeeded());
        assert_eq!(b.failed(now), (FIRST, true));
    }

    #[test]
    fn each_key_backs_off_alone() {
        let mut b = Backoffs::default();
        assert_eq!(b.failed("a", T0), (FIRST, true));
        assert!(b.waiting("a", T0) && !b.waiting("b", T0) && !b.due(T0));
        assert!(b.due(T0 + FIRST) && !b.waiting("a", T0 + FIRST));
        assert_eq!(b.failed("a", T0 + FIRST), (FIRST * 2, false));
        b.succeeded("a");
        assert!(!b.waiting("a", T0) && b.next().is_none());
    }

    #[test]
    fn a_key_that_is_gone_is_never_due_again() {
        let mut b = Backoffs::default();
        b.failed("gone", T0);
        b.failed("here", T0);
        b.retain(|key| *key == "here");
        assert_eq!(b.len(), 1);
        assert!(b.waiting("here", T0) && !b.waiting("gone", T0));
        b.failed("later", T0 + FIRST);
        b.forget_due(T0 + FIRST);
        assert_eq!(b.len(), 1, "only the one not due yet stays");
        assert!(b.waiting("later", T0 + FIRST));
    }
}
