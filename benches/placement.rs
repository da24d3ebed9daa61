//! One placement decision with 10,000 queued tasks on 64 GPUs.
//!
//! `cargo bench --bench placement`. Two figures: a decision that places the
//! head task (a task exits, the head takes its place: the daemon's common
//! step), and one where the head fits nowhere (every GPU is checked and
//! rejected: the worst case for an idle step). Each GPU carries a full
//! 60 s window of 1 s SMACT samples, as under the live daemon. Both are
//! measured twice: tasks without users (the simulator's case), and tasks
//! of 20 users under fair share with a per-user queued-jobs limit, so the
//! queue's order and limits are at work. A third figure: a decision
//! where one user's 10,000 tasks, all over their running limit, stand
//! ahead of another user's head, which fits nowhere (each pass steps over
//! all of them).

use std::time::{Duration, Instant};

use carma::config::Config;
use carma::sched::{Action, Demand, Event, GpuSample, Need, Rules, Scheduler, TaskId, Time};

const GPUS: usize = 64;
const QUEUED: u64 = 10_000;
const GIB: u64 = 1024;

fn main() {
    let rules = Config::load(None).expect("built-in config").rules();
    measure("no users", rules.clone(), |_| None);
    let mut shared = rules;
    shared.queue.fair_share = true;
    shared.queue.max_queued_per_user = 400;
    measure(
        "20 users, fair share, 400 queued each at most",
        shared,
        |n| Some(1000 + (n % 20) as u32),
    );
    over_limit_ahead();
}

/// One user at `max_running_per_user` with [`QUEUED`] tasks waiting, ahead
/// of another user's task that needs more than any GPU has.
fn over_limit_ahead() {
    let mut rules = Config::load(None).expect("built-in config").rules();
    rules.queue.fair_share = true;
    rules.queue.max_running_per_user = 1;
    rules.queue.max_queued_per_user = 0;
    let mut core = Scheduler::new(rules, &[80 * GIB; GPUS]);
    let now = Time::from_secs(1);
    let queued = |task: u64, user: u32, need: Need| Event::Queued {
        task: TaskId(task),
        demand: Demand {
            user: Some(user),
            ..Demand::new(need)
        },
    };
    for task in 1..=QUEUED + 1 {
        core.step(now, queued(task, 1, Need::Mib(4 * GIB)));
    }
    // Something else holds half of every GPU: the head's 60 GiB fit none.
    let half_used = (0..GPUS).map(|g| reading(g, 40 * GIB, 0.1)).collect();
    core.step(now, Event::Sample(half_used));
    core.step(now, queued(QUEUED + 2, 2, Need::Mib(60 * GIB)));
    println!(
        "one user over max_running_per_user, {} tasks waiting ahead of another's head:",
        core.queued().1 - 1
    );
    report(
        "decision where the head fits nowhere",
        &mut ticks(&mut core, now, 2_000),
    );
}

/// Both figures for a queue of tasks whose `n`-th is `user(n)`'s.
fn measure(what: &str, rules: Rules, user: fn(u64) -> Option<u32>) {
    println!("{what}:");
    let mut core = Scheduler::new(rules, &[80 * GIB; GPUS]);
    let mut now = Time::ZERO;
    // 60 s of samples: memory in use varies by GPU, SMACT below the cap.
    for second in 0..60 {
        now = Time::from_secs(second);
        let samples = (0..GPUS)
            .map(|g| reading(g, (g as u64 % 7) * 4 * GIB, 0.1 + (g % 5) as f64 * 0.1))
            .collect();
        core.step(now, Event::Sample(samples));
    }
    // Fill the GPUs: each takes 8 tasks of 4 GiB (6 with margin) at most.
    let mut running = std::collections::VecDeque::new();
    let mut next = 0;
    let mut queue =
        |core: &mut Scheduler, need: Need, running: &mut std::collections::VecDeque<TaskId>| {
            next += 1;
            let actions = core.step(
                now,
                Event::Queued {
                    task: TaskId(next),
                    demand: Demand {
                        user: user(next),
                        ..Demand::new(need)
                    },
                },
            );
            for a in actions {
                if let Action::Launch { task, .. } = a {
                    running.push_back(task);
                }
            }
        };
    while core.queued() == (0, 0) {
        queue(&mut core, Need::Mib(4 * GIB), &mut running);
    }
    for _ in 0..QUEUED {
        queue(&mut core, Need::Mib(4 * GIB), &mut running);
    }
    println!(
        "  {} tasks running, {} queued, {GPUS} GPUs",
        running.len(),
        core.queued().1
    );

    // A task exits; the head is placed in its stead.
    let mut placing = Vec::new();
    for _ in 0..5_000 {
        let Some(task) = running.pop_front() else {
            break;
        };
        let exit = Event::Exited {
            task,
            exit: carma::sched::Exit::Success,
        };
        let start = Instant::now();
        let actions = core.step(now, exit);
        placing.push(start.elapsed());
        for a in actions {
            if let Action::Launch { task, .. } = a {
                running.push_back(task);
            }
        }
        queue(&mut core, Need::Mib(4 * GIB), &mut running);
    }
    report("decision that places the head", &mut placing);

    // The head needs more than any GPU has free: every GPU is rejected.
    queue(&mut core, Need::Mib(70 * GIB), &mut running);
    report(
        "decision where the head fits nowhere",
        &mut ticks(&mut core, now, 5_000),
    );
}

/// How long each of `n` ticks takes, a microsecond apart from `now`, that
/// launch nothing.
fn ticks(core: &mut Scheduler, now: Time, n: u64) -> Vec<Duration> {
    (0..n)
        .map(|i| {
            let start = Instant::now();
            let actions = core.step(now + Duration::from_micros(i), Event::Tick);
            let took = start.elapsed();
            assert!(actions.is_empty());
            took
        })
        .collect()
}

/// A healthy GPU's reading: `used_mib` in use, at SM activity `smact`.
fn reading(gpu: usize, used_mib: u64, smact: f64) -> GpuSample {
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

fn report(what: &str, times: &mut [Duration]) {
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "  {what}: mean {:.1} µs, p50 {:.1} µs, p99 {:.1} µs ({} runs)",
        mean.as_secs_f64() * 1e6,
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        times.len()
    );
}
