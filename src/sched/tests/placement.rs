//! Placement: the policies, the interference gate and its window, memory and
//! margins, the reservation ledger, settling, head-of-line blocking,
//! multi-GPU tasks, one user per GPU under MPS, idle GPUs first.

use super::*;

#[test]
fn first_fit_takes_the_lowest_passing_index() {
    let mut core = four_gpus(Policy::FirstFit);
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(6 * GIB))),
        [(1, vec![0])]
    );
}

#[test]
fn best_fit_takes_the_least_free() {
    // GPU 2 has the least free memory (10 GiB >= 8 GiB).
    let mut core = four_gpus(Policy::BestFit);
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(6 * GIB))),
        [(1, vec![2])]
    );
}

#[test]
fn magm_takes_the_most_free() {
    // GPU 3 has the most free memory (35 GiB).
    let mut core = four_gpus(Policy::Magm);
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(6 * GIB))),
        [(1, vec![3])]
    );
}

#[test]
fn lug_takes_the_lowest_smact() {
    // GPU 3 has SMACT 0.1; make GPU 1 quieter (0.05) to tell LUG from MAGM.
    let mut core = four_gpus(Policy::Lug);
    core.step(s(0.0), Event::Sample(vec![sample(1, 20 * GIB, 0.05)]));
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(6 * GIB))),
        [(1, vec![1])]
    );
}

#[test]
fn round_robin_cycles_through_passing_gpus() {
    // Cycle starts at GPU 0: tasks go to 0, 1, 2, 3, then 0 again. Tasks
    // are 1 GiB (3 GiB with margin) so every GPU keeps passing; the
    // ledger books 1 GiB per task which changes nothing here.
    let mut core = four_gpus(Policy::RoundRobin);
    let mut order = Vec::new();
    for id in 1..=5 {
        for (_, gpus) in launched(&queue(&mut core, 1.0, id, Need::Mib(GIB))) {
            order.extend(gpus);
        }
    }
    assert_eq!(order, [0, 1, 2, 3, 0]);
}

#[test]
fn round_robin_skips_gpus_that_do_not_pass() {
    // A 9 GiB task needs 11 GiB free: GPU 2 (10 GiB free) fails. From
    // cursor 0: GPU 0, then 1, then 3 (2 skipped), then 0.
    let mut core = four_gpus(Policy::RoundRobin);
    let mut order = Vec::new();
    for id in 1..=4 {
        for (_, gpus) in launched(&queue(&mut core, 1.0, id, Need::Mib(9 * GIB))) {
            order.extend(gpus);
        }
    }
    assert_eq!(order, [0, 1, 3, 0]);
}

#[test]
fn exclusive_policy_uses_idle_gpus_only() {
    // GPUs 0 and 1 idle, 2 and 3 busy with foreign memory. Three tasks:
    // two go to 0 and 1, the third waits; when task 1 exits, it gets GPU 0.
    let mut core = Scheduler::new(rules(Policy::Exclusive), &[40 * GIB; 4]);
    core.step(
        s(0.0),
        Event::Sample(vec![
            sample(0, 0, 0.0),
            sample(1, 0, 0.0),
            sample(2, 8 * GIB, 0.0),
            sample(3, 8 * GIB, 0.0),
        ]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 2, Need::Mib(GIB))),
        [(2, vec![1])]
    );
    assert!(launched(&queue(&mut core, 1.0, 3, Need::Mib(GIB))).is_empty());
    let actions = core.step(
        s(5.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Success,
        },
    );
    assert_eq!(actions[0], Action::Complete { task: TaskId(1) });
    assert_eq!(launched(&actions), [(3, vec![0])]);
}

#[test]
fn smact_cap_rejects_busy_gpus() {
    // Cap 0.8. GPU 0 runs at 0.9 since t=0: window average 0.9 > 0.8, so
    // first-fit passes over it to GPU 1.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.9), sample(1, 0, 0.0)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 10.0, 1, Need::Mib(GIB))),
        [(1, vec![1])]
    );
}

