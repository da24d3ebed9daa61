//! Whole runs: exclusive against FIFO, bounds, streamed traces, time
//! limits, backfill and pictures.

use super::*;

/// A (t=0, 1 GPU, 100 s), B (t=0, 2 GPUs, 50 s), C (t=10, 30 s) and D
/// (t=20, 10 s), on two GPUs: B blocks the head of the queue.
fn head_of_line_trace() -> [TraceTask; 4] {
    [
        task(0.0, 1, 100.0, 1000.0, 0.3),
        task(0.0, 2, 50.0, 1000.0, 0.3),
        task(10.0, 1, 30.0, 1000.0, 0.3),
        task(20.0, 1, 10.0, 1000.0, 0.3),
    ]
}

#[test]
fn exclusive_is_first_in_first_out_with_head_of_line_blocking() {
    // Two GPUs. A (t=0, 1 GPU, 100 s) starts at once on GPU 0. B (t=0,
    // 2 GPUs, 50 s) must wait for both: it starts at 100, ends at 150. C
    // (t=10, 30 s) and D (t=20, 10 s) queue behind B although GPU 1 is
    // free (head-of-line blocking): they start at 150 and end at 180 and
    // 160. Total 180 s. Waits 0, 100, 140, 130 → 92.5; executions 100,
    // 50, 30, 10 → 47.5; JCTs 100, 150, 170, 140 → 140.
    let trace = head_of_line_trace();
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
            crate::simulate::trace::stream(&path).unwrap(),
            &s,
            &mut Columns(MemoryLine::Gpumemnet),
        )
        .unwrap();
        assert_eq!(
            streamed,
            run(&crate::simulate::trace::load(&path).unwrap(), &s)
        );
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
    let trace = head_of_line_trace();
    let mut setup = setup(2, Policy::Exclusive, MemoryLine::Oracle, Sharing::Mps);
    setup.rules.queue.backfill = true;
    let m = run(&trace, &setup);
    assert!(close(m.total_time_s, 150.0), "{m:?}");
    assert!(close(m.avg_wait_s, 30.0), "{m:?}");
    assert_eq!(m.head_delay_s, 0.0, "{m:?}");
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
