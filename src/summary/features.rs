//! [`ModelFeatures`]: what the estimators know about a model, whatever
//! format its summary came in.
//!
//! Every source of layers — the three summary formats and the rows of the
//! GPUMemNet training data — goes through one [`FeatureBuilder`], which
//! names each layer's kind with [`LayerKind::classify`]. So a parsed
//! summary and a training row are counted by the same rules, and the
//! classifier sees comparable numbers at training and at prediction time.
//!
//! The counting rules follow the GPUMemNet data (checked against its
//! `Depth`, `Total Activations` and `Total Parameters` columns in
//! `estimate::dataset`): activations are the per-sample element counts of
//! the outputs of leaf layers, activation-function and dropout layers
//! included. Two deliberate differences: layers that only alias their
//! input (`Identity`, `Flatten`) allocate nothing and are not counted, and
//! depth counts every weight layer (linear and convolution; the data
//! counts only convolutions for its CNNs, a constant offset of one).

use serde::{Deserialize, Serialize};

/// The activation functions the training data uses, in the order of their
/// (sin, cos) code: the code places them on a circle so that no function
/// is "larger" than another, as GPUMemNet did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActivationFn {
    Relu,
    LeakyRelu,
    Elu,
    Selu,
    Gelu,
    Silu,
    Mish,
    Softplus,
    Tanh,
    Prelu,
    Sigmoid,
    /// Any other elementwise non-linearity (hardswish, softsign, ...).
    Other,
}

impl ActivationFn {
    const ALL: [ActivationFn; 12] = [
        ActivationFn::Relu,
        ActivationFn::LeakyRelu,
        ActivationFn::Elu,
        ActivationFn::Selu,
        ActivationFn::Gelu,
        ActivationFn::Silu,
        ActivationFn::Mish,
        ActivationFn::Softplus,
        ActivationFn::Tanh,
        ActivationFn::Prelu,
        ActivationFn::Sigmoid,
        ActivationFn::Other,
    ];

    /// The (sin, cos) code of this function on the unit circle.
    pub fn circle_code(self) -> (f64, f64) {
        let index = Self::ALL.iter().position(|a| *a == self).unwrap_or(0);
        let angle = std::f64::consts::TAU * index as f64 / Self::ALL.len() as f64;
        (angle.sin(), angle.cos())
    }
}

/// What a layer is, as far as memory is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Linear,
    Conv,
    BatchNorm,
    /// Layer, group and RMS normalisation: the transformer kind.
    LayerNorm,
    Dropout,
    Embedding,
    Activation(ActivationFn),
    /// Softmax and log-softmax: counted as activation layers, but never as
    /// "the" activation function of a model (they are output layers).
    Softmax,
    Pooling,
    /// Layers whose output aliases their input (`Identity`, `Flatten`):
    /// they allocate nothing.
    View,
    /// A module known to hold other modules (`Sequential`, `ModuleList`)
    /// or a model block whose children are listed separately.
    Container,
    /// Anything else.
    Other,
}

impl LayerKind {
    /// Names a layer kind from a PyTorch class name (`Conv2d`,
    /// `BatchNormAct2d`, `GELUActivation`) or a GPUMemNet data label
    /// (`batch_normalization`, `adaptive_avg_pool2d`).
    pub fn classify(type_name: &str) -> LayerKind {
        // Lower-cased without underscores, in a stack buffer: this runs
        // once per summary row and should not allocate. Class names are
        // ASCII; longer or other names take the allocating path.
        let mut buffer = [0u8; 64];
        let mut len = 0;
        let owned: String;
        let name = if type_name.is_ascii() && type_name.len() <= buffer.len() {
            for b in type_name.bytes().filter(|b| *b != b'_') {
                buffer[len] = b.to_ascii_lowercase();
                len += 1;
            }
            std::str::from_utf8(&buffer[..len]).unwrap_or("")
        } else {
            owned = type_name
                .chars()
                .filter(|c| *c != '_')
                .flat_map(char::to_lowercase)
                .collect();
            owned.as_str()
        };
        let has = |s: &str| name.contains(s);
        if has("batchnorm") {
            LayerKind::BatchNorm
        } else if has("layernorm") || has("groupnorm") || has("rmsnorm") {
            LayerKind::LayerNorm
        } else if name.starts_with("conv") && !has("block") && !has("layer") {
            LayerKind::Conv
        } else if has("linear") || name == "dense" {
            LayerKind::Linear
        } else if has("dropout") || has("droppath") {
            LayerKind::Dropout
        } else if has("embedding") {
            LayerKind::Embedding
        } else if has("softmax") {
            LayerKind::Softmax
        } else if has("pool") && !has("pooler") {
            LayerKind::Pooling
        } else if matches!(name, "identity" | "flatten" | "unflatten") {
            LayerKind::View
        } else if matches!(
            name,
            "sequential" | "modulelist" | "moduledict" | "parameterlist"
        ) {
            LayerKind::Container
        } else if let Some(act) = activation_fn(name) {
            LayerKind::Activation(act)
        } else {
            LayerKind::Other
        }
    }
}

