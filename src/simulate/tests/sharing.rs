//! How tasks share a GPU: speed, memory, readings and MIG instances.

use super::*;

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

#[test]
fn a_swinging_task_alone_keeps_its_pace_and_its_mean_activity() {
    // One 10,000 s task at SMACT 0.5 alone, its activity swinging by 0.2
    // every 200 s: 0.6 and 0.4 in turn, from a point of the cycle of its
    // own. Alone it still runs at full speed, and over 50 periods the GPU's
    // mean activity is its class's, give or take the one half period the
    // starting point may add to either side (0.1 × 100 s / 10,000 s).
    let trace = [task(0.0, 1, 10_000.0, 1000.0, 0.5)];
    let mut s = setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps);
    s.model.smact_swing = 0.2;
    s.model.smact_swing_period_s = 200.0;
    let m = run(&trace, &s);
    assert!(close(m.total_time_s, 10_000.0), "{m:?}");
    assert!((m.mean_utilization - 0.5).abs() <= 0.001 + 1e-9, "{m:?}");
}

#[test]
fn a_busy_gpu_takes_a_neighbour_while_its_activity_dips_below_the_cap() {
    // One GPU, MAGM with the SMACT cap at 0.8. A (1,000 s at 0.85) runs
    // from 0; B (100 s at 0.3) arrives at 10 s. At a constant 0.85 the
    // cap keeps B out until A ends. Swinging by 0.15 every 200 s, A's
    // activity is 0.72 half the time, and B joins in such a half.
    let trace = [
        task(0.0, 1, 1000.0, 1000.0, 0.85),
        task(10.0, 1, 100.0, 1000.0, 0.3),
    ];
    let mut s = setup(1, Policy::Magm, MemoryLine::Oracle, Sharing::Mps);
    s.rules.placement.smact_cap = 0.8;
    let steady = run(&trace, &s);
    assert!(close(steady.avg_wait_s, 990.0 / 2.0), "{steady:?}");
    s.model.smact_swing = 0.15;
    s.model.smact_swing_period_s = 200.0;
    let swinging = run(&trace, &s);
    assert!(swinging.avg_wait_s < 250.0 / 2.0, "{swinging:?}");
}