#[test]
fn smact_is_windowed_and_the_core_asks_to_be_woken_when_it_cools() {
    // One GPU at 0.9 from t=0, idle from t=100 (but a foreign process
    // holds 2 GiB, so it is not idle). With a 60 s window the average
    // reaches 0.8 at t = 100 + 60 * 0.1 / 0.9 = 106.667 s. A task queued
    // at 100 waits; the core's deadline is just after 106.667; a tick
    // there launches it.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 2 * GIB, 0.9)]));
    core.step(s(100.0), Event::Sample(vec![sample(0, 2 * GIB, 0.0)]));
    assert!(launched(&queue(&mut core, 100.0, 1, Need::Mib(GIB))).is_empty());
    let wake = core.next_deadline().expect("a deadline").as_secs_f64();
    assert!((wake - 106.668).abs() < 0.01, "{wake}");
    assert!(launched(&core.step(s(106.0), Event::Tick)).is_empty());
    assert_eq!(launched(&core.step(s(wake), Event::Tick)), [(1, vec![0])]);
}

#[test]
fn a_gpu_whose_tasks_left_is_not_held_back_by_their_activity() {
    // Two GPUs, cap 0.8 over 60 s. Task 1 runs on GPU 0 (SMACT 0.9) until
    // t=100, task 2 on GPU 1 (0.9) throughout. When task 1 ends, GPU 0
    // has no task: it is idle at once, though its window still holds 0.9
    // from the last 60 s, and task 3 queued then takes it. GPU 1's task
    // 2 stays: its window is what task 2 does.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    assert_eq!(
        launched(&queue(&mut core, 0.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
    let busy = |gpu: usize, task: u64| GpuSample {
        tasks: vec![(TaskId(task), GIB)],
        ..sample(gpu, GIB, 0.9)
    };
    core.step(s(40.0), Event::Sample(vec![busy(0, 1)]));
    assert_eq!(
        launched(&queue(&mut core, 45.0, 2, Need::Mib(GIB))),
        [(2, vec![1])]
    );
    core.step(s(50.0), Event::Sample(vec![busy(0, 1), busy(1, 2)]));
    assert!(exit_with(&mut core, 100.0, 1, Exit::Success).is_empty());
    // A sample taken before task 1 ended, read after: it still shows task
    // 1, and does not count once a later one no longer does.
    core.step(s(100.5), Event::Sample(vec![busy(0, 1), busy(1, 2)]));
    core.step(s(101.0), Event::Sample(vec![sample(0, 0, 0.0), busy(1, 2)]));
    assert_eq!(
        launched(&queue(&mut core, 101.0, 3, Need::Mib(GIB))),
        [(3, vec![0])]
    );
    // GPU 1 is still busy with task 2: a fourth task shares GPU 0.
    assert_eq!(
        launched(&queue(&mut core, 102.0, 4, Need::Mib(GIB))),
        [(4, vec![0])]
    );
}

#[test]
fn free_memory_must_cover_estimate_plus_margin() {
    // GPU 0 has 10 GiB free. An 8 GiB task needs 10 GiB: fits exactly.
    // A 9 GiB task needs 11 GiB: does not.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 30 * GIB, 0.1)]));
    assert!(launched(&queue(&mut core, 1.0, 1, Need::Mib(9 * GIB))).is_empty());

    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 30 * GIB, 0.1)]));
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(8 * GIB))),
        [(1, vec![0])]
    );
}

#[test]
fn unknown_need_asks_for_the_larger_margin() {
    // No estimate: 5 GiB free required. GPU 0 has 4 GiB free, GPU 1 6 GiB.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 36 * GIB, 0.1), sample(1, 34 * GIB, 0.1)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Unknown)),
        [(1, vec![1])]
    );
}

