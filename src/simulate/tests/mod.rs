//! Simulator tests: small traces worked out by hand, and the exclusive
//! policy checked against an independent first-in first-out computation.
//! The helpers are here; `sharing` holds how tasks share a GPU (speed,
//! memory, readings, MIG), `runs` whole runs (traces, bounds, backfill,
//! pictures), `paper` the comparison with the published results.

use std::path::{Path, PathBuf};

use super::trace::{self, TraceTask};
use super::*;
use crate::gpu::sim::spec::Declared;
use crate::rad::MemoryLine;
use crate::sched::{Policy, RecoveryMode, Rules};

const GIB: u64 = 1024;

mod paper;
mod runs;
mod sharing;

fn task(submit_s: f64, gpus: u32, duration_s: f64, memory_mib: f64, smact: f64) -> TraceTask {
    TraceTask {
        submit_s,
        task: compact_str::format_compact!("t{submit_s}.rad"),
        model: "m".into(),
        class: "medium".into(),
        batch: 32,
        gpus,
        duration_s,
        memory_mib,
        smact_assumed: smact,
        est_horus_mib: memory_mib,
        est_faketensor_mib: memory_mib,
        est_gpumemnet_mib: memory_mib,
    }
}

fn setup(gpus: usize, policy: Policy, estimator: MemoryLine, sharing: Sharing) -> Setup {
    let config = crate::config::Config::load(None).unwrap();
    let mut rules: Rules = config.rules();
    rules.placement.policy = policy;
    let mut model = config.simulate;
    model.sharing = sharing;
    // Worked by hand below: no interference, no fragmentation, and a
    // warm-up of 4 steps 10 s apart from half the peak to all of it.
    model.mps_interference = 0.0;
    model.streams_interference = 0.0;
    model.fragmentation_mib = 0;
    model.warmup_s = 40.0;
    model.warmup_start = 0.5;
    // Tasks join a shared GPU at once, without waiting for the readings
    // to show the one before.
    rules.placement.await_activity_s = crate::wall_time::Seconds::ZERO;
    Setup {
        gpus: vec![Declared::whole(40 * GIB); gpus],
        estimator,
        rules,
        model,
        readings: Readings::Live,
    }
}

fn config_exponent() -> f64 {
    crate::config::Config::load(None)
        .unwrap()
        .simulate
        .power_exponent
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-3
}

/// The exact FIFO schedule of exclusive placement, computed independently:
/// each task starts when it has arrived, the task before it has started,
/// and enough GPUs are free; it then runs alone for its duration.
fn fifo_reference(trace: &[TraceTask], gpus: usize) -> (f64, f64, f64) {
    let mut free_at = vec![0.0f64; gpus];
    let mut last_start = 0.0f64;
    let (mut end, mut wait, mut jct) = (0.0f64, 0.0, 0.0);
    for t in trace {
        free_at.sort_by(f64::total_cmp);
        let n = t.gpus as usize;
        let start = t.submit_s.max(last_start).max(free_at[n - 1]);
        for f in free_at.iter_mut().take(n) {
            *f = start + t.duration_s;
        }
        last_start = start;
        end = end.max(start + t.duration_s);
        wait += start - t.submit_s;
        jct += start + t.duration_s - t.submit_s;
    }
    let k = trace.len() as f64;
    (end, wait / k, jct / k)
}

fn shared_trace(name: &str) -> Vec<TraceTask> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data/carma/traces")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: the tests read the shared data set",
        path.display()
    );
    trace::load(&path).unwrap()
}
