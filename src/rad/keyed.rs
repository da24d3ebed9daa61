//! The native keyed syntax: `key: value` directives among the script's
//! lines.
//!
//! A job is mostly a shell script, so every line that is neither a
//! directive, blank, nor a full-line comment goes to one `bash`, as written
//! (bash reads its own `#` comments). Directives therefore need a shape that
//! shell lines do not take: an identifier at the very start of the line,
//! optional spaces, then `:`. A `:` followed by `/`, `\` or another `:` is
//! not a directive (`http://...`, `C:\...`, `s3://...`), and an indented
//! line is always script (loop bodies, here-documents). In a directive, `#`
//! at the start of a word begins a comment, so `dataset: set#2` keeps its
//! `#`.
//!
//! Unknown keys are errors, never ignored: a misspelt `memmory:` that was
//! silently dropped would turn into an OOM crash hours later.

use std::time::Duration;

use nom::{
    IResult, Parser,
    bytes::complete::take_while,
    character::complete::{char, satisfy, space0},
    combinator::recognize,
    sequence::{pair, terminated},
};

use super::Parsed;
use super::error::{RadError, clip, found};
use super::spec::{DependencyRef, Syntax, TaskSpec};
use super::suggest::closest;
use super::text::{self, Line};
use super::value::{self, Value};
use crate::sched::{DependencyKind, Need};
use crate::size;
use crate::wall_time;

/// The keys a keyed `.rad` understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Name,
    Model,
    Dataset,
    BatchSize,
    Gpus,
    Policy,
    Memory,
    Retries,
    Time,
    Priority,
    Depends(DependencyKind),
    Notify,
    Array,
    Cpus,
    HostMemory,
}

impl Key {
    const ALL: [Key; 18] = [
        Key::Name,
        Key::Model,
        Key::Dataset,
        Key::BatchSize,
        Key::Gpus,
        Key::Policy,
        Key::Memory,
        Key::Retries,
        Key::Time,
        Key::Priority,
        Key::Depends(DependencyKind::After),
        Key::Depends(DependencyKind::AfterOk),
        Key::Depends(DependencyKind::AfterAny),
        Key::Depends(DependencyKind::AfterNotOk),
        Key::Notify,
        Key::Array,
        Key::Cpus,
        Key::HostMemory,
    ];

    fn spelling(self) -> &'static str {
        match self {
            Key::Name => "name",
            Key::Model => "model",
            Key::Dataset => "dataset",
            Key::BatchSize => "batch_size",
            Key::Gpus => "gpus",
            Key::Policy => "policy",
            Key::Memory => "memory",
            Key::Retries => "retries",
            Key::Time => "time",
            Key::Priority => "priority",
            Key::Depends(kind) => kind.key(),
            Key::Notify => "notify",
            Key::Array => "array",
            Key::Cpus => "cpus",
            Key::HostMemory => "host_memory",
        }
    }
}

/// Every key of the keyed syntax, documented: for `carma man` (the
/// carma-rad(5) page) and the README's table, which a test holds to it.
pub fn reference() -> Vec<KeyReference> {
    Key::ALL.iter().map(|&k| k.reference()).collect()
}

/// One key of the keyed syntax, for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyReference {
    pub key: &'static str,
    /// What its value looks like.
    pub value: &'static str,
    /// What it does.
    pub meaning: &'static str,
    /// The `sbatch` option closest to it, if any.
    pub slurm: &'static str,
}

