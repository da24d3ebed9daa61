//! The interference gate: whether a GPU is too busy to take a newcomer.
//!
//! Memory decides whether a job fits; activity decides whether it should
//! share. SM activity alone overstates interference: a GPU whose SMs are
//! busy with few resident warps and little memory traffic still has room
//! for another job. The research prototype therefore refused a GPU only
//! when its SMs were busy **and** either full of warps or its memory bus
//! was — SMACT >= 0.80 and (SM occupancy >= 0.45 or DRAM activity >= 0.40),
//! each averaged over a window. carma's plain SMACT cap stays as an option.
//!
//! A metric the GPU's source cannot measure (NVML's utilization counter
//! has no occupancy or DRAM figure) counts as fully busy, so the prototype
//! gate then falls back to the SMACT threshold alone rather than letting
//! anything through.

use std::fmt;

use serde::Deserialize;

use super::window::SmactWindow;
use super::{GpuSample, PlacementRules, TaskId, Time};

/// Which rule refuses a busy GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Gate {
    /// Refused when SMACT >= `smact_cap` and (occupancy >= `occupancy_cap`
    /// or DRAM activity >= `dram_cap`): the research prototype's gate.
    Prototype,
    /// Refused when SMACT > `smact_cap`, whatever else.
    Smact,
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gate::Prototype => "prototype",
            Gate::Smact => "smact",
        })
    }
}

/// How far below a threshold an average must be to count as below it.
const STRICTLY: f64 = 1e-9;

/// A GPU's activity averaged over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Load {
    pub smact: f64,
    pub occupancy: f64,
    pub dram: f64,
}

/// One GPU's recent activity: each metric over the same sliding window.
///
/// The window must not count tasks that have left the GPU: when one
/// leaves, what came before is forgotten at the next sample that no longer
/// shows it, which is then taken for the whole window (it shows only the
/// tasks that stayed, and anything carma does not run); a GPU left with no
/// task is idle at once.
///
/// Nor may it average away a task that has just come: a window of the
/// past says nothing of a task placed a moment ago, so a GPU judged by it
/// alone takes a whole backlog at one instant (nine tasks asking four
/// GPUs' worth of SMs, in the simulator, where exact estimates let memory
/// stop nothing). Like the memory ledger, the gate therefore waits for the
/// GPU's readings to show a newcomer: until a sample attributes memory to
/// it (or `placement.await_activity_s` passes) the GPU takes no other
/// shared task, and at that sample what came before is forgotten.
#[derive(Debug, Clone)]
pub(super) struct Activity {
    smact: SmactWindow,
    occupancy: SmactWindow,
    dram: SmactWindow,
    /// Tasks that left since the last sample that no longer showed them:
    /// each sample restarts the window until one does.
    left: Vec<TaskId>,
    /// Tasks placed here that no sample has shown yet, each with the time
    /// the wait for it lapses.
    joined: Vec<(TaskId, Time)>,
}

impl Activity {
    pub fn new(width_s: f64) -> Activity {
        Activity {
            smact: SmactWindow::new(width_s),
            occupancy: SmactWindow::new(width_s),
            dram: SmactWindow::new(width_s),
            left: Vec::new(),
            joined: Vec::new(),
        }
    }

    /// `task` was placed here; the GPU is judged without it until a sample
    /// shows it, so it takes no other shared task before that or `until`.
    pub fn task_joined(&mut self, task: TaskId, until: Time) {
        self.joined.push((task, until));
    }

    /// Until when the GPU waits for a newcomer to show in its samples, if
    /// it does at `now`.
    pub fn awaits(&self, now: Time) -> Option<Time> {
        self.joined
            .iter()
            .map(|&(_, until)| until)
            .filter(|&until| until > now)
            .max()
    }

    /// Stops waiting for `task`, which is no longer here.
    pub fn forget_joined(&mut self, task: TaskId) {
        self.joined.retain(|&(t, _)| t != task);
    }

    /// `task` left the GPU at `at`; `emptied` when it was the last one.
    pub fn task_left(&mut self, at: Time, task: TaskId, emptied: bool) {
        self.forget_joined(task);
        self.left.push(task);
        if emptied {
            for window in [&mut self.smact, &mut self.occupancy, &mut self.dram] {
                window.restart(at, 0.0);
            }
        }
    }

    /// A configuration reload changed the window's length.
    pub fn set_width(&mut self, width_s: f64) {
        for window in [&mut self.smact, &mut self.occupancy, &mut self.dram] {
            window.set_width(width_s);
        }
    }

