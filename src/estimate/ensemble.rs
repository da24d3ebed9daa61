//! The classifier ensemble: bagged `linfa` decision trees that map a
//! model's features to a memory bucket, one ensemble per family (MLP, CNN).
//!
//! Why buckets: memory grows in allocator-sized steps and the published
//! GPUMemNet work found classification into buckets more reliable than
//! regression; the upper edge of the chosen bucket is the estimate. Why
//! bagged trees: they need no feature scaling, train in seconds, and their
//! votes give a distribution over buckets, which the conservative decision
//! rule needs: the answer is the smallest bucket whose cumulative vote
//! share reaches `q`, so raising `q` trades accuracy for fewer
//! underestimates (the costly error: an OOM crash and a re-run).
//!
//! The bagging is `linfa-ensemble`'s `EnsembleLearner` (a bootstrap sample
//! of rows and a random multiset of feature columns per tree); the base
//! learner is carma's deterministic CART ([`super::flat_tree`] says why
//! not linfa-trees'). The learner itself cannot be serialised; its trees
//! are stored as [`FlatTree`]s over the full feature vector.

use linfa::prelude::*;
use linfa_ensemble::EnsembleLearnerParams;
use ndarray::{Array1, Array2};
use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::SeedableRng;
use serde::{Deserialize, Serialize};

use super::combine::Group;
use super::dataset::Example;
use super::flat_tree::{FlatTree, TreeParams};
use crate::sched::Need;
use crate::summary::{Family, ModelFeatures};

/// The features the trees see, by name, in vector order.
pub const FEATURE_NAMES: [&str; 15] = [
    "depth",
    "batch_size",
    "params",
    "activations_per_sample",
    "batch_norm_layers",
    "dropout_layers",
    "activation_fn_sin",
    "activation_fn_cos",
    "activations_x_batch",
    "adam_fp32_mib",
    "conv_layers",
    "conv_activations_x_batch",
    "batch_norm_activations_x_batch",
    "activation_fn_activations_x_batch",
    "dropout_activations_x_batch",
];

/// Features that measure size: an input above the training data's largest
/// value of one of these is outside what the trees learnt.
const SIZE_FEATURES: [usize; 5] = [1, 2, 3, 8, 9];

/// A feature vector.
pub type FeatureVector = [f64; FEATURE_NAMES.len()];

/// The feature vector of a model run with `batch_size`: GPUMemNet's
/// features (depth, batch, parameters, activations, layer counts, the
/// activation function's circle code) plus products that describe memory
/// directly: activations x batch, a first-principles FP32/Adam size
/// (16 bytes per parameter, 4 per activation) and activations x batch per
/// layer kind, because each kind keeps a different share of its output for
/// the backward pass. Trees split on single features, so such products are
/// what lets them follow a boundary that is a sum of terms.
///
/// `None` when the summary gives no activation counts (module prints).
pub fn feature_vector(f: &ModelFeatures, batch_size: u64) -> Option<FeatureVector> {
    let activations = f.activations_per_sample? as f64;
    let b = batch_size as f64;
    let (sin, cos) = f.activation_fn.map_or((0.0, 0.0), |a| a.circle_code());
    let by = &f.activations_by_kind;
    let mib = (1u64 << 20) as f64;
    Some([
        f64::from(f.depth),
        b,
        f.params_total as f64,
        activations,
        f64::from(f.layers.batch_norm),
        f64::from(f.layers.dropout),
        sin,
        cos,
        activations * b,
        (16.0 * f.params_total as f64 + 4.0 * activations * b) / mib,
        f64::from(f.layers.conv),
        by.conv as f64 * b,
        by.batch_norm as f64 * b,
        by.activation as f64 * b,
        by.dropout as f64 * b,
    ])
}

/// Which buckets an ensemble classifies into.
///
/// `Published` are GPUMemNet's (8,000 MiB wide for CNNs): kept so carma can
/// be compared with the published figures and because the mission names
/// that classifier. `Fine` are at most 1 GiB wide, so the estimate is close
/// to the memory itself: a CNN peaking at 600 MiB is no longer told 8,000.
/// Fine edges include every published edge, so a fine answer maps onto
/// exactly one published bucket for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BucketScheme {
    #[default]
    Fine,
    Published,
}

impl BucketScheme {
    /// Both schemes; the model file holds an ensemble of each per family.
    pub const ALL: [BucketScheme; 2] = [BucketScheme::Fine, BucketScheme::Published];

