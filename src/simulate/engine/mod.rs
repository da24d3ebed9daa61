//! The discrete-event loop: trace arrivals, task progress, memory ramp-up
//! and OOM crashes in virtual time, with the real scheduling core deciding.
//!
//! # Model
//!
//! - A task needs `duration_s` seconds of work; alone it does one second of
//!   work per second. Sharing slows it ([`Model::speed`]); a multi-GPU
//!   task runs at its slowest GPU's rate.
//! - A task allocates its measured memory (`memory_mib`, per GPU) step by
//!   step over its warm-up ([`Model::held_after`]). A step that does not
//!   fit on one of its GPUs kills it with OOM, its work lost, and the core
//!   decides what happens next; its neighbours keep running.
//! - A GPU's SM activity is the sum of what its tasks keep busy
//!   ([`Model::busy`]), at most 1; its power follows [`crate::gpu::power`].
//! - A task launched with a wall-time limit is stopped when the limit
//!   passes (the daemon's supervisor would do the same), its grace period
//!   not modelled: it ends there, failed with "time limit".
//! - Every task's trace duration is its history (the job ran before, as
//!   the traces' jobs had), which backfill plans with; the time during
//!   which the head of the queue could have started but for backfilled
//!   tasks is summed as the head's delay.
//! - The core sees a GPU sample whenever a GPU's state changes; since the
//!   state is constant in between, that is exactly what 1 s sampling would
//!   show, at a fraction of the cost. Emulating the research prototype, it
//!   sees instead every GPU once a block, as the prototype's monitor
//!   published them ([`Readings`]).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::convert::Infallible;

use rustc_hash::FxHashMap as HashMap;

use crate::sched::{Action, Demand, Event, Exit, GpuSample, Rules, Scheduler, TaskId, Time};

use super::Model;
use super::estimates::{Columns, Estimates};
use super::metrics::{LowerBound, Metrics, TaskTimes};
use super::model::WARMUP_STEPS;
use super::readings::{Block, Readings};
use super::trace::TraceTask;
use crate::gpu::sim::spec::{Declared, MIG_SLICES};
use crate::plot;
use crate::rad::MemoryLine;

mod sharing;

/// Everything one simulation run needs besides the trace.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The GPUs, whole or cut into MIG instances: an instance is a GPU of
    /// its own to the core (single-GPU tasks only), with its share of the
    /// board's compute slices, and never slows another instance.
    pub gpus: Vec<Declared>,
    /// Which trace column the core sees as the estimate ([`run`]; see
    /// [`run_with`] for other sources).
    pub estimator: MemoryLine,
    pub rules: Rules,
    pub model: Model,
    /// When the core reads the GPUs.
    pub readings: Readings,
}

/// Things that happen by themselves in virtual time (arrivals come from
/// the trace, in its order, ahead of anything else due at their time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Happening {
    /// Run `attempt` of task `n` takes warm-up allocation step `step`.
    Grow(usize, u32, u32),
    /// Task `n` finishes, if its rate was last set by `generation`.
    Finish(usize, u64),
    /// Run `attempt` of task `n` reaches its wall-time limit.
    TimeLimit(usize, u32),
    /// The core asked to be woken.
    Tick,
    /// A block of readings ends ([`Readings::Blocks`]).
    Reading,
    /// Run `attempt` of task `n` enters phase `phase` of its SM
    /// activity's swing ([`Model::swung`]).
    Swing(usize, u32, u32),
}

/// A task while it runs.
#[derive(Debug, Clone)]
struct Run {
    gpus: Vec<usize>,
    /// Work left, seconds at rate 1.
    remaining: f64,
    rate: f64,
    /// When `remaining` was last brought up to date.
    since: f64,
    /// Unique per rate change (of any run), invalidating stale finishes.
    generation: u64,
    /// Which launch of the task this is, so a warm-up step belongs to one
    /// run.
    attempt: u32,
    /// Memory it holds on each of its GPUs so far, MiB.
    held_mib: u64,
    /// Seconds between its warm-up steps.
    step_s: f64,
    /// When it was launched.
    started: f64,
    /// Its SM activity alone on a whole GPU (the trace's assumption).
    smact: f64,
}

