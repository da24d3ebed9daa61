//! The scheduling core: a pure state machine from events to actions.
//!
//! # Theory of operation
//!
//! The core owns the queue and the knowledge of which task runs where; it
//! does no I/O and reads no clock. A driver (the daemon, the simulator, a
//! test) calls [`Scheduler::step`] with the current time and one [`Event`]
//! and carries out the [`Action`]s it returns: launch a task, complete it,
//! move it to recovery, fail it. Between events, [`Scheduler::next_deadline`]
//! says when the core wants a [`Event::Tick`] because something will change
//! by itself (a reservation lapses, a GPU's windowed SM activity falls below
//! the cap). The same code therefore runs live, in virtual time, and under
//! unit tests.
//!
//! Dispatch takes the recovery queue ahead of the main queue, higher
//! priorities first, then first-in first-out; held tasks are passed over
//! ([`queue`]). Only the head task is considered: if it cannot be placed,
//! nothing behind it is (head-of-line blocking keeps large jobs from
//! starving). A
//! GPU takes the head when it is healthy, its windowed SM activity is at or
//! below the cap, and its free memory after outstanding reservations covers
//! the task's estimate plus a margin. Tasks that need a whole GPU, ask for
//! exclusivity, run under the `exclusive` policy or recover in `exclusive`
//! mode take only idle GPUs. Among the passing GPUs the policy chooses.
//!
//! Invariants: a task is in exactly one of the queues, running, or gone; a
//! running task is listed on each of its GPUs; the ledger holds bookings
//! only for running tasks.

mod backfill;
mod gate;
mod ledger;
mod limits;
mod policy;
mod queue;
mod rules;
mod share;
mod task;
mod window;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

pub use crate::wall_time::MAX_SECONDS;
pub use gate::Gate;
pub use policy::Policy;
pub use queue::{Place, Precedence};
pub use rules::{PlacementRules, QueueRules, RecoveryMode, RecoveryRules, Rules};
pub use task::{
    ArrayOf, Demand, Dependency, DependencyKind, Exit, FailReason, HostLimits, Need, TaskId,
};

use gate::{Activity, Load};
use ledger::Ledger;
use limits::{Loads, QueueCut};
use policy::Candidate;
use queue::Queue;
use share::Shares;

use crate::size::format_mib;

/// Time since the driver's origin (daemon start, trace start).
pub type Time = Duration;

/// Something that happened, as the core's input.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A task entered the main queue.
    Queued { task: TaskId, demand: Demand },
    /// A task waits in the recovery queue after `crashes` OOM crashes
    /// (found there by a restarted daemon).
    Recovering {
        task: TaskId,
        demand: Demand,
        crashes: u32,
    },
    /// A task is already running on `gpus` (found by a restarted daemon);
    /// `crashes` is how many OOM crashes it already had.
    Running {
        task: TaskId,
        demand: Demand,
        gpus: Vec<usize>,
        crashes: u32,
    },
    /// A running task's process ended.
    Exited { task: TaskId, exit: Exit },
    /// A launched task's job never started, for a reason that may pass (no
    /// memory, too many open files, a full disk). It goes back to the head
    /// of its queue, nothing is counted against it, and no task is
    /// launched before `retry_at`: such errors hit every launch alike, and
    /// retrying at once would only spin.
    NotStarted { task: TaskId, retry_at: Time },
    /// A task's owner (or root) holds a task (`held`), or releases it. A
    /// held task keeps its place in the queue but is not launched; a
    /// running one is not stopped, but waits if it comes back (recovery).
    Hold { task: TaskId, held: bool },
    /// A task's priority changed (`carma priority`).
    Prioritize { task: TaskId, priority: i32 },
    /// A task the core never had ended (the driver refused it before it
    /// was queued): tasks that depend on it learn how.
    Ended { task: TaskId, succeeded: bool },
    /// A user cancelled a task. A queued one is dropped at once (and
    /// failed as cancelled); for a running one the driver stops the job
    /// and reports its exit as [`Exit::Cancelled`].
    Cancel { task: TaskId },
    /// New readings of some GPUs.
    Sample(Vec<GpuSample>),
    /// Nothing happened but time passed (see [`Scheduler::next_deadline`]).
    Tick,
}

