//! [`TaskSpec`]: a job as carma understands it, whichever syntax it came in.
//!
//! Both syntaxes produce this one type so that nothing after the parser
//! (estimators, the spool, the scheduler's demand) knows or cares how a job
//! was written. It holds what the file says, not what carma decides: an
//! absent field stays `None`, and defaults that belong to configuration
//! (policy, retries) are applied later.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sched::{DependencyKind, HostLimits, Need};

/// GPUs a job gets when its file does not say: most training scripts use
/// one device unless told otherwise.
pub const DEFAULT_GPUS: u32 = 1;

/// Which of the two `.rad` syntaxes a file used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Syntax {
    /// `key: value` directives among the script's lines (native).
    Keyed,
    /// The research prototype's one-field-per-line format.
    Legacy,
}

/// The user's wish about sharing a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyHint {
    /// Run alone on idle GPUs.
    Exclusive,
    /// May share GPUs with other jobs.
    Collocate,
}

impl fmt::Display for PolicyHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PolicyHint::Exclusive => "exclusive",
            PolicyHint::Collocate => "collocate",
        })
    }
}

/// Memory estimates published with the research prototype's workloads
/// (legacy lines 10-12), one per estimator it compared.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PublishedEstimates {
    /// The Horus analytic formula's estimate.
    pub horus: Option<Need>,
    /// PyTorch FakeTensor's estimate.
    pub faketensor: Option<Need>,
    /// GPUMemNet's estimate (an upper bucket edge).
    pub gpumemnet: Option<Need>,
}

/// One job, as written in its `.rad` file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskSpec {
    /// The syntax the file used: messages and `carma check` say it, and a
    /// legacy file is a published workload that must keep running
    /// unchanged.
    pub syntax: Syntax,
    /// The job's name in logs and reports. Only keyed files can set it; the
    /// parser never sees a path, so callers default it to the file's stem
    /// ([`crate::rad::check_file`] does).
    pub name: Option<String>,
    /// The lines one `bash` runs, in order and as written. One shell, so
    /// that `conda activate` changes the environment of the `python` line
    /// after it. Legacy files give `[activation, command]`.
    pub script: Vec<String>,
    /// The model summary file, relative to the `.rad`'s directory: the
    /// estimators' input. Never absolute and never through `..`, so a job
    /// can only point carma at files of its own directory.
    pub model: Option<String>,
    /// The dataset's name or path as written. Informational (reports,
    /// history): the script reads its data itself.
    pub dataset: Option<String>,
    /// The batch size. Memory grows with it, so estimators use it as a
    /// feature and the history estimator keys on it.
    pub batch_size: Option<u32>,
    /// GPUs the job needs at once ([`DEFAULT_GPUS`] unless the file says);
    /// placement finds them all together or waits.
    pub gpus: u32,
    /// The user's wish about sharing; `None` leaves it to the configured
    /// placement policy.
    pub policy: Option<PolicyHint>,
    /// Memory per GPU the file declares (keyed `memory:`; legacy line 9,
    /// the measured peak). First in the estimator chain: the user, or a
    /// measurement, knows best.
    pub memory: Option<Need>,
    /// Estimates published with legacy workloads, kept so carma's own
    /// estimators can be compared with the research prototype's.
    pub published: PublishedEstimates,
    /// OOM re-runs this job allows; `None` takes the configured default.
    pub retries: Option<u32>,
    /// Wall-time limit (`time:`); `None` takes the configured default. In
    /// JSON, whole seconds.
    #[serde(serialize_with = "seconds")]
    pub time: Option<Duration>,
    /// Place among waiting tasks (`priority:`); `None` is 0. Whether the
    /// owner may give it is the daemon's call (configuration), not the
    /// parser's.
    pub priority: Option<i32>,
    /// Tasks to wait for (`after:`, `afterok:`, `afterany:`,
    /// `afternotok:`), as written: the daemon resolves names, which only
    /// mean something among the owner's tasks.
    pub after: Vec<DependencyRef>,
    /// A command to run, as the job's owner, when the job ends
    /// (`notify:`).
    pub notify: Option<String>,
    /// One task per index (`array: 1-10%2`).
    pub array: Option<ArraySpec>,
    /// Host CPUs and memory the job may use (`cpus:`, `host_memory:`).
    pub host: HostLimits,
}

