//! Unit tests of the core: one per policy and per rule, each with its
//! expectation worked out by hand in the comment.

use super::*;
use crate::wall_time::Seconds;

const GIB: u64 = 1024;

fn s(x: f64) -> Time {
    Time::from_secs_f64(x)
}

/// The rules most tests below were worked out for: the policy alone
/// chooses (no idle-first step), the plain SMACT cap over 60 s gates. The
/// default idle-first step and the prototype gate have tests of their own.
fn rules(policy: Policy) -> Rules {
    let mut r = Rules::defaults();
    r.placement.policy = policy;
    r.placement.idle_first = false;
    r.placement.gate = Gate::Smact;
    r.placement.smact_window_s = Seconds::of(60.0);
    r
}

fn sample(gpu: usize, used_mib: u64, smact: f64) -> GpuSample {
    GpuSample {
        gpu,
        used_mib,
        smact,
        occupancy: None,
        dram: None,
        healthy: true,
        tasks: Vec::new(),
    }
}

fn queue(core: &mut Scheduler, now: f64, id: u64, need: Need) -> Vec<Action> {
    submit(core, now, id, Demand::new(need))
}

fn submit(core: &mut Scheduler, now: f64, id: u64, demand: Demand) -> Vec<Action> {
    core.step(
        s(now),
        Event::Queued {
            task: TaskId(id),
            demand,
        },
    )
}

fn launched(actions: &[Action]) -> Vec<(u64, Vec<usize>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch { task, gpus, .. } => Some((task.0, gpus.clone())),
            _ => None,
        })
        .collect()
}

/// Four 40 GiB GPUs with 10, 20, 30 and 5 GiB used and SMACT 0.5, 0.2,
/// 0.6, 0.1 — the fixture for the policy tests.
fn four_gpus(policy: Policy) -> Scheduler {
    let mut core = Scheduler::new(rules(policy), &[40 * GIB; 4]);
    core.step(
        s(0.0),
        Event::Sample(vec![
            sample(0, 10 * GIB, 0.5),
            sample(1, 20 * GIB, 0.2),
            sample(2, 30 * GIB, 0.6),
            sample(3, 5 * GIB, 0.1),
        ]),
    );
    core
}

// Free memory in the fixture: GPU 0 30 GiB, GPU 1 20 GiB, GPU 2 10 GiB,
// GPU 3 35 GiB. A 6 GiB task needs 6 + 2 (margin) = 8 GiB free, so every
// GPU passes; the policy alone decides.

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
            assert!(why.contains("fills a whole GPU"), "{why}");
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

fn user_job(id: u64, uid: u32) -> Event {
    Event::Queued {
        task: TaskId(id),
        demand: Demand {
            user: Some(uid),
            ..Demand::new(Need::Mib(GIB))
        },
    }
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
    assert!(why.starts_with("best-fit, idle first: GPU 1"), "{why}");
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

#[test]
fn an_oom_crash_goes_to_recovery_which_runs_first_on_an_idle_gpu() {
    // GPU 0 shared by tasks 1 and 2 (first-fit), GPU 1 busy with foreign
    // memory. Task 2 crashes with OOM: it moves to recovery. Task 3 queued
    // meanwhile waits behind it (recovery first) although GPU 0 has room.
    // When task 1 ends GPU 0 is idle and task 2 re-runs there alone.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 20 * GIB, 0.0)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 2, Need::Mib(GIB))),
        [(2, vec![0])]
    );
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(2),
            exit: Exit::Oom,
        },
    );
    assert!(matches!(
        &a[0],
        Action::Recover {
            task: TaskId(2),
            crashes: 1,
            ..
        }
    ));
    assert!(launched(&queue(&mut core, 3.0, 3, Need::Mib(GIB))).is_empty());
    assert_eq!(core.queued(), (1, 1));
    let a = core.step(
        s(4.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Success,
        },
    );
    // Task 2 re-runs alone on GPU 0; task 3 then passes on GPU 1 (20 GiB
    // foreign memory is not idle, but it has room and SMACT 0).
    assert_eq!(launched(&a), [(2, vec![0]), (3, vec![1])]);
    assert_eq!(core.queued(), (0, 0));
}

