//! The queue's rules end to end: time limits (and, as they come, holds,
//! priorities, dependencies, per-user limits). Each test is a user story
//! told to a real daemon on simulated GPUs.

mod common;

use std::fs;

use common::Spool;

#[test]
fn a_job_past_its_time_limit_is_stopped_even_while_the_daemon_is_down() {
    // The job ignores SIGTERM, so only the SIGKILL after the grace ends
    // it. The daemon is killed while the job runs: the job's supervisor
    // keeps the time, and the restarted daemon files the task in failed/
    // with the reason "time limit".
    let mut spool = Spool::with_config("1x40GiB", "[daemon]\ntime_limit_grace_s = 0.5\n");
    spool.start_daemon();
    let name = spool.submit(
        "stubborn.rad",
        "name: stubborn\nmemory: 1G\ntime: 2s\ntrap '' TERM\nsleep 60\n",
    );
    spool.wait_count("running", 1, 10.0);
    spool.stop_daemon("KILL");
    let run = spool.root.join("running").join(&name).join("run-1");
    spool.wait_for("the supervisor to record the end", 20.0, || {
        run.join("exit.json").exists()
    });
    let exit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(run.join("exit.json")).unwrap()).unwrap();
    assert_eq!(exit["timed_out"], true, "{exit}");
    assert_eq!(exit["signal"], 9, "SIGTERM was ignored, so SIGKILL: {exit}");
    spool.start_daemon();
    spool.wait_count("failed", 1, 10.0);
    let (_, dir) = spool.find(&name).unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert_eq!(
        reason.trim(),
        "time limit: stopped after its 2s of wall time"
    );
}

#[test]
fn a_job_asking_for_more_than_the_maximum_time_is_refused() {
    let mut spool = Spool::with_config("1x40GiB", "[queue]\nmax_time_s = 3600\n");
    spool.start_daemon();
    let name = spool.submit("long.rad", "name: long\nmemory: 1G\ntime: 2h\ntrue\n");
    spool.wait_count("failed", 1, 10.0);
    let (_, dir) = spool.find(&name).unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert!(
        reason.contains("time: 2h is more than the maximum of 1h"),
        "{reason}"
    );
}
