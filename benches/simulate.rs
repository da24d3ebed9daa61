//! Simulating synthetic traces on 64 GPUs.
//!
//! `cargo bench --bench simulate`. The traces are generated with a fixed
//! seed: tasks arrive as a Poisson process, run 10 minutes to 3 hours,
//! need 1-30 GiB, 10% of them two GPUs.
//!
//! - 100,000 tasks arriving about every 25 s, which keeps a queue most of
//!   the time on 64 x 40 GiB GPUs, through the library, under three
//!   policies;
//! - 1,000,000 tasks at 0.9 of the GPUs' capacity (were each task given
//!   whole GPUs), written to a CSV file and replayed by the `carma
//!   simulate` command as a user runs it: its time and peak memory.

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use carma::config::Config;
use carma::gpu::sim::spec::Declared;
use carma::rad::MemoryLine;
use carma::sched::Policy;
use carma::simulate::{self, Setup, trace::TraceTask};

const TASKS: usize = 100_000;
const GPUS: usize = 64;
const MILLION: usize = 1_000_000;
/// Mean GPU-seconds of a synthetic task: 1.1 GPUs for 600 + 10,200 / 2 s.
const MEAN_GPU_SECONDS: f64 = 1.1 * 5700.0;

/// A small deterministic generator (SplitMix64): the bench needs
/// reproducible numbers, not statistical quality.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `tasks` tasks arriving `mean_gap_s` apart on average, made as they are
/// asked for.
fn synthetic_trace(tasks: usize, mean_gap_s: f64) -> impl Iterator<Item = TraceTask> {
    let mut rng = SplitMix(2026);
    let mut t = 0.0;
    let classes = [("light", 0.3), ("medium", 0.7), ("heavy", 0.85)];
    (0..tasks).map(move |i| {
        t += -mean_gap_s * (1.0 - rng.next()).ln();
        let (class, smact) = classes[(rng.next() * 3.0) as usize % 3];
        let memory = 1024.0 + rng.next() * 29.0 * 1024.0;
        TraceTask {
            submit_s: t.floor(),
            task: compact_str::format_compact!("job{i}.rad"),
            model: "synthetic".into(),
            class: class.into(),
            batch: 32,
            gpus: if rng.next() < 0.1 { 2 } else { 1 },
            duration_s: (600.0 + rng.next() * 10_200.0).floor(),
            memory_mib: memory.floor(),
            smact_assumed: smact,
            est_horus_mib: (memory * (0.6 + rng.next())).floor(),
            est_faketensor_mib: (memory * 0.8).floor(),
            est_gpumemnet_mib: ((memory / 8192.0).ceil() * 8192.0).min(40000.0),
        }
    })
}

fn main() {
    // First, while this process is small: see `command`.
    command();
    library();
}

fn library() {
    let trace: Vec<TraceTask> = synthetic_trace(TASKS, 25.0).collect();
    // To profile a run of it alone (`carma simulate --trace`, under
    // callgrind): `CARMA_BENCH_TRACE=queued.csv cargo bench --bench simulate`.
    if let Some(path) = std::env::var_os("CARMA_BENCH_TRACE") {
        write_trace(std::path::Path::new(&path), trace.iter().cloned());
    }
    let config = Config::load(None).expect("built-in config");
    for (policy, estimator, backfill) in [
        (Policy::Exclusive, MemoryLine::Oracle, false),
        (Policy::Magm, MemoryLine::Oracle, false),
        (Policy::BestFit, MemoryLine::Horus, false),
        (Policy::Exclusive, MemoryLine::Oracle, true),
        (Policy::Magm, MemoryLine::Oracle, true),
    ] {
        let mut rules = config.rules();
        rules.placement.policy = policy;
        rules.queue.backfill = backfill;
        let setup = Setup {
            gpus: vec![Declared::whole(40 * 1024); GPUS],
            estimator,
            rules,
            model: config.simulate.clone(),
            readings: carma::simulate::Readings::Live,
        };
        let start = Instant::now();
        let m = simulate::run(&trace, &setup);
        let took = start.elapsed();
        println!(
            "{TASKS} tasks, {GPUS} GPUs, {policy}/{estimator:?}{}: simulated in {:.3} s \
             (total {:.0} s, lower bound {:.0} s, {} OOM crashes)",
            if backfill { ", backfill" } else { "" },
            took.as_secs_f64(),
            m.total_time_s,
            m.lower_bound_s.unwrap_or(0.0),
            m.oom_crashes
        );
    }
}

/// The million-task trace through `carma simulate`, timed as a whole
/// process, with the peak resident memory the kernel counted for it (the
/// trace is written as it is made: a child forked from a large parent
/// would count the parent's pages).
fn command() {
    let gap = MEAN_GPU_SECONDS / (0.9 * GPUS as f64);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("million.csv");
    write_trace(&path, synthetic_trace(MILLION, gap));
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_carma"))
        .args([
            "simulate",
            "--gpus",
            &format!("{GPUS}x40GiB"),
            "--json",
            "--trace",
        ])
        .arg(&path)
        .output()
        .expect("carma simulate runs");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "carma simulate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peak_kib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage")
        .max_rss();
    println!(
        "carma simulate, {MILLION} tasks arriving every {gap:.0} s on average (0.9 load), \
         {GPUS} GPUs, built-in configuration: {:.2} s, peak RSS {} MB",
        took.as_secs_f64(),
        peak_kib / 1024
    );
}

/// Writes `tasks` as a trace CSV at `path` (the format of
/// `data/carma/traces`), row by row.
fn write_trace(path: &std::path::Path, tasks: impl Iterator<Item = TraceTask>) {
    let mut csv = std::io::BufWriter::new(std::fs::File::create(path).expect("trace file"));
    writeln!(
        csv,
        "submit_s,task,model,class,batch,gpus,duration_s,memory_mib,smact_assumed,\
         est_horus_mib,est_faketensor_mib,est_gpumemnet_mib"
    )
    .expect("a trace row");
    for t in tasks {
        writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            t.submit_s,
            t.task,
            t.model,
            t.class,
            t.batch,
            t.gpus,
            t.duration_s,
            t.memory_mib,
            t.smact_assumed,
            t.est_horus_mib,
            t.est_faketensor_mib,
            t.est_gpumemnet_mib
        )
        .expect("a trace row");
    }
    csv.flush().expect("flushed");
}
