//! Decision trees: a deterministic CART learner that plugs into
//! `linfa-ensemble`'s bagging, and the flat node list it produces, which
//! the model file stores and prediction walks.
//!
//! Why not `linfa_trees::DecisionTree`: it is not reproducible. linfa-trees
//! 0.8 sums Gini terms in `f32` over a `HashMap` whose iteration order is
//! seeded per process, so two splits of equal impurity (common: in the CNN
//! data, convolution and activation outputs are equal columns) are chosen
//! between by rounding noise, and two `carma train` runs with the same seed
//! wrote different trees (28 of 100 CNN trees differed). This learner counts
//! classes in arrays, compares impurities computed in one fixed order, and
//! breaks ties by the lower feature column, then the lower threshold; a
//! leaf whose classes tie predicts the higher bucket, the safe side. It
//! implements linfa's `Fit`, so the bootstrap samples and per-tree feature
//! draws remain `linfa-ensemble`'s.

use linfa::dataset::{AsTargets, DatasetBase};
use linfa::traits::Fit;
use ndarray::{Array1, Array2, ArrayView1, ArrayView2};
use serde::{Deserialize, Serialize};

/// Hyperparameters of one tree: it grows until its leaves are pure or
/// cannot be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeParams {
    /// Number of buckets (labels are `0..classes`).
    pub classes: usize,
}

/// One node: 24 bytes (columns, buckets and children all fit in `u32`);
/// the shipped model's 100,000 nodes are resident in every daemon. In the
/// model file a leaf is its bucket and a split the array `[column,
/// threshold, left, right]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Node {
    /// `x[column] < threshold` goes to `left`, anything else to `right`;
    /// children are indices into the node list, after their parent.
    Split(u32, f64, u32, u32),
    /// The bucket a leaf predicts.
    Leaf(u32),
}

/// Read by the JSON's own shape, a number or an array, where serde's
/// untagged enums buffer every node and try the split first: a leaf then
/// failed as a split, with its error message written out, before it was
/// read as a leaf. That was nine tenths of the daemon's start (callgrind:
/// 311 million instructions to load the shipped models).
impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> serde::de::Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a leaf's bucket or a split's [column, threshold, left, right]")
    }

    fn visit_u64<E: serde::de::Error>(self, bucket: u64) -> Result<Node, E> {
        u32::try_from(bucket)
            .map(Node::Leaf)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(bucket), &self))
    }

    /// Formats that read every integer as signed (TOML) hand a leaf here.
    fn visit_i64<E: serde::de::Error>(self, bucket: i64) -> Result<Node, E> {
        u32::try_from(bucket)
            .map(Node::Leaf)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(bucket), &self))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let split = Node::Split(
            self.element(&mut seq, 0)?,
            self.element(&mut seq, 1)?,
            self.element(&mut seq, 2)?,
            self.element(&mut seq, 3)?,
        );
        match seq.next_element::<serde::de::IgnoredAny>()? {
            None => Ok(split),
            Some(_) => Err(serde::de::Error::invalid_length(5, &self)),
        }
    }
}

impl NodeVisitor {
    /// A split's element `i`, which must be there.
    fn element<'de, T: Deserialize<'de>, A: serde::de::SeqAccess<'de>>(
        &self,
        seq: &mut A,
        i: usize,
    ) -> Result<T, A::Error> {
        seq.next_element()?
            .ok_or_else(|| serde::de::Error::invalid_length(i, self))
    }
}

/// A decision tree over full feature vectors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FlatTree {
    nodes: Vec<Node>,
}

impl Fit<Array2<f64>, Array1<usize>, linfa::Error> for TreeParams {
    type Object = FlatTree;

    fn fit(
        &self,
        dataset: &DatasetBase<Array2<f64>, Array1<usize>>,
    ) -> Result<FlatTree, linfa::Error> {
        let x = dataset.records().view();
        let targets = dataset.as_targets();
        let y: Vec<usize> = targets.iter().copied().collect();
        if x.nrows() == 0 || x.nrows() != y.len() {
            return Err(linfa::Error::NotEnoughSamples);
        }
        if let Some(&bad) = y.iter().find(|&&l| l >= self.classes) {
            return Err(linfa::Error::Parameters(format!(
                "label {bad} is not below {} classes",
                self.classes
            )));
        }
        let mut tree = FlatTree { nodes: Vec::new() };
        let rows: Vec<usize> = (0..x.nrows()).collect();
        tree.grow(x, &y, self.classes, rows);
        Ok(tree)
    }
}

/// Gini impurity times the sample count: `n - sum(c^2) / n`.
fn weighted_gini(counts: &[usize], n: usize) -> f64 {
    if n == 0 {
        return 0.0;
    }
    let squares: usize = counts.iter().map(|c| c * c).sum();
    n as f64 - squares as f64 / n as f64
}

