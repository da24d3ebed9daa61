//! `[simulate]`: the model of GPUs and jobs the simulator runs the core
//! against.

use serde::Deserialize;

use crate::gpu::power::PowerCurve;

/// How tasks that share a GPU divide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// NVIDIA MPS: kernels of all tasks run side by side; a GPU whose tasks
    /// want more than 100% SM activity in sum slows them all down evenly.
    Mps,
    /// Default CUDA time-slicing: k tasks each get 1/k of the GPU.
    Streams,
}

/// The simulator's parameters; see the commented default configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub sharing: Sharing,
    pub ramp_s: f64,
    pub idle_power_w: f64,
    pub max_power_w: f64,
    pub power_exponent: f64,
}

impl Model {
    /// Refuses parameters the simulation cannot run with.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.ramp_s.is_finite() && self.ramp_s >= 0.0) {
            return Err(format!(
                "simulate.ramp_s = {}: expected seconds >= 0",
                self.ramp_s
            ));
        }
        self.power()
            .validate()
            .map_err(|e| format!("simulate: {e}"))
    }

    /// The GPUs' power curve.
    pub fn power(&self) -> PowerCurve {
        PowerCurve {
            idle_w: self.idle_power_w,
            max_w: self.max_power_w,
            exponent: self.power_exponent,
        }
    }
}
