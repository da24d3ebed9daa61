//! Users' requests: who may do what, what each does, and what a request
//! that cannot act yet or at all comes to.

use super::*;
use crate::spool::status::Verdict;

/// A story with alice's task 1 held (waiting, never launched) and bob's
/// task 2 running.
fn alice_waits_bob_runs() -> (Story, TaskName, TaskName) {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.record.held = true;
    let a = story.submit(t);
    let b = story.submit(task(2, "b", BOB, 4));
    assert!(story.running(&b));
    (story, a, b)
}

fn refused(answer: &Answer, says: &str) -> bool {
    matches!(answer, Answer::Refused(why) if why.contains(says))
}

#[test]
fn cancelling_a_running_task_asks_its_supervisor_and_its_end_fails_it_as_cancelled() {
    let (mut story, _, b) = alice_waits_bob_runs();
    let answer = story.asks(BOB, "000002-b");
    assert_eq!(
        answer,
        Answer::Done("000002-b: cancelling: its job was asked to stop".into())
    );
    assert!(story.world.did().contains(&Did::Stopped(b.to_string(), 1)));
    story.later(1.0).exits(&b, Exit::Cancelled, 1);
    assert_eq!(story.state(&b), Some(State::Failed));
    assert!(story.outcome(&b).unwrap().1.unwrap().contains("cancel"));
}

#[test]
fn a_cancel_before_the_supervisor_said_who_it_is_waits_and_then_acts() {
    let (mut story, _, _) = alice_waits_bob_runs();
    story.world.stop = Some(Stop::NotYet);
    assert_eq!(story.asks(BOB, "2"), Answer::Wait);
    story.world.stop = None;
    assert!(matches!(story.asks(BOB, "2"), Answer::Done(_)));
}

#[test]
fn a_cancel_that_cannot_signal_is_refused_saying_why_and_one_too_late_says_so() {
    let (mut story, _, _) = alice_waits_bob_runs();
    story.world.stop = Some(Stop::Failed("Operation not permitted".into()));
    assert!(refused(
        &story.asks(BOB, "2"),
        "cannot signal 000002-b's supervisor"
    ));
    story.world.stop = Some(Stop::Over);
    assert_eq!(
        story.asks(BOB, "2"),
        Answer::Done("000002-b: its run already ended".into())
    );
}

#[test]
fn nobody_acts_on_another_users_task_but_root_and_the_daemons_user_may() {
    let (mut story, _, b) = alice_waits_bob_runs();
    let answer = story.asks(ALICE, "000002-b");
    assert!(refused(
        &answer,
        "belongs to uid 1002; only its owner or root may cancel"
    ));
    assert!(!story.world.did().contains(&Did::Stopped(b.to_string(), 1)));
    assert!(matches!(story.asks(0, "hold.000001-a"), Answer::Done(_)));
    assert!(matches!(
        story.asks(DAEMON, "release.000001-a"),
        Answer::Done(_)
    ));
}

#[test]
fn a_hold_is_written_down_before_the_core_hears_of_it_and_a_release_launches() {
    let (mut story, a, _) = alice_waits_bob_runs();
    assert!(story.record(&a).held);
    assert_eq!(
        story.asks(ALICE, "hold.000001-a"),
        Answer::Done("000001-a: held already".into())
    );
    assert_eq!(
        story.asks(ALICE, "release.000001-a"),
        Answer::Done("000001-a: released".into())
    );
    assert!(!story.record(&a).held);
    assert!(story.running(&a));
}

#[test]
fn a_hold_the_disk_refuses_is_refused_and_changes_nothing() {
    let mut story = Story::new();
    let blocker = story.submit(task(1, "a", ALICE, 30));
    let b = story.submit(task(2, "b", ALICE, 30));
    let c = story.submit(task(3, "c", ALICE, 30));
    assert!(story.running(&blocker) && story.running(&b) && !story.running(&c));
    story.world.disk_full = true;
    assert!(refused(
        &story.asks(ALICE, "hold.000003-c"),
        "cannot write 000003-c's record"
    ));
    assert!(!story.life.tasks.get(&3).unwrap().record.held);
    story.world.disk_full = false;
    story.later(1.0).exits(&b, Exit::Success, 1);
    assert!(story.running(&c), "not held: it runs once there is room");
}

