//! `[daemon]`: the daemon's own settings.

use std::path::PathBuf;

use serde::Deserialize;

use crate::wall_time::Seconds;

/// The largest GPU log file and the most old ones: a typo must not let
/// the log fill the spool's disk.
const GPU_LOG_MAX_MIB: u64 = 64 * 1024;
const GPU_LOG_MAX_KEEP: usize = 1000;

/// See the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub spool: PathBuf,
    pub sample_interval_s: Seconds,
    pub metrics_interval_s: Seconds,
    pub gpu_log_max_mib: u64,
    pub gpu_log_keep: usize,
    pub cancel_grace_s: Seconds,
    pub time_limit_grace_s: Seconds,
    pub allow_root_jobs: bool,
    pub job_cgroups: bool,
    pub job_path: String,
    pub conda: String,
    pub notify: String,
    pub retention_days: f64,
}

impl DaemonConfig {
    pub fn validate(&self) -> Result<(), String> {
        self.sample_interval_s
            .positive("daemon.sample_interval_s")?;
        self.metrics_interval_s
            .positive("daemon.metrics_interval_s")?;
        if !(1..=GPU_LOG_MAX_MIB).contains(&self.gpu_log_max_mib) {
            return Err(format!(
                "daemon.gpu_log_max_mib = {}: expected 1 to {GPU_LOG_MAX_MIB} MiB",
                self.gpu_log_max_mib
            ));
        }
        if self.gpu_log_keep > GPU_LOG_MAX_KEEP {
            return Err(format!(
                "daemon.gpu_log_keep = {}: expected at most {GPU_LOG_MAX_KEEP} files",
                self.gpu_log_keep
            ));
        }
        if !(0.0..=36500.0).contains(&self.retention_days) {
            return Err(format!(
                "daemon.retention_days = {}: expected days >= 0 (0: keep forever)",
                self.retention_days
            ));
        }
        for (key, value) in [
            ("job_path", &self.job_path),
            ("conda", &self.conda),
            ("notify", &self.notify),
        ] {
            if value.contains('\0') {
                return Err(format!("daemon.{key} contains a NUL byte"));
            }
        }
        Ok(())
    }
}