#[test]
fn whole_gpu_and_oversized_needs_take_an_idle_gpu() {
    // GPU 0 shared (a 1 GiB job of ours... here foreign 3 GiB used, so not
    // idle), GPU 1 idle. Whole-GPU and a 39 GiB need (39 + 2 >= 40 GiB
    // capacity) both need an idle GPU; the first gets GPU 1, the second
    // waits instead of waiting forever for 41 GiB free.
    let mut core = Scheduler::new(rules(Policy::Magm), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 3 * GIB, 0.1), sample(1, 0, 0.0)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::WholeGpu)),
        [(1, vec![1])]
    );
    assert!(launched(&queue(&mut core, 1.0, 2, Need::Mib(39 * GIB))).is_empty());
    // Nobody may join the whole-GPU task on GPU 1, even a tiny one
    // (it queues behind task 2 anyway: FIFO).
    let actions = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Success,
        },
    );
    assert_eq!(launched(&actions), [(2, vec![1])]);
    match &actions[1] {
        Action::Launch { limit_mib, why, .. } => {
            assert_eq!(*limit_mib, None);
            assert!(why.to_string().contains("fills a whole GPU"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sole_task_keeps_its_gpu_to_itself() {
    // Task 1 asks for exclusivity and gets GPU 0 (first-fit). A small
    // task 2 must not join it: it goes to GPU 1.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    let mut demand = Demand::new(Need::Mib(GIB));
    demand.exclusive = true;
    let a = submit(&mut core, 1.0, 1, demand);
    assert_eq!(launched(&a), [(1, vec![0])]);
    assert_eq!(
        launched(&queue(&mut core, 1.0, 2, Need::Mib(GIB))),
        [(2, vec![1])]
    );
}

#[test]
fn the_ledger_stops_two_tasks_racing_for_the_same_memory() {
    // One GPU, 20 GiB free, readings not yet showing anything. Task 1
    // (8 GiB) fits: 20 >= 10. It books 8 GiB, so task 2 (8 GiB) sees 12
    // GiB free and fits too (12 >= 10); task 3 sees 4 GiB and waits.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 20 * GIB, 0.0)]));
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(8 * GIB))).len(),
        1
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 2, Need::Mib(8 * GIB))).len(),
        1
    );
    assert!(launched(&queue(&mut core, 1.0, 3, Need::Mib(8 * GIB))).is_empty());
    // The GPU now shows both tasks' 16 GiB (36 GiB used) and attributes
    // it: bookings are satisfied, free is 4 GiB: task 3 still waits.
    let mut reading = sample(0, 36 * GIB, 0.2);
    reading.tasks = vec![(TaskId(1), 8 * GIB), (TaskId(2), 8 * GIB)];
    assert!(launched(&core.step(s(5.0), Event::Sample(vec![reading]))).is_empty());
    // Task 1 ends and its memory is gone from the reading: 12 GiB free.
    core.step(
        s(6.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Success,
        },
    );
    let mut reading = sample(0, 28 * GIB, 0.1);
    reading.tasks = vec![(TaskId(2), 8 * GIB)];
    assert_eq!(
        launched(&core.step(s(7.0), Event::Sample(vec![reading]))),
        [(3, vec![0])]
    );
}

#[test]
fn a_booking_lapses_after_the_ramp_time() {
    // The reading never attributes task 1's memory. Its 8 GiB booking
    // blocks task 2 until 1 + 120 s (reservation_ramp_s); the deadline
    // says so.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 26 * GIB, 0.0)]));
    // 14 GiB free: task 1 (8+2) fits, books 8 → 6 GiB free; task 2 (8+2)
    // waits.
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(8 * GIB))).len(),
        1
    );
    assert!(launched(&queue(&mut core, 1.0, 2, Need::Mib(8 * GIB))).is_empty());
    assert_eq!(core.next_deadline(), Some(s(121.0)));
    assert_eq!(launched(&core.step(s(121.0), Event::Tick)), [(2, vec![0])]);
}

