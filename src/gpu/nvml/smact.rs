//! SM activity: GPM where the GPU has it, the utilization counter
//! otherwise.
//!
//! SMACT, the fraction of time the SMs have work, is what the placement
//! cap limits. Hopper and newer GPUs measure it: GPM's SM utilization
//! between two samples. Older GPUs give only the utilization counter, the
//! fraction of time any kernel ran: one busy SM counts as a busy GPU, so it
//! reads high for small kernels and makes the cap stricter, which errs on
//! the safe side. The source is chosen per GPU when the daemon starts and
//! shown in `carma status`; a GPU whose GPM stops working falls back to the
//! counter, and the log says so once.

use std::fmt;

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::struct_wrappers::gpm::GpmMetricResult;
use nvml_wrapper::{Device, GpmSample};

use super::failure::{Failure, Quantity, Said, classify, optional};

/// Where a GPU's SMACT comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// GPM SM utilization (Hopper and newer).
    Gpm,
    /// `nvmlDeviceGetUtilizationRates`, the kernel-running fraction.
    Counter,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Gpm => "GPM SM utilization",
            Source::Counter => "the utilization counter",
        })
    }
}

/// One GPU's SMACT reader.
pub struct Smact {
    source: Source,
    /// The GPM sample the next reading starts from: GPM metrics are
    /// differences between two samples.
    previous: Option<GpmSample<'static>>,
}

impl Smact {
    /// GPM when the GPU says it supports it and gives a first sample, the
    /// counter otherwise.
    pub fn start(device: &Device<'static>) -> Smact {
        let first = match device.gpm_support() {
            Ok(true) => device.gpm_sample().ok(),
            _ => None,
        };
        Smact {
            source: if first.is_some() {
                Source::Gpm
            } else {
                Source::Counter
            },
            previous: first,
        }
    }

    pub fn source(&self) -> Source {
        self.source
    }

    /// SM activity since the previous reading, percent; 0 when the GPU has
    /// neither GPM nor the counter. An error breaks the reading.
    pub fn read(
        &mut self,
        gpu: usize,
        device: &Device<'static>,
        said: &mut Said,
    ) -> Result<f64, String> {
        if self.source == Source::Gpm {
            match self.gpm(device) {
                Ok(Some(percent)) => return Ok(percent),
                // No earlier sample to compare with (after a failure): the
                // counter answers this once.
                Ok(None) => {}
                Err(e) => match classify(Quantity::Gpm, &e) {
                    Failure::Unavailable => {
                        said.unavailable(gpu, Quantity::Gpm, &e);
                        self.source = Source::Counter;
                        self.previous = None;
                    }
                    Failure::Broken(why) => {
                        self.previous = None;
                        return Err(why);
                    }
                },
            }
        }
        let counter = optional(said, gpu, Quantity::Utilization, device.utilization_rates())?;
        Ok(counter.map_or(0.0, |u| f64::from(u.gpu)))
    }

    /// GPM SM utilization between the previous sample and a new one, which
    /// becomes the previous.
    fn gpm(&mut self, device: &Device<'static>) -> Result<Option<f64>, NvmlError> {
        let next = device.gpm_sample()?;
        let percent = match &self.previous {
            Some(previous) => Some(sm_percent(gpm_metrics_get(
                device.nvml(),
                previous,
                &next,
                &[GpmMetricId::SmUtil, GpmMetricId::GraphicsUtil],
            )?)?),
            None => None,
        };
        self.previous = Some(next);
        Ok(percent)
    }
}

/// The SM utilization out of GPM's answers, the graphics-engine
/// utilization where a GPU gives only that; the first error when neither.
fn sm_percent(results: Vec<Result<GpmMetricResult, NvmlError>>) -> Result<f64, NvmlError> {
    let mut first_error = None;
    for result in results {
        match result {
            Ok(metric) => return Ok(metric.value),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or(NvmlError::NoData))
}

/// "SMACT from GPM SM utilization (GPU 0, 1), the utilization counter
/// (GPU 2)": each source with its GPUs (index, source), in order of first
/// use.
pub fn summary(sources: &[(usize, Source)]) -> String {
    let mut groups: Vec<(Source, Vec<String>)> = Vec::new();
    for &(index, source) in sources {
        match groups.iter_mut().find(|(s, _)| *s == source) {
            Some((_, gpus)) => gpus.push(index.to_string()),
            None => groups.push((source, vec![index.to_string()])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(source, gpus)| format!("{source} (GPU {})", gpus.join(", ")))
        .collect();
    if parts.is_empty() {
        return "no GPU readable".into();
    }
    format!("SMACT from {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use nvml_wrapper::struct_wrappers::gpm::GpmMetricInfo;

    use super::*;

    fn metric(metric_id: GpmMetricId, value: f64) -> Result<GpmMetricResult, NvmlError> {
        Ok(GpmMetricResult {
            metric_id,
            value,
            metric_info: GpmMetricInfo {
                short_name: String::new(),
                long_name: String::new(),
                unit: String::new(),
            },
        })
    }

    #[test]
    fn sm_utilization_first_then_graphics_then_the_error() {
        assert_eq!(
            sm_percent(vec![
                metric(GpmMetricId::SmUtil, 42.0),
                metric(GpmMetricId::GraphicsUtil, 90.0)
            ])
            .unwrap(),
            42.0
        );
        assert_eq!(
            sm_percent(vec![
                Err(NvmlError::NotSupported),
                metric(GpmMetricId::GraphicsUtil, 90.0)
            ])
            .unwrap(),
            90.0
        );
        assert!(matches!(
            sm_percent(vec![Err(NvmlError::NotSupported), Err(NvmlError::Unknown)]),
            Err(NvmlError::NotSupported)
        ));
    }

    #[test]
    fn the_summary_names_each_source_with_its_gpus() {
        assert_eq!(
            summary(&[(0, Source::Gpm), (1, Source::Counter), (2, Source::Gpm)]),
            "SMACT from GPM SM utilization (GPU 0, 2), the utilization counter (GPU 1)"
        );
        assert_eq!(
            summary(&[(1, Source::Counter)]),
            "SMACT from the utilization counter (GPU 1)"
        );
        assert_eq!(summary(&[]), "no GPU readable");
    }
}
