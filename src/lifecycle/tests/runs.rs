//! Runs: intake → place → launch → end, OOM recovery, failures, launches
//! that could not start.

use super::*;

#[test]
fn a_task_taken_in_runs_on_a_gpu_and_lands_in_done_with_its_peak_remembered() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    assert_eq!(story.world.started(), [("000001-a".into(), 1, vec![0])]);
    assert_eq!(story.state(&a), Some(State::Running));
    assert_eq!(story.record(&a).gpus, [0]);
    story.later(60.0).exits(&a, Exit::Success, 3);
    assert_eq!(story.state(&a), Some(State::Done));
    assert_eq!(story.outcome(&a), Some(("done".into(), None)));
    assert_eq!(story.record(&a).peak_mib, Some(3 * GIB));
    assert_eq!(story.record(&a).run_s, Some(60.0));
    assert!(
        story
            .world
            .did()
            .contains(&Did::Remembered(a.to_string(), 3 * GIB))
    );
    assert!(story.life.tasks.is_empty() && story.life.closing.is_empty());
    assert_eq!(story.life.ended.get(1), Some(State::Done));
}

#[test]
fn two_small_tasks_share_the_first_gpu_that_fits() {
    let mut story = Story::new();
    story.submit(task(1, "a", ALICE, 4));
    story.submit(task(2, "b", BOB, 4));
    let gpus: Vec<Vec<usize>> = story.world.started().into_iter().map(|s| s.2).collect();
    assert_eq!(gpus, [vec![0], vec![0]]);
}

#[test]
fn an_oom_crash_waits_in_recovery_and_runs_again_as_run_2() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    story.later(5.0).exits(&a, Exit::Oom, 4);
    // Moved first, counted second; then re-run at once (GPU 0 is idle).
    assert!(story.world.did().contains(&Did::Moved(
        a.to_string(),
        State::Running,
        State::Recovery
    )));
    assert_eq!(story.record(&a).crashes, 1);
    assert_eq!(
        story.world.started().last(),
        Some(&("000001-a".into(), 2, vec![0]))
    );
    story.later(60.0).exits(&a, Exit::Success, 5);
    assert_eq!(story.state(&a), Some(State::Done));
}

#[test]
fn oom_crashes_past_the_retry_limit_fail_the_task_with_its_count() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.demand.as_mut().unwrap().max_retries = Some(1);
    let a = story.submit(t);
    story.later(5.0).exits(&a, Exit::Oom, 4);
    assert!(story.running(&a));
    story.later(5.0).exits(&a, Exit::Oom, 4);
    assert_eq!(story.state(&a), Some(State::Failed));
    let (state, reason) = story.outcome(&a).unwrap();
    assert_eq!(state, "failed");
    assert!(reason.unwrap().contains("2"), "the crashes are counted");
    assert!(story.world.reasons.contains_key(a.as_str()));
    let counted = story.life.metrics.text(None, 0).unwrap();
    for line in ["carma_oom_crashes_total 2", "carma_oom_reruns_total 1"] {
        assert!(counted.lines().any(|l| l == line), "{line}:\n{counted}");
    }
}

#[test]
fn a_job_that_fails_goes_to_failed_with_its_reason_and_only_its_run_time_in_history() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    story
        .later(5.0)
        .exits(&a, Exit::Failed("exit status 1: ValueError".into()), 2);
    assert_eq!(story.state(&a), Some(State::Failed));
    assert!(story.world.reasons[a.as_str()].contains("ValueError"));
    let ended = story.life.endings.shared();
    let public = ended
        .iter()
        .find(|e| e.name == a)
        .and_then(|e| e.why.clone());
    assert!(
        public.is_some_and(|why| !why.contains("ValueError")),
        "everyone may read why it failed, not its stderr"
    );
    assert!(
        !story
            .world
            .did()
            .iter()
            .any(|d| matches!(d, Did::Remembered(..))),
        "a failed run's peak says nothing of what the job needs"
    );
    // How long it ran counts: backfill plans with the longest run seen,
    // and a user could otherwise teach it a short one with quick
    // successes, then run long and fail.
    assert_eq!(story.record(&a).run_s, Some(60.0));
    assert!(story.world.did().contains(&Did::RanFor(a.to_string(), 60)));
}

#[test]
fn a_job_stopped_at_its_time_limit_fails_saying_so() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    story.later(5.0).exits(&a, Exit::TimeLimit, 2);
    let (_, reason) = story.outcome(&a).unwrap();
    assert!(reason.unwrap().contains("time limit"));
}

