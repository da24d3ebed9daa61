//! Field values both syntaxes share: counts, the policy, the model path.
//!
//! A legacy line 8 and a keyed `gpus:` mean the same thing, so they are read
//! by the same function and fail with the same words; only where the value
//! sits differs, and [`Value`] carries that.

use nom::{IResult, Parser, character::complete::digit1, combinator::all_consuming};

use super::error::{Position, RadError, found};
use super::spec::{ArraySpec, PolicyHint, TaskRef};
use super::suggest::closest;
use super::text::Line;

/// What a GPU count is, in messages.
pub(super) const GPUS: &str = "the number of GPUs (a positive integer)";
/// What a batch size is, in messages.
pub(super) const BATCH_SIZE: &str = "the batch size (a positive integer)";

/// A field's text (trimmed) and where it starts in the file.
#[derive(Debug, Clone, Copy)]
pub(super) struct Value<'a> {
    /// The value without surrounding whitespace (or comment).
    pub text: &'a str,
    /// Where `text` starts.
    pub at: Position,
}

impl<'a> Value<'a> {
    /// The value `text` starting at byte `start` of `line`.
    pub fn new(line: &Line<'a>, start: usize, text: &'a str) -> Value<'a> {
        Value {
            text,
            at: line.at(start),
        }
    }

    /// A whole line, trimmed (legacy fields).
    pub fn of_line(line: &Line<'a>) -> Value<'a> {
        let start = line.text.len() - line.text.trim_start().len();
        Value::new(line, start, line.text.trim())
    }

    /// An error at the start of the value.
    pub fn error(&self, message: impl Into<String>) -> RadError {
        RadError::new(self.at, message)
    }

    /// An error `chars` characters into the value.
    pub fn error_at(&self, chars: usize, message: impl Into<String>) -> RadError {
        let at = Position {
            line: self.at.line,
            column: self.at.column + chars,
        };
        RadError::new(at, message)
    }

    /// `expected {what}, found "..."` at the start of the value.
    pub fn expected(&self, what: &str) -> RadError {
        self.error(format!("expected {what}, {}", found(self.text)))
    }

    /// The value as an owned string, refusing an empty one.
    pub fn non_empty(&self, what: &str) -> Result<String, RadError> {
        if self.text.is_empty() {
            return Err(self.expected(what));
        }
        Ok(self.text.to_owned())
    }
}

/// A count such as GPUs or a batch size: digits only, and not zero.
pub(super) fn positive(value: &Value<'_>, what: &str) -> Result<u32, RadError> {
    match count(value, what)? {
        0 => Err(value.expected(what)),
        n => Ok(n),
    }
}

/// A count that may be zero (e.g. re-runs). Signs, fractions and words are
/// refused; so is anything that does not fit in 32 bits, by name.
pub(super) fn count(value: &Value<'_>, what: &str) -> Result<u32, RadError> {
    let digits: IResult<&str, &str> = all_consuming(digit1).parse(value.text);
    let Ok((_, digits)) = digits else {
        return Err(value.expected(what));
    };
    digits.parse().map_err(|_| {
        value.error(format!(
            "expected {what}, {}: too large (at most {})",
            found(value.text),
            u32::MAX
        ))
    })
}

/// Priorities a job file may write: wide enough for any scheme, narrow
/// enough that no arithmetic on them overflows.
pub(super) const PRIORITY_LIMIT: i32 = 1_000_000;

/// A priority: an integer, optionally signed, within ±[`PRIORITY_LIMIT`].
pub(super) fn priority(value: &Value<'_>) -> Result<i32, RadError> {
    let what = format!("a priority (an integer from -{PRIORITY_LIMIT} to {PRIORITY_LIMIT})");
    let (negative, digits) = match value.text.strip_prefix(['-', '+']) {
        Some(rest) => (value.text.starts_with('-'), rest),
        None => (false, value.text),
    };
    let parsed: IResult<&str, &str> = all_consuming(digit1).parse(digits);
    let magnitude = parsed
        .ok()
        .and_then(|(_, d)| d.parse::<i32>().ok())
        .filter(|&m| m <= PRIORITY_LIMIT)
        .ok_or_else(|| value.expected(&what))?;
    Ok(if negative { -magnitude } else { magnitude })
}

/// Most tasks one dependency key may name: a job waiting for more is
/// better written as an array or a chain.
pub const MAX_DEPENDENCIES: usize = 64;

