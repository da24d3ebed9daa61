//! The parser against hand-made good and bad files: every refusal is pinned
//! to its line, column and wording, because those are what a user sees.

use super::*;
use crate::sched::Need;

/// The DESIGN.md example, verbatim.
const RESNET: &str = "\
# ResNet-50 on ImageNet
model: resnet50_32.model     # model summary file, relative to this file
batch_size: 32
gpus: 1
policy: collocate            # or: exclusive
memory: 4G                   # optional: the user's own declaration
conda activate tf
python resnet50.py --batch_size 32
";

/// A legacy file shaped like the published BERT workload.
const LEGACY: &str = "\
# assumption is that model.txt file is in this directory
conda activate tf
python train.py
BERT_base.model
wiki
32
exclusive
1
19828
17456.9336
40000
32000";

fn spec(text: &str) -> TaskSpec {
    match parse(text) {
        Ok(parsed) => parsed.spec,
        Err(e) => panic!("{e} in:\n{text}"),
    }
}

/// Asserts that `text` is refused at `line`:`column` with a message holding
/// every one of `words`.
#[track_caller]
fn refused(text: &str, line: usize, column: usize, words: &[&str]) {
    refused_bytes(text.as_bytes(), line, column, words);
}

#[track_caller]
fn refused_bytes(bytes: &[u8], line: usize, column: usize, words: &[&str]) {
    let error = match parse_bytes(bytes) {
        Ok(parsed) => panic!("accepted: {parsed:?}"),
        Err(error) => error,
    };
    assert_eq!((error.line, error.column), (line, column), "{error}");
    for word in words {
        assert!(error.message.contains(word), "{word:?} not in: {error}");
    }
    // The &str front agrees wherever the input is text.
    if let Ok(text) = std::str::from_utf8(bytes) {
        assert_eq!(parse(text), Err(error));
    }
}

/// Asserts that `text` is accepted with one warning, at `line`:`column`,
/// holding every one of `words`; returns the job.
#[track_caller]
fn warned(text: &str, line: usize, column: usize, words: &[&str]) -> TaskSpec {
    let parsed = parse(text).unwrap_or_else(|e| panic!("{e} in:\n{text}"));
    let [warning] = &parsed.warnings[..] else {
        panic!("expected one warning, got {:?}", parsed.warnings);
    };
    assert_eq!((warning.line, warning.column), (line, column), "{warning}");
    for word in words {
        assert!(warning.message.contains(word), "{word:?} not in: {warning}");
    }
    parsed.spec
}

/// LEGACY with 1-based line `number` replaced.
fn legacy_with(number: usize, replacement: &str) -> String {
    let mut lines: Vec<&str> = LEGACY.lines().collect();
    lines[number - 1] = replacement;
    lines.join("\n")
}

const LEGACY_NOTE: &str = "legacy positional syntax because no `key: value` line";

mod accepted;
mod refused;