#[test]
fn looser_recovery_asks_for_more_memory_each_crash() {
    // Mode looser, step 5 GiB. A 4 GiB task crashed once: it needs
    // 4 + 5 = 9 GiB free. GPU 0 has 8 GiB free (no), GPU 1 10 GiB (yes).
    let mut r = rules(Policy::FirstFit);
    r.recovery.mode = RecoveryMode::Looser;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 26 * GIB, 0.1), sample(1, 24 * GIB, 0.1)]),
    );
    // First run: 6 GiB needed, GPU 0 (14 free) takes it.
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(4 * GIB))),
        [(1, vec![0])]
    );
    // The GPUs read what they read before (the task never allocated).
    core.step(
        s(1.5),
        Event::Sample(vec![sample(0, 32 * GIB, 0.1), sample(1, 30 * GIB, 0.1)]),
    );
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Oom,
        },
    );
    // GPU 0 has 8 GiB free, GPU 1 10 GiB: the re-run goes to GPU 1 at once.
    match &a[0] {
        Action::Recover { why, .. } => assert!(why.contains("9GiB"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(launched(&a), [(1, vec![1])]);
}

#[test]
fn retry_limit_sends_a_task_to_failed() {
    // max_retries = 2: crashes 1 and 2 recover, crash 3 fails.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.0)]));
    queue(&mut core, 1.0, 1, Need::Mib(GIB));
    let oom = Event::Exited {
        task: TaskId(1),
        exit: Exit::Oom,
    };
    for crash in 1..=2 {
        let a = core.step(s(crash as f64 + 1.0), oom.clone());
        assert!(matches!(&a[0], Action::Recover { crashes, .. } if *crashes == crash));
        assert_eq!(launched(&a), [(1, vec![0])], "re-run after crash {crash}");
    }
    let a = core.step(s(9.0), oom);
    assert_eq!(
        a,
        [Action::Fail {
            task: TaskId(1),
            reason: FailReason::OomRetriesExhausted { crashes: 3 }
        }]
    );
}

#[test]
fn a_tasks_own_retry_limit_wins() {
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.0)]));
    let demand = Demand {
        max_retries: Some(0),
        ..Demand::new(Need::Mib(GIB))
    };
    submit(&mut core, 1.0, 1, demand);
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Oom,
        },
    );
    assert!(matches!(
        &a[..],
        [Action::Fail {
            reason: FailReason::OomRetriesExhausted { crashes: 1 },
            ..
        }]
    ));
}

#[test]
fn other_failures_and_cancellations_fail_with_their_reason() {
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.0)]));
    queue(&mut core, 1.0, 1, Need::Mib(GIB));
    queue(&mut core, 1.0, 2, Need::Mib(GIB));
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Failed("exit status 3".into()),
        },
    );
    assert_eq!(
        a,
        [Action::Fail {
            task: TaskId(1),
            reason: FailReason::Exit("exit status 3".into())
        }]
    );
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(2),
            exit: Exit::Cancelled,
        },
    );
    assert_eq!(
        a,
        [Action::Fail {
            task: TaskId(2),
            reason: FailReason::Cancelled
        }]
    );
    // A second report of the same exit changes nothing.
    assert!(
        core.step(
            s(3.0),
            Event::Exited {
                task: TaskId(2),
                exit: Exit::Success
            }
        )
        .is_empty()
    );
}

#[test]
fn a_running_task_found_after_restart_holds_its_gpu() {
    // A restarted daemon reports task 7 running on GPU 0 with a 30 GiB
    // estimate. The GPU reading does not show it yet, so its booking
    // keeps a new 10 GiB task (12 with margin) off GPU 0 (40 - 30 = 10
    // free): it goes to GPU 1.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    core.step(
        s(0.0),
        Event::Running {
            task: TaskId(7),
            demand: Demand::new(Need::Mib(30 * GIB)),
            gpus: vec![0],
            crashes: 0,
        },
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(10 * GIB))),
        [(1, vec![1])]
    );
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(7),
            exit: Exit::Success,
        },
    );
    assert_eq!(a, [Action::Complete { task: TaskId(7) }]);
}