/// One GPU's reading.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    /// GPU index as given to [`Scheduler::new`].
    pub gpu: usize,
    /// Memory in use, all processes included.
    pub used_mib: u64,
    /// SM activity over the last sampling interval, 0..1.
    pub smact: f64,
    /// SM occupancy over the interval, 0..1; `None` where the metric
    /// source cannot measure it (the interference gate then assumes the
    /// worst).
    pub occupancy: Option<f64>,
    /// DRAM activity over the interval, 0..1; `None` where unknown.
    pub dram: Option<f64>,
    /// False when the GPU cannot be read or reports an error: it is skipped.
    pub healthy: bool,
    /// Memory attributed to running tasks, where the driver can tell.
    pub tasks: Vec<(TaskId, u64)>,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start `task` on `gpus`. `limit_mib` is the memory the placement
    /// granted per GPU (estimate + margin), `None` for a whole GPU: an MPS
    /// driver may cap the job there so a misestimate hurts only itself.
    ///
    /// `time_limit` is the wall time the job may run (its own or the
    /// configured default): the driver stops it there (SIGTERM, then
    /// SIGKILL after a grace) and reports [`Exit::TimeLimit`]. The driver
    /// enforces it, not the core, so that a limit holds while the daemon
    /// is down.
    Launch {
        task: TaskId,
        gpus: Vec<usize>,
        limit_mib: Option<u64>,
        time_limit: Option<Duration>,
        why: String,
    },
    /// The task succeeded.
    Complete { task: TaskId },
    /// The task crashed with OOM and waits in the recovery queue.
    Recover {
        task: TaskId,
        crashes: u32,
        why: String,
    },
    /// The task is finished with for good.
    Fail { task: TaskId, reason: FailReason },
}

/// Why the head of the queues waits (see [`Scheduler::head_waits_for`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// The task at the head.
    pub task: TaskId,
    /// A phrase that follows the task's name: `needs 8GiB free on a GPU;
    /// GPU 0: 3GiB free < 8GiB; GPUs 1-3: SMACT 0.95 > 0.80`. The
    /// driver names the task its own way (the core knows only its id).
    pub why: String,
}

/// A GPU as the core sees it.
#[derive(Debug, Clone)]
struct Gpu {
    total_mib: u64,
    used_mib: u64,
    healthy: bool,
    activity: Activity,
    /// carma tasks running here.
    occupants: Vec<Occupant>,
    /// A MIG instance: takes only single-GPU tasks, since CUDA shows a
    /// process at most one MIG instance.
    mig_instance: bool,
    /// Memory the last sample attributed to each task here.
    seen: Vec<(TaskId, u64)>,
    /// It took a task last at this time and takes none before
    /// `placement.settle_s` has passed.
    settles_at: Time,
}

#[derive(Debug, Clone, Copy)]
struct Occupant {
    task: TaskId,
    user: Option<u32>,
    /// The task holds the GPU alone (exclusive or whole-GPU placement).
    sole: bool,
}

#[derive(Debug, Clone)]
struct Task {
    demand: Demand,
    /// OOM crashes so far.
    crashes: u32,
    /// Launched (or adopted) and not yet exited.
    running: bool,
    /// GPUs while running (possibly none: a restarted daemon may find a
    /// task on a GPU that is gone).
    gpus: Vec<usize>,
    /// Its priority now: the demand's, until changed.
    priority: i32,
    /// Passed over while it waits.
    held: bool,
    /// Arrival order, for first come first served among equals.
    arrival: u64,
    /// When its current run was launched (or adopted).
    started: Time,
}

impl Task {
    /// The first dependency not met yet.
    fn waits_for(&self) -> Option<&Dependency> {
        self.demand.after.iter().find(|d| d.met() != Some(true))
    }
}

/// What a task asks of each GPU it is placed on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// A GPU with nothing of ours on it and almost no memory used.
    Idle(&'static str),
    /// At least `free_mib` free; `book_mib` goes into the ledger.
    Free { free_mib: u64, book_mib: u64 },
}

/// The scheduling core. See the module documentation.
#[derive(Debug, Clone)]
pub struct Scheduler {
    rules: Rules,
    gpus: Vec<Gpu>,
    /// The memory of the largest GPU: only there does a need fill a GPU
    /// (see `on_gpu`, on every placement's path).
    largest_mib: u64,
    tasks: HashMap<TaskId, Task>,
    /// Tasks waiting to be launched, in dispatch order (see [`queue`]).
    waiting: Queue,
    /// What each user has running, for their limits and fair share.
    loads: Loads,
    /// Per task, the tasks that wait for it (`after:`, ...).
    dependents: HashMap<TaskId, Vec<TaskId>>,
    /// Running tasks started from behind a blocked head.
    backfilled: BTreeSet<TaskId>,
    /// Waiting tasks found to depend on something that can no longer
    /// happen, for [`Scheduler::settle`] to fail.
    doomed: Vec<TaskId>,
    /// Arrivals so far: the next task's arrival number.
    arrivals: u64,
    /// Each user's recent GPU use, for fair share.
    shares: Shares,
    ledger: Ledger,
    /// Round-robin position: the GPU index the cycle continues from.
    cursor: usize,
    /// Each GPU's windowed activity at `now`, refreshed before every
    /// dispatch (samples only arrive between dispatches).
    load: Vec<Load>,
    /// Time of the latest step; time never runs backwards inside the core.
    now: Time,
    /// No launch before this time (see [`Event::NotStarted`]).
    hold_until: Option<Time>,
}