    /// Records a sample's metrics from `at` on; unknown ones as busy.
    /// True when the GPU may look calmer than before (a metric fell, or
    /// the window restarted): only then can the gate open sooner.
    pub fn record(&mut self, at: Time, sample: &GpuSample) -> bool {
        let occupancy = sample.occupancy.unwrap_or(1.0);
        let dram = sample.dram.unwrap_or(1.0);
        let shown = |task: &TaskId| sample.tasks.iter().any(|(t, _)| t == task);
        let awaited = self.joined.len();
        self.joined
            .retain(|(task, until)| *until > at && !shown(task));
        let arrived = self.joined.len() < awaited;
        let calmer = arrived
            || !self.left.is_empty()
            || sample.smact < self.smact.last()
            || occupancy < self.occupancy.last()
            || dram < self.dram.last();
        if !self.left.is_empty() || arrived {
            for window in [&mut self.smact, &mut self.occupancy, &mut self.dram] {
                window.restart(at, 0.0);
            }
            // A sample taken before a task's end, read after it, still
            // shows the task: the next sample restarts again.
            if !sample.tasks.iter().any(|(t, _)| self.left.contains(t)) {
                self.left.clear();
            }
        }
        self.smact.record(at, sample.smact);
        self.occupancy.record(at, occupancy);
        self.dram.record(at, dram);
        calmer
    }

    /// The averages over the window ending at `now` that `rules` look at:
    /// occupancy and DRAM activity only matter (and are only averaged, on
    /// every placement's path) when the prototype gate sees busy SMs.
    pub fn load(&self, now: Time, rules: &PlacementRules) -> Load {
        let smact = self.smact.average(now);
        let busy = rules.gate == Gate::Prototype && smact >= rules.smact_cap;
        let average = |window: &SmactWindow| if busy { window.average(now) } else { 0.0 };
        Load {
            smact,
            occupancy: average(&self.occupancy),
            dram: average(&self.dram),
        }
    }

    /// When this GPU, refused for its activity now, opens by itself (no
    /// new sample coming): `None` when it is not refused now, or never
    /// opens. What [`Activity::opens_at`] checks first, that the latest
    /// values are low enough to be fallen to, is checked before the
    /// averages are: a GPU whose work goes on at full activity answers
    /// without either, and the deadline asks this of every GPU after each
    /// dispatch that launched nothing (40% of a queue-bound simulation).
    pub fn cools_at(&self, now: Time, rules: &PlacementRules) -> Option<Time> {
        if !self.may_fall(rules) || !rules.refuses(&self.load(now, rules)) {
            return None;
        }
        self.opens_at(now, rules)
    }

    /// Whether the windows' latest values leave [`Activity::opens_at`]
    /// anything to find: the gate's averages can fall only to the values
    /// they hold from now on.
    fn may_fall(&self, rules: &PlacementRules) -> bool {
        match rules.gate {
            Gate::Smact => self.smact.last() <= rules.smact_cap,
            Gate::Prototype => {
                let low = |window: &SmactWindow, cap: f64| window.last() <= cap - STRICTLY;
                low(&self.smact, rules.smact_cap)
                    || (low(&self.occupancy, rules.occupancy_cap)
                        && low(&self.dram, rules.dram_cap))
            }
        }
    }

    /// The earliest time at or after `now` at which `rules` admit this GPU
    /// if no new sample arrives; `None` if they never will.
    ///
    /// The prototype's thresholds refuse at equality, so its averages must
    /// fall strictly below them: a GPU that sits exactly at a threshold
    /// never opens by itself (a deadline "now" would wake the driver for
    /// nothing, over and over).
    pub fn opens_at(&self, now: Time, rules: &PlacementRules) -> Option<Time> {
        match rules.gate {
            // A window whose latest value is above the cap never falls
            // below it without a new sample: checked first, as it is cheap.
            Gate::Smact if self.smact.last() > rules.smact_cap => None,
            Gate::Smact => self.smact.falls_to(now, rules.smact_cap),
            Gate::Prototype => {
                let below = |window: &SmactWindow, cap: f64| {
                    let cap = cap - STRICTLY;
                    (window.last() <= cap)
                        .then(|| window.falls_to(now, cap))
                        .flatten()
                };
                let smact = below(&self.smact, rules.smact_cap);
                let occupancy = below(&self.occupancy, rules.occupancy_cap);
                let dram = below(&self.dram, rules.dram_cap);
                let quiet = occupancy.zip(dram).map(|(o, d)| o.max(d));
                [smact, quiet].into_iter().flatten().min()
            }
        }
    }
}

impl PlacementRules {
    /// Whether a GPU with this load is too busy to take a newcomer. On
    /// every placement's path, so it allocates nothing.
    pub(super) fn refuses(&self, load: &Load) -> bool {
        match self.gate {
            Gate::Smact => load.smact > self.smact_cap,
            Gate::Prototype => {
                load.smact >= self.smact_cap
                    && (load.occupancy >= self.occupancy_cap || load.dram >= self.dram_cap)
            }
        }
    }

