//! Training memory of a transformer: the model state of
//! [`training::model_state_bytes`] plus the activations stored for the
//! backward pass, which are known per block (Korthikanti et al.,
//! "Reducing Activation Recomputation in Large Transformer Models", 2022,
//! §4.1): with sequence length `s`, batch `b`, width `h`, feed-forward
//! width `I` and `a` heads, one block keeps `18·s·b·h + 4·s·b·I` bytes at
//! 16 bits (34·s·b·h for the usual I = 4h) plus `5·a·s²·b` for the
//! attention scores — which fused attention kernels (SDPA, flash) do not
//! keep. In FP32 every 2-byte element is 4 bytes. The output head's logits
//! are kept three times in FP32 (logits, their log-softmax, its
//! gradient), which dominates for language-model heads.
//!
//! The sequence length is the one the job's command gives
//! (`--max_seq_length 128`, `--seq_len`, `--block_size`, `--max_length`),
//! else the model's position-embedding size (the longest it takes), else
//! the configured default. Heads are assumed 64 wide, as in BERT, GPT-2
//! and XLNet; they matter only for unfused attention.
//!
//! Korthikanti et al. count what one block stores; at the peak the
//! backward pass also holds the gradients of the block it is working on,
//! and PyTorch's caching allocator rounds and splits blocks.
//! [`ALLOCATOR_MARGIN`] covers both.

use super::training::{self, Optimizer, Precision};
use super::{MIB, with_context};
use crate::summary::{ModelFeatures, TransformerShape};

/// Activations and logits x this: one block's gradients (1/12 of the
/// activations of a 12-block model) and allocator rounding and
/// fragmentation, which PyTorch's memory notes put at several percent
/// (pytorch.org/docs/stable/notes/cuda.html, "Optimizing memory usage").
pub const ALLOCATOR_MARGIN: f64 = 1.1;

/// Flags that give the sequence length of a training script.
const SEQ_LEN_FLAGS: [&str; 6] = [
    "max_seq_length",
    "max_seq_len",
    "seq_len",
    "seq_length",
    "block_size",
    "max_length",
];

/// The sequence length: the command's, the position embedding's, or
/// `default`. At least 1.
pub fn seq_len(t: &TransformerShape, command: &str, default: u64) -> u64 {
    training::flag_value(command, &SEQ_LEN_FLAGS)
        .and_then(|v| v.parse::<u64>().ok())
        .or(t.max_positions)
        .unwrap_or(default)
        .max(1)
}

/// The transformer estimate, MiB.
pub fn estimate(
    context_mib: u64,
    f: &ModelFeatures,
    t: &TransformerShape,
    batch: u64,
    s: u64,
    optimizer: Optimizer,
    precision: Precision,
) -> u64 {
    let s = s as f64;
    let b = batch as f64;
    let h = t.hidden as f64;
    let i = t.intermediate.map_or(4.0 * h, |i| i as f64);
    let heads = (h / 64.0).max(1.0);
    let mut block_16bit = 18.0 * s * b * h + 4.0 * s * b * i;
    if !t.fused_attention {
        block_16bit += 5.0 * heads * s * s * b;
    }
    let widen = precision.activation_bytes() / 2.0;
    let activations = widen * block_16bit * t.blocks as f64;
    let logits = 3.0 * 4.0 * s * b * t.head_width as f64;
    let kept = ALLOCATOR_MARGIN * (activations + logits);
    let state = training::model_state_bytes(f, optimizer, precision);
    with_context(context_mib, (kept + state) / MIB)
}
