//! Timings of the estimator's hot paths: parsing a model summary, one
//! ensemble prediction, and one whole chain estimate (history lookup,
//! ensemble, formula, combining) on a parsed summary. A plain `main` (no harness): run with
//! `cargo bench --bench estimate` and read the printed figures.
//!
//! Each figure is the median over 15 rounds of the mean time per call in a
//! round, so one slow round (a context switch) does not move it.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use carma::estimate::{BucketScheme, Chain, DecisionRule, EstimateInput, load_models};
use carma::summary::{Family, Summary};

/// Median over rounds of the mean seconds per call of `f`.
fn time_per_call(calls: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..calls / 10 + 1 {
        f();
    }
    let mut rounds: Vec<f64> = (0..15)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed().as_secs_f64() / f64::from(calls)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn main() -> Result<(), String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/workloads");
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name)).map_err(|e| {
            format!(
                "{}/{name}: {e} (the shared data must sit beside the repository)",
                dir.display()
            )
        })
    };
    println!("summary parsing (release build, one call):");
    for name in [
        "mobilenet_cifar100.model",
        "BERT_base.model",
        "resnet50_32.model",
        "xlnet_base_cased.model",
        "dlrm.model",
    ] {
        let text = read(name)?;
        let seconds = time_per_call(2000, || {
            black_box(Summary::parse(black_box(&text)).ok());
        });
        println!(
            "  {name:<26} {:>6} bytes {:>8.1} µs",
            text.len(),
            seconds * 1e6
        );
    }

    let text = read("mobilenet_cifar100.model")?;
    let seconds = time_per_call(2000, || {
        black_box(carma::summary::hex_digest(black_box(text.as_bytes())));
    });
    println!("  (digest alone: {:.1} µs)", seconds * 1e6);
    let models = load_models(Path::new(""))?;
    let rule = DecisionRule {
        quantile: 0.7,
        margin: 0.2,
    };
    println!("ensemble prediction (features -> votes of all trees -> bucket):");
    for (name, family, batch) in [
        ("resnet50_32.model", Family::Cnn, 32),
        ("mnist_cnn_64.model", Family::Cnn, 32),
        ("dlrm.model", Family::Mlp, 512),
    ] {
        let features = Summary::parse(&read(name)?)
            .map_err(|e| e.to_string())?
            .features;
        let model = models
            .family(family, BucketScheme::Fine)
            .ok_or("no model for the family")?;
        let seconds = time_per_call(20_000, || {
            black_box(model.predict(black_box(&features), batch, rule, 0.1).ok());
        });
        println!(
            "  {name:<26} {family} model, {} trees {:>8.2} µs",
            model.trees.len(),
            seconds * 1e6
        );
    }
    println!("chain estimate (declared, history, ensemble + analytic combined, whole-gpu):");
    let history = std::env::temp_dir().join(format!("carma-bench-history-{}", std::process::id()));
    let mut settings = carma::config::Config::load(None)
        .map_err(|e| e.to_string())?
        .estimate;
    settings.history_dir = history;
    let chain = Chain::new(&settings);
    for (name, batch) in [
        ("resnet50_32.model", 32),
        ("mnist_cnn_64.model", 32),
        ("BERT_base.model", 32),
    ] {
        let input = EstimateInput {
            command: format!("python {name}.py"),
            batch_size: Some(batch),
            summary: Some(Summary::parse(&read(name)?).map_err(|e| e.to_string())?),
            ..EstimateInput::default()
        };
        let e = chain.estimate(&input);
        let seconds = time_per_call(20_000, || {
            black_box(chain.estimate(black_box(&input)));
        });
        println!(
            "  {name:<26} {:<20} {:>8.2} µs",
            e.source_text(),
            seconds * 1e6
        );
    }
    Ok(())
}