impl Scheduler {
    /// A core for GPUs of the given memory sizes (MiB), indexed in order.
    pub fn new(rules: Rules, gpu_total_mib: &[u64]) -> Scheduler {
        let gpus = gpu_total_mib
            .iter()
            .map(|&total_mib| Gpu {
                total_mib,
                used_mib: 0,
                healthy: true,
                activity: Activity::new(rules.placement.smact_window_s),
                occupants: Vec::new(),
                mig_instance: false,
                seen: Vec::new(),
                settles_at: Time::ZERO,
            })
            .collect();
        Scheduler {
            rules,
            gpus,
            largest_mib: gpu_total_mib.iter().copied().max().unwrap_or(0),
            tasks: HashMap::new(),
            waiting: Queue::default(),
            loads: Loads::default(),
            dependents: HashMap::new(),
            doomed: Vec::new(),
            backfilled: BTreeSet::new(),
            arrivals: 0,
            shares: Shares::default(),
            ledger: Ledger::new(gpu_total_mib.len()),
            cursor: 0,
            load: vec![Load::default(); gpu_total_mib.len()],
            now: Time::ZERO,
            hold_until: None,
        }
    }

    /// Feeds one event and returns what to do, in order.
    pub fn step(&mut self, now: Time, event: Event) -> Vec<Action> {
        self.step_all(now, [event])
    }

    /// Feeds events that happened at the same time, then dispatches once:
    /// cheaper than one step each, and no placement sees half of them.
    pub fn step_all(&mut self, now: Time, events: impl IntoIterator<Item = Event>) -> Vec<Action> {
        self.account(now);
        self.now = self.now.max(now);
        let mut actions = Vec::new();
        for event in events {
            match event {
                Event::Queued { task, demand } => self.queue(task, demand, 0, &mut actions),
                Event::Recovering {
                    task,
                    demand,
                    crashes,
                } => self.queue(task, demand, crashes, &mut actions),
                Event::Running {
                    task,
                    demand,
                    gpus,
                    crashes,
                } => self.adopt(task, demand, gpus, crashes),
                Event::Exited { task, exit } => self.exited(task, exit, &mut actions),
                Event::NotStarted { task, retry_at } => self.not_started(task, retry_at),
                Event::Hold { task, held } => {
                    if let Some(t) = self.tasks.get_mut(&task) {
                        t.held = held;
                    }
                }
                Event::Prioritize { task, priority } => {
                    if let Some(t) = self.tasks.get_mut(&task) {
                        t.priority = priority;
                        if self.waiting.contains(task) {
                            self.waiting.insert(task, t);
                        }
                    }
                }
                Event::Ended { task, succeeded } => self.note_ended(task, succeeded),
                Event::Cancel { task } => self.cancel(task, &mut actions),
                Event::Sample(samples) => self.sample(samples),
                Event::Tick => {}
            }
        }
        self.settle(&mut actions);
        self.dispatch(&mut actions);
        actions
    }

    /// When the core next wants a [`Event::Tick`] although no event comes:
    /// the earliest time a waiting task might fit because a reservation
    /// lapses or a GPU's windowed SM activity falls to the cap. `None` when
    /// nothing waits or only an event can help.
    pub fn next_deadline(&self) -> Option<Time> {
        self.head()?;
        let p = &self.rules.placement;
        if let Some(hold) = self.hold_until.filter(|&h| h > self.now) {
            return Some(hold);
        }
        let lapse = self.ledger.next_lapse();
        let cooling = self
            .gpus
            .iter()
            .zip(&self.load)
            .filter(|&(g, load)| g.healthy && p.refuses(load))
            .filter_map(|(g, _)| g.activity.opens_at(self.now, p))
            // A hair later than the exact crossing, so the average is
            // below the cap even after rounding.
            .map(|t| t + Duration::from_millis(1));
        let settling = self.gpus.iter().map(|g| g.settles_at);
        lapse
            .into_iter()
            .chain(cooling)
            .chain(settling)
            .filter(|&t| t > self.now)
            .min()
    }

    /// Memory on `gpu` promised to tasks that started lately but is not
    /// yet in its reading: placement counts it as used, so people should
    /// see it too.
    pub fn reserved_mib(&self, gpu: usize) -> u64 {
        match gpu < self.gpus.len() {
            true => self.ledger.outstanding(gpu, self.now),
            false => 0,
        }
    }

    /// Tasks waiting: (recovery queue, main queue).
    pub fn queued(&self) -> (usize, usize) {
        let recovering = self.waiting.recovering();
        (recovering, self.waiting.len() - recovering)
    }

    /// Every waiting task's place in the queue, in dispatch order.
    pub fn places(&self) -> Vec<(TaskId, Place)> {
        let cut = QueueCut::of(&self.waiting, &self.rules.queue);
        let usage = self.usage();
        self.waiting
            .places(&self.tasks, &usage, |id, t| self.blocked(id, t, &cut))
    }

    /// The task dispatch considers next: the first waiting one that may
    /// start.
    fn head(&self) -> Option<TaskId> {
        let cut = QueueCut::of(&self.waiting, &self.rules.queue);
        let usage = self.usage();
        self.waiting.ordered(&usage).find(|&id| {
            self.tasks
                .get(&id)
                .is_some_and(|t| self.blocked(id, t, &cut).is_none())
        })
    }