/// `array: FIRST-LAST%AT_ONCE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ArraySpec {
    pub first: u32,
    pub last: u32,
    /// At most this many elements run at once.
    pub at_once: Option<u32>,
}

/// A task a job names in a dependency.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TaskRef {
    /// By number (`12`, or a full task name `000012-prep`).
    Id(u64),
    /// By job name, unique among the owner's tasks.
    Name(String),
}

impl fmt::Display for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskRef::Id(id) => write!(f, "{id}"),
            TaskRef::Name(name) => f.write_str(name),
        }
    }
}

/// One dependency as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencyRef {
    pub kind: DependencyKind,
    pub task: TaskRef,
}

fn seconds<S: serde::Serializer>(time: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match time {
        Some(t) => s.serialize_some(&t.as_secs()),
        None => s.serialize_none(),
    }
}

/// A need for people: exact MiB (what the file said, not a rounded GiB).
fn need_text(need: &Option<Need>) -> String {
    match need {
        None => "-".to_owned(),
        Some(Need::Mib(mib)) => format!("{mib} MiB"),
        Some(Need::WholeGpu) => "a whole GPU".to_owned(),
        Some(Need::Unknown) => "unknown".to_owned(),
    }
}

/// A multi-line summary, one field per line, indented two spaces: what
/// `carma check` prints under each file name.
impl TaskSpec {
    /// A job of `syntax` that runs `script` and says nothing else: what a
    /// file with no key but its commands means (one GPU, every other
    /// setting the server's). The one constructor: readers and restores
    /// change what they know from here.
    pub fn new(syntax: Syntax, script: Vec<String>) -> TaskSpec {
        TaskSpec {
            syntax,
            name: None,
            script,
            model: None,
            dataset: None,
            batch_size: None,
            gpus: DEFAULT_GPUS,
            policy: None,
            memory: None,
            published: PublishedEstimates::default(),
            retries: None,
            time: None,
            priority: None,
            after: Vec::new(),
            notify: None,
            array: None,
            host: HostLimits::default(),
        }
    }
}

impl fmt::Display for TaskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn or_dash<T: fmt::Display>(value: &Option<T>) -> String {
            value
                .as_ref()
                .map_or_else(|| "-".to_owned(), ToString::to_string)
        }
        let syntax = match self.syntax {
            Syntax::Keyed => "keyed",
            Syntax::Legacy => "legacy (positional)",
        };
        writeln!(f, "  syntax      {syntax}")?;
        writeln!(f, "  name        {}", or_dash(&self.name))?;
        for (index, line) in self.script.iter().enumerate() {
            let label = if index == 0 { "script" } else { "" };
            writeln!(f, "  {label:<11} {line}")?;
        }
        writeln!(f, "  model       {}", or_dash(&self.model))?;
        writeln!(f, "  dataset     {}", or_dash(&self.dataset))?;
        writeln!(f, "  batch_size  {}", or_dash(&self.batch_size))?;
        writeln!(f, "  gpus        {}", self.gpus)?;
        writeln!(f, "  policy      {}", or_dash(&self.policy))?;
        writeln!(f, "  memory      {}", need_text(&self.memory))?;
        let published = &self.published;
        if published != &PublishedEstimates::default() {
            writeln!(
                f,
                "  published   horus {}, faketensor {}, gpumemnet {}",
                need_text(&published.horus),
                need_text(&published.faketensor),
                need_text(&published.gpumemnet)
            )?;
        }
        writeln!(f, "  retries     {}", or_dash(&self.retries))?;
        let time = self.time.map(crate::wall_time::format);
        writeln!(f, "  time        {}", or_dash(&time))?;
        for d in &self.after {
            writeln!(f, "  {:<11} {}", d.kind.key(), d.task)?;
        }
        writeln!(f, "  notify      {}", or_dash(&self.notify))?;
        if let Some(a) = self.array {
            let at_once = a.at_once.map_or_else(String::new, |n| format!("%{n}"));
            writeln!(f, "  array       {}-{}{at_once}", a.first, a.last)?;
        }
        if let Some(cpus) = self.host.cpus {
            writeln!(f, "  cpus        {cpus}")?;
        }
        if let Some(mib) = self.host.memory_mib {
            writeln!(f, "  host_memory {}", crate::size::format_mib(mib))?;
        }
        write!(f, "  priority    {}", or_dash(&self.priority))
    }
}