/// The best split of `rows`: (column, threshold, weighted impurity).
fn best_split(
    x: ArrayView2<'_, f64>,
    y: &[usize],
    classes: usize,
    rows: &[usize],
) -> Option<(usize, f64, f64)> {
    let mut best: Option<(usize, f64, f64)> = None;
    let mut total = vec![0usize; classes];
    for &r in rows {
        total[y[r]] += 1;
    }
    let mut sorted = rows.to_vec();
    let mut left = vec![0usize; classes];
    let mut right = vec![0usize; classes];
    for column in 0..x.ncols() {
        let values: ArrayView1<'_, f64> = x.column(column);
        sorted.sort_by(|&a, &b| values[a].total_cmp(&values[b]).then(a.cmp(&b)));
        left.iter_mut().for_each(|c| *c = 0);
        right.copy_from_slice(&total);
        for k in 1..sorted.len() {
            let moved = y[sorted[k - 1]];
            left[moved] += 1;
            right[moved] -= 1;
            let (lo, hi) = (values[sorted[k - 1]], values[sorted[k]]);
            if lo == hi {
                continue;
            }
            let impurity = weighted_gini(&left, k) + weighted_gini(&right, sorted.len() - k);
            if best.is_none_or(|(_, _, b)| impurity < b) {
                let threshold = lo + (hi - lo) / 2.0;
                // Midpoints of huge neighbours can round onto `hi`; the
                // rule `x < t` still separates them only if t > lo.
                let threshold = if threshold > lo { threshold } else { hi };
                best = Some((column, threshold, impurity));
            }
        }
    }
    best
}

impl FlatTree {
    /// Grows the subtree of `rows` in pre-order; returns its root's index.
    fn grow(
        &mut self,
        x: ArrayView2<'_, f64>,
        y: &[usize],
        classes: usize,
        rows: Vec<usize>,
    ) -> u32 {
        let index = self.nodes.len() as u32;
        let mut counts = vec![0usize; classes];
        for &r in &rows {
            counts[y[r]] += 1;
        }
        // The most frequent class; ties go to the higher bucket.
        let majority = (0..classes)
            .rev()
            .max_by_key(|&c| (counts[c], c))
            .unwrap_or(0);
        let parent = weighted_gini(&counts, rows.len());
        let split = (parent > 0.0)
            .then(|| best_split(x, y, classes, &rows))
            .flatten()
            .filter(|&(_, _, impurity)| impurity < parent - 1e-9);
        let Some((column, threshold, _)) = split else {
            self.nodes.push(Node::Leaf(majority as u32));
            return index;
        };
        let (left, right): (Vec<usize>, Vec<usize>) =
            rows.into_iter().partition(|&r| x[[r, column]] < threshold);
        self.nodes.push(Node::Leaf(majority as u32));
        let l = self.grow(x, y, classes, left);
        let r = self.grow(x, y, classes, right);
        self.nodes[index as usize] = Node::Split(column as u32, threshold, l, r);
        index
    }

    /// The same tree over full feature vectors, for a tree trained on the
    /// columns `columns` of them (its column `i` is column `columns[i]`).
    pub fn over_columns(mut self, columns: &[usize]) -> Result<FlatTree, String> {
        for node in &mut self.nodes {
            if let Node::Split(column, ..) = node {
                *column = columns
                    .get(*column as usize)
                    .and_then(|&c| u32::try_from(c).ok())
                    .ok_or_else(|| format!("a split on column {column} of {}", columns.len()))?;
            }
        }
        Ok(self)
    }

    /// Gives back the spare capacity a parse left (a model file's trees
    /// are read by growing vectors).
    pub fn shrink_to_fit(&mut self) {
        self.nodes.shrink_to_fit();
    }

    /// Checks that every split names a column below `features` and a child
    /// after itself (so a walk always ends), and every leaf a bucket below
    /// `buckets`.
    pub fn validate(&self, features: usize, buckets: usize) -> Result<(), String> {
        if self.nodes.is_empty() {
            return Err("an empty tree".into());
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let ok = match *node {
                Node::Split(f, t, l, r) => {
                    let n = self.nodes.len();
                    (f as usize) < features
                        && t.is_finite()
                        && (l as usize) > i
                        && (r as usize) > i
                        && (l as usize) < n
                        && (r as usize) < n
                }
                Node::Leaf(b) => (b as usize) < buckets,
            };
            if !ok {
                return Err(format!("node {i} is malformed: {node:?}"));
            }
        }
        Ok(())
    }

