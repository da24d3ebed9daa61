//! Model summaries: the text users save next to a job to describe its
//! network, read into [`ModelFeatures`].
//!
//! Three formats occur in practice and are told apart by their header:
//! `torchsummary` tables, `torchinfo` trees and PyTorch module prints
//! annotated with parameter counts, as Hugging Face models are commonly
//! dumped (one private module each).
//! Parsers take `&str`, never a path, and never panic: anything they cannot
//! read is a [`SummaryError`] with the line and column where reading
//! stopped. Free text after a summary's footer (people add notes) is
//! ignored.

mod features;
mod module_print;
mod torchinfo;
mod torchsummary;

use std::fmt;

use nom::{
    IResult, Parser,
    bytes::complete::tag,
    character::complete::{char, digit1, space0},
    combinator::opt,
    multi::separated_list1,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// Largest model summary copied into a task or read for an estimate: real ones are tens of
/// kilobytes, the largest torchsummary tables a few hundred. carma's copy
/// is root's and counts against no user's disk quota, so it is bounded.
pub const MAX_SUMMARY_BYTES: u64 = 8 << 20;

pub use features::{
    ActivationFn, ActivationsByKind, Family, FeatureBuilder, LayerCounts, LayerKind, ModelFeatures,
    Totals, TransformerShape,
};

/// A summary that could not be read: where and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("line {line}, column {column}: {message}")]
pub struct SummaryError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What was expected there.
    pub message: String,
}

impl SummaryError {
    /// An error at the place in `line` (line number `number`) where `rest`
    /// begins; `rest` must be a suffix of `line`.
    fn at(number: usize, line: &str, rest: &str, message: impl Into<String>) -> SummaryError {
        let consumed = line.len().saturating_sub(rest.len());
        SummaryError {
            line: number,
            column: line.get(..consumed).map_or(1, |s| s.chars().count() + 1),
            message: message.into(),
        }
    }
}

/// Which of the known formats a summary is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Torchsummary,
    Torchinfo,
    ModulePrint,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Torchsummary => "torchsummary",
            Format::Torchinfo => "torchinfo",
            Format::ModulePrint => "module print",
        })
    }
}

/// A parsed summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub format: Format,
    pub features: ModelFeatures,
    /// SHA-256 of the text, hex: identifies the model in job history.
    pub digest: String,
    /// Inconsistencies found in the text and how they were resolved.
    pub notes: Vec<String>,
}

impl Summary {
    /// Detects the format of `text` and reads it.
    pub fn parse(text: &str) -> Result<Summary, SummaryError> {
        let format = detect(text)?;
        let (mut features, notes) = match format {
            Format::Torchsummary => (torchsummary::parse(text)?, Vec::new()),
            Format::Torchinfo => torchinfo::parse(text)?,
            Format::ModulePrint => module_print::parse(text)?,
        };
        features.half_precision = mentions_half_precision(text);
        Ok(Summary {
            format,
            features,
            digest: hex_digest(text.as_bytes()),
            notes,
        })
    }
}

/// Whether a summary shows 16-bit tensors: torchinfo and module prints
/// of half models name their dtype (`torch.float16`, `bfloat16`).
fn mentions_half_precision(text: &str) -> bool {
    ["float16", "bfloat16", "torch.half"]
        .iter()
        .any(|dtype| text.contains(dtype))
}

/// Counts one more `value` in `counts`, which keeps at most `limit`
/// distinct values (a new one past it is not counted): the few values a
/// real summary repeats are found, and a hostile one with millions of
/// distinct values costs no more than `limit` comparisons a line.
fn tally<T: PartialEq>(counts: &mut Vec<(T, u64)>, value: T, limit: usize) {
    if let Some((_, n)) = counts.iter_mut().find(|(v, _)| *v == value) {
        *n = n.saturating_add(1);
    } else if counts.len() < limit {
        counts.push((value, 1));
    }
}