/// `12`, `000012-prep`, `prep`, or several of them separated by commas.
pub(super) fn task_refs(value: &Value<'_>) -> Result<Vec<TaskRef>, RadError> {
    const WHAT: &str = "tasks to wait for: numbers (12), task names (000012-prep) or job names \
                        (prep), separated by commas";
    let mut refs = Vec::new();
    let mut column = 0;
    for item in value.text.split(',') {
        let lead = item.chars().take_while(|c| c.is_whitespace()).count();
        let word = item.trim();
        let at = column + lead;
        column += item.chars().count() + 1;
        if word.is_empty() || word.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(value.error_at(at, format!("expected {WHAT}, {}", found(word))));
        }
        let digits = word.split('-').next().unwrap_or_default();
        let numbered = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        refs.push(match numbered {
            true => TaskRef::Id(digits.parse().map_err(|_| {
                value.error_at(at, format!("expected {WHAT}, {}: too large", found(word)))
            })?),
            false => TaskRef::Name(word.to_owned()),
        });
        if refs.len() > MAX_DEPENDENCIES {
            return Err(value.error_at(
                at,
                format!("at most {MAX_DEPENDENCIES} tasks to wait for on one line"),
            ));
        }
    }
    Ok(refs)
}

/// Most elements one array job may have: more is a typo, and each is a
/// task directory.
pub(super) const MAX_ARRAY: u32 = 1000;

/// `1-10`, `0-99%4`, or a single index `5`.
pub(super) fn array(value: &Value<'_>) -> Result<ArraySpec, RadError> {
    let what = format!(
        "an index range such as 1-10, or 1-10%2 to run at most two at once \
         (at most {MAX_ARRAY} indices)"
    );
    let (range, at_once) = match value.text.split_once('%') {
        Some((range, n)) => (range, Some(n)),
        None => (value.text, None),
    };
    let number = |text: &str| -> Option<u32> {
        let parsed: IResult<&str, &str> = all_consuming(digit1).parse(text);
        parsed.ok()?.1.parse().ok()
    };
    let (first, last) = match range.split_once('-') {
        Some((a, b)) => (number(a), number(b)),
        None => (number(range), number(range)),
    };
    let at_once = match at_once.map(number) {
        None => Ok(None),
        Some(Some(n)) if n > 0 => Ok(Some(n)),
        Some(_) => Err(value.error_at(range.chars().count() + 1, format!("expected {what}"))),
    }?;
    match (first, last) {
        (Some(first), Some(last)) if first <= last && last - first < MAX_ARRAY => Ok(ArraySpec {
            first,
            last,
            at_once,
        }),
        _ => Err(value.expected(&what)),
    }
}

/// Spellings of the policy hint: `collocation` is the legacy format's,
/// `collocate` the keyed one's; both are accepted everywhere.
const POLICIES: [(&str, PolicyHint); 3] = [
    ("exclusive", PolicyHint::Exclusive),
    ("collocate", PolicyHint::Collocate),
    ("collocation", PolicyHint::Collocate),
];

/// `exclusive`, `collocate` or `collocation`, in any case.
pub(super) fn policy(value: &Value<'_>) -> Result<PolicyHint, RadError> {
    if let Some((_, hint)) = POLICIES
        .iter()
        .find(|(word, _)| word.eq_ignore_ascii_case(value.text))
    {
        return Ok(*hint);
    }
    let mut message = format!(
        "expected `exclusive` or `collocate` (or `collocation`), {}",
        found(value.text)
    );
    if let Some(word) = closest(value.text, POLICIES.iter().map(|(word, _)| *word)) {
        message.push_str(&format!(": did you mean `{word}`?"));
    }
    Err(value.error(message))
}

/// The model summary's path. It must stay inside the job's directory:
/// jobs run as their owner, and a path that is absolute or climbs out with
/// `..` would let a `.rad` point carma at other users' files.
/// The longest model summary path a job may give, bytes: each look for
/// it walks its directories one by one (and Linux's own limit on a whole
/// path is 4,096 bytes; carma's copy sits a few names deeper).
pub const MAX_MODEL_PATH: usize = 1024;

/// The most components a model summary path may have.
pub const MAX_MODEL_DEPTH: usize = 32;

pub(super) fn model_path(value: &Value<'_>) -> Result<String, RadError> {
    const WHAT: &str = "the model summary file, relative to the .rad's directory";
    let path = value.non_empty(WHAT)?;
    let drive = matches!(path.as_bytes(), [letter, b':', ..] if letter.is_ascii_alphabetic());
    if path.starts_with(['/', '\\', '~']) || drive {
        return Err(value.error(format!(
            "expected {WHAT}, {}: a job may only use files in its own directory",
            found(&path)
        )));
    }
    if path.len() > MAX_MODEL_PATH || path.split(['/', '\\']).count() > MAX_MODEL_DEPTH {
        return Err(value.error(format!(
            "expected {WHAT}, at most {MAX_MODEL_PATH} bytes and {MAX_MODEL_DEPTH} names \
             deep, {}",
            found(&path)
        )));
    }
    let mut chars = 0;
    for component in path.split(['/', '\\']) {
        if component == ".." {
            return Err(value.error_at(
                chars,
                format!(
                    "expected {WHAT}, {}: `..` leaves the job's directory",
                    found(&path)
                ),
            ));
        }
        chars += component.chars().count() + 1;
    }
    Ok(path)
}
