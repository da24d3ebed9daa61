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
    // Worked out with tasks joining a GPU at once; waiting for a
    // newcomer's activity has tests of its own.
    r.placement.await_activity_s = Seconds::ZERO;
    r
}

fn sample(gpu: usize, used_mib: u64, smact: f64) -> GpuSample {
    GpuSample {
        used_mib,
        smact,
        ..GpuSample::idle(gpu)
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

/// Why the one action in `actions`, a failure to place, says the task
/// can never be placed.
fn unplaceable(actions: &[Action]) -> &str {
    match actions {
        [
            Action::Fail {
                reason: FailReason::Unplaceable(why),
                ..
            },
        ] => why,
        other => panic!("{other:?}"),
    }
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

fn user_job(id: u64, uid: u32) -> Event {
    Event::Queued {
        task: TaskId(id),
        demand: Demand {
            user: Some(uid),
            ..Demand::new(Need::Mib(GIB))
        },
    }
}

mod lifecycle;
mod placement;
mod queue_order;
mod scan;
mod stuck;

/// Readings lent with `step_sampled` (into a kept list of actions) act as an `Event::Sample` after the
/// step's events: the same actions, the same state after, step by step
/// (a full GPU refused, a task's memory seen, a GPU freed).
#[test]
fn lent_samples_act_as_a_sample_event_at_the_end() {
    let mut given = four_gpus(Policy::Magm);
    let mut lent = four_gpus(Policy::Magm);
    let held = |task: u64, mib: u64| vec![(TaskId(task), mib)];
    let steps: Vec<(f64, Vec<Event>, Vec<GpuSample>)> = vec![
        (
            1.0,
            vec![Event::Queued {
                task: TaskId(1),
                demand: Demand::new(Need::Mib(8 * GIB)),
            }],
            vec![sample(0, 39 * GIB, 0.9), sample(3, 5 * GIB, 0.1)],
        ),
        (
            2.0,
            vec![Event::Queued {
                task: TaskId(2),
                demand: Demand::new(Need::Mib(30 * GIB)),
            }],
            vec![GpuSample {
                tasks: held(1, 8 * GIB),
                ..sample(3, 13 * GIB, 0.5)
            }],
        ),
        (
            90.0,
            vec![Event::Exited {
                task: TaskId(1),
                exit: Exit::Success,
            }],
            vec![sample(0, 0, 0.0), sample(3, 5 * GIB, 0.1)],
        ),
        (91.0, vec![Event::Tick], vec![]),
    ];
    let mut launches = 0;
    // One list of actions for every step, as the simulator keeps it.
    let mut b = Vec::new();
    for (now, events, samples) in steps {
        let mut whole = events.clone();
        whole.push(Event::Sample(samples.clone()));
        let a = given.step_all(s(now), whole);
        b.clear();
        lent.step_sampled(s(now), events, &samples, &mut b);
        assert_eq!(a, b, "at {now} s");
        assert_eq!(given.queued(), lent.queued(), "at {now} s");
        assert_eq!(given.next_deadline(), lent.next_deadline(), "at {now} s");
        launches += launched(&a).len();
    }
    // Both tasks were placed on what the readings said.
    assert_eq!(launches, 2);
}
