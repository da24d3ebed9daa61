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
//! Dispatch order (`queue`): a task's first re-run after an OOM crash
//! first, then higher priorities, then (with `queue.fair_share`, on by
//! default) the user who used the GPUs less lately, then submission order.
//! Held tasks, tasks waiting for their dependencies and tasks over a
//! per-user limit are passed over without blocking anyone. Otherwise only
//! the head is placed: if it cannot be, nothing behind it is (head-of-line
//! blocking keeps large jobs from starving), except that with
//! `queue.backfill` a task that ends before the head could start, on GPUs
//! that hold no task, may go ahead (`backfill`). A GPU takes the head
//! when it is healthy, the interference gate lets it (`gate`: by default
//! the prototype's rule on SM activity, occupancy and DRAM, averaged over a
//! window that forgets tasks that left the GPU; a GPU that took a task
//! takes no other shared one until its readings show the newcomer), and
//! its free memory after outstanding
//! reservations covers the task's estimate plus a margin. Idle GPUs go
//! first (`placement.idle_first`). Tasks that need a whole GPU, ask for
//! exclusivity, run under the `exclusive` policy or recover in `exclusive`
//! mode take only idle GPUs; under MPS a GPU serves one user at a time.
//! Among the passing GPUs the policy chooses (`policy`). Launches may be
//! paced for the whole server, as the research prototype's loop was
//! (`pace`; off by default).
//!
//! Invariants: a task is in exactly one of the queues, running, or gone; a
//! running task is listed on each of its GPUs; the ledger holds bookings
//! only for running tasks.

mod backfill;
mod events;
mod explain;
mod gate;
mod ledger;
mod limits;
mod pace;
mod placement;
mod policy;
mod queue;
mod rules;
mod share;
mod stuck;
mod task;
mod window;

use std::collections::BTreeSet;
use std::time::Duration;

use rustc_hash::FxHashMap;

pub use crate::wall_time::MAX_SECONDS;
pub use explain::{Placed, Waiting};
pub use gate::Gate;
pub use limits::Limit;
pub use policy::Policy;
pub use queue::{Place, Precedence};
pub use rules::{PlacementRules, QueueRules, RecoveryMode, RecoveryRules, Rules};
pub use task::{
    ArrayOf, Demand, Dependency, DependencyKind, Exit, FailReason, HostLimits, Need, TaskId,
};

use gate::Activity;
use ledger::Ledger;
use limits::{Loads, QueueCut};
use placement::looser_need;
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

