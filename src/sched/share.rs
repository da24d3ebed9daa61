//! Fair share: each user's recent GPU use, decayed.
//!
//! A user's usage is the GPU-seconds their jobs held, each second weighing
//! less as it recedes: it halves every `half_life`. With fair share on,
//! among waiting tasks of equal priority the user with the least usage
//! goes first, so a user who has had the server all night waits behind
//! one who just arrived, and the advantage fades as time passes.
//!
//! The integral is exact between steps: the running set does not change
//! between two events, so `n` GPUs held over `dt` add
//! `n * h / ln 2 * (1 - 2^(-dt/h))` at the end of the interval.

use std::collections::HashMap;
use std::time::Duration;

use super::Time;

/// Decayed GPU-seconds per user.
#[derive(Debug, Clone, Default)]
pub(super) struct Shares {
    usage: HashMap<u32, f64>,
    /// Time the figures are brought up to.
    at: Time,
}

impl Shares {
    /// Brings usage up to `now`, with `held` GPUs per user held since the
    /// last call.
    pub fn advance(
        &mut self,
        now: Time,
        half_life: Duration,
        held: impl IntoIterator<Item = (u32, u32)>,
    ) {
        let dt = now.saturating_sub(self.at).as_secs_f64();
        self.at = self.at.max(now);
        let h = half_life.as_secs_f64();
        let mut held = held.into_iter().peekable();
        // Nobody's use to decay or add (a simulation without users): the
        // common case on every step's path.
        if dt <= 0.0 || h <= 0.0 || (self.usage.is_empty() && held.peek().is_none()) {
            return;
        }
        let keep = (-dt / h).exp2();
        for value in self.usage.values_mut() {
            *value *= keep;
        }
        for (user, gpus) in held {
            let added = f64::from(gpus) * h / std::f64::consts::LN_2 * (1.0 - keep);
            *self.usage.entry(user).or_default() += added;
        }
        // Users whose use has faded to nothing are forgotten.
        self.usage.retain(|_, v| *v > 1e-3);
    }

    /// Adds `gpu_seconds` to `user`'s usage at once (an OOM crash's
    /// charge).
    pub fn charge(&mut self, user: u32, gpu_seconds: f64) {
        if gpu_seconds > 0.0 {
            *self.usage.entry(user).or_default() += gpu_seconds;
        }
    }

    /// `user`'s decayed GPU-seconds (0 for no user).
    pub fn usage(&self, user: Option<u32>) -> f64 {
        user.and_then(|u| self.usage.get(&u))
            .copied()
            .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_gpu_seconds_and_halves_every_half_life() {
        let h = Duration::from_secs(100);
        let mut s = Shares::default();
        let held = [(7, 2)];
        // Two GPUs for 1 s: about 2 GPU-seconds.
        s.advance(Time::from_secs(1), h, held);
        assert!((s.usage(Some(7)) - 2.0).abs() < 0.01, "{s:?}");
        // Then nothing for a half-life: half of it.
        s.advance(Time::from_secs(101), h, []);
        assert!((s.usage(Some(7)) - 1.0).abs() < 0.01, "{s:?}");
        assert_eq!(s.usage(Some(8)), 0.0);
        assert_eq!(s.usage(None), 0.0);
    }
}