impl Key {
    fn reference(self) -> KeyReference {
        let (value, meaning, slurm) = match self {
            Key::Name => (
                "a name without `/`",
                "names the job: its task is NNNNNN-NAME, and `carma show NAME` and `afterok: NAME` find it (default: the file's name)",
                "--job-name",
            ),
            Key::Model => (
                "a path below the job file's directory",
                "the model summary (torchinfo, torchsummary, Keras or a module print) the memory estimate is made from",
                "",
            ),
            Key::Dataset => (
                "a name or path",
                "the dataset, for history and the estimate",
                "",
            ),
            Key::BatchSize => ("a positive integer", "the batch size, for the estimate", ""),
            Key::Gpus => (
                "a positive integer (default 1)",
                "GPUs the job needs, all placed at once",
                "--gpus",
            ),
            Key::Policy => (
                "`collocate` or `exclusive`",
                "`exclusive` asks for GPUs of the job's own; `collocate` lets the server's policy share them",
                "--exclusive",
            ),
            Key::Memory => (
                "a size (`4G`, `1500M`, `4096` MiB) or `whole`",
                "the GPU memory the job declares it needs per GPU; the estimate is used without it",
                "--mem-per-gpu",
            ),
            Key::Retries => (
                "a non-negative integer",
                "re-runs allowed after out-of-memory crashes (default: recovery.max_retries)",
                "",
            ),
            Key::Time => (
                "`2h`, `90m`, `45s`, `1d`, `1h30m`, `1:30:00`",
                "wall-time limit: SIGTERM, then SIGKILL after the grace period; a bare number is refused",
                "--time",
            ),
            Key::Priority => (
                "an integer (default 0)",
                "place among waiting jobs, higher first; users may give queue.user_priority_min..max",
                "--priority, --nice",
            ),
            Key::Depends(DependencyKind::After) => (
                "tasks: numbers, task names or job names, comma-separated",
                "start once these tasks have started",
                "--dependency=after:",
            ),
            Key::Depends(DependencyKind::AfterOk) => (
                "tasks, as for `after:`",
                "start once these tasks have all succeeded",
                "--dependency=afterok:",
            ),
            Key::Depends(DependencyKind::AfterAny) => (
                "tasks, as for `after:`",
                "start once these tasks have ended, however",
                "--dependency=afterany:",
            ),
            Key::Depends(DependencyKind::AfterNotOk) => (
                "tasks, as for `after:`",
                "start once these tasks have ended unsuccessfully",
                "--dependency=afternotok:",
            ),
            Key::Notify => (
                "a shell command",
                "run as the job's owner when the job ends, with CARMA_TASK_ID, CARMA_STATE, CARMA_REASON",
                "--mail-type, strigger",
            ),
            Key::Array => (
                "a range: `1-10`, or `1-10%2`",
                "one task per index (CARMA_ARRAY_INDEX), at most N at once with `%N`",
                "--array",
            ),
            Key::Cpus => (
                "a number greater than 0 (`2`, `0.5`)",
                "host CPUs' worth of time, enforced by the job's cgroup (cpu.max)",
                "--cpus-per-task",
            ),
            Key::HostMemory => (
                "a size (`32G`; MiB without unit)",
                "host memory, enforced by the job's cgroup (memory.max)",
                "--mem",
            ),
        };
        KeyReference {
            key: self.spelling(),
            value,
            meaning,
            slurm,
        }
    }
}

/// A directive line cut into its key and value.
pub(super) struct Directive<'a> {
    key: &'a str,
    /// The value, without spaces or comment (possibly empty).
    value: &'a str,
    /// Byte offset of `value` in the line.
    value_start: usize,
}

/// The line as a directive, or `None` when it is script (or anything else).
pub(super) fn directive(line: &str) -> Option<Directive<'_>> {
    let identifier = recognize(pair(
        satisfy(|c| c.is_ascii_alphabetic()),
        take_while(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
    ));
    let parsed: IResult<&str, &str> = terminated(identifier, pair(space0, char(':'))).parse(line);
    let (rest, key) = parsed.ok()?;
    if rest.starts_with(['/', '\\', ':']) {
        return None;
    }
    let value = strip_comment(rest);
    let value_start = line.len() - rest.len() + (value.len() - value.trim_start().len());
    Some(Directive {
        key,
        value: value.trim(),
        value_start,
    })
}

/// The text before a comment: `#` at the start or after whitespace.
fn strip_comment(text: &str) -> &str {
    let mut after_space = true;
    for (offset, c) in text.char_indices() {
        if c == '#' && after_space {
            return &text[..offset];
        }
        after_space = c.is_whitespace();
    }
    text
}

