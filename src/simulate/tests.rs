//! Simulator tests: small traces worked out by hand, and the exclusive
//! policy checked against an independent first-in first-out computation.

use std::path::{Path, PathBuf};

use super::trace::{self, TraceTask};
use super::*;
use crate::gpu::sim::spec::Declared;
use crate::rad::MemoryLine;
use crate::sched::{Policy, RecoveryMode, Rules};

const GIB: u64 = 1024;

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

#[test]
fn exclusive_is_first_in_first_out_with_head_of_line_blocking() {
    // Two GPUs. A (t=0, 1 GPU, 100 s) starts at once on GPU 0. B (t=0,
    // 2 GPUs, 50 s) must wait for both: it starts at 100, ends at 150. C
    // (t=10, 30 s) and D (t=20, 10 s) queue behind B although GPU 1 is
    // free (head-of-line blocking): they start at 150 and end at 180 and
    // 160. Total 180 s. Waits 0, 100, 140, 130 → 92.5; executions 100,
    // 50, 30, 10 → 47.5; JCTs 100, 150, 170, 140 → 140.
    let trace = [
        task(0.0, 1, 100.0, 1000.0, 0.3),
        task(0.0, 2, 50.0, 1000.0, 0.3),
        task(10.0, 1, 30.0, 1000.0, 0.3),
        task(20.0, 1, 10.0, 1000.0, 0.3),
    ];
    let m = run(
        &trace,
        &setup(2, Policy::Exclusive, MemoryLine::Oracle, Sharing::Mps),
    );
    assert_eq!(m.tasks, 4);
    assert!(close(m.total_time_s, 180.0), "{m:?}");
    assert!(close(m.avg_wait_s, 92.5), "{m:?}");
    assert!(close(m.avg_exec_s, 47.5), "{m:?}");
    assert!(close(m.avg_jct_s, 140.0), "{m:?}");
    assert_eq!(m.oom_crashes, 0);
    // Energy: both GPUs idle (55 W) except when running at SMACT 0.3,
    // 345 W x 0.3^exponent above idle. Busy GPU-seconds: A 100, B 2 x 50,
    // C 30, D 10 = 240 of 360.
    let above_idle = 345.0 * 0.3f64.powf(config_exponent());
    assert!(
        close(m.energy_mj, (360.0 * 55.0 + 240.0 * above_idle) / 1e6),
        "{m:?}"
    );
    assert!(close(m.mean_utilization, 240.0 * 0.3 / 360.0), "{m:?}");
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

#[test]
fn exclusive_matches_the_fifo_reference_on_the_real_traces() {
    for name in ["philly_mix_90.csv", "philly_t1_60.csv"] {
        let trace = shared_trace(name);
        let m = run(
            &trace,
            &setup(4, Policy::Exclusive, MemoryLine::Oracle, Sharing::Mps),
        );
        let (total, wait, jct) = fifo_reference(&trace, 4);
        assert!(
            close(m.total_time_s, total),
            "{name}: {} vs {total}",
            m.total_time_s
        );
        assert!(
            close(m.avg_wait_s, wait),
            "{name}: {} vs {wait}",
            m.avg_wait_s
        );
        assert!(close(m.avg_jct_s, jct), "{name}: {} vs {jct}", m.avg_jct_s);
    }
}

#[test]
fn mps_slows_collocated_tasks_by_their_summed_smact() {
    // One GPU, two 100 s tasks at SMACT 0.7 from t=0. MAGM puts both on
    // it (SMACT window 0.7 <= 0.8 when the second arrives). Together they
    // ask for 1.4, so each runs at 1/1.4: both end at 140 s. The GPU is at
    // SMACT 1.0 (400 W) the whole time: 56 kJ.
    let trace = [
        task(0.0, 1, 100.0, 1000.0, 0.7),
        task(0.0, 1, 100.0, 1000.0, 0.7),
    ];
    let m = run(
        &trace,
        &setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps),
    );
    assert!(close(m.total_time_s, 140.0), "{m:?}");
    assert!(close(m.avg_wait_s, 0.0), "{m:?}");
    assert!(close(m.energy_mj, 0.056), "{m:?}");
    assert!(close(m.mean_utilization, 1.0), "{m:?}");
}