    /// The bucket this tree predicts for `x` (`x[column] < threshold`
    /// goes left, as in linfa-trees).
    pub fn predict(&self, x: &[f64]) -> usize {
        let mut at = 0;
        // Children come after their parent, so this ends within
        // `nodes.len()` steps; the bound only guards against a tree that
        // skipped validation.
        for _ in 0..self.nodes.len() {
            match self.nodes.get(at) {
                Some(&Node::Split(f, t, l, r)) => {
                    let value = x.get(f as usize).copied().unwrap_or(f64::NAN);
                    at = if value < t { l as usize } else { r as usize };
                }
                Some(&Node::Leaf(bucket)) => return bucket as usize,
                None => break,
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(rows: &[[f64; 2]], labels: &[usize], classes: usize) -> FlatTree {
        let x = Array2::from_shape_vec((rows.len(), 2), rows.concat()).unwrap();
        let y = Array1::from(labels.to_vec());
        TreeParams { classes }.fit(&DatasetBase::new(x, y)).unwrap()
    }

    #[test]
    fn nodes_are_read_by_their_shape_and_written_back_the_same() {
        let tree: FlatTree =
            serde_json::from_str("[[1,0.5,1,2],3,[0,-2.0,3,4],0,4294967295]").unwrap();
        assert_eq!(
            tree.nodes,
            [
                Node::Split(1, 0.5, 1, 2),
                Node::Leaf(3),
                Node::Split(0, -2.0, 3, 4),
                Node::Leaf(0),
                Node::Leaf(u32::MAX)
            ]
        );
        assert_eq!(
            serde_json::to_string(&tree).unwrap(),
            "[[1,0.5,1,2],3,[0,-2.0,3,4],0,4294967295]"
        );
        // A format whose integers are signed reads the same nodes.
        #[derive(Deserialize)]
        struct InToml {
            tree: FlatTree,
        }
        let toml: InToml = toml::from_str("tree = [[1, 0.5, 1, 2], 3, 0]").unwrap();
        assert_eq!(toml.tree.nodes[..2], tree.nodes[..2]);
        for bad in [
            "[4294967296]",
            "[-1]",
            "[1.5]",
            "[\"3\"]",
            "[[1,0.5,1]]",
            "[[1,0.5,1,2,9]]",
            "[[1,\"x\",1,2]]",
            "[[-1,0.5,1,2]]",
            "[{}]",
        ] {
            let err = serde_json::from_str::<FlatTree>(bad)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("invalid"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_shipped_models_read_and_write_back_byte_for_byte() {
        let models = crate::estimate::BUILT_IN_MODELS;
        let ensemble = crate::estimate::ensemble::Ensemble::from_json(models).unwrap();
        assert_eq!(ensemble.to_json().unwrap(), models.trim_end());
    }

    #[test]
    fn learns_a_separable_set_exactly() {
        let rows = [[1.0, 5.0], [2.0, 5.0], [3.0, 0.0], [4.0, 0.0], [5.0, 9.0]];
        let labels = [0, 0, 1, 1, 2];
        let tree = fit(&rows, &labels, 3);
        tree.validate(2, 3).unwrap();
        for (row, label) in rows.iter().zip(labels) {
            assert_eq!(tree.predict(row), label);
        }
    }

    #[test]
    fn equal_splits_go_to_the_lower_column_and_ties_to_the_higher_bucket() {
        // Both columns separate the classes identically.
        let tree = fit(&[[1.0, 10.0], [2.0, 20.0]], &[0, 1], 2);
        assert_eq!(tree.nodes[0], Node::Split(0, 1.5, 1, 2));
        // Identical rows with different labels cannot be split.
        let tree = fit(&[[1.0, 1.0], [1.0, 1.0]], &[0, 1], 2);
        assert_eq!(tree.nodes, vec![Node::Leaf(1)]);
    }

    #[test]
    fn columns_map_back_to_the_full_vector() {
        let tree = fit(&[[1.0, 10.0], [2.0, 20.0]], &[0, 1], 2);
        let tree = tree.over_columns(&[7, 3]).unwrap();
        assert_eq!(tree.nodes[0], Node::Split(7, 1.5, 1, 2));
        assert!(
            fit(&[[1.0, 10.0], [2.0, 20.0]], &[0, 1], 2)
                .over_columns(&[])
                .is_err()
        );
    }

    #[test]
    fn walks_by_linfas_rule_and_round_trips_through_json() {
        let tree = FlatTree {
            nodes: vec![Node::Split(1, 2.0, 1, 2), Node::Leaf(0), Node::Leaf(3)],
        };
        tree.validate(2, 4).unwrap();
        assert_eq!(tree.predict(&[9.0, 1.5]), 0);
        assert_eq!(tree.predict(&[9.0, 2.0]), 3, "equal goes right");
        let text = serde_json::to_string(&tree).unwrap();
        assert_eq!(text, "[[1,2.0,1,2],0,3]");
        assert_eq!(serde_json::from_str::<FlatTree>(&text).unwrap(), tree);
    }

    #[test]
    fn malformed_trees_are_refused() {
        let cycle = FlatTree {
            nodes: vec![Node::Split(0, 1.0, 0, 0)],
        };
        assert!(cycle.validate(1, 2).is_err());
        let far = FlatTree {
            nodes: vec![Node::Split(5, 1.0, 1, 1), Node::Leaf(0)],
        };
        assert!(far.validate(2, 2).is_err());
        assert!(
            FlatTree {
                nodes: vec![Node::Leaf(7)]
            }
            .validate(1, 2)
            .is_err()
        );
        assert!(FlatTree { nodes: vec![] }.validate(1, 2).is_err());
    }
}
