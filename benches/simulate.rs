//! Simulating a synthetic 100,000-task trace on 64 GPUs.
//!
//! `cargo bench --bench simulate`. The trace is generated with a fixed seed:
//! tasks arrive about every 25 s (a Poisson process), run 10 minutes to
//! 3 hours, need 1-30 GiB, 10% of them two GPUs — enough load to keep a
//! queue most of the time on 64 x 40 GiB GPUs.

use std::time::Instant;

use carma::config::Config;
use carma::gpu::sim::spec::Declared;
use carma::rad::MemoryLine;
use carma::sched::Policy;
use carma::simulate::{self, Setup, trace::TraceTask};

const TASKS: usize = 100_000;
const GPUS: usize = 64;

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

fn synthetic_trace() -> Vec<TraceTask> {
    let mut rng = SplitMix(2026);
    let mut t = 0.0;
    let classes = [("light", 0.3), ("medium", 0.7), ("heavy", 0.85)];
    (0..TASKS)
        .map(|i| {
            t += -25.0 * (1.0 - rng.next()).ln();
            let (class, smact) = classes[(rng.next() * 3.0) as usize % 3];
            let memory = 1024.0 + rng.next() * 29.0 * 1024.0;
            TraceTask {
                submit_s: t.floor(),
                task: format!("job{i}.rad"),
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
        .collect()
}

fn main() {
    let trace = synthetic_trace();
    let config = Config::load(None).expect("built-in config");
    for (policy, estimator) in [
        (Policy::Exclusive, MemoryLine::Oracle),
        (Policy::Magm, MemoryLine::Oracle),
        (Policy::BestFit, MemoryLine::Horus),
    ] {
        let mut rules = config.rules();
        rules.placement.policy = policy;
        let setup = Setup {
            gpus: vec![Declared::whole(40 * 1024); GPUS],
            estimator,
            rules,
            model: config.simulate.clone(),
        };
        let start = Instant::now();
        let m = simulate::run(&trace, &setup);
        let took = start.elapsed();
        println!(
            "{TASKS} tasks, {GPUS} GPUs, {policy}/{estimator:?}: simulated in {:.3} s \
             (total {:.0} s, lower bound {:.0} s, {} OOM crashes)",
            took.as_secs_f64(),
            m.total_time_s,
            m.lower_bound_s.unwrap_or(0.0),
            m.oom_crashes
        );
    }
}