#[test]
fn neighbours_interfere_in_proportion_to_their_activity() {
    // The same two tasks with interference 0.75 (time-sliced) or 0.05
    // (MPS): each runs at 1/1.4 / (1 + k × (1 - 0.7) × 0.7), so both end at
    // 140 × (1 + 0.21 k): 162.05 s and 141.47 s. Time-sliced, the GPU is
    // busy all along (switching contexts slows the tasks, not the SMs);
    // under MPS it reads the tasks' activity at their pace, 1 / 1.0105.
    let trace = [
        task(0.0, 1, 100.0, 1000.0, 0.7),
        task(0.0, 1, 100.0, 1000.0, 0.7),
    ];
    for (sharing, k, end, busy) in [
        (Sharing::Streams, 0.75, 162.05, 1.0),
        (Sharing::Mps, 0.05, 141.47, 1.0 / 1.0105),
    ] {
        let mut s = setup(1, Policy::Magm, MemoryLine::Oracle, sharing);
        s.model.streams_interference = 0.75;
        s.model.mps_interference = 0.05;
        let m = run(&trace, &s);
        assert!(close(m.total_time_s, end), "{k}: {m:?}");
        assert!(close(m.mean_utilization, busy), "{k}: {m:?}");
    }
}

#[test]
fn rates_change_when_a_neighbour_leaves() {
    // One GPU under MPS. A (100 s, 0.6) and B (30 s, 0.6) start at 0:
    // sum 1.2, each at rate 1/1.2. B's 30 s of work end at 36 s; A has
    // done 30 s by then and runs alone for its last 70 s: ends at 106 s.
    let trace = [
        task(0.0, 1, 100.0, 1000.0, 0.6),
        task(0.0, 1, 30.0, 1000.0, 0.6),
    ];
    let mut s = setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps);
    s.rules.placement.smact_cap = 1.0;
    let m = run(&trace, &s);
    assert!(close(m.total_time_s, 106.0), "{m:?}");
    assert!(close(m.avg_exec_s, (106.0 + 36.0) / 2.0), "{m:?}");
    // Energy ends with A at 106 s, not at 120 s, where the finish booked
    // for it before B left still stands: 36 s at SMACT 1.0 (400 W), then
    // 70 s at 0.6 (14 s more at 55 W idle would be 770 J).
    let alone = 55.0 + 345.0 * 0.6f64.powf(config_exponent());
    let joules = 36.0 * 400.0 + 70.0 * alone;
    assert!((m.energy_mj * 1e6 - joules).abs() < 1.0, "{m:?}");
}

#[test]
fn the_last_allocator_crashes_and_recovers_on_an_idle_gpu() {
    // One GPU, no estimates (the core asks only 5 GiB free). A (t=0) and
    // B (t=1) both peak at 30 GiB and run 100 s at SMACT 0.3. Both start.
    // Warm-up steps bring each to 15, 20, 25 and 30 GiB, 10 s apart: A at
    // 10, 20, 30, 40 s, B at 11, 21, 31, 41 s. At 21 s they hold 20 + 20 =
    // 40 GiB; at 30 s A asks 5 GiB more and dies of OOM, though B came
    // later: the last allocator is the victim. Recovery is exclusive: A
    // re-runs when B ends at 101 and ends at 201. A: JCT 201, exec 30 +
    // 100 = 130, wait 71. B: JCT 100, exec 100, wait 0.
    let trace = [
        task(0.0, 1, 100.0, 30720.0, 0.3),
        task(1.0, 1, 100.0, 30720.0, 0.3),
    ];
    let m = run(
        &trace,
        &setup(1, Policy::Magm, MemoryLine::None, Sharing::Mps),
    );
    assert_eq!(m.oom_crashes, 1);
    assert!(close(m.total_time_s, 201.0), "{m:?}");
    assert!(close(m.avg_exec_s, 115.0), "{m:?}");
    assert!(close(m.avg_wait_s, 35.5), "{m:?}");
    assert!(close(m.avg_jct_s, 150.5), "{m:?}");
}