#[test]
fn launch_carries_the_granted_limit_and_an_explanation() {
    let mut core = four_gpus(Policy::Magm);
    match &queue(&mut core, 1.0, 1, Need::Mib(6 * GIB))[..] {
        [Action::Launch { limit_mib, why, .. }] => {
            assert_eq!(*limit_mib, Some(8 * GIB));
            assert!(why.starts_with("magm: GPU 3 (35GiB free"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_deadline_when_nothing_waits() {
    let core = four_gpus(Policy::Magm);
    assert_eq!(core.next_deadline(), None);
}

#[test]
fn cancelling_a_queued_task_drops_it_and_unblocks_the_queue() {
    // GPU has 10 GiB free; the 20 GiB head blocks a 1 GiB task. Cancelling
    // the head fails it as cancelled and the small task starts.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 30 * GIB, 0.1)]));
    queue(&mut core, 1.0, 1, Need::Mib(20 * GIB));
    queue(&mut core, 1.0, 2, Need::Mib(GIB));
    let waiting = core.head_waits_for().unwrap();
    assert_eq!(waiting.task, TaskId(1));
    assert_eq!(
        waiting.why,
        "needs 22GiB free on a GPU; GPU 0: 10GiB free < 22GiB"
    );
    let a = core.step(s(2.0), Event::Cancel { task: TaskId(1) });
    assert_eq!(
        a[0],
        Action::Fail {
            task: TaskId(1),
            reason: FailReason::Cancelled
        }
    );
    assert_eq!(launched(&a), [(2, vec![0])]);
    // Cancelling a running or unknown task changes nothing by itself.
    assert!(
        core.step(s(3.0), Event::Cancel { task: TaskId(2) })
            .is_empty()
    );
    assert!(
        core.step(s(3.0), Event::Cancel { task: TaskId(9) })
            .is_empty()
    );
    assert_eq!(core.head_waits_for(), None);
}

#[test]
fn new_rules_apply_to_the_next_dispatch() {
    // SMACT 0.9 blocks the task under the 0.8 cap; raising the cap to 0.95
    // lets it in at the next tick.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 2 * GIB, 0.9)]));
    assert!(launched(&queue(&mut core, 1.0, 1, Need::Mib(GIB))).is_empty());
    let mut r = rules(Policy::FirstFit);
    r.placement.smact_cap = 0.95;
    core.set_rules(r);
    assert_eq!(launched(&core.step(s(2.0), Event::Tick)), [(1, vec![0])]);
}

#[test]
fn a_task_found_in_recovery_queues_ahead_of_the_main_queue() {
    // Restart: task 1 pending, task 2 in recovery after one crash. With a
    // busy GPU (foreign memory, so not idle) nothing starts; task 2 is the
    // head (recovery first) and needs an idle GPU.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 4 * GIB, 0.1)]));
    let a = core.step_all(
        s(1.0),
        [
            Event::Queued {
                task: TaskId(1),
                demand: Demand::new(Need::Mib(GIB)),
            },
            Event::Recovering {
                task: TaskId(2),
                demand: Demand::new(Need::Mib(GIB)),
                crashes: 1,
            },
        ],
    );
    assert!(launched(&a).is_empty());
    assert_eq!(core.queued(), (1, 1));
    let waiting = core.head_waits_for().unwrap();
    assert_eq!(waiting.task, TaskId(2));
    assert!(
        waiting.why.starts_with("needs an idle GPU (recovery"),
        "{waiting:?}"
    );
}

#[test]
fn mig_instances_are_shared_but_take_single_gpu_tasks_only() {
    // GPUs 0 and 1 are MIG instances, GPU 2 a whole GPU. Two one-GPU
    // tasks share instance 0 (first-fit), as they would a GPU; a two-GPU
    // task may take neither instance, and one whole GPU can never run it:
    // it fails at once rather than block the queue forever.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[20 * GIB, 20 * GIB, 40 * GIB]);
    core.set_mig_instance(0);
    core.set_mig_instance(1);
    core.step(
        s(0.0),
        Event::Sample(vec![
            sample(0, 0, 0.0),
            sample(1, 0, 0.0),
            sample(2, 0, 0.0),
        ]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(GIB))),
        [(1, vec![0])]
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 2, Need::Mib(GIB))),
        [(2, vec![0])]
    );
    let mut demand = Demand::new(Need::Mib(GIB));
    demand.gpus = 2;
    let actions = submit(&mut core, 2.0, 3, demand);
    match &actions[..] {
        [
            Action::Fail {
                reason: FailReason::Unplaceable(why),
                ..
            },
        ] => assert!(why.contains("1 not cut into MIG instances"), "{why}"),
        other => panic!("{other:?}"),
    }
    // With two whole GPUs, one busy, the two-GPU task waits and says why
    // the instances will not do.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[20 * GIB, 40 * GIB, 40 * GIB]);
    core.set_mig_instance(0);
    core.step(
        s(0.0),
        Event::Sample(vec![
            sample(0, 0, 0.0),
            sample(1, 0, 0.0),
            sample(2, 39 * GIB, 0.0),
        ]),
    );
    let mut demand = Demand::new(Need::Mib(GIB));
    demand.gpus = 2;
    submit(&mut core, 1.0, 4, demand);
    let why = core.head_waits_for().unwrap().why;
    assert!(
        why.contains("GPU 0: a MIG instance: single-GPU tasks only"),
        "{why}"
    );
}

#[test]
fn a_need_too_big_for_a_small_gpu_waits_for_a_larger_one() {
    // A 40 and an 80 GiB GPU, both idle. A 50 GiB need fills the 40 GiB
    // GPU but not the 80: it goes to the 80 GiB GPU, sharing it, and a
    // second one waits for it rather than crash on the idle 40 GiB GPU.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB, 80 * GIB]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::Mib(50 * GIB))),
        [(1, vec![1])]
    );
    assert_eq!(launched(&queue(&mut core, 1.0, 2, Need::Mib(50 * GIB))), []);
}

#[test]
fn a_task_adopted_on_a_vanished_gpu_can_still_end() {
    // A restarted daemon finds task 7 running on GPU 1, but only GPU 0
    // exists now. Its exit must still complete it.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    core.step(
        s(0.0),
        Event::Running {
            task: TaskId(7),
            demand: Demand::new(Need::Mib(GIB)),
            gpus: vec![1],
            crashes: 0,
        },
    );
    let a = core.step(
        s(1.0),
        Event::Exited {
            task: TaskId(7),
            exit: Exit::Success,
        },
    );
    assert_eq!(a, [Action::Complete { task: TaskId(7) }]);
}

