//! The life of a task in the daemon's hands, from the moment it is taken
//! in until its directory lands in `done/` or `failed/`: admission,
//! launches and their failures, how each run ended, OOM recovery,
//! requeues, users' requests, and closings retried until the disk lets
//! them through.
//!
//! # Theory of operation
//!
//! This is the daemon's state machine, apart from its shell. It holds the
//! scheduling core ([`Scheduler`]), the tasks it is responsible for, and
//! the ended tasks on their way out; it decides, and the world carries out.
//! Every input comes with the time ([`Moment`]): nothing here reads a clock.
//! Everything it does to the world goes through [`World`], a handful of
//! effects (write a record, move a directory, start or stop a run, record
//! a peak, notify), each answering whether it worked. The daemon's
//! executor ([`crate::daemon`]) implements the world on the spool and real
//! processes; the tests here implement it in memory and tell stories: a
//! task taken in, placed, launched, crashed of OOM, recovered, done; a
//! cancel while starting; a full disk at each step; a restart.
//!
//! What failed for a reason that may pass is retried on a [`Backoff`]
//! schedule and never costs a task: a launch that could not start puts the
//! task back at the head of its queue; an ended task whose move failed
//! stays here ([`Closing`]) until the move succeeds. What cannot be done
//! is refused in words ([`Answer::Refused`]), and a task that cannot run
//! goes to `failed/` with its reason.

mod backoff;
mod closing;
mod ended;
mod endings;
mod kept;
mod overdue;
mod requests;
mod tasks;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::time::Duration;

pub use crate::refusal::{Refusal, Refused};
pub use backoff::{Backoff, Backoffs};
pub use ended::{Ended, seq_of};
pub use endings::{Ending, Endings, KEPT as ENDINGS_KEPT, public_reason};
pub use overdue::{
    Deadlines, Graces, MARGIN as OVERDUE_MARGIN, Overdue, TIME_LIMIT as OVERDUE_TIME_LIMIT,
};
pub use requests::{Answer, JUNK_PER_MINUTE, PerMinute, Verdicts};
pub use tasks::{Holding, Tasks};

use crate::estimate::Fingerprint;
use crate::metrics::Metrics;
use crate::procfs::ProcessId;
use crate::rad::{ArraySpec, HostLimits, TaskSpec};
use crate::sched::{Action, Demand, Event, Exit, FailReason, Scheduler, TaskId, Time};
use crate::spool::record::{Outcome, RunAs, TaskRecord};
use crate::spool::{State, TaskName};

/// A task the daemon is responsible for: waiting or running.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: TaskName,
    /// Where its directory is now: pending, recovery or running.
    pub state: State,
    /// What the job file says that is needed after intake.
    pub job: Job,
    pub record: TaskRecord,
    /// What the job asks of the core, until the core has it: admission
    /// moves it there, so a queue of thousands holds it once.
    pub demand: Option<Box<Demand>>,
    /// The job's owner, for permissions and per-user counts.
    pub owner: Option<u32>,
    /// Its priority, as the core has it.
    pub priority: i32,
    /// Who the job runs as, when the daemon is root (shared by a user's
    /// tasks taken in together).
    pub run_as: Option<Arc<RunAs>>,
    /// Owner's name, for logs and status (shared as its account is).
    pub user: Arc<str>,
    /// The current (or last) run's number; 0 before the first.
    pub run: u32,
    /// GPUs of the current run.
    pub gpus: Vec<usize>,
    /// The current run's supervisor, once known.
    pub supervisor: Option<ProcessId>,
    /// Started by an earlier daemon (or without a reaper): nobody reports
    /// its end, so its run directory is polled for it.
    pub adopted: bool,
    /// When the current run was launched (Unix seconds).
    pub since: f64,
    /// The current run's wall-time limit, seconds, as launched.
    pub time_limit_s: Option<f64>,
    /// When the current run should be over, for the daemon's backstop
    /// ([`Lifecycle::overdue`]).
    pub deadlines: Deadlines,
    /// Starts that failed once the job's process was its user's, for a
    /// reason that may pass ([`Lifecycle::failed_as_its_user`]).
    pub start_failures: u32,
    /// Most memory seen on one GPU during the current run, MiB.
    pub peak_mib: u64,
    /// How long the last run that ended ran, seconds, when it succeeded.
    pub run_s: Option<f64>,
    /// The job's identity in the estimators' history.
    pub fingerprint: Fingerprint,
    /// Bytes of its job files in the spool.
    pub bytes: u64,
}

