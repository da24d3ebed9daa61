//! The `.rad` job file: two syntaxes, one [`TaskSpec`].
//!
//! A `.rad` comes in the native keyed syntax (`key: value` directives among
//! the lines of a bash script) or in the research prototype's legacy
//! positional syntax (one field per line), whose published workloads must
//! run unchanged. A file with at least one directive line is keyed; any
//! other file is legacy, except one with nothing but blank and comment
//! lines, which is reported as a keyed file without commands (the likelier
//! intent).
//!
//! Parsing is pure: [`parse`] and [`parse_bytes`] take text, never a path,
//! so the daemon, `carma check` and tests share exactly the same reader and
//! the reader can be fed anything (it never panics, and its work is linear
//! in the input). What needs the file system (defaulting the name to the
//! file stem, finding the model summary next to the file) lives apart, in
//! [`check_file`]. Every error carries a line and column and says what was
//! expected there.

mod error;
mod file;
mod keyed;
mod legacy;
mod legacy_rules;
mod spec;
mod suggest;
mod text;
mod value;

#[cfg(test)]
mod tests;

use crate::sched::DependencyKind;
pub use crate::sched::HostLimits;
pub(crate) use error::clip;
pub use error::{Position, RadError};
pub use file::{
    FileError, JobFile, MAX_FILE_BYTES, case_match, check_bytes, check_file, forget_listings,
};
pub use keyed::{KeyReference, reference};
pub use legacy::LEGACY_WHOLE_GPU_MIB;
pub use legacy_rules::{Declared, LegacyRules, MemoryLine};
pub use spec::{
    ArraySpec, DEFAULT_GPUS, DependencyRef, PolicyHint, PublishedEstimates, Syntax, TaskRef,
    TaskSpec,
};
pub use text::{MAX_LINE_BYTES, MAX_LINES};
pub use value::{MAX_DEPENDENCIES, MAX_MODEL_DEPTH, MAX_MODEL_PATH};

/// A parsed job and where its file-relative fields sit, so that checks made
/// later against the file system can still point into the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The job.
    pub spec: TaskSpec,
    /// Where the model summary's path starts, when the file names one.
    pub model_at: Option<Position>,
    /// What the reader passed over without refusing the file (a malformed
    /// line the job does not depend on), for the user to fix.
    pub warnings: Vec<RadError>,
}

/// Dependencies given outside a job file (`carma submit --afterok
/// 12,prep`, a submission's own list), read by the rules of the file's
/// `afterok:` line; the error says what was expected, and where in `text`.
pub fn dependencies(kind: DependencyKind, text: &str) -> Result<Vec<DependencyRef>, String> {
    let value = value::Value {
        text: text.trim(),
        at: Position::START,
    };
    let tasks = value::task_refs(&value).map_err(|e| match e.column {
        1 => e.message,
        column => format!("at character {column}: {}", e.message),
    })?;
    Ok(tasks
        .into_iter()
        .map(|task| DependencyRef { kind, task })
        .collect())
}

/// Parses a `.rad` from text (a leading byte-order mark is ignored).
pub fn parse(text: &str) -> Result<Parsed, RadError> {
    let text = text::strip_bom(text);
    text::refuse_binary(text.as_bytes())?;
    parse_text(text)
}

/// Parses a `.rad` from raw bytes: binary data and text that is not UTF-8
/// are refused with the position of the first offending byte.
pub fn parse_bytes(bytes: &[u8]) -> Result<Parsed, RadError> {
    let bytes = text::strip_bom_bytes(bytes);
    text::refuse_binary(bytes)?;
    parse_text(text::utf8(bytes)?)
}

/// Detects the syntax and reads the file; `text` is known to hold no BOM
/// and no control characters.
fn parse_text(text: &str) -> Result<Parsed, RadError> {
    let lines = text::lines(text)?;
    let keyed = lines
        .iter()
        .any(|line| keyed::directive(line.text).is_some())
        || lines
            .iter()
            .all(|line| line.is_blank() || line.is_comment());
    if keyed {
        keyed::parse(&lines)
    } else {
        legacy::parse(&lines)
    }
}
