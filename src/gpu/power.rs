//! Board power as a function of SM activity, for the GPUs that have no
//! power sensor: the simulator's and the daemon's simulated ones.
//!
//! `watts = idle + (max - idle) x smact^exponent`. A GPU's draw is not
//! linear in its activity: clocks, memory and the static power of awake
//! SMs come with the first kernel, so power rises steeply at low activity
//! and flattens near the top. That concavity is what makes collocation
//! save energy beyond the idle power of a shorter trace: two jobs at 30%
//! activity on one GPU cost less than each on its own GPU.
//!
//! The A100-40GB defaults: idle 55 W (the "idles near 50-60 W"),
//! maximum 400 W (its board power limit), exponent 0.55, fitted so that
//! `carma simulate` reproduces the research prototype's measured energy
//! reduction of MAGM with GPUMemNet over exclusive on its 60-task trace
//! (−14.2%; see the calibration table in docs/simulation.md). No per-job memory
//! activity is known in traces, so the curve has no DRAM term.

use serde::Deserialize;

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct PowerCurve {
    pub idle_w: f64,
    pub max_w: f64,
    pub exponent: f64,
}

impl PowerCurve {
    /// Watts drawn at SM activity `smact` (clamped to 0..=1).
    pub fn watts(&self, smact: f64) -> f64 {
        let s = if smact.is_finite() {
            smact.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.idle_w + (self.max_w - self.idle_w) * s.powf(self.exponent)
    }

    /// Refuses curves that would draw negative or falling power.
    pub fn validate(&self) -> Result<(), String> {
        let finite = self.idle_w.is_finite() && self.max_w.is_finite() && self.exponent.is_finite();
        if !finite || self.idle_w < 0.0 || self.max_w < self.idle_w || self.exponent <= 0.0 {
            return Err(format!(
                "power must satisfy 0 <= idle <= max and exponent > 0, got idle {} W, max {} W, exponent {}",
                self.idle_w, self.max_w, self.exponent
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100: PowerCurve = PowerCurve {
        idle_w: 55.0,
        max_w: 400.0,
        exponent: 0.55,
    };

    #[test]
    fn idle_and_full_draw_the_ends_and_sharing_saves_in_between() {
        assert_eq!(A100.watts(0.0), 55.0);
        assert_eq!(A100.watts(1.0), 400.0);
        assert_eq!(A100.watts(f64::NAN), 55.0);
        // Two jobs at 30% each: together on one GPU, or each on its own.
        let shared = A100.watts(0.6) + A100.watts(0.0);
        let apart = 2.0 * A100.watts(0.3);
        assert!(shared < apart, "{shared} vs {apart}");
        let linear = PowerCurve {
            exponent: 1.0,
            ..A100
        };
        assert!((linear.watts(0.5) - 227.5).abs() < 1e-9);
    }

    #[test]
    fn nonsense_curves_are_refused() {
        for bad in [
            PowerCurve {
                idle_w: -1.0,
                ..A100
            },
            PowerCurve {
                max_w: 10.0,
                ..A100
            },
            PowerCurve {
                exponent: 0.0,
                ..A100
            },
            PowerCurve {
                exponent: f64::INFINITY,
                ..A100
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(A100.validate().is_ok());
    }
}