/// SHA-256 of `bytes` as lower-case hex.
pub fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn detect(text: &str) -> Result<Format, SummaryError> {
    let Some((number, first)) = numbered(text).find(|(_, l)| !l.trim().is_empty()) else {
        return Err(SummaryError {
            line: 1,
            column: 1,
            message: "empty summary".into(),
        });
    };
    if module_print::is_root_line(first) {
        return Ok(Format::ModulePrint);
    }
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("Layer (type:depth-idx)") {
            return Ok(Format::Torchinfo);
        }
        if t.starts_with("Layer (type)") {
            return Ok(Format::Torchsummary);
        }
    }
    Err(SummaryError::at(
        number,
        first,
        first.trim_start(),
        "unknown summary format: expected a torchsummary table (`Layer (type)`), a torchinfo \
         tree (`Layer (type:depth-idx)`) or a module print (`Model(`)",
    ))
}

/// Lines of `text`, numbered from 1.
fn numbered(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().map(|(i, l)| (i + 1, l))
}

/// A rule line made of one repeated character (`====`, `----`).
/// Consumes the `====` rule that must follow a table's header line
/// (`what` names the table in the error).
fn rule_below_header<'a>(
    lines: &mut impl Iterator<Item = (usize, &'a str)>,
    header_no: usize,
    header: &'a str,
    what: &str,
) -> Result<(), SummaryError> {
    match lines.next() {
        Some((_, l)) if is_rule(l) => Ok(()),
        Some((n, l)) => Err(SummaryError::at(
            n,
            l,
            l,
            "expected a `====` rule below the header",
        )),
        None => Err(SummaryError::at(
            header_no,
            header,
            "",
            format!("the {what} ends after its header"),
        )),
    }
}

/// The rows of a table's body, up to the `====` rule that closes it (blank
/// lines skipped), each parsed by `row`; `expected` describes a row in the
/// error. Lines after the rule stay in `lines` (the footer). Rows stream:
/// a large summary is never held twice.
fn body_rows<'a, 'l, R>(
    lines: &'l mut impl Iterator<Item = (usize, &'a str)>,
    row: impl Fn(&'a str) -> IResult<&'a str, R> + 'l,
    expected: &'l str,
) -> impl Iterator<Item = Result<(usize, &'a str, R), SummaryError>> + 'l {
    lines
        .by_ref()
        .take_while(|(_, line)| !is_rule(line))
        .filter(|(_, line)| !line.trim().is_empty())
        .map(move |(number, line)| {
            row(line)
                .map(|(_, r)| (number, line, r))
                .map_err(|e| SummaryError::at(number, line, stopped_at(&e, line), expected))
        })
}

fn is_rule(line: &str) -> bool {
    let t = line.trim();
    t.len() >= 3 && (t.chars().all(|c| c == '=') || t.chars().all(|c| c == '-'))
}

/// A count as summaries print it: `1,179,776` or `320`. Hand-written
/// rather than combined from nom parts: it runs several times per row and
/// must not allocate (parsing the largest summary has a time budget).
fn count(input: &str) -> IResult<&str, u64> {
    let bytes = input.as_bytes();
    let fail = |kind| nom::Err::Error(nom::error::Error::new(input, kind));
    if !bytes.first().is_some_and(u8::is_ascii_digit) {
        return Err(fail(nom::error::ErrorKind::Digit));
    }
    let mut value = 0u64;
    let mut end = 0;
    while end < bytes.len() {
        let b = bytes[end];
        if b.is_ascii_digit() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(b - b'0')))
                .ok_or_else(|| fail(nom::error::ErrorKind::TooLarge))?;
        } else if !(b == b',' && bytes.get(end + 1).is_some_and(u8::is_ascii_digit)) {
            break;
        }
        end += 1;
    }
    Ok((&input[end..], value))
}

