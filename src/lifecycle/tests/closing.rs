//! Closings: an ended task reaches `done/` or `failed/` however long the
//! disk refuses, never twice, and is never dropped.

use super::*;

/// A task that ran and ended with `exit` while the disk was full.
fn ended_on_a_full_disk(exit: Exit) -> (Story, TaskName) {
    let mut story = Story::new();
    let a = story.submit(task(1, "a", ALICE, 4));
    story.world.disk_full = true;
    story.later(5.0).exits(&a, exit, 2);
    (story, a)
}

#[test]
fn an_ended_task_the_disk_refuses_stays_in_hand_and_lands_once_there_is_room() {
    let (mut story, a) = ended_on_a_full_disk(Exit::Success);
    assert_eq!(story.state(&a), Some(State::Running));
    assert!(story.life.closing.contains_key(&1));
    assert!(story.life.tasks.is_empty(), "the core is done with it");
    story.world.disk_full = false;
    story.later(0.3);
    story.life.retry_due(story.now, &mut story.world);
    assert_eq!(story.state(&a), Some(State::Done));
    assert!(story.life.closing.is_empty());
    assert_eq!(story.outcome(&a), Some(("done".into(), None)));
}

#[test]
fn a_closing_is_not_retried_before_its_time() {
    let (mut story, a) = ended_on_a_full_disk(Exit::Success);
    story.world.disk_full = false;
    story.later(0.1);
    story.life.retry_due(story.now, &mut story.world);
    assert_eq!(story.state(&a), Some(State::Running), "250 ms first");
    assert_eq!(story.life.next_retry(), Some(secs(6.0) + secs(0.25)));
}

#[test]
fn closing_retries_back_off_while_the_disk_stays_full() {
    let (mut story, _) = ended_on_a_full_disk(Exit::Success);
    let mut delays = Vec::new();
    for _ in 0..4 {
        let next = story.life.next_retry().unwrap();
        delays.push(next.saturating_sub(story.now.at));
        story.now.at = next;
        story.life.retry_due(story.now, &mut story.world);
    }
    assert_eq!(
        delays,
        [secs(0.25), secs(0.5), secs(1.0), secs(2.0)],
        "doubling"
    );
    assert!(story.life.closing.contains_key(&1), "never given up");
}

#[test]
fn a_move_that_renamed_but_failed_after_is_finished_where_the_task_already_is() {
    let (mut story, a) = ended_on_a_full_disk(Exit::Failed("exit status 2".into()));
    // The rename happened; the directory sync after it failed.
    story.world.dirs.insert(a.to_string(), State::Failed);
    story.world.disk_full = false;
    story.later(1.0);
    story.life.retry_due(story.now, &mut story.world);
    assert!(story.life.closing.is_empty());
    assert_eq!(story.life.ended.get(1), Some(State::Failed));
    assert!(story.world.reasons[a.as_str()].contains("exit status 2"));
}

#[test]
fn a_closing_whose_directory_vanished_is_given_up_not_retried_forever() {
    let (mut story, a) = ended_on_a_full_disk(Exit::Success);
    story.world.dirs.remove(a.as_str());
    story.later(1.0);
    story.life.retry_due(story.now, &mut story.world);
    assert!(story.life.closing.is_empty());
    assert_eq!(story.life.next_retry(), None);
}

#[test]
fn an_oom_crash_on_a_full_disk_reruns_from_running_where_the_directory_stayed() {
    let (story, a) = ended_on_a_full_disk(Exit::Oom);
    assert_eq!(story.state(&a), Some(State::Running));
    // Relaunched from running/ at once: a start needs no move there.
    assert_eq!(
        story.world.started().last(),
        Some(&("000001-a".into(), 2, vec![0]))
    );
}

#[test]
fn a_notification_waits_for_the_move_it_announces() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.job.notify = Some("notify-send done".into());
    let a = story.submit(t);
    story.world.disk_full = true;
    story.later(5.0).exits(&a, Exit::Success, 1);
    assert!(
        !story
            .world
            .did()
            .iter()
            .any(|d| matches!(d, Did::Notified(..)))
    );
    story.world.disk_full = false;
    story.later(1.0);
    story.life.retry_due(story.now, &mut story.world);
    assert!(
        story
            .world
            .did()
            .contains(&Did::Notified(a.to_string(), State::Done))
    );
}

#[test]
fn a_task_cancelled_while_waiting_lands_in_failed_from_pending() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.record.held = true;
    let a = story.submit(t);
    assert_eq!(
        story.asks(ALICE, "000001-a"),
        Answer::Done("000001-a: cancelled while waiting".into())
    );
    assert!(
        story
            .world
            .did()
            .contains(&Did::Moved(a.to_string(), State::Pending, State::Failed))
    );
}
