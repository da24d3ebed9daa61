//! SM activity, SM occupancy and DRAM activity of one GPU, from the best
//! source it has: DCGM's profiling fields, GPM, or the utilization counter
//! (see [`MetricSource`] for why they differ).
//!
//! DCGM's values come from the backend's `dcgmi dmon` ([`crate::gpu::dcgm`])
//! and are used while fresh. GPM (Hopper and newer) is a difference between
//! two samples, so it is sampled every reading even while DCGM answers:
//! when DCGM goes quiet, GPM takes over at once instead of after a warm-up.
//! The utilization counter answers when neither does. A GPU whose GPM
//! stops working falls back for good, said once; DCGM coming and going is
//! logged at each change, not at each reading.

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::struct_wrappers::gpm::GpmMetricResult;
use nvml_wrapper::{Device, GpmSample};

use super::failure::{Failure, Quantity, Said, classify, optional};
use crate::gpu::MetricSource;
use crate::gpu::MetricsSetting;
use crate::gpu::dcgm::Fields;

/// GPM metrics asked for, in this order: SM utilization, the graphics
/// engine's where a GPU lacks that, SM occupancy, DRAM bandwidth use.
const GPM_METRICS: [GpmMetricId; 4] = [
    GpmMetricId::SmUtil,
    GpmMetricId::GraphicsUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::DramBwUtil,
];

/// One reading's SM metrics, fractions in 0..=1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Activity {
    pub smact: f64,
    pub occupancy: Option<f64>,
    pub dram: Option<f64>,
    pub source: MetricSource,
}

impl Activity {
    /// A MIG instance's: not measured (see [`MetricSource::Unmeasured`]).
    pub fn unmeasured() -> Activity {
        Activity {
            smact: 0.0,
            occupancy: None,
            dram: None,
            source: MetricSource::Unmeasured,
        }
    }
}

/// One GPU's metric reader.
pub struct ActivityReader {
    /// GPM, while the GPU supports it and the setting allows it: the
    /// sample the next reading starts from (`None` after a failure).
    gpm: Option<Option<GpmSample<'static>>>,
    /// DCGM answered the previous reading: its coming and going is logged.
    on_dcgm: bool,
}

impl ActivityReader {
    /// GPM when `setting` allows it and the GPU says it supports it and
    /// gives a first sample.
    pub fn start(device: &Device<'static>, setting: MetricsSetting) -> ActivityReader {
        let first = match setting.uses_gpm() && device.gpm_support().unwrap_or(false) {
            true => device.gpm_sample().ok(),
            false => None,
        };
        ActivityReader {
            gpm: first.map(Some),
            on_dcgm: false,
        }
    }

    /// The source the GPU falls back to without DCGM.
    pub fn nvml_source(&self) -> MetricSource {
        match self.gpm {
            Some(_) => MetricSource::Gpm,
            None => MetricSource::Utilization,
        }
    }

    /// The GPU's metrics now: `dcgm`'s fresh values when they have SM
    /// activity, else GPM's, else the counter's (0 when the GPU has none of
    /// them). An error that breaks the GPU breaks the reading.
    pub fn read(
        &mut self,
        gpu: usize,
        device: &Device<'static>,
        dcgm: Option<Fields>,
        said: &mut Said,
    ) -> Result<Activity, String> {
        let gpm = self.gpm(gpu, device, said);
        let from_dcgm = dcgm.and_then(|fields| {
            Some(Activity {
                smact: fields.smact?,
                occupancy: fields.occupancy,
                dram: fields.dram,
                source: MetricSource::Dcgm,
            })
        });
        if from_dcgm.is_some() != self.on_dcgm {
            self.on_dcgm = from_dcgm.is_some();
            match self.on_dcgm {
                true => log::info!("GPU {gpu}: SM metrics from DCGM"),
                false => log::warn!(
                    "GPU {gpu}: DCGM has no fresh SM activity for it; SM metrics from the {} \
                     until it has",
                    self.nvml_source()
                ),
            }
        }
        if let Some(activity) = from_dcgm {
            return Ok(activity);
        }
        if let Some(activity) = gpm? {
            return Ok(activity);
        }
        let counter = optional(said, gpu, Quantity::Utilization, device.utilization_rates())?;
        Ok(Activity {
            smact: counter.map_or(0.0, |u| fraction(f64::from(u.gpu))),
            occupancy: None,
            dram: None,
            source: MetricSource::Utilization,
        })
    }

