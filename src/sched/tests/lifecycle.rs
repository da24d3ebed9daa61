//! A task's life: OOM crashes and recovery, retry limits, failures and
//! cancellation, restarts, new rules, MIG instances, launches that could not
//! start, wall-time limits.

use super::*;

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
            assert!(
                why.to_string().starts_with("magm: GPU 3 (35GiB free"),
                "{why}"
            );
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
    // What keeps the GPU from being idle is no task of carma's: said, so
    // that whoever reads the status can look for the process.
    assert!(
        waiting
            .why
            .contains("not idle: 4GiB in use by no task of carma's"),
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
    let why = unplaceable(&actions);
    assert!(why.contains("1 not cut into MIG instances"), "{why}");
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