    /// Each user's recent GPU use as the queue's order sees it: all alike
    /// with fair share off.
    fn usage(&self) -> impl Fn(Option<u32>) -> f64 + use<> {
        let shares = self.rules.queue.fair_share.then(|| self.shares.clone());
        move |user| shares.as_ref().map_or(0.0, |s| s.usage(user))
    }

    /// Why task `id` may not start now whatever the GPUs, if so: held,
    /// waiting for another task, or over its user's limits.
    fn blocked(&self, id: TaskId, t: &Task, cut: &QueueCut) -> Option<Place> {
        if t.held {
            return Some(Place::Held);
        }
        if let Some(d) = t.waits_for() {
            return Some(Place::Waiting(*d));
        }
        self.loads
            .refuses(id, t, &self.rules.queue, cut)
            .map(Place::OverLimit)
    }

    /// Adds the GPU-seconds held since the last step to each user's
    /// usage: the running set has not changed in between.
    fn account(&mut self, now: Time) {
        let half_life = Duration::from_secs_f64(self.rules.queue.fair_share_half_life_s);
        self.shares
            .advance(now.max(self.now), half_life, self.loads.gpus_held());
    }

    /// Tells the tasks that depend on `task` that it started.
    fn note_started(&mut self, task: TaskId) {
        for id in self.dependents.get(&task).into_iter().flatten() {
            if let Some(t) = self.tasks.get_mut(id) {
                for d in t.demand.after.iter_mut().filter(|d| d.task == task) {
                    d.started = true;
                }
            }
        }
    }

    /// Tells the tasks that depend on `task` how it ended; those that now
    /// never can start are doomed.
    fn note_ended(&mut self, task: TaskId, succeeded: bool) {
        for &id in self.dependents.get(&task).into_iter().flatten() {
            if let Some(t) = self.tasks.get_mut(&id) {
                for d in t.demand.after.iter_mut().filter(|d| d.task == task) {
                    d.ended = Some(succeeded);
                }
                if t.demand.after.iter().any(|d| d.met() == Some(false)) {
                    self.doomed.push(id);
                }
            }
        }
    }

    /// Takes a task that ends out of the core, and out of the lists of
    /// the tasks it waited for.
    fn forget(&mut self, task: TaskId) {
        self.waiting.remove(task);
        let Some(t) = self.tasks.remove(&task) else {
            return;
        };
        for d in &t.demand.after {
            if let Some(dependents) = self.dependents.get_mut(&d.task) {
                dependents.retain(|&id| id != task);
                if dependents.is_empty() {
                    self.dependents.remove(&d.task);
                }
            }
        }
    }

    /// Fails the waiting tasks whose dependencies can never be met, and
    /// then those that depended on them, and so on.
    fn settle(&mut self, actions: &mut Vec<Action>) {
        while let Some(task) = self.doomed.pop() {
            if !self.waiting.contains(task) {
                continue;
            }
            let Some(t) = self.tasks.get(&task) else {
                continue;
            };
            let Some(d) = t.demand.after.iter().find(|d| d.met() == Some(false)) else {
                continue;
            };
            let how = match d.ended {
                Some(true) => "succeeded",
                _ => "did not succeed",
            };
            let why = format!("{}: task {} {how}", d.kind.key(), d.task.0);
            self.forget(task);
            self.note_ended(task, false);
            actions.push(Action::Fail {
                task,
                reason: FailReason::Dependency(why),
            });
        }
    }

    /// Marks `gpu` as a MIG instance: it takes only single-GPU tasks (a
    /// CUDA process sees one MIG instance at most, so a task on two would
    /// find one GPU). Otherwise it is placed on like any GPU.
    pub fn set_mig_instance(&mut self, gpu: usize) {
        if let Some(g) = self.gpus.get_mut(gpu) {
            g.mig_instance = true;
        }
    }

    /// Replaces the rules (a configuration reload). Running tasks stay
    /// where they are; the next dispatch uses the new rules.
    pub fn set_rules(&mut self, rules: Rules) {
        for gpu in &mut self.gpus {
            gpu.activity.set_width(rules.placement.smact_window_s);
        }
        self.rules = rules;
    }