/// The activation function a lower-cased class name stands for.
fn activation_fn(name: &str) -> Option<ActivationFn> {
    let name = name.strip_suffix("activation").unwrap_or(name);
    Some(match name {
        "relu" | "relu6" => ActivationFn::Relu,
        "leakyrelu" => ActivationFn::LeakyRelu,
        "elu" | "celu" => ActivationFn::Elu,
        "selu" => ActivationFn::Selu,
        "gelu" | "newgelu" | "fastgelu" | "quickgelu" | "gelutanh" => ActivationFn::Gelu,
        "silu" | "swish" => ActivationFn::Silu,
        "mish" => ActivationFn::Mish,
        "softplus" => ActivationFn::Softplus,
        "tanh" => ActivationFn::Tanh,
        "prelu" => ActivationFn::Prelu,
        "sigmoid" => ActivationFn::Sigmoid,
        "hardswish" | "hardsigmoid" | "hardtanh" | "softsign" | "logsigmoid" | "tanhshrink"
        | "glu" | "rrelu" => ActivationFn::Other,
        _ => return None,
    })
}

/// A guess at what kind of network this is; it decides which estimators
/// apply (the classifier has training data for MLPs and CNNs only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Mlp,
    Cnn,
    Transformer,
    Other,
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Family::Mlp => "mlp",
            Family::Cnn => "cnn",
            Family::Transformer => "transformer",
            Family::Other => "other",
        })
    }
}

/// Layer counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LayerCounts {
    pub linear: u32,
    pub conv: u32,
    pub batch_norm: u32,
    pub layer_norm: u32,
    pub dropout: u32,
    pub embedding: u32,
    /// Activation-function layers, softmax included.
    pub activation: u32,
}

/// Per-sample output elements by layer kind: where activation memory sits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ActivationsByKind {
    pub conv: u64,
    pub linear: u64,
    pub batch_norm: u64,
    pub activation: u64,
    pub dropout: u64,
    /// Everything else that allocates (pooling, embeddings, norms, ...).
    pub other: u64,
}

impl ActivationsByKind {
    /// All of them (saturating: the parts may already be saturated).
    pub fn total(&self) -> u64 {
        [
            self.conv,
            self.linear,
            self.batch_norm,
            self.activation,
            self.dropout,
            self.other,
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }
}

/// The shape of a transformer, read from a module print. Activation memory
/// of a transformer depends on sequence length and width, which a module
/// print states only indirectly; the analytic estimator works from these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TransformerShape {
    /// Width of the residual stream (the most common linear input width).
    pub hidden: u64,
    /// Repeated blocks: the longest `ModuleList`, or the longest run of
    /// containers of one class side by side (torchvision's `EncoderBlock`s).
    pub blocks: u64,
    /// Width of the feed-forward layer (the widest linear output inside a
    /// block), when seen.
    pub intermediate: Option<u64>,
    /// Rows of the largest embedding: the vocabulary.
    pub vocab: Option<u64>,
    /// Rows of a position embedding: the longest sequence the model takes.
    pub max_positions: Option<u64>,
    /// Widest linear output of the whole model: the output head (the
    /// vocabulary for a language-model head, a few classes otherwise).
    pub head_width: u64,
    /// Attention uses a fused kernel (SDPA, flash) that keeps no
    /// sequence x sequence score matrix: assumed unless the print names
    /// relative-position or eager attention.
    pub fused_attention: bool,
}

/// Everything the estimators use about a model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelFeatures {
    /// Weight layers: linear and convolution.
    pub depth: u32,
    pub layers: LayerCounts,
    pub params_total: u64,
    pub params_trainable: u64,
    /// Output elements per sample summed over leaf layers; `None` where the
    /// summary gives no shapes (module prints).
    pub activations_per_sample: Option<u64>,
    pub activations_by_kind: ActivationsByKind,
    /// Input shape of one sample (batch dimension removed), when the
    /// summary states it.
    pub input_shape: Option<Vec<u64>>,
    /// The batch size the summary was made with, when it states one.
    pub summary_batch: Option<u64>,
    /// The most common activation function (softmax aside).
    pub activation_fn: Option<ActivationFn>,
    pub family: Family,
    /// Present when the family is a transformer read from a module print.
    pub transformer: Option<TransformerShape>,
    /// Parameters of embedding tables (a subset of `params_total`). An
    /// embedding is a lookup: its parameters are memory once, not per
    /// sample, and its output is the only activation it adds.
    pub embedding_params: u64,
    /// Of those, tables trained with sparse gradients (`sparse=True`, and
    /// `EmbeddingBag`, which recommenders such as DLRM build sparse): the
    /// gradient holds only the rows a batch touched, not a dense copy.
    pub sparse_embedding_params: u64,
    /// The summary shows 16-bit weights or activations (`float16`,
    /// `bfloat16`): activations take 2 bytes an element instead of 4.
    pub half_precision: bool,
}

