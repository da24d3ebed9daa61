//! Memory estimation: how much GPU memory a job will need, and which
//! estimator said so.
//!
//! Estimators form a chain in the configured order; the first that answers
//! wins and the others say why they did not:
//!
//! 1. **declared** — the job file states its memory.
//! 2. **history** ([`History`]) — the same job ran here before: its largest
//!    observed peak plus a margin.
//! 3. **ensemble** ([`Ensemble`]) — bagged decision trees trained on the
//!    GPUMemNet data map summary features to a memory bucket. Only MLPs and
//!    CNNs: there is no training data for transformers, which go on to
//!    history and the analytic formula.
//! 4. **analytic** ([`Analytic`]) — what PyTorch keeps while training, or
//!    a transformer-aware formula (Horus on request).
//! 5. **whole-gpu** — nothing is known: ask for an idle GPU.
//!
//! The chain does no job-file parsing: callers hand it an
//! [`EstimateInput`], so the daemon, `carma estimate` and the simulator
//! share it.

pub mod analytic;
pub mod calibration;
pub mod combine;
pub mod cross_validation;
pub mod dataset;
pub mod ensemble;
pub mod flat_tree;
pub mod history;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::spool::record::Fingerprint;
pub use analytic::{Analytic, AnalyticAnswer, Formula};
pub use ensemble::{
    BucketAnswer, BucketScheme, Buckets, DecisionRule, Ensemble, FamilyEnsemble, TrainParams,
};
pub use history::{History, Record};

use crate::rad::{LegacyRules, TaskSpec};
use crate::sched::Need;
use crate::summary::Summary;

/// The models built into the binary: what `carma train` wrote into
/// `models/` when the binary was built.
pub const BUILT_IN_MODELS: &str = include_str!("../../models/memory-ensemble.json");

/// One estimator of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EstimatorKind {
    Declared,
    History,
    Ensemble,
    Analytic,
    WholeGpu,
}

impl EstimatorKind {
    /// Every estimator, in the default order.
    pub const ALL: [EstimatorKind; 5] = [
        EstimatorKind::Declared,
        EstimatorKind::History,
        EstimatorKind::Ensemble,
        EstimatorKind::Analytic,
        EstimatorKind::WholeGpu,
    ];

    /// The name used in the configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EstimatorKind::Declared => "declared",
            EstimatorKind::History => "history",
            EstimatorKind::Ensemble => "ensemble",
            EstimatorKind::Analytic => "analytic",
            EstimatorKind::WholeGpu => "whole-gpu",
        }
    }
}

impl std::fmt::Display for EstimatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EstimatorKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EstimatorKind::ALL
            .into_iter()
            .find(|k| k.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = EstimatorKind::ALL.iter().map(|k| k.name()).collect();
                format!(
                    "unknown estimator `{s}`: expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// `[estimate]`: see the commented default configuration for meanings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub order: Vec<EstimatorKind>,
    pub model: BucketScheme,
    pub quantile: f64,
    pub fine_margin: f64,
    pub out_of_range_tolerance: f64,
    pub models_dir: PathBuf,
    pub history_dir: PathBuf,
    pub history_margin: f64,
    pub history_min_margin_mib: u64,
    pub history_shared: bool,
    pub context_mib: u64,
    pub transformer_seq_len: u64,
    pub optimizer: analytic::Optimizer,
    pub analytic_formula: analytic::Layered,
}

impl Settings {
    /// These settings with the history kept in `spool`: an empty
    /// `history_dir` means `<spool>/history`, a relative one is taken from
    /// the spool.
    pub fn for_spool(&self, spool: &Path) -> Settings {
        let mut settings = self.clone();
        settings.history_dir = if self.history_dir.as_os_str().is_empty() {
            spool.join("history")
        } else {
            spool.join(&self.history_dir)
        };
        settings
    }

    /// Refuses values the chain cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        if self.order.is_empty() {
            return Err("estimate.order is empty: name at least one estimator".into());
        }
        for (i, kind) in self.order.iter().enumerate() {
            if self.order[..i].contains(kind) {
                return Err(format!("estimate.order names `{kind}` twice"));
            }
        }
        if !(self.quantile > 0.0 && self.quantile <= 1.0) {
            return Err(format!(
                "estimate.quantile = {}: expected 0 < q <= 1",
                self.quantile
            ));
        }
        if !(self.out_of_range_tolerance >= 0.0
            && self.history_margin >= 0.0
            && self.fine_margin >= 0.0)
        {
            return Err("estimate.out_of_range_tolerance, estimate.history_margin and estimate.fine_margin must be >= 0".into());
        }
        if self.transformer_seq_len == 0 {
            return Err("estimate.transformer_seq_len must be at least 1".into());
        }
        Ok(())
    }

    /// The ensemble's decision rule.
    pub fn decision_rule(&self) -> DecisionRule {
        DecisionRule {
            quantile: self.quantile,
            margin: self.fine_margin,
        }
    }

    /// The analytic estimator's part of the settings.
    pub fn analytic(&self) -> Analytic {
        Analytic {
            context_mib: self.context_mib,
            default_seq_len: self.transformer_seq_len,
            optimizer: self.optimizer,
            layered: self.analytic_formula,
        }
    }
}