    /// The name used in the configuration and reports.
    pub fn name(self) -> &'static str {
        match self {
            BucketScheme::Fine => "fine",
            BucketScheme::Published => "published",
        }
    }
}

impl std::fmt::Display for BucketScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Memory buckets: `upper_edges[i]` is the upper edge of bucket `i`; one
/// more bucket lies above the last edge and means "a whole GPU".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Buckets {
    pub upper_edges: Vec<u64>,
    /// Whether a bucket includes its upper edge: `(a, b]` when true,
    /// `[a, b)` when false.
    pub upper_inclusive: bool,
}

impl Buckets {
    /// The published MLP buckets: (1000,2000], ..., (4000,5000], >5000.
    pub fn mlp() -> Buckets {
        Buckets {
            upper_edges: vec![2000, 3000, 4000, 5000],
            upper_inclusive: true,
        }
    }

    /// The published CNN buckets: [0,8000), ..., [32000,40000),
    /// [40000,50000) (the last also holds the OOM crashes).
    pub fn cnn() -> Buckets {
        Buckets {
            upper_edges: vec![8000, 16000, 24000, 32000, 40000],
            upper_inclusive: false,
        }
    }

    /// Fine MLP buckets: (0,1500], then 250 MiB wide up to 5,000 (the MLP
    /// data run from 1,443 to 4,925 MiB), >5000.
    pub fn fine_mlp() -> Buckets {
        Buckets {
            upper_edges: (1500..=5000).step_by(250).collect(),
            upper_inclusive: true,
        }
    }

    /// Fine CNN buckets: 1,000 MiB wide up to 40,000, >=40000.
    pub fn fine_cnn() -> Buckets {
        Buckets {
            upper_edges: (1000..=40_000).step_by(1000).collect(),
            upper_inclusive: false,
        }
    }

    /// The buckets of a family with training data, in a scheme.
    pub fn of(family: Family, scheme: BucketScheme) -> Option<Buckets> {
        match (family, scheme) {
            (Family::Mlp, BucketScheme::Published) => Some(Buckets::mlp()),
            (Family::Cnn, BucketScheme::Published) => Some(Buckets::cnn()),
            (Family::Mlp, BucketScheme::Fine) => Some(Buckets::fine_mlp()),
            (Family::Cnn, BucketScheme::Fine) => Some(Buckets::fine_cnn()),
            (Family::Transformer | Family::Other, _) => None,
        }
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.upper_edges.len() + 1
    }

    /// Always false: there is at least the bucket above the last edge.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The bucket a measured peak falls in.
    pub fn of_mib(&self, mib: u64) -> usize {
        self.upper_edges
            .iter()
            .position(|&edge| {
                if self.upper_inclusive {
                    mib <= edge
                } else {
                    mib < edge
                }
            })
            .unwrap_or(self.upper_edges.len())
    }

    /// The need a bucket stands for: its upper edge, or a whole GPU for
    /// the open bucket at the top.
    pub fn need(&self, bucket: usize) -> Need {
        self.need_with_margin(bucket, 0.0)
    }

    /// The need a bucket stands for, its upper edge raised by the share
    /// `margin` (rounded up to a MiB).
    pub fn need_with_margin(&self, bucket: usize, margin: f64) -> Need {
        self.upper_edges
            .get(bucket)
            .map_or(Need::WholeGpu, |&edge| {
                Need::Mib((edge as f64 * (1.0 + margin)).ceil() as u64)
            })
    }

    /// The lower edge of a bucket (0 for the first).
    fn lower(&self, bucket: usize) -> u64 {
        bucket
            .checked_sub(1)
            .and_then(|b| self.upper_edges.get(b))
            .copied()
            .unwrap_or(0)
    }

    /// The bucket of `coarser` that holds bucket `bucket` of these (finer)
    /// buckets, found by a value inside it: its lower edge, or one above
    /// it when lower edges are excluded.
    pub fn coarsen(&self, bucket: usize, coarser: &Buckets) -> usize {
        let inside = self.lower(bucket) + u64::from(self.upper_inclusive);
        coarser.of_mib(inside)
    }

    /// The bucket written as a range, for people: `(2000, 3000]`.
    pub fn label(&self, bucket: usize) -> String {
        let lower = self.lower(bucket);
        match (self.upper_edges.get(bucket), self.upper_inclusive) {
            (Some(upper), true) => format!("({lower}, {upper}]"),
            (Some(upper), false) => format!("[{lower}, {upper})"),
            (None, true) => format!(">{lower}"),
            (None, false) => format!(">={lower}"),
        }
    }
}