/// What the core sees as one GPU: a whole board or a MIG instance.
#[derive(Debug, Clone, Default)]
struct VirtualGpu {
    total_mib: u64,
    used_mib: u64,
    /// Tasks running here.
    tasks: Vec<usize>,
    /// SM activity of the GPU (of the instance's own SMs).
    smact: f64,
    /// The board it is, or is part of.
    board: usize,
    /// Its part of the board's SMs: 1, or an instance's slices / 7.
    share: f64,
    /// Its SM activity over the block of readings under way.
    block: Block,
}

/// A physical GPU: power and utilization are the board's.
#[derive(Debug, Clone, Default)]
struct Board {
    /// The [`VirtualGpu`]s it is (one) or is cut into.
    units: Vec<usize>,
    /// Energy and utilization integrals up to `integrated_to`.
    joules: f64,
    smact_seconds: f64,
    integrated_to: f64,
}

/// The core's GPUs and the boards they are on.
fn units(declared: &[Declared]) -> (Vec<VirtualGpu>, Vec<Board>) {
    let mut units = Vec::new();
    let mut boards = Vec::new();
    for (board, d) in declared.iter().enumerate() {
        let parts: Vec<(u64, f64)> = match &d.mig {
            None => vec![(d.total_mib, 1.0)],
            Some(profiles) => profiles
                .iter()
                .map(|p| (p.total_mib, f64::from(p.slices) / f64::from(MIG_SLICES)))
                .collect(),
        };
        boards.push(Board {
            units: (units.len()..units.len() + parts.len()).collect(),
            ..Board::default()
        });
        units.extend(parts.into_iter().map(|(total_mib, share)| VirtualGpu {
            total_mib,
            board,
            share,
            ..VirtualGpu::default()
        }));
    }
    (units, boards)
}

struct Sim<'a> {
    setup: &'a Setup,
    estimates: &'a mut dyn Estimates,
    core: Scheduler,
    gpus: Vec<VirtualGpu>,
    boards: Vec<Board>,
    /// The tasks that arrived and have not ended, by trace row: a run
    /// holds only what is under way, however long the trace.
    tasks: HashMap<usize, TraceTask>,
    runs: HashMap<usize, Run>,
    /// Every task's times, by trace row (kept: the figures are means).
    records: Vec<TaskTimes>,
    bound: LowerBound,
    /// (time in µs, insertion order, happening): a min-heap on time, FIFO
    /// among equal times so runs are reproducible.
    agenda: BinaryHeap<Reverse<(u64, u64, Happening)>>,
    order: u64,
    now: f64,
    next_tick: Option<u64>,
    /// GPUs whose state changed since the core last saw them.
    dirty: Vec<usize>,
    /// The GPUs the core reads in a step: kept, as `dirty` is, so that
    /// neither allocates anew at each of the millions of steps.
    read: Vec<usize>,
    /// The tasks and GPUs a change touches, kept likewise.
    scratch: (Vec<usize>, Vec<usize>),
    /// What the core reads in a step, refilled in place: its first
    /// `read.len()` entries are this step's (each GPU's task list keeps
    /// its room from step to step).
    sampled: Vec<GpuSample>,
    /// The core's actions in a step, kept likewise (empty between steps).
    actions: Vec<Action>,
    /// In block readings: the core reads every GPU now (a block ended),
    /// and when the next block ends, if one is booked.
    reading: bool,
    next_reading: Option<f64>,
    /// Since when backfilled tasks keep the head of the queue from
    /// starting, and the time they did so before.
    delayed_since: Option<f64>,
    head_delay_s: f64,
    /// What pictures show, when asked for ([`run_pictured`]).
    picture: Option<plot::Run>,
    /// When the last task so far completed or failed: the trace's end,
    /// where energy stops being counted. The clock itself may run on
    /// through happenings that turn out stale (a finish booked before a
    /// neighbour left and the task sped up).
    ended_at: f64,
}