    /// Why the task at the head of the queues cannot start now, for people
    /// (`carma status`, SIGUSR1): what it needs and, per GPU, what is
    /// missing, GPUs with the same reason named together. `None` when
    /// nothing waits.
    pub fn head_waits_for(&self) -> Option<Waiting> {
        let task = self.head()?;
        let t = self.tasks.get(&task)?;
        if let Some(hold) = self.hold_until.filter(|&h| h > self.now) {
            let why = format!(
                "waits: launches paused for {:.1} s after a launch that could not start",
                (hold - self.now).as_secs_f64()
            );
            return Some(Waiting { task, why });
        }
        let want = self.want(&t.demand, t.crashes);
        let p = &self.rules.placement;
        let mut reasons = Vec::new();
        for (g, gpu) in self.gpus.iter().enumerate() {
            let here = self.on_gpu(want, g);
            // This GPU asks more than the task does elsewhere: say why.
            let whole = match (want, here) {
                (Want::Free { .. }, Want::Idle(why)) => format!(" ({why})"),
                _ => String::new(),
            };
            let why = match here {
                _ if !gpu.healthy => "cannot be read".to_string(),
                _ if gpu.mig_instance && t.demand.gpus > 1 => {
                    "a MIG instance: single-GPU tasks only".to_string()
                }
                _ if gpu.settles_at > self.now => format!(
                    "took a task {:.0} s ago; takes none for {:.0} s more (placement.settle_s)",
                    p.settle_s - (gpu.settles_at - self.now).as_secs_f64(),
                    (gpu.settles_at - self.now).as_secs_f64()
                ),
                Want::Idle(_) if !gpu.occupants.is_empty() => {
                    format!("not idle: carma tasks run there{whole}")
                }
                Want::Idle(_) => format!("not idle: {} in use{whole}", format_mib(gpu.used_mib)),
                Want::Free { free_mib: need, .. } => {
                    let free = gpu
                        .total_mib
                        .saturating_sub(gpu.used_mib)
                        .saturating_sub(self.ledger.outstanding(g, self.now));
                    if let Some(busy) = p.refusal(&self.load[g]) {
                        busy
                    } else if free < need {
                        format!("{} free < {}", format_mib(free), format_mib(need))
                    } else if gpu.occupants.iter().any(|o| o.sole) {
                        "taken whole by a task".to_string()
                    } else if p.one_user_per_gpu
                        && gpu.occupants.iter().any(|o| o.user != t.demand.user)
                    {
                        "another user's tasks run there (MPS serves one user per GPU)".to_string()
                    } else {
                        "fits".to_string()
                    }
                }
            };
            reasons.push((g, why));
        }
        let n = t.demand.gpus;
        let needs = match (want, n) {
            (Want::Idle(why), 1) => format!("an idle GPU ({why})"),
            (Want::Idle(why), n) => format!("{n} idle GPUs ({why})"),
            (Want::Free { free_mib, .. }, 1) => format!("{} free on a GPU", format_mib(free_mib)),
            (Want::Free { free_mib, .. }, n) => {
                format!("{} free on each of {n} GPUs", format_mib(free_mib))
            }
        };
        let why = format!("needs {needs}; {}", grouped(reasons).join("; "));
        Some(Waiting { task, why })
    }

    fn queue(&mut self, task: TaskId, mut demand: Demand, crashes: u32, actions: &mut Vec<Action>) {
        // What the core itself knows of a dependency's start adds to what
        // the driver said.
        for d in &mut demand.after {
            d.started |= self
                .tasks
                .get(&d.task)
                .is_some_and(|t| t.running || t.crashes > 0);
        }
        let refused = match self.placeable(&demand) {
            Err(why) => Some(FailReason::Unplaceable(why)),
            Ok(()) => self
                .rules
                .queue
                .refuses(demand.time_limit)
                .map(FailReason::Refused),
        };
        if let Some(reason) = refused {
            self.note_ended(task, false);
            actions.push(Action::Fail { task, reason });
            return;
        }
        for d in &demand.after {
            self.dependents.entry(d.task).or_default().push(task);
        }
        if demand.after.iter().any(|d| d.met() == Some(false)) {
            self.doomed.push(task);
        }
        let arrival = self.arrive();
        let t = Task {
            priority: demand.priority,
            demand,
            crashes,
            running: false,
            gpus: Vec::new(),
            held: false,
            arrival,
            started: self.now,
        };
        self.waiting.insert(task, &t);
        self.tasks.insert(task, t);
    }

    fn arrive(&mut self) -> u64 {
        self.arrivals += 1;
        self.arrivals
    }

    /// Whether some GPU set of this server could ever run the demand.
    fn placeable(&self, demand: &Demand) -> Result<(), String> {
        let have = self.gpus.len();
        // A task on several GPUs cannot use MIG instances (see `passes`).
        let whole = self.gpus.iter().filter(|g| !g.mig_instance).count();
        match demand.gpus {
            0 => Err("it asks for 0 GPUs".into()),
            n if n as usize > have => Err(format!("it needs {n} GPUs, this server has {have}")),
            n if n > 1 && n as usize > whole => Err(format!(
                "it needs {n} GPUs at once, and this server has {whole} not cut into MIG \
                 instances (a process sees one MIG instance at most)"
            )),
            _ => Ok(()),
        }
    }

    fn adopt(&mut self, task: TaskId, demand: Demand, gpus: Vec<usize>, crashes: u32) {
        let want = self.want(&demand, crashes);
        let placed: Vec<(usize, bool)> = gpus
            .into_iter()
            .filter(|&g| g < self.gpus.len())
            .map(|g| (g, self.on_gpu(want, g).is_sole()))
            .collect();
        self.occupy(task, demand.user, &placed, want);
        self.note_started(task);
        let arrival = self.arrive();
        let t = Task {
            priority: demand.priority,
            demand,
            crashes,
            running: true,
            gpus: placed.iter().map(|&(g, _)| g).collect(),
            held: false,
            arrival,
            started: self.now,
        };
        self.loads.launched(&t);
        self.tasks.insert(task, t);
    }

