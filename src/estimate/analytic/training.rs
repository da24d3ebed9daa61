//! What PyTorch keeps while training a network layer by layer: the model
//! state (weights, gradients, optimizer moments) once, and per sample the
//! activations that autograd saves for the backward pass.
//!
//! **Model state** per trainable parameter: a 4-byte weight, a 4-byte
//! gradient and 4 bytes per optimizer state (Adam keeps two moments,
//! SGD with momentum one; Rajbhandari et al., "ZeRO", 2020, §3.1, count
//! the same 16 bytes for Adam). Mixed precision adds a 2-byte half copy
//! of each weight (autocast caches the cast). Frozen parameters keep only
//! their weight. Sparse embeddings (`sparse=True`, DLRM's `EmbeddingBag`)
//! have no dense gradient: the rows a batch touches are the size of the
//! layer's output, already counted as an activation.
//!
//! **Saved activations**, per output element of each layer kind: a
//! convolution's or linear layer's output is saved as the input of the
//! layer after it (batch norm saves its input; the next convolution its
//! input), an activation function saves its output or input (ReLU its
//! output; GELU, SiLU and the like their input, which is the previous
//! output, and their own output becomes the next layer's saved input),
//! batch norm's output likewise; dropout keeps a one-byte mask, and its
//! output replaces its input as the next layer's saved input. So 4 bytes
//! an element for every allocating layer but dropout, 1 byte for dropout.
//! On top of that, the backward pass holds gradients of activations and
//! the allocator rounds and caches blocks: [`BACKWARD_FACTOR`], fitted on
//! the GPUMemNet measurements.

use super::{MIB, with_context};
use crate::summary::ModelFeatures;

/// Saved activations x this = the activation part of the peak. Fitted on
/// the GPUMemNet data (`cargo run --release --example analytic_fit`):
/// of the rows with more than 64 MiB saved, 95% need at most 1.6 to be no
/// more than 2 GiB below their measured peak, 99% at most 2.0. A synthetic
/// CNN of convolutions and ELU without dropout peaks at 1.7x its summed
/// 4-byte outputs (median over the data), with dropout at 1.2x; 1.8 covers
/// most of that spread rather than the median: an underestimate is an OOM
/// crash, an overestimate only lost sharing.
pub const BACKWARD_FACTOR: f64 = 1.8;

/// cuDNN's handle, its kernels and its convolution workspace, MiB, for
/// networks with convolutions: the smallest CNN of the GPUMemNet data
/// peaks at 1,703 MiB, the smallest MLP at 1,443 MiB, on the same GPU
/// and PyTorch (the context constant covers the rest).
pub const CUDNN_MIB: u64 = 256;

/// An optimizer, by the state it keeps per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Adam, AdamW and relatives: two moments.
    Adam,
    /// SGD with momentum, RMSprop, Adagrad: one state.
    Sgd,
}

impl Optimizer {
    /// 4-byte states it keeps per trainable parameter.
    pub fn states(self) -> f64 {
        match self {
            Optimizer::Adam => 2.0,
            Optimizer::Sgd => 1.0,
        }
    }

    /// The optimizer a command names with `--optimizer adam`,
    /// `--optim=sgd` or `--opt adamw`; `None` when it names none or one
    /// carma does not know.
    pub fn from_command(command: &str) -> Option<Optimizer> {
        let value = flag_value(command, &["optimizer", "optim", "opt"])?.to_ascii_lowercase();
        if value.contains("adam") || value.contains("lamb") {
            Some(Optimizer::Adam)
        } else if ["sgd", "momentum", "rmsprop", "adagrad"]
            .iter()
            .any(|name| value.contains(name))
        {
            Some(Optimizer::Sgd)
        } else {
            None
        }
    }
}

