//! Configuration: one complete default embedded in the binary, overridden
//! key by key by a user's TOML file.
//!
//! Merging happens on TOML tables before deserialising, so an override file
//! names only what it changes and every key still has exactly one
//! documented default (`config/default.toml`). Deserialising denies unknown
//! keys: a misspelt threshold is an error, never a silent default.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

mod changes;
mod daemon;
pub use changes::changes;
pub use daemon::DaemonConfig;

use crate::estimate;
use crate::gpu::GpuConfig;
use crate::http::HttpConfig;
use crate::mps::MpsConfig;
use crate::oom::OomRules;
use crate::rad::LegacyRules;
use crate::sched::{PlacementRules, QueueRules, RecoveryRules, Rules};
use crate::simulate::Model;

/// The default configuration, documented key by key.
pub const DEFAULT_TOML: &str = include_str!("config/default.toml");

/// [`DEFAULT_TOML`]'s table as JSON, made by `build.rs`: every carma
/// process starts from the defaults, and JSON's parser reads them in a
/// fifth of the time TOML's takes.
const DEFAULTS_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/default-config.json"));

/// The built-in defaults, as a table to merge overrides into.
fn defaults() -> Result<toml::Table, serde_json::Error> {
    serde_json::from_str(DEFAULTS_JSON)
}

/// Everything carma can be configured with.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// How the scheduling core picks GPUs.
    pub placement: PlacementRules,
    /// What the scheduling core does after an OOM crash.
    pub recovery: RecoveryRules,
    /// What the queue allows each job.
    pub queue: QueueRules,
    /// The GPU and workload model of `carma simulate`.
    pub simulate: Model,
    /// Where real GPUs are read from.
    pub gpu: GpuConfig,
    /// The daemon's own settings.
    pub daemon: DaemonConfig,
    /// How an OOM crash is recognised.
    pub oom: OomRules,
    /// NVIDIA MPS.
    pub mps: MpsConfig,
    /// The memory estimator chain.
    pub estimate: estimate::Settings,
    /// How the research prototype's job files are read.
    pub legacy: LegacyRules,
    /// `carma slurm`.
    pub slurm: crate::slurm::Settings,
    /// The daemon's status page and Prometheus metrics.
    pub http: HttpConfig,
    /// What the file said, as TOML: over the defaults, every key's value
    /// ([`Config::values`]).
    #[serde(skip)]
    overrides: toml::Table,
}

/// A configuration that cannot be used, with the file it came from.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Config {
    /// The built-in defaults, overridden by `path` when given.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            None => Self::from_override("<built-in>", ""),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                Self::from_override(path, &text)
            }
        }
    }

    /// The built-in defaults overridden by `text` (TOML); `origin` names the
    /// text in errors.
    pub fn from_override(origin: impl AsRef<Path>, text: &str) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: origin.as_ref().to_owned(),
            message,
        };
        let overrides: toml::Table = text.parse().map_err(|e| invalid(format!("{e}")))?;
        let merged = || {
            merged(&overrides)
                .map(toml::Value::Table)
                .map_err(|e| invalid(format!("built-in defaults: {e}")))
        };
        // Read plainly first: tracking the path costs a third of the read,
        // and only an error needs it, to name the key (`placement.settle_s:
        // expected seconds from 0 to a year, found -1`) wherever in the
        // tree it sits. It merges again rather than keep a copy, which
        // every start would pay for.
        let mut config = match Config::deserialize(merged()?) {
            Ok(config) => config,
            Err(_) => serde_path_to_error::deserialize(merged()?).map_err(|e| {
                let path = e.path().to_string();
                let message = e.into_inner().message().to_owned();
                invalid(match path.as_str() {
                    "." | "" => message,
                    path => format!("{path}: {message}"),
                })
            })?,
        };
        config.validate().map_err(invalid)?;
        config.overrides = overrides;
        Ok(config)
    }

    /// Every key's value as TOML, defaults and overrides merged: what a
    /// reload compares ([`changes()`]), in the same words the files use.
    /// Made when asked, not kept: only a reload asks, and a copy kept for
    /// it was a tenth of the instructions of every command's start.
    pub fn values(&self) -> toml::Table {
        // The defaults parsed when this configuration was made of them.
        merged(&self.overrides).unwrap_or_default()
    }

    /// The scheduling core's share of the configuration.
    pub fn rules(&self) -> Rules {
        Rules {
            placement: PlacementRules {
                one_user_per_gpu: self.mps.enabled,
                ..self.placement.clone()
            },
            recovery: self.recovery.clone(),
            queue: self.queue.clone(),
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.rules().validate()?;
        self.simulate.validate()?;
        self.daemon.validate()?;
        self.mps.validate()?;
        self.slurm.validate()?;
        self.http.validate()?;
        self.estimate.validate()
    }
}

