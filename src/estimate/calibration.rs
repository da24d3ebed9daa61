//! The combining floors learned on real jobs with measured peaks.
//!
//! The floors [`super::cross_validation::learn_combination`] learns on the
//! GPUMemNet data judge the analytic formula on synthetic networks, whose
//! peaks sit about twice above the activations autograd saves (conv, batch
//! norm and a non-in-place activation per layer, nothing freed early). Real
//! networks (in-place ReLUs, residual blocks, cuDNN's memory-efficient
//! kernels) sit at 0.5-1.2 times, so the formula (fitted to be safe on the
//! synthetic ones) is conservative on them, and a floor learned on the
//! synthetic rows keeps its tighter answer from the jobs carma actually
//! runs. When `carma train` is given real jobs, their rows decide the
//! floor of every family and group they cover, by the same rule
//! ([`super::combine::learn_floor`]).

use super::combine::{Floors, Group, Row, learn_floors};
use super::dataset::MEASURED_CONTEXT_MIB;
use super::{Chain, EstimateInput, EstimatorKind};
use crate::sched::Need;
use crate::summary::Family;

/// A real job: the estimator's inputs and the peak it was measured at.
#[derive(Debug, Clone)]
pub struct RealJob {
    pub name: String,
    pub input: EstimateInput,
    pub peak_mib: u64,
}

/// What the ensemble and the formula say of one real job.
#[derive(Debug, Clone, PartialEq)]
pub struct RealRow {
    pub name: String,
    pub family: Family,
    /// In the data's frame (see [`super::combine`]).
    pub row: Row,
}

/// The real jobs both the ensemble (uncombined) and the formula answer
/// in MiB, moved into the data's frame: all three figures shift by the
/// same constant, from the configured context to the data's.
pub fn real_rows(chain: &Chain, jobs: &[RealJob]) -> Vec<RealRow> {
    let shift = MEASURED_CONTEXT_MIB.saturating_sub(chain.settings.context_mib);
    let mib = |kind, input| match chain.estimate_with(&[kind], input).need {
        Need::Mib(mib) => Some(mib.saturating_add(shift)),
        _ => None,
    };
    jobs.iter()
        .filter_map(|job| {
            let features = &job.input.summary.as_ref()?.features;
            Some(RealRow {
                name: job.name.clone(),
                family: features.family,
                row: Row {
                    group: Group::of(features),
                    ensemble_mib: mib(EstimatorKind::Ensemble, &job.input)?,
                    analytic_mib: mib(EstimatorKind::Analytic, &job.input)?,
                    peak_mib: job.peak_mib.saturating_add(shift),
                },
            })
        })
        .collect()
}

/// The floors the rows of `family` give; `None` for a group without
/// rows, which keeps the floor learned on the GPUMemNet data.
pub fn learn_real_floors(rows: &[RealRow], family: Family) -> RealFloors {
    let mine: Vec<Row> = rows
        .iter()
        .filter(|r| r.family == family)
        .map(|r| r.row)
        .collect();
    let count = |group| mine.iter().filter(|r| r.group == group).count();
    let floors = learn_floors(&mine);
    RealFloors {
        plain: (count(Group::Plain) > 0).then_some(floors.plain.floor),
        batch_norm: (count(Group::BatchNorm) > 0).then_some(floors.batch_norm.floor),
        scores: floors,
        rows: mine.len(),
    }
}

/// Floors learned on real jobs, per group where they had rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RealFloors {
    pub plain: Option<f64>,
    pub batch_norm: Option<f64>,
    pub scores: Floors,
    pub rows: usize,
}