/// The value a command gives one of `names` as `--name value` or
/// `--name=value` (hyphens and underscores alike: `--max-length`).
pub fn flag_value<'a>(command: &'a str, names: &[&str]) -> Option<&'a str> {
    let mut words = command.split_whitespace();
    while let Some(word) = words.next() {
        let Some(flag) = word.strip_prefix("--") else {
            continue;
        };
        let (key, inline) = match flag.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (flag, None),
        };
        let same = |name: &&str| {
            key.len() == name.len()
                && key
                    .bytes()
                    .zip(name.bytes())
                    .all(|(a, b)| a == b || (a == b'-' && b == b'_'))
        };
        if names.iter().any(same) {
            return inline.or_else(|| words.next());
        }
    }
    None
}

/// Numeric precision of the activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    /// fp16 or bf16 autocast: 2-byte activations, FP32 master weights.
    Mixed,
}

impl Precision {
    /// Mixed when the summary shows 16-bit tensors or the command asks
    /// for it (`--fp16`, `--bf16`, `--amp`, `--mixed_precision fp16`).
    pub fn of(f: &ModelFeatures, command: &str) -> Precision {
        let flag = command.split_whitespace().any(|w| {
            matches!(
                w.trim_start_matches('-').to_ascii_lowercase().as_str(),
                "fp16" | "bf16" | "amp" | "half" | "use_amp" | "use-amp"
            )
        });
        let mixed = flag_value(command, &["mixed_precision", "precision"])
            .is_some_and(|v| v.contains("16"));
        if f.half_precision || flag || mixed {
            Precision::Mixed
        } else {
            Precision::Fp32
        }
    }

    /// Bytes of one activation element.
    pub fn activation_bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            Precision::Mixed => 2.0,
        }
    }
}

/// Bytes of the model state: weights, gradients and optimizer moments of
/// trainable parameters, weights of frozen ones, sparse embeddings
/// without a dense gradient.
pub fn model_state_bytes(f: &ModelFeatures, optimizer: Optimizer, precision: Precision) -> f64 {
    let trainable = f.params_trainable.min(f.params_total);
    let sparse = f.sparse_embedding_params.min(trainable);
    let dense = (trainable - sparse) as f64;
    let frozen = (f.params_total - trainable) as f64;
    let states = 4.0 * optimizer.states();
    let half_copy = match precision {
        Precision::Fp32 => 0.0,
        Precision::Mixed => 2.0,
    };
    dense * (8.0 + states + half_copy) + sparse as f64 * (4.0 + states) + frozen * 4.0
}

/// Bytes autograd saves for one batch (before [`BACKWARD_FACTOR`]), when
/// the features have per-layer activation counts.
pub fn saved_activation_bytes(f: &ModelFeatures, batch: u64, precision: Precision) -> Option<f64> {
    f.activations_per_sample?;
    let a = &f.activations_by_kind;
    let allocating = [a.conv, a.linear, a.batch_norm, a.activation, a.other]
        .into_iter()
        .map(|n| n as f64)
        .sum::<f64>();
    let per_sample = precision.activation_bytes() * allocating + a.dropout as f64;
    Some(per_sample * batch as f64)
}

/// The fixed part of a layered network's estimate, MiB: the context, and
/// cuDNN's share for networks with convolutions.
pub fn fixed_mib(context_mib: u64, f: &ModelFeatures) -> u64 {
    let cudnn = if f.layers.conv > 0 { CUDNN_MIB } else { 0 };
    context_mib.saturating_add(cudnn)
}

/// The estimate for a network with per-layer activation counts, MiB.
pub fn estimate(
    context_mib: u64,
    f: &ModelFeatures,
    batch: u64,
    optimizer: Optimizer,
    precision: Precision,
) -> Option<u64> {
    let activations = BACKWARD_FACTOR * saved_activation_bytes(f, batch, precision)?;
    let bytes = activations + model_state_bytes(f, optimizer, precision);
    Some(with_context(fixed_mib(context_mib, f), bytes / MIB))
}
