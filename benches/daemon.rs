//! The live daemon's speed, on simulated GPUs, with the release binary.
//!
//! `cargo bench --bench daemon`. (Submit → first line, beside
//! task-spooler, is `cargo bench --bench dispatch`.) The figures:
//! - 10,000 `.rad` files moved into `pending/` at once until the daemon has
//!   queued them all (counted from its log);
//! - the daemon's peak resident memory after that (VmHWM).

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{CARMA, start};

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
        let _ = Command::new(CARMA)
            .env("CARMA_CONFIG", dir.path().join("carma.toml"))
            .args(["cancel", "--spool"])
            .arg(&spool)
            .args([hold, "--wait", "5"])
            .output();
    }
}

fn main() {
    ten_thousand_drops();
}