    /// Takes a running task off its GPUs and out of the ledger; false
    /// when it is not running (a stale or duplicate report).
    fn stop_running(&mut self, task: TaskId) -> bool {
        let Some(t) = self.tasks.get_mut(&task).filter(|t| t.running) else {
            return false;
        };
        t.running = false;
        self.loads.stopped(t);
        self.backfilled.remove(&task);
        for &g in &t.gpus {
            let gpu = &mut self.gpus[g];
            gpu.occupants.retain(|o| o.task != task);
            gpu.activity
                .task_left(self.now, task, gpu.occupants.is_empty());
        }
        self.ledger.release(task, &t.gpus);
        t.gpus.clear();
        true
    }

    fn exited(&mut self, task: TaskId, exit: Exit, actions: &mut Vec<Action>) {
        if !self.stop_running(task) {
            return;
        }
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        let max_retries = t
            .demand
            .max_retries
            .unwrap_or(self.rules.recovery.max_retries);
        let outcome = match exit {
            Exit::Success => Action::Complete { task },
            Exit::Oom if t.crashes < max_retries => {
                t.crashes += 1;
                if let Some(user) = t.demand.user {
                    self.shares.charge(user, self.rules.recovery.oom_charge_s);
                }
                self.waiting.insert(task, t);
                let crashes = t.crashes;
                let need = looser_need(&self.rules, &t.demand, crashes);
                let why = match self.rules.recovery.mode {
                    RecoveryMode::Exclusive => "waits for an idle GPU".to_string(),
                    RecoveryMode::Looser => {
                        format!("waits for a GPU with {} free", format_mib(need))
                    }
                };
                actions.push(Action::Recover { task, crashes, why });
                return;
            }
            Exit::Oom => Action::Fail {
                task,
                reason: FailReason::OomRetriesExhausted {
                    crashes: t.crashes + 1,
                },
            },
            Exit::Failed(how) => Action::Fail {
                task,
                reason: FailReason::Exit(how),
            },
            Exit::Cancelled => Action::Fail {
                task,
                reason: FailReason::Cancelled,
            },
            Exit::TimeLimit => Action::Fail {
                task,
                reason: FailReason::TimeLimit(
                    self.rules
                        .queue
                        .time_limit(t.demand.time_limit)
                        .unwrap_or_default(),
                ),
            },
        };
        self.forget(task);
        self.note_ended(task, matches!(outcome, Action::Complete { .. }));
        actions.push(outcome);
    }

    fn not_started(&mut self, task: TaskId, retry_at: Time) {
        if !self.stop_running(task) {
            return;
        }
        // Back to its place: its rank has not changed.
        if let Some(t) = self.tasks.get(&task) {
            self.waiting.insert(task, t);
        }
        self.hold_until = Some(self.hold_until.map_or(retry_at, |h| h.max(retry_at)));
    }

    fn cancel(&mut self, task: TaskId, actions: &mut Vec<Action>) {
        if self.waiting.contains(task) {
            self.forget(task);
            self.note_ended(task, false);
            actions.push(Action::Fail {
                task,
                reason: FailReason::Cancelled,
            });
        }
    }

    fn sample(&mut self, samples: Vec<GpuSample>) {
        for s in samples {
            let Some(gpu) = self.gpus.get_mut(s.gpu) else {
                continue;
            };
            gpu.used_mib = s.used_mib;
            gpu.healthy = s.healthy;
            gpu.activity.record(self.now, &s);
            gpu.seen.clone_from(&s.tasks);
            for (task, mib) in s.tasks {
                self.ledger.observe(task, s.gpu, mib);
            }
        }
    }

    /// Places head tasks until one does not fit.
    fn dispatch(&mut self, actions: &mut Vec<Action>) {
        self.ledger.expire(self.now);
        if self.waiting.is_empty() {
            return;
        }
        match self.hold_until {
            Some(hold) if hold > self.now => return,
            Some(_) => self.hold_until = None,
            None => {}
        }
        for (load, gpu) in self.load.iter_mut().zip(&self.gpus) {
            *load = gpu.activity.load(self.now, &self.rules.placement);
        }
        // Placing a task changes no other task's rank: one order serves a
        // pass. A launch may free a task that waits `after:` it, further
        // back, so passes repeat while they launch.
        loop {
            let waiting = std::mem::take(&mut self.waiting);
            let (launched, go_on) = self.pass(&waiting, actions);
            self.waiting = waiting;
            for &task in &launched {
                self.waiting.remove(task);
            }
            if launched.is_empty() || !go_on {
                return;
            }
        }
    }