#[test]
fn block_readings_show_a_gpu_as_it_was_until_the_block_ends() {
    // One GPU, oracle estimates, no reservation ledger. A (t=0) and B
    // (t=70 s) each peak at 25 GiB. Read live, the GPU shows A's 25 GiB
    // when B arrives: B (25 + 2 GiB) waits for A. Read in 90 s blocks, as
    // the prototype's monitor published them, the last block (t=0) shows
    // an empty GPU: B joins A, and its second warm-up step (25 + 16.7 GiB
    // on 40) kills it at 90 s.
    let trace = [
        task(0.0, 1, 500.0, 25600.0, 0.3),
        task(70.0, 1, 500.0, 25600.0, 0.3),
    ];
    for (readings, crashes) in [(Readings::Live, 0), (Readings::PROTOTYPE, 1)] {
        let mut s = setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps);
        s.rules.placement.reservation_ramp_s = crate::wall_time::Seconds::ZERO;
        s.readings = readings;
        let m = run(&trace, &s);
        assert_eq!(m.oom_crashes, crashes, "{readings:?}: {m:?}");
    }
}

#[test]
fn a_shared_gpu_loses_memory_to_fragmentation() {
    // Two 20 GiB tasks fill a 40 GiB GPU exactly (oracle estimates, no
    // margin). With 1 GiB lost to fragmentation, the second's last step
    // (t=41 s) no longer fits: one OOM, none without.
    let trace = [
        task(0.0, 1, 100.0, 20480.0, 0.3),
        task(1.0, 1, 100.0, 20480.0, 0.3),
    ];
    for (fragmentation_mib, crashes) in [(0, 0), (1024, 1)] {
        let mut s = setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps);
        s.rules.placement.margin_mib = 0;
        s.model.fragmentation_mib = fragmentation_mib;
        let m = run(&trace, &s);
        assert_eq!(m.oom_crashes, crashes, "{fragmentation_mib}: {m:?}");
    }
}

#[test]
fn oracle_estimates_prevent_the_crash() {
    // The same trace with the true need known: B (30 + 2 GiB) cannot join
    // A (30 GiB booked on 40): it waits for A and never crashes.
    let trace = [
        task(0.0, 1, 100.0, 30720.0, 0.3),
        task(1.0, 1, 100.0, 30720.0, 0.3),
    ];
    let m = run(
        &trace,
        &setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps),
    );
    assert_eq!(m.oom_crashes, 0);
    assert!(close(m.total_time_s, 200.0), "{m:?}");
}

#[test]
fn a_task_larger_than_any_gpu_fails_after_its_retries() {
    // 50 GiB on a 40 GiB GPU: 25, 33.3, then 41.7 GiB at 30 s, which
    // does not fit: it OOMs at 30 s on every run (1 + 2 retries) and ends
    // in failed; the run still terminates.
    let trace = [task(0.0, 1, 100.0, 51200.0, 0.3)];
    let mut s = setup(1, Policy::Magm, MemoryLine::None, Sharing::Mps);
    s.rules.recovery.mode = RecoveryMode::Looser;
    let m = run(&trace, &s);
    assert_eq!(m.oom_crashes, 3);
    assert!(close(m.total_time_s, 90.0), "{m:?}");
}

#[test]
fn lower_bound_by_hand() {
    // Two GPUs, MPS. Tasks: (t=0, 100 s, 0.5, 1 GPU), (t=0, 100 s, 0.5,
    // 2 GPUs), (t=50, 10 s, 1.0, 1 GPU). Alone-bound: max(100, 100, 60) =
    // 100. Capacity from t0=0: (50 + 100 + 10) / 2 = 80; from t0=50:
    // 50 + 10 / 2 = 55. Bound = 100, under MPS and time-slicing alike.
    let trace = [
        task(0.0, 1, 100.0, 1.0, 0.5),
        task(0.0, 2, 100.0, 1.0, 0.5),
        task(50.0, 1, 10.0, 1.0, 1.0),
    ];
    assert!(close(lower_bound(&trace, 2), 100.0));
}

#[test]
fn no_policy_beats_the_lower_bound_on_the_real_traces() {
    for name in ["philly_mix_90.csv", "philly_t1_60.csv"] {
        let trace = shared_trace(name);
        for policy in Policy::ALL {
            for estimator in [MemoryLine::Oracle, MemoryLine::Horus, MemoryLine::None] {
                let m = run(&trace, &setup(4, policy, estimator, Sharing::Mps));
                assert_eq!(m.tasks, trace.len());
                assert!(
                    m.total_time_s >= m.lower_bound_s.unwrap() - 1e-6,
                    "{name} {policy} {estimator:?}: {m:?}"
                );
            }
        }
    }
}

