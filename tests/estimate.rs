//! `carma estimate` and `carma train` as a user runs them.

use std::process::Command;

fn workloads() -> String {
    let dir = format!(
        "{}/../shared/data/carma/workloads",
        env!("CARGO_MANIFEST_DIR")
    );
    assert!(
        std::path::Path::new(&dir).is_dir(),
        "{dir} is missing: the CARMA workloads must sit in ../shared/data"
    );
    dir
}

fn carma(args: &[&str]) -> (bool, String, String) {
    let history = tempfile::tempdir().unwrap();
    let config = history.path().join("carma.toml");
    std::fs::write(
        &config,
        format!("[estimate]\nhistory_dir = {:?}\n", history.path()),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_carma"))
        .args(["--config", config.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_legacy_job_is_estimated_by_the_estimators_asked_for() {
    let rad = format!("{}/resnet.rad", workloads());
    let (ok, out, err) = carma(&[
        "estimate",
        &rad,
        "--estimators",
        "ensemble,analytic",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "ensemble");
    assert_eq!(v["batch_size"], 32);
    assert_eq!(v["features"]["family"], "cnn");
    let mib = v["mib"].as_u64().unwrap();
    // A fine CNN bucket's upper edge plus the margin, moved from the
    // data's context to the configured one, and not more than 2 GiB under
    // the measured peak (3,934 MiB).
    let margin = v["bucket"]["margin"].as_f64().unwrap();
    let context = carma::config::Config::load(None)
        .unwrap()
        .estimate
        .context_mib;
    let learned = mib + carma::estimate::dataset::MEASURED_CONTEXT_MIB - context;
    let edge = (learned as f64 / (1.0 + margin)).round() as u64;
    assert!(edge % 1000 == 0 && mib + 2048 >= 3934, "{mib}");
    assert!(v["bucket"]["range"].is_string());
}

#[test]
fn the_declared_peak_wins_by_default() {
    let rad = format!("{}/BERT_base.rad", workloads());
    let (ok, out, err) = carma(&["estimate", &rad, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["mib"].as_u64(), v["source"].as_str()),
        (Some(19828), Some("declared"))
    );
    assert!(v.get("bucket").is_none());
}

#[test]
fn a_summary_with_a_batch_size_says_who_answered() {
    let model = format!("{}/BERT_base.model", workloads());
    let (ok, out, err) = carma(&["estimate", &model, "--batch-size", "32"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("ensemble: no answer: no training data for the transformer family"),
        "{out}"
    );
    assert!(out.contains("from analytic (Transformer formula)"), "{out}");
}

#[test]
fn a_file_that_is_no_summary_is_refused_with_its_position() {
    let (ok, _, err) = carma(&["estimate", "Cargo.toml", "--batch-size", "8"]);
    assert!(!ok);
    assert!(
        err.contains("Cargo.toml: line 1, column 1: unknown summary format"),
        "{err}"
    );
}

#[test]
fn train_needs_something_to_do() {
    let (ok, _, err) = carma(&["train", "--data", "."]);
    assert!(!ok);
    assert!(err.contains("nothing to do"), "{err}");
}