    /// One dispatch pass over `waiting` (taken out of the core while it
    /// runs): the tasks it launched, and whether another pass might
    /// launch more (false: the head is stuck).
    fn pass(&mut self, waiting: &Queue, actions: &mut Vec<Action>) -> (Vec<TaskId>, bool) {
        let cut = QueueCut::of(waiting, &self.rules.queue);
        let usage = self.usage();
        let mut launched = Vec::new();
        // Once the head cannot be placed: its reservation, which tasks
        // further back must respect (see [`backfill`]).
        let mut reserved = None;
        for task in waiting.ordered(&usage) {
            let Some(t) = self.tasks.get(&task) else {
                continue;
            };
            if self.blocked(task, t, &cut).is_some() {
                continue;
            }
            let action = match &reserved {
                None => match self.place(task, &[]) {
                    Some(action) => action,
                    None if self.rules.queue.backfill => match self.reservation(task) {
                        Some(r) => {
                            reserved = Some(r);
                            continue;
                        }
                        None => return (launched, false),
                    },
                    None => return (launched, false),
                },
                Some(r) => {
                    let off_limits = self.off_limits(task, r);
                    let Some(action) = self.place(task, &off_limits) else {
                        continue;
                    };
                    self.backfilled.insert(task);
                    action
                }
            };
            launched.push(task);
            self.note_started(task);
            actions.push(action);
        }
        (launched, true)
    }

    /// Tries to place one task on GPUs not in `off_limits`; returns its
    /// launch if it fits now.
    fn place(&mut self, task: TaskId, off_limits: &[usize]) -> Option<Action> {
        let t = self.tasks.get(&task)?;
        let n = t.demand.gpus as usize;
        let want = self.want(&t.demand, t.crashes);
        let mut candidates: Vec<Candidate> = (0..self.gpus.len())
            .filter(|g| !off_limits.contains(g))
            .filter_map(|g| self.passes(g, &t.demand, self.on_gpu(want, g)))
            .collect();
        if candidates.len() < n {
            return None;
        }
        let user = t.demand.user;
        let time_limit = self.rules.queue.time_limit(t.demand.time_limit);
        let policy = if want.is_sole() {
            Policy::Exclusive
        } else {
            self.rules.placement.policy
        };
        policy.rank(&mut candidates, self.cursor, self.gpus.len());
        let idle_first = self.rules.placement.idle_first && !want.is_sole();
        if idle_first {
            // Stable: idle GPUs first, each group still in policy order.
            candidates.sort_by_key(|c| !c.idle);
        }
        candidates.truncate(n);
        if policy == Policy::RoundRobin {
            self.cursor = candidates.last().map_or(0, |c| c.gpu + 1) % self.gpus.len();
        }
        let placed: Vec<(usize, bool)> = candidates
            .iter()
            .map(|c| (c.gpu, c.alone.is_some()))
            .collect();
        self.occupy(task, user, &placed, want);
        let gpus: Vec<usize> = placed.iter().map(|&(g, _)| g).collect();
        let settle = Duration::from_secs_f64(self.rules.placement.settle_s);
        for &g in &gpus {
            self.gpus[g].settles_at = self.now + settle;
        }
        if let Some(t) = self.tasks.get_mut(&task) {
            t.running = true;
            t.gpus = gpus.clone();
            t.started = self.now;
            self.loads.launched(t);
        }
        Some(Action::Launch {
            task,
            time_limit,
            why: explain(policy, idle_first, want, &candidates),
            limit_mib: match want {
                Want::Free { free_mib, .. } if candidates.iter().all(|c| c.alone.is_none()) => {
                    Some(free_mib)
                }
                _ => None,
            },
            gpus,
        })
    }

    /// Marks the GPUs (index, held alone) as running `task` and books its
    /// memory.
    fn occupy(&mut self, task: TaskId, user: Option<u32>, placed: &[(usize, bool)], want: Want) {
        for &(g, sole) in placed {
            self.gpus[g].occupants.push(Occupant { task, user, sole });
        }
        if let Want::Free { book_mib, .. } = want {
            let ramp = Duration::from_secs_f64(self.rules.placement.reservation_ramp_s);
            let gpus: Vec<usize> = placed.iter().map(|&(g, _)| g).collect();
            self.ledger.book(task, &gpus, book_mib, self.now + ramp);
        }
    }

    /// What `demand` asks of any GPU after `crashes` OOMs.
    fn want(&self, demand: &Demand, crashes: u32) -> Want {
        let p = &self.rules.placement;
        if demand.exclusive {
            return Want::Idle("the task asked for exclusive GPUs");
        }
        if p.policy == Policy::Exclusive {
            return Want::Idle("exclusive policy");
        }
        if crashes > 0 {
            if self.rules.recovery.mode == RecoveryMode::Exclusive {
                return Want::Idle("recovery after an OOM crash");
            }
            if demand.need == Need::WholeGpu {
                return Want::Idle("the task needs a whole GPU");
            }
            let need = looser_need(&self.rules, demand, crashes);
            return Want::Free {
                free_mib: need,
                book_mib: need,
            };
        }
        match demand.need {
            Need::WholeGpu => Want::Idle("the task needs a whole GPU"),
            Need::Mib(mib) => Want::Free {
                free_mib: mib.saturating_add(p.margin_mib),
                book_mib: mib,
            },
            Need::Unknown => Want::Free {
                free_mib: p.unknown_margin_mib,
                book_mib: p.unknown_margin_mib,
            },
        }
    }