#[test]
fn a_trace_read_as_the_run_goes_runs_as_the_whole_trace_does() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/carma/traces/philly_t1_60.csv");
    for policy in [Policy::Magm, Policy::BestFit] {
        let s = setup(4, policy, MemoryLine::Gpumemnet, Sharing::Mps);
        let streamed = run_streamed(
            super::trace::stream(&path).unwrap(),
            &s,
            &mut Columns(MemoryLine::Gpumemnet),
        )
        .unwrap();
        assert_eq!(streamed, run(&super::trace::load(&path).unwrap(), &s));
    }
}

#[test]
fn a_slice_out_of_order_runs_by_submission_time() {
    let trace = shared_trace("philly_mix_90.csv");
    let s = setup(4, Policy::Magm, MemoryLine::Oracle, Sharing::Mps);
    let mut reversed = trace.clone();
    reversed.reverse();
    let (a, b) = (run(&trace, &s), run(&reversed, &s));
    assert_eq!((a.tasks, a.oom_crashes), (b.tasks, b.oom_crashes));
    assert!(close(a.total_time_s, b.total_time_s), "{a:?} {b:?}");
}

#[test]
fn runs_are_reproducible() {
    let trace = shared_trace("philly_mix_90.csv");
    let s = setup(4, Policy::Lug, MemoryLine::Faketensor, Sharing::Mps);
    assert_eq!(run(&trace, &s), run(&trace, &s));
}

#[test]
fn carma_in_the_loop_learns_a_repeated_job_from_history() {
    // The same job twice, the second after the first finished. Its job
    // file says nothing of memory and names no summary: the chain's first
    // answer is "a whole GPU"; the second comes from history, the first
    // run's measured peak (1,000 MiB) plus the minimum margin (256 MiB).
    // A task without a job file is told "unknown".
    let jobs = tempfile::tempdir().unwrap();
    std::fs::write(jobs.path().join("a.rad"), "gpus: 1\npython train.py\n").unwrap();
    let mut first = task(0.0, 1, 10.0, 1000.0, 0.3);
    first.task = "a.rad".into();
    let mut again = task(100.0, 1, 10.0, 1000.0, 0.3);
    again.task = "a.rad".into();
    let stranger = task(200.0, 1, 10.0, 1000.0, 0.3);
    let trace = [first, again, stranger];
    let setup = setup(1, Policy::Magm, MemoryLine::None, Sharing::Mps);
    let settings = crate::config::Config::load(None).unwrap().estimate;
    let mut carma = Carma::new(&trace, jobs.path(), &settings).unwrap();
    let m = run_with(&trace, &setup, &mut carma);
    assert_eq!(m.tasks, 3);
    let q = carma.quality();
    assert_eq!((q.estimated, q.whole_gpu, q.without_job_file), (2, 1, 1));
    assert!(close(q.mean_overestimate_mib, 256.0), "{q:?}");
    assert_eq!(q.under_by_2gib, 0);
}

#[test]
fn a_job_file_that_is_not_a_job_is_an_error_naming_it() {
    let jobs = tempfile::tempdir().unwrap();
    std::fs::write(jobs.path().join("a.rad"), "gpus: two\nrun\n").unwrap();
    let mut t = task(0.0, 1, 10.0, 1000.0, 0.3);
    t.task = "a.rad".into();
    let settings = crate::config::Config::load(None).unwrap().estimate;
    let err = Carma::new(&[t], jobs.path(), &settings).unwrap_err();
    assert!(err.contains("a.rad:1:"), "{err}");
}