/// The parts of a job file's [`TaskSpec`] that a waiting or running task
/// still needs (to launch it, to expand its array, to say its end); the
/// rest went into its demand and estimate at intake. A queue of thousands
/// holds these, not whole specs.
#[derive(Debug, Clone)]
pub struct Job {
    /// The script's lines, joined by newlines: one allocation, where a
    /// string a line cost some 56 bytes each besides its text (10,000
    /// queued jobs of 10,000 one-letter lines held 5.6 GB).
    script: Box<str>,
    pub notify: Option<String>,
    pub array: Option<ArraySpec>,
    pub host: HostLimits,
}

impl Job {
    /// The script's lines, as the job file gave them.
    pub fn script(&self) -> Vec<&str> {
        self.script.split('\n').collect()
    }
}

impl From<TaskSpec> for Job {
    fn from(spec: TaskSpec) -> Job {
        Job {
            script: spec.script.join("\n").into(),
            notify: spec.notify,
            array: spec.array,
            host: spec.host,
        }
    }
}

impl Task {
    /// `JOB_INDEX` (Slurm's spelling) for an element of an array job.
    pub fn array_label(&self) -> Option<String> {
        self.record.array.map(|a| format!("{}_{}", a.job, a.index))
    }
}

/// A task that ended (the core is done with it, or never knew it) whose
/// directory has not reached `done/` or `failed/` yet. A move that fails
/// (a full disk, an I/O error) is retried on `retry`'s schedule: the task
/// is never dropped from the daemon's hands.
#[derive(Debug, Clone)]
pub struct Closing {
    pub name: TaskName,
    /// Its record, outcome included, to write before the move.
    pub record: TaskRecord,
    /// Where its directory is: known, never looked up by name (a user may
    /// put anything under a task's name in `pending/`).
    pub from: State,
    pub to: State,
    /// The latest run, whose peak goes to history on success.
    pub run: u32,
    pub retry: Backoff,
    /// Bytes of carma's copies of its files, counted against its owner's
    /// cap once it has ended (`queue.user_max_ended_mib`).
    pub bytes: u64,
    /// The job file's own `notify:` command, if any.
    pub notify: Option<String>,
    /// Who the notification runs as.
    pub run_as: Option<Arc<RunAs>>,
}

/// When an input happens: the core's clock, and the wall clock for what
/// is written down for people.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moment {
    pub at: Time,
    /// Unix seconds.
    pub unix: f64,
}

/// What a placement grants a run besides its GPUs (see
/// [`crate::sched::Action::Launch`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Memory per GPU, when the run got a share of its GPUs.
    pub limit_mib: Option<u64>,
    /// Wall time, when the run has a limit.
    pub time_limit: Option<Duration>,
}

/// A run the world started.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub run: u32,
    pub supervisor: Option<ProcessId>,
    /// Unix seconds, as written in its `launch.json`.
    pub launched_at: f64,
    /// The graces its supervisor gives the job, as its launch says.
    pub graces: Graces,
    /// Its end is reported ([`Lifecycle::run_ended`]) without being
    /// looked for; false when it must be polled.
    pub reported: bool,
}

/// A launch that did not start the job, for a reason that may pass.
#[derive(Debug, Clone, PartialEq)]
pub struct NotStarted {
    /// Where the task's directory is now.
    pub at: State,
    pub reason: String,
}

/// What asking a run's supervisor to stop its job came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Asked; its end follows.
    Asked,
    /// Its supervisor has not said who it is yet: ask again soon.
    NotYet,
    /// The run already ended.
    Over,
    /// It cannot be asked; why.
    Failed(String),
}

/// Starts that fail as the job's user, for a reason that may pass, that a
/// task is given before it fails ([`Lifecycle::failed_as_its_user`]).
pub const USER_START_TRIES: u32 = 3;

/// How a run ended, as the world read it.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// The job ran and ended so.
    Exited {
        exit: Exit,
        /// Its supervisor's measure of its peak, MiB.
        peak_mib: Option<u64>,
        /// How long it ran, seconds.
        run_s: Option<f64>,
    },
    /// The job never started, for a reason that may pass.
    NotStarted(String),
}

