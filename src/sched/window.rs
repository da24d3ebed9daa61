//! SM activity averaged over a sliding window of time.
//!
//! Samples are treated as a step function: each value holds from its
//! sample's time until the next sample. The average is the integral of that
//! function over `[now - width, now]` divided by `width`; before the first
//! sample the first value is assumed. This is exact for the daemon's 1 s
//! samples and for the simulator, which samples only when something changes,
//! so both drivers see the same rule.

use std::collections::VecDeque;

use super::Time;

/// One GPU's recent SM activity.
#[derive(Debug, Clone)]
pub struct SmactWindow {
    /// Window length, seconds.
    width: f64,
    /// (time in seconds, value) in time order; the first one may lie before
    /// the window (it gives the value at the window's start).
    samples: VecDeque<(f64, f64)>,
}

impl SmactWindow {
    pub fn new(width_s: f64) -> SmactWindow {
        SmactWindow {
            width: width_s,
            samples: VecDeque::new(),
        }
    }

    /// Changes the window's length (a configuration reload); samples are
    /// kept and pruned to the new length as new ones arrive.
    pub fn set_width(&mut self, width_s: f64) {
        self.width = width_s;
    }

    /// Records the value from `at` on. Samples must come in time order; a
    /// sample at the same time as the last replaces it, one with the same
    /// value as the last is already recorded.
    pub fn record(&mut self, at: Time, value: f64) {
        let t = at.as_secs_f64();
        match self.samples.back_mut() {
            Some(last) if last.0 >= t => last.1 = value,
            // The same value again: the step function goes on unchanged,
            // and a window of fewer samples averages faster.
            Some(last) if last.1 == value => {}
            _ => self.samples.push_back((t, value)),
        }
        // Drop samples whose successor already starts at or before the
        // oldest window start any later query can ask about.
        let start = t - self.width;
        while self.samples.len() > 1 && self.samples[1].0 <= start {
            self.samples.pop_front();
        }
    }

    /// Forgets every sample: `value` holds from `at` on, and is assumed
    /// before it (a GPU whose tasks left starts afresh).
    pub fn restart(&mut self, at: Time, value: f64) {
        self.samples.clear();
        self.samples.push_back((at.as_secs_f64(), value));
    }

    /// The latest value (0 before any sample).
    pub fn last(&self) -> f64 {
        self.samples.back().map_or(0.0, |s| s.1)
    }

    /// Average over `[now - width, now]`.
    pub fn average(&self, now: Time) -> f64 {
        let now = now.as_secs_f64();
        let (Some(&(_, first)), Some(&(since, last))) = (self.samples.front(), self.samples.back())
        else {
            return 0.0;
        };
        let start = now - self.width;
        // The usual case, on every placement's path: nothing changed
        // within the window.
        if since <= start {
            return last;
        }
        let mut area = 0.0;
        let mut cursor = start;
        let mut value = first;
        for &(t, v) in &self.samples {
            if t > cursor {
                let until = t.min(now);
                area += value * (until - cursor);
                cursor = until;
            }
            value = v;
            if cursor >= now {
                break;
            }
        }
        area += value * (now - cursor).max(0.0);
        area / self.width
    }

    /// The earliest time at or after `now` at which the average falls to
    /// `cap` or below if no new sample arrives; `None` if it never will.
    ///
    /// Between samples leaving the window the average is linear in time
    /// (slope = (last value - value leaving) / width), so the crossing is
    /// found segment by segment.
    pub fn falls_to(&self, now: Time, cap: f64) -> Option<Time> {
        let last = self.last();
        let mut avg = self.average(now);
        if avg <= cap {
            return Some(now);
        }
        if last > cap {
            return None;
        }
        let start = now.as_secs_f64();
        let mut t = start;
        // The value leaving the window at time t is f(t - width).
        let mut leaving = self.value_at(t - self.width);
        let breakpoints = self
            .samples
            .iter()
            .map(|&(ts, v)| (ts + self.width, v))
            .filter(|&(b, _)| b > start);
        for (b, next_leaving) in breakpoints.chain(std::iter::once((f64::INFINITY, last))) {
            let slope = (last - leaving) / self.width;
            if slope < 0.0 {
                let crossing = t + (avg - cap) / -slope;
                if crossing <= b {
                    return Some(Time::from_secs_f64(crossing));
                }
            }
            if b.is_infinite() {
                break;
            }
            avg += slope * (b - t);
            t = b;
            leaving = next_leaving;
        }
        None
    }

