//! Placement looks at idle GPUs first and skips the busy ones once enough
//! idle ones pass ([`Scheduler::choose`]): in every state a random run
//! reaches, it chooses for every waiting task exactly what a plain scan of
//! all GPUs in index order chooses.

use proptest::prelude::*;

use super::*;
use crate::sched::policy::{Best, Candidate};

/// One step of a random run.
#[derive(Debug, Clone)]
enum Op {
    /// A task: GiB needed (0: unknown, 80: whole GPU), GPUs, user,
    /// exclusive.
    Queue(u64, u32, Option<u32>, bool),
    /// A sample of one GPU: used GiB (of 40), SMACT, occupancy, healthy,
    /// whether it shows the running tasks' memory.
    Sample(usize, u64, f64, Option<f64>, bool, bool),
    /// The n-th running task exits: OOM or success.
    Exit(usize, bool),
    /// Time passes to the core's deadline, and it is told.
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..81, 1u32..4, prop::option::of(1u32..3), prop::bool::weighted(0.1))
            .prop_map(|(g, n, u, x)| Op::Queue(g, n, u, x)),
        4 => (0usize..6, 0u64..41, 0.0f64..1.0, prop::option::of(0.0f64..1.0),
              prop::bool::weighted(0.95), prop::bool::ANY)
            .prop_map(|(g, m, s, o, h, shown)| Op::Sample(g, m, s, o, h, shown)),
        3 => (0usize..8, prop::bool::weighted(0.2)).prop_map(|(n, oom)| Op::Exit(n, oom)),
        1 => Just(Op::Tick),
    ]
}

fn event(op: &Op, next_id: &mut u64, running: &[TaskId], gpus: usize) -> Option<Event> {
    Some(match *op {
        Op::Queue(gib, n, user, exclusive) => {
            *next_id += 1;
            let need = match gib {
                0 => Need::Unknown,
                80 => Need::WholeGpu,
                g => Need::Mib(g * GIB),
            };
            Event::Queued {
                task: TaskId(*next_id),
                demand: Demand {
                    gpus: n,
                    user,
                    exclusive,
                    history: Some(Duration::from_secs(600)),
                    ..Demand::new(need)
                },
            }
        }
        Op::Sample(gpu, gib, smact, occupancy, healthy, shown) => Event::Sample(vec![GpuSample {
            used_mib: gib * GIB,
            occupancy,
            dram: occupancy,
            healthy,
            tasks: match shown {
                true => running.iter().map(|&t| (t, gib * GIB / 2)).collect(),
                false => Vec::new(),
            },
            ..sample(gpu % gpus, 0, smact)
        }]),
        Op::Exit(n, oom) => Event::Exited {
            task: *running.get(n % running.len().max(1))?,
            exit: if oom { Exit::Oom } else { Exit::Success },
        },
        Op::Tick => Event::Tick,
    })
}

/// What placement chose before idle GPUs went first: every GPU not off
/// limits offered, in index order.
fn plain_scan(
    core: &Scheduler,
    demand: &Demand,
    want: Want,
    policy: Policy,
    idle_first: bool,
    off_limits: &[usize],
) -> Option<Vec<Candidate>> {
    let order = policy.order(idle_first, core.cursor, core.gpus.len());
    let mut best = Best::new(order, demand.gpus as usize);
    for g in (0..core.gpus.len()).filter(|g| !off_limits.contains(g)) {
        if let Some(c) = core.passes(g, demand, core.on_gpu(want, g)) {
            best.offer(c);
        }
    }
    best.chosen()
}

/// Every waiting task's choice, with no GPU off limits and with `off`.
fn choices_agree(core: &Scheduler, off: &[usize]) -> Result<(), TestCaseError> {
    for t in core.tasks.values().filter(|t| !t.running) {
        let want = core.want(&t.demand, t.crashes);
        for policy in [core.rules.placement.policy, Policy::Exclusive] {
            for idle_first in [true, false] {
                let idle_first = idle_first && !want.is_sole();
                for off_limits in [&[][..], off] {
                    prop_assert_eq!(
                        core.choose(&t.demand, want, policy, idle_first, off_limits),
                        plain_scan(core, &t.demand, want, policy, idle_first, off_limits)
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn skipping_busy_gpus_changes_no_choice(
        ops in prop::collection::vec((op(), 0u32..90), 1..100),
        sizes in prop::collection::vec(prop::sample::select(vec![20, 40, 80]), 1..7),
        mig in prop::option::of(0usize..6),
        off in prop::collection::vec(0usize..6, 0..3),
        policy in prop::sample::select(Policy::ALL.to_vec()),
        gate in prop::sample::select(vec![Gate::Prototype, Gate::Smact]),
        idle_first in prop::bool::ANY,
        backfill in prop::bool::ANY,
        await_activity in prop::bool::ANY,
    ) {
        let mut r = Rules::defaults();
        r.placement.policy = policy;
        r.placement.gate = gate;
        r.placement.idle_first = idle_first;
        r.queue.backfill = backfill;
        if !await_activity {
            r.placement.await_activity_s = Seconds::ZERO;
        }
        let totals: Vec<u64> = sizes.iter().map(|&g| g * GIB).collect();
        let mut core = Scheduler::new(r, &totals);
        if let Some(g) = mig.filter(|&g| g < totals.len()) {
            core.set_mig_instance(g);
        }
        let (mut now, mut next_id) = (Time::ZERO, 0);
        let mut running: Vec<TaskId> = Vec::new();
        for (op, seconds) in &ops {
            choices_agree(&core, &off)?;
            now = match op {
                Op::Tick => core.next_deadline().unwrap_or(now).max(now),
                _ => now + Duration::from_secs(u64::from(*seconds)),
            };
            let Some(event) = event(op, &mut next_id, &running, totals.len()) else {
                continue;
            };
            for action in &core.step(now, event) {
                match action {
                    Action::Launch { task, .. } => running.push(*task),
                    Action::Complete { task } | Action::Recover { task, .. } | Action::Fail { task, .. } => {
                        running.retain(|t| t != task);
                    }
                }
            }
        }
        choices_agree(&core, &off)?;
    }
}