/// The effects the lifecycle asks of the world. Each is one step in the
/// spool or among processes that either happened or did not.
pub trait World {
    /// The user whose limits `uid`'s tasks count against (a subordinate
    /// id's owner: [`crate::accounts::accountable`]).
    fn answers_for(&self, uid: u32) -> u32 {
        uid
    }
    /// Writes a task's record in its directory at `at`, atomically.
    fn write_record(&mut self, at: State, name: &TaskName, record: &TaskRecord) -> io::Result<()>;
    /// Moves a task's directory (one rename, made durable).
    fn move_task(&mut self, name: &TaskName, from: State, to: State) -> io::Result<()>;
    /// Whether carma's own directory of the task is in `state`.
    fn holds(&self, state: State, name: &TaskName) -> bool;
    /// Writes, beside the record of an ended task at `at`, what its owner
    /// reads: the reason it failed and the owner's copy of the record.
    fn write_ending(&mut self, at: State, name: &TaskName, record: &TaskRecord) -> io::Result<()>;
    /// An ended task's record, read back from its directory.
    fn load_record(&self, state: State, name: &TaskName) -> Result<TaskRecord, String>;
    /// Removes an ended task's reason file (it is being requeued).
    fn remove_reason(&mut self, state: State, name: &TaskName) -> io::Result<()>;
    /// The task directories in `pending/` numbered `seq` or above: a
    /// listing, nothing read.
    fn pending_from(&self, seq: u64) -> Vec<TaskName>;
    /// Starts the next run of `task` on `gpus`; the task's directory is
    /// in `running/` when it did.
    fn start(
        &mut self,
        task: &Task,
        gpus: &[usize],
        limits: &Limits,
        why: &str,
    ) -> Result<Started, NotStarted>;
    /// Asks the supervisor of `name`'s run `run` to stop its job.
    fn stop(&mut self, name: &TaskName, run: u32) -> Stop;
    /// Records a successful run's peak in the estimators' history.
    fn remember_peak(&mut self, name: &TaskName, record: &TaskRecord);
    /// Records how long a failed run ran, where the history knows its job:
    /// backfill plans with the longest run seen, and runs that fail (a
    /// time limit, a cancel, an error) must count, or a user could teach
    /// it a short run with quick successes and then run long.
    fn remember_run_time(&mut self, name: &TaskName, record: &TaskRecord);
    /// Runs the notification of a task that landed in `closing.to`.
    fn notify(&mut self, closing: &Closing);
    /// Takes in (reads, estimates, queues) a task whose directory is back
    /// in `state`, as if it had just been submitted.
    fn take_in(&mut self, name: &TaskName, state: State);
    /// [`World::take_in`] of an ended task put back in `pending/` by a
    /// request: a new waiting task of its owner's, held to the per-user
    /// limits as a submission is.
    fn take_in_requeued(&mut self, name: &TaskName) {
        self.take_in(name, State::Pending);
    }
    /// Removes carma's copies of an ended task's files (its `job/`),
    /// keeping its record and output: its owner's ended tasks keep more
    /// than `queue.user_max_ended_mib`.
    fn drop_copies(&mut self, state: State, name: &TaskName) -> io::Result<()>;
}

/// The daemon's tasks and what it decided about them.
pub struct Lifecycle {
    /// The scheduling core: placement, queues, retries.
    pub core: Scheduler,
    /// Waiting and running tasks.
    pub tasks: Tasks,
    /// Ended tasks on their way to `done/` or `failed/`.
    pub closing: BTreeMap<u64, Closing>,
    /// Tasks in `done/` and `failed/`.
    pub ended: Ended,
    /// What ended tasks keep of their owners' files, held to a cap.
    pub kept: kept::Kept,
    /// What became of users' recent requests, for the status file.
    pub verdicts: Verdicts,
    /// Requests that named no task, per user.
    pub junk: PerMinute,
    /// Requests answered, per user.
    pub asked: PerMinute,
    /// What happened, counted for Prometheus: not an effect on the world
    /// (an atomic add in memory), so counted here, where it is decided.
    pub metrics: Arc<Metrics>,
    /// The tasks that ended lately, as anyone may know them.
    pub endings: Endings,
    /// Core events produced while handling inputs, fed at the next step.
    events: Vec<Event>,
    /// Launches that could not start: the core pauses dispatch for the
    /// delay this gives.
    launch_retry: Backoff,
    /// The daemon's own user, who (with root) may act on every task.
    me: u32,
    /// Arrays whose every element was found taken in: `pending/` is not
    /// listed again for a request about them (an array's elements are
    /// made once, and never again while the daemon runs).
    settled_arrays: std::collections::HashSet<u64>,
}