#[test]
fn a_task_at_its_time_limit_is_stopped_and_the_next_one_starts() {
    // One GPU, exclusive, a default limit of 30 s. A (100 s) is stopped
    // at 30 s and fails; B (10 s, queued behind it) runs from 30 to 40.
    let trace = [
        task(0.0, 1, 100.0, 1000.0, 0.3),
        task(0.0, 1, 10.0, 1000.0, 0.3),
    ];
    let mut setup = setup(1, Policy::Exclusive, MemoryLine::Oracle, Sharing::Mps);
    setup.rules.queue.default_time_s = crate::wall_time::Seconds::of(30.0);
    let m = run(&trace, &setup);
    assert_eq!(m.failed, 1, "{m:?}");
    assert!(close(m.total_time_s, 40.0), "{m:?}");
    // Only B completed: it waited 30 s and ran 10.
    assert!(close(m.avg_wait_s, 30.0), "{m:?}");
    assert!(close(m.avg_exec_s, 10.0), "{m:?}");
}

#[test]
fn backfill_fills_the_hole_before_a_blocked_head_without_delaying_it() {
    // The trace of the head-of-line test, with backfill: B (2 GPUs) is
    // reserved both GPUs from t=100, when A ends. C (t=10, 30 s) ends by
    // then and runs on GPU 1 from 10 to 40, D (t=20, 10 s) after it from
    // 40 to 50. B still starts at 100 and ends at 150: total 150 s
    // instead of 180; waits 0, 100, 0, 20 → 30 s.
    let trace = [
        task(0.0, 1, 100.0, 1000.0, 0.3),
        task(0.0, 2, 50.0, 1000.0, 0.3),
        task(10.0, 1, 30.0, 1000.0, 0.3),
        task(20.0, 1, 10.0, 1000.0, 0.3),
    ];
    let mut setup = setup(2, Policy::Exclusive, MemoryLine::Oracle, Sharing::Mps);
    setup.rules.queue.backfill = true;
    let m = run(&trace, &setup);
    assert!(close(m.total_time_s, 150.0), "{m:?}");
    assert!(close(m.avg_wait_s, 30.0), "{m:?}");
    assert_eq!(m.head_delay_s, 0.0, "{m:?}");
}

#[test]
fn the_paper_comparison_fills_every_row_and_keeps_the_calibrated_ones() {
    // The figures the model was fitted to, on the means of 20 replays,
    // stay met: the two trace-time headlines, the 60-task trace's energy,
    // and time-slicing's three results (energy on the 60-task trace, time
    // against exclusive on both traces). Emulating the
    // prototype's loop, which paced the whole server rather than each
    // GPU, brings MAGM's OOM crashes without estimates and with Horus's
    // down to the published counts (10.6 and 2.5 per replay when each
    // GPU took a task every 35 s); its round-robin, which checked
    // nothing, saves the published energy on MPS. The full table is in
    // docs/simulation.md.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/traces");
    let config = crate::config::Config::load(None).unwrap();
    let rows = super::paper::compare(
        &dir,
        &config.rules(),
        &config.simulate,
        super::paper::Replays::DEFAULT,
        Readings::Live,
    )
    .unwrap();
    assert_eq!(rows.len(), 32, "{rows:?}");
    for row in &rows {
        assert!(
            row.simulated.contains(" ± ") && row.met.is_some(),
            "{row:?}"
        );
    }
    let met = |figure: &str| {
        rows.iter()
            .find(|r| r.figure == figure)
            .is_some_and(|r| r.met == Some(true))
    };
    for figure in [
        "philly_t1_60, MAGM + GPUMemNet vs exclusive: trace time",
        "philly_t1_60, MAGM + GPUMemNet vs exclusive: GPU energy",
        "philly_mix_90, MAGM + oracle vs exclusive: trace time",
        "philly_mix_90, round-robin time-sliced (streams) vs exclusive: trace time, mean wait",
        "philly_t1_60, round-robin time-sliced (streams) vs exclusive: trace time, mean wait",
        "heavier 60-task trace (here philly_t1_60), energy vs exclusive: round-robin on streams",
        "philly_mix_90, OOM crashes without estimates: MAGM",
        "philly_mix_90, OOM crashes, MAGM + Horus",
        "heavier 60-task trace (here philly_t1_60), energy vs exclusive: round-robin on MPS",
    ] {
        assert!(met(figure), "{figure}: {rows:?}");
    }
    let table = super::paper::Table(&rows).to_string();
    assert!(table.starts_with("| figure | published | carma simulate | target met |\n"));
}

