//! Collocation policies: given the GPUs that passed the preconditions, which
//! ones a task gets.

use std::cmp::{Ordering, Reverse};
use std::fmt;

use serde::Deserialize;

/// How a task picks among the GPUs that can take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Idle GPUs only: the one-job-per-GPU baseline.
    Exclusive,
    /// The next passing GPU in a fixed cycle over all GPUs.
    RoundRobin,
    /// The lowest-numbered passing GPU.
    FirstFit,
    /// The passing GPU with the least free memory: packs small jobs
    /// together and keeps large holes for large jobs ("MUG").
    #[serde(alias = "mug")]
    BestFit,
    /// The passing GPU with the most free memory: spreads jobs, leaving the
    /// largest margin against estimation error.
    Magm,
    /// The passing GPU with the lowest SM activity: least interference.
    Lug,
}

impl Policy {
    pub const ALL: [Policy; 6] = [
        Policy::Exclusive,
        Policy::RoundRobin,
        Policy::FirstFit,
        Policy::BestFit,
        Policy::Magm,
        Policy::Lug,
    ];

    /// The name used in configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Exclusive => "exclusive",
            Policy::RoundRobin => "round-robin",
            Policy::FirstFit => "first-fit",
            Policy::BestFit => "best-fit",
            Policy::Magm => "magm",
            Policy::Lug => "lug",
        }
    }

    /// The order of candidates, best first: idle GPUs before the others
    /// when `idle_first`, each group in the policy's order. `cursor` is
    /// the round-robin position (the GPU index the cycle continues from)
    /// and `gpu_count` the size of the cycle. Ties always break towards
    /// the lower GPU index, so the order is total and every decision
    /// reproducible.
    pub(super) fn order(
        self,
        idle_first: bool,
        cursor: usize,
        gpu_count: usize,
    ) -> impl Fn(&Candidate, &Candidate) -> Ordering {
        let rotated = move |c: &Candidate| (c.gpu + gpu_count - cursor % gpu_count) % gpu_count;
        move |a: &Candidate, b: &Candidate| {
            let idle = match idle_first {
                true => b.idle.cmp(&a.idle),
                false => Ordering::Equal,
            };
            idle.then_with(|| match self {
                Policy::Exclusive | Policy::FirstFit => a.gpu.cmp(&b.gpu),
                Policy::RoundRobin => rotated(a).cmp(&rotated(b)),
                Policy::BestFit => (a.free_mib, a.gpu).cmp(&(b.free_mib, b.gpu)),
                Policy::Magm => (Reverse(a.free_mib), a.gpu).cmp(&(Reverse(b.free_mib), b.gpu)),
                Policy::Lug => a.smact.total_cmp(&b.smact).then(a.gpu.cmp(&b.gpu)),
            })
        }
    }
}

/// The best `n` candidates offered so far, best first: a placement looks
/// at every GPU but keeps only as many as the task needs.
pub(super) struct Best<F> {
    order: F,
    n: usize,
    kept: Vec<Candidate>,
    offered: usize,
}

impl<F: Fn(&Candidate, &Candidate) -> Ordering> Best<F> {
    pub fn new(order: F, n: usize) -> Self {
        Best {
            order,
            n,
            kept: Vec::with_capacity(n + 1),
            offered: 0,
        }
    }

    pub fn offer(&mut self, c: Candidate) {
        self.offered += 1;
        let at = self
            .kept
            .partition_point(|k| (self.order)(k, &c) == Ordering::Less);
        if at < self.n {
            self.kept.insert(at, c);
            self.kept.truncate(self.n);
        }
    }

    /// How many were offered so far.
    pub fn offered(&self) -> usize {
        self.offered
    }