/// Arrays remembered as settled at most: past it, the memory starts
/// afresh (each array costs one more listing).
const SETTLED_ARRAYS: usize = 65_536;

impl Lifecycle {
    /// A lifecycle around `core`, for a daemon running as user `me`.
    pub fn new(core: Scheduler, me: u32) -> Lifecycle {
        Lifecycle {
            core,
            tasks: Tasks::default(),
            closing: BTreeMap::new(),
            ended: Ended::default(),
            kept: kept::Kept::default(),
            verdicts: Verdicts::default(),
            junk: PerMinute::new(
                requests::JUNK_PER_MINUTE,
                "requests naming no task",
                "their requests are refused",
            ),
            asked: PerMinute::new(
                requests::ASKED_PER_MINUTE,
                "requests answered",
                "their requests are refused",
            ),
            metrics: Arc::default(),
            endings: Endings::default(),
            events: Vec::new(),
            launch_retry: Backoff::default(),
            me,
            settled_arrays: std::collections::HashSet::new(),
        }
    }

    /// Whether `uid` may act on every task: root and the daemon's own user.
    pub fn privileged(&self, uid: u32) -> bool {
        uid == 0 || uid == self.me
    }

    /// Hands the core an event at the next step.
    pub fn push(&mut self, event: Event) {
        self.events.push(event);
    }

    /// When the next closing is due for a retry.
    pub fn next_retry(&self) -> Option<Time> {
        self.closing.values().filter_map(|c| c.retry.next()).min()
    }

    /// A task read from its directory joins the queue it belongs to (a
    /// task that crashed before waits in the recovery queue, wherever a
    /// crash left its directory). True when it is an array's first element
    /// whose others are still to be made.
    pub fn admit(&mut self, mut task: Task) -> bool {
        let name = task.name.clone();
        let Some(demand) = task.demand.take() else {
            log::error!("{name}: admitted twice; the second is ignored");
            return false;
        };
        let held = task.record.held;
        log::info!(
            "{name}: queued in {} ({} GPU(s), {} each, priority {}{})",
            task.state,
            demand.gpus,
            demand.need,
            demand.priority,
            if held { ", held" } else { "" }
        );
        let event = if task.state == State::Recovery || task.record.crashes > 0 {
            Event::Recovering {
                task: name.id(),
                demand: *demand,
                crashes: task.record.crashes.max(1),
            }
        } else {
            Event::Queued {
                task: name.id(),
                demand: *demand,
            }
        };
        let first_of_array = task
            .record
            .array
            .is_some_and(|a| a.job == name.seq() && !a.expanded);
        self.tasks.insert(name.seq(), task);
        self.events.push(event);
        if held {
            self.events.push(Event::Hold {
                task: name.id(),
                held,
            });
        }
        first_of_array
    }

    /// A task found running by a starting daemon: the core learns where.
    pub fn adopt_running(&mut self, mut task: Task) {
        let Some(demand) = task.demand.take() else {
            log::error!("{}: adopted twice; the second is ignored", task.name);
            return;
        };
        self.events.push(Event::Running {
            task: task.name.id(),
            demand: *demand,
            gpus: task.gpus.clone(),
            crashes: task.record.crashes,
        });
        self.tasks.insert(task.name.seq(), task);
    }

    /// A task that never reached the core goes to `failed/` with `reason`;
    /// tasks that depend on it learn it failed. Its directory is at `at`,
    /// its last run (if any) was `run`, and carma's copies in it take
    /// `bytes`, counted against its owner's cap once it has landed.
    pub fn refuse(
        &mut self,
        now: Moment,
        (name, at, run, bytes): (&TaskName, State, u32, u64),
        mut record: TaskRecord,
        refused: &Refused,
        world: &mut impl World,
    ) {
        log::error!("{name}: refused: {refused}");
        self.metrics.refused(refused.kind);
        self.endings.push(Ending {
            name: name.clone(),
            state: State::Failed,
            user: None,
            at: Some(now.unix),
            why: Some(refused.kind.public().to_string()),
        });
        record.outcome = Some(Outcome::failed_at(&refused.why, now.unix));
        self.tasks.remove(&name.seq());
        self.events.push(Event::Ended {
            task: name.id(),
            succeeded: false,
        });
        self.close(
            now,
            Closing {
                name: name.clone(),
                record,
                from: at,
                to: State::Failed,
                run,
                retry: Backoff::default(),
                bytes,
                notify: None,
                run_as: None,
            },
            world,
        );
    }

