//! `carma estimate`: runs the estimator chain on one job file or one model
//! summary and says which estimator answered.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, anyhow};
use serde_json::{Value, json};

use carma::config::Config;
use carma::estimate::{Chain, Estimate, EstimateInput, EstimatorKind};
use carma::journal::shown;
use carma::rad::{self, LegacyRules};
use carma::sched::Need;
use carma::summary::Summary;

use super::spool_arg::SpoolArg;

#[derive(clap::Args)]
pub struct Args {
    /// A `.rad` job file, or a model summary (torchsummary, torchinfo or
    /// annotated module print).
    input: PathBuf,
    /// Batch size (needed for a bare summary).
    #[arg(long)]
    batch_size: Option<u64>,
    /// Estimators to ask, in order, instead of the configured chain (e.g.
    /// `ensemble,analytic`).
    #[arg(long, value_delimiter = ',')]
    estimators: Option<Vec<EstimatorKind>>,
    /// Print JSON (`mib`, `source`, `bucket`, `features`, ...).
    #[arg(long)]
    json: bool,
    /// The spool whose job history the `history` estimator reads.
    #[command(flatten)]
    spool: SpoolArg,
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let settings = config
        .estimate
        .for_spool(args.spool.resolve(&config).root());
    let is_rad = args.input.extension().is_some_and(|e| e == "rad");
    let mut input = if is_rad {
        job_from_rad(&args.input, &config.legacy)?
    } else {
        EstimateInput {
            summary: Some(read_summary(&args.input)?),
            ..EstimateInput::default()
        }
    };
    if args.batch_size.is_some() {
        input.batch_size = args.batch_size;
    }
    let chain = Chain::new(&settings);
    let order = args.estimators.as_deref().unwrap_or(&settings.order);
    let estimate = chain.estimate_with(order, &input);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&input, &estimate)?)?
        );
    } else {
        print_text(&input, &estimate);
    }
    Ok(ExitCode::SUCCESS)
}

fn read_summary(path: &Path) -> Result<Summary> {
    carma::estimate::read_summary(path, &path.display().to_string()).map_err(|e| anyhow!(e))
}

fn to_json(input: &EstimateInput, e: &Estimate) -> Result<Value> {
    let (mib, need) = match e.need {
        Need::Mib(m) => (json!(m), "mib"),
        Need::WholeGpu => (Value::Null, "whole-gpu"),
        Need::Unknown => (Value::Null, "unknown"),
    };
    let mut out = json!({
        "mib": mib,
        "need": need,
        "source": e.source.map(|s| s.name()),
        "batch_size": input.batch(),
        "features": input.summary.as_ref().map(|s| &s.features),
        "declined": e.declined.iter()
            .map(|(k, why)| json!({ "estimator": k.name(), "reason": why }))
            .collect::<Vec<_>>(),
    });
    if let Some(map) = out.as_object_mut() {
        if let Some(b) = &e.bucket {
            map.insert("bucket".into(), serde_json::to_value(b)?);
        }
        if let Some(f) = e.formula {
            map.insert("formula".into(), serde_json::to_value(f)?);
        }
        if let Some(c) = &e.combined {
            map.insert("combined".into(), serde_json::to_value(c)?);
        }
        if let Some(s) = &input.summary {
            map.insert("format".into(), serde_json::to_value(s.format)?);
            map.insert("summary_notes".into(), serde_json::to_value(&s.notes)?);
        }
    }
    Ok(out)
}

fn print_text(input: &EstimateInput, e: &Estimate) {
    for (kind, why) in &e.declined {
        println!("{kind}: no answer: {}", shown(why));
    }
    println!("{}", e.describe());
    if let Some(s) = &input.summary {
        let f = &s.features;
        println!(
            "model: {} ({}), {} parameters, {} activations per sample, batch {}",
            f.family,
            s.format,
            f.params_total,
            f.activations_per_sample
                .map_or("unknown".into(), |a| a.to_string()),
            input.batch().map_or("unknown".into(), |b| b.to_string()),
        );
        for note in &s.notes {
            println!("note: {}", shown(note));
        }
    }
}

/// The estimator's inputs from a job file (either syntax): its declared
/// memory (as `legacy` reads legacy files), command, batch size and model
/// summary. What the file gets away with is printed as warnings, as the
/// daemon logs it.
pub(super) fn job_from_rad(path: &Path, legacy: &LegacyRules) -> Result<EstimateInput> {
    let job = rad::check_file(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let (input, summary_warning) = EstimateInput::from_spec(&job.spec, dir, legacy);
    for warning in &job.warnings {
        eprintln!("{}", shown(&warning.to_string()));
    }
    if let Some(warning) = summary_warning {
        eprintln!(
            "{}",
            shown(&format!("{}: warning: {warning}", path.display()))
        );
    }
    Ok(input)
}