/// What the chain knows about a job. The job-file parser fills it in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EstimateInput {
    /// The job's own declaration (`memory:`, or the legacy line the
    /// operator chose).
    pub declared: Option<Need>,
    /// Where the declaration was read, for people ("legacy line 10,
    /// horus"); empty when the caller knows none.
    pub declared_by: String,
    /// The job's command, for history.
    pub command: String,
    /// Batch size, when the job file states it.
    pub batch_size: Option<u64>,
    /// The job's parsed model summary.
    pub summary: Option<Summary>,
    /// Whose history answers for the job (`None`: everyone's).
    pub user: Option<u32>,
}

impl EstimateInput {
    /// What a parsed job file tells the chain: its declaration (as
    /// `legacy` reads legacy files), its script (the command, for history),
    /// batch size and model summary, read from `dir` (the job file's
    /// directory). A summary that cannot be read or does not parse comes
    /// back as a warning and the chain goes on without it: no estimator
    /// problem may fail a job.
    pub fn from_spec(
        spec: &TaskSpec,
        dir: &Path,
        legacy: &LegacyRules,
    ) -> (EstimateInput, Option<String>) {
        let read = |model: &String| read_summary(&dir.join(model), model);
        let (summary, warning) = match spec.model.as_ref().map(read) {
            Some(Ok(summary)) => (Some(summary), None),
            Some(Err(e)) => (None, Some(format!("{e}; estimating without it"))),
            None => (None, None),
        };
        let declared = legacy.declared(spec);
        let input = EstimateInput {
            declared: declared.need,
            declared_by: declared.by,
            command: spec.script.join("\n"),
            batch_size: spec.batch_size.map(u64::from),
            summary,
            user: None,
        };
        (input, warning)
    }

    /// The batch size: the job's, else the one the summary was made with.
    pub fn batch(&self) -> Option<u64> {
        self.batch_size
            .or_else(|| self.summary.as_ref()?.features.summary_batch)
    }

    /// The job's identity in history.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            command: Fingerprint::command_identity(&self.command),
            summary_digest: self.summary.as_ref().map(|s| s.digest.clone()),
            batch_size: self.batch(),
            user: self.user,
        }
    }
}

/// The model summary at `path` (`name` for messages), read as a file
/// only: a FIFO or a device such as `/dev/zero` is refused, never read,
/// and the size is capped.
pub fn read_summary(path: &Path, name: &str) -> Result<Summary, String> {
    let (bytes, _) = crate::safe::read_file(path, crate::summary::MAX_SUMMARY_BYTES)
        .map_err(|e| format!("cannot read model summary {name}: {e}"))?;
    let text =
        String::from_utf8(bytes).map_err(|_| format!("model summary {name}: not UTF-8 text"))?;
    Summary::parse(&text).map_err(|e| format!("model summary {name}: {e}"))
}

/// Two answers combined by the learned rule (see [`combine`]), in MiB
/// at the configured context.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Combined {
    pub ensemble_mib: u64,
    pub analytic_mib: u64,
    pub floor: f64,
}

/// The chain's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub need: Need,
    /// The estimator that answered; `None` when none did.
    pub source: Option<EstimatorKind>,
    /// The bucket, when the ensemble answered.
    pub bucket: Option<BucketAnswer>,
    /// The formula, when the analytic estimator answered.
    pub formula: Option<Formula>,
    /// When the analytic formula lowered the ensemble's answer by the
    /// learned rule: what each said.
    pub combined: Option<Combined>,
    /// Estimators asked before the answer, and why each declined.
    pub declined: Vec<(EstimatorKind, String)>,
    /// Where the declaration was read, when `declared` answered.
    pub declared_by: Option<String>,
}

impl Estimate {
    /// The answering estimator for records and the placement log:
    /// `history`, `declared: legacy line 10, horus`, `none`.
    pub fn source_text(&self) -> String {
        match (self.source, &self.declared_by) {
            (Some(source), Some(by)) if !by.is_empty() => format!("{source}: {by}"),
            (Some(source), _) if self.combined.is_some() => format!("{source}+analytic"),
            (Some(source), _) => source.name().to_string(),
            (None, _) => "none".to_string(),
        }
    }

