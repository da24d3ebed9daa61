//! `carma train`: trains the memory-estimator ensembles on the GPUMemNet
//! data and writes the model file, or cross-validates them. Both bucket
//! schemes are trained and scored (on the same folds), so the file serves
//! either `estimate.model` and one run shows what the fine buckets gain.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use serde_json::json;

use carma::config::Config;
use carma::estimate::calibration::{self, RealJob};
use carma::estimate::cross_validation::{self, Report, Scores};
use carma::estimate::dataset::{self, LoadReport};
use carma::estimate::ensemble::{MODEL_FILE, MODEL_FORMAT};
use carma::estimate::{
    Analytic, BucketScheme, Chain, Ensemble, FamilyEnsemble, Settings, TrainParams,
};
use carma::rad::LegacyRules;
use carma::summary::Family;

use super::estimate::job_from_rad;

#[derive(clap::Args)]
pub struct Args {
    /// Directory with mlp_data.csv and cnn_data.csv.
    #[arg(long)]
    data: PathBuf,
    /// Write the models (memory-ensemble.json) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Cross-validate with this many stratified folds and print the
    /// scores.
    #[arg(long)]
    cv: Option<usize>,
    /// Print cross-validation scores as JSON.
    #[arg(long)]
    json: bool,
    /// Seed of every random choice (bootstrap samples, folds).
    #[arg(long, default_value_t = TrainParams::default().seed)]
    seed: u64,
    /// Trees per ensemble.
    #[arg(long, default_value_t = TrainParams::default().trees)]
    trees: usize,
    /// Directories of real `.rad` jobs (with their summaries) whose
    /// measured peaks `--peaks` gives: their rows, not the GPUMemNet
    /// data's, decide the combining floor of every family and group they
    /// cover (see `models/README.md`).
    #[arg(long, requires = "peaks")]
    real_jobs: Vec<PathBuf>,
    /// CSV files with `task` (the job file's name) and `memory_mib` (its
    /// measured peak) columns, e.g. the traces of `data`.
    #[arg(long, requires = "real_jobs")]
    peaks: Vec<PathBuf>,
}

const FAMILIES: [Family; 2] = [Family::Mlp, Family::Cnn];