#[test]
fn looser_recovery_keeps_a_whole_gpu_need_whole() {
    // A whole-GPU task that still crashed re-runs on an idle GPU, not on a
    // shared one with "unknown margin + step" free.
    let mut r = rules(Policy::FirstFit);
    r.recovery.mode = RecoveryMode::Looser;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(
        s(0.0),
        Event::Sample(vec![sample(0, 0, 0.0), sample(1, 0, 0.0)]),
    );
    assert_eq!(
        launched(&queue(&mut core, 1.0, 1, Need::WholeGpu)),
        [(1, vec![0])]
    );
    // A small task shares GPU 1 (foreign memory keeps it from being idle).
    core.step(s(1.5), Event::Sample(vec![sample(1, 2 * GIB, 0.1)]));
    let a = core.step(
        s(2.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Oom,
        },
    );
    // GPU 0 is idle again (nothing used): the re-run goes there alone.
    match &a[1] {
        Action::Launch {
            gpus, limit_mib, ..
        } => {
            assert_eq!(gpus, &[0]);
            assert_eq!(*limit_mib, None);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_launch_that_could_not_start_goes_back_to_the_head_and_pauses_launches() {
    // One idle 40 GiB GPU. Task 1 (4 GiB) launches at t=0 and task 2
    // (4 GiB) right after it (40 - 4 booked >= 4 + 2). Task 1's job could
    // not start (EMFILE, say): it returns to the head of the queue with
    // no crash counted, its booking is released, and nothing launches
    // before t=5.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    assert_eq!(
        launched(&queue(&mut core, 0.0, 1, Need::Mib(4 * GIB))),
        [(1, vec![0])]
    );
    let actions = core.step(
        s(1.0),
        Event::NotStarted {
            task: TaskId(1),
            retry_at: s(5.0),
        },
    );
    assert!(actions.is_empty(), "{actions:?}");
    assert_eq!(core.next_deadline(), Some(s(5.0)));
    assert!(
        core.head_waits_for()
            .unwrap()
            .why
            .contains("launches paused")
    );
    assert!(launched(&queue(&mut core, 2.0, 2, Need::Mib(4 * GIB))).is_empty());
    // At t=5 the head (task 1) goes first, then task 2.
    let actions = core.step(s(5.0), Event::Tick);
    assert_eq!(launched(&actions), [(1, vec![0]), (2, vec![0])]);
    // It never crashed: an OOM now recovers it as a first crash.
    let actions = core.step(
        s(6.0),
        Event::Exited {
            task: TaskId(1),
            exit: Exit::Oom,
        },
    );
    assert!(
        matches!(actions[0], Action::Recover { crashes: 1, .. }),
        "{actions:?}"
    );
}

// Wall-time limits: the core hands the limit to the driver, refuses what
// exceeds the maximum, and names the reason when the driver stops a task.

#[test]
fn a_launch_carries_the_tasks_own_limit_or_the_default() {
    let mut r = rules(Policy::FirstFit);
    r.queue.default_time_s = Seconds::of(3600.0);
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    let own = Demand {
        time_limit: Some(Duration::from_secs(60)),
        ..Demand::new(Need::Mib(GIB))
    };
    let mut actions = submit(&mut core, 0.0, 1, own);
    actions.extend(queue(&mut core, 0.0, 2, Need::Mib(GIB)));
    let limits: Vec<Option<Duration>> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch { time_limit, .. } => Some(*time_limit),
            _ => None,
        })
        .collect();
    assert_eq!(
        limits,
        [
            Some(Duration::from_secs(60)),
            Some(Duration::from_secs(3600))
        ]
    );
}

