//! Stratified k-fold cross-validation of a family's ensemble, reported as
//! the published comparison does: accuracy and the share of predictions
//! below the true bucket, plus the share above and the confusion matrix.
//!
//! Folds are stratified by bucket and shuffled with a seed, so every fold
//! holds the rare high-memory buckets in proportion and a run reproduces.
//! The decision rule is applied to the held-out votes for several `q`, so
//! one run shows the whole trade-off between accuracy and underestimation;
//! nothing is tuned on the held-out folds.

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use serde::Serialize;

use super::dataset::Example;
use super::ensemble::{Buckets, FamilyEnsemble, TrainParams, conservative_bucket, feature_vector};
use crate::summary::Family;

/// The `q` values every report shows besides the configured one.
pub const QUANTILE_SWEEP: [f64; 6] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95];

/// Scores of one decision rule over all held-out predictions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    pub quantile: f64,
    pub accuracy: f64,
    /// Share of predictions below the true bucket (underestimates).
    pub below: f64,
    /// Share of predictions above the true bucket (overestimates).
    pub above: f64,
    /// Accuracy of each fold.
    pub fold_accuracy: Vec<f64>,
    /// `confusion[true][predicted]`.
    pub confusion: Vec<Vec<usize>>,
}

/// A family's cross-validation result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub family: Family,
    pub folds: usize,
    pub rows: usize,
    pub buckets: Vec<String>,
    /// Rows per true bucket.
    pub support: Vec<usize>,
    /// The configured decision rule.
    pub configured: Scores,
    /// The rule at each `q` of [`QUANTILE_SWEEP`].
    pub sweep: Vec<Scores>,
}

/// Assigns each example a fold: within each bucket, a seeded shuffle dealt
/// round-robin.
pub fn stratified_folds(labels: &[usize], folds: usize, seed: u64) -> Vec<usize> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut fold_of = vec![0; labels.len()];
    let buckets = labels.iter().copied().max().map_or(0, |m| m + 1);
    let mut dealt = 0;
    for bucket in 0..buckets {
        let mut members: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == bucket).collect();
        // Fisher-Yates; the modulo bias of 64-bit draws is negligible here.
        for i in (1..members.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            members.swap(i, j);
        }
        // Continue the deal where the last bucket stopped, so fold sizes
        // stay within one of each other.
        for m in members {
            fold_of[m] = dealt % folds;
            dealt += 1;
        }
    }
    fold_of
}

/// Cross-validates a family's ensemble with `folds` folds and reports the
/// decision rule at `q` and at the sweep.
pub fn cross_validate(
    family: Family,
    buckets: &Buckets,
    examples: &[Example],
    params: &TrainParams,
    folds: usize,
    q: f64,
) -> Result<Report, String> {
    if folds < 2 || examples.len() < folds {
        return Err(format!(
            "cross-validation needs at least 2 folds and as many rows ({folds} folds, {} rows)",
            examples.len()
        ));
    }
    let labels: Vec<usize> = examples
        .iter()
        .map(|e| buckets.of_mib(e.peak_mib))
        .collect();
    let fold_of = stratified_folds(&labels, folds, params.seed);
    // Held-out vote shares of every row.
    let mut shares: Vec<Vec<f64>> = vec![Vec::new(); examples.len()];
    for fold in 0..folds {
        let train: Vec<Example> = examples
            .iter()
            .zip(&fold_of)
            .filter(|(_, f)| **f != fold)
            .map(|(e, _)| e.clone())
            .collect();
        let model = FamilyEnsemble::train(family, buckets.clone(), &train, params)?;
        for (i, e) in examples.iter().enumerate() {
            if fold_of[i] == fold {
                let x = feature_vector(&e.features, e.batch_size)
                    .ok_or("a training example has no activation counts")?;
                shares[i] = model.shares(&x);
            }
        }
    }
    let score = |q: f64| score(buckets.len(), folds, &labels, &fold_of, &shares, q);
    let mut support = vec![0; buckets.len()];
    for &l in &labels {
        support[l] += 1;
    }
    Ok(Report {
        family,
        folds,
        rows: examples.len(),
        buckets: (0..buckets.len()).map(|b| buckets.label(b)).collect(),
        support,
        configured: score(q),
        sweep: QUANTILE_SWEEP.iter().map(|&q| score(q)).collect(),
    })
}

fn score(
    n_buckets: usize,
    folds: usize,
    labels: &[usize],
    fold_of: &[usize],
    shares: &[Vec<f64>],
    q: f64,
) -> Scores {
    let mut confusion = vec![vec![0; n_buckets]; n_buckets];
    let mut fold_hits = vec![(0usize, 0usize); folds];
    let (mut below, mut above) = (0, 0);
    for ((&truth, &fold), s) in labels.iter().zip(fold_of).zip(shares) {
        let predicted = conservative_bucket(s, q);
        confusion[truth][predicted] += 1;
        fold_hits[fold].1 += 1;
        if predicted == truth {
            fold_hits[fold].0 += 1;
        } else if predicted < truth {
            below += 1;
        } else {
            above += 1;
        }
    }
    let n = labels.len().max(1) as f64;
    let hits: usize = fold_hits.iter().map(|h| h.0).sum();
    Scores {
        quantile: q,
        accuracy: hits as f64 / n,
        below: below as f64 / n,
        above: above as f64 / n,
        fold_accuracy: fold_hits
            .iter()
            .map(|&(h, t)| h as f64 / t.max(1) as f64)
            .collect(),
        confusion,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_are_stratified_and_seeded() {
        let labels: Vec<usize> = (0..90)
            .map(|i| usize::from(i % 3 == 0) + usize::from(i % 9 == 0))
            .collect();
        let folds = stratified_folds(&labels, 3, 7);
        assert_eq!(folds, stratified_folds(&labels, 3, 7));
        assert_ne!(folds, stratified_folds(&labels, 3, 8));
        for bucket in 0..3 {
            let mut per_fold = [0; 3];
            for (l, f) in labels.iter().zip(&folds) {
                if *l == bucket {
                    per_fold[*f] += 1;
                }
            }
            let (lo, hi) = (
                per_fold.iter().min().unwrap(),
                per_fold.iter().max().unwrap(),
            );
            assert!(hi - lo <= 1, "bucket {bucket}: {per_fold:?}");
        }
    }
}
