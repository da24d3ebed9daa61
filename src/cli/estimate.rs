//! `carma estimate`: runs the estimator chain on one job file or one model
//! summary and says which estimator answered.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use carma::estimate::{Chain, Estimate, EstimateInput, EstimatorKind, Settings};
use carma::sched::Need;
use carma::summary::Summary;

/// What to estimate, from the command line.
pub struct EstimateArgs {
    pub input: PathBuf,
    pub batch_size: Option<u64>,
    pub estimators: Option<Vec<EstimatorKind>>,
    pub json: bool,
}

pub fn run(args: &EstimateArgs, settings: &Settings) -> Result<()> {
    let is_rad = args.input.extension().is_some_and(|e| e == "rad");
    let mut input = if is_rad {
        job_from_rad(&args.input)?
    } else {
        EstimateInput {
            summary: Some(read_summary(&args.input)?),
            ..EstimateInput::default()
        }
    };
    if args.batch_size.is_some() {
        input.batch_size = args.batch_size;
    }
    let chain = Chain::new(settings);
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
    Ok(())
}

fn read_summary(path: &Path) -> Result<Summary> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read model summary {}", path.display()))?;
    Summary::parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
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
        if let Some(s) = &input.summary {
            map.insert("format".into(), serde_json::to_value(s.format)?);
            map.insert("summary_notes".into(), serde_json::to_value(&s.notes)?);
        }
    }
    Ok(out)
}

fn print_text(input: &EstimateInput, e: &Estimate) {
    for (kind, why) in &e.declined {
        println!("{kind}: no answer: {why}");
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
            println!("note: {note}");
        }
    }
}

/// The estimator's inputs from a legacy positional `.rad` file: line 3
/// the command, line 4 the model summary (relative to the file), line 6 the
/// batch size, line 9 (optional) the measured peak, `40000` meaning a whole
/// GPU.
// TODO(merge): replace with crate::rad — parse the job with the real
// `.rad` parser (both syntaxes, "did you mean" for summary names) and
// build the EstimateInput from its TaskSpec. This reads only the four
// legacy lines the estimator needs.
fn job_from_rad(path: &Path) -> Result<EstimateInput> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let line = |n: usize| lines.get(n - 1).copied().filter(|l| !l.is_empty());
    let Some(summary_name) = line(4) else {
        bail!(
            "{}: line 4: expected the model summary file name",
            path.display()
        );
    };
    let batch_size = match line(6) {
        Some(b) => Some(b.parse::<u64>().map_err(|_| {
            anyhow!(
                "{}: line 6: expected a batch size, found `{b}`",
                path.display()
            )
        })?),
        None => None,
    };
    let declared = match line(9) {
        Some(m) => {
            let mib = carma::size::parse_mib(m)
                .map_err(|e| anyhow!("{}: line 9, column {}: {e}", path.display(), e.column))?;
            Some(if mib >= 40_000 {
                Need::WholeGpu
            } else {
                Need::Mib(mib)
            })
        }
        None => None,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    Ok(EstimateInput {
        declared,
        command: line(3).unwrap_or("").to_string(),
        batch_size,
        summary: Some(read_summary(&dir.join(summary_name))?),
    })
}
