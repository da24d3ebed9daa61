//! Replaying a trace against a live daemon: `carma replay` writes the jobs
//! and a staggered submission script; running the script feeds the daemon.

mod common;

use std::fs;
use std::process::Command;

use common::{CARMA, Spool, stderr};

const TRACE: &str = "\
submit_s,task,model,class,batch,gpus,duration_s,memory_mib,smact_assumed,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib
0,bert.rad,bert,heavy,32,1,40,19828,0.85,17457,40000,32000
10,mnist.rad,mnist,light,32,1,20,1776,0.3,1115,38,8000
15,pair.rad,xlnet,heavy,8,2,30,9192,0.85,3662,40000,16000
";

#[test]
fn a_replayed_trace_runs_to_the_end() {
    let mut spool = Spool::new("2x40GiB");
    let trace = spool.dir.path().join("mini.csv");
    fs::write(&trace, TRACE).unwrap();
    let jobs = spool.dir.path().join("jobs");
    let out = Command::new(CARMA)
        .args([
            "replay",
            "--time-scale",
            "0.02",
            "--estimator",
            "faketensor",
            "--trace",
        ])
        .arg(&trace)
        .arg("--jobs")
        .arg(&jobs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let script = String::from_utf8(out.stdout).unwrap();
    let sleeps: Vec<&str> = script
        .lines()
        .filter(|l| l.starts_with("sleep "))
        .map(|l| l.split(';').next().unwrap())
        .collect();
    assert_eq!(sleeps, ["sleep 0.000", "sleep 0.200", "sleep 0.100"]);
    let bert = fs::read_to_string(jobs.join("001-bert.rad")).unwrap();
    assert!(
        bert.contains("memory: whole\n"),
        "faketensor said 40000: {bert}"
    );
    assert!(
        bert.contains("fake-train --mem 19828M --secs 0.800 --smact 0.85"),
        "{bert}"
    );
    let check = Command::new(CARMA)
        .arg("check")
        .args(fs::read_dir(&jobs).unwrap().map(|e| e.unwrap().path()))
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", stderr(&check));

    spool.start_daemon();
    let status = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("CARMA_SPOOL", &spool.root)
        .env("CARMA_CONFIG", &spool.config)
        .status()
        .unwrap();
    assert!(status.success());
    spool.wait_count("done", 3, 30.0);
    let report = spool.carma().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["tasks"], 3);
    assert_eq!(report["oom_crashes"], 0);
    assert!(report["total_time_s"].as_f64().unwrap() > 0.8);
    assert!(report["lower_bound_s"].is_null());
}
