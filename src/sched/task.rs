//! What the core knows about a task: an id and what it asks for.

use std::fmt;
use std::time::Duration;

use crate::wall_time;

/// A task's identity inside the core. Drivers map their own names (spool
/// directories, trace rows) to these numbers; the core never sees paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub u64);

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t{}", self.0)
    }
}

/// How much GPU memory a task needs on each of its GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// An estimate in MiB.
    Mib(u64),
    /// The task wants a whole idle GPU (e.g. the legacy `40000` marker, or
    /// an estimator that knows the job fills any GPU).
    WholeGpu,
    /// No estimate at all: the core asks for the larger margin.
    Unknown,
}

/// In records and JSON output a need is a number of MiB, `"whole-gpu"` or
/// `"unknown"`: plain numbers keep the files easy to use from `jq`.
impl serde::Serialize for Need {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Need::Mib(mib) => serializer.serialize_u64(*mib),
            Need::WholeGpu => serializer.serialize_str("whole-gpu"),
            Need::Unknown => serializer.serialize_str("unknown"),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Need {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Need, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Mib(u64),
            Word(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Mib(mib) => Ok(Need::Mib(mib)),
            Raw::Word(w) if w == "whole-gpu" => Ok(Need::WholeGpu),
            Raw::Word(w) if w == "unknown" => Ok(Need::Unknown),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "expected MiB, \"whole-gpu\" or \"unknown\", found \"{w}\""
            ))),
        }
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Mib(mib) => f.write_str(&crate::size::format_mib(*mib)),
            Need::WholeGpu => f.write_str("a whole GPU"),
            Need::Unknown => f.write_str("unknown"),
        }
    }
}

/// Everything placement needs to know about a queued task.
#[derive(Debug, Clone, PartialEq)]
pub struct Demand {
    /// GPUs the task needs at once (all placed together or not at all).
    pub gpus: u32,
    /// Memory needed on each of those GPUs.
    pub need: Need,
    /// The task itself asked for GPUs of its own, whatever the policy.
    pub exclusive: bool,
    /// The Linux user the task runs as, for the one-user-per-GPU rule of
    /// MPS. `None` (simulation, tests) means "no constraint".
    pub user: Option<u32>,
    /// OOM crashes this task may survive; `None` takes the configured
    /// default.
    pub max_retries: Option<u32>,
    /// The wall-time limit the task asked for; `None` takes the configured
    /// default (see [`super::QueueRules::time_limit`]).
    pub time_limit: Option<Duration>,
    /// Higher goes first among waiting tasks (recovery aside); 0 unless
    /// the job file says.
    pub priority: i32,
    /// Tasks this one waits for (`after:`, `afterok:`, ...).
    pub after: Vec<Dependency>,
    /// How long the same job ran before, where the driver knows: with the
    /// time limit, what backfill plans with.
    pub history: Option<Duration>,
    /// The array job this task is an element of, and how many of its
    /// elements may run at once.
    pub array: Option<ArrayOf>,
}

/// An array job, as the limit on its running elements sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayOf {
    /// The array's number (the driver's choice: the same for all elements).
    pub job: u64,
    /// At most this many of its elements run at once; `None`: no limit.
    pub at_once: Option<u32>,
}

/// What a job may use of the host, enforced by its cgroup (`cpus:`,
/// `host_memory:`); `None` takes the configured default.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct HostLimits {
    /// CPUs' worth of time (`cpus: 2`, `cpus: 0.5`).
    pub cpus: Option<f64>,
    /// Host memory, MiB (`host_memory: 32G`).
    pub memory_mib: Option<u64>,
}

/// When a dependency is met: Slurm's four kinds, by their job-file keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DependencyKind {
    /// `after:` the other task has started (or ended).
    After,
    /// `afterok:` it ended successfully.
    AfterOk,
    /// `afterany:` it ended, however.
    AfterAny,
    /// `afternotok:` it ended unsuccessfully (failed, cancelled, timed
    /// out, refused).
    AfterNotOk,
}

