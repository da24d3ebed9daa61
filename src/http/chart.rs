//! The GPUs over the last hour: a sample of each GPU every
//! [`SAMPLE_EVERY_S`] seconds, at most an hour of them, drawn as the same
//! picture `carma report --plot` draws ([`crate::plot::timeline`]), in SVG
//! for the page to carry inline.

use std::collections::VecDeque;

use crate::plot::{self, GpuSeries, Kind, Run, Sample};
use crate::spool::status::Status;

/// Seconds between samples.
pub const SAMPLE_EVERY_S: f64 = 10.0;

/// Seconds shown.
pub const WINDOW_S: f64 = 3600.0;

/// Samples kept: an hour's.
const KEPT: usize = (WINDOW_S / SAMPLE_EVERY_S) as usize;

/// What one GPU read at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    gpu: usize,
    smact: f64,
    used_mib: u64,
    power_w: Option<f64>,
}

/// The last hour of samples, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    samples: VecDeque<(f64, Vec<Point>)>,
}

impl History {
    /// Whether a status made at `at` (Unix seconds) is due to be sampled.
    pub fn due(&self, at: f64) -> bool {
        self.samples
            .back()
            .is_none_or(|(last, _)| at - last >= SAMPLE_EVERY_S || at < *last)
    }

    /// Samples every GPU of `status`.
    pub fn record(&mut self, status: &Status) {
        let points = status
            .gpus
            .iter()
            .map(|g| Point {
                gpu: g.index,
                smact: g.smact,
                used_mib: g.used_mib,
                power_w: g.power_w,
            })
            .collect();
        if self.samples.len() >= KEPT {
            self.samples.pop_front();
        }
        self.samples.push_back((status.updated_at, points));
    }

    /// The picture of the hour before `now`, as SVG; `gpus` GPUs are
    /// drawn even before their first sample.
    pub fn svg(&self, now: f64, gpus: usize) -> Result<String, String> {
        let start = now - WINDOW_S;
        let mut series: Vec<GpuSeries> = (0..gpus)
            .map(|gpu| GpuSeries {
                gpu,
                samples: Vec::new(),
            })
            .collect();
        for (at, points) in self.samples.iter().filter(|(at, _)| *at >= start) {
            for p in points {
                let Some(s) = series.iter_mut().find(|s| s.gpu == p.gpu) else {
                    continue;
                };
                s.samples.push(Sample {
                    t: at - start,
                    smact: p.smact,
                    used_mib: p.used_mib as f64,
                    power_w: p.power_w,
                });
            }
        }
        let run = Run {
            title: format!(
                "GPUs over the hour to {} (x: time since {})",
                crate::wall_time::utc(now),
                crate::wall_time::utc(start)
            ),
            gpus: series,
            bars: Vec::new(),
            gpu_count: gpus,
            span: WINDOW_S,
        };
        plot::svg(Kind::Timeline, &[&run])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::status::GpuStatus;

    fn status(at: f64, used_mib: u64) -> Status {
        Status {
            updated_at: at,
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-0".into(),
                name: "sim".into(),
                total_mib: 40_960,
                mig: false,
                used_mib,
                reserved_mib: 0,
                smact: 0.5,
                occupancy: None,
                dram: None,
                source: None,
                power_w: None,
                error: None,
                tasks: Vec::new(),
            }],
            ..Status::default()
        }
    }

    #[test]
    fn an_hour_is_kept_a_sample_every_ten_seconds() {
        let mut history = History::default();
        let mut at = 0.0;
        for _ in 0..2 * KEPT {
            if history.due(at) {
                history.record(&status(at, 1024));
            }
            at += 1.0;
        }
        assert_eq!(history.samples.len(), 2 * KEPT / 10);
        for _ in 0..3 * KEPT {
            history.record(&status(at, 1024));
            at += SAMPLE_EVERY_S;
        }
        assert_eq!(history.samples.len(), KEPT);
        assert!(!history.due(at - SAMPLE_EVERY_S + 1.0));
    }

    #[test]
    fn the_picture_is_an_svg_of_each_gpu() {
        let mut history = History::default();
        for i in 0..5 {
            history.record(&status(1000.0 + 10.0 * f64::from(i), 2048));
        }
        let svg = history.svg(1040.0, 2).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        assert!(svg.contains("SM activity") && svg.contains("GPU 0"));
    }
}
