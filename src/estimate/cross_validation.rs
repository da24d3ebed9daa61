//! Stratified k-fold cross-validation of a family's ensemble, reported as
//! the published comparison does: accuracy and the share of predictions
//! below the true bucket, plus the share above and the confusion matrix,
//! all on the published buckets (a fine answer is mapped onto the
//! published bucket that holds it); and in MiB, which is what placement
//! pays: mean overestimate, mean absolute error, the share of
//! underestimates and of those more than 2 GiB under the measured peak.
//!
//! Folds are stratified by published bucket and shuffled with a seed, so
//! every fold holds the rare high-memory buckets in proportion, a run
//! reproduces, and both bucket schemes are scored on the same folds.
//! The decision rule is applied to the held-out votes for several `q` and
//! margins, so one run shows the whole trade-off between accuracy and
//! underestimation. Published-protocol shares judge the bucket the votes
//! chose (the margin is a safety allowance on top, like placement's); MiB
//! terms judge the estimate, margin included. The report also gives the
//! smallest margin that left no held-out row more than 2 GiB under (a
//! split-conformal correction at level 1 - 1/n): it informs the configured
//! margin but is not applied by itself.

use rand_xoshiro::Xoshiro256PlusPlus;
use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use serde::Serialize;

use super::analytic::Analytic;
use super::combine::{Floors, Group, Row, SEVERE_UNDER_MIB, learn_floors};
use super::dataset::{Example, OOM_CRASH_MIB};
use super::ensemble::{
    BucketScheme, Buckets, DecisionRule, FamilyEnsemble, TrainParams, conservative_bucket,
    feature_vector,
};
use crate::sched::Need;
use crate::summary::Family;

/// The `q` values every report shows besides the configured one.
pub const QUANTILE_SWEEP: [f64; 6] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95];

/// The fine-bucket margins every report shows at the configured `q`.
pub const MARGIN_SWEEP: [f64; 6] = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25];

/// Step and largest value of the margin search for the calibrated margin.
const MARGIN_STEP: f64 = 0.01;
const MARGIN_MAX: f64 = 1.0;

/// Scores of one decision rule over all held-out predictions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scores {
    pub quantile: f64,
    /// The margin added to fine answers (0 for published buckets).
    pub margin: f64,
    /// Share of predictions in the true published bucket.
    pub accuracy: f64,
    /// Share of predictions below the true published bucket.
    pub below: f64,
    /// Share of predictions above the true published bucket.
    pub above: f64,
    /// Mean of estimate minus measured peak, MiB (negative: under). A
    /// whole-GPU answer, or one above `OOM_CRASH_MIB`, counts as
    /// `OOM_CRASH_MIB`, as crashed runs do.
    pub mean_over_mib: f64,
    /// Mean of |estimate - measured peak|, MiB.
    pub mean_abs_error_mib: f64,
    /// Share of estimates below the measured peak.
    pub under: f64,
    /// Share of estimates more than [`SEVERE_UNDER_MIB`] below the peak.
    pub under_2gib: f64,
    /// Accuracy of each fold.
    pub fold_accuracy: Vec<f64>,
    /// `confusion[true][predicted]`, published buckets.
    pub confusion: Vec<Vec<usize>>,
}

/// A family's cross-validation result for one bucket scheme.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub family: Family,
    pub scheme: BucketScheme,
    pub folds: usize,
    pub rows: usize,
    /// The published buckets the shares and the confusion refer to.
    pub buckets: Vec<String>,
    /// Rows per true published bucket.
    pub support: Vec<usize>,
    /// The configured decision rule.
    pub configured: Scores,
    /// The rule at each `q` of [`QUANTILE_SWEEP`], configured margin.
    pub sweep: Vec<Scores>,
    /// The rule at each margin of [`MARGIN_SWEEP`], configured `q` (fine
    /// buckets only).
    pub margin_sweep: Vec<Scores>,
    /// At the configured `q`: the smallest margin (in steps of 0.01) that
    /// leaves no held-out row more than 2 GiB under its peak; `None` when
    /// even 100% does not (fine buckets only).
    pub calibrated_margin: Option<f64>,
    /// The learned combining floors with the analytic formula at the
    /// configured rule, scored on the same held-out rows.
    pub combined: Floors,
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

