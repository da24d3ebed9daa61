//! `[gpu]`: where the real GPUs are read from.

use std::path::PathBuf;

use serde::Deserialize;

use super::MetricsSetting;

/// See the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    /// The NVML library to load; empty for the driver's own.
    pub nvml_library: PathBuf,
    /// Which sources SM activity, occupancy and DRAM activity may come
    /// from.
    pub metrics: MetricsSetting,
    /// The `dcgmi` program (found on `PATH` unless a path is given).
    pub dcgmi: PathBuf,
}

impl GpuConfig {
    /// The library the daemon loads: `configured` (the command line or
    /// `CARMA_NVML_LIB`) first, then this configuration; `None` leaves the
    /// choice to the dynamic loader (`libnvidia-ml.so.1` on its path).
    pub fn nvml_library(&self, configured: Option<PathBuf>) -> Option<PathBuf> {
        configured
            .filter(|path| !path.as_os_str().is_empty())
            .or_else(|| Some(self.nvml_library.clone()).filter(|p| !p.as_os_str().is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_wins_and_empty_means_unset() {
        let config = GpuConfig {
            nvml_library: PathBuf::from("/opt/nvml.so"),
            metrics: MetricsSetting::Auto,
            dcgmi: PathBuf::from("dcgmi"),
        };
        assert_eq!(
            config.nvml_library(Some("/x.so".into())),
            Some(PathBuf::from("/x.so"))
        );
        assert_eq!(
            config.nvml_library(Some("".into())),
            Some(PathBuf::from("/opt/nvml.so"))
        );
        assert_eq!(
            config.nvml_library(None),
            Some(PathBuf::from("/opt/nvml.so"))
        );
        let unset = GpuConfig {
            nvml_library: PathBuf::new(),
            ..config
        };
        assert_eq!(unset.nvml_library(None), None);
    }
}
