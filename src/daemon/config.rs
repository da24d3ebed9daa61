//! `[daemon]`: the daemon's own settings.

use std::path::PathBuf;

use serde::Deserialize;

use crate::sched::MAX_SECONDS;

/// See the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub spool: PathBuf,
    pub sample_interval_s: f64,
    pub metrics_interval_s: f64,
    pub cancel_grace_s: f64,
    pub allow_root_jobs: bool,
    pub job_path: String,
    pub conda: String,
}

impl DaemonConfig {
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in [
            ("sample_interval_s", self.sample_interval_s),
            ("metrics_interval_s", self.metrics_interval_s),
        ] {
            if !(value > 0.0 && value <= MAX_SECONDS) {
                return Err(format!(
                    "daemon.{key} = {value}: expected seconds > 0 (at most a year)"
                ));
            }
        }
        if !(self.cancel_grace_s >= 0.0 && self.cancel_grace_s <= MAX_SECONDS) {
            return Err(format!(
                "daemon.cancel_grace_s = {}: expected seconds >= 0 (at most a year)",
                self.cancel_grace_s
            ));
        }
        for (key, value) in [("job_path", &self.job_path), ("conda", &self.conda)] {
            if value.contains('\0') {
                return Err(format!("daemon.{key} contains a NUL byte"));
            }
        }
        Ok(())
    }
}