impl GpuSample {
    /// GPU `gpu` read healthy with nothing on it: the base a driver fills
    /// in (`..GpuSample::idle(g)`), and what an empty GPU reads.
    pub fn idle(gpu: usize) -> GpuSample {
        GpuSample {
            gpu,
            used_mib: 0,
            smact: 0.0,
            occupancy: None,
            dram: None,
            healthy: true,
            tasks: Vec::new(),
        }
    }
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
        why: Placed,
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
    tasks: FxHashMap<TaskId, Box<Task>>,
    /// Tasks waiting to be launched, in dispatch order (see [`queue`]).
    waiting: Queue,
    /// What each user has running, for their limits and fair share.
    loads: Loads,
    /// Per task, the tasks that wait for it (`after:`, ...).
    dependents: FxHashMap<TaskId, BTreeSet<TaskId>>,
    /// Tasks that ended within the events being fed, and how: a task
    /// queued later in the same events waits for one of them as its
    /// driver saw it before the end was fed (running), and would never
    /// hear of the end.
    ended_now: FxHashMap<TaskId, bool>,
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
    /// Time of the latest step; time never runs backwards inside the core.
    now: Time,
    /// No launch before this time (see [`Event::NotStarted`]).
    hold_until: Option<Time>,
    /// The last launches, for the pause after each ([`pace`]).
    launches: pace::Launches,
    /// The last dispatch launched nothing, and nothing since could change
    /// that ([`stuck`]).
    stuck: Option<stuck::Stuck>,
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
                activity: Activity::new(rules.placement.smact_window_s.get()),
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
            tasks: FxHashMap::default(),
            waiting: Queue::default(),
            loads: Loads::default(),
            dependents: FxHashMap::default(),
            ended_now: FxHashMap::default(),
            doomed: Vec::new(),
            backfilled: BTreeSet::new(),
            arrivals: 0,
            shares: Shares::default(),
            ledger: Ledger::new(gpu_total_mib.len()),
            cursor: 0,
            now: Time::ZERO,
            hold_until: None,
            launches: pace::Launches::default(),
            stuck: None,
        }
    }

    /// Feeds one event and returns what to do, in order.
    pub fn step(&mut self, now: Time, event: Event) -> Vec<Action> {
        self.step_all(now, [event])
    }

    /// Feeds events that happened at the same time, then dispatches once:
    /// cheaper than one step each, and no placement sees half of them.
    pub fn step_all(&mut self, now: Time, events: impl IntoIterator<Item = Event>) -> Vec<Action> {
        let mut actions = Vec::new();
        self.step_sampled(now, events, &[], &mut actions);
        actions
    }

    /// [`Scheduler::step_all`] with GPU readings lent rather than given,
    /// applied after `events` as an [`Event::Sample`] at their end would
    /// be, and the actions appended to `actions`: a driver that steps at
    /// every change (the simulator, a few times per task) keeps one list
    /// of samples and one of actions and refills them, instead of building
    /// and dropping a list, each GPU's task list and the actions' list.
    pub fn step_sampled(
        &mut self,
        now: Time,
        events: impl IntoIterator<Item = Event>,
        samples: &[GpuSample],
        actions: &mut Vec<Action>,
    ) {
        self.account(now);
        self.now = self.now.max(now);
        self.ended_now.clear();
        for event in events {
            // A tick comes at (about) the deadline that the memo keeps.
            if !matches!(event, Event::Queued { .. } | Event::Sample(_)) {
                self.stuck = None;
            }
            match event {
                Event::Queued { task, demand } => {
                    self.queue(task, demand, 0, actions);
                    self.note_queued(task);
                }
                Event::Recovering {
                    task,
                    demand,
                    crashes,
                } => self.queue(task, demand, crashes, actions),
                Event::Running {
                    task,
                    demand,
                    gpus,
                    crashes,
                } => self.adopt(task, demand, gpus, crashes),
                Event::Exited { task, exit } => self.exited(task, exit, actions),
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
                Event::Cancel { task } => self.cancel(task, actions),
                Event::Sample(samples) => self.sample(&samples),
                Event::Tick => {}
            }
        }
        self.sample(samples);
        self.settle(actions);
        self.dispatch(actions);
    }

    /// When the core next wants a [`Event::Tick`] although no event comes:
    /// the earliest time a waiting task might fit because a reservation
    /// lapses, a GPU's windowed SM activity falls to the cap or a pause
    /// after a launch ends. `None` when nothing waits or only an event can
    /// help.
    pub fn next_deadline(&self) -> Option<Time> {
        match self.stuck_deadline() {
            Some(deadline) => deadline,
            None => self.deadline(),
        }
    }

    /// [`Scheduler::next_deadline`], worked out afresh.
    fn deadline(&self) -> Option<Time> {
        if self.waiting.is_empty() {
            return None;
        }
        self.head()?;
        let p = &self.rules.placement;
        if let Some(hold) = self.hold_until.filter(|&h| h > self.now) {
            return Some(hold);
        }
        let lapse = self.ledger.next_lapse();
        let cooling = self
            .gpus
            .iter()
            .filter(|g| g.healthy)
            .filter_map(|g| g.activity.cools_at(self.now, p))
            // A hair later than the exact crossing, so the average is
            // below the cap even after rounding.
            .map(|t| t + Duration::from_millis(1));
        let settling = self.gpus.iter().map(|g| g.settles_at);
        let awaiting = self.gpus.iter().filter_map(|g| g.activity.awaits(self.now));
        let pausing = self.launch_pause().into_iter().chain(self.sharing_pause());
        lapse
            .into_iter()
            .chain(cooling)
            .chain(settling)
            .chain(awaiting)
            .chain(pausing)
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
        let half_life = self.rules.queue.fair_share_half_life_s.duration();
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
        self.ended_now.insert(task, succeeded);
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
                dependents.remove(&task);
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
        self.stuck = None;
        if let Some(g) = self.gpus.get_mut(gpu) {
            g.mig_instance = true;
        }
    }

    /// Replaces the rules (a configuration reload). Running tasks stay
    /// where they are; the next dispatch uses the new rules.
    pub fn set_rules(&mut self, rules: Rules) {
        self.stuck = None;
        for gpu in &mut self.gpus {
            gpu.activity.set_width(rules.placement.smact_window_s.get());
        }
        self.rules = rules;
    }
}

#[cfg(test)]
mod tests;