/// Collects layers one by one and derives the features at the end.
#[derive(Debug, Default)]
pub struct FeatureBuilder {
    layers: LayerCounts,
    activations: ActivationsByKind,
    /// Whether any counted layer had a known output size.
    shapes_seen: bool,
    params_in_layers: u64,
    act_votes: Vec<(ActivationFn, u32)>,
    attention_seen: bool,
    embedding_params: u64,
    sparse_embedding_params: u64,
}

impl FeatureBuilder {
    /// Counts one leaf layer: its kind, its per-sample output elements if
    /// known, and its parameters. Containers should not be passed (their
    /// outputs repeat a child's); they are ignored if they are.
    pub fn add(&mut self, kind: LayerKind, outputs: Option<u64>, params: u64) {
        self.add_times(kind, outputs, params, 1);
    }

    /// Counts one leaf layer by its class name and call arguments (`args`
    /// is empty where the format has none): as [`FeatureBuilder::add_times`]
    /// with the kind [`LayerKind::classify`] gives, and an embedding that
    /// is sparse (`sparse=True`, or an `EmbeddingBag`) noted as such.
    /// Returns the kind.
    pub fn add_named(
        &mut self,
        name: &str,
        args: &str,
        outputs: Option<u64>,
        params: u64,
        times: u64,
    ) -> LayerKind {
        let kind = LayerKind::classify(name);
        self.add_times(kind, outputs, params, times);
        let bag = name.to_ascii_lowercase().contains("embeddingbag");
        if kind == LayerKind::Embedding && (bag || args.replace(' ', "").contains("sparse=True")) {
            self.sparse_embedding_params = self
                .sparse_embedding_params
                .saturating_add(params.saturating_mul(times));
        }
        kind
    }

    /// [`FeatureBuilder::add`] for `times` identical layers at once. A
    /// module print's `12 x BertLayer(` repeats everything inside it, and
    /// the count comes from the user's file: adding layer by layer would
    /// let `(0): 18446744073709551615 x Layer(` keep the daemon busy
    /// forever. Sums saturate for the same reason, so an absurd summary
    /// gives huge features (which estimators decline as out of range)
    /// instead of a panic, or a wrap to a small need in a release build.
    pub fn add_times(&mut self, kind: LayerKind, outputs: Option<u64>, params: u64, times: u64) {
        if times == 0 {
            return;
        }
        let layers = u32::try_from(times).unwrap_or(u32::MAX);
        self.params_in_layers = self
            .params_in_layers
            .saturating_add(params.saturating_mul(times));
        let out = outputs.unwrap_or(0).saturating_mul(times);
        if outputs.is_some() && !matches!(kind, LayerKind::View | LayerKind::Container) {
            self.shapes_seen = true;
        }
        let count = |n: &mut u32| *n = n.saturating_add(layers);
        let sum = |total: &mut u64| *total = total.saturating_add(out);
        let a = &mut self.activations;
        match kind {
            LayerKind::Linear => {
                count(&mut self.layers.linear);
                sum(&mut a.linear);
            }
            LayerKind::Conv => {
                count(&mut self.layers.conv);
                sum(&mut a.conv);
            }
            LayerKind::BatchNorm => {
                count(&mut self.layers.batch_norm);
                sum(&mut a.batch_norm);
            }
            LayerKind::LayerNorm => {
                count(&mut self.layers.layer_norm);
                sum(&mut a.other);
            }
            LayerKind::Dropout => {
                count(&mut self.layers.dropout);
                sum(&mut a.dropout);
            }
            LayerKind::Embedding => {
                count(&mut self.layers.embedding);
                self.embedding_params = self
                    .embedding_params
                    .saturating_add(params.saturating_mul(times));
                sum(&mut a.other);
            }
            LayerKind::Activation(f) => {
                count(&mut self.layers.activation);
                sum(&mut a.activation);
                match self.act_votes.iter_mut().find(|(g, _)| *g == f) {
                    Some((_, n)) => count(n),
                    None => self.act_votes.push((f, layers)),
                }
            }
            LayerKind::Softmax => {
                count(&mut self.layers.activation);
                sum(&mut a.activation);
            }
            LayerKind::Pooling | LayerKind::Other => sum(&mut a.other),
            LayerKind::View | LayerKind::Container => {}
        }
    }