/// Runs the trace to the end, the core told the setup's trace column as
/// each task's estimate, and returns its figures.
pub fn run(trace: &[TraceTask], setup: &Setup) -> Metrics {
    run_with(trace, setup, &mut Columns(setup.estimator))
}

/// Runs the trace to the end with estimates from `estimates`, which hears
/// of every task that finishes (to learn from it, as history does).
pub fn run_with(trace: &[TraceTask], setup: &Setup, estimates: &mut dyn Estimates) -> Metrics {
    infallible(simulate(in_order(trace), setup, estimates, false)).0
}

/// [`run_with`], and the run as pictures show it: each GPU's state after
/// every change, and every run of every task, coloured by its class.
pub fn run_pictured(
    trace: &[TraceTask],
    setup: &Setup,
    estimates: &mut dyn Estimates,
) -> (Metrics, plot::Run) {
    let (metrics, picture) = infallible(simulate(in_order(trace), setup, estimates, true));
    (metrics, picture.unwrap_or_default())
}

/// [`run_with`] on tasks read as the run goes (row `n` is the `n`-th
/// task), in submission order: its memory does not grow with the trace's
/// length. The first error of `tasks` ends the run.
pub fn run_streamed<E>(
    tasks: impl Iterator<Item = Result<TraceTask, E>>,
    setup: &Setup,
    estimates: &mut dyn Estimates,
) -> Result<Metrics, E> {
    let rows = tasks.enumerate().map(|(n, t)| t.map(|t| (n, t)));
    Ok(simulate(rows, setup, estimates, false)?.0)
}

/// A slice's rows by submission time (stable, so row order breaks ties),
/// each with its index.
fn in_order(
    trace: &[TraceTask],
) -> impl Iterator<Item = Result<(usize, TraceTask), Infallible>> + '_ {
    let mut order: Vec<usize> = (0..trace.len()).collect();
    order.sort_by_key(|&n| to_micros(trace[n].submit_s));
    order.into_iter().map(|n| Ok((n, trace[n].clone())))
}

fn infallible<T>(r: Result<T, Infallible>) -> T {
    match r {
        Ok(t) => t,
        Err(never) => match never {},
    }
}

fn simulate<E>(
    mut rows: impl Iterator<Item = Result<(usize, TraceTask), E>>,
    setup: &Setup,
    estimates: &mut dyn Estimates,
    pictured: bool,
) -> Result<(Metrics, Option<plot::Run>), E> {
    let (gpus, boards) = units(&setup.gpus);
    let totals: Vec<u64> = gpus.iter().map(|g| g.total_mib).collect();
    let mut core = Scheduler::new(setup.rules.clone(), &totals);
    for (i, g) in gpus.iter().enumerate() {
        if g.share < 1.0 {
            core.set_mig_instance(i);
        }
    }
    let count = gpus.len();
    let mut sim = Sim {
        setup,
        estimates,
        core,
        gpus,
        boards,
        tasks: HashMap::default(),
        runs: HashMap::default(),
        records: Vec::new(),
        bound: LowerBound::default(),
        agenda: BinaryHeap::new(),
        order: 0,
        now: 0.0,
        next_tick: None,
        dirty: (0..count).collect(),
        read: Vec::new(),
        sampled: Vec::new(),
        actions: Vec::new(),
        scratch: (Vec::new(), Vec::new()),
        reading: true,
        next_reading: None,
        delayed_since: None,
        head_delay_s: 0.0,
        picture: pictured.then(|| plot::Run {
            title: format!("{}, {}", setup.rules.placement.policy, setup.estimator),
            gpus: (0..count)
                .map(|gpu| plot::GpuSeries {
                    gpu,
                    samples: Vec::new(),
                })
                .collect(),
            bars: Vec::new(),
            gpu_count: count,
            span: 0.0,
        }),
        ended_at: 0.0,
    };
    sim.flush();
    let mut next = rows.next().transpose()?;
    loop {
        let due = sim.agenda.peek().map(|Reverse((at, _, _))| *at);
        match (next.take(), due) {
            (Some((n, task)), due) if due.is_none_or(|at| to_micros(task.submit_s) <= at) => {
                sim.advance(to_micros(task.submit_s) as f64 / 1e6);
                sim.arrive(n, task);
                next = rows.next().transpose()?;
            }
            (None, None) => break,
            (waiting, _) => {
                next = waiting;
                if let Some(Reverse((at, _, happening))) = sim.agenda.pop() {
                    sim.advance(at as f64 / 1e6);
                    sim.happen(happening);
                }
            }
        }
    }
    let end = sim.ended_at;
    for g in 0..sim.gpus.len() {
        sim.integrate(g, end);
    }
    let mut metrics = Metrics::new(
        &sim.records,
        &sim.boards
            .iter()
            .map(|b| (b.joules, b.smact_seconds))
            .collect::<Vec<_>>(),
        Some(sim.bound.bound(setup.gpus.len())),
    );
    metrics.head_delay_s = sim.head_delay_s;
    let picture = sim.picture.map(|mut p| {
        p.span = end;
        p
    });
    Ok((metrics, picture))
}

