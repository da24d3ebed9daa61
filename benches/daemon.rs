//! The live daemon's speed, on simulated GPUs, with the release binary.
//!
//! `cargo bench --bench daemon`. Three figures:
//! - latency from `carma submit` to the job's first script line on an idle
//!   GPU (the submit process's start to the line's own timestamp), p50 and
//!   p99 over 200 jobs;
//! - 10,000 `.rad` files moved into `pending/` at once until the daemon has
//!   queued them all (counted from its log);
//! - the daemon's peak resident memory after that (VmHWM).

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CARMA: &str = env!("CARGO_BIN_EXE_carma");

struct Daemon {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, gpus: &str) -> Daemon {
    let config = dir.join("carma.toml");
    fs::write(
        &config,
        "[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n",
    )
    .unwrap();
    let log = dir.join("daemon.log");
    let child = Command::new(CARMA)
        .env("CARMA_CONFIG", &config)
        .args(["daemon", "--simulate-gpus", gpus, "--spool"])
        .arg(dir.join("spool"))
        .stderr(fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let status = dir.join("spool/status.json");
    while !status.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    Daemon { child, log }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn submit_latency() {
    let dir = tempfile::tempdir().unwrap();
    let _daemon = start(dir.path(), "1x40GiB");
    let mut latencies = Vec::new();
    for i in 0..200 {
        let marker = dir.path().join(format!("first-line-{i}"));
        let rad = dir.path().join(format!("job{i}.rad"));
        fs::write(
            &rad,
            format!("memory: 1G\ndate +%s.%N > {}\n", marker.display()),
        )
        .unwrap();
        let before = unix_now();
        let status = Command::new(CARMA)
            .args(["submit", "--spool"])
            .arg(dir.path().join("spool"))
            .arg(&rad)
            .stdout(Stdio::null())
            .env("CARMA_CONFIG", dir.path().join("carma.toml"))
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        let first_line = loop {
            if let Some(t) = fs::read_to_string(&marker)
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok())
            {
                break t;
            }
            assert!(Instant::now() < deadline, "job {i} never started");
            std::thread::sleep(Duration::from_millis(1));
        };
        latencies.push(first_line - before);
        // Let the job finish so the GPU is idle again for the next one.
        let done = dir.path().join("spool/done");
        while fs::read_dir(&done).unwrap().count() <= i {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize] * 1e3;
    println!(
        "submit -> first script line, idle simulated GPU: p50 {:.1} ms, p99 {:.1} ms ({} jobs)",
        pct(0.5),
        pct(0.99),
        latencies.len()
    );
}

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
    submit_latency();
    ten_thousand_drops();
}
