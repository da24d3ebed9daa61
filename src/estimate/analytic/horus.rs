//! **Horus** (as the CARMA prototype computes it): FP32 elements
//! `B·A + P + B·P` (activations of the batch, parameters, and a gradient
//! term per sample), times 4 bytes, plus a constant for the CUDA context.
//! Kept faithful so its answers compare with the published ones; it
//! overestimates large batches of large models badly (the `B·P` term:
//! DLRM at batch 32,768 comes out at 113 GiB for a 1.4 GiB peak).

use super::{MIB, with_context};
use crate::summary::ModelFeatures;

/// The Horus estimate, MiB, when the features have activation counts.
pub fn estimate(context_mib: u64, f: &ModelFeatures, batch: u64) -> Option<u64> {
    let a = f.activations_per_sample? as f64;
    let (b, p) = (batch as f64, f.params_total as f64);
    Some(with_context(context_mib, 4.0 * (b * a + p + b * p) / MIB))
}
