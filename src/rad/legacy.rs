//! The research prototype's positional syntax: one field per line.
//!
//! Its published workloads must run unchanged, so this reader is lenient
//! where real files are sloppy (trailing whitespace, no final newline,
//! trailing blank lines, `collocate` for `collocation`) and strict where a
//! mistake would mislead the scheduler (a GPU count that is not a positive
//! integer, a thirteenth line). Lines the prototype never relied on to run
//! a job (line 7, which it ignored, and the memory figures 9-12, of which
//! the operator picks one or none) only warn when malformed: a job the
//! prototype ran is never refused over them. Every error says that the legacy syntax was
//! assumed, because a keyed file whose directives are all malformed lands
//! here too, and "expected a comment on line 1" would be baffling without
//! that note.

use super::Parsed;
use super::error::{RadError, found};
use super::spec::{PublishedEstimates, Syntax, TaskSpec};
use super::text::{self, Line};
use super::value::{self, Value};
use crate::sched::Need;
use crate::size;

/// Legacy lines 9-12 write exactly this many MiB to mean "the whole 40 GB
/// GPU" (the prototype ran on A100-40GB): not a measurement, a request for
/// an idle GPU. It reads as [`Need::WholeGpu`].
pub const LEGACY_WHOLE_GPU_MIB: u64 = 40_000;

const NOTE: &str = "read as the legacy positional syntax because no `key: value` line was found";

/// What each line holds, in messages; index 0 is line 1.
const FIELDS: [&str; 12] = [
    "a comment starting with `#`",
    "the environment activation command (e.g. `conda activate tf`)",
    "the command to run",
    "the model summary file name",
    "the dataset name or path",
    value::BATCH_SIZE,
    "`exclusive` or `collocation`",
    value::GPUS,
    "the measured peak GPU memory in MiB",
    "the Horus estimate in MiB",
    "the FakeTensor estimate in MiB",
    "the GPUMemNet estimate in MiB",
];

/// Reads a legacy file.
pub(super) fn parse(lines: &[Line<'_>]) -> Result<Parsed, RadError> {
    read(lines).map_err(|e| e.with_note(NOTE))
}

fn read(all: &[Line<'_>]) -> Result<Parsed, RadError> {
    let used = all.len() - all.iter().rev().take_while(|l| l.is_blank()).count();
    let lines = &all[..used];
    if let Some(extra) = lines.get(FIELDS.len()) {
        return Err(RadError::new(
            extra.at(0),
            format!(
                "expected end of file after line {}, {}: the legacy format has at most {} lines",
                FIELDS.len(),
                found(extra.text.trim()),
                FIELDS.len()
            ),
        ));
    }
    // Line `number` (1-based) as a value; a missing required line is an
    // error at the end of the file.
    let field = |number: usize| {
        let what = FIELDS[number - 1];
        match lines.get(number - 1) {
            Some(line) => Ok(Value::of_line(line)),
            None => Err(RadError::new(
                text::end(all),
                format!("expected {what} on line {number}, found end of file"),
            )),
        }
    };
    let comment = field(1)?;
    if !comment.text.starts_with('#') {
        return Err(comment.expected(FIELDS[0]));
    }
    let activation = field(2)?.non_empty(FIELDS[1])?;
    let command = field(3)?.non_empty(FIELDS[2])?;
    let model = field(4)?;
    let model_path = value::model_path(&model)?;
    let dataset = field(5)?.non_empty(FIELDS[4])?;
    let batch_size = value::positive(&field(6)?, FIELDS[5])?;
    let mut warnings = Vec::new();
    let policy = lenient(value::policy(&field(7)?).map(Some), &mut warnings);
    let gpus = value::positive(&field(8)?, FIELDS[7])?;
    let mut memory = |number: usize| match lines.get(number - 1) {
        Some(line) => lenient(
            mib(&Value::of_line(line), FIELDS[number - 1]),
            &mut warnings,
        ),
        None => None,
    };
    let spec = TaskSpec {
        model: Some(model_path),
        dataset: Some(dataset),
        batch_size: Some(batch_size),
        gpus,
        policy,
        memory: memory(9),
        published: PublishedEstimates {
            horus: memory(10),
            faketensor: memory(11),
            gpumemnet: memory(12),
        },
        ..TaskSpec::new(Syntax::Legacy, vec![activation, command])
    };
    Ok(Parsed {
        spec,
        model_at: Some(model.at),
        warnings,
    })
}

/// The value of a line the job does not depend on; a malformed one becomes
/// a warning and reads as absent.
fn lenient<T>(read: Result<Option<T>, RadError>, warnings: &mut Vec<RadError>) -> Option<T> {
    read.unwrap_or_else(|e| {
        warnings.push(e.with_note("the line is ignored"));
        None
    })
}

/// An optional memory line: blank means absent; otherwise a positive plain
/// number of MiB, fractions rounded up (an estimate must not shrink). A
/// value of exactly [`LEGACY_WHOLE_GPU_MIB`] means a whole GPU; 39999.5 is
/// a measurement that happens to round to it.
fn mib(value: &Value<'_>, what: &str) -> Result<Option<Need>, RadError> {
    if value.text.is_empty() {
        return Ok(None);
    }
    let plain = value.text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    match size::parse_mib(value.text) {
        Ok(mib) if plain && mib > 0 => {
            let whole = value.text.parse::<f64>() == Ok(LEGACY_WHOLE_GPU_MIB as f64);
            Ok(Some(if whole {
                Need::WholeGpu
            } else {
                Need::Mib(mib)
            }))
        }
        _ => Err(value.expected(&format!(
            "{what} (a positive number; {LEGACY_WHOLE_GPU_MIB} means the whole GPU)"
        ))),
    }
}