impl Sim<'_> {
    fn schedule(&mut self, at: f64, happening: Happening) {
        self.order += 1;
        self.agenda
            .push(Reverse((to_micros(at), self.order, happening)));
    }

    fn advance(&mut self, t: f64) {
        self.now = self.now.max(t);
    }

    /// Trace row `n` is submitted.
    fn arrive(&mut self, n: usize, t: TraceTask) {
        let demand = Demand {
            gpus: t.gpus,
            history: Some(std::time::Duration::from_secs_f64(t.duration_s)),
            ..Demand::new(self.estimates.need(n, &t))
        };
        if n >= self.records.len() {
            self.records.resize_with(n + 1, TaskTimes::default);
        }
        self.records[n] = TaskTimes::submitted(t.submit_s);
        self.bound.add(&t);
        self.tasks.insert(n, t);
        self.book_reading();
        self.feed(Event::Queued {
            task: TaskId(n as u64),
            demand,
        });
    }

    fn happen(&mut self, happening: Happening) {
        match happening {
            Happening::Grow(n, attempt, step) => {
                if self.runs.get(&n).is_some_and(|r| r.attempt == attempt) {
                    self.grow(n, step);
                }
            }
            Happening::Swing(n, attempt, phase) => {
                if self.runs.get(&n).is_some_and(|r| r.attempt == attempt) {
                    self.swing(n, attempt, phase);
                }
            }
            Happening::Finish(n, generation) => {
                if self
                    .runs
                    .get(&n)
                    .is_some_and(|r| r.generation == generation)
                {
                    self.stop(n, false);
                    if let Some(t) = self.tasks.get(&n) {
                        self.estimates.finished(n, t);
                    }
                    self.feed(Event::Exited {
                        task: TaskId(n as u64),
                        exit: Exit::Success,
                    });
                }
            }
            Happening::TimeLimit(n, attempt) => {
                if self.runs.get(&n).is_some_and(|r| r.attempt == attempt) {
                    self.stop(n, false);
                    self.feed(Event::Exited {
                        task: TaskId(n as u64),
                        exit: Exit::TimeLimit,
                    });
                }
            }
            Happening::Tick => {
                self.next_tick = None;
                self.feed(Event::Tick);
            }
            Happening::Reading => {
                let now = self.now;
                for gpu in &mut self.gpus {
                    gpu.block.add(gpu.smact, now);
                }
                self.reading = true;
                self.next_reading = None;
                self.flush();
                for gpu in &mut self.gpus {
                    gpu.block.restart(now);
                }
                self.book_reading();
            }
        }
    }

    /// Books the end of the block under way, in block readings, while
    /// tasks are in the system: the monitor runs from the start, so
    /// blocks end at multiples of their length.
    fn book_reading(&mut self) {
        let Readings::Blocks { every_s } = self.setup.readings else {
            return;
        };
        if self.next_reading.is_some() || self.tasks.is_empty() {
            return;
        }
        let at = ((self.now / every_s).floor() + 1.0) * every_s;
        self.next_reading = Some(at);
        self.schedule(at, Happening::Reading);
    }

    /// Which GPUs the core reads now, into `read` (emptied first): those
    /// that changed, or in block readings every GPU when a block ends and
    /// none in between.
    fn due(&mut self, read: &mut Vec<usize>) {
        read.clear();
        match self.setup.readings {
            Readings::Live => {
                std::mem::swap(&mut self.dirty, read);
                read.sort_unstable();
                read.dedup();
            }
            Readings::Blocks { .. } => {
                self.dirty.clear();
                if std::mem::take(&mut self.reading) {
                    read.extend(0..self.gpus.len());
                }
            }
        }
    }

    /// Whether the core has readings to take.
    fn readings_due(&self) -> bool {
        match self.setup.readings {
            Readings::Live => !self.dirty.is_empty(),
            Readings::Blocks { .. } => self.reading,
        }
    }

    /// Shows the core the GPUs that changed.
    fn flush(&mut self) {
        self.feed(None);
    }

    /// Steps the core with `event` and the samples of the GPUs that changed,
    /// carries out its actions, repeats while those actions change GPUs,
    /// and books the core's wake-up.
    fn feed(&mut self, event: impl Into<Option<Event>>) {
        let mut event = event.into();
        while event.is_some() || self.readings_due() {
            let mut due = std::mem::take(&mut self.read);
            self.due(&mut due);
            self.sample(&due);
            let read = due.len();
            self.read = due;
            let mut actions = std::mem::take(&mut self.actions);
            self.core.step_sampled(
                to_time(self.now),
                event.take(),
                &self.sampled[..read],
                &mut actions,
            );
            for action in actions.drain(..) {
                match action {
                    Action::Launch {
                        task,
                        gpus,
                        time_limit,
                        ..
                    } => self.launch(task.0 as usize, gpus, time_limit),
                    Action::Complete { task } => {
                        self.records[task.0 as usize].completed(self.now);
                        self.tasks.remove(&(task.0 as usize));
                        self.ended_at = self.now;
                    }
                    Action::Recover { .. } => {}
                    Action::Fail { task, .. } => {
                        self.records[task.0 as usize].failed(self.now);
                        self.tasks.remove(&(task.0 as usize));
                        self.ended_at = self.now;
                    }
                }
            }
            self.actions = actions;
        }
        let delayed = self.core.backfill_delays_head();
        match (delayed, self.delayed_since) {
            (true, None) => self.delayed_since = Some(self.now),
            (false, Some(since)) => {
                self.head_delay_s += self.now - since;
                self.delayed_since = None;
            }
            _ => {}
        }
        if let Some(deadline) = self.core.next_deadline() {
            let at = deadline.as_micros() as u64;
            if self.next_tick.is_none_or(|t| at < t) {
                self.next_tick = Some(at);
                self.order += 1;
                self.agenda.push(Reverse((at, self.order, Happening::Tick)));
            }
        }
    }

    fn launch(&mut self, n: usize, gpus: Vec<usize>, time_limit: Option<Time>) {
        let Some(t) = self.tasks.get(&n) else {
            return;
        };
        let (duration_s, smact) = (t.duration_s, t.smact_assumed);
        let attempt = self.records[n].launched(self.now);
        for &g in &gpus {
            self.integrate(g, self.now);
            self.gpus[g].tasks.push(n);
        }
        let warmup = self.setup.model.warmup_s.min(duration_s / 2.0);
        let step_s = warmup / f64::from(WARMUP_STEPS);
        self.runs.insert(
            n,
            Run {
                gpus: gpus.clone(),
                remaining: duration_s,
                rate: 0.0,
                since: self.now,
                generation: 0,
                attempt,
                held_mib: 0,
                step_s,
                started: self.now,
                smact,
            },
        );
        self.schedule(self.now + step_s, Happening::Grow(n, attempt, 1));
        if self.setup.model.smact_swing > 0.0 {
            // Each task starts at a point of the cycle of its own, the
            // same in every replay.
            let spread = (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
            let into = spread as f64 / (1u64 << 53) as f64;
            let phase = (n % 2) as u32;
            if let Some(run) = self.runs.get_mut(&n) {
                run.smact = self.setup.model.swung(smact, phase);
            }
            let half = self.setup.model.smact_swing_period_s / 2.0;
            self.schedule(
                self.now + into * half,
                Happening::Swing(n, attempt, phase + 1),
            );
        }
        if let Some(limit) = time_limit {
            let at = self.now + limit.as_secs_f64();
            self.schedule(at, Happening::TimeLimit(n, attempt));
        }
        self.changed(&gpus);
    }

    /// The task takes warm-up step `step`: it fits, or it dies of OOM.
    fn grow(&mut self, n: usize, step: u32) {
        let (Some(t), Some(run)) = (self.tasks.get(&n), self.runs.get(&n)) else {
            return;
        };
        let target = self.setup.model.held_after(t.memory_mib, step);
        let more = target.saturating_sub(run.held_mib);
        let fits = run.gpus.iter().all(|&g| {
            let gpu = &self.gpus[g];
            let slack = match gpu.tasks.len() {
                0 | 1 => 0,
                _ => self.setup.model.fragmentation_mib,
            };
            gpu.used_mib + more + slack <= gpu.total_mib
        });
        if !fits {
            self.stop(n, true);
            self.feed(Event::Exited {
                task: TaskId(n as u64),
                exit: Exit::Oom,
            });
            return;
        }
        let (attempt, next) = (run.attempt, self.now + run.step_s);
        // Borrowed out of the run, not copied: every task takes this step
        // four times.
        let gpus = match self.runs.get_mut(&n) {
            Some(run) => {
                run.held_mib += more;
                std::mem::take(&mut run.gpus)
            }
            None => return,
        };
        for &g in &gpus {
            self.gpus[g].used_mib += more;
            self.note(g);
        }
        if step < WARMUP_STEPS {
            self.schedule(next, Happening::Grow(n, attempt, step + 1));
        }
        self.dirty.extend_from_slice(&gpus);
        if let Some(run) = self.runs.get_mut(&n) {
            run.gpus = gpus;
        }
        self.flush();
    }

    /// Task `n`'s SM activity enters phase `phase` of its swing; the next
    /// change is half a period later.
    fn swing(&mut self, n: usize, attempt: u32, phase: u32) {
        let Some(t) = self.tasks.get(&n) else {
            return;
        };
        let smact = self.setup.model.swung(t.smact_assumed, phase);
        let gpus = match self.runs.get_mut(&n) {
            Some(run) => {
                run.smact = smact;
                run.gpus.clone()
            }
            None => return,
        };
        self.changed(&gpus);
        let half = self.setup.model.smact_swing_period_s / 2.0;
        self.schedule(self.now + half, Happening::Swing(n, attempt, phase + 1));
        self.flush();
    }

    /// Takes a task off its GPUs (finished, or crashed).
    fn stop(&mut self, n: usize, crashed: bool) {
        let Some(run) = self.runs.remove(&n) else {
            return;
        };
        for &g in &run.gpus {
            self.integrate(g, self.now);
            let gpu = &mut self.gpus[g];
            gpu.tasks.retain(|&m| m != n);
            gpu.used_mib -= run.held_mib;
        }
        self.records[n].stopped(self.now, crashed);
        if let (Some(picture), Some(t)) = (self.picture.as_mut(), self.tasks.get(&n)) {
            picture.bars.extend(run.gpus.iter().map(|&gpu| plot::Bar {
                gpu,
                start: run.started,
                end: self.now,
                task: t.task.to_string(),
                group: t.class.to_string(),
                crashed,
            }));
        }
        self.changed(&run.gpus);
    }
}

fn to_micros(seconds: f64) -> u64 {
    (seconds * 1e6).round() as u64
}

fn to_time(seconds: f64) -> Time {
    Time::from_micros(to_micros(seconds))
}