    /// Why a GPU with this load may not take a newcomer, for people;
    /// `None` when it may.
    pub(super) fn refusal(&self, load: &Load) -> Option<String> {
        if !self.refuses(load) {
            return None;
        }
        Some(match self.gate {
            Gate::Smact => format!("SMACT {:.2} > {:.2}", load.smact, self.smact_cap),
            Gate::Prototype => format!(
                "SMACT {:.2} >= {:.2} with occupancy {:.2} (cap {:.2}), DRAM {:.2} (cap {:.2})",
                load.smact,
                self.smact_cap,
                load.occupancy,
                self.occupancy_cap,
                load.dram,
                self.dram_cap
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Rules;

    fn rules(gate: Gate) -> PlacementRules {
        let mut p = Rules::defaults().placement;
        p.gate = gate;
        p
    }

    fn load(smact: f64, occupancy: f64, dram: f64) -> Load {
        Load {
            smact,
            occupancy,
            dram,
        }
    }

    #[test]
    fn the_prototype_gate_needs_busy_sms_and_full_warps_or_a_busy_bus() {
        let p = rules(Gate::Prototype);
        assert!(p.refuses(&load(0.85, 0.50, 0.10)));
        assert!(p.refuses(&load(0.85, 0.10, 0.40)));
        assert!(p.refuses(&load(0.80, 0.45, 0.00)), "thresholds count");
        assert!(!p.refuses(&load(0.95, 0.30, 0.30)), "busy SMs alone");
        assert!(!p.refuses(&load(0.79, 0.90, 0.90)), "SMs not busy");
    }

    #[test]
    fn the_smact_gate_looks_at_sms_only() {
        let p = rules(Gate::Smact);
        assert!(p.refuses(&load(0.81, 0.0, 0.0)));
        assert!(!p.refuses(&load(0.80, 1.0, 1.0)));
    }

    fn sample(smact: f64, occupancy: Option<f64>, dram: Option<f64>) -> GpuSample {
        GpuSample {
            gpu: 0,
            used_mib: 0,
            smact,
            occupancy,
            dram,
            healthy: true,
            tasks: Vec::new(),
        }
    }

    #[test]
    fn unknown_metrics_count_as_busy() {
        let p = rules(Gate::Prototype);
        let mut a = Activity::new(30.0);
        a.record(Time::ZERO, &sample(0.9, None, None));
        assert!(p.refuses(&a.load(Time::from_secs(1), &p)));
        a.record(Time::from_secs(100), &sample(0.9, Some(0.1), Some(0.1)));
        assert!(!p.refuses(&a.load(Time::from_secs(200), &p)));
    }

    #[test]
    fn the_gate_opens_when_the_warps_and_the_bus_calm_down() {
        // Busy in every way until t = 100, then SMs still busy but
        // occupancy and DRAM quiet: open once both averages fall below
        // their caps, long before SMACT would.
        let p = rules(Gate::Prototype);
        let mut a = Activity::new(30.0);
        a.record(Time::ZERO, &sample(0.9, Some(0.9), Some(0.9)));
        a.record(Time::from_secs(100), &sample(0.9, Some(0.0), Some(0.0)));
        let now = Time::from_secs(100);
        let open = a.opens_at(now, &p).unwrap().as_secs_f64();
        assert!(p.refuses(&a.load(now, &p)));
        // Occupancy reaches 0.45 after 30 * (0.9 - 0.45) / 0.9 = 15 s;
        // DRAM reaches 0.40 after 30 * 0.5 / 0.9 = 16.7 s: the later one.
        assert!((open - 116.667).abs() < 1e-2, "{open}");
        assert_eq!(rules(Gate::Smact).smact_cap, p.smact_cap);
        assert_eq!(a.opens_at(now, &rules(Gate::Smact)), None);
    }

    #[test]
    fn a_gpu_exactly_at_a_threshold_does_not_open_by_itself() {
        // SMACT 0.80 and occupancy unknown: refused (thresholds count), and
        // no deadline, or the driver would be woken at once, forever.
        let p = rules(Gate::Prototype);
        let mut a = Activity::new(30.0);
        a.record(Time::ZERO, &sample(0.8, None, None));
        let now = Time::from_secs(100);
        assert!(p.refuses(&a.load(now, &p)));
        assert_eq!(a.opens_at(now, &p), None);
    }

    /// `cools_at` is `opens_at` of a refused GPU, whatever it checks
    /// first: a GPU still at full activity never cools, one refused for
    /// its last minute does when the average falls, an open one has
    /// nothing to wait for; under both gates, at times around the fall.
    #[test]
    fn cooling_is_the_opening_of_a_refused_gpu() {
        for gate in [Gate::Smact, Gate::Prototype] {
            let p = rules(gate);
            let mut a = Activity::new(30.0);
            a.record(Time::ZERO, &sample(0.95, Some(0.9), Some(0.9)));
            let mut calm = a.clone();
            calm.record(Time::from_secs(100), &sample(0.1, Some(0.1), Some(0.1)));
            let mut cooled = 0;
            for t in [50.0, 100.0, 105.0, 110.0, 125.0, 200.0] {
                let now = Time::from_secs_f64(t);
                for gpu in [&a, &calm] {
                    let refused = p.refuses(&gpu.load(now, &p));
                    let expected = refused.then(|| gpu.opens_at(now, &p)).flatten();
                    assert_eq!(gpu.cools_at(now, &p), expected, "{gate:?} at {t} s");
                    cooled += usize::from(expected.is_some());
                }
            }
            assert_eq!(a.cools_at(Time::from_secs(50), &p), None, "{gate:?}");
            assert!(cooled > 0, "{gate:?}: the calmed GPU cools at some point");
        }
    }
}