/// A signed dimension: `-1` (any batch) or a count.
fn dim(input: &str) -> IResult<&str, i64> {
    let (rest, neg) = opt(char('-')).parse(input)?;
    let (rest, n) = count(rest)?;
    let n = i64::try_from(n).map_err(|_| {
        nom::Err::Error(nom::error::Error::new(
            input,
            nom::error::ErrorKind::TooLarge,
        ))
    })?;
    Ok((rest, if neg.is_some() { -n } else { n }))
}

/// One tensor shape `[32, 64, 112, 112]` or a list of them
/// `[[-1, 10], [-1, 10]]` (layers with several outputs).
fn shapes(input: &str) -> IResult<&str, Vec<Vec<i64>>> {
    let sep = || (space0, char(','), space0);
    let inner = |i| {
        let (i, _) = (char('['), space0).parse(i)?;
        let (i, dims) = separated_list1(sep(), dim).parse(i)?;
        let (i, _) = (space0, char(']')).parse(i)?;
        Ok((i, dims))
    };
    let (i, _) = (char('['), space0).parse(input)?;
    if i.starts_with('[') {
        let (i, list) = separated_list1(sep(), inner).parse(i)?;
        let (i, _) = (space0, char(']')).parse(i)?;
        Ok((i, list))
    } else {
        let (i, dims) = separated_list1(sep(), dim).parse(i)?;
        let (i, _) = (space0, char(']')).parse(i)?;
        Ok((i, vec![dims]))
    }
}

/// Output elements per sample: the product of all but the first (batch)
/// dimension, summed over a layer's outputs.
fn per_sample(shapes: &[Vec<i64>]) -> u64 {
    shapes
        .iter()
        .map(|dims| {
            dims.iter()
                .skip(1)
                .map(|d| d.unsigned_abs())
                .fold(1u64, u64::saturating_mul)
        })
        .fold(0u64, u64::saturating_add)
}

/// The totals block shared by torchsummary and torchinfo (`Total params:
/// 1,199,882`). Lines it does not know are skipped: some footers carry
/// sizes in MB, and people append notes.
fn footer_totals<'a>(
    lines: impl Iterator<Item = (usize, &'a str)>,
) -> Result<Totals, SummaryError> {
    let mut totals = Totals::default();
    for (number, line) in lines {
        let t = line.trim_start();
        for (key, slot) in [
            ("Total params:", &mut totals.params_total),
            ("Trainable params:", &mut totals.params_trainable),
        ] {
            if let Some(rest) = t.strip_prefix(key) {
                let rest = rest.trim_start();
                match count(rest) {
                    Ok((tail, v)) if tail.trim().is_empty() => {
                        // The first statement wins: notes below a footer
                        // may repeat the key with other numbers.
                        slot.get_or_insert(v);
                    }
                    _ => {
                        return Err(SummaryError::at(
                            number,
                            line,
                            rest,
                            format!("expected a count after `{key}`"),
                        ));
                    }
                }
            }
        }
    }
    Ok(totals)
}

/// `: ` then a torchinfo `depth-idx` such as `2-13`; gives the depth.
fn depth_idx(input: &str) -> IResult<&str, u64> {
    let (i, _) = (tag(":"), space0).parse(input)?;
    let (i, depth) = count(i)?;
    let (i, _) = (char('-'), digit1).parse(i)?;
    Ok((i, depth))
}

/// A layer's class name: `Conv2d`, `BatchNormAct2d`, `DLRM_Net`.
fn type_name(input: &str) -> IResult<&str, &str> {
    nom::bytes::complete::take_while1(|c: char| c.is_alphanumeric() || c == '_' || c == '.')
        .parse(input)
}

/// Where a nom error stopped, as the unparsed rest of the line.
fn stopped_at<'a>(err: &nom::Err<nom::error::Error<&'a str>>, fallback: &'a str) -> &'a str {
    match err {
        nom::Err::Error(e) | nom::Err::Failure(e) => e.input,
        nom::Err::Incomplete(_) => fallback,
    }
}

#[cfg(test)]
mod tests;
