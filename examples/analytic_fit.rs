//! How far the analytic estimator is from measured peaks: per family of
//! the GPUMemNet data and per real job, for the `training` formula (the
//! default) and Horus, plus the chain's answer for the real jobs, and the
//! backward factor the data asks for.
//!
//! ```text
//! cargo run --release --example analytic_fit -- [DATA_DIR]
//! ```
//!
//! `DATA_DIR` is carma's shared data (default `data`), holding
//! `gpumemnet/` and `carma/workloads/`.

use std::path::{Path, PathBuf};

use carma::config::Config;
use carma::estimate::analytic::{Layered, MIB_BYTES, Optimizer, Precision, training};
use carma::estimate::{Analytic, Chain, EstimateInput, EstimatorKind, dataset};
use carma::rad::{self, LegacyRules, MemoryLine};
use carma::sched::Need;
use carma::summary::Family;

/// Signed errors (estimate - peak, MiB) of one group.
fn report(name: &str, errors: &[i64]) {
    let n = errors.len().max(1) as f64;
    let over: Vec<i64> = errors.iter().copied().filter(|e| *e >= 0).collect();
    let under: Vec<i64> = errors.iter().copied().filter(|e| *e < 0).collect();
    let mean = |v: &[i64]| v.iter().sum::<i64>() as f64 / v.len().max(1) as f64;
    let far_below = errors.iter().filter(|e| **e < -2048).count();
    println!(
        "| {name} | {} | {:+.0} | {:.0} ({}) | {:.0} ({}) | {:.1}% |",
        errors.len(),
        mean(errors),
        mean(&over),
        over.len(),
        mean(&under),
        under.len(),
        100.0 * far_below as f64 / n
    );
}

fn header(what: &str) {
    println!("\n{what}\n");
    println!(
        "| group | rows | mean error | mean over (rows) | mean under (rows) | > 2 GiB below |"
    );
    println!("|---|---|---|---|---|---|");
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let data = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("data"), PathBuf::from);
    let settings = Config::load(None)?.estimate;
    // The GPUMemNet runs paid their stack's context; the real jobs the
    // configured one.
    let analytic = Analytic {
        context_mib: dataset::MEASURED_CONTEXT_MIB,
        ..settings.analytic()
    };
    let horus = Analytic {
        layered: Layered::Horus,
        ..analytic
    };
    let real = settings.analytic();
    let real_horus = Analytic {
        layered: Layered::Horus,
        ..real
    };
    header("GPUMemNet (runs that did not crash; estimate - measured peak, MiB)");
    let mut needed = Vec::new();
    for family in [Family::Mlp, Family::Cnn] {
        let (rows, _) = dataset::load(&data.join("gpumemnet"), family)?;
        let rows: Vec<_> = rows
            .into_iter()
            .filter(|r| r.peak_mib != dataset::OOM_CRASH_MIB)
            .collect();
        for (formula, a) in [("training", &analytic), ("horus", &horus)] {
            let errors: Vec<i64> = rows
                .iter()
                .filter_map(|r| a.estimate(&r.features, r.batch_size, "").ok())
                .zip(&rows)
                .map(|(e, r)| e.mib as i64 - r.peak_mib as i64)
                .collect();
            report(&format!("{family} {formula}"), &errors);
        }
        // The backward factor each row needs to be no more than 2 GiB below.
        for r in &rows {
            let f = &r.features;
            let Some(saved) = training::saved_activation_bytes(f, r.batch_size, Precision::Fp32)
            else {
                continue;
            };
            let state = training::model_state_bytes(f, Optimizer::Adam, Precision::Fp32);
            let fixed = training::fixed_mib(analytic.context_mib, f) as f64;
            let left = (r.peak_mib as f64 - 2048.0 - fixed) * MIB_BYTES - state;
            if saved > 64.0 * MIB_BYTES {
                needed.push(left / saved);
            }
        }
    }
    needed.sort_by(f64::total_cmp);
    let at = |q: f64| needed[((needed.len() - 1) as f64 * q) as usize];
    println!(
        "\nBackward factor needed (rows with > 64 MiB saved): median {:.2}, 90% {:.2}, 95% {:.2}, 99% {:.2}; in use {}",
        at(0.5),
        at(0.9),
        at(0.95),
        at(0.99),
        training::BACKWARD_FACTOR
    );

    println!("\nReal jobs (declared memory ignored; MiB)\n");
    println!("| job | peak | training/transformer | horus | chain | chain source |");
    println!("|---|---|---|---|---|---|");
    let workloads = data.join("carma/workloads");
    let mut files: Vec<_> = std::fs::read_dir(&workloads)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rad"))
        .collect();
    files.sort();
    let none = LegacyRules {
        honour_policy_line: false,
        memory_line: MemoryLine::None,
    };
    let oracle = LegacyRules {
        memory_line: MemoryLine::Oracle,
        ..none
    };
    let mut chain_settings = settings.clone();
    chain_settings.history_dir = std::env::temp_dir().join("carma-analytic-fit-no-history");
    let chain = Chain::new(&chain_settings);
    let order: Vec<_> = settings
        .order
        .iter()
        .copied()
        .filter(|k| *k != EstimatorKind::History)
        .collect();
    let (mut analytic_errors, mut chain_errors) = (Vec::new(), Vec::new());
    for path in files {
        let job = rad::check_file(&path)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let (input, _) = EstimateInput::from_spec(&job.spec, dir, &none);
        let Some(Need::Mib(peak)) = oracle.declared(&job.spec).need else {
            continue;
        };
        let formula = |a: &Analytic| -> Option<u64> {
            let s = input.summary.as_ref()?;
            a.estimate(&s.features, input.batch()?, &input.command)
                .ok()
                .map(|e| e.mib)
        };
        let chain_answer = chain.estimate_with(&order, &input);
        let chain_mib = match chain_answer.need {
            Need::Mib(m) => m,
            _ => 40_960,
        };
        let ours = formula(&real);
        if let Some(e) = ours {
            analytic_errors.push(e as i64 - peak as i64);
        }
        chain_errors.push(chain_mib as i64 - peak as i64);
        let show = |v: Option<u64>| v.map_or("-".into(), |m| m.to_string());
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        println!(
            "| {name} | {peak} | {} | {} | {chain_mib} | {} |",
            show(ours),
            show(formula(&real_horus)),
            chain_answer.source_text()
        );
    }
    header("Real jobs, summary");
    report("analytic alone", &analytic_errors);
    report("chain (no history)", &chain_errors);
    Ok(())
}
