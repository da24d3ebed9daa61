// Each benchmark uses part of what is shared.
#![allow(dead_code)]

//! What the live-daemon benchmarks share: a daemon on simulated GPUs in a
//! temporary directory, and the clock a job's first line is stamped with.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The carma binary the benchmarks run: this build's, or another given in
/// `CARMA_BENCH_BIN`, to compare two builds in the same minutes
/// (`CARMA_BENCH_BIN=/tmp/old/carma cargo bench --bench dispatch`).
pub fn carma() -> String {
    std::env::var("CARMA_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_carma").to_owned())
}

/// A daemon killed when the benchmark is done with it (its jobs are
/// trivial and end on their own).
pub struct Daemon {
    pub child: Child,
    pub log: PathBuf,
    spool: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A killed daemon leaves its jobs' cgroup behind.
        carma::cgroup::clear_for(&self.spool);
    }
}

/// Starts `carma daemon` on simulated `gpus` with the spool `dir/spool`,
/// once its status file says it serves.
pub fn start(dir: &Path, gpus: &str) -> Daemon {
    let daemon = spawn(dir, gpus);
    let status = dir.join("spool/status.json");
    while !status.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    daemon
}

/// Starts `carma daemon` as [`start`] does, without waiting for it.
pub fn spawn(dir: &Path, gpus: &str) -> Daemon {
    let config = dir.join("carma.toml");
    fs::write(
        &config,
        "[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n",
    )
    .unwrap();
    let log = dir.join("daemon.log");
    let child = Command::new(carma())
        .env("CARMA_CONFIG", &config)
        .args(["daemon", "--simulate-gpus", gpus, "--spool"])
        .arg(dir.join("spool"))
        .stderr(fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Daemon {
        child,
        log,
        spool: dir.join("spool"),
    }
}

/// Unix time in seconds, as `date +%s.%N` prints it inside a job.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The Unix time a job wrote into `marker` (`date +%s.%N > marker`), once
/// it has.
pub fn stamped(marker: &Path, what: &str) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(t) = fs::read_to_string(marker)
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
        {
            return t;
        }
        assert!(Instant::now() < deadline, "{what} never started");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The `p`th percentile of sorted `values`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
