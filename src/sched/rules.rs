//! The thresholds the core decides by, as they appear in the configuration.

use std::time::Duration;

use serde::Deserialize;

use super::{Gate, Policy};
use crate::wall_time::{self, Seconds};

/// Placement, recovery and queue rules together: all the core is
/// configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub placement: PlacementRules,
    pub recovery: RecoveryRules,
    pub queue: QueueRules,
}

/// `[queue]`: what the queue allows each job; see the commented default
/// configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueRules {
    /// Wall-time limit of a job whose file gives none; 0: none.
    pub default_time_s: Seconds,
    /// Longest wall-time limit a job may ask for; 0: no maximum.
    pub max_time_s: Seconds,
    /// The priorities users other than root may give their own jobs.
    pub user_priority_min: i32,
    pub user_priority_max: i32,
    /// Per-user limits; 0: none.
    pub max_running_per_user: u32,
    pub max_gpus_per_user: u32,
    pub max_queued_per_user: u32,
    pub user_max_tasks: u64,
    pub user_max_array: u64,
    pub user_max_spool_mib: u64,
    /// MiB of copies one user's ended tasks keep; 0: no cap.
    pub user_max_ended_mib: u64,
    pub default_cpus: f64,
    pub max_cpus: f64,
    pub default_host_memory_mib: u64,
    pub max_host_memory_mib: u64,
    /// Processes and threads one run may have at once (its cgroup's
    /// `pids.max`); 0: no limit.
    pub max_processes: u64,
    /// Order equal priorities by each user's recent GPU use.
    pub fair_share: bool,
    /// How fast that use is forgotten: it halves every this many seconds.
    pub fair_share_half_life_s: Seconds,
    /// Start tasks from behind a blocked head when they cannot delay it.
    pub backfill: bool,
    /// Run time assumed of a task with neither a time limit nor history,
    /// seconds; 0: such a task is not backfilled onto reserved GPUs.
    pub backfill_default_s: Seconds,
    /// Tasks behind a blocked head that one dispatch looks at for
    /// backfill, at most (Slurm's `bf_max_job_test`); 0: all of them.
    /// Every event dispatches, so without a bound a long queue made each
    /// event's work grow with it.
    pub backfill_max_tested: u32,
}

impl QueueRules {
    /// The limit a job runs under: its own, else the configured default,
    /// else the maximum (so that no job escapes a maximum by saying
    /// nothing).
    pub fn time_limit(&self, asked: Option<Duration>) -> Option<Duration> {
        asked
            .or_else(|| self.default_time_s.nonzero())
            .or_else(|| self.max_time_s.nonzero())
    }

    /// How long a task is expected to run, for backfill: its time limit
    /// (an upper bound, so a reservation computed from it is never late),
    /// else what history says, else the configured default.
    pub fn expected_run(&self, demand: &super::Demand) -> Option<Duration> {
        self.time_limit(demand.time_limit)
            .or(demand.history)
            .or_else(|| self.backfill_default_s.nonzero())
    }

    /// Why a user other than root may not give a job `priority`, if they
    /// may not: the range keeps one user from jumping everyone else.
    pub fn priority_refusal(&self, priority: i32) -> Option<String> {
        let (min, max) = (self.user_priority_min, self.user_priority_max);
        (!(min..=max).contains(&priority)).then(|| {
            format!(
                "priority {priority}: users may give priorities from {min} to {max} \
                 (queue.user_priority_min, queue.user_priority_max); root may give any"
            )
        })
    }

    /// The host limits a job runs under: what it asks, else the default
    /// (none for 0); or why it may not ask that much.
    pub fn host_limits(&self, asked: super::HostLimits) -> Result<super::HostLimits, String> {
        if let Some(cpus) = asked
            .cpus
            .filter(|&c| self.max_cpus > 0.0 && c > self.max_cpus)
        {
            return Err(format!(
                "cpus: {cpus} is more than the maximum of {} (queue.max_cpus)",
                self.max_cpus
            ));
        }
        if let Some(mib) = asked
            .memory_mib
            .filter(|&m| self.max_host_memory_mib > 0 && m > self.max_host_memory_mib)
        {
            return Err(format!(
                "host_memory: {} is more than the maximum of {} (queue.max_host_memory_mib)",
                crate::size::format_mib(mib),
                crate::size::format_mib(self.max_host_memory_mib)
            ));
        }
        Ok(super::HostLimits {
            cpus: asked
                .cpus
                .or((self.default_cpus > 0.0).then_some(self.default_cpus)),
            memory_mib: asked
                .memory_mib
                .or((self.default_host_memory_mib > 0).then_some(self.default_host_memory_mib)),
        })
    }

