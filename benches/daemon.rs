//! The live daemon's speed, on simulated GPUs, with the release binary.
//!
//! `cargo bench --bench daemon`. (Submit → first line, beside
//! task-spooler, is `cargo bench --bench dispatch`.) The figures:
//! - 10,000 `.rad` files moved into `pending/` at once until the daemon has
//!   queued them all (counted from its log);
//! - the daemon's peak resident memory after that (VmHWM);
//! - a start (until it serves) with 100,000 tasks in `done/`, each
//!   with a peak for the history: the first after the history was lost
//!   (every record read), then an ordinary one.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{carma, spawn, start};

fn ten_thousand_drops() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = start(dir.path(), "2x40GiB");
    // Two long jobs hold both GPUs so the 10,000 stay queued.
    let spool = dir.path().join("spool");
    for i in 0..2 {
        fs::write(
            spool.join(format!("pending/hold{i}.rad")),
            "memory: whole\nsleep 600\n",
        )
        .unwrap();
    }
    let log_lines = |pattern: &str| {
        BufReader::new(fs::File::open(&daemon.log).unwrap())
            .lines()
            .map_while(Result::ok)
            .filter(|l| l.contains(pattern))
            .count()
    };
    while log_lines(": run 1 on GPU") < 2 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let staged = dir.path().join("staged");
    fs::create_dir(&staged).unwrap();
    for i in 0..10_000 {
        fs::write(
            staged.join(format!("job{i:05}.rad")),
            format!("name: job{i}\nmemory: whole\necho {i}\n"),
        )
        .unwrap();
    }
    let before_queued = log_lines("queued in pending");
    let start = Instant::now();
    for i in 0..10_000 {
        let name = format!("job{i:05}.rad");
        fs::rename(staged.join(&name), spool.join("pending").join(&name)).unwrap();
    }
    let dropped = start.elapsed();
    while log_lines("queued in pending") < before_queued + 10_000 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let queued = start.elapsed();
    let status = fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).unwrap();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("VmHWM: ?")
        .to_string();
    println!(
        "10,000 .rad files moved into pending/ in {:.2} s; all queued after {:.2} s; daemon peak RSS {}",
        dropped.as_secs_f64(),
        queued.as_secs_f64(),
        hwm.trim_start_matches("VmHWM:").trim()
    );
    // Jobs outlive their daemon by design: the two holding jobs are
    // cancelled, not left running after the benchmark.
    for hold in ["hold0", "hold1"] {
        let _ = Command::new(carma())
            .env("CARMA_CONFIG", dir.path().join("carma.toml"))
            .args(["cancel", "--spool"])
            .arg(&spool)
            .args([hold, "--wait", "5"])
            .output();
    }
}

/// The time from starting a daemon on `dir`'s spool until it serves (its
/// log says so, after it has taken in the spool's state).
fn start_time(dir: &std::path::Path) -> (f64, common::Daemon) {
    let began = Instant::now();
    let daemon = spawn(dir, "1x40GiB");
    while !fs::read_to_string(&daemon.log).is_ok_and(|log| log.contains(" serving ")) {
        std::thread::sleep(Duration::from_millis(2));
    }
    (began.elapsed().as_secs_f64(), daemon)
}

fn hundred_thousand_ended() {
    const ENDED: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool");
    let daemon = start(dir.path(), "1x40GiB");
    fs::write(spool.join("pending/one.rad"), "memory: 1G\ntrue\n").unwrap();
    let done = spool.join("done");
    let first = loop {
        if let Some(entry) = fs::read_dir(&done).unwrap().flatten().next() {
            break entry.path();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(daemon);
    // Its record, as 100,000 tasks of 100 jobs that each used memory.
    let mut record: serde_json::Value =
        serde_json::from_slice(&fs::read(first.join("task.json")).unwrap()).unwrap();
    for seq in 2..=ENDED + 1 {
        record["peak_mib"] = (1000 + seq % 7).into();
        record["fingerprint"] = serde_json::json!({
            "command": format!("python train.py --job {}", seq % 100),
            "summary_digest": null,
            "batch_size": 32,
        });
        let task = done.join(format!("{seq:06}-job"));
        fs::create_dir(&task).unwrap();
        fs::write(task.join("task.json"), serde_json::to_vec(&record).unwrap()).unwrap();
    }
    let _ = fs::remove_dir_all(spool.join("history"));
    let (lost, daemon) = start_time(dir.path());
    drop(daemon);
    let (ordinary, daemon) = start_time(dir.path());
    drop(daemon);
    fs::remove_dir_all(&done).unwrap();
    fs::create_dir(&done).unwrap();
    let (empty, _daemon) = start_time(dir.path());
    println!(
        "start with {ENDED} tasks in done/: {lost:.2} s with the history lost (every record \
         read), {ordinary:.2} s after that ({empty:.2} s with done/ empty)"
    );
}

fn main() {
    // The drops first: the start benchmark frees some 200,000 inodes, and
    // ext4 without a journal (as on the development machine) makes every
    // new inode skip those freed in the last minutes (`recently_deleted`
    // in the kernel's inode allocator, 60-70% of the claims' time in
    // `perf` when they ran second).
    ten_thousand_drops();
    hundred_thousand_ended();
}
