//! Restarts: a new daemon is the same machine fed what the spool holds.
//! Killed after any step of a task's life, it finishes the task once,
//! where it belongs.

use super::*;

impl Story {
    /// The daemon dies and a new one starts: a fresh lifecycle fed what
    /// the world holds (running tasks re-attached on their GPUs, waiting
    /// ones queued as their records say, ended ones indexed), the world
    /// itself unchanged. `tasks` gives each task's job as read back from
    /// its directory.
    fn restart(&mut self, tasks: &[Task]) {
        let core = Scheduler::new(rules(), &[40 * GIB; 2]);
        self.life = Lifecycle::new(core, DAEMON);
        self.world.did.clear();
        self.step_with(vec![Event::Sample(vec![
            GpuSample::idle(0),
            GpuSample::idle(1),
        ])]);
        for t in tasks {
            let name = t.name.as_str();
            let Some(state) = self.world.at(name) else {
                continue;
            };
            let mut t = t.clone();
            t.record = self.world.records[name].clone();
            t.state = state;
            match state {
                State::Done | State::Failed => self.life.ended.insert(state, t.name),
                State::Running => {
                    t.run = self.world.runs.get(name).copied().unwrap_or(0);
                    t.gpus = t.record.gpus.clone();
                    t.adopted = true;
                    self.life.adopt_running(t);
                }
                State::Pending | State::Recovery => {
                    self.life.admit(t);
                }
            }
        }
        self.step();
    }
}

#[test]
fn a_run_found_running_is_counted_on_its_gpu_and_seen_to_its_end() {
    let mut story = Story::new();
    let big = task(1, "big", ALICE, 30);
    let a = story.submit(big.clone());
    story.restart(&[big]);
    assert!(story.running(&a));
    assert!(story.life.tasks.get(&1).unwrap().adopted);
    // GPU 0 holds it: another 30 GiB job goes to GPU 1.
    story.submit(task(2, "next", BOB, 30));
    assert_eq!(story.world.started(), [("000002-next".into(), 1, vec![1])]);
    story.later(10.0).exits(&a, Exit::Success, 20);
    assert_eq!(story.state(&a), Some(State::Done));
}

#[test]
fn a_task_found_in_recovery_waits_in_the_recovery_queue_and_runs_first() {
    let mut story = Story::new();
    let mut t = task(1, "crashed", ALICE, 4);
    t.state = State::Recovery;
    t.record.crashes = 1;
    story.world.dirs.insert(t.name.to_string(), State::Recovery);
    story
        .world
        .records
        .insert(t.name.to_string(), t.record.clone());
    story.world.runs.insert(t.name.to_string(), 1);
    let mut held = task(2, "other", BOB, 4);
    held.record.held = true;
    story.life.admit(held);
    story
        .world
        .dirs
        .insert("000002-other".into(), State::Pending);
    story.life.admit(t);
    story.step();
    assert_eq!(
        story.world.started(),
        [("000001-crashed".into(), 2, vec![0])]
    );
}

#[test]
fn a_task_that_crashed_but_stayed_in_pending_still_waits_as_a_recovery() {
    let mut story = Story::new();
    let mut t = task(1, "a", ALICE, 4);
    t.record.crashes = 2;
    t.demand.as_mut().unwrap().max_retries = Some(5);
    story.submit(t);
    assert_eq!(story.life.core.queued(), (0, 0));
    assert_eq!(story.world.started().len(), 1);
    let a = TaskName::new(1, "a");
    story.later(1.0).exits(&a, Exit::Oom, 4);
    assert_eq!(story.record(&a).crashes, 3, "counted on from its record");
}

#[test]
fn a_hold_survives_a_restart() {
    let mut story = Story::new();
    let blocker = task(1, "blocker", BOB, 30);
    let t = task(2, "a", ALICE, 30);
    let b2 = task(3, "b2", BOB, 30);
    story.submit(blocker.clone());
    story.submit(b2.clone());
    let a = story.submit(t.clone());
    assert!(!story.running(&a));
    assert!(matches!(story.asks(ALICE, "hold.2"), Answer::Done(_)));
    story.restart(&[blocker, t, b2]);
    let b2 = TaskName::new(3, "b2");
    story.later(1.0).exits(&b2, Exit::Success, 1);
    assert!(!story.running(&a), "held across the restart");
}

/// One task's whole life (launch, OOM, re-run, success), with the daemon
/// killed after step `k` and restarted: it lands in `done/` exactly once,
/// and each run is started exactly once.
fn life_killed_after(k: usize) -> Story {
    let mut story = Story::new();
    let t = task(1, "a", ALICE, 4);
    let a = t.name.clone();
    let mut starts = 0;
    let kill = |story: &mut Story, step: usize, starts: &mut usize| {
        *starts += story.world.started().len();
        if step == k {
            story.restart(std::slice::from_ref(&t));
            *starts += story.world.started().len();
        }
    };
    story.submit(t.clone());
    kill(&mut story, 0, &mut starts);
    story.world.did.clear();
    story.later(5.0).exits(&a, Exit::Oom, 4);
    kill(&mut story, 1, &mut starts);
    story.world.did.clear();
    story.later(60.0).exits(&a, Exit::Success, 5);
    kill(&mut story, 2, &mut starts);
    assert_eq!(starts, 2, "killed after step {k}: each run started once");
    story
}

#[test]
fn killed_after_any_step_a_task_still_lands_in_done_once() {
    for k in 0..3 {
        let story = life_killed_after(k);
        let a = TaskName::new(1, "a");
        assert_eq!(story.state(&a), Some(State::Done), "killed after step {k}");
        assert_eq!(story.record(&a).crashes, 1, "killed after step {k}");
        assert!(story.life.tasks.is_empty(), "killed after step {k}");
    }
}

#[test]
fn a_run_that_ended_while_the_daemon_was_away_is_collected_at_start() {
    let mut story = Story::new();
    let t = task(1, "a", ALICE, 4);
    let a = story.submit(t.clone());
    story.restart(&[t]);
    // What the new daemon reads in the run's exit.json.
    story.exits(&a, Exit::Failed("exit status 3".into()), 1);
    assert_eq!(story.state(&a), Some(State::Failed));
}
