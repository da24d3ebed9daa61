//! The research prototype's published workloads, run by the daemon as the
//! prototype ran them: line 7 ignored (the server's policy places every
//! job), the operator's choice of memory line, and a summary whose name
//! differs in case used rather than refused.
//!
//! The files are the real ones from the shared data directory. Only their
//! environment and command lines are replaced (by `source /dev/null` and a
//! short sleep): the scripts they name exist on the prototype's server, not
//! here.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::Spool;

fn workloads() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/workloads");
    assert!(dir.is_dir(), "missing {}", dir.display());
    dir
}

/// A published workload with lines 2 and 3 replaced so that it runs here
/// for `secs` seconds.
fn runnable(text: &str, secs: f64) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[1] = "source /dev/null".into();
    lines[2] = format!("sleep {secs}");
    lines.join("\n")
}

/// Writes every published workload (made runnable) and its summary into
/// the test's job directory; returns the `.rad` paths.
fn stage_all(spool: &Spool, secs: f64) -> Vec<PathBuf> {
    let mut rads = Vec::new();
    for entry in fs::read_dir(workloads()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let text = fs::read_to_string(&path).unwrap();
        if name.ends_with(".rad") {
            rads.push(spool.job(&name, &runnable(&text, secs)));
        } else {
            spool.job(&name, &text);
        }
    }
    rads.sort();
    rads
}

fn submit(spool: &Spool, rad: &Path) {
    let out = spool.carma().arg("submit").arg(rad).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
}

#[test]
fn every_published_workload_is_accepted_and_placed_by_the_server_policy() {
    // Four A100-40GB, as in the paper. Seven GPUs' worth of jobs (xlnet
    // takes two): some must share, which line 7's `exclusive` would forbid.
    // The staged jobs hold no GPU memory, so a GPU would wait 30 s for
    // each to show (placement.await_activity_s) and they end first.
    let mut spool = Spool::with_config(
        "4x40000MiB",
        "[placement]\npolicy = \"best-fit\"\nawait_activity_s = 0\n",
    );
    spool.start_daemon();
    let rads = stage_all(&spool, 3.0);
    for rad in &rads {
        submit(&spool, rad);
    }
    spool.wait_count("done", rads.len(), 60.0);
    assert!(spool.tasks("failed").is_empty());
    let log = spool.daemon_log();
    for rad in &rads {
        let stem = rad.file_stem().unwrap().to_str().unwrap();
        assert!(
            log.contains(&format!("-{stem}: estimate ")),
            "{stem} estimated\n{log}"
        );
    }
    assert!(
        log.contains("from declared (legacy line 9, oracle)"),
        "{log}"
    );
    assert!(log.contains("best-fit: GPU"), "some job collocated\n{log}");
    assert!(!log.contains("asked for exclusive"), "{log}");
}

#[test]
fn two_small_legacy_jobs_share_one_gpu() {
    // The staged jobs hold no GPU memory: without await_activity_s = 0 the
    // GPU would wait 30 s to see the first before it took the second.
    let mut spool = Spool::with_config("40000MiB", "[placement]\nawait_activity_s = 0\n");
    spool.start_daemon();
    let rads = stage_all(&spool, 4.0);
    let small: Vec<&PathBuf> = rads
        .iter()
        .filter(|r| r.ends_with("mnist_train.rad") || r.ends_with("mobilenet_cifar100_20e_1.rad"))
        .collect();
    assert_eq!(small.len(), 2);
    for rad in small {
        submit(&spool, rad);
    }
    spool.wait_count("running", 2, 20.0);
    spool.wait_count("done", 2, 30.0);
}

#[test]
fn line_7_is_obeyed_when_the_operator_says_so() {
    let mut spool = Spool::with_config("40000MiB", "[legacy]\nhonour_policy_line = true\n");
    spool.start_daemon();
    let rads = stage_all(&spool, 2.0);
    for rad in rads
        .iter()
        .filter(|r| r.ends_with("mnist_train.rad") || r.ends_with("mobilenet_cifar100_20e_1.rad"))
    {
        submit(&spool, rad);
    }
    spool.wait_count("running", 1, 20.0);
    spool.wait_for("the second job to wait for an idle GPU", 10.0, || {
        spool.tasks("pending").len() == 1
    });
    assert_eq!(spool.tasks("running").len(), 1, "never side by side");
    spool.wait_count("done", 2, 30.0);
    assert!(spool.daemon_log().contains("asked for exclusive"));
}

#[test]
fn the_operator_picks_the_memory_line_and_a_miscased_summary_is_used() {
    let mut spool = Spool::with_config("40000MiB", "[legacy]\nmemory_line = \"gpumemnet\"\n");
    spool.start_daemon();
    let rads = stage_all(&spool, 0.2);
    // The published name differs from the file on disk only in case.
    let resnet = rads.iter().find(|r| r.ends_with("resnet.rad")).unwrap();
    let dir = resnet.parent().unwrap();
    fs::rename(dir.join("resnet50_32.model"), dir.join("ResNet50_32.model")).unwrap();
    let out = spool.carma().arg("submit").arg(resnet).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("using `ResNet50_32.model`"),
        "{}",
        common::stderr(&out)
    );
    spool.wait_count("done", 1, 20.0);
    let log = spool.daemon_log();
    assert!(
        log.contains("estimate 16000 MiB (15.6GiB) from declared (legacy line 12, gpumemnet)"),
        "{log}"
    );
    assert!(
        log.contains("; estimate 15.6GiB from declared: legacy line 12, gpumemnet"),
        "the placement line names the estimate\n{log}"
    );
    let (_, task) = spool.find("-resnet").unwrap();
    assert!(task.join("job/ResNet50_32.model").is_file());
}