    /// A drop the spool refused when it claimed it (not a regular file, an
    /// unusable name, no job): it is in `failed/` already, at `unix`.
    pub fn refused_drop(&mut self, name: TaskName, unix: f64) {
        self.metrics.refused(Refusal::InvalidJob);
        self.endings.push(Ending {
            name: name.clone(),
            state: State::Failed,
            user: None,
            at: Some(unix),
            why: Some(Refusal::InvalidJob.public().to_string()),
        });
        self.ended.insert(State::Failed, name);
    }

    /// A waiting task whose directory left `pending/` without the daemon
    /// moving it (its owner took it back): the core forgets it. Only by
    /// its whole name: anyone may make and remove `pending/42-x`, which
    /// names task 42's number and not task 42.
    pub fn forget(&mut self, name: &TaskName) {
        let waiting = self
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.state == State::Pending && t.name == *name);
        if waiting {
            log::warn!("{name}: removed from pending/ by someone else; forgotten");
            self.tasks.remove(&name.seq());
            self.events.push(Event::Cancel { task: name.id() });
        }
    }

    /// Feeds the gathered events (and `more`) to the core and carries out
    /// its actions, until no action produces further events.
    pub fn step(&mut self, now: Moment, more: Vec<Event>, world: &mut impl World) {
        self.events.extend(more);
        loop {
            let events = std::mem::take(&mut self.events);
            for action in self.core.step_all(now.at, events) {
                self.act(now, action, world);
            }
            if self.events.is_empty() {
                return;
            }
        }
    }

    fn act(&mut self, now: Moment, action: Action, world: &mut impl World) {
        match action {
            Action::Launch {
                task,
                gpus,
                limit_mib,
                time_limit,
                why,
            } => {
                let limits = Limits {
                    limit_mib,
                    time_limit,
                };
                self.launch(now, task, &gpus, &limits, &why.to_string(), world)
            }
            Action::Complete { task } => self.finish(now, task, State::Done, None, world),
            Action::Recover { task, crashes, why } => {
                self.metrics.oom_crash();
                self.recover(task, crashes, &why, world);
            }
            Action::Fail { task, reason } => {
                match &reason {
                    FailReason::OomRetriesExhausted { .. } => self.metrics.oom_crash(),
                    FailReason::TimeLimit(_) => self.metrics.time_limit_kill(),
                    FailReason::Unplaceable(_) => self.metrics.refused(Refusal::Unplaceable),
                    FailReason::Refused(_) => self.metrics.refused(Refusal::QueueLimit),
                    _ => {}
                }
                self.finish(now, task, State::Failed, Some(&reason), world)
            }
        }
    }

    /// Starts a run. A launch that fails never started the job, so the
    /// task waits and is launched again.
    fn launch(
        &mut self,
        now: Moment,
        id: TaskId,
        gpus: &[usize],
        limits: &Limits,
        why: &str,
        world: &mut impl World,
    ) {
        let Some(task) = self.tasks.get_mut(&id.0) else {
            return;
        };
        task.record.gpus = gpus.to_vec();
        match world.start(task, gpus, limits, why) {
            Ok(started) => {
                task.state = State::Running;
                task.run = started.run;
                task.gpus = gpus.to_vec();
                task.since = started.launched_at;
                task.time_limit_s = limits.time_limit.map(|t| t.as_secs_f64());
                task.deadlines = Deadlines {
                    since: now.at,
                    graces: started.graces,
                    stop_asked: None,
                };
                task.peak_mib = 0;
                task.supervisor = started.supervisor;
                task.adopted = !started.reported;
                let estimate = task.record.estimate.as_ref().map_or_else(
                    || "none".to_string(),
                    |e| format!("{} from {}", e.need, e.source),
                );
                let time = limits.time_limit.map_or_else(String::new, |t| {
                    format!("; time limit {}", crate::wall_time::format(t))
                });
                if task.record.crashes > 0 {
                    self.metrics.rerun();
                }
                if started.run == 1 {
                    self.metrics
                        .waited(started.launched_at - task.record.submitted_at);
                }
                let indices: Vec<String> = gpus.iter().map(ToString::to_string).collect();
                log::info!(
                    "{}: run {} on GPU {} as {}: {why}; estimate {estimate}{time}",
                    task.name,
                    started.run,
                    indices.join(","),
                    task.user
                );
                if self.launch_retry.succeeded() {
                    log::info!("launches work again");
                }
            }
            Err(NotStarted { at, reason }) => {
                task.state = at;
                self.unlaunch(now, id.0, &reason, world);
            }
        }
    }

    /// A launched task whose job did not start, for a reason that may
    /// pass: back to the head of its queue (its directory back where it
    /// waited), and launches pause for a backoff.
    fn unlaunch(&mut self, now: Moment, seq: u64, reason: &str, world: &mut impl World) {
        let (delay, first) = self.launch_retry.failed(now.at);
        let Some(task) = self.tasks.get_mut(&seq) else {
            return;
        };
        let name = task.name.clone();
        if first {
            log::warn!(
                "{name}: could not start: {reason}; it waits, launches retried in {delay:.1?}"
            );
        } else {
            log::info!("{name}: could not start: {reason}; retried in {delay:.1?}");
        }
        task.supervisor = None;
        task.adopted = false;
        if task.state == State::Running {
            let back = match task.record.crashes {
                0 => State::Pending,
                _ => State::Recovery,
            };
            // Best effort: a launch works from any directory of the task.
            match world.move_task(&name, State::Running, back) {
                Ok(()) => task.state = back,
                Err(e) => log::debug!("{name}: stays in running/ until relaunched: {e}"),
            }
        }
        self.events.push(Event::NotStarted {
            task: TaskId(seq),
            retry_at: now.at + delay,
        });
    }

    /// Whether `run` is task `seq`'s current run, still running.
    pub fn is_current(&self, seq: u64, run: u32) -> bool {
        self.tasks
            .get(&seq)
            .is_some_and(|t| t.state == State::Running && t.run == run)
    }

    /// How a start that failed once the job's process was its user's
    /// (its working directory, its `exec`), for a reason that may pass
    /// (`EAGAIN`, `ENOMEM`, `EIO`), ends: the first [`USER_START_TRIES`]
    /// wait and try again, as any start that may pass; then the task
    /// fails with it. Its user can make such a failure happen every time
    /// (a FUSE working directory that answers `EIO`), and each retry
    /// paused everyone's launches and left a run directory on root's
    /// disk.
    pub fn failed_as_its_user(&mut self, seq: u64, reason: String) -> RunEnd {
        let Some(task) = self.tasks.get_mut(&seq) else {
            return RunEnd::NotStarted(reason);
        };
        task.start_failures += 1;
        if task.start_failures < USER_START_TRIES {
            return RunEnd::NotStarted(reason);
        }
        RunEnd::Exited {
            exit: Exit::Failed(format!(
                "could not start {} times: {reason}",
                task.start_failures
            )),
            peak_mib: None,
            run_s: None,
        }
    }

    /// Task `seq`'s current run ended: the core hears how at the next step.
    pub fn run_ended(&mut self, now: Moment, seq: u64, end: RunEnd, world: &mut impl World) {
        let Some(task) = self.tasks.get_mut(&seq) else {
            return;
        };
        task.adopted = false;
        task.supervisor = None;
        match end {
            RunEnd::NotStarted(reason) => self.unlaunch(now, seq, &reason, world),
            RunEnd::Exited {
                exit,
                peak_mib,
                run_s,
            } => {
                task.peak_mib = task.peak_mib.max(peak_mib.unwrap_or(0));
                task.run_s = run_s.filter(|s| *s >= 0.0);
                if let Some(s) = task.run_s {
                    self.metrics.ran(s);
                }
                self.events.push(Event::Exited {
                    task: TaskId(seq),
                    exit,
                });
            }
        }
    }

    /// An OOM crash: the task waits in `recovery/` to run again. A move
    /// that fails leaves the directory in `running/`, from where the next
    /// launch starts it just as well.
    fn recover(&mut self, id: TaskId, crashes: u32, why: &str, world: &mut impl World) {
        let Some(task) = self.tasks.get_mut(&id.0) else {
            return;
        };
        task.record.crashes = crashes;
        let name = task.name.clone();
        // Moved first, counted second: a crash in between leaves the task in
        // recovery/ with one crash too few (one more re-run allowed), never
        // one crash counted twice.
        let moved = world
            .move_task(&name, State::Running, State::Recovery)
            .and_then(|()| {
                task.state = State::Recovery;
                world.write_record(State::Recovery, &name, &task.record)
            });
        match moved {
            Ok(()) => log::warn!("{name}: to recovery/ after OOM crash {crashes}; {why}"),
            Err(e) => log::warn!(
                "{name}: OOM crash {crashes}; {why}; its directory stays in {}/ for now: {e}",
                task.state
            ),
        }
    }
}