#[test]
fn a_gpu_that_just_took_a_task_settles_first() {
    // settle_s = 30: two 1 GiB tasks arrive together on a 40 GiB GPU with
    // room for both; the second waits until 30 s after the first's
    // launch, and the deadline and the head's reason say so.
    let mut r = rules(Policy::FirstFit);
    r.placement.settle_s = Seconds::of(30.0);
    let mut core = Scheduler::new(r, &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.0)]));
    assert_eq!(launched(&queue(&mut core, 1.0, 1, Need::Mib(GIB))).len(), 1);
    assert!(launched(&queue(&mut core, 2.0, 2, Need::Mib(GIB))).is_empty());
    assert_eq!(core.next_deadline(), Some(s(31.0)));
    let why = core.head_waits_for().unwrap().why;
    assert!(
        why.contains("took a task 1 s ago; takes none for 29 s more"),
        "{why}"
    );
    assert_eq!(launched(&core.step(s(31.0), Event::Tick)), [(2, vec![0])]);
}

#[test]
fn launches_are_paced_server_wide_and_longer_beside_other_tasks() {
    // launch_gap_s = 35, shared_launch_gap_s = 65, idle GPUs first: three
    // 1 GiB tasks arrive together on two idle GPUs. Task 1 takes GPU 0 at
    // once; task 2 takes idle GPU 1 35 s later; task 3 must share, which
    // it may 65 s after the last launch: at 100 s. The deadlines and the
    // head's reasons say so.
    let mut r = rules(Policy::FirstFit);
    r.placement.idle_first = true;
    r.placement.launch_gap_s = Seconds::of(35.0);
    r.placement.shared_launch_gap_s = Seconds::of(65.0);
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 0.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
    assert!(launched(&queue(&mut core, 0.0, 2, Need::Mib(GIB))).is_empty());
    assert!(launched(&queue(&mut core, 0.0, 3, Need::Mib(GIB))).is_empty());
    assert_eq!(core.next_deadline(), Some(s(35.0)));
    let why = core.head_waits_for().unwrap().why;
    assert!(why.contains("paused for 35 s more"), "{why}");
    assert_eq!(launched(&core.step(s(35.0), Event::Tick)), [(2, vec![1])]);
    assert_eq!(core.next_deadline(), Some(s(70.0)));
    assert!(launched(&core.step(s(70.0), Event::Tick)).is_empty());
    assert_eq!(core.next_deadline(), Some(s(100.0)));
    let why = core.head_waits_for().unwrap().why;
    assert!(why.contains("none joins them for 30 s more"), "{why}");
    assert_eq!(launched(&core.step(s(100.0), Event::Tick)), [(3, vec![0])]);
}

#[test]
fn a_gpu_waits_for_its_newcomer_to_show_before_it_takes_another() {
    // await_activity_s = 60, SMACT cap 0.8: three 1 GiB tasks arrive
    // together on a GPU at SMACT 0.3. The window knows nothing of task 1
    // yet, so the GPU takes no second task at that instant (the deadline
    // is the wait's lapse, and the head says why). The first sample that
    // shows task 1 (SMACT 0.6) starts the window afresh from it: task 2
    // joins at once. Once a sample shows it at SMACT 0.9, the cap refuses
    // task 3 at once, not 30 s later when a window of the past would.
    let mut r = rules(Policy::FirstFit);
    r.placement.await_activity_s = Seconds::of(60.0);
    let mut core = Scheduler::new(r, &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.3)]));
    assert_eq!(
        launched(&queue(&mut core, 100.0, 1, Need::Mib(GIB))).len(),
        1
    );
    assert!(launched(&queue(&mut core, 100.0, 2, Need::Mib(GIB))).is_empty());
    assert!(launched(&queue(&mut core, 100.0, 3, Need::Mib(GIB))).is_empty());
    assert_eq!(core.next_deadline(), Some(s(160.0)));
    let why = core.head_waits_for().unwrap().why;
    assert!(why.contains("readings do not show yet"), "{why}");
    let shows = |core: &mut Scheduler, at: f64, smact: f64, tasks: &[u64]| {
        let mut sample = sample(0, GIB * tasks.len() as u64, smact);
        sample.tasks = tasks.iter().map(|&t| (TaskId(t), GIB)).collect();
        launched(&core.step(s(at), Event::Sample(vec![sample])))
    };
    assert!(shows(&mut core, 101.0, 0.3, &[]).is_empty());
    assert_eq!(shows(&mut core, 105.0, 0.6, &[1]), [(2, vec![0])]);
    assert!(shows(&mut core, 108.0, 0.9, &[1, 2]).is_empty());
    assert!(shows(&mut core, 120.0, 0.9, &[1, 2]).is_empty());
}

