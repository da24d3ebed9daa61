//! Closed-form estimates from a summary's features, in three formulas:
//!
//! - [`training`] (the default for networks with per-layer activation
//!   counts): what PyTorch keeps while training — weights, gradients and
//!   optimizer state once, the activations autograd saves per sample.
//! - [`transformer`]: the same model state plus activations per block
//!   after Korthikanti et al., for transformers, whose module prints have
//!   no activation counts.
//! - [`horus`]: the CARMA prototype's formula, kept for comparison
//!   (`analytic_formula = "horus"`).
//!
//! The optimizer is the one the job's command names (`--optimizer adam`),
//! else the configured default; mixed precision is read from the summary's
//! dtypes or the command's flags. The constant is the CUDA context plus
//! library workspaces of the server's stack (`estimate.context_mib`); the
//! GPUMemNet data's stack paid more (see
//! [`crate::estimate::dataset::MEASURED_CONTEXT_MIB`]), and fits on that
//! data use its constant.
//!
//! Formulas run in f64; `with_context` converts with `as u64`, which
//! saturates, and adds the constant saturating too, because features and
//! batch sizes come from users' files: a wrap here would turn an absurd
//! model into a tiny need and place it beside other jobs.

pub mod horus;
pub mod training;
pub mod transformer;

use serde::{Deserialize, Serialize};

use crate::summary::{Family, ModelFeatures};
pub use training::{Optimizer, Precision};

/// Settings of the analytic estimator (from `[estimate]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analytic {
    /// The constant term, MiB.
    pub context_mib: u64,
    /// Sequence length of transformers whose summary and command do not
    /// state one.
    pub default_seq_len: u64,
    /// The optimizer of jobs whose command names none.
    pub optimizer: Optimizer,
    /// The formula for networks with activation counts.
    pub layered: Layered,
}

/// Which formula estimates networks with activation counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layered {
    Training,
    Horus,
}

/// Which formula answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Formula {
    Horus,
    Training,
    Transformer,
}

/// An analytic estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalyticAnswer {
    pub mib: u64,
    pub formula: Formula,
}

/// Bytes in a MiB.
pub const MIB_BYTES: f64 = (1u64 << 20) as f64;
use MIB_BYTES as MIB;

/// `mib` rounded up (saturating) plus the constant (saturating).
fn with_context(context_mib: u64, mib: f64) -> u64 {
    context_mib.saturating_add(mib.ceil() as u64)
}

