//! Closed-form estimates from a summary's features: the Horus formula for
//! networks with activation counts, and a transformer-aware form for
//! transformers, which have no training data for the classifier and whose
//! module prints carry no activation counts.
//!
//! **Horus** (as the CARMA prototype computes it): FP32 elements
//! `B·A + P + B·P` (activations of the batch, parameters, and a gradient
//! term per sample), times 4 bytes, plus a constant `d` for the CUDA
//! context. It is kept faithful so its answers compare with the published
//! ones; it overestimates large models badly (the `B·P` term).
//!
//! **Transformer-aware**: training memory of a transformer is
//! parameters x optimizer state plus activations stored for the backward
//! pass, and the latter is known per block (Korthikanti et al., "Reducing
//! Activation Recomputation in Large Transformer Models", 2022): with
//! sequence length `s`, batch `b`, width `h`, feed-forward width `I` and
//! `a` heads, one block keeps `18·s·b·h + 4·s·b·I` bytes at 16 bits
//! (34·s·b·h for the usual I = 4h) plus `5·a·s²·b` for the attention
//! scores — which fused attention kernels (SDPA, flash) do not keep. carma
//! assumes FP32 training (twice the bytes) with Adam: 16 bytes per
//! trainable parameter (weight, gradient, two moments), 4 per frozen one,
//! and the output head's logits kept three times (logits, their softmax,
//! its gradient), which dominates for language-model heads. The sequence
//! length is the model's position-embedding size when it has one, the
//! configured default otherwise; heads are assumed 64 wide. The constant
//! is the CUDA context plus library workspaces: the GPUMemNet data's
//! smallest networks peak at about 1,400 MiB on the same GPU, which is that
//! constant measured.

use serde::Serialize;

use crate::summary::{Family, ModelFeatures, TransformerShape};

/// Settings of the analytic estimator (from `[estimate]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analytic {
    /// The constant term `d`, MiB.
    pub context_mib: u64,
    /// Sequence length of transformers whose summary does not state one.
    pub default_seq_len: u64,
}

/// Which formula answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Formula {
    Horus,
    Transformer,
}

/// An analytic estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalyticAnswer {
    pub mib: u64,
    pub formula: Formula,
}

const MIB: f64 = (1u64 << 20) as f64;

// The formulas run in f64 and convert with `as u64`, which saturates; the
// constant is added saturating too, because features and batch sizes come
// from users' files: a wrap here would turn an absurd model into a tiny
// need and place it beside other jobs.

impl Analytic {
    /// The Horus estimate, when the features have activation counts.
    pub fn horus(&self, f: &ModelFeatures, batch: u64) -> Option<u64> {
        let a = f.activations_per_sample? as f64;
        let (b, p) = (batch as f64, f.params_total as f64);
        let bytes = 4.0 * (b * a + p + b * p);
        Some(self.context_mib.saturating_add((bytes / MIB).ceil() as u64))
    }

    /// The transformer-aware estimate.
    pub fn transformer(&self, f: &ModelFeatures, t: &TransformerShape, batch: u64) -> u64 {
        let s = t.max_positions.unwrap_or(self.default_seq_len) as f64;
        let b = batch as f64;
        let h = t.hidden as f64;
        let i = t.intermediate.map_or(4.0 * h, |i| i as f64);
        let heads = (h / 64.0).max(1.0);
        let mut block_16bit = 18.0 * s * b * h + 4.0 * s * b * i;
        if !t.fused_attention {
            block_16bit += 5.0 * heads * s * s * b;
        }
        let activations = 2.0 * block_16bit * t.blocks as f64;
        let logits = 3.0 * 4.0 * s * b * t.head_width as f64;
        let trainable = f.params_trainable as f64;
        let frozen = f.params_total.saturating_sub(f.params_trainable) as f64;
        let weights = 16.0 * trainable + 4.0 * frozen;
        self.context_mib
            .saturating_add(((activations + logits + weights) / MIB).ceil() as u64)
    }

    /// The transformer form for transformers, Horus for the rest.
    pub fn estimate(&self, f: &ModelFeatures, batch: u64) -> Result<AnalyticAnswer, String> {
        if f.family == Family::Transformer {
            if let Some(t) = &f.transformer {
                return Ok(AnalyticAnswer {
                    mib: self.transformer(f, t, batch),
                    formula: Formula::Transformer,
                });
            }
        }
        self.horus(f, batch)
            .map(|mib| AnalyticAnswer {
                mib,
                formula: Formula::Horus,
            })
            .ok_or_else(|| {
                "the summary gives neither activation counts nor a transformer shape".into()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{FeatureBuilder, LayerKind, Totals};

    const A: Analytic = Analytic {
        context_mib: 1000,
        default_seq_len: 128,
    };

    #[test]
    fn horus_by_hand() {
        let mut b = FeatureBuilder::default();
        b.add(LayerKind::Linear, Some(1 << 18), 1 << 18);
        let f = b.finish(Totals::default());
        // 4 bytes x (2·2^18 + 2^18 + 2·2^18) = 5 MiB.
        assert_eq!(A.horus(&f, 2), Some(1005));
    }

    /// Found by `tests/properties.rs`: with a position embedding of 2^64
    /// rows (or activations of 2^64 elements at a large batch) the formula
    /// saturated at `u64::MAX` MiB and adding the constant overflowed: a
    /// panic in debug builds, 999 MiB in release builds.
    #[test]
    fn absurd_models_need_everything_rather_than_wrapping() {
        let mut b = FeatureBuilder::default();
        b.add(LayerKind::Linear, Some(u64::MAX), u64::MAX);
        let f = b.finish(Totals::default());
        assert_eq!(A.horus(&f, u64::from(u32::MAX)), Some(u64::MAX));
        let t = TransformerShape {
            hidden: 64,
            blocks: 2,
            intermediate: None,
            vocab: None,
            max_positions: Some(u64::MAX),
            head_width: 8,
            fused_attention: false,
        };
        assert_eq!(A.transformer(&f, &t, 1), u64::MAX);
    }

    #[test]
    fn transformer_by_hand() {
        let mut f = FeatureBuilder::default().finish(Totals {
            params_total: Some(1 << 20),
            params_trainable: Some(1 << 20),
            ..Totals::default()
        });
        f.family = Family::Transformer;
        let t = TransformerShape {
            hidden: 64,
            blocks: 2,
            intermediate: Some(256),
            vocab: None,
            max_positions: None,
            head_width: 8,
            fused_attention: true,
        };
        f.transformer = Some(t.clone());
        // s = 128, b = 4: per block 2·(18·128·4·64 + 4·128·4·256) =
        // 2,228,224 bytes, two blocks 4,456,448; logits 12·128·4·8 = 49,152;
        // weights 16 MiB. 21,282,816 B = 20.3 MiB -> 21, + 1000.
        assert_eq!(A.transformer(&f, &t, 4), 1021);
        let mut unfused = t.clone();
        unfused.fused_attention = false;
        // + 2 blocks · 2 · 5 · 1 head · 128² · 4 = 1,310,720 B -> 21.5 MiB.
        assert_eq!(A.transformer(&f, &unfused, 4), 1022);
        assert_eq!(A.estimate(&f, 4).unwrap().formula, Formula::Transformer);
    }
}
