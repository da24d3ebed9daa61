//! The thresholds the core decides by, as they appear in the configuration.

use serde::Deserialize;

use super::{Gate, Policy};

/// Placement and recovery rules together: all the core is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Rules {
    pub placement: PlacementRules,
    pub recovery: RecoveryRules,
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
    pub smact_window_s: f64,
    pub margin_mib: u64,
    pub unknown_margin_mib: u64,
    pub reservation_ramp_s: f64,
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
        if !(p.smact_window_s > 0.0 && p.smact_window_s <= MAX_SECONDS) {
            return Err(format!(
                "placement.smact_window_s = {}: expected seconds > 0 (at most a year)",
                p.smact_window_s
            ));
        }
        if !(p.reservation_ramp_s >= 0.0 && p.reservation_ramp_s <= MAX_SECONDS) {
            return Err(format!(
                "placement.reservation_ramp_s = {}: expected seconds >= 0 (at most a year)",
                p.reservation_ramp_s
            ));
        }
        Ok(())
    }
}

/// The longest duration a setting may give: a year. Longer ones are typos,
/// and a duration too large for the clock would stop the daemon.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

#[cfg(test)]
impl Rules {
    /// The built-in defaults, for unit tests that tweak one rule.
    pub fn defaults() -> Rules {
        crate::config::Config::load(None)
            .expect("built-in config")
            .rules()
    }
}