    /// Notes a module whose name says it is attention (transformer hint).
    pub fn saw_attention(&mut self) {
        self.attention_seen = true;
    }

    /// Parameters of the layers added so far.
    pub fn params_in_layers(&self) -> u64 {
        self.params_in_layers
    }

    /// The features, with the summary's own totals where it states them
    /// (they include parameters of modules a summary does not list).
    pub fn finish(self, totals: Totals) -> ModelFeatures {
        let params_total = totals.params_total.unwrap_or(self.params_in_layers);
        let params_trainable = totals.params_trainable.unwrap_or(params_total);
        // The first of the most frequent wins ties: the order of layers is
        // the model's own, so this is deterministic.
        let activation_fn = self
            .act_votes
            .iter()
            .fold(None::<(ActivationFn, u32)>, |best, &(f, n)| match best {
                Some((_, m)) if m >= n => best,
                _ => Some((f, n)),
            })
            .map(|(f, _)| f);
        let l = &self.layers;
        let family = if self.attention_seen || (l.layer_norm > 0 && l.embedding > 0 && l.conv == 0)
        {
            Family::Transformer
        } else if l.conv > 0 {
            Family::Cnn
        } else if l.linear > 0 {
            Family::Mlp
        } else {
            Family::Other
        };
        ModelFeatures {
            depth: l.linear.saturating_add(l.conv),
            layers: self.layers,
            params_total,
            params_trainable,
            activations_per_sample: self.shapes_seen.then(|| self.activations.total()),
            activations_by_kind: self.activations,
            input_shape: totals.input_shape,
            summary_batch: totals.summary_batch,
            activation_fn,
            family,
            transformer: None,
            embedding_params: self.embedding_params,
            sparse_embedding_params: self.sparse_embedding_params,
            half_precision: false,
        }
    }
}

/// What a summary states about the whole model, beside its layers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    pub params_total: Option<u64>,
    pub params_trainable: Option<u64>,
    pub input_shape: Option<Vec<u64>>,
    pub summary_batch: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_and_data_labels_classify_alike() {
        assert_eq!(LayerKind::classify("Conv2d"), LayerKind::Conv);
        assert_eq!(LayerKind::classify("conv2d"), LayerKind::Conv);
        assert_eq!(LayerKind::classify("BatchNorm2d"), LayerKind::BatchNorm);
        assert_eq!(
            LayerKind::classify("batch_normalization"),
            LayerKind::BatchNorm
        );
        assert_eq!(LayerKind::classify("BatchNormAct2d"), LayerKind::BatchNorm);
        assert_eq!(
            LayerKind::classify("adaptive_avg_pool2d"),
            LayerKind::Pooling
        );
        assert_eq!(LayerKind::classify("Softmax"), LayerKind::Softmax);
        assert_eq!(
            LayerKind::classify("GELUActivation"),
            LayerKind::Activation(ActivationFn::Gelu)
        );
        assert_eq!(
            LayerKind::classify("LeakyReLU"),
            LayerKind::Activation(ActivationFn::LeakyRelu)
        );
        assert_eq!(LayerKind::classify("EmbeddingBag"), LayerKind::Embedding);
        assert_eq!(LayerKind::classify("Identity"), LayerKind::View);
        assert_eq!(LayerKind::classify("Bottleneck"), LayerKind::Other);
        assert_eq!(LayerKind::classify("BertPooler"), LayerKind::Other);
        assert_eq!(LayerKind::classify("ModuleList"), LayerKind::Container);
    }

    #[test]
    fn circle_codes_are_distinct_unit_vectors() {
        let codes: Vec<_> = ActivationFn::ALL.iter().map(|a| a.circle_code()).collect();
        for (i, (s, c)) in codes.iter().enumerate() {
            assert!((s * s + c * c - 1.0).abs() < 1e-12);
            for other in &codes[i + 1..] {
                assert!((s - other.0).abs() + (c - other.1).abs() > 1e-3);
            }
        }
    }

    #[test]
    fn softmax_is_never_the_activation_function() {
        let mut b = FeatureBuilder::default();
        b.add(LayerKind::Linear, Some(10), 110);
        b.add(LayerKind::Softmax, Some(10), 0);
        let f = b.finish(Totals::default());
        assert_eq!(f.activation_fn, None);
        assert_eq!(f.layers.activation, 1);
        assert_eq!(f.activations_per_sample, Some(20));
        assert_eq!(f.params_total, 110);
        assert_eq!(f.family, Family::Mlp);
    }
}
