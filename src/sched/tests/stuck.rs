//! The stuck memo ([`crate::sched::stuck`]) may skip dispatches, never
//! change one: a core that keeps it decides exactly as one that forgets it
//! before every step, whatever the events.

use proptest::prelude::*;

use super::*;

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    /// A task: GiB needed (0: unknown, 40: whole GPU), GPUs, user, priority.
    Queue(u64, u32, Option<u32>, i32),
    /// A sample of one GPU: used GiB, SMACT, occupancy, DRAM, healthy.
    Sample(usize, u64, f64, Option<f64>, Option<f64>, bool),
    /// The n-th running task exits: OOM or success.
    Exit(usize, bool),
    /// A task is cancelled or held; `Hold` releases it again when false.
    Cancel(u64),
    Hold(u64, bool),
    /// Time passes to the core's deadline, and it is told.
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..41, 1u32..3, prop::option::of(1u32..3), 0i32..2)
            .prop_map(|(g, n, u, p)| Op::Queue(g, n, u, p)),
        4 => (0usize..2, 0u64..41, 0.0f64..1.0, prop::option::of(0.0f64..1.0),
              prop::option::of(0.0f64..1.0), prop::bool::weighted(0.95))
            .prop_map(|(g, m, s, o, d, h)| Op::Sample(g, m, s, o, d, h)),
        3 => (0usize..8, prop::bool::ANY).prop_map(|(n, oom)| Op::Exit(n, oom)),
        1 => (0u64..40).prop_map(Op::Cancel),
        1 => (0u64..40, prop::bool::ANY).prop_map(|(t, h)| Op::Hold(t, h)),
        2 => Just(Op::Tick),
    ]
}

fn event(op: &Op, next_id: &mut u64, running: &[TaskId]) -> Option<Event> {
    Some(match *op {
        Op::Queue(gib, gpus, user, priority) => {
            *next_id += 1;
            let need = match gib {
                0 => Need::Unknown,
                40 => Need::WholeGpu,
                g => Need::Mib(g * GIB),
            };
            Event::Queued {
                task: TaskId(*next_id),
                demand: Demand {
                    gpus,
                    user,
                    priority,
                    // Runs of many lengths, so that backfill has tasks
                    // that end before the head's reservation and others
                    // that do not.
                    history: Some(Duration::from_secs(30 + (*next_id * 137) % 900)),
                    ..Demand::new(need)
                },
            }
        }
        Op::Sample(gpu, gib, smact, occupancy, dram, healthy) => Event::Sample(vec![GpuSample {
            used_mib: gib * GIB,
            occupancy,
            dram,
            healthy,
            tasks: running.iter().map(|&t| (t, gib * GIB / 2)).collect(),
            ..sample(gpu, 0, smact)
        }]),
        Op::Exit(n, oom) => Event::Exited {
            task: *running.get(n % running.len().max(1))?,
            exit: if oom { Exit::Oom } else { Exit::Success },
        },
        Op::Cancel(task) => Event::Cancel { task: TaskId(task) },
        Op::Hold(task, held) => Event::Hold {
            task: TaskId(task),
            held,
        },
        Op::Tick => Event::Tick,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn the_memo_changes_no_decision(
        ops in prop::collection::vec((op(), 0u32..90), 1..120),
        policy in prop::sample::select(vec![Policy::Magm, Policy::BestFit, Policy::Exclusive, Policy::Lug]),
        gate in prop::sample::select(vec![Gate::Prototype, Gate::Smact]),
        idle_first in prop::bool::ANY,
        fair_share in prop::bool::ANY,
        backfill in prop::bool::ANY,
    ) {
        let mut r = Rules::defaults();
        r.placement.policy = policy;
        r.placement.gate = gate;
        r.placement.idle_first = idle_first;
        r.queue.fair_share = fair_share;
        r.queue.backfill = backfill;
        let mut kept = Scheduler::new(r.clone(), &[40 * GIB; 2]);
        let mut forgot = Scheduler::new(r, &[40 * GIB; 2]);
        let (mut now, mut next_id) = (Time::ZERO, 0);
        let mut running: Vec<TaskId> = Vec::new();
        for (op, seconds) in &ops {
            now = match op {
                Op::Tick => match (kept.next_deadline(), forgot.next_deadline()) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b).unwrap_or(now),
                },
                _ => now + Duration::from_secs(u64::from(*seconds)),
            };
            let Some(event) = event(op, &mut next_id, &running) else {
                continue;
            };
            forgot.stuck = None;
            let actions = kept.step(now, event.clone());
            prop_assert_eq!(&actions, &forgot.step(now, event));
            for action in &actions {
                match action {
                    Action::Launch { task, .. } => running.push(*task),
                    Action::Complete { task } | Action::Recover { task, .. } | Action::Fail { task, .. } => {
                        running.retain(|t| t != task);
                    }
                }
            }
        }
    }
}

/// A GPU too busy for the head reads calmer later: the dispatch after the
/// window has cooled places the head although the stuck dispatch saw no
/// deadline (the busy reading was still the last one).
#[test]
fn a_calmer_reading_ends_the_memo() {
    let mut core = Scheduler::new(rules(Policy::Magm), &[40 * GIB]);
    core.step(s(0.0), Event::Sample(vec![sample(0, 0, 0.95)]));
    assert!(queue(&mut core, 1.0, 1, Need::Mib(GIB)).is_empty());
    assert_eq!(
        core.next_deadline(),
        None,
        "busy for good, as far as it knows"
    );
    core.step(s(2.0), Event::Sample(vec![sample(0, 0, 0.1)]));
    let placed = core.step(s(100.0), Event::Sample(vec![sample(0, 0, 0.1)]));
    assert_eq!(launched(&placed), vec![(1, vec![0])]);
}