#[test]
fn a_launch_that_cannot_start_waits_at_the_head_and_launches_pause_for_a_backoff() {
    let mut story = Story::new();
    story.world.no_start = Some("Too many open files".into());
    let a = story.submit(task(1, "a", ALICE, 4));
    assert!(story.world.started().is_empty());
    assert_eq!(story.state(&a), Some(State::Pending));
    let (main, recovery) = story.life.core.queued();
    assert_eq!(main + recovery, 1, "it waits");
    story.world.no_start = None;
    // Not before the backoff's first delay.
    story.later(0.1).step_with(vec![Event::Tick]);
    assert!(story.world.started().is_empty());
    story.later(0.2).step_with(vec![Event::Tick]);
    assert_eq!(story.world.started(), [("000001-a".into(), 1, vec![0])]);
}

#[test]
fn a_launch_whose_move_into_running_fails_leaves_the_task_where_it_waited() {
    let mut story = Story::new();
    story.world.moves_fail = true;
    let a = story.submit(task(1, "a", ALICE, 4));
    assert_eq!(story.state(&a), Some(State::Pending));
    assert_eq!(story.life.tasks.get(&1).unwrap().state, State::Pending);
    story.world.moves_fail = false;
    story.later(1.0).step_with(vec![Event::Tick]);
    assert!(story.running(&a));
}

#[test]
fn a_run_whose_supervisor_never_started_the_job_goes_back_and_runs_as_run_2() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    let end = RunEnd::NotStarted("its supervisor ended before it started the job".into());
    story.life.run_ended(story.now, 1, end, &mut story.world);
    assert_eq!(story.state(&a), Some(State::Pending));
    story.later(1.0).step_with(vec![Event::Tick]);
    assert_eq!(
        story.world.started().last(),
        Some(&("000001-a".into(), 2, vec![0]))
    );
}

#[test]
fn a_crashed_task_whose_relaunch_fails_goes_back_to_recovery_not_pending() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    story.later(5.0).exits(&a, Exit::Oom, 4);
    assert!(story.running(&a));
    let end = RunEnd::NotStarted("no memory".into());
    story.life.run_ended(story.now, 1, end, &mut story.world);
    assert_eq!(story.state(&a), Some(State::Recovery));
}

#[test]
fn only_the_current_run_of_a_running_task_is_current() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    assert!(story.life.is_current(1, 1));
    assert!(!story.life.is_current(1, 2) && !story.life.is_current(2, 1));
    story.later(5.0).exits(&a, Exit::Oom, 4);
    assert!(!story.life.is_current(1, 1) && story.life.is_current(1, 2));
}

#[test]
fn the_end_of_a_run_the_daemon_does_not_know_changes_nothing() {
    let mut story = Story::new();
    let end = RunEnd::Exited {
        exit: Exit::Success,
        peak_mib: None,
        run_s: None,
    };
    story.life.run_ended(story.now, 42, end, &mut story.world);
    story.step();
    assert!(story.world.did().is_empty());
}

#[test]
fn a_job_with_notify_is_notified_once_it_has_landed_and_one_without_is_not() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.job.notify = Some("mail -s done alice".into());
    let a = story.submit(t);
    let b = story.submit(task(2, "b", ALICE, 4));
    story.later(5.0).exits(&a, Exit::Success, 1);
    story.exits(&b, Exit::Success, 1);
    let did = story.world.did();
    let landed = did
        .iter()
        .position(|d| *d == Did::Moved(a.to_string(), State::Running, State::Done))
        .unwrap();
    let notified = did
        .iter()
        .position(|d| *d == Did::Notified(a.to_string(), State::Done))
        .unwrap();
    assert!(landed < notified);
    assert!(!did.contains(&Did::Notified(b.to_string(), State::Done)));
}

#[test]
fn a_task_refused_at_intake_goes_to_failed_with_its_reason_and_dependents_learn() {
    let mut story = Story::new();
    let name = TaskName::new(1, "bad");
    let mut dependent = task(2, "next", ALICE, 4);
    dependent.demand.as_mut().unwrap().after = vec![crate::sched::Dependency {
        kind: crate::sched::DependencyKind::AfterOk,
        task: name.id(),
        started: false,
        ended: None,
    }];
    let next = story.submit(dependent);
    assert!(story.world.started().is_empty(), "it waits for task 1");
    story.world.dirs.insert(name.to_string(), State::Pending);
    let record = TaskRecord::new(&name, "job.rad", 0.0);
    story.life.refuse(
        story.now,
        (&name, State::Pending, 0, 0),
        record,
        &super::super::Refusal::InvalidJob.because("job.rad:3:1: expected a directive"),
        &mut story.world,
    );
    story.step();
    assert_eq!(story.state(&name), Some(State::Failed));
    assert!(story.world.reasons[name.as_str()].contains("job.rad:3:1"));
    assert_eq!(
        story.state(&next),
        Some(State::Failed),
        "it never can start"
    );
}

