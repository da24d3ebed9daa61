//! Queue order: priorities, holds, recovery first, dependencies, per-user
//! limits, fair share and backfill.

use super::*;

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
fn a_task_named_many_times_by_many_dependents_fails_each_once() {
    // 2,000 tasks, each naming task 1 on 300 lines: every end of one of
    // them went over all 600,000 entries, and task 1's failure over that
    // many again per dependent.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    queue(&mut core, 0.0, 1, Need::WholeGpu);
    let once = Dependency {
        kind: DependencyKind::AfterOk,
        task: TaskId(1),
        started: false,
        ended: None,
    };
    let dependents = (2..2002).map(|id| Event::Queued {
        task: TaskId(id),
        demand: Demand {
            after: vec![once; 300],
            ..Demand::new(Need::Mib(GIB))
        },
    });
    core.step_all(s(1.0), dependents);
    let failed = Event::Exited {
        task: TaskId(1),
        exit: Exit::Failed("exit status 1".into()),
    };
    let actions = core.step(s(2.0), failed);
    let mut failures: Vec<u64> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Fail { task, .. } => Some(task.0),
            _ => None,
        })
        .collect();
    failures.sort();
    assert_eq!(failures, (1..2002).collect::<Vec<_>>());
    assert_eq!(core.queued(), (0, 0));
}