#[test]
fn a_newcomer_that_never_shows_holds_its_gpu_back_no_longer_than_the_wait() {
    // The same GPU, but task 1 never allocates memory: task 2 starts when
    // the wait lapses, 60 s after task 1's launch.
    let mut r = rules(Policy::FirstFit);
    r.placement.await_activity_s = Seconds::of(60.0);
    let mut core = Scheduler::new(r, &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.3)]));
    assert_eq!(
        launched(&queue(&mut core, 10.0, 1, Need::Mib(GIB))).len(),
        1
    );
    assert!(launched(&queue(&mut core, 10.0, 2, Need::Mib(GIB))).is_empty());
    assert!(launched(&core.step(s(69.0), Event::Tick)).is_empty());
    assert_eq!(launched(&core.step(s(70.0), Event::Tick)), [(2, vec![0])]);
}

#[test]
fn fifo_head_of_line_blocks_smaller_tasks_behind() {
    // GPU has 10 GiB free. Head needs 20 GiB, the next only 1 GiB: the
    // second must not overtake the first.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 30 * GIB, 0.1)]));
    assert!(launched(&queue(&mut core, 1.0, 1, Need::Mib(20 * GIB))).is_empty());
    assert!(launched(&queue(&mut core, 1.0, 2, Need::Mib(GIB))).is_empty());
    assert_eq!(core.queued(), (0, 2));
}

#[test]
fn multi_gpu_tasks_take_all_their_gpus_at_once_or_wait() {
    // 2-GPU task, MAGM. Free: GPU 0 30, GPU 1 20, GPU 2 10, GPU 3 35 GiB.
    // A 15 GiB need (17 with margin) passes on 0, 1 and 3; MAGM takes the
    // two most free: 3 then 0.
    let mut core = four_gpus(Policy::Magm);
    let mut demand = Demand::new(Need::Mib(15 * GIB));
    demand.gpus = 2;
    let a = submit(&mut core, 1.0, 1, demand.clone());
    assert_eq!(launched(&a), [(1, vec![3, 0])]);
    // After the bookings (15 GiB each) GPU 3 has 20 and GPU 0 15 free;
    // only GPU 1 (20) and 3 (20) pass for 17 GiB; the tie goes to the
    // lower index → another 2-GPU task fits on 1 and 3.
    let a = submit(&mut core, 1.0, 2, demand.clone());
    assert_eq!(launched(&a), [(2, vec![1, 3])]);
    // Now only GPU 0 (15) ... none has 17 GiB: a third waits.
    let a = submit(&mut core, 1.0, 3, demand);
    assert!(launched(&a).is_empty());
}