    /// One line for logs: what, from where.
    pub fn describe(&self) -> String {
        // Exact MiB: bucket edges and history peaks are MiB figures.
        let need = match self.need {
            Need::Mib(mib) => format!("{mib} MiB ({})", self.need),
            other => other.to_string(),
        };
        let mut text = match self.source {
            Some(source) => format!("{need} from {source}"),
            None => format!("{need} (no estimator answered)"),
        };
        if let Some(b) = &self.bucket {
            text.push_str(&format!(" (bucket {} MiB at q = {}", b.range, b.quantile));
            if b.margin > 0.0 {
                text.push_str(&format!(", + {:.0}%", 100.0 * b.margin));
            }
            text.push(')');
        }
        if let Some(f) = self.formula {
            text.push_str(&format!(" ({f:?} formula)"));
        }
        if let Some(c) = self.combined {
            text.push_str(&format!(
                " (lowered from {} MiB by the analytic formula's {} MiB, floor {})",
                c.ensemble_mib, c.analytic_mib, c.floor
            ));
        }
        if let Some(by) = self.declared_by.as_ref().filter(|by| !by.is_empty()) {
            text.push_str(&format!(" ({by})"));
        }
        text
    }
}

/// An estimator's answer before it becomes an [`Estimate`].
struct Answer {
    need: Need,
    bucket: Option<BucketAnswer>,
    formula: Option<Formula>,
    combined: Option<Combined>,
}

impl Answer {
    fn plain(need: Need) -> Answer {
        Answer {
            need,
            bucket: None,
            formula: None,
            combined: None,
        }
    }
}

/// The estimator chain.
#[derive(Debug)]
pub struct Chain {
    settings: Settings,
    history: History,
    /// The loaded models, or why they could not be loaded (the ensemble
    /// step then declines with that reason and the chain goes on).
    ensemble: Result<Ensemble, String>,
}

/// Loads the models: built-in when `models_dir` is empty, else
/// `<models_dir>/memory-ensemble.json`.
pub fn load_models(models_dir: &Path) -> Result<Ensemble, String> {
    if models_dir.as_os_str().is_empty() {
        return Ensemble::from_json(BUILT_IN_MODELS).map_err(|e| format!("built-in models: {e}"));
    }
    let path = models_dir.join(ensemble::MODEL_FILE);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read model file {}: {e}", path.display()))?;
    Ensemble::from_json(&text).map_err(|e| format!("model file {}: {e}", path.display()))
}

impl Chain {
    /// The chain of `settings`, with its models loaded. A model that does
    /// not load is logged here, once, and the chain works without it.
    pub fn new(settings: &Settings) -> Chain {
        let ensemble = load_models(&settings.models_dir);
        if let Err(e) = &ensemble
            && settings.order.contains(&EstimatorKind::Ensemble)
        {
            log::error!("memory estimator ensemble unavailable: {e}");
        }
        Chain::with_models(settings, ensemble)
    }

    /// The chain with models given (or an error saying why there are
    /// none).
    pub fn with_models(settings: &Settings, ensemble: Result<Ensemble, String>) -> Chain {
        Chain {
            settings: settings.clone(),
            history: History::open(&settings.history_dir),
            ensemble,
        }
    }

    /// A need learned from the GPUMemNet data moved from the context its
    /// stack paid to the configured one (never below the configured one).
    fn in_configured_frame(&self, mib: u64) -> u64 {
        mib.saturating_sub(dataset::MEASURED_CONTEXT_MIB)
            .saturating_add(self.settings.context_mib)
    }

    /// The history store the chain reads; the daemon records finished
    /// jobs' peaks into it.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Asks the estimators in the configured order.
    pub fn estimate(&self, input: &EstimateInput) -> Estimate {
        self.estimate_with(&self.settings.order, input)
    }

    /// Asks the estimators in `order`.
    pub fn estimate_with(&self, order: &[EstimatorKind], input: &EstimateInput) -> Estimate {
        let mut declined = Vec::new();
        for &kind in order {
            match self.ask(kind, input, order) {
                Ok(answer) => {
                    // A job's word is taken, but not below what the same
                    // job was seen to use here: `memory: 1M` on a job that
                    // peaked at 70 GiB put it beside others, whose jobs
                    // the kernel then killed (without MPS nothing caps a
                    // job's memory), charged to their owners.
                    let (kind, answer) = match kind {
                        EstimatorKind::Declared => match self.seen_above(&answer, input) {
                            Some(seen) => {
                                declined.push((
                                    kind,
                                    format!(
                                        "the job declares {}, less than it was seen to use here",
                                        answer.need
                                    ),
                                ));
                                (EstimatorKind::History, seen)
                            }
                            None => (kind, answer),
                        },
                        _ => (kind, answer),
                    };
                    return Estimate {
                        need: answer.need,
                        source: Some(kind),
                        bucket: answer.bucket,
                        formula: answer.formula,
                        combined: answer.combined,
                        declined,
                        declared_by: (kind == EstimatorKind::Declared)
                            .then(|| input.declared_by.clone()),
                    };
                }
                Err(why) => declined.push((kind, why)),
            }
        }
        Estimate {
            need: Need::Unknown,
            source: None,
            bucket: None,
            formula: None,
            combined: None,
            declined,
            declared_by: None,
        }
    }

