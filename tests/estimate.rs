//! `carma estimate` and `carma train` as a user runs them.

use std::process::Command;

fn workloads() -> String {
    let dir = format!("{}/data/carma/workloads", env!("CARGO_MANIFEST_DIR"));
    assert!(
        std::path::Path::new(&dir).is_dir(),
        "{dir} is missing: the CARMA workloads are part of the repository (data/README.md)"
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
    // The formula lowered the ensemble's answer (the CNN floor learned on
    // real jobs is 0): the need is the smaller of the two, and not more
    // than 2 GiB under the measured peak (3,934 MiB).
    let combined = &v["combined"];
    let ensemble = combined["ensemble_mib"].as_u64().unwrap();
    assert_eq!(Some(mib), combined["analytic_mib"].as_u64());
    assert!(mib < ensemble && mib + 2048 >= 3934, "{mib}");
    // The ensemble's answer: a fine CNN bucket's upper edge plus the
    // margin, moved from the data's context to the configured one.
    let mib = ensemble;
    let margin = v["bucket"]["margin"].as_f64().unwrap();
    let context = carma::config::Config::load(None)
        .unwrap()
        .estimate
        .context_mib;
    let learned = mib + carma::estimate::dataset::MEASURED_CONTEXT_MIB - context;
    let edge = (learned as f64 / (1.0 + margin)).round() as u64;
    assert!(edge.is_multiple_of(1000) && mib + 2048 >= 3934, "{mib}");
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

/// `carma simulate --replicas`: seeded jittered replays, so estimators are
/// compared on a mean rather than on one arrival order.
#[test]
fn replicas_replay_jittered_arrivals_and_report_their_spread() {
    let trace = format!(
        "{}/data/carma/traces/philly_t1_60.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = ["simulate", "--trace", &trace, "--replicas", "3", "--json"];
    let (ok, out, err) = carma(&args);
    assert!(ok, "{err}");
    let (_, again, _) = carma(&args);
    assert_eq!(out, again, "seeded");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let times: Vec<f64> = j["total_time_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert_eq!(times.len(), 3);
    assert!(times.windows(2).any(|w| w[0] != w[1]), "{times:?}");
    let mean = j["mean_total_time_s"].as_f64().unwrap();
    assert!((mean - times.iter().sum::<f64>() / 3.0).abs() < 1e-6);
    let (ok, _, err) = carma(&["simulate", "--trace", &trace, "--replicas", "0"]);
    assert!(!ok && err.contains("--replicas needs N >= 1"), "{err}");
    // Without replays there is nothing to move: said, not ignored.
    let (ok, _, err) = carma(&["simulate", "--trace", &trace, "--jitter-s", "5"]);
    assert!(
        !ok && err.contains("--jitter-s moves the submissions"),
        "{err}"
    );
    let args = ["--replicas", "2", "--jitter-s=-1"];
    let (ok, _, err) = carma(&[&["simulate", "--trace", &trace][..], &args].concat());
    assert!(!ok && err.contains("--jitter-s: expected seconds"), "{err}");
}

/// `carma train --real-jobs`: the real workloads' measured peaks (from
/// the traces) decide the CNN floors; jobs the peaks do not name are
/// skipped, and a peaks file naming none of the jobs is an error.
#[test]
fn train_learns_the_floors_on_real_jobs() {
    let shared = format!("{}/data", env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let peaks = format!("{shared}/carma/traces/philly_t1_60.csv");
    let more_peaks = format!("{shared}/carma/traces/philly_mix_90.csv");
    let (ok, _, err) = carma(&[
        "train",
        "--data",
        &format!("{shared}/gpumemnet"),
        "--trees",
        "3",
        "--out",
        out.path().to_str().unwrap(),
        "--real-jobs",
        &workloads(),
        "--peaks",
        &peaks,
        "--peaks",
        &more_peaks,
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(out.path().join("memory-ensemble.json")).unwrap();
    let models: serde_json::Value = serde_json::from_str(&text).unwrap();
    for family in models["families"].as_array().unwrap() {
        if family["family"] == "cnn" {
            assert_eq!(
                family["analytic_floor"], 0.0,
                "mnist: the formula is within 2 GiB"
            );
            assert_eq!(
                family["analytic_floor_batch_norm"], 0.0,
                "resnet, mobilenet"
            );
        }
    }
    // Without real jobs, cross-validation shows the floors the GPUMemNet
    // rows give, per group.
    let gpumemnet = format!("{shared}/gpumemnet");
    let (ok, printed, err) = carma(&["train", "--data", &gpumemnet, "--cv", "2", "--trees", "2"]);
    assert!(ok, "{err}");
    assert!(
        printed.contains("batch-norm networks: learned floor"),
        "{printed}"
    );
    let empty = tempfile::tempdir().unwrap();
    let (ok, _, err) = carma(&[
        "train",
        "--data",
        &format!("{shared}/gpumemnet"),
        "--out",
        out.path().to_str().unwrap(),
        "--real-jobs",
        empty.path().to_str().unwrap(),
        "--peaks",
        &peaks,
    ]);
    assert!(
        !ok && err.contains("no job file in the --real-jobs"),
        "{err}"
    );
}

#[test]
fn a_summary_that_is_a_device_or_a_fifo_is_refused_not_read() {
    // Issue 23: `model: /dev/zero` made `carma estimate` (run by Slurm's
    // job_submit hook) read without end; a FIFO blocked it.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.model");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    for model in ["/dev/zero", fifo.to_str().unwrap()] {
        let started = std::time::Instant::now();
        let (_, _, err) = carma(&["estimate", model, "--batch-size", "8"]);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(err.contains("not a regular file"), "{model}: {err}");
    }
}