#[test]
fn a_running_task_is_not_held() {
    let (mut story, _, _) = alice_waits_bob_runs();
    assert!(refused(
        &story.asks(BOB, "hold.000002-b"),
        "runs already (carma cancel stops it)"
    ));
}

#[test]
fn users_lower_their_priority_root_raises_it_and_the_record_keeps_it() {
    let (mut story, a, _) = alice_waits_bob_runs();
    assert!(refused(
        &story.asks(ALICE, "priority.5.000001-a"),
        "from -1000 to 0"
    ));
    assert_eq!(
        story.asks(ALICE, "priority.-3.000001-a"),
        Answer::Done("000001-a: priority 0 -> -3".into())
    );
    assert_eq!(story.record(&a).priority, Some(-3));
    assert_eq!(
        story.asks(0, "priority.5.000001-a"),
        Answer::Done("000001-a: priority -3 -> 5".into())
    );
    assert_eq!(story.life.tasks.get(&1).unwrap().priority, 5);
    // The same again writes nothing: a full disk does not refuse it.
    story.world.disk_full = true;
    assert_eq!(
        story.asks(0, "priority.5.000001-a"),
        Answer::Done("000001-a: priority 5 already".into())
    );
}

#[test]
fn a_requeued_running_task_is_stopped_then_waits_again_as_if_just_submitted() {
    let (mut story, _, b) = alice_waits_bob_runs();
    assert_eq!(
        story.asks(BOB, "requeue.000002-b"),
        Answer::Done("000002-b: its job is being stopped; then it waits again".into())
    );
    assert!(story.record(&b).requeue, "recorded before the stop");
    story.later(1.0).exits(&b, Exit::Cancelled, 1);
    assert_eq!(story.state(&b), Some(State::Pending));
    let record = story.record(&b);
    assert!(!record.requeue && record.outcome.is_none() && record.gpus.is_empty());
    assert!(
        story
            .world
            .did()
            .contains(&Did::TookIn(b.to_string(), State::Pending))
    );
}

#[test]
fn a_waiting_task_is_not_requeued() {
    let (mut story, _, _) = alice_waits_bob_runs();
    assert!(refused(
        &story.asks(ALICE, "requeue.000001-a"),
        "waits in the queue already"
    ));
}

#[test]
fn an_ended_task_is_requeued_by_its_owner_only_its_reason_gone() {
    let (mut story, _, b) = alice_waits_bob_runs();
    story
        .later(1.0)
        .exits(&b, Exit::Failed("exit status 1".into()), 1);
    assert!(story.world.reasons.contains_key(b.as_str()));
    assert!(refused(&story.asks(ALICE, "requeue.2"), "is not yours"));
    assert_eq!(
        story.asks(BOB, "requeue.2"),
        Answer::Done("000002-b: requeued from failed/; it waits in pending/".into())
    );
    assert_eq!(story.state(&b), Some(State::Pending));
    assert!(!story.world.reasons.contains_key(b.as_str()));
    assert_eq!(story.life.ended.get(2), None);
    assert!(
        story
            .world
            .did()
            .contains(&Did::TookIn(b.to_string(), State::Pending))
    );
}

#[test]
fn a_requeue_that_cannot_move_its_task_leaves_it_as_it_ended() {
    let (mut story, _, b) = alice_waits_bob_runs();
    story
        .later(1.0)
        .exits(&b, Exit::Failed("exit status 1".into()), 1);
    let ended = story.record(&b).clone();
    story.world.moves_fail = true;
    assert!(refused(&story.asks(BOB, "requeue.2"), "cannot move"));
    story.world.moves_fail = false;
    assert_eq!(story.state(&b), Some(State::Failed));
    assert_eq!(*story.record(&b), ended, "its outcome kept");
    assert!(
        story.world.reasons.contains_key(b.as_str()),
        "its reason kept"
    );
}