#[test]
fn a_task_queued_just_after_its_dependency_ended_hears_of_the_end() {
    // The driver read task 1 as running when it took task 2 in, and fed
    // 1's end first: 2 waited for an end the core had already forgotten.
    let mut core = Scheduler::new(rules(Policy::FirstFit), &[40 * GIB]);
    queue(&mut core, 0.0, 1, Need::Mib(GIB));
    let mut waits = dependent(2, 1, DependencyKind::AfterOk);
    if let Event::Queued { demand, .. } = &mut waits {
        demand.after[0].started = true;
    }
    let ended = Event::Exited {
        task: TaskId(1),
        exit: Exit::Success,
    };
    let actions = core.step_all(s(1.0), [ended, waits]);
    assert_eq!(launched(&actions), [(2, vec![0])]);
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
            let why = why.to_string();
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
            Place::OverLimit(why) => why.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(whys[0].contains("max_gpus_per_user"), "{whys:?}");
    assert!(whys[1].contains("max_queued_per_user"), "{whys:?}");
    // A task asking for more than a user may hold at all fails at once:
    // it waited for good, one of its user's places among their tasks.
    let three = Demand {
        gpus: 3,
        user: Some(8),
        ..Demand::new(Need::Mib(GIB))
    };
    let why = unplaceable(&submit(&mut core, 2.0, 4, three)).to_owned();
    assert!(why.contains("at most 2 (queue.max_gpus_per_user)"), "{why}");
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
fn a_newcomer_that_ends_in_time_is_backfilled_though_the_pass_before_started_nothing() {
    // Task 1 (1000 s) holds GPU 0; task 2, needing both GPUs, waits for
    // it; task 3 (2000 s) would outlast the reservation: that pass starts
    // nothing and leaves its memo. Task 4 (50 s) comes next and starts on
    // the empty GPU at once: under backfill any newcomer may help.
    let mut r = rules(Policy::Exclusive);
    r.queue.backfill = true;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    core.step(s(0.0), limited(1, 1, Some(1000)));
    let none = core.step_all(s(1.0), [limited(2, 2, Some(10)), limited(3, 1, Some(2000))]);
    assert!(launched(&none).is_empty());
    let actions = core.step(s(2.0), limited(4, 1, Some(50)));
    assert_eq!(launched(&actions), [(4, vec![1])]);
}

#[test]
fn backfill_looks_only_so_far_behind_the_head() {
    // As above, with two tasks (200 s) that cannot start before task 3
    // (50 s), which can: looking at two tasks behind the head, task 3 is
    // not reached; at three, or with no bound, it starts.
    for (most, started) in [(2, vec![]), (3, vec![3]), (0, vec![3])] {
        let mut r = rules(Policy::Exclusive);
        r.queue.backfill = true;
        r.queue.backfill_max_tested = most;
        let mut core = Scheduler::new(r, &[40 * GIB; 2]);
        core.step(s(0.0), limited(1, 1, Some(100)));
        let actions = core.step_all(
            s(1.0),
            [
                limited(2, 2, Some(10)),
                limited(4, 1, Some(200)),
                limited(5, 1, Some(200)),
                limited(3, 1, Some(50)),
            ],
        );
        let got: Vec<u64> = launched(&actions).into_iter().map(|(t, _)| t).collect();
        assert_eq!(got, started, "looking at {most}");
    }
}

#[test]
fn backfill_starts_no_task_whose_launch_pause_outlasts_the_shadow_time() {
    // Task 1 (limit 1000 s) holds GPU 0 from t=0; at 500 s task 2 needs
    // both GPUs whole (shadow time 1000 s) and task 3 (50 s) would end on
    // GPU 1 by then. Launched at 500 s it pauses the server for
    // launch_gap_s: 400 s are over by 1000 s and it starts; 600 s would
    // keep the head from starting at 1000 s and it waits. Either way the
    // head starts when task 1 ends.
    for (gap, backfilled) in [(400.0, vec![3]), (600.0, vec![])] {
        let mut r = rules(Policy::Exclusive);
        r.queue.backfill = true;
        r.placement.launch_gap_s = Seconds::of(gap);
        let mut core = Scheduler::new(r, &[40 * GIB; 2]);
        core.step(s(0.0), limited(1, 1, Some(1000)));
        let actions = core.step_all(s(500.0), [limited(2, 2, Some(10)), limited(3, 1, Some(50))]);
        let started: Vec<u64> = launched(&actions).into_iter().map(|(t, _)| t).collect();
        assert_eq!(started, backfilled, "gap {gap}");
        assert!(!core.backfill_delays_head(), "gap {gap}");
        if !backfilled.is_empty() {
            assert!(finish(&mut core, 550.0, 3).is_empty());
        }
        assert_eq!(finish(&mut core, 1000.0, 1), [2], "gap {gap}");
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

#[test]
fn a_task_that_would_share_a_gpu_is_not_backfilled_even_when_it_ends_in_time() {
    // Two GPUs, 30 GiB tasks 1 (100 s) and 2 (300 s) on one each; task 3
    // needs both whole: shadow time 300 s. Task 4 (1 GiB, 50 s) fits
    // beside task 1 and would end before it, but sharing slows task 1
    // (light tasks more than busy ones), which the head waits for: it
    // waits too. Once task 1 has ended, GPU 0 holds nothing and task 4
    // runs there alone, ending by the shadow time.
    let mut r = rules(Policy::FirstFit);
    r.queue.backfill = true;
    let mut core = Scheduler::new(r, &[40 * GIB; 2]);
    let task = |id: u64, need: Need, gpus: u32, run_s: u64| Event::Queued {
        task: TaskId(id),
        demand: Demand {
            gpus,
            history: Some(Duration::from_secs(run_s)),
            ..Demand::new(need)
        },
    };
    let actions = core.step_all(
        s(0.0),
        [
            task(1, Need::Mib(30 * GIB), 1, 100),
            task(2, Need::Mib(30 * GIB), 1, 300),
        ],
    );
    assert_eq!(launched(&actions), [(1, vec![0]), (2, vec![1])]);
    let actions = core.step_all(
        s(1.0),
        [
            task(3, Need::WholeGpu, 2, 10),
            task(4, Need::Mib(GIB), 1, 50),
        ],
    );
    assert!(launched(&actions).is_empty());
    let exited = Event::Exited {
        task: TaskId(1),
        exit: Exit::Success,
    };
    assert_eq!(launched(&core.step(s(100.0), exited)), [(4, vec![0])]);
    assert!(!core.backfill_delays_head());
}