#[test]
fn tasks_no_server_could_run_fail_at_once() {
    let mut core = four_gpus(Policy::Magm);
    let mut demand = Demand::new(Need::Mib(GIB));
    demand.gpus = 8;
    let a = submit(&mut core, 1.0, 1, demand);
    match &a[..] {
        [
            Action::Fail {
                task,
                reason: FailReason::Unplaceable(why),
            },
        ] => {
            assert_eq!(*task, TaskId(1));
            assert!(why.contains("8 GPUs") && why.contains("has 4"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

/// An idle GPU of 40 GiB and one of 80.
fn forty_and_eighty(rules: Rules) -> Scheduler {
    let mut core = Scheduler::new(rules, &[40 * GIB, 80 * GIB]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    core
}

#[test]
fn a_task_of_several_gpus_that_only_the_largest_could_hold_fails_at_once_and_blocks_nobody() {
    // Two GPUs with 50 GiB each fit only the larger, and the task waited
    // at the head of the queue for good.
    let mut core = forty_and_eighty(rules(Policy::FirstFit));
    let mut demand = Demand::new(Need::Mib(50 * GIB));
    demand.gpus = 2;
    let why = unplaceable(&submit(&mut core, 1.0, 1, demand)).to_owned();
    assert!(
        why.contains("2 GPUs") && why.contains("has 1 that large"),
        "{why}"
    );
    assert_eq!(
        launched(&queue(&mut core, 2.0, 2, Need::Mib(GIB))),
        [(2, vec![0])]
    );
    // One GPU at 50 GiB, or two at 30, could run: they are kept.
    let mut one = Demand::new(Need::Mib(50 * GIB));
    one.gpus = 1;
    assert_eq!(launched(&submit(&mut core, 3.0, 3, one)), [(3, vec![1])]);
    let mut core = forty_and_eighty(rules(Policy::FirstFit));
    let mut two = Demand::new(Need::Mib(30 * GIB));
    two.gpus = 2;
    assert_eq!(launched(&submit(&mut core, 1.0, 4, two)), [(4, vec![0, 1])]);
}

#[test]
fn a_re_run_that_asks_more_than_enough_gpus_could_hold_fails_instead_of_waiting() {
    // Looser re-runs ask for more after each crash: two GPUs at 36 GiB
    // (38 with the margin) fit a 40 and an 80 GiB GPU; after a crash
    // (42 GiB) the 40 GiB one can no longer hold the re-run.
    let mut r = rules(Policy::FirstFit);
    r.recovery.mode = RecoveryMode::Looser;
    r.recovery.looser_step_mib = 6 * GIB;
    let mut core = forty_and_eighty(r);
    let mut demand = Demand::new(Need::Mib(36 * GIB));
    demand.gpus = 2;
    assert_eq!(
        launched(&submit(&mut core, 1.0, 1, demand)),
        [(1, vec![0, 1])]
    );
    let oom = Event::Exited {
        task: TaskId(1),
        exit: Exit::Oom,
    };
    let why = unplaceable(&core.step(s(2.0), oom)).to_owned();
    assert!(
        why.starts_with("after an OOM crash, it needs 2 GPUs"),
        "{why}"
    );
}

#[test]
fn unhealthy_gpus_are_skipped() {
    let mut core = four_gpus(Policy::Magm);
    let mut broken = sample(3, 5 * GIB, 0.1);
    broken.healthy = false;
    core.step(s(0.5), Event::Sample(vec![broken]));
    // GPU 3 was MAGM's choice; now GPU 0 (30 GiB free) is.
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
}

#[test]
fn one_user_per_gpu_under_mps() {
    // Uid 1000's task is on GPU 0 (first-fit). A uid 1001 task must not
    // join it (MPS serves one user per GPU); it takes GPU 1. Another uid
    // 1000 task may join GPU 0.
    let mut r = rules(Policy::FirstFit);
    r.placement.one_user_per_gpu = true;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    assert_eq!(
        launched(&core.step(s(1.0), user_job(1, 1000))),
        [(1, vec![0])]
    );
    assert_eq!(
        launched(&core.step(s(1.0), user_job(2, 1001))),
        [(2, vec![1])]
    );
    assert_eq!(
        launched(&core.step(s(1.0), user_job(3, 1000))),
        [(3, vec![0])]
    );
}

#[test]
fn a_waiting_task_says_why_once_for_gpus_alike() {
    // Under MPS uid 1000 runs on GPUs 0-2 and GPU 3 is nearly full: a uid
    // 1001 task waits, and GPUs 0-2 are named together.
    let mut r = rules(Policy::FirstFit);
    r.placement.one_user_per_gpu = true;
    r.placement.idle_first = true;
    let mut core = Scheduler::new(r, &[40 * GIB; 4]);
    let used = [0, 0, 0, 39 * GIB];
    core.step(
        s(0.0),
        Event::Sample((0..4).map(|g| sample(g, used[g], 0.0)).collect()),
    );
    for id in 1..=3 {
        assert_eq!(launched(&core.step(s(1.0), user_job(id, 1000))).len(), 1);
    }
    assert!(launched(&core.step(s(1.0), user_job(4, 1001))).is_empty());
    let waiting = core.head_waits_for().unwrap();
    assert_eq!(waiting.task, TaskId(4));
    assert_eq!(
        waiting.why,
        "needs 3GiB free on a GPU; GPUs 0-2: another user's tasks run there \
         (MPS serves one user per GPU); GPU 3: 1GiB free < 3GiB"
    );
}

#[test]
fn gpu_indices_read_as_ranges() {
    assert_eq!(super::explain::ranges(&[0, 1, 2, 3, 6]), "0-3, 6");
    assert_eq!(super::explain::ranges(&[0, 1, 5, 7, 8, 9]), "0, 1, 5, 7-9");
    assert_eq!(super::explain::ranges(&[]), "");
}

#[test]
fn without_mps_users_share_gpus() {
    // The same jobs without MPS: first-fit puts all three on GPU 0.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    for (id, uid) in [(1, 1000), (2, 1001), (3, 1000)] {
        assert_eq!(
            launched(&core.step(s(1.0), user_job(id, uid))),
            [(id, vec![0])]
        );
    }
}

#[test]
fn idle_gpus_go_first_whatever_the_policy() {
    // Best-fit alone would pack task 2 beside task 1 on GPU 0 (least
    // free). With the idle-first step it takes idle GPU 1; task 3, with
    // no idle GPU left, is packed by best-fit onto the fuller GPU, and
    // the launch says which rule chose.
    let mut r = rules(Policy::BestFit);
    r.placement.idle_first = true;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    let first = queue(&mut core, 1.0, 1, Need::Mib(4 * GIB));
    assert_eq!(launched(&first), [(1, vec![0])]);
    let second = queue(&mut core, 1.0, 2, Need::Mib(2 * GIB));
    assert_eq!(launched(&second), [(2, vec![1])]);
    let Action::Launch { why, .. } = &second[0] else {
        panic!("{second:?}")
    };
    assert!(
        why.to_string().starts_with("best-fit, idle first: GPU 1"),
        "{why}"
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 3, Need::Mib(GIB))),
        [(3, vec![0])]
    );
}

#[test]
fn the_prototype_gate_lets_busy_sms_with_few_warps_share() {
    // GPU 0: SMs busy (0.9) but occupancy and DRAM low; GPU 1: busy in
    // every way. The plain cap refuses both; the prototype gate admits
    // GPU 0 only. A GPU whose source measures neither metric is judged on
    // SMACT alone (GPU 2).
    let busy = |gpu, occupancy, dram| GpuSample {
        occupancy,
        dram,
        ..sample(gpu, GIB, 0.9)
    };
    let samples = vec![
        busy(0, Some(0.2), Some(0.1)),
        busy(1, Some(0.6), Some(0.5)),
        busy(2, None, None),
    ];
    let mut plain = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 3]);
    plain.step(s(0.0), Event::Sample(samples.clone()));
    assert!(launched(&queue(&mut plain, 1.0, 1, Need::Mib(GIB))).is_empty());
    let waits = plain.head_waits_for().unwrap().why;
    assert!(waits.contains("GPUs 0-2: SMACT 0.90 > 0.80"), "{waits}");

    let mut r = rules(Policy::FirstFit);
    r.placement.gate = Gate::Prototype;
    let mut gated = Scheduler::new(r, &[40 * GIB; 3]);
    gated.step(s(0.0), Event::Sample(samples));
    assert_eq!(
        launched(&queue(&mut gated, 1.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
    // 37 GiB + margin fits GPUs 1 and 2 (39 GiB free) but no longer GPU
    // 0, where task 1 books 1 GiB more: it waits, and says why.
    assert!(launched(&queue(&mut gated, 1.0, 2, Need::Mib(37 * GIB))).is_empty());
    let waits = gated.head_waits_for().unwrap().why;
    assert!(
        waits.contains("GPU 1: SMACT 0.90 >= 0.80 with occupancy 0.60"),
        "{waits}"
    );
    assert!(
        waits.contains("GPU 2: SMACT 0.90 >= 0.80 with occupancy 1.00"),
        "{waits}"
    );
}