/// Reads a keyed file.
pub(super) fn parse(lines: &[Line<'_>]) -> Result<Parsed, RadError> {
    let mut spec = TaskSpec::new(Syntax::Keyed, Vec::new());
    let mut model_at = None;
    let mut seen: Vec<(Key, usize)> = Vec::new();
    for line in lines {
        if line.is_blank() || line.is_comment() {
            continue;
        }
        let Some(directive) = directive(line.text) else {
            spec.script.push(line.text.to_owned());
            continue;
        };
        let key = known_key(line, directive.key)?;
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            return Err(RadError::new(
                line.at(0),
                format!(
                    "duplicate key `{}`: already given on line {first}",
                    key.spelling()
                ),
            ));
        }
        seen.push((key, line.number));
        let value = Value::new(line, directive.value_start, directive.value);
        match key {
            Key::Name => spec.name = Some(name(&value)?),
            Key::Model => {
                spec.model = Some(value::model_path(&value)?);
                model_at = Some(value.at);
            }
            Key::Dataset => spec.dataset = Some(value.non_empty("a dataset name or path")?),
            Key::BatchSize => spec.batch_size = Some(value::positive(&value, value::BATCH_SIZE)?),
            Key::Gpus => spec.gpus = value::positive(&value, value::GPUS)?,
            Key::Policy => spec.policy = Some(value::policy(&value)?),
            Key::Memory => spec.memory = Some(memory(&value)?),
            Key::Retries => {
                spec.retries = Some(value::count(
                    &value,
                    "the number of re-runs after OOM (a non-negative integer)",
                )?)
            }
            Key::Time => spec.time = Some(time(&value)?),
            Key::Priority => spec.priority = Some(value::priority(&value)?),
            Key::Array => spec.array = Some(value::array(&value)?),
            Key::Cpus => spec.host.cpus = Some(cpus(&value)?),
            Key::HostMemory => spec.host.memory_mib = Some(host_memory(&value)?),
            Key::Notify => {
                spec.notify = Some(value.non_empty("a command to run when the job ends")?)
            }
            Key::Depends(kind) => {
                let tasks = value::task_refs(&value)?;
                spec.after
                    .extend(tasks.into_iter().map(|task| DependencyRef { kind, task }));
            }
        }
    }
    if spec.script.is_empty() {
        return Err(RadError::new(
            text::end(lines),
            "expected at least one command line (e.g. `python train.py`), found end of file",
        ));
    }
    Ok(Parsed {
        spec,
        model_at,
        warnings: Vec::new(),
    })
}

fn known_key(line: &Line<'_>, key: &str) -> Result<Key, RadError> {
    if let Some(known) = Key::ALL.into_iter().find(|k| k.spelling() == key) {
        return Ok(known);
    }
    let spellings = Key::ALL.map(Key::spelling);
    let hint = match closest(key, spellings) {
        Some(suggestion) => format!("did you mean `{suggestion}`?"),
        None => format!("expected one of {}", spellings.join(", ")),
    };
    Err(RadError::new(
        line.at(0),
        format!("unknown key `{}`: {hint}", clip(key)),
    ))
}

/// A job name: it may end up naming files and directories, so no `/`.
fn name(value: &Value<'_>) -> Result<String, RadError> {
    const WHAT: &str = "a job name (without `/`)";
    let name = value.non_empty(WHAT)?;
    match name.find('/') {
        Some(offset) => Err(value.error_at(
            name[..offset].chars().count(),
            format!("expected {WHAT}, {}", found(&name)),
        )),
        None => Ok(name),
    }
}

/// A wall-time limit: `2h`, `90m`, `1:30:00`.
fn time(value: &Value<'_>) -> Result<Duration, RadError> {
    wall_time::parse(value.text).map_err(|e| value.error_at(e.column.saturating_sub(1), e.message))
}

/// Most CPUs a job may ask for: more than any server has.
const MAX_CPUS: f64 = 4096.0;

/// CPUs' worth of time: `2`, `0.5`.
fn cpus(value: &Value<'_>) -> Result<f64, RadError> {
    match value.text.parse::<f64>() {
        Ok(n) if n > 0.0 && n <= MAX_CPUS => Ok(n),
        _ => Err(value.expected("a number of CPUs greater than 0, such as 2 or 0.5")),
    }
}

/// Host memory: a size with units (MiB without).
fn host_memory(value: &Value<'_>) -> Result<u64, RadError> {
    const WHAT: &str = "a positive size of host memory such as 32G or 4096 (MiB)";
    if !value.text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(value.expected(WHAT));
    }
    match size::parse_mib(value.text) {
        Ok(0) => Err(value.expected(WHAT)),
        Ok(mib) => Ok(mib),
        Err(e) => Err(value.error_at(e.column.saturating_sub(1), e.message)),
    }
}

/// Words that ask for a whole idle GPU instead of a size.
const WHOLE_GPU: [&str; 2] = ["whole", "whole-gpu"];

/// A declared memory need: a size with units (MiB without), or `whole`.
fn memory(value: &Value<'_>) -> Result<Need, RadError> {
    const WHAT: &str =
        "a positive size such as 4G, 1500M or 4096 (MiB), or `whole` for a whole GPU";
    if WHOLE_GPU.iter().any(|w| w.eq_ignore_ascii_case(value.text)) {
        return Ok(Need::WholeGpu);
    }
    if !value.text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(value.expected(WHAT));
    }
    match size::parse_mib(value.text) {
        Ok(0) => Err(value.expected(WHAT)),
        Ok(mib) => Ok(Need::Mib(mib)),
        // The size's own column is 1-based inside the value.
        Err(e) => Err(value.error_at(e.column.saturating_sub(1), e.message)),
    }
}