    /// The `n` best, or `None` when fewer than `n` were offered.
    pub fn chosen(self) -> Option<Vec<Candidate>> {
        (self.offered >= self.n && self.n > 0).then_some(self.kept)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .or((s == "mug").then_some(Policy::BestFit))
            .ok_or_else(|| {
                let names: Vec<_> = Policy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown policy `{s}`: expected one of {}", names.join(", "))
            })
    }
}

/// A GPU that passed the preconditions, with what the policies rank by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Candidate {
    pub gpu: usize,
    /// Free memory after outstanding reservations, MiB.
    pub free_mib: u64,
    /// Windowed SM activity.
    pub smact: f64,
    /// Nothing runs on the GPU: the idle-first step takes it first.
    pub idle: bool,
    /// Why the task would hold this GPU alone, if it would.
    pub alone: Option<&'static str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands() -> Vec<Candidate> {
        // GPU 0: 10 GiB free, busy; GPU 2: 30 GiB free, half busy;
        // GPU 3: 20 GiB free, quiet.
        vec![
            Candidate {
                gpu: 0,
                free_mib: 10_240,
                smact: 0.7,
                alone: None,
                idle: false,
            },
            Candidate {
                gpu: 2,
                free_mib: 30_720,
                smact: 0.5,
                alone: None,
                idle: false,
            },
            Candidate {
                gpu: 3,
                free_mib: 20_480,
                smact: 0.1,
                alone: None,
                idle: false,
            },
        ]
    }

    fn best(p: Policy, n: usize, idle_first: bool, cursor: usize, c: Vec<Candidate>) -> Vec<usize> {
        let mut best = Best::new(p.order(idle_first, cursor, 4), n);
        for c in c {
            best.offer(c);
        }
        best.chosen()
            .unwrap_or_default()
            .iter()
            .map(|c| c.gpu)
            .collect()
    }

    fn ranked(p: Policy, cursor: usize) -> Vec<usize> {
        best(p, 3, false, cursor, cands())
    }

    #[test]
    fn first_fit_and_exclusive_take_the_lowest_index() {
        assert_eq!(ranked(Policy::FirstFit, 0), [0, 2, 3]);
        assert_eq!(ranked(Policy::Exclusive, 0), [0, 2, 3]);
    }

    #[test]
    fn best_fit_packs_into_the_least_free() {
        assert_eq!(ranked(Policy::BestFit, 0), [0, 3, 2]);
    }

    #[test]
    fn magm_spreads_into_the_most_free() {
        assert_eq!(ranked(Policy::Magm, 0), [2, 3, 0]);
    }

    #[test]
    fn lug_takes_the_quietest() {
        assert_eq!(ranked(Policy::Lug, 0), [3, 2, 0]);
    }

    #[test]
    fn idle_first_puts_idle_gpus_ahead_and_keeps_only_the_best() {
        let mut c = cands();
        c[0].idle = true;
        // GPU 0 is idle: first, though MAGM alone would take it last.
        assert_eq!(best(Policy::Magm, 2, true, 0, c), [0, 2]);
        assert_eq!(best(Policy::BestFit, 1, true, 0, cands()), [0]);
        assert!(
            best(Policy::BestFit, 4, true, 0, cands()).is_empty(),
            "3 of 4"
        );
    }

    #[test]
    fn round_robin_continues_from_the_cursor() {
        // Cursor at GPU 1: the cycle is 1, 2, 3, 0 → passing ones 2, 3, 0.
        assert_eq!(ranked(Policy::RoundRobin, 1), [2, 3, 0]);
        // Cursor at 3: 3, 0, 1, 2 → 3, 0, 2.
        assert_eq!(ranked(Policy::RoundRobin, 3), [3, 0, 2]);
    }

    #[test]
    fn names_round_trip() {
        for p in Policy::ALL {
            assert_eq!(p.name().parse::<Policy>(), Ok(p));
        }
        assert_eq!("mug".parse::<Policy>(), Ok(Policy::BestFit));
        assert!("fastest".parse::<Policy>().unwrap_err().contains("magm"));
    }
}