    /// GPM's metrics since the previous sample, which a new one replaces;
    /// `None` without GPM or without a previous sample. A GPU whose GPM
    /// turns out unavailable drops it for good.
    fn gpm(
        &mut self,
        gpu: usize,
        device: &Device<'static>,
        said: &mut Said,
    ) -> Result<Option<Activity>, String> {
        let Some(previous) = &mut self.gpm else {
            return Ok(None);
        };
        match gpm_step(device, previous) {
            Ok(activity) => Ok(activity),
            Err(e) => match classify(Quantity::Gpm, &e) {
                Failure::Unavailable => {
                    said.unavailable(gpu, Quantity::Gpm, &e);
                    self.gpm = None;
                    Ok(None)
                }
                Failure::Broken(why) => {
                    self.gpm = Some(None);
                    Err(why)
                }
            },
        }
    }
}

/// Takes a GPM sample, which replaces `previous`; the metrics between the
/// two when there was a previous one.
fn gpm_step(
    device: &Device<'static>,
    previous: &mut Option<GpmSample<'static>>,
) -> Result<Option<Activity>, NvmlError> {
    let next = device.gpm_sample()?;
    let metrics = match previous.as_ref() {
        Some(before) => Some(gpm_metrics_get(device.nvml(), before, &next, &GPM_METRICS)?),
        None => None,
    };
    *previous = Some(next);
    metrics.map(gpm_activity).transpose()
}

/// The activity out of GPM's answers to [`GPM_METRICS`]: SM utilization,
/// the graphics engine's where a GPU gives only that (the first error when
/// neither), and occupancy and DRAM where the GPU measures them.
fn gpm_activity(results: Vec<Result<GpmMetricResult, NvmlError>>) -> Result<Activity, NvmlError> {
    let mut values = results.into_iter().map(|r| r.map(|m| fraction(m.value)));
    let mut next = || values.next().unwrap_or(Err(NvmlError::NoData));
    let (sm, graphics) = (next(), next());
    Ok(Activity {
        smact: sm.or_else(|e| graphics.map_err(|_| e))?,
        occupancy: next().ok(),
        dram: next().ok(),
        source: MetricSource::Gpm,
    })
}

/// A percentage as a fraction in 0..=1. GPM metrics are ratios of
/// counters and can stray past 100 or be NaN on a counter wrap.
fn fraction(percent: f64) -> f64 {
    if percent.is_finite() {
        (percent / 100.0).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use nvml_wrapper::struct_wrappers::gpm::GpmMetricInfo;

    #[test]
    fn percentages_become_fractions_within_bounds() {
        assert_eq!(fraction(42.0), 0.42);
        assert_eq!(fraction(130.0), 1.0);
        assert_eq!(fraction(-3.0), 0.0);
        assert_eq!(fraction(f64::NAN), 0.0);
    }

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
    fn gpm_gives_sm_then_graphics_utilization_with_occupancy_and_dram_where_measured() {
        let all = gpm_activity(vec![
            metric(GpmMetricId::SmUtil, 42.0),
            metric(GpmMetricId::GraphicsUtil, 90.0),
            metric(GpmMetricId::SmOccupancy, 30.0),
            metric(GpmMetricId::DramBwUtil, 120.0),
        ])
        .unwrap();
        assert_eq!(
            all,
            Activity {
                smact: 0.42,
                occupancy: Some(0.3),
                dram: Some(1.0),
                source: MetricSource::Gpm
            }
        );
        let graphics = gpm_activity(vec![
            Err(NvmlError::NotSupported),
            metric(GpmMetricId::GraphicsUtil, 90.0),
            Err(NvmlError::NotSupported),
        ])
        .unwrap();
        assert_eq!(
            (graphics.smact, graphics.occupancy, graphics.dram),
            (0.9, None, None)
        );
        assert!(matches!(
            gpm_activity(vec![Err(NvmlError::NotSupported), Err(NvmlError::Unknown)]),
            Err(NvmlError::NotSupported)
        ));
        assert!(matches!(gpm_activity(vec![]), Err(NvmlError::NoData)));
    }
}
