//! How the ensemble's and the analytic formula's answers become one need,
//! by a rule learned from held-out data rather than fixed by hand.
//!
//! Both estimators are biased high on real networks in different places:
//! the ensemble's bucket edge plus margin never goes below the training
//! data's floor, and the formula counts every layer's output. Taking the
//! smaller answer would be tight but trusts the formula where it is too
//! low (on the GPUMemNet data it is more than 2 GiB under for a few
//! percent of the networks). The rule therefore lets the formula lower
//! the ensemble's answer only down to a learned share of it:
//!
//! `need = min(ensemble, max(analytic, floor x ensemble))`
//!
//! `floor = 1` is the ensemble alone, `floor = 0` the minimum of the two.
//! [`learn_floor`] picks the smallest floor whose held-out answers are no
//! more often more than 2 GiB under than the ensemble's own; `carma train`
//! stores it in the model file with the trees, per family and per
//! [`Group`]: networks with and without batch norm. The formula's error
//! spreads twice as wide without batch norm (on the GPUMemNet CNNs, 4.4%
//! of such runs more than 2 GiB under against 0.6% with it), so one floor
//! for both would hold the formula back where it is trustworthy, which is
//! where nearly every real CNN is.
//!
//! The rule works in the training data's frame: answers measured on the
//! stack that produced the data (see [`super::dataset::MEASURED_CONTEXT_MIB`]);
//! the chain moves both answers into that frame, combines, and moves the
//! result back to the configured context.

use serde::Serialize;

/// An underestimate by more than this is counted apart: placement keeps
/// `placement.margin_mib` (2 GiB by default) free beyond every estimate,
/// so a smaller one is absorbed and a larger one risks an OOM crash.
pub const SEVERE_UNDER_MIB: u64 = 2048;
use crate::summary::ModelFeatures;

/// Floors tried: `k / FLOOR_STEPS` for k = 0 ..= FLOOR_STEPS.
const FLOOR_STEPS: u32 = 20;

/// Extra share of held-out rows that may fall more than 2 GiB under
/// before a floor counts as less safe than the ensemble alone: one row in
/// a thousand, so sampling noise does not pin the floor at 1.
const SEVERE_TOLERANCE: f64 = 0.001;

/// The combined need, MiB, and whether the analytic answer lowered it.
pub fn combine(ensemble_mib: u64, analytic_mib: u64, floor: f64) -> (u64, bool) {
    let floor_mib = (ensemble_mib as f64 * floor.clamp(0.0, 1.0)).ceil() as u64;
    let need = ensemble_mib.min(analytic_mib.max(floor_mib));
    (need, need < ensemble_mib)
}

/// Networks whose combining floor is learned apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Plain,
    BatchNorm,
}

impl Group {
    pub fn of(f: &ModelFeatures) -> Group {
        if f.layers.batch_norm > 0 {
            Group::BatchNorm
        } else {
            Group::Plain
        }
    }
}

/// One held-out row: what each estimator said, and the measured peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub group: Group,
    pub ensemble_mib: u64,
    pub analytic_mib: u64,
    pub peak_mib: u64,
}

/// How a floor did on held-out rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FloorScore {
    pub floor: f64,
    /// Mean of need minus peak, MiB.
    pub mean_over_mib: f64,
    /// Share of rows more than 2 GiB under their peak.
    pub under_2gib: f64,
}

/// Scores `floor` on `rows`.
pub fn score(rows: &[Row], floor: f64) -> FloorScore {
    let n = rows.len().max(1) as f64;
    let (mut over, mut severe) = (0.0, 0usize);
    for r in rows {
        let (need, _) = combine(r.ensemble_mib, r.analytic_mib, floor);
        over += need as f64 - r.peak_mib as f64;
        severe += usize::from(need + SEVERE_UNDER_MIB < r.peak_mib);
    }
    FloorScore {
        floor,
        mean_over_mib: over / n,
        under_2gib: severe as f64 / n,
    }
}

/// The smallest floor no less safe than the ensemble alone on `rows`,
/// with its score. Lower floors never raise a need, so the smallest safe
/// floor is also the tightest.
pub fn learn_floor(rows: &[Row]) -> FloorScore {
    let alone = score(rows, 1.0);
    (0..=FLOOR_STEPS)
        .map(|k| score(rows, f64::from(k) / f64::from(FLOOR_STEPS)))
        .find(|s| s.under_2gib <= alone.under_2gib + SEVERE_TOLERANCE)
        .unwrap_or(alone)
}

/// The floors of both groups.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Floors {
    pub plain: FloorScore,
    pub batch_norm: FloorScore,
}

/// [`learn_floor`] for each group on its own rows; a group without rows
/// gets the ensemble alone (floor 1): nothing says the formula is safe
/// there.
pub fn learn_floors(rows: &[Row]) -> Floors {
    let learn = |group| {
        let mine: Vec<Row> = rows.iter().copied().filter(|r| r.group == group).collect();
        if mine.is_empty() {
            score(&mine, 1.0)
        } else {
            learn_floor(&mine)
        }
    };
    Floors {
        plain: learn(Group::Plain),
        batch_norm: learn(Group::BatchNorm),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_bounds_how_far_the_formula_may_lower_the_ensemble() {
        assert_eq!(combine(4000, 1000, 0.5), (2000, true));
        assert_eq!(combine(4000, 3000, 0.5), (3000, true));
        assert_eq!(combine(4000, 9000, 0.5), (4000, false));
        assert_eq!(combine(4000, 1000, 1.0), (4000, false));
        assert_eq!(combine(4000, 1000, 0.0), (1000, true));
    }

    #[test]
    fn learns_the_lowest_floor_that_adds_no_severe_underestimate() {
        // The formula is right on half the rows and far too low on the
        // other half, where only a floor of 0.8 or more stays within 2 GiB.
        let mut rows = Vec::new();
        for _ in 0..50 {
            rows.push(Row {
                group: Group::Plain,
                ensemble_mib: 12_000,
                analytic_mib: 8_000,
                peak_mib: 8_000,
            });
            rows.push(Row {
                group: Group::Plain,
                ensemble_mib: 12_000,
                analytic_mib: 1_000,
                peak_mib: 11_500,
            });
        }
        let learned = learn_floor(&rows);
        assert!((learned.floor - 0.8).abs() < 1e-9, "{learned:?}");
        assert_eq!(learned.under_2gib, 0.0);
        assert!(learned.mean_over_mib < score(&rows, 1.0).mean_over_mib);
    }

    #[test]
    fn a_formula_that_is_always_safe_gives_the_minimum() {
        let rows = [Row {
            group: Group::BatchNorm,
            ensemble_mib: 9_000,
            analytic_mib: 3_000,
            peak_mib: 2_500,
        }];
        assert_eq!(learn_floor(&rows).floor, 0.0);
    }

    /// A formula far too low on plain networks only keeps the minimum for
    /// batch-norm networks; a group with no rows keeps the ensemble.
    #[test]
    fn groups_learn_their_own_floors() {
        let row = |group, analytic_mib, peak_mib| Row {
            group,
            ensemble_mib: 12_000,
            analytic_mib,
            peak_mib,
        };
        let rows = [
            row(Group::Plain, 1_000, 11_500),
            row(Group::BatchNorm, 8_000, 8_000),
        ];
        let floors = learn_floors(&rows);
        assert!((floors.plain.floor - 0.8).abs() < 1e-9);
        assert_eq!(floors.batch_norm.floor, 0.0);
        let only_plain = learn_floors(&rows[..1]);
        assert_eq!(only_plain.batch_norm.floor, 1.0);
    }
}