#[test]
fn a_limit_over_the_maximum_is_refused_and_a_stopped_task_fails_with_time_limit() {
    let mut r = rules(Policy::FirstFit);
    r.queue.max_time_s = Seconds::of(7200.0);
    let mut core = Scheduler::new(r, &[40 * GIB]);
    let greedy = Demand {
        time_limit: Some(Duration::from_secs(3 * 3600)),
        ..Demand::new(Need::Mib(GIB))
    };
    let actions = submit(&mut core, 0.0, 1, greedy);
    match actions.as_slice() {
        [
            Action::Fail {
                reason: FailReason::Refused(why),
                ..
            },
        ] => {
            assert!(why.contains("3h") && why.contains("2h"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    // Without a limit of its own a task runs under the maximum.
    let actions = queue(&mut core, 1.0, 2, Need::Mib(GIB));
    assert!(matches!(
        actions.as_slice(),
        [Action::Launch { time_limit: Some(t), .. }] if *t == Duration::from_secs(7200)
    ));
    let actions = core.step(
        s(7201.0),
        Event::Exited {
            task: TaskId(2),
            exit: Exit::TimeLimit,
        },
    );
    match actions.as_slice() {
        [Action::Fail { reason, .. }] => {
            assert_eq!(
                reason.to_string(),
                "time limit: stopped after its 2h of wall time"
            )
        }
        other => panic!("{other:?}"),
    }
}

// Queue order: recovery first, then priority, then arrival; held tasks
// are passed over without blocking anyone.

/// One idle 40 GiB GPU running task 1 whole; tasks 2.. queue behind it,
/// each wanting the whole GPU, with the given priorities.
fn blocked_queue(priorities: &[i32]) -> Scheduler {
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    assert_eq!(launched(&queue(&mut core, 0.0, 1, Need::WholeGpu)).len(), 1);
    for (i, &priority) in priorities.iter().enumerate() {
        let demand = Demand {
            priority,
            ..Demand::new(Need::WholeGpu)
        };
        let task = TaskId(i as u64 + 2);
        assert!(core.step(s(1.0), Event::Queued { task, demand }).is_empty());
    }
    core
}

/// Ends the running task `id` and returns what launched next.
fn finish(core: &mut Scheduler, now: f64, id: u64) -> Vec<u64> {
    exit_with(core, now, id, Exit::Success)
}

/// The running task `id` exits at `now` as `exit`; what launched next.
fn exit_with(core: &mut Scheduler, now: f64, id: u64, exit: Exit) -> Vec<u64> {
    let exited = Event::Exited {
        task: TaskId(id),
        exit,
    };
    launched(&core.step(s(now), exited))
        .into_iter()
        .map(|(t, _)| t)
        .collect()
}

#[test]
fn higher_priority_goes_first_and_equals_keep_their_arrival_order() {
    // Tasks 2, 3, 4 with priorities 0, 5, 5: 3 then 4 (same priority,
    // earlier arrival) then 2.
    let mut core = blocked_queue(&[0, 5, 5]);
    assert_eq!(finish(&mut core, 2.0, 1), [3]);
    assert_eq!(finish(&mut core, 3.0, 3), [4]);
    assert_eq!(finish(&mut core, 4.0, 4), [2]);
}

#[test]
fn a_held_task_is_passed_over_and_runs_once_released() {
    let mut core = blocked_queue(&[0, 0]);
    core.step(
        s(1.5),
        Event::Hold {
            task: TaskId(2),
            held: true,
        },
    );
    let places = core.places();
    assert_eq!(places, [(TaskId(2), Place::Held), (TaskId(3), Place::Head)],);
    assert_eq!(finish(&mut core, 2.0, 1), [3]);
    // Nothing but a held task waits: no wake-up is needed.
    assert_eq!(core.next_deadline(), None);
    assert!(
        core.step(
            s(3.0),
            Event::Hold {
                task: TaskId(2),
                held: false
            }
        )
        .is_empty()
    );
    assert_eq!(finish(&mut core, 4.0, 3), [2]);
}

#[test]
fn recovery_goes_before_priority_and_places_say_who_is_ahead() {
    // Task 2 (priority 9) waits; task 1 crashes with OOM and recovers:
    // it goes first, and task 2 waits behind it, not by priority.
    let mut core = blocked_queue(&[9, 0]);
    core.step(
        s(1.5),
        Event::Prioritize {
            task: TaskId(3),
            priority: 10,
        },
    );
    let oom = Event::Exited {
        task: TaskId(1),
        exit: Exit::Oom,
    };
    let actions = core.step(s(2.0), oom);
    assert!(matches!(actions[0], Action::Recover { .. }), "{actions:?}");
    assert_eq!(launched(&actions), [(1, vec![0])]);
    let mut core = blocked_queue(&[9, 0]);
    core.step(
        s(1.5),
        Event::Prioritize {
            task: TaskId(3),
            priority: 10,
        },
    );
    assert_eq!(
        core.places(),
        [
            (TaskId(3), Place::Head),
            (
                TaskId(2),
                Place::Behind {
                    head: TaskId(3),
                    by: Precedence::Priority
                }
            ),
        ],
    );
}

/// Task `id` crashes with OOM at `now`; what launched next.
fn crash(core: &mut Scheduler, now: f64, id: u64) -> Vec<u64> {
    exit_with(core, now, id, Exit::Oom)
}

#[test]
fn only_a_tasks_first_rerun_goes_ahead_and_crashes_are_charged() {
    // Issue 23, item 5: a job that fakes OOM crashes re-ran ahead of
    // everyone, every time. Task 1 (priority 0) crashes while task 2
    // (priority 5) waits: its first re-run goes first, its second waits
    // behind task 2 by priority.
    let mut core = blocked_queue(&[5]);
    assert_eq!(crash(&mut core, 2.0, 1), [1], "the first re-run goes ahead");
    assert_eq!(crash(&mut core, 3.0, 1), [2], "the second one does not");
    assert_eq!(
        core.places(),
        [(TaskId(1), Place::Head)],
        "task 1 waits its turn, still queued"
    );

    // Fair share: user 8 held the GPU for 100 s; user 7's task then
    // crashed within a second and re-ran. Their next tasks wait with equal
    // priority: the crash's charge (600 GPU-seconds by default) puts user
    // 7 behind, though their GPU time alone was far less and their task
    // arrived first.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    let whole = |user| Demand {
        user: Some(user),
        ..Demand::new(Need::WholeGpu)
    };
    assert_eq!(launched(&submit(&mut core, 0.0, 10, whole(8))).len(), 1);
    assert!(submit(&mut core, 1.0, 1, whole(7)).is_empty());
    assert_eq!(finish(&mut core, 100.0, 10), [1]);
    assert_eq!(crash(&mut core, 100.1, 1), [1]);
    submit(&mut core, 100.2, 2, whole(7));
    submit(&mut core, 100.3, 3, whole(8));
    assert_eq!(finish(&mut core, 100.4, 1), [3]);
}

// Dependencies: a task waits, passed over, until the tasks it names have
// started or ended as it asks; one that can never be met fails, and so do
// the tasks that waited for it.

fn dependent(id: u64, on: u64, kind: DependencyKind) -> Event {
    let demand = Demand {
        after: vec![Dependency {
            kind,
            task: TaskId(on),
            started: false,
            ended: None,
        }],
        ..Demand::new(Need::Mib(GIB))
    };
    Event::Queued {
        task: TaskId(id),
        demand,
    }
}

#[test]
fn afterok_waits_for_success_and_lets_others_pass() {
    // Task 1 runs whole; 2 waits afterok on 1; 3 (no dependency) is not
    // blocked by 2, only by the busy GPU.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    queue(&mut core, 0.0, 1, Need::WholeGpu);
    core.step(s(1.0), dependent(2, 1, DependencyKind::AfterOk));
    queue(&mut core, 1.0, 3, Need::WholeGpu);
    assert_eq!(
        core.places(),
        [
            (
                TaskId(2),
                Place::Waiting(Dependency {
                    kind: DependencyKind::AfterOk,
                    task: TaskId(1),
                    started: true,
                    ended: None
                })
            ),
            (TaskId(3), Place::Head),
        ]
    );
    // 1 succeeds: 2, ready now and queued first, goes first; 3 (whole
    // GPU) waits for it.
    assert_eq!(finish(&mut core, 2.0, 1), [2]);
    assert_eq!(finish(&mut core, 3.0, 2), [3]);
}

#[test]
fn an_unmeetable_dependency_fails_the_task_and_its_own_dependents() {
    // 2 waits afterok on 1, 3 afterany on 2, 4 afternotok on 1. 1 fails:
    // 2 can never run and fails, which ends 3's wait (afterany), and 4
    // runs because 1 failed.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 4]);
    queue(&mut core, 0.0, 1, Need::Mib(GIB));
    core.step_all(
        s(1.0),
        [
            dependent(2, 1, DependencyKind::AfterOk),
            dependent(3, 2, DependencyKind::AfterAny),
            dependent(4, 1, DependencyKind::AfterNotOk),
        ],
    );
    let failed = Event::Exited {
        task: TaskId(1),
        exit: Exit::Failed("exit status 1".into()),
    };
    let actions = core.step(s(2.0), failed);
    let failures: Vec<(u64, String)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Fail { task, reason } => Some((task.0, reason.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(failures[0].0, 1);
    assert_eq!(
        failures[1],
        (
            2,
            "dependency never satisfied: afterok: task 1 did not succeed".into()
        )
    );
    let mut started: Vec<u64> = launched(&actions).into_iter().map(|(t, _)| t).collect();
    started.sort();
    assert_eq!(started, [3, 4]);
}

#[test]
fn after_waits_only_for_the_start_and_a_driver_known_end_counts() {
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB; 2]);
    // 2 waits `after` 1; both are placed in the same step, 1 first.
    let actions = core.step_all(
        s(0.0),
        [
            dependent(2, 1, DependencyKind::After),
            Event::Queued {
                task: TaskId(1),
                demand: Demand::new(Need::Mib(GIB)),
            },
        ],
    );
    let order: Vec<u64> = launched(&actions).into_iter().map(|(t, _)| t).collect();
    assert_eq!(order, [1, 2]);
    // A task the driver refused before queueing it ends 5's wait.
    core.step(s(1.0), dependent(5, 9, DependencyKind::AfterOk));
    let actions = core.step(
        s(2.0),
        Event::Ended {
            task: TaskId(9),
            succeeded: false,
        },
    );
    assert!(matches!(
        actions.as_slice(),
        [Action::Fail {
            task: TaskId(5),
            reason: FailReason::Dependency(_)
        }]
    ));
}

// Per-user limits and fair share.

fn user_task(core: &mut Scheduler, now: f64, id: u64, user: u32, need: Need) -> Vec<Action> {
    let demand = Demand {
        user: Some(user),
        ..Demand::new(need)
    };
    submit(core, now, id, demand)
}

#[test]
fn a_user_at_the_running_limit_waits_and_others_pass() {
    let mut r = rules(Policy::FirstFit);
    r.queue.max_running_per_user = 1;
    let mut core = Scheduler::new(r, &[40 * GIB; 4]);
    assert_eq!(
        launched(&user_task(&mut core, 0.0, 1, 7, Need::Mib(GIB))).len(),
        1
    );
    assert!(user_task(&mut core, 1.0, 2, 7, Need::Mib(GIB)).is_empty());
    assert_eq!(
        launched(&user_task(&mut core, 2.0, 3, 8, Need::Mib(GIB))).len(),
        1
    );
    match core.places().as_slice() {
        [(TaskId(2), Place::OverLimit(why))] => {
            assert!(why.contains("max_running_per_user"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(finish(&mut core, 3.0, 1), [2]);
}

#[test]
fn gpus_and_queued_jobs_are_limited_per_user() {
    let mut r = rules(Policy::FirstFit);
    r.queue.max_gpus_per_user = 2;
    r.queue.max_queued_per_user = 1;
    let mut core = Scheduler::new(r, &[40 * GIB; 4]);
    let two = Demand {
        gpus: 2,
        user: Some(7),
        ..Demand::new(Need::Mib(GIB))
    };
    let actions = submit(&mut core, 0.0, 1, two.clone());
    assert_eq!(launched(&actions).len(), 1);
    // A second two-GPU task would hold 4 > 2; a third one is beyond the
    // one queued job considered.
    core.step_all(
        s(1.0),
        [
            Event::Queued {
                task: TaskId(2),
                demand: two.clone(),
            },
            Event::Queued {
                task: TaskId(3),
                demand: two,
            },
        ],
    );
    let whys: Vec<String> = core
        .places()
        .into_iter()
        .map(|(_, p)| match p {
            Place::OverLimit(why) => why,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(whys[0].contains("max_gpus_per_user"), "{whys:?}");
    assert!(whys[1].contains("max_queued_per_user"), "{whys:?}");
}

#[test]
fn fair_share_puts_the_user_who_used_less_first() {
    // One GPU. User 7's task 1 runs 100 s; meanwhile 7 queues task 2 and
    // then user 8 queues task 3. When 1 ends, 3 goes first: 8 has used
    // nothing. Without fair share, 2 would (it arrived first).
    for (fair, first) in [(true, 3), (false, 2)] {
        let mut r = rules(Policy::FirstFit);
        r.queue.fair_share = fair;
        let mut core = Scheduler::new(r, &[40 * GIB]);
        user_task(&mut core, 0.0, 1, 7, Need::WholeGpu);
        user_task(&mut core, 10.0, 2, 7, Need::WholeGpu);
        user_task(&mut core, 20.0, 3, 8, Need::WholeGpu);
        if fair {
            assert_eq!(
                core.places()[1],
                (
                    TaskId(2),
                    Place::Behind {
                        head: TaskId(3),
                        by: Precedence::FairShare
                    }
                )
            );
        }
        assert_eq!(finish(&mut core, 100.0, 1), [first]);
    }
}

// Backfill.

fn limited(id: u64, gpus: u32, limit_s: Option<u64>) -> Event {
    Event::Queued {
        task: TaskId(id),
        demand: Demand {
            gpus,
            time_limit: limit_s.map(Duration::from_secs),
            ..Demand::new(Need::WholeGpu)
        },
    }
}

#[test]
fn backfill_starts_what_ends_before_the_heads_reservation_and_nothing_else() {
    // Two GPUs. Task 1 (limit 100 s) holds GPU 0. Task 2 needs both GPUs
    // whole: reserved from t=100 on GPUs 0 and 1. Task 3 (50 s) ends by
    // then and starts on GPU 1; task 4 (200 s) and task 5 (no limit)
    // would hold GPU 1 past t=100 and wait.
    for backfill in [true, false] {
        let mut r = rules(Policy::Exclusive);
        r.queue.backfill = backfill;
        let mut core = Scheduler::new(r, &[40 * GIB; 2]);
        assert_eq!(
            launched(&core.step(s(0.0), limited(1, 1, Some(100)))).len(),
            1
        );
        let actions = core.step_all(
            s(1.0),
            [
                limited(2, 2, Some(10)),
                limited(3, 1, Some(50)),
                limited(4, 1, Some(200)),
                limited(5, 1, None),
            ],
        );
        let started: Vec<u64> = launched(&actions).into_iter().map(|(t, _)| t).collect();
        match backfill {
            true => assert_eq!(started, [3]),
            false => assert!(started.is_empty()),
        }
        assert!(!core.backfill_delays_head());
    }
}

#[test]
fn a_backfilled_task_that_overruns_is_seen_delaying_the_head() {
    // History says task 3 runs 50 s, but it is still there when task 1
    // ends at 100 s: the head could start but for it.
    let mut r = rules(Policy::Exclusive);
    r.queue.backfill = true;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(s(0.0), limited(1, 1, Some(100)));
    let overrunning = Demand {
        history: Some(Duration::from_secs(50)),
        ..Demand::new(Need::WholeGpu)
    };
    let actions = core.step_all(
        s(1.0),
        [
            limited(2, 2, None),
            Event::Queued {
                task: TaskId(3),
                demand: overrunning,
            },
        ],
    );
    assert_eq!(launched(&actions), [(3, vec![1])]);
    let exited = Event::Exited {
        task: TaskId(1),
        exit: Exit::Success,
    };
    assert!(launched(&core.step(s(100.0), exited)).is_empty());
    assert!(core.backfill_delays_head());
}