/// How an ensemble is trained; part of what makes training reproducible.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainParams {
    pub trees: usize,
    pub seed: u64,
    /// Share of features drawn (with replacement) for each tree.
    pub feature_proportion: f64,
}

impl Default for TrainParams {
    fn default() -> TrainParams {
        TrainParams {
            trees: 100,
            seed: 20_240_601,
            feature_proportion: 1.0,
        }
    }
}

/// A trained ensemble for one family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FamilyEnsemble {
    pub family: Family,
    pub scheme: BucketScheme,
    pub buckets: Buckets,
    /// Feature names at training time; loading checks them against
    /// [`FEATURE_NAMES`] so a model never meets vectors it was not made for.
    pub feature_names: Vec<String>,
    /// Largest value of each feature in the training data.
    pub feature_max: Vec<f64>,
    pub trees: Vec<FlatTree>,
    /// The learned combining floor (see [`super::combine`]) of networks
    /// without batch norm, and of all networks in model files written
    /// before the groups were learned apart; absent in model files written
    /// before it was learned, which then never combine.
    #[serde(default)]
    pub analytic_floor: Option<f64>,
    /// The learned combining floor of networks with batch norm.
    #[serde(default)]
    pub analytic_floor_batch_norm: Option<f64>,
}

/// A bucket chosen by the decision rule, with the votes behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BucketAnswer {
    pub index: usize,
    /// The bucket as a range of MiB.
    pub range: String,
    /// Vote share of each bucket.
    pub shares: Vec<f64>,
    /// The `q` of the decision rule.
    pub quantile: f64,
    /// The share added to the bucket's upper edge (0 for published
    /// buckets).
    pub margin: f64,
}

/// How the votes become an answer: the bucket at the quantile `quantile`
/// of the votes, its upper edge raised by `margin` for fine buckets.
///
/// Why a relative margin: held-out errors of the fine buckets grow with
/// the memory (a 30 GB network misjudged by 10% is 3 GB under, a 2 GB one
/// 200 MiB), so the margin that keeps large networks within 2 GiB costs
/// small ones little. Published buckets get none: they are wide already.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecisionRule {
    pub quantile: f64,
    pub margin: f64,
}

impl DecisionRule {
    /// The margin this rule adds to answers in `scheme`.
    pub fn margin_for(self, scheme: BucketScheme) -> f64 {
        match scheme {
            BucketScheme::Fine => self.margin,
            BucketScheme::Published => 0.0,
        }
    }
}

/// Why the ensemble has no answer for an input.
#[derive(Debug, Clone, PartialEq)]
pub enum Decline {
    NoActivations,
    OutsideTraining {
        feature: &'static str,
        value: f64,
        max: f64,
    },
}

impl std::fmt::Display for Decline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decline::NoActivations => f.write_str("the summary gives no activation counts"),
            Decline::OutsideTraining {
                feature,
                value,
                max,
            } => write!(
                f,
                "{feature} = {value} is above the largest in the training data ({max})"
            ),
        }
    }
}

/// The smallest bucket whose cumulative share reaches `q`.
pub fn conservative_bucket(shares: &[f64], q: f64) -> usize {
    let mut cumulative = 0.0;
    for (bucket, share) in shares.iter().enumerate() {
        cumulative += share;
        // Shares are multiples of 1/trees; the tolerance keeps q = 0.7 with
        // 70 of 100 votes from failing on rounding.
        if cumulative + 1e-9 >= q {
            return bucket;
        }
    }
    shares.len().saturating_sub(1)
}

impl FamilyEnsemble {
    /// The combining floor for a network of these features: its group's,
    /// or the single floor of older model files.
    pub fn analytic_floor_for(&self, f: &ModelFeatures) -> Option<f64> {
        match Group::of(f) {
            Group::BatchNorm => self.analytic_floor_batch_norm.or(self.analytic_floor),
            Group::Plain => self.analytic_floor,
        }
    }