    /// Why a job asking for `asked` may not run here at all, if it may not.
    pub fn refuses(&self, asked: Option<Duration>) -> Option<String> {
        let max = self.max_time_s.nonzero()?;
        let asked = asked.filter(|&a| a > max)?;
        Some(format!(
            "time: {} is more than the maximum of {} (queue.max_time_s)",
            wall_time::format(asked),
            wall_time::format(max)
        ))
    }
}

/// `[placement]`: see the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementRules {
    pub policy: Policy,
    pub idle_first: bool,
    pub gate: Gate,
    pub smact_cap: f64,
    pub occupancy_cap: f64,
    pub dram_cap: f64,
    pub smact_window_s: Seconds,
    pub margin_mib: u64,
    pub unknown_margin_mib: u64,
    pub reservation_ramp_s: Seconds,
    pub await_activity_s: Seconds,
    pub settle_s: Seconds,
    pub launch_gap_s: Seconds,
    pub shared_launch_gap_s: Seconds,
    pub idle_used_mib: u64,
    /// Jobs of different users never share a GPU. Not a setting of its
    /// own: an MPS server serves one user at a time, so this is on exactly
    /// when carma runs jobs under MPS (see [`crate::config::Config::rules`]).
    #[serde(skip)]
    pub one_user_per_gpu: bool,
}

/// Where a task goes after an OOM crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecoveryMode {
    /// A whole idle GPU: the crash cannot repeat for lack of memory.
    Exclusive,
    /// Any GPU with the last need plus a step per crash free.
    Looser,
}

/// `[recovery]`: see the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryRules {
    pub mode: RecoveryMode,
    pub looser_step_mib: u64,
    pub max_retries: u32,
    pub user_max_retries: u32,
    pub oom_charge_s: Seconds,
}

impl RecoveryRules {
    /// Why a user other than root may not give a job `retries`, if they
    /// may not: a job that fakes OOM crashes would otherwise re-run, and
    /// be charged for, without end.
    pub fn retries_refusal(&self, retries: u32) -> Option<String> {
        let max = self.user_max_retries;
        (retries > max).then(|| {
            format!(
                "retries: {retries}: users may allow at most {max} OOM re-runs \
                 (recovery.user_max_retries); root may allow any"
            )
        })
    }
}

impl Rules {
    /// Refuses values the core cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        let p = &self.placement;
        for (key, cap) in [
            ("smact_cap", p.smact_cap),
            ("occupancy_cap", p.occupancy_cap),
            ("dram_cap", p.dram_cap),
        ] {
            if !(cap > 0.0 && cap <= 1.0) {
                return Err(format!(
                    "placement.{key} = {cap}: expected a fraction in (0, 1]"
                ));
            }
        }
        p.smact_window_s.positive("placement.smact_window_s")?;
        let q = &self.queue;
        q.fair_share_half_life_s
            .positive("queue.fair_share_half_life_s")?;
        if !(0.0..=4096.0).contains(&q.default_cpus) || !(0.0..=4096.0).contains(&q.max_cpus) {
            return Err(format!(
                "queue.default_cpus = {}, queue.max_cpus = {}: expected CPUs from 0 (none) to 4096",
                q.default_cpus, q.max_cpus
            ));
        }
        if q.user_priority_min > q.user_priority_max {
            return Err(format!(
                "queue.user_priority_min = {} is more than queue.user_priority_max = {}",
                q.user_priority_min, q.user_priority_max
            ));
        }
        if q.max_time_s > Seconds::ZERO && q.default_time_s > q.max_time_s {
            return Err(format!(
                "queue.default_time_s = {}: more than queue.max_time_s = {}",
                q.default_time_s.get(),
                q.max_time_s.get()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
impl Rules {
    /// The built-in defaults, for unit tests that tweak one rule.
    pub fn defaults() -> Rules {
        crate::config::Config::load(None)
            .expect("built-in config")
            .rules()
    }
}