/// Folds of the held-out answers the combining floor is learned on.
const COMBINE_FOLDS: usize = 3;

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let settings = config.estimate.clone();
    let rule = settings.decision_rule();
    // The combining rule is learned against the formula as it answers on
    // the data's own stack.
    let analytic = Analytic {
        context_mib: dataset::MEASURED_CONTEXT_MIB,
        ..settings.analytic()
    };
    let params = TrainParams {
        trees: args.trees,
        seed: args.seed,
        ..TrainParams::default()
    };
    if args.out.is_none() && args.cv.is_none() {
        bail!("nothing to do: give --out DIR to write models, --cv K to cross-validate, or both");
    }
    let real_jobs = if args.real_jobs.is_empty() {
        Vec::new()
    } else {
        load_real_jobs(&args.real_jobs, &args.peaks, &config.legacy)?
    };
    let mut loaded = Vec::new();
    for family in FAMILIES {
        let (examples, report) = dataset::load(&args.data, family)?;
        log::info!(
            "{family}: {} rows read, {} used ({} of left-out shapes, {} broken, {} OOM crashes as {} MiB)",
            report.rows_read,
            report.rows_used,
            report.left_out_shapes,
            report.broken,
            report.oom_crash,
            dataset::OOM_CRASH_MIB
        );
        loaded.push((family, examples, report));
    }
    if let Some(folds) = args.cv {
        let mut reports = Vec::new();
        for (family, examples, load) in &loaded {
            for scheme in BucketScheme::ALL {
                let report = cross_validation::cross_validate(
                    *family, scheme, examples, &params, folds, rule, &analytic,
                )
                .map_err(anyhow::Error::msg)?;
                reports.push((report, load.clone()));
            }
        }
        print_reports(&reports, &params, args.json)?;
    }
    if let Some(out) = &args.out {
        let families = loaded
            .iter()
            .flat_map(|(family, examples, _)| {
                BucketScheme::ALL.map(|scheme| {
                    let mut model = FamilyEnsemble::train(*family, scheme, examples, &params)?;
                    let learned = cross_validation::learn_combination(
                        *family,
                        scheme,
                        examples,
                        &params,
                        COMBINE_FOLDS,
                        rule,
                        &analytic,
                    )?;
                    for (group, k) in [("plain", learned.plain), ("batch-norm", learned.batch_norm)] {
                        log::info!(
                            "{family} {scheme}, {group} networks: combining floor {} (held out: mean over {:.0} MiB, {:.2}% more than 2 GiB under)",
                            k.floor,
                            k.mean_over_mib,
                            100.0 * k.under_2gib
                        );
                    }
                    model.analytic_floor = Some(learned.plain.floor);
                    model.analytic_floor_batch_norm = Some(learned.batch_norm.floor);
                    if !real_jobs.is_empty() {
                        learn_on_real_jobs(&mut model, &settings, &real_jobs);
                    }
                    Ok(model)
                })
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(anyhow::Error::msg)?;
        let ensemble = Ensemble {
            format: MODEL_FORMAT,
            params,
            families,
        };
        let path = write_models(out, &ensemble)?;
        log::info!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn write_models(out: &Path, ensemble: &Ensemble) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join(MODEL_FILE);
    let mut text = ensemble.to_json().map_err(anyhow::Error::msg)?;
    text.push('\n');
    carma::spool::write_durable(&path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn print_reports(reports: &[(Report, LoadReport)], params: &TrainParams, json: bool) -> Result<()> {
    if json {
        // families.<family>.<scheme>: the report, with what loading kept.
        let mut families = serde_json::Map::new();
        for (r, load) in reports {
            let mut value = serde_json::to_value(r)?;
            if let Some(map) = value.as_object_mut() {
                map.insert("data".into(), serde_json::to_value(load)?);
            }
            let family = families
                .entry(r.family.to_string())
                .or_insert_with(|| json!({}));
            if let Some(map) = family.as_object_mut() {
                map.insert(r.scheme.to_string(), value);
            }
        }
        let out = json!({ "params": params, "families": families });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    for (r, load) in reports {
        let c = &r.configured;
        println!(
            "{} {} buckets: {} rows ({} read, {} left-out shapes, {} broken), {}-fold stratified CV, {} trees, seed {}",
            r.family,
            r.scheme,
            r.rows,
            load.rows_read,
            load.left_out_shapes,
            load.broken,
            r.folds,
            params.trees,
            params.seed
        );
        println!("  {}: {}", rule_text(c), summary_line(c));
        println!("  confusion on the published buckets (rows: true, columns: predicted):");
        for (label, row) in r.buckets.iter().zip(&c.confusion) {
            let cells: Vec<String> = row.iter().map(|n| format!("{n:>5}")).collect();
            println!("    {label:>16} {}", cells.join(""));
        }
        println!("  trade-off:");
        for s in r.sweep.iter().chain(&r.margin_sweep) {
            println!("    {:<18} {}", rule_text(s), summary_line(s));
        }
        match r.calibrated_margin {
            Some(m) => println!(
                "  smallest margin leaving no held-out run more than 2 GiB under at q = {}: {m:.2}",
                c.quantile
            ),
            None if r.scheme == BucketScheme::Fine => {
                println!("  no margin up to 100% leaves every held-out run within 2 GiB")
            }
            None => {}
        }
        for (group, k) in [
            ("plain", r.combined.plain),
            ("batch-norm", r.combined.batch_norm),
        ] {
            println!(
                "  with the analytic formula, {group} networks: learned floor {}: mean over {:.0} MiB, >2 GiB under {:.2}%",
                k.floor,
                k.mean_over_mib,
                100.0 * k.under_2gib
            );
        }
    }
    Ok(())
}

/// A decision rule for people: `q = 0.7, + 20%`.
fn rule_text(s: &Scores) -> String {
    format!("q = {}, + {:.0}%", s.quantile, 100.0 * s.margin)
}

/// One decision rule's scores: published-protocol shares, then MiB terms.
fn summary_line(s: &Scores) -> String {
    format!(
        "accuracy {:.4}  below {:>5.2}%  above {:>5.2}% | mean over {:>6.0} MiB  MAE {:>6.0} MiB  under {:>5.2}%  >2 GiB under {:>5.2}%",
        s.accuracy,
        100.0 * s.below,
        100.0 * s.above,
        s.mean_over_mib,
        s.mean_abs_error_mib,
        100.0 * s.under,
        100.0 * s.under_2gib
    )
}

/// The real jobs in `dirs` that `peaks` has a measured peak for. A job
/// that does not read is an error: a calibration set is chosen by hand.
fn load_real_jobs(
    dirs: &[PathBuf],
    peaks: &[PathBuf],
    legacy: &LegacyRules,
) -> Result<Vec<RealJob>> {
    let mut peak_of = HashMap::new();
    for path in peaks {
        let mut reader = csv::Reader::from_path(path)
            .with_context(|| format!("cannot read peaks from {}", path.display()))?;
        for (i, row) in reader.deserialize::<PeakRow>().enumerate() {
            let row = row.with_context(|| format!("{}: row {}", path.display(), i + 2))?;
            peak_of.insert(row.task, row.memory_mib.round() as u64);
        }
    }
    let mut jobs = Vec::new();
    for dir in dirs {
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list real jobs in {}", dir.display()))?;
        let mut paths: Vec<PathBuf> = entries
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        paths.sort();
        for path in paths {
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(&peak_mib) = peak_of.get(name).filter(|_| name.ends_with(".rad")) else {
                continue;
            };
            let input = job_from_rad(&path, legacy)?;
            jobs.push(RealJob {
                name: name.to_string(),
                input,
                peak_mib,
            });
        }
    }
    if jobs.is_empty() {
        bail!("no job file in the --real-jobs directories has a peak in the --peaks files");
    }
    log::info!("{} real jobs with measured peaks", jobs.len());
    Ok(jobs)
}

#[derive(serde::Deserialize)]
struct PeakRow {
    task: String,
    memory_mib: f64,
}

/// Replaces `model`'s floors with those its family's real jobs give
/// (where they have rows), and logs how each real job fares.
fn learn_on_real_jobs(model: &mut FamilyEnsemble, settings: &Settings, jobs: &[RealJob]) {
    let scheme_settings = Settings {
        model: model.scheme,
        ..settings.clone()
    };
    let ensemble = Ensemble {
        format: MODEL_FORMAT,
        params: TrainParams::default(),
        families: vec![model.clone()],
    };
    let chain = Chain::with_models(&scheme_settings, Ok(ensemble));
    let rows = calibration::real_rows(&chain, jobs);
    let real = calibration::learn_real_floors(&rows, model.family);
    for r in rows.iter().filter(|r| r.family == model.family) {
        log::debug!("real job {}: {:?}", r.name, r.row);
    }
    for (group, floor, score) in [
        ("plain", real.plain, real.scores.plain),
        ("batch-norm", real.batch_norm, real.scores.batch_norm),
    ] {
        if let Some(floor) = floor {
            log::info!(
                "{} {}, {group} networks: combining floor {floor} on {} real jobs of the family (mean over {:.0} MiB, {:.2}% more than 2 GiB under)",
                model.family,
                model.scheme,
                real.rows,
                score.mean_over_mib,
                100.0 * score.under_2gib
            );
        }
    }
    model.analytic_floor = real.plain.or(model.analytic_floor);
    model.analytic_floor_batch_norm = real.batch_norm.or(model.analytic_floor_batch_norm);
}