/// Cross-validates a family's ensemble in `scheme` with `folds` folds and
/// reports the decision rule at `q` and at the sweep.
pub fn cross_validate(
    family: Family,
    scheme: BucketScheme,
    examples: &[Example],
    params: &TrainParams,
    folds: usize,
    rule: DecisionRule,
    analytic: &Analytic,
) -> Result<Report, String> {
    let no_buckets = || format!("no buckets for the {family} family");
    let buckets = Buckets::of(family, scheme).ok_or_else(no_buckets)?;
    let published = Buckets::of(family, BucketScheme::Published).ok_or_else(no_buckets)?;
    let labels: Vec<usize> = examples
        .iter()
        .map(|e| published.of_mib(e.peak_mib))
        .collect();
    let (fold_of, shares) = held_out_shares(family, scheme, examples, params, folds)?;
    let held_out = HeldOut {
        buckets: &buckets,
        published: &published,
        folds,
        examples,
        fold_of: &fold_of,
        shares: &shares,
    };
    let fine = scheme == BucketScheme::Fine;
    let margin = rule.margin_for(scheme);
    let mut support = vec![0; published.len()];
    for &l in &labels {
        support[l] += 1;
    }
    Ok(Report {
        family,
        scheme,
        folds,
        rows: examples.len(),
        buckets: (0..published.len()).map(|b| published.label(b)).collect(),
        support,
        configured: held_out.score(rule.quantile, margin),
        sweep: QUANTILE_SWEEP
            .iter()
            .map(|&q| held_out.score(q, margin))
            .collect(),
        margin_sweep: if fine {
            MARGIN_SWEEP
                .iter()
                .map(|&m| held_out.score(rule.quantile, m))
                .collect()
        } else {
            Vec::new()
        },
        calibrated_margin: if fine {
            held_out.calibrated_margin(rule.quantile)
        } else {
            None
        },
        combined: learn_floors(&combination_rows(
            &buckets,
            examples,
            &shares,
            (rule.quantile, margin),
            analytic,
        )),
    })
}

/// Each row's fold and the vote shares of the ensemble trained without
/// that fold, on folds stratified by published bucket.
pub fn held_out_shares(
    family: Family,
    scheme: BucketScheme,
    examples: &[Example],
    params: &TrainParams,
    folds: usize,
) -> Result<(Vec<usize>, Vec<Vec<f64>>), String> {
    if folds < 2 || examples.len() < folds {
        return Err(format!(
            "cross-validation needs at least 2 folds and as many rows ({folds} folds, {} rows)",
            examples.len()
        ));
    }
    let published = Buckets::of(family, BucketScheme::Published)
        .ok_or_else(|| format!("no buckets for the {family} family"))?;
    let labels: Vec<usize> = examples
        .iter()
        .map(|e| published.of_mib(e.peak_mib))
        .collect();
    let fold_of = stratified_folds(&labels, folds, params.seed);
    let mut shares: Vec<Vec<f64>> = vec![Vec::new(); examples.len()];
    for fold in 0..folds {
        let train: Vec<Example> = examples
            .iter()
            .zip(&fold_of)
            .filter(|(_, f)| **f != fold)
            .map(|(e, _)| e.clone())
            .collect();
        let model = FamilyEnsemble::train(family, scheme, &train, params)?;
        for (i, e) in examples.iter().enumerate() {
            if fold_of[i] == fold {
                let x = feature_vector(&e.features, e.batch_size)
                    .ok_or("a training example has no activation counts")?;
                shares[i] = model.shares(&x);
            }
        }
    }
    Ok((fold_of, shares))
}

/// Learns the family's combining floor (see [`super::combine`]) from
/// held-out ensemble answers under `rule` and the analytic formula's
/// answers on the same rows, both in the data's own frame (`analytic`
/// with the data's measured context).
pub fn learn_combination(
    family: Family,
    scheme: BucketScheme,
    examples: &[Example],
    params: &TrainParams,
    folds: usize,
    rule: DecisionRule,
    analytic: &Analytic,
) -> Result<Floors, String> {
    let buckets =
        Buckets::of(family, scheme).ok_or_else(|| format!("no buckets for the {family} family"))?;
    let (_, shares) = held_out_shares(family, scheme, examples, params, folds)?;
    let margin = rule.margin_for(scheme);
    let rows = combination_rows(
        &buckets,
        examples,
        &shares,
        (rule.quantile, margin),
        analytic,
    );
    Ok(learn_floors(&rows))
}