#[test]
fn the_prototypes_monitor_explains_why_free_memory_did_not_stop_its_crashes() {
    // Read as they are, the GPUs that pass the 80% SMACT cap hold little
    // memory, so asking 2 or 5 GiB free changes nothing (0.85 crashes per
    // replay either way, published 2). Read from the prototype's monitor,
    // a block 1.5 minutes old, a GPU that just took a task still looks
    // calm and empty: the next task lands there too, and the published
    // counts come out.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/traces");
    let config = crate::config::Config::load(None).unwrap();
    let compare = |monitor: Readings| {
        super::paper::compare(
            &dir,
            &config.rules(),
            &config.simulate,
            super::paper::Replays::DEFAULT,
            monitor,
        )
        .unwrap()
    };
    let met = |rows: &[super::paper::Row], figure: &str| {
        rows.iter()
            .find(|r| r.figure == figure)
            .is_some_and(|r| r.met == Some(true))
    };
    let (live, blocks) = (compare(Readings::Live), compare(Readings::PROTOTYPE));
    for figure in [
        "philly_mix_90, OOM crashes without estimates: + ≥ 2 GB free",
        "philly_mix_90, OOM crashes without estimates: + ≥ 5 GB free",
        "philly_mix_90, OOM crashes without estimates: LUG (≤ 80%, ≥ 5 GB)",
    ] {
        assert!(!met(&live, figure), "{figure}: {live:?}");
        assert!(met(&blocks, figure), "{figure}: {blocks:?}");
    }
}

#[test]
fn exact_estimates_do_at_least_as_well_as_any_estimator_on_the_means() {
    // The paper's order, on the means of 20 replays under carma's own
    // rules: MAGM with the measured peaks ends each data trace no later
    // than with any published estimator or none. It did not while the
    // gate judged a GPU by a window of its past alone: exact estimates
    // let a whole backlog onto one GPU at one instant. The model was fitted
    // to the two artifact traces; the two rebuilt from the prototype's
    // submission scripts (data/derived/) check that the order is not an
    // accident of those two.
    let config = crate::config::Config::load(None).unwrap();
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    for name in [
        "carma/traces/philly_mix_90.csv",
        "carma/traces/philly_t1_60.csv",
        "derived/philly_heavy_60.csv",
        "derived/philly_t2_60.csv",
    ] {
        let whole = trace::load(&data.join(name)).unwrap();
        let replays: Vec<Vec<TraceTask>> = (1..=20)
            .map(|seed| trace::jittered(&whole, 60.0, seed))
            .collect();
        let mean = |estimator: MemoryLine| {
            let setup = Setup {
                gpus: vec![Declared::whole(40 * GIB); 4],
                estimator,
                rules: config.rules(),
                model: config.simulate.clone(),
                readings: Readings::Live,
            };
            let total: f64 = replays.iter().map(|t| run(t, &setup).total_time_s).sum();
            total / replays.len() as f64
        };
        let exact = mean(MemoryLine::Oracle);
        for estimator in [
            MemoryLine::Horus,
            MemoryLine::Faketensor,
            MemoryLine::Gpumemnet,
            MemoryLine::None,
        ] {
            let estimated = mean(estimator);
            assert!(
                exact <= estimated,
                "{name}: oracle {exact:.0} s, {estimator:?} {estimated:.0} s"
            );
        }
    }
}

#[test]
fn a_pictured_run_draws_every_run_and_each_gpu_change() {
    // The last-allocator trace: A crashes at 30 s and re-runs 101-201 s,
    // B runs 1-101 s. Three bars, the first outlined as a crash; the
    // GPU's memory climbs in steps to 40 GiB before the crash and its
    // samples are in time order.
    let trace = [
        task(0.0, 1, 100.0, 30720.0, 0.3),
        task(1.0, 1, 100.0, 30720.0, 0.3),
    ];
    let setup = setup(1, Policy::Magm, MemoryLine::None, Sharing::Mps);
    let (m, picture) = super::run_pictured(&trace, &setup, &mut Columns(MemoryLine::None));
    assert_eq!(m, run(&trace, &setup));
    let bars: Vec<(f64, f64, bool)> = picture
        .bars
        .iter()
        .map(|b| (b.start, b.end, b.crashed))
        .collect();
    assert_eq!(
        bars,
        [
            (0.0, 30.0, true),
            (1.0, 101.0, false),
            (101.0, 201.0, false)
        ]
    );
    let samples = &picture.gpus[0].samples;
    assert!(samples.windows(2).all(|w| w[0].t <= w[1].t), "{samples:?}");
    let peak = samples.iter().map(|s| s.used_mib).fold(0.0, f64::max);
    assert!(close(peak, 40.0 * 1024.0), "{peak}");
    assert!(close(picture.span, 201.0), "{}", picture.span);
}