impl DependencyKind {
    pub const ALL: [DependencyKind; 4] = [
        DependencyKind::After,
        DependencyKind::AfterOk,
        DependencyKind::AfterAny,
        DependencyKind::AfterNotOk,
    ];

    /// The job-file key.
    pub fn key(self) -> &'static str {
        match self {
            DependencyKind::After => "after",
            DependencyKind::AfterOk => "afterok",
            DependencyKind::AfterAny => "afterany",
            DependencyKind::AfterNotOk => "afternotok",
        }
    }

    /// Whether a task that `started` and ended as `ended` (`Some(true)`:
    /// successfully) meets this kind: `Some(true)` met, `Some(false)`
    /// never will be, `None` not yet.
    pub fn met(self, started: bool, ended: Option<bool>) -> Option<bool> {
        match (self, ended) {
            (DependencyKind::After, _) if started || ended.is_some() => Some(true),
            (DependencyKind::AfterAny, Some(_)) => Some(true),
            (DependencyKind::AfterOk, Some(ok)) => Some(ok),
            (DependencyKind::AfterNotOk, Some(ok)) => Some(!ok),
            _ => None,
        }
    }
}

/// One task another waits for, and what the driver knew of it when the
/// waiting task was queued: the core hears of ends while both are in its
/// hands, but a task that ended before (or under an earlier daemon) is
/// known only to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dependency {
    pub kind: DependencyKind,
    pub task: TaskId,
    /// It has started at least once.
    pub started: bool,
    /// It ended: successfully (`Some(true)`) or not.
    pub ended: Option<bool>,
}

impl Dependency {
    /// See [`DependencyKind::met`].
    pub fn met(&self) -> Option<bool> {
        self.kind.met(self.started, self.ended)
    }
}

impl Demand {
    /// A single-GPU demand with the given need and nothing else special.
    pub fn new(need: Need) -> Demand {
        Demand {
            gpus: 1,
            need,
            exclusive: false,
            user: None,
            max_retries: None,
            time_limit: None,
            priority: 0,
            after: Vec::new(),
            history: None,
            array: None,
        }
    }
}

/// How a task's run ended, as far as the core cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Exit status 0.
    Success,
    /// Died of GPU out-of-memory (the driver matched an OOM signature).
    Oom,
    /// Any other failure; the text says how (exit status, signal).
    Failed(String),
    /// Stopped on a user's request.
    Cancelled,
    /// Stopped because it reached its wall-time limit.
    TimeLimit,
}

/// Why a task ended up in `failed/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// The job itself failed, not of OOM.
    Exit(String),
    /// It crashed with OOM more often than allowed.
    OomRetriesExhausted { crashes: u32 },
    /// A user cancelled it.
    Cancelled,
    /// No GPU set of this server could ever run it.
    Unplaceable(String),
    /// It asks for more than the queue allows anyone (a longer time limit
    /// than the maximum).
    Refused(String),
    /// It ran for its whole wall-time limit and was stopped.
    TimeLimit(Duration),
    /// A task it depends on ended so that it can never run: the text names
    /// which and how (`afterok: t12 failed`).
    Dependency(String),
}

impl fmt::Display for FailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailReason::Exit(how) => write!(f, "job failed: {how}"),
            FailReason::OomRetriesExhausted { crashes } => {
                write!(f, "out of GPU memory {crashes} times; giving up")
            }
            FailReason::Cancelled => f.write_str("cancelled"),
            FailReason::Unplaceable(why) => write!(f, "cannot be placed: {why}"),
            FailReason::Refused(why) => write!(f, "refused: {why}"),
            FailReason::Dependency(why) => write!(f, "dependency never satisfied: {why}"),
            FailReason::TimeLimit(limit) => write!(
                f,
                "time limit: stopped after its {} of wall time",
                wall_time::format(*limit)
            ),
        }
    }
}