#[test]
fn a_request_for_a_task_on_its_way_out_is_refused_but_a_requeue_waits_for_it() {
    let (mut story, _, b) = alice_waits_bob_runs();
    story.world.disk_full = true;
    story.later(1.0).exits(&b, Exit::Success, 1);
    assert!(story.life.closing.contains_key(&2));
    assert!(refused(&story.asks(BOB, "hold.2"), "already ended"));
    assert_eq!(story.asks(BOB, "requeue.2"), Answer::Wait);
}

#[test]
fn a_request_for_an_ended_task_says_where_it_ended() {
    let (mut story, _, b) = alice_waits_bob_runs();
    story.later(1.0).exits(&b, Exit::Success, 1);
    assert!(refused(
        &story.asks(BOB, "000002-b"),
        "000002-b already ended (it is in done/)"
    ));
}

#[test]
fn a_request_for_a_task_submitted_in_the_same_instant_waits_for_it() {
    let mut story = Story::new();
    story.world.dirs.insert("000007-new".into(), State::Pending);
    assert_eq!(story.asks(ALICE, "000007-new"), Answer::Wait);
}

#[test]
fn requests_naming_no_task_are_counted_and_a_flood_is_refused_for_a_minute() {
    let mut story = Story::new();
    assert!(refused(
        &story.asks(ALICE, "000099-nothing"),
        "no task 000099-nothing"
    ));
    for _ in 1..crate::lifecycle::requests::JUNK_PER_MINUTE {
        story.asks(ALICE, "junk");
    }
    assert!(story.life.junk.refuses(ALICE, story.now.at));
    assert!(!story.life.junk.refuses(BOB, story.now.at));
    story.later(61.0);
    assert!(!story.life.junk.refuses(ALICE, story.now.at));
}

#[test]
fn a_user_changing_a_task_in_a_loop_is_refused_for_the_rest_of_the_minute() {
    // Each answer may write a record and the status file and log a line.
    let (mut story, a, _) = alice_waits_bob_runs();
    let limit = crate::lifecycle::requests::ASKED_PER_MINUTE;
    for i in 0..limit {
        let answer = story.asks(ALICE, &format!("priority.-{}.{a}", i % 2));
        assert!(matches!(answer, Answer::Done(_)), "{i}: {answer:?}");
    }
    let writes = story.world.did().len();
    assert!(refused(
        &story.asks(ALICE, &format!("priority.-5.{a}")),
        &format!("more than {limit} requests within a minute")
    ));
    assert_eq!(story.world.did().len(), writes, "a refusal writes nothing");
    // Root's scripts are not held to it.
    assert!(matches!(
        story.asks(0, &format!("priority.-5.{a}")),
        Answer::Done(_)
    ));
    assert!(!refused(
        &story.asks(BOB, "hold.000002-b"),
        "within a minute"
    ));
    story.later(61.0);
    assert!(matches!(
        story.asks(ALICE, &format!("priority.-5.{a}")),
        Answer::Done(_)
    ));
}

#[test]
fn a_request_names_a_task_by_number_or_full_name_but_not_by_a_near_miss() {
    let (mut story, _, _) = alice_waits_bob_runs();
    assert!(matches!(story.asks(ALICE, "release.1"), Answer::Done(_)));
    assert!(refused(&story.asks(ALICE, "hold.000001-x"), "no task"));
}