/// The built-in defaults with `overrides` merged in.
fn merged(overrides: &toml::Table) -> Result<toml::Table, serde_json::Error> {
    let mut table = defaults()?;
    merge(&mut table, overrides.clone());
    Ok(table)
}

/// Overlays `over` on `base`: tables merge key by key, anything else
/// replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Policy;

    #[test]
    fn the_defaults_carried_as_json_say_what_the_documented_defaults_say() {
        let documented: toml::Table = DEFAULT_TOML.parse().unwrap();
        assert_eq!(defaults().unwrap(), documented);
    }

    #[test]
    fn defaults_load() {
        let config = Config::load(None).unwrap();
        assert_eq!(config.placement.policy, Policy::Magm);
        assert_eq!(config.placement.margin_mib, 2048);
        assert_eq!(config.gpu.nvml_library, PathBuf::new());
    }

    #[test]
    fn an_override_changes_only_what_it_names() {
        let config =
            Config::from_override("t.toml", "[placement]\npolicy = \"best-fit\"\n").unwrap();
        assert_eq!(config.placement.policy, Policy::BestFit);
        assert_eq!(config.placement.smact_cap, 0.8);
        assert_eq!(config.recovery.max_retries, 2);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = Config::from_override("t.toml", "[placement]\nsmact_capp = 0.5\n").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("t.toml") && text.contains("smact_capp"),
            "{text}"
        );
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(Config::from_override("t", "[placement]\npolicy = \"fastest\"\n").is_err());
        assert!(Config::from_override("t", "[placement]\nsmact_cap = 1.5\n").is_err());
        assert!(Config::from_override("t", "[simulate]\nsmact_swing = 1.0\n").is_err());
        for period in ["0", "1e-308", "inf", "nan", "1e9"] {
            let text = format!("[simulate]\nsmact_swing_period_s = {period}\n");
            assert!(Config::from_override("t", &text).is_err(), "{period}");
        }
        assert!(Config::from_override("t", "[placement]\nsmact_window_s = 0\n").is_err());
        // Too long for the clock: refused, never a panic later.
        assert!(Config::from_override("t", "[daemon]\ncancel_grace_s = 1e300\n").is_err());
        assert!(Config::from_override("t", "[placement]\nreservation_ramp_s = 1e300\n").is_err());
        assert!(Config::from_override("t", "[simulate]\nwarmup_s = -1\n").is_err());
        assert!(Config::from_override("t", "[simulate]\nwarmup_start = 0\n").is_err());
        assert!(Config::from_override("t", "[queue]\nmax_time_s = -1\n").is_err());
        assert!(
            Config::from_override("t", "[queue]\nmax_time_s = 60\ndefault_time_s = 120\n").is_err()
        );
        assert!(Config::from_override("t", "[daemon]\ntime_limit_grace_s = -1\n").is_err());
        assert!(Config::from_override("t", "placement = [").is_err());
        assert!(Config::from_override("t", "[estimate]\nquantile = 0\n").is_err());
        assert!(Config::from_override("t", "[estimate]\norder = []\n").is_err());
        assert!(Config::from_override("t", "[estimate]\norder = [\"oracle\"]\n").is_err());
        assert!(Config::from_override("t", "[http]\nlisten = \"localhost\"\n").is_err());
    }

    #[test]
    fn a_bad_duration_is_said_with_its_key_wherever_it_sits() {
        for (text, said) in [
            (
                "[placement]\nsettle_s = -1\n",
                "placement.settle_s: expected seconds from 0 to a year (31536000), found -1",
            ),
            (
                "[daemon]\ncancel_grace_s = nan\n",
                "daemon.cancel_grace_s: expected seconds from 0 to a year",
            ),
            (
                "[queue]\nfair_share_half_life_s = 0\n",
                "queue.fair_share_half_life_s = 0: expected seconds > 0",
            ),
        ] {
            let error = Config::from_override("t", text).unwrap_err().to_string();
            assert!(error.contains(said), "{text}: {error}");
        }
    }
}