impl Analytic {
    /// The transformer formula for transformers with a shape, the
    /// configured layered formula for networks with activation counts.
    /// `command` is the job's command line (optimizer, sequence length,
    /// precision flags).
    pub fn estimate(
        &self,
        f: &ModelFeatures,
        batch: u64,
        command: &str,
    ) -> Result<AnalyticAnswer, String> {
        let optimizer = Optimizer::from_command(command).unwrap_or(self.optimizer);
        let precision = Precision::of(f, command);
        let shape = f.transformer.as_ref();
        if let Some(t) = shape.filter(|_| f.family == Family::Transformer) {
            let s = transformer::seq_len(t, command, self.default_seq_len);
            return Ok(AnalyticAnswer {
                mib: transformer::estimate(self.context_mib, f, t, batch, s, optimizer, precision),
                formula: Formula::Transformer,
            });
        }
        let answer = match self.layered {
            Layered::Training => {
                training::estimate(self.context_mib, f, batch, optimizer, precision)
                    .map(|mib| (mib, Formula::Training))
            }
            Layered::Horus => {
                horus::estimate(self.context_mib, f, batch).map(|mib| (mib, Formula::Horus))
            }
        };
        answer
            .map(|(mib, formula)| AnalyticAnswer { mib, formula })
            .ok_or_else(|| {
                "the summary gives neither activation counts nor a transformer shape".into()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::{FeatureBuilder, LayerKind, Totals, TransformerShape};

    const A: Analytic = Analytic {
        context_mib: 1000,
        default_seq_len: 128,
        optimizer: Optimizer::Adam,
        layered: Layered::Training,
    };

    /// One linear layer of 2^18 parameters and 2^18 outputs per sample.
    fn linear() -> ModelFeatures {
        let mut b = FeatureBuilder::default();
        b.add(LayerKind::Linear, Some(1 << 18), 1 << 18);
        b.finish(Totals::default())
    }

    #[test]
    fn horus_by_hand() {
        // 4 bytes x (2·2^18 + 2^18 + 2·2^18) = 5 MiB.
        assert_eq!(horus::estimate(1000, &linear(), 2), Some(1005));
        let horus = Analytic {
            layered: Layered::Horus,
            ..A
        };
        let answer = horus.estimate(&linear(), 2, "").unwrap();
        assert_eq!((answer.mib, answer.formula), (1005, Formula::Horus));
    }

    #[test]
    fn training_by_hand() {
        // Adam: 16 B x 2^18 = 4 MiB of state; activations 1.8 x 4 B x
        // 2^18 x 2 = 3.6 MiB.
        let answer = A.estimate(&linear(), 2, "python train.py").unwrap();
        assert_eq!((answer.mib, answer.formula), (1008, Formula::Training));
        // SGD with momentum: 12 B a parameter, 3 MiB.
        assert_eq!(A.estimate(&linear(), 2, "x --optim sgd").unwrap().mib, 1007);
        // Mixed precision: +2 B a parameter (4.5 MiB), activations halved
        // (1.8 MiB).
        let mixed = A.estimate(&linear(), 2, "x --optimizer=adamw --fp16");
        assert_eq!(mixed.unwrap().mib, 1007);
    }

    /// DLRM's case: an embedding is memory once, with no dense gradient
    /// when it is sparse, instead of Horus's parameters per sample.
    #[test]
    fn sparse_embeddings_are_counted_once_without_gradients() {
        let mut b = FeatureBuilder::default();
        b.add_named("EmbeddingBag", "", Some(64), 1 << 20, 1);
        let f = b.finish(Totals::default());
        assert_eq!(
            (f.embedding_params, f.sparse_embedding_params),
            (1 << 20, 1 << 20)
        );
        // Weight and two Adam states: 12 MiB; 1.8 x 4 B x 64 x 1024 = 0.45 MiB.
        assert_eq!(A.estimate(&f, 1024, "").unwrap().mib, 1013);
        assert!(horus::estimate(1000, &f, 1024).unwrap() > 4000);
        let mut b = FeatureBuilder::default();
        b.add_named("Embedding", "100, 8, sparse=True", Some(8), 800, 1);
        assert_eq!(b.finish(Totals::default()).sparse_embedding_params, 800);
    }

    #[test]
    fn command_lines() {
        assert_eq!(
            Optimizer::from_command("t.py --optimizer Adam"),
            Some(Optimizer::Adam)
        );
        assert_eq!(
            Optimizer::from_command("t.py --optim=sgd --lr 1"),
            Some(Optimizer::Sgd)
        );
        assert_eq!(Optimizer::from_command("t.py --optimizer"), None);
        assert_eq!(Optimizer::from_command("t.py --optimizer lbfgs"), None);
        let t = TransformerShape {
            max_positions: Some(512),
            ..TransformerShape::default()
        };
        assert_eq!(transformer::seq_len(&t, "x --max-seq-length 128", 64), 128);
        assert_eq!(transformer::seq_len(&t, "x --block_size=256", 64), 256);
        assert_eq!(transformer::seq_len(&t, "x --seq_len abc", 64), 512);
        assert_eq!(
            transformer::seq_len(&TransformerShape::default(), "", 64),
            64
        );
        assert_eq!(
            transformer::seq_len(&TransformerShape::default(), "--seq_len 0", 64),
            1
        );
        let f = linear();
        assert_eq!(Precision::of(&f, "x --bf16"), Precision::Mixed);
        assert_eq!(
            Precision::of(&f, "x --mixed_precision=fp16"),
            Precision::Mixed
        );
        assert_eq!(Precision::of(&f, "x --fp16-opt-level"), Precision::Fp32);
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
        let batch = u64::from(u32::MAX);
        assert_eq!(horus::estimate(1000, &f, batch), Some(u64::MAX));
        assert_eq!(A.estimate(&f, batch, "").unwrap().mib, u64::MAX);
        let t = TransformerShape {
            hidden: 64,
            blocks: 2,
            head_width: 8,
            ..TransformerShape::default()
        };
        let (adam, fp32) = (Optimizer::Adam, Precision::Fp32);
        assert_eq!(
            transformer::estimate(1000, &f, &t, 1, u64::MAX, adam, fp32),
            u64::MAX
        );
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
        // x 1.1 = 4,956,160; weights 16 MiB. 21,733,376 B = 20.7 MiB -> 21,
        // + 1000.
        let answer = A.estimate(&f, 4, "").unwrap();
        assert_eq!((answer.mib, answer.formula), (1021, Formula::Transformer));
        let mut unfused = t.clone();
        unfused.fused_attention = false;
        // + 1.1 x 2 blocks · 2 · 5 · 1 head · 128² · 4 = 1,441,792 B: 22.1 MiB
        // -> 23.
        let (adam, fp32) = (Optimizer::Adam, Precision::Fp32);
        assert_eq!(
            transformer::estimate(1000, &f, &unfused, 4, 128, adam, fp32),
            1023
        );
    }
}