    /// f(t): the value in force at time t.
    fn value_at(&self, t: f64) -> f64 {
        let mut value = self.samples.front().map_or(0.0, |s| s.1);
        for &(ts, v) in &self.samples {
            if ts > t {
                break;
            }
            value = v;
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Time {
        Time::from_secs_f64(s)
    }

    #[test]
    fn empty_window_is_idle() {
        let w = SmactWindow::new(60.0);
        assert_eq!(w.average(secs(10.0)), 0.0);
        assert_eq!(w.falls_to(secs(10.0), 0.8), Some(secs(10.0)));
    }

    #[test]
    fn constant_value_averages_to_itself() {
        let mut w = SmactWindow::new(60.0);
        w.record(secs(5.0), 0.5);
        assert!((w.average(secs(5.0)) - 0.5).abs() < 1e-12);
        assert!((w.average(secs(500.0)) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn step_up_is_averaged_over_the_window() {
        // 0 from t=0, 1.0 from t=30; at t=60 half the window is busy.
        let mut w = SmactWindow::new(60.0);
        w.record(secs(0.0), 0.0);
        w.record(secs(30.0), 1.0);
        assert!((w.average(secs(60.0)) - 0.5).abs() < 1e-12);
        // At t=90 the whole window is busy.
        assert!((w.average(secs(90.0)) - 1.0).abs() < 1e-12);
        assert!((w.average(secs(45.0)) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn falls_to_finds_the_exact_crossing() {
        // Busy (0.9) since t=0, idle from t=100. The average over 60 s
        // falls linearly from 0.9 at t=100 to 0 at t=160; it reaches 0.8
        // after 60 * (0.9 - 0.8) / 0.9 = 6.667 s.
        let mut w = SmactWindow::new(60.0);
        w.record(secs(0.0), 0.9);
        w.record(secs(100.0), 0.0);
        let at = w.falls_to(secs(100.0), 0.8).unwrap().as_secs_f64();
        assert!((at - 106.6667).abs() < 1e-3, "{at}");
        assert!(w.average(Time::from_secs_f64(at)) <= 0.8 + 1e-9);
    }

    #[test]
    fn falls_to_crosses_several_segments() {
        // 1.0 on [0,10), 0.6 on [10,20), 0 from 20. Window 20 s, cap 0.2.
        // At t=20 avg = (10*1 + 10*0.6)/20 = 0.8. Until t=30 the 1.0 part
        // leaves: slope -1/20, avg(30) = 0.3. Then the 0.6 part leaves:
        // slope -0.6/20, reaching 0.2 after (0.3-0.2)/0.03 = 3.333 s.
        let mut w = SmactWindow::new(20.0);
        w.record(secs(0.0), 1.0);
        w.record(secs(10.0), 0.6);
        w.record(secs(20.0), 0.0);
        let at = w.falls_to(secs(20.0), 0.2).unwrap().as_secs_f64();
        assert!((at - 33.3333).abs() < 1e-3, "{at}");
    }

    #[test]
    fn never_falls_while_the_last_value_is_above_the_cap() {
        let mut w = SmactWindow::new(60.0);
        w.record(secs(0.0), 0.9);
        assert_eq!(w.falls_to(secs(10.0), 0.8), None);
    }

    #[test]
    fn old_samples_are_pruned_but_the_value_at_window_start_is_kept() {
        let mut w = SmactWindow::new(10.0);
        for i in 0..100 {
            w.record(secs(i as f64), (i % 2) as f64);
        }
        assert!(w.samples.len() <= 12, "{}", w.samples.len());
        assert!((w.average(secs(99.0)) - 0.5).abs() < 1e-12);
    }
}