#[test]
fn a_held_task_is_not_launched_and_one_its_owner_took_back_is_forgotten() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.record.held = true;
    let a = story.submit(t);
    assert!(story.world.started().is_empty());
    story.world.dirs.remove(a.as_str());
    story.life.forget(&a);
    story.step();
    assert!(story.life.tasks.is_empty());
    assert_eq!(story.life.core.queued(), (0, 0));
}

#[test]
fn a_task_asking_for_more_gpus_than_the_server_has_fails_as_unplaceable() {
    let mut story = Story::new();
    let mut t = task(1, "huge", ALICE, 4);
    t.demand.as_mut().unwrap().gpus = 3;
    let a = story.submit(t);
    assert_eq!(story.state(&a), Some(State::Failed));
    assert!(story.world.started().is_empty());
}

/// The names of the runs `story`'s daemon would kill now, with why.
fn overdue(story: &Story) -> Vec<(String, u32, &'static str)> {
    // The memory world launches with graces of 10 s (cancel) and 5 s.
    let mut overdue: Vec<_> = story
        .life
        .overdue(story.now)
        .into_iter()
        .map(|o| (o.name.to_string(), o.run, o.why))
        .collect();
    overdue.sort();
    overdue
}

#[test]
fn a_run_is_overdue_only_well_past_its_time_limit_or_its_cancellation_and_their_graces() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.demand.as_mut().unwrap().time_limit = Some(Duration::from_secs(60));
    let a = story.submit(t);
    let b = story.submit(task(2, "b", BOB, 4));
    // Both launched now; a's limit and its grace end 65 s later, counted
    // on the core's clock (a wall clock set forward moves nothing).
    let margin = OVERDUE_MARGIN.as_secs_f64();
    story.later(65.0 + margin - 1.0);
    assert!(overdue(&story).is_empty());
    // The wall clock set a day forward (NTP at boot, a VM paused).
    story.now.unix += 86_400.0;
    assert!(overdue(&story).is_empty());
    story.later(1.0);
    assert_eq!(overdue(&story), [(a.to_string(), 1, "its time limit")]);
    // b has no limit: only a cancellation makes it due, after its grace.
    assert!(matches!(story.asks(BOB, "000002-b"), Answer::Done(_)));
    story.later(10.0 + margin - 1.0);
    assert_eq!(overdue(&story).len(), 1);
    // A second cancel does not put the deadline off.
    assert!(matches!(story.asks(BOB, "000002-b"), Answer::Done(_)));
    story.later(1.0);
    assert_eq!(overdue(&story)[1], (b.to_string(), 1, "a cancellation"));
    // An ended run is nobody's to kill.
    story.exits(&a, Exit::TimeLimit, 1);
    story.exits(&b, Exit::Cancelled, 1);
    assert!(overdue(&story).is_empty());
}

#[test]
fn a_run_after_a_crash_keeps_no_deadline_of_the_run_before() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    // Asked to stop, it crashed of OOM first: it runs again.
    assert!(matches!(story.asks(ALICE, "000001-a"), Answer::Done(_)));
    story.later(1.0).exits(&a, Exit::Oom, 4);
    assert_eq!(story.world.started().last().unwrap().1, 2, "run 2 started");
    story.later(1000.0);
    assert!(overdue(&story).is_empty());
}

#[test]
fn a_start_that_fails_as_its_user_is_retried_a_few_times_then_fails_the_task() {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    let tries = crate::lifecycle::USER_START_TRIES;
    for _ in 1..tries {
        let end = story.life.failed_as_its_user(a.seq(), "EIO".into());
        assert_eq!(end, RunEnd::NotStarted("EIO".into()));
    }
    let end = story.life.failed_as_its_user(a.seq(), "EIO".into());
    let RunEnd::Exited {
        exit: Exit::Failed(why),
        ..
    } = end
    else {
        panic!("{end:?}");
    };
    assert_eq!(why, format!("could not start {tries} times: EIO"));
}