/// Held-out ensemble answers beside the formula's, for the combining
/// rule; rows the formula cannot judge are left out.
fn combination_rows(
    buckets: &Buckets,
    examples: &[Example],
    shares: &[Vec<f64>],
    (quantile, margin): (f64, f64),
    analytic: &Analytic,
) -> Vec<Row> {
    examples
        .iter()
        .zip(shares)
        .filter_map(|(e, s)| {
            let bucket = conservative_bucket(s, quantile);
            let ensemble_mib = match buckets.need_with_margin(bucket, margin) {
                Need::Mib(mib) => mib.min(OOM_CRASH_MIB),
                _ => OOM_CRASH_MIB,
            };
            let analytic_mib = analytic.estimate(&e.features, e.batch_size, "").ok()?.mib;
            Some(Row {
                group: Group::of(&e.features),
                ensemble_mib,
                analytic_mib,
                peak_mib: e.peak_mib,
            })
        })
        .collect()
}

/// The held-out votes of every row and what scoring them needs.
struct HeldOut<'a> {
    /// The buckets the ensemble voted on.
    buckets: &'a Buckets,
    published: &'a Buckets,
    folds: usize,
    examples: &'a [Example],
    fold_of: &'a [usize],
    shares: &'a [Vec<f64>],
}

impl HeldOut<'_> {
    /// The smallest margin with no row more than 2 GiB under at `q`.
    fn calibrated_margin(&self, q: f64) -> Option<f64> {
        let steps = (MARGIN_MAX / MARGIN_STEP).round() as u32;
        (0..=steps)
            .map(|k| f64::from(k) * MARGIN_STEP)
            .find(|&m| self.score(q, m).under_2gib == 0.0)
    }

    fn score(&self, q: f64, margin: f64) -> Scores {
        let n_published = self.published.len();
        let mut confusion = vec![vec![0; n_published]; n_published];
        let mut fold_hits = vec![(0usize, 0usize); self.folds];
        let (mut below, mut above, mut under, mut under_2gib) = (0, 0, 0, 0);
        let (mut over_sum, mut abs_sum) = (0.0, 0.0);
        for ((e, &fold), s) in self.examples.iter().zip(self.fold_of).zip(self.shares) {
            let bucket = conservative_bucket(s, q);
            let truth = self.published.of_mib(e.peak_mib);
            let predicted = self.buckets.coarsen(bucket, self.published);
            confusion[truth][predicted] += 1;
            fold_hits[fold].1 += 1;
            if predicted == truth {
                fold_hits[fold].0 += 1;
            } else if predicted < truth {
                below += 1;
            } else {
                above += 1;
            }
            // A need beyond the GPU is placed as a whole GPU (see
            // `sched`), which counts as crashed runs do.
            let estimate = match self.buckets.need_with_margin(bucket, margin) {
                Need::Mib(mib) => mib.min(OOM_CRASH_MIB),
                _ => OOM_CRASH_MIB,
            };
            let error = estimate as f64 - e.peak_mib as f64;
            over_sum += error;
            abs_sum += error.abs();
            under += usize::from(estimate < e.peak_mib);
            under_2gib += usize::from(estimate + SEVERE_UNDER_MIB < e.peak_mib);
        }
        let n = self.examples.len().max(1) as f64;
        let hits: usize = fold_hits.iter().map(|h| h.0).sum();
        Scores {
            quantile: q,
            margin,
            accuracy: hits as f64 / n,
            below: below as f64 / n,
            above: above as f64 / n,
            mean_over_mib: over_sum / n,
            mean_abs_error_mib: abs_sum / n,
            under: under as f64 / n,
            under_2gib: under_2gib as f64 / n,
            fold_accuracy: fold_hits
                .iter()
                .map(|&(h, t)| h as f64 / t.max(1) as f64)
                .collect(),
            confusion,
        }
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