#[test]
fn cancelling_an_array_cancels_the_requesters_elements_and_waits_while_it_is_made() {
    let mut story = Story::new();
    let member = |index| crate::spool::record::ArrayMember {
        job: 1,
        index,
        at_once: None,
        expanded: true,
    };
    let mut names = Vec::new();
    for (seq, owner) in [(1, ALICE), (2, ALICE), (3, ALICE)] {
        let mut t = task(seq, "arr", owner, 4);
        t.record.array = Some(member(seq as u32));
        t.record.held = true;
        names.push(story.submit(t));
    }
    // An element made and not yet taken in: not yet. (Another task
    // waiting there, of no array, is no reason to wait.)
    let mut untaken = TaskRecord::new(TaskName::new(4, "arr"), "arr.rad", 0.0);
    untaken.array = Some(member(4));
    story.world.dirs.insert("000004-arr".into(), State::Pending);
    story.world.records.insert("000004-arr".into(), untaken);
    let other = TaskRecord::new(TaskName::new(5, "x"), "x.rad", 0.0);
    story.world.dirs.insert("000005-x".into(), State::Pending);
    story.world.records.insert("000005-x".into(), other);
    assert_eq!(story.asks(ALICE, "cancel-array.000002-arr"), Answer::Wait);
    story.world.dirs.remove("000004-arr");
    assert!(refused(
        &story.asks(BOB, "cancel-array.000002-arr"),
        "belongs to uid 1001"
    ));
    // Found settled, the array is not looked for in `pending/` again: a
    // user's requests about it listed all of it each.
    let listed = story.world.listings.get();
    assert!(refused(
        &story.asks(BOB, "cancel-array.000003-arr"),
        "belongs to uid 1001"
    ));
    assert_eq!(story.world.listings.get(), listed);
    assert_eq!(
        story.asks(ALICE, "cancel-array.000002-arr"),
        Answer::Done("array 1: 3 unfinished tasks cancelled".into())
    );
    for name in &names {
        assert_eq!(story.state(name), Some(State::Failed));
    }
}

#[test]
fn cancel_array_on_a_task_of_no_array_is_refused() {
    let (mut story, _, _) = alice_waits_bob_runs();
    assert!(refused(
        &story.asks(ALICE, "cancel-array.1"),
        "not an element of an array"
    ));
}

#[test]
fn verdicts_keep_the_last_minute_and_a_few_per_user() {
    let mut verdicts = Verdicts::default();
    let verdict = |uid, at| Verdict {
        request: "hold.1".into(),
        uid,
        at,
        refused: false,
        said: "held".into(),
    };
    for i in 0..40 {
        verdicts.add(verdict(ALICE, 100.0 + f64::from(i) * 0.1));
    }
    verdicts.add(verdict(BOB, 104.0));
    let recent = verdicts.recent();
    assert_eq!(recent.iter().filter(|v| v.uid == ALICE).count(), 32);
    assert_eq!(recent.last().unwrap().uid, BOB);
    verdicts.add(verdict(BOB, 170.0));
    assert_eq!(verdicts.recent().len(), 1, "older than a minute: gone");
}

#[test]
fn a_users_ended_tasks_keep_copies_up_to_the_cap_the_oldest_going_first() {
    // Each task's copies take 100 bytes; a user's ended tasks may keep 250.
    let mut story = Story::new();
    story.life.kept.cap = 250;
    let tasks: Vec<TaskName> = [(1, ALICE), (2, BOB), (3, ALICE), (4, ALICE), (5, 0)]
        .into_iter()
        .map(|(seq, owner)| story.submit(task(seq, "t", owner, 1)))
        .collect();
    for name in &tasks {
        story.later(1.0).exits(name, Exit::Success, 1);
        assert_eq!(story.state(name), Some(State::Done), "{name}");
    }
    let dropped: Vec<&Did> = story
        .world
        .did()
        .iter()
        .filter(|d| matches!(d, Did::DroppedCopies(..)))
        .collect();
    // Alice's third ended task took her past the cap: her first's copies
    // went, and nobody else's (Bob is under it, root is not counted).
    assert_eq!(
        dropped,
        vec![&Did::DroppedCopies(tasks[0].to_string(), State::Done)]
    );
    assert!(refused(
        &story.asks(ALICE, "requeue.000001-t"),
        "were not kept"
    ));
    assert_eq!(
        story.asks(ALICE, "requeue.000003-t"),
        Answer::Done("000003-t: requeued from done/; it waits in pending/".into())
    );
}