    /// What this job was seen to use here, when that is more than
    /// `declared` says.
    fn seen_above(&self, declared: &Answer, input: &EstimateInput) -> Option<Answer> {
        let mib = |need: Need| match need {
            Need::Mib(mib) => mib,
            Need::WholeGpu => u64::MAX,
            Need::Unknown => 0,
        };
        self.ask(EstimatorKind::History, input, &[])
            .ok()
            .filter(|seen| mib(seen.need) > mib(declared.need))
    }

    fn ask(
        &self,
        kind: EstimatorKind,
        input: &EstimateInput,
        order: &[EstimatorKind],
    ) -> Result<Answer, String> {
        let summary = || {
            input
                .summary
                .as_ref()
                .ok_or("the job names no model summary")
        };
        let batch = || input.batch().ok_or("the job states no batch size");
        match kind {
            EstimatorKind::Declared => input.declared.map(Answer::plain).ok_or_else(|| match input
                .declared_by
                .as_str()
            {
                "" => "the job declares no memory".into(),
                by => format!("the job declares no memory ({by})"),
            }),
            EstimatorKind::History => {
                if input.command.trim().is_empty() {
                    return Err("the job has no command to recognise it by".into());
                }
                match self.history.lookup(&input.fingerprint()) {
                    Ok(Some(record)) => {
                        let peak = record.max_peak_mib;
                        let margin = ((peak as f64 * self.settings.history_margin).ceil() as u64)
                            .max(self.settings.history_min_margin_mib);
                        Ok(Answer::plain(Need::Mib(peak.saturating_add(margin))))
                    }
                    Ok(None) => Err("this job has not run here before".into()),
                    Err(e) => Err(format!("history unreadable: {e}")),
                }
            }
            EstimatorKind::Ensemble => {
                let summary = summary()?;
                let models = self.ensemble.as_ref().map_err(Clone::clone)?;
                let family = summary.features.family;
                let model = models.family(family, self.settings.model).ok_or_else(|| {
                    format!("no training data for the {family} family (only MLP and CNN)")
                })?;
                let batch = batch()?;
                let answer = model
                    .predict(
                        &summary.features,
                        batch,
                        self.settings.decision_rule(),
                        self.settings.out_of_range_tolerance,
                    )
                    .map_err(|d| d.to_string())?;
                let Need::Mib(learned) = model.need(&answer) else {
                    return Ok(Answer {
                        need: model.need(&answer),
                        bucket: Some(answer),
                        formula: None,
                        combined: None,
                    });
                };
                // The rule was learned in the data's frame: combine there,
                // then move to the configured context.
                let formula = model
                    .analytic_floor_for(&summary.features)
                    .filter(|_| order.contains(&EstimatorKind::Analytic))
                    .and_then(|floor| {
                        let in_data = Analytic {
                            context_mib: dataset::MEASURED_CONTEXT_MIB,
                            ..self.settings.analytic()
                        };
                        let a = in_data.estimate(&summary.features, batch, &input.command);
                        Some((floor, a.ok()?.mib))
                    });
                let (need, combined) = match formula {
                    Some((floor, analytic_mib)) => {
                        let (need, lowered) = combine::combine(learned, analytic_mib, floor);
                        let combined = lowered.then(|| Combined {
                            ensemble_mib: self.in_configured_frame(learned),
                            analytic_mib: self.in_configured_frame(analytic_mib),
                            floor,
                        });
                        (need, combined)
                    }
                    None => (learned, None),
                };
                Ok(Answer {
                    need: Need::Mib(self.in_configured_frame(need)),
                    bucket: Some(answer),
                    formula: None,
                    combined,
                })
            }
            EstimatorKind::Analytic => {
                let a = self.settings.analytic().estimate(
                    &summary()?.features,
                    batch()?,
                    &input.command,
                )?;
                Ok(Answer {
                    need: Need::Mib(a.mib),
                    bucket: None,
                    formula: Some(a.formula),
                    combined: None,
                })
            }
            EstimatorKind::WholeGpu => Ok(Answer::plain(Need::WholeGpu)),
        }
    }
}

#[cfg(test)]
mod tests;