    /// What `want` asks of GPU `g` in particular: a need that fills the
    /// whole GPU asks for it idle, so no task waits forever for memory no
    /// GPU has.
    fn on_gpu(&self, want: Want, g: usize) -> Want {
        let largest = self.largest_mib;
        match want {
            // Only where no GPU is larger: a need that fits a larger GPU
            // (or MIG instance) waits for one.
            Want::Free { free_mib, .. }
                if free_mib >= self.gpus[g].total_mib && self.gpus[g].total_mib == largest =>
            {
                Want::Idle("its need fills a whole GPU")
            }
            w => w,
        }
    }

    /// Whether GPU `index` holds nothing: no carma task and almost no
    /// memory in use.
    fn is_idle(&self, index: usize) -> bool {
        let gpu = &self.gpus[index];
        gpu.occupants.is_empty() && gpu.used_mib <= self.rules.placement.idle_used_mib
    }

    /// Whether GPU `index` can take the task now; the ranking data if so.
    fn passes(&self, index: usize, demand: &Demand, want: Want) -> Option<Candidate> {
        let p = &self.rules.placement;
        let gpu = &self.gpus[index];
        if !gpu.healthy || gpu.settles_at > self.now || (gpu.mig_instance && demand.gpus > 1) {
            return None;
        }
        let free_mib = gpu
            .total_mib
            .saturating_sub(gpu.used_mib)
            .saturating_sub(self.ledger.outstanding(index, self.now));
        let load = &self.load[index];
        let ok = match want {
            Want::Idle(_) => self.is_idle(index),
            Want::Free { free_mib: need, .. } => {
                free_mib >= need
                    && !p.refuses(load)
                    && gpu
                        .occupants
                        .iter()
                        .all(|o| !o.sole && (!p.one_user_per_gpu || o.user == demand.user))
            }
        };
        ok.then_some(Candidate {
            gpu: index,
            free_mib,
            smact: load.smact,
            idle: self.is_idle(index),
            alone: match want {
                Want::Idle(why) => Some(why),
                Want::Free { .. } => None,
            },
        })
    }
}

impl Want {
    /// The task will hold the GPU alone.
    fn is_sole(self) -> bool {
        matches!(self, Want::Idle(_))
    }
}

/// Looser recovery: the last need plus a step per crash.
fn looser_need(rules: &Rules, demand: &Demand, crashes: u32) -> u64 {
    let base = match demand.need {
        Need::Mib(mib) => mib,
        Need::Unknown | Need::WholeGpu => rules.placement.unknown_margin_mib,
    };
    base.saturating_add(rules.recovery.looser_step_mib * u64::from(crashes))
}

/// The placement log line: which rule chose which GPUs, and from what.
fn explain(policy: Policy, idle_first: bool, want: Want, chosen: &[Candidate]) -> String {
    let want = match chosen.first().and_then(|c| c.alone) {
        Some(why) => Want::Idle(why),
        None => want,
    };
    let gpus: Vec<String> = chosen
        .iter()
        .map(|c| {
            format!(
                "GPU {} ({} free, SMACT {:.2})",
                c.gpu,
                format_mib(c.free_mib),
                c.smact
            )
        })
        .collect();
    match want {
        Want::Idle(reason) => format!("idle {} ({reason})", gpus.join(", ")),
        Want::Free { free_mib, .. } => {
            let rule = match idle_first && chosen.iter().all(|c| c.idle) {
                true => format!("{policy}, idle first"),
                false => policy.to_string(),
            };
            format!(
                "{rule}: {} (needs {} free)",
                gpus.join(", "),
                format_mib(free_mib)
            )
        }
    }
}

/// `GPU n: why` lines, GPUs with the same reason together (`GPUs 0-3,
/// 6: carma tasks run there`), in the order of each reason's first GPU:
/// a server of eight GPUs says one thing once, not eight times.
fn grouped(reasons: Vec<(usize, String)>) -> Vec<String> {
    let mut groups: Vec<(Vec<usize>, String)> = Vec::new();
    for (g, why) in reasons {
        match groups.iter_mut().find(|(_, w)| *w == why) {
            Some((gpus, _)) => gpus.push(g),
            None => groups.push((vec![g], why)),
        }
    }
    groups
        .into_iter()
        .map(|(gpus, why)| match gpus.as_slice() {
            [g] => format!("GPU {g}: {why}"),
            _ => format!("GPUs {}: {why}", ranges(&gpus)),
        })
        .collect()
}

/// Ascending indices as ranges: `0-3, 6`.
fn ranges(indices: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => indices[i].to_string(),
            1 => format!("{}, {}", indices[i], indices[j]),
            _ => format!("{}-{}", indices[i], indices[j]),
        });
        i = j + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests;