#[test]
fn mig_instances_run_tasks_apart_on_their_share_of_the_sms() {
    // One 40 GiB board cut into 3g.20gb and 4g.20gb. A (SMACT 0.6 of a
    // whole board) and B (0.3) start on an idle instance each. A needs
    // 0.6 × 7/3 = 1.4 of its instance's SMs: it runs at 1/1.4 and ends at
    // 140 s; B needs 0.525 of its own and ends at 100 s, untouched by A.
    // C asks for two GPUs, which MIG instances cannot give: it fails.
    let mut c = task(0.0, 2, 10.0, 1024.0, 0.3);
    c.task = "c.rad".into();
    let trace = [
        task(0.0, 1, 100.0, 10240.0, 0.6),
        task(0.0, 1, 100.0, 10240.0, 0.3),
        c,
    ];
    let mut s = setup(1, Policy::FirstFit, MemoryLine::Oracle, Sharing::Mps);
    s.gpus = crate::gpu::sim::spec::parse("1x40GiB:mig=3g.20gb+4g.20gb").unwrap();
    let m = run(&trace, &s);
    assert_eq!(m.failed, 1, "{m:?}");
    assert!(close(m.total_time_s, 140.0), "{m:?}");
    assert!(close(m.avg_exec_s, 120.0), "{m:?}");
}

/// A random trace on `gpus` GPUs: tasks of one or two GPUs, of light to
/// heavy SM activity, from a few hundred MiB to nearly a whole GPU.
fn random_trace(gpus: u32) -> impl proptest::strategy::Strategy<Value = Vec<TraceTask>> {
    use proptest::prelude::*;
    let one = (
        0.0f64..3000.0,
        1u32..=gpus.min(2),
        50.0f64..3000.0,
        256.0f64..39_000.0,
        prop::sample::select(vec![0.3, 0.7, 0.85, 1.0]),
    );
    prop::collection::vec(one, 2..16).prop_map(|tasks| {
        let mut trace: Vec<TraceTask> = tasks
            .into_iter()
            .enumerate()
            .map(|(n, (at, gpus, duration, memory, smact))| {
                let mut t = task(at.round(), gpus, duration.round(), memory.round(), smact);
                t.task = compact_str::format_compact!("t{n}.rad");
                t
            })
            .collect();
        trace.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
        trace
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// Backfill's promise under the simulator's model, interference
    /// included: a task started from behind a blocked head has left
    /// before the head could start, whatever the policy, and launches
    /// paced or not. Only a plan that is wrong breaks it, and with exact
    /// estimates nothing crashes.
    #[test]
    fn backfill_never_delays_the_head_under_the_model(
        trace in random_trace(3),
        gpus in 1usize..=3,
        policy in proptest::sample::select(Policy::ALL.to_vec()),
        paced in proptest::bool::ANY,
    ) {
        let config = crate::config::Config::load(None).unwrap();
        let mut rules = config.rules();
        rules.placement.policy = policy;
        rules.queue.backfill = true;
        if paced {
            rules.placement.launch_gap_s = crate::wall_time::Seconds::of(35.0);
            rules.placement.shared_launch_gap_s = crate::wall_time::Seconds::of(65.0);
        }
        let trace: Vec<TraceTask> = trace
            .into_iter()
            .filter(|t| t.gpus as usize <= gpus)
            .collect();
        let setup = Setup {
            gpus: vec![Declared::whole(40 * GIB); gpus],
            estimator: MemoryLine::Oracle,
            rules,
            model: config.simulate,
            readings: Readings::Live,
        };
        let m = run(&trace, &setup);
        proptest::prop_assert_eq!(m.oom_crashes, 0, "{:?}", m);
        proptest::prop_assert_eq!(m.head_delay_s, 0.0, "{:?}", m);
    }
}