    /// Trains on `examples` with `params`. Deterministic: the same
    /// examples and parameters give the same trees.
    pub fn train(
        family: Family,
        scheme: BucketScheme,
        examples: &[Example],
        params: &TrainParams,
    ) -> Result<FamilyEnsemble, String> {
        let buckets = Buckets::of(family, scheme)
            .ok_or_else(|| format!("no buckets for the {family} family"))?;
        let (records, targets) = matrix(examples, &buckets)?;
        let feature_max = records
            .columns()
            .into_iter()
            .map(|c| c.iter().copied().fold(f64::NEG_INFINITY, f64::max))
            .collect();
        let dataset = Dataset::new(records, targets);
        let rng = Xoshiro256PlusPlus::seed_from_u64(params.seed);
        let tree = TreeParams {
            classes: buckets.len(),
        };
        let fitted = EnsembleLearnerParams::new_fixed_rng(tree, rng)
            .ensemble_size(params.trees)
            .bootstrap_proportion(1.0)
            .feature_proportion(params.feature_proportion)
            .fit(&dataset)
            .map_err(|e| format!("training the {family} {scheme} ensemble: {e}"))?;
        let trees = fitted
            .models
            .into_iter()
            .zip(&fitted.model_features)
            .map(|(tree, columns)| tree.over_columns(columns))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(FamilyEnsemble {
            family,
            scheme,
            buckets,
            feature_names: FEATURE_NAMES.iter().map(|s| s.to_string()).collect(),
            feature_max,
            trees,
            analytic_floor: None,
            analytic_floor_batch_norm: None,
        })
    }

    /// Checks a loaded model for what would break prediction.
    pub fn validate(&self) -> Result<(), String> {
        if self.feature_names != FEATURE_NAMES {
            return Err(format!(
                "the {} model was trained on other features ({}); retrain it with `carma train`",
                self.family,
                self.feature_names.join(", ")
            ));
        }
        if self.trees.is_empty() {
            return Err(format!("the {} model has no trees", self.family));
        }
        if let Some(floor) = [self.analytic_floor, self.analytic_floor_batch_norm]
            .into_iter()
            .flatten()
            .find(|f| !(0.0..=1.0).contains(f))
        {
            return Err(format!(
                "the {} model's combining floor {floor} is outside [0, 1]",
                self.family
            ));
        }
        if self.feature_max.len() != FEATURE_NAMES.len() {
            return Err(format!(
                "the {} model lacks its feature ranges",
                self.family
            ));
        }
        for (i, tree) in self.trees.iter().enumerate() {
            tree.validate(FEATURE_NAMES.len(), self.buckets.len())
                .map_err(|e| format!("the {} model's tree {i}: {e}", self.family))?;
        }
        Ok(())
    }

    /// Vote share of each bucket for one feature vector.
    pub fn shares(&self, x: &FeatureVector) -> Vec<f64> {
        let mut votes = vec![0u32; self.buckets.len()];
        for tree in &self.trees {
            if let Some(slot) = votes.get_mut(tree.predict(x)) {
                *slot += 1;
            }
        }
        let total = self.trees.len().max(1) as f64;
        votes.iter().map(|&v| f64::from(v) / total).collect()
    }

    /// The bucket for a model run with `batch_size`, by the decision
    /// rule; declines inputs the trees cannot judge.
    pub fn predict(
        &self,
        features: &ModelFeatures,
        batch_size: u64,
        rule: DecisionRule,
        tolerance: f64,
    ) -> Result<BucketAnswer, Decline> {
        let x = feature_vector(features, batch_size).ok_or(Decline::NoActivations)?;
        for &c in &SIZE_FEATURES {
            let max = self.feature_max[c];
            if x[c] > max * (1.0 + tolerance) {
                return Err(Decline::OutsideTraining {
                    feature: FEATURE_NAMES[c],
                    value: x[c],
                    max,
                });
            }
        }
        let shares = self.shares(&x);
        let index = conservative_bucket(&shares, rule.quantile);
        Ok(BucketAnswer {
            index,
            range: self.buckets.label(index),
            shares,
            quantile: rule.quantile,
            margin: rule.margin_for(self.scheme),
        })
    }

    /// The need an answer of this ensemble stands for.
    pub fn need(&self, answer: &BucketAnswer) -> Need {
        self.buckets.need_with_margin(answer.index, answer.margin)
    }
}

/// Feature matrix and bucket labels of examples.
fn matrix(examples: &[Example], buckets: &Buckets) -> Result<(Array2<f64>, Array1<usize>), String> {
    let mut flat = Vec::with_capacity(examples.len() * FEATURE_NAMES.len());
    let mut labels = Vec::with_capacity(examples.len());
    for e in examples {
        let x = feature_vector(&e.features, e.batch_size)
            .ok_or("a training example has no activation counts")?;
        flat.extend_from_slice(&x);
        labels.push(buckets.of_mib(e.peak_mib));
    }
    let records = Array2::from_shape_vec((examples.len(), FEATURE_NAMES.len()), flat)
        .map_err(|e| e.to_string())?;
    Ok((records, Array1::from(labels)))
}

/// The ensembles the binary ships, one per family, as one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ensemble {
    /// Bumped when the file layout changes.
    pub format: u32,
    pub params: TrainParams,
    pub families: Vec<FamilyEnsemble>,
}

/// The file `carma train` writes and the estimator reads.
pub const MODEL_FILE: &str = "memory-ensemble.json";

/// The layout version of [`MODEL_FILE`].
pub const MODEL_FORMAT: u32 = 2;

impl Ensemble {
    /// Reads and checks a model file's text.
    pub fn from_json(text: &str) -> Result<Ensemble, String> {
        let mut ensemble: Ensemble =
            serde_json::from_str(text).map_err(|e| format!("not a carma model file: {e}"))?;
        if ensemble.format != MODEL_FORMAT {
            return Err(format!(
                "model file format {} is not {MODEL_FORMAT}; retrain with `carma train`",
                ensemble.format
            ));
        }
        for family in &mut ensemble.families {
            family.validate()?;
            family.trees.iter_mut().for_each(FlatTree::shrink_to_fit);
        }
        Ok(ensemble)
    }

    /// The model file's text: compact JSON, byte-for-byte reproducible.
    pub fn to_json(&self) -> Result<String, String> {
        serde_json::to_string(self).map_err(|e| e.to_string())
    }

    /// The ensemble of a family in a bucket scheme, if one was trained.
    pub fn family(&self, family: Family, scheme: BucketScheme) -> Option<&FamilyEnsemble> {
        self.families
            .iter()
            .find(|f| f.family == family && f.scheme == scheme)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_the_published_edges() {
        let mlp = Buckets::mlp();
        assert_eq!(mlp.of_mib(1443), 0);
        assert_eq!(mlp.of_mib(2000), 0);
        assert_eq!(mlp.of_mib(2001), 1);
        assert_eq!(mlp.of_mib(5001), 4);
        assert_eq!(mlp.need(1), Need::Mib(3000));
        assert_eq!(mlp.need(4), Need::WholeGpu);
        assert_eq!(mlp.need_with_margin(1, 0.15), Need::Mib(3450));
        assert_eq!(mlp.need_with_margin(4, 0.15), Need::WholeGpu);
        assert_eq!(mlp.label(0), "(0, 2000]");
        assert_eq!(mlp.label(4), ">5000");
        let cnn = Buckets::cnn();
        assert_eq!(cnn.len(), 6);
        assert_eq!(cnn.of_mib(7999), 0);
        assert_eq!(cnn.of_mib(8000), 1);
        assert_eq!(cnn.of_mib(42_000), 5);
        assert_eq!(cnn.label(5), ">=40000");
    }

    #[test]
    fn fine_buckets_refine_the_published_ones() {
        for family in [Family::Mlp, Family::Cnn] {
            let fine = Buckets::of(family, BucketScheme::Fine).unwrap();
            let published = Buckets::of(family, BucketScheme::Published).unwrap();
            for edge in &published.upper_edges {
                assert!(fine.upper_edges.contains(edge), "{family}: {edge}");
            }
        }
        let fine = Buckets::fine_cnn();
        assert_eq!(fine.coarsen(7, &Buckets::cnn()), 0, "[7000, 8000)");
        assert_eq!(fine.coarsen(8, &Buckets::cnn()), 1, "[8000, 9000)");
        assert_eq!(fine.coarsen(40, &Buckets::cnn()), 5, ">=40000");
        let fine = Buckets::fine_mlp();
        assert_eq!(fine.label(2), "(1750, 2000]");
        assert_eq!(fine.coarsen(2, &Buckets::mlp()), 0);
        assert_eq!(fine.coarsen(3, &Buckets::mlp()), 1);
        assert_eq!(fine.coarsen(fine.len() - 1, &Buckets::mlp()), 4, ">5000");
    }

    #[test]
    fn the_decision_rule_is_a_quantile() {
        let shares = [0.6, 0.1, 0.3];
        assert_eq!(conservative_bucket(&shares, 0.5), 0);
        assert_eq!(conservative_bucket(&shares, 0.7), 1);
        assert_eq!(conservative_bucket(&shares, 0.71), 2);
        assert_eq!(conservative_bucket(&shares, 1.0), 2);
        assert_eq!(conservative_bucket(&[0.7, 0.3], 0.7), 0);
    }
}
