//! Property tests for every parser that reads bytes a user controls: the
//! `.rad` job file (both syntaxes, and `check_file`), the three model
//! summary formats (and the analytic estimate of whatever they accept),
//! the configuration file, the estimator's job history, and (in
//! `properties/records.rs`) the JSON records of the spool and daemon. The
//! `/proc/<pid>/stat` parser is private and has its properties in
//! `src/procfs.rs`.
//!
//! carma runs as root and reads what other users wrote, so "never panics"
//! is a security property, not a nicety: a panicking parse is a crash that
//! any user can cause, and in a release build the same overflow is a
//! silently wrong number instead. Every parser is fed random bytes and, because
//! random bytes rarely get past a first line, mutations of real and
//! generated files (bytes and lines inserted, deleted, swapped; values
//! replaced by huge numbers, unicode, NUL, CR; very long lines; very many
//! lines). A refusal must say why, and a syntax error must point at a line
//! and column that exist in the input, or an editor cannot jump to it.
//!
//! Seeds come from the real workloads and summaries in
//! `data/carma/workloads` when that directory exists, and always
//! from the inline texts below, so the tests still mean something (and say
//! so on stderr) without them.
//!
//! Case counts: each test has a default sized so that the whole file runs
//! in well under a minute in a debug build on two cores. Setting proptest's
//! `PROPTEST_CASES` environment variable gives every test that many cases
//! instead, e.g. for a long run (about five minutes):
//!
//! ```text
//! PROPTEST_CASES=30000 cargo test --test properties
//! ```
//!
//! Keep long runs in debug builds: their overflow checks are what turn a
//! wrapped sum into a failure.
//!
//! Failure persistence is off: a failing case is printed with its minimal
//! input, and is kept as a named regression test rather than as a file
//! proptest would write into the source tree.

#[path = "properties/records.rs"]
mod records;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use carma::config::{Config, ConfigError};
use carma::estimate::Analytic;
use carma::estimate::analytic::{Layered, Optimizer};
use carma::estimate::ensemble::feature_vector;
use carma::estimate::history::{History, Record};
use carma::rad::{
    self, FileError, MAX_LINE_BYTES, MAX_LINES, PolicyHint, PublishedEstimates, RadError, Syntax,
    TaskSpec,
};
use carma::sched::Need;
use carma::spool::record::Fingerprint;
use carma::summary::{Summary, SummaryError};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::Config as ProptestConfig;

// Shared machinery: configuration, seeds and edits.

/// `default` cases, or `PROPTEST_CASES` when set; no persistence files.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The shared workloads directory (real `.rad` files and summaries).
fn workloads_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/workloads")
}

/// Files of the shared workloads directory whose name ends in `extension`;
/// empty, with a note on stderr, when the directory is missing.
fn data_files(extension: &str) -> Vec<Vec<u8>> {
    let dir = workloads_dir();
    let Ok(entries) = fs::read_dir(&dir) else {
        // Straight to stderr: the test harness swallows `eprintln!` of
        // passing tests, and a run without the real files should say so.
        let _ = writeln!(
            std::io::stderr(),
            "note: {} is missing: `*{extension}` seeds are the inline ones only",
            dir.display()
        );
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(extension))
        .collect();
    paths.sort();
    paths.into_iter().map(|p| fs::read(p).unwrap()).collect()
}

/// Short texts that matter to some parser: numbers at and past every
/// integer limit, units, unicode that changes byte/char counts, control
/// bytes, the punctuation the grammars are made of, and keys.
const PIECES: &[&str] = &[
    "0",
    "-1",
    "1",
    "32",
    "40000",
    "40000.0",
    "39999.5",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "18,446,744,073,709,551,615",
    "1,",
    ",1",
    "1e309",
    "-1e309",
    "1.5",
    ".5",
    "5.",
    "NaN",
    "inf",
    "4G",
    "4 GiB",
    "99999999999999999999T",
    "0.0000001M",
    "whole",
    "é",
    "名前",
    "🦀",
    "\u{0301}",
    "\u{202e}",
    "\u{feff}",
    "\u{fffd}",
    "\0",
    "\r",
    "\r\n",
    "\n",
    "\t",
    "\x7f",
    "\x1b[0m",
    " ",
    ":",
    "::",
    ": ",
    "#",
    " #",
    "(",
    ")",
    "((",
    "))",
    "[",
    "]",
    "[[",
    "]]",
    "[-1, 10]",
    ",",
    "-",
    "--",
    "x",
    " x ",
    "=",
    "==========",
    "----------",
    "/",
    "\\",
    "..",
    "../",
    "/etc/passwd",
    "C:\\",
    "~",
    "outside.model",
    "name: ",
    "model: ",
    "memory: ",
    "gpus: ",
    "batch_size: ",
    "policy: ",
    "retries: ",
    "dataset: ",
    "nmae: ",
    "collocation",
    "exclusive",
    "Layer (type)",
    "Layer (type:depth-idx)",
    "Output Shape",
    "Param #",
    "Total params: ",
    "Trainable params: ",
    " params",
    ", 1 params",
    "├─",
    "│    └─",
    "Linear(",
    "Model(",
    "(recursive)",
    "null",
    "true",
    "{}",
    "[]",
    "\"\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\\",
];

/// A short byte string that may break a parser.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => select(PIECES).prop_map(|s| s.as_bytes().to_vec()),
        1 => vec(any::<u8>(), 1..12),
        1 => "\\PC{1,6}".prop_map(String::into_bytes),
        1 => "[0-9]{15,45}".prop_map(String::into_bytes),
        1 => any::<u64>().prop_map(|n| commas(n).into_bytes()),
    ]
}

/// `n` with thousands separators, as summaries print counts.
fn commas(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// One change to a file. Positions are [`Index`]es, resolved against the
/// file as it is when the edit applies.
#[derive(Debug, Clone)]
enum Edit {
    InsertBytes(Index, Vec<u8>),
    DeleteBytes(Index, usize),
    ReplaceByte(Index, u8),
    /// Replaces a whitespace-separated word: numbers, keys, shapes.
    ReplaceWord(Index, Vec<u8>),
    Truncate(Index),
    InsertLine(Index, Vec<u8>),
    DeleteLine(Index),
    DuplicateLine(Index),
    SwapLines(Index, Index),
    ReplaceLine(Index, Vec<u8>),
    /// Inserts a line of about `len` bytes made of repetitions of a piece
    /// (multi-byte pieces put char boundaries near every limit).
    LongLine(Index, usize, Vec<u8>),
    /// Inserts `count` lines.
    ManyLines(Index, usize),
    Crlf,
    Bom,
}

fn edit() -> impl Strategy<Value = Edit> {
    let index = any::<Index>;
    let long = prop_oneof![
        Just(MAX_LINE_BYTES - 1),
        Just(MAX_LINE_BYTES),
        Just(MAX_LINE_BYTES + 1),
        Just(MAX_LINE_BYTES + 3),
        100..2_000usize,
    ];
    let many = prop_oneof![
        Just(MAX_LINES - 13),
        Just(MAX_LINES - 12),
        Just(MAX_LINES),
        Just(MAX_LINES + 1),
        1..40usize,
    ];
    prop_oneof![
        4 => (index(), piece()).prop_map(|(i, p)| Edit::InsertBytes(i, p)),
        2 => (index(), 1..24usize).prop_map(|(i, n)| Edit::DeleteBytes(i, n)),
        3 => (index(), any::<u8>()).prop_map(|(i, b)| Edit::ReplaceByte(i, b)),
        6 => (index(), piece()).prop_map(|(i, p)| Edit::ReplaceWord(i, p)),
        1 => index().prop_map(Edit::Truncate),
        2 => (index(), piece()).prop_map(|(i, p)| Edit::InsertLine(i, p)),
        2 => index().prop_map(Edit::DeleteLine),
        2 => index().prop_map(Edit::DuplicateLine),
        2 => (index(), index()).prop_map(|(i, j)| Edit::SwapLines(i, j)),
        2 => (index(), piece()).prop_map(|(i, p)| Edit::ReplaceLine(i, p)),
        1 => (index(), long, piece()).prop_map(|(i, n, p)| Edit::LongLine(i, n, p)),
        1 => (index(), many).prop_map(|(i, n)| Edit::ManyLines(i, n)),
        1 => Just(Edit::Crlf),
        1 => Just(Edit::Bom),
    ]
}

/// A few edits: most parsers stop at the first error, so one to four
/// changes reach deeper than many.
fn edits() -> impl Strategy<Value = Vec<Edit>> {
    vec(edit(), 1..5)
}

fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect()
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    let at = |i: &Index, len: usize| i.index(len + 1);
    let lines = || split_lines(bytes);
    let joined = |lines: Vec<Vec<u8>>| lines.join(&b'\n');
    match edit {
        Edit::InsertBytes(i, p) => {
            let at = at(i, bytes.len());
            bytes.splice(at..at, p.iter().copied());
        }
        Edit::DeleteBytes(i, n) => {
            let start = at(i, bytes.len());
            let end = (start + n).min(bytes.len());
            bytes.drain(start..end);
        }
        Edit::ReplaceByte(i, b) => {
            if !bytes.is_empty() {
                let at = i.index(bytes.len());
                bytes[at] = *b;
            }
        }
        Edit::ReplaceWord(i, p) => {
            let words = words(bytes);
            if words.is_empty() {
                bytes.extend_from_slice(p);
            } else {
                let (start, end) = words[i.index(words.len())];
                bytes.splice(start..end, p.iter().copied());
            }
        }
        Edit::Truncate(i) => bytes.truncate(at(i, bytes.len())),
        Edit::InsertLine(i, p) => {
            let mut lines = lines();
            let at = at(i, lines.len());
            lines.insert(at, p.clone());
            *bytes = joined(lines);
        }
        Edit::DeleteLine(i) => {
            let mut lines = lines();
            lines.remove(i.index(lines.len()));
            *bytes = joined(lines);
        }
        Edit::DuplicateLine(i) => {
            let mut lines = lines();
            let at = i.index(lines.len());
            lines.insert(at, lines[at].clone());
            *bytes = joined(lines);
        }
        Edit::SwapLines(i, j) => {
            let mut lines = lines();
            let n = lines.len();
            lines.swap(i.index(n), j.index(n));
            *bytes = joined(lines);
        }
        Edit::ReplaceLine(i, p) => {
            let mut lines = lines();
            let at = i.index(lines.len());
            lines[at] = p.clone();
            *bytes = joined(lines);
        }
        Edit::LongLine(i, len, p) => {
            let mut line = Vec::with_capacity(len + p.len());
            while line.len() < *len {
                line.extend_from_slice(if p.is_empty() { b"a" } else { p });
            }
            let mut lines = lines();
            let at = at(i, lines.len());
            lines.insert(at, line);
            *bytes = joined(lines);
        }
        Edit::ManyLines(i, count) => {
            let at = at(i, bytes.len());
            bytes.splice(at..at, std::iter::repeat_n(b'\n', *count));
        }
        Edit::Crlf => {
            *bytes = lines()
                .into_iter()
                .map(|mut l| {
                    if !l.ends_with(b"\r") {
                        l.push(b'\r');
                    }
                    l
                })
                .collect::<Vec<_>>()
                .join(&b'\n');
        }
        Edit::Bom => bytes.splice(0..0, "\u{feff}".bytes()).for_each(drop),
    }
}

/// Byte ranges of the words of `bytes` (runs without space, tab, CR, LF).
fn words(bytes: &[u8]) -> Vec<(usize, usize)> {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let mut words = Vec::new();
    let mut start = None;
    for (i, b) in bytes.iter().enumerate() {
        match (start, blank(b)) {
            (None, false) => start = Some(i),
            (Some(s), true) => {
                words.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((s, bytes.len()));
    }
    words
}

/// `seed` with `edits` applied in order.
fn mutated(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for edit in edits {
        apply(&mut bytes, edit);
    }
    bytes
}

/// Picks one of `seeds` (which must not be empty).
fn one_of(seeds: &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    any::<Index>().prop_map(move |i| seeds[i.index(seeds.len())].clone())
}

// The .rad parser.

/// The DESIGN.md example.
const RAD_KEYED: &str = "\
# ResNet-50 on ImageNet
model: resnet50_32.model     # model summary file, relative to this file
batch_size: 32
gpus: 1
policy: collocate            # or: exclusive
memory: 4G                   # optional: the user's own declaration
conda activate tf
python resnet50.py --batch_size 32
";

/// Every key once, directives among script lines, comments, a URL line.
const RAD_KEYED_ALL: &str = "\
#!/bin/bash
name: bert-run-2
python prepare.py --url http://example.com/data
dataset : /raid/wiki   # where it lives
retries: 0
policy: Exclusive
  gpus: this is script, not a directive
gpus: 4
memory: whole
batch_size: 8
model: sub/BERT_base.model
for i in 1 2; do echo $i; done
";

/// A legacy file like the published ones.
const RAD_LEGACY: &str = "\
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

/// A legacy file with CRLF endings, blank estimate lines and trailing
/// blanks.
const RAD_LEGACY_SPARSE: &str = "# job\r\nsource venv/bin/activate\r\n./run.sh --fast\r\n\
    mnist_cnn_64.model\r\nMNIST dataset\r\n64\r\ncollocate\r\n2\r\n\r\n1114.0823\r\n\r\n\r\n\r\n";

static RAD_SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut seeds: Vec<Vec<u8>> = [RAD_KEYED, RAD_KEYED_ALL, RAD_LEGACY, RAD_LEGACY_SPARSE]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    seeds.extend(data_files(".rad"));
    seeds
});

/// Asserts that `error`, a refusal of `input`, says something and points
/// at a line and column that exist in `input` (the column may be one past
/// the line's end: "found end of line").
#[track_caller]
fn assert_rad_error(input: &[u8], error: &RadError) {
    assert!(!error.message.trim().is_empty(), "no reason: {error:?}");
    assert!(error.line >= 1 && error.column >= 1, "{error:?}");
    let text = input.strip_prefix("\u{feff}".as_bytes()).unwrap_or(input);
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    assert!(
        error.line <= lines.len(),
        "line {} of a {}-line input: {error}",
        error.line,
        lines.len()
    );
    let line = lines[error.line - 1];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    // Characters, counted by their leading bytes as the parser does for
    // text that is not UTF-8.
    let width = line.iter().filter(|&&b| b & 0xC0 != 0x80).count();
    assert!(
        error.column <= width + 1,
        "column {} of a {width}-character line: {error}",
        error.column
    );
    assert!(
        error
            .to_string()
            .starts_with(&format!("{}:{}: ", error.line, error.column)),
        "{error}"
    );
}

/// Parses `bytes` through both entry points: no panic, the same answer
/// wherever the input is text, and an error that points into the input.
fn check_rad(bytes: &[u8]) -> Result<rad::Parsed, RadError> {
    let result = rad::parse_bytes(bytes);
    if let Ok(text) = std::str::from_utf8(bytes) {
        assert_eq!(rad::parse(text), result, "parse and parse_bytes disagree");
    }
    match &result {
        // `carma check` prints every accepted job.
        Ok(parsed) => assert!(!parsed.spec.to_string().is_empty()),
        Err(error) => assert_rad_error(bytes, error),
    }
    result
}

/// Lines that exercise the keyed and legacy grammars: every key with good
/// and bad values, legacy-looking values, comments, blanks.
fn rad_line() -> impl Strategy<Value = String> {
    let key = select(&[
        "name",
        "model",
        "dataset",
        "batch_size",
        "gpus",
        "policy",
        "memory",
        "retries",
        "nmae",
        "Memory",
        "batchsize",
        "x-y_z9",
    ]);
    let value = prop_oneof![
        select(PIECES).prop_map(str::to_owned),
        "[ -~]{0,12}",
        "\\PC{0,8}",
        "[0-9]{1,25}(\\.[0-9]{1,5})? ?([KMGTkmgt]i?[Bb]?)?",
    ];
    let spaces = || "[ \t]{0,2}";
    prop_oneof![
        4 => (key, spaces(), spaces(), value.clone(), "( +#.*)?")
            .prop_map(|(k, a, b, v, c)| format!("{k}{a}:{b}{v}{c}")),
        2 => value,
        1 => "#.{0,20}",
        1 => "[ \t]{0,3}",
        2 => select(&["conda activate tf", "python train.py", "BERT_base.model", "wiki",
                      "exclusive", "collocation", "http://x/y", "C:\\data", "  gpus: 2"])
            .prop_map(str::to_owned),
    ]
}

/// A keyed file generated whole, with the job it must read as.
#[derive(Debug, Clone)]
struct KeyedFile {
    text: String,
    spec: TaskSpec,
    /// 1-based line and column of the model path, when there is one.
    model_at: Option<(usize, usize)>,
}

/// Values a well-formed keyed file may hold, one per key, already in the
/// form the file writes them; `None` leaves the key out.
#[derive(Debug, Clone)]
struct KeyedValues {
    name: Option<String>,
    model: Option<String>,
    dataset: Option<String>,
    batch_size: Option<u32>,
    gpus: Option<u32>,
    policy: Option<(String, PolicyHint)>,
    memory: Option<(String, Need)>,
    retries: Option<u32>,
}

fn keyed_values() -> impl Strategy<Value = KeyedValues> {
    let policy = select(&[
        ("exclusive", PolicyHint::Exclusive),
        ("EXCLUSIVE", PolicyHint::Exclusive),
        ("collocate", PolicyHint::Collocate),
        ("Collocation", PolicyHint::Collocate),
    ])
    .prop_map(|(w, p)| (w.to_owned(), p));
    let memory = prop_oneof![
        select(&["whole", "Whole-GPU", "WHOLE"]).prop_map(|w| (w.to_owned(), Need::WholeGpu)),
        (
            1..1_000_000u64,
            select(&[
                ("", 1),
                ("M", 1),
                (" MiB", 1),
                ("mb", 1),
                ("G", 1024),
                ("GiB", 1024),
                (" gb", 1024),
                ("T", 1024 * 1024),
            ])
        )
            .prop_map(|(n, (unit, factor))| (format!("{n}{unit}"), Need::Mib(n * factor))),
    ];
    (
        (
            proptest::option::of("[A-Za-z0-9_.][A-Za-z0-9_.#-]{0,15}"),
            proptest::option::of("(sub/)?[A-Za-z0-9_]{1,12}\\.model"),
            proptest::option::of("[A-Za-z0-9_/.-]{1,20}"),
            proptest::option::of(1..=u32::MAX),
        ),
        (
            proptest::option::of(1..=u32::MAX),
            proptest::option::of(policy),
            proptest::option::of(memory),
            proptest::option::of(any::<u32>()),
        ),
    )
        .prop_map(
            |((name, model, dataset, batch_size), (gpus, policy, memory, retries))| KeyedValues {
                name,
                model,
                dataset,
                batch_size,
                gpus,
                policy,
                memory,
                retries,
            },
        )
        .prop_filter("a keyed file needs a directive", |v| {
            v.name.is_some()
                || v.model.is_some()
                || v.dataset.is_some()
                || v.batch_size.is_some()
                || v.gpus.is_some()
                || v.policy.is_some()
                || v.memory.is_some()
                || v.retries.is_some()
        })
}

fn keyed_file() -> impl Strategy<Value = KeyedFile> {
    let script_line = prop_oneof![
        "(python|conda|echo|\\./run\\.sh|export) [a-z0-9 =./-]{0,30}",
        "  [a-z]{1,8}: [a-z ]{0,10}",
        Just("wget http://example.com/x".to_owned()),
    ];
    let filler = prop_oneof![Just(String::new()), "# [ -~]{0,20}", "  # [a-z ]{0,10}"];
    (
        keyed_values(),
        vec(script_line, 1..4),
        vec(filler, 0..3),
        any::<u64>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(values, script, filler, shuffle, crlf, final_newline)| {
            keyed_text(values, script, filler, shuffle, crlf, final_newline)
        })
}

/// Lays out a keyed file: directives, script and filler lines interleaved
/// in an order picked by `shuffle`, script lines keeping their order.
fn keyed_text(
    v: KeyedValues,
    script: Vec<String>,
    filler: Vec<String>,
    mut shuffle: u64,
    crlf: bool,
    final_newline: bool,
) -> KeyedFile {
    let mut directives: Vec<(&str, String)> = Vec::new();
    let mut push = |key, value: Option<String>| {
        if let Some(value) = value {
            directives.push((key, value));
        }
    };
    push("name", v.name.clone());
    push("model", v.model.clone());
    push("dataset", v.dataset.clone());
    push("batch_size", v.batch_size.map(|n| n.to_string()));
    push("gpus", v.gpus.map(|n| n.to_string()));
    push("policy", v.policy.as_ref().map(|(w, _)| w.clone()));
    push("memory", v.memory.as_ref().map(|(w, _)| w.clone()));
    push("retries", v.retries.map(|n| n.to_string()));
    // Lines in order: each step takes the next directive, script or filler
    // line, chosen by two bits of `shuffle`.
    let mut lines: Vec<String> = Vec::new();
    let mut model_at = None;
    let (mut d, mut s, mut f) = (0, 0, 0);
    let mut next = || {
        shuffle = shuffle
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        shuffle >> 33
    };
    while d < directives.len() || s < script.len() || f < filler.len() {
        let left = [d < directives.len(), s < script.len(), f < filler.len()];
        let mut pick = (next() % 3) as usize;
        while !left[pick] {
            pick = (pick + 1) % 3;
        }
        match pick {
            0 => {
                let (key, value) = &directives[d];
                let gap = if next() % 2 == 0 { " " } else { "   " };
                let comment = if next() % 5 == 0 { "   # note" } else { "" };
                if *key == "model" {
                    model_at = Some((lines.len() + 1, key.len() + 1 + gap.len() + 1));
                }
                lines.push(format!("{key}:{gap}{value}{comment}"));
                d += 1;
            }
            1 => {
                lines.push(script[s].clone());
                s += 1;
            }
            _ => {
                lines.push(filler[f].clone());
                f += 1;
            }
        }
    }
    let end = if crlf { "\r\n" } else { "\n" };
    let mut text = lines.join(end);
    if final_newline {
        text.push_str(end);
    }
    let spec = TaskSpec {
        name: v.name,
        model: v.model,
        dataset: v.dataset,
        batch_size: v.batch_size,
        gpus: v.gpus.unwrap_or(rad::DEFAULT_GPUS),
        policy: v.policy.map(|(_, p)| p),
        memory: v.memory.map(|(_, m)| m),
        retries: v.retries,
        ..TaskSpec::new(Syntax::Keyed, script)
    };
    KeyedFile {
        text,
        spec,
        model_at,
    }
}

/// A legacy memory line and what it means: plain MiB, fractions rounded
/// up, exactly 40000 a whole GPU; blank is absent.
fn legacy_memory() -> impl Strategy<Value = (String, Option<Need>)> {
    prop_oneof![
        1 => Just((String::new(), None)),
        1 => Just(("40000".to_owned(), Some(Need::WholeGpu))),
        1 => Just(("40000.00".to_owned(), Some(Need::WholeGpu))),
        4 => (1..1_000_000u64, proptest::option::of("[0-9]{1,4}")).prop_map(|(n, fraction)| {
            match fraction {
                None if n == rad::LEGACY_WHOLE_GPU_MIB => (n.to_string(), Some(Need::WholeGpu)),
                None => (n.to_string(), Some(Need::Mib(n))),
                Some(f) => {
                    let up = u64::from(f.bytes().any(|b| b != b'0'));
                    let need = if n == rad::LEGACY_WHOLE_GPU_MIB && up == 0 {
                        Need::WholeGpu
                    } else {
                        Need::Mib(n + up)
                    };
                    (format!("{n}.{f}"), Some(need))
                }
            }
        }),
    ]
}

/// A legacy file generated whole, with the job it must read as.
fn legacy_file() -> impl Strategy<Value = KeyedFile> {
    let policy = select(&[
        ("exclusive", PolicyHint::Exclusive),
        ("collocation", PolicyHint::Collocate),
        ("Collocate", PolicyHint::Collocate),
    ]);
    (
        (
            "#[ -~]{0,30}",
            "(conda activate|source) [a-z]{1,8}",
            "python [a-z0-9 ./=-]{1,30}",
            "[A-Za-z0-9_]{1,12}\\.model",
            "[A-Za-z0-9_/. -]{0,15}[A-Za-z0-9_]",
            1..=u32::MAX,
            policy,
            1..=u32::MAX,
        ),
        (
            vec(legacy_memory(), 0..=4),
            "[ \t]{0,2}",
            0..3usize,
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (comment, activation, command, model, dataset, batch, (word, policy), gpus),
                (memory, pad, trailing_blanks, crlf),
            )| {
                let mut lines = vec![
                    comment,
                    activation.clone(),
                    command.clone(),
                    model.clone(),
                    dataset.clone(),
                    batch.to_string(),
                    word.to_owned(),
                    gpus.to_string(),
                ];
                lines.extend(memory.iter().map(|(text, _)| text.clone()));
                let lines: Vec<String> = lines.into_iter().map(|l| format!("{l}{pad}")).collect();
                let end = if crlf { "\r\n" } else { "\n" };
                let mut text = lines.join(end);
                text.push_str(&end.repeat(trailing_blanks));
                let need = |n: usize| memory.get(n).and_then(|(_, need)| *need);
                let spec = TaskSpec {
                    syntax: Syntax::Legacy,
                    name: None,
                    script: vec![activation, command.trim().to_owned()],
                    model: Some(model),
                    dataset: Some(dataset.trim().to_owned()),
                    batch_size: Some(batch),
                    gpus,
                    policy: Some(policy),
                    memory: need(0),
                    published: PublishedEstimates {
                        horus: need(1),
                        faketensor: need(2),
                        gpumemnet: need(3),
                    },
                    retries: None,
                    time: None,
                    priority: None,
                    after: Vec::new(),
                    notify: None,
                    array: None,
                    host: Default::default(),
                };
                KeyedFile {
                    text,
                    spec,
                    model_at: Some((4, 1)),
                }
            },
        )
}

/// A `.rad` to mutate: a seed, or a well-formed generated file of either
/// syntax (so that edits land in every field, not only the seeds').
fn rad_start() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => one_of(&RAD_SEEDS),
        1 => keyed_file().prop_map(|f| f.text.into_bytes()),
        1 => legacy_file().prop_map(|f| f.text.into_bytes()),
    ]
}

#[test]
fn rad_inline_seeds_are_valid_jobs() {
    for seed in [RAD_KEYED, RAD_KEYED_ALL, RAD_LEGACY, RAD_LEGACY_SPARSE] {
        if let Err(e) = rad::parse(seed) {
            panic!("{e} in:\n{seed}");
        }
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn rad_arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let _ = check_rad(&bytes);
    }

    #[test]
    fn rad_arbitrary_text_never_panics(text in any::<String>()) {
        let _ = check_rad(text.as_bytes());
    }

    #[test]
    fn rad_line_soup_never_panics(
        lines in vec(rad_line(), 0..24),
        crlf in any::<bool>(),
    ) {
        let text = lines.join(if crlf { "\r\n" } else { "\n" });
        let _ = check_rad(text.as_bytes());
    }

    #[test]
    fn rad_mutated_files_never_panic(start in rad_start(), edits in edits()) {
        let _ = check_rad(&mutated(&start, &edits));
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn rad_generated_keyed_files_read_as_written(file in keyed_file()) {
        reads_as_written(&file)?;
    }

    #[test]
    fn rad_generated_legacy_files_read_as_written(file in legacy_file()) {
        reads_as_written(&file)?;
    }
}

/// A generated file parses to exactly the job it was generated from, the
/// model's position included.
fn reads_as_written(file: &KeyedFile) -> Result<(), TestCaseError> {
    let parsed = match check_rad(file.text.as_bytes()) {
        Ok(parsed) => parsed,
        Err(e) => panic!("{e} in:\n{}", file.text),
    };
    prop_assert_eq!(&parsed.spec, &file.spec, "{}", file.text);
    let at = parsed.model_at.map(|p| (p.line, p.column));
    prop_assert_eq!(at, file.model_at);
    Ok(())
}

/// Model summaries the checked files may name: some exist, one leads
/// outside the job's directory through a link.
fn job_dir_with_models() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("job");
    fs::create_dir_all(dir.join("sub")).unwrap();
    for name in [
        "BERT_base.model",
        "resnet50_32.model",
        "mnist_cnn_64.model",
        "sub/BERT_base.model",
    ] {
        fs::write(dir.join(name), "summary").unwrap();
    }
    fs::write(root.path().join("secret"), "secret").unwrap();
    std::os::unix::fs::symlink(root.path().join("secret"), dir.join("outside.model")).unwrap();
    fs::create_dir(dir.join("dir.model")).unwrap();
    root
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn rad_check_file_never_panics_and_names_the_file(
        start in rad_start(),
        edits in vec(edit(), 0..4),
    ) {
        let root = job_dir_with_models();
        let path = root.path().join("job/run.rad");
        let bytes = mutated(&start, &edits);
        fs::write(&path, &bytes).unwrap();
        if let Err(error) = rad::check_file(&path) {
            let text = error.to_string();
            prop_assert!(text.starts_with(&format!("{}:", path.display())), "{}", text);
            match &error {
                FileError::Invalid { error, .. } => assert_rad_error(&bytes, error),
                FileError::Refused { reason, .. } => prop_assert!(!reason.trim().is_empty()),
                FileError::Read { .. } => {}
            }
        }
    }
}

// Model summaries.

const TORCHSUMMARY: &str = "\
----------------------------------------------------------------
        Layer (type)               Output Shape         Param #
================================================================
            Conv2d-1           [-1, 32, 26, 26]             320
       BatchNorm2d-2           [-1, 32, 26, 26]              64
              ReLU-3           [-1, 32, 26, 26]               0
        Bottleneck-4           [-1, 32, 26, 26]               0
         MaxPool2d-5           [-1, 32, 13, 13]               0
           Dropout-6           [-1, 32, 13, 13]               0
            Linear-7                  [-1, 128]         692,352
        MultiOut-8       [[-1, 10], [-1, 10]]           2,580
================================================================
Total params: 695,316
Trainable params: 695,316
Non-trainable params: 0
----------------------------------------------------------------
Input size (MB): 0.00
Params size (MB): 2.65
----------------------------------------------------------------
";

const TORCHINFO: &str = "\
==========================================================================================
Layer (type:depth-idx)                   Input Shape     Output Shape    Param #
==========================================================================================
Net                                      [64, 13]        [64, 1]         --
├─Sequential: 1-1                        [64, 13]        [64, 64]        --
│    └─Linear: 2-1                       [64, 13]        [64, 512]       7,168
│    └─ReLU: 2-2                         [64, 512]       [64, 512]       --
│    └─Linear: 2-3                       [64, 512]       [64, 64]        32,832
├─ModuleList: 1-2                        --              --              --
│    └─EmbeddingBag: 2-4                 [555]           [64, 64]        256
|    +-Sequential: 2-5                   [64, 64]        [64, 64]        (recursive)
├─Sigmoid: 1-3                           [64, 1]         [64, 1]         --
==========================================================================================
Total params: 40,256
Trainable params: 40,256
Non-trainable params: 0
==========================================================================================
";

const MODULE_PRINT: &str = "\
TinyBert(
  (embeddings): Embeddings(
    (word_embeddings): Embedding(30522, 128, padding_idx=0), 3,906,816 params
    (position_embeddings): Embedding(512, 128), 65,536 params
    (LayerNorm): LayerNorm((128,), eps=1e-12, elementwise_affine=True), 256 params
  ), 3,972,608 params
  (encoder): Encoder(
    (layer): ModuleList(
      (0-1): 2 x Layer(
        (attention): SelfAttention(
          (query): Linear(in_features=128, out_features=128, bias=True), 16,512 params
          (key): Linear(in_features=128, out_features=128, bias=True), 16,512 params
        ), 33,024 params
        (intermediate): Linear(in_features=128, out_features=512, bias=True), 66,048 params
        (act): GELUActivation(), 0 params
        (dropout): Dropout(p=0.1, inplace=False), 0 params
      ), 99,072 params
    ), 198,144 params
  ), 198,144 params
), 4,170,752 params
==================
Total params: 4,170,752
Trainable params: 4,170,752
";

static SUMMARY_SEEDS: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    let mut seeds: Vec<Vec<u8>> = [TORCHSUMMARY, TORCHINFO, MODULE_PRINT]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    seeds.extend(data_files(".model"));
    seeds
});

/// Parses `text` as a summary: no panic, and a refusal that says why and
/// points at a line and column of `text`.
fn check_summary(text: &str) -> Result<Summary, SummaryError> {
    let result = Summary::parse(text);
    match &result {
        Err(error) => assert_summary_error(text, error),
        Ok(summary) => assert_eq!(summary.digest.len(), 64, "{summary:?}"),
    }
    result
}

#[track_caller]
fn assert_summary_error(text: &str, error: &SummaryError) {
    assert!(!error.message.trim().is_empty(), "no reason: {error:?}");
    assert!(error.line >= 1 && error.column >= 1, "{error:?}");
    let lines: Vec<&str> = text.lines().collect();
    let width = match lines.get(error.line - 1) {
        Some(line) => line.chars().count(),
        None if lines.is_empty() && error.line == 1 => 0,
        None => panic!(
            "line {} of a {}-line text: {error}",
            error.line,
            lines.len()
        ),
    };
    assert!(
        error.column <= width + 1,
        "column {} of a {width}-character line: {error}",
        error.column
    );
}

/// A count as a summary may print it, at and past every limit.
fn summary_count() -> impl Strategy<Value = u64> + Clone {
    prop_oneof![
        3 => 0..100_000u64,
        1 => Just(u64::MAX),
        1 => Just(u64::MAX / 2 + 1),
        1 => Just(i64::MAX as u64),
        1 => Just(u64::from(u32::MAX) + 1),
        1 => any::<u64>(),
    ]
}

/// A shape `[-1, 64, 12]` or a list of shapes, with dimensions whose
/// product overflows.
fn summary_shape() -> impl Strategy<Value = String> {
    let dim = prop_oneof![
        3 => (0..5_000i64).prop_map(|d| d.to_string()),
        1 => Just("-1".to_owned()),
        1 => summary_count().prop_map(|c| c.to_string()),
        1 => summary_count().prop_map(commas),
    ];
    let one = vec(dim, 1..5).prop_map(|dims| format!("[{}]", dims.join(", ")));
    prop_oneof![
        4 => one.clone(),
        1 => vec(one, 1..3).prop_map(|shapes| format!("[{}]", shapes.join(", "))),
    ]
}

fn layer_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => select(&[
            "Conv2d", "Linear", "ReLU", "BatchNorm2d", "Dropout", "Identity", "Softmax",
            "Bottleneck", "Sequential", "ModuleList", "EmbeddingBag", "LayerNorm",
            "GELUActivation", "MultiheadAttention", "SdpaAttention", "Flatten", "Sigmoid",
        ])
        .prop_map(str::to_owned),
        1 => "[A-Za-z_][A-Za-z0-9_.]{0,70}",
        1 => "[\\p{L}_]{1,10}",
    ]
}

/// A torchsummary table with rows that stress the arithmetic.
fn torchsummary_text() -> impl Strategy<Value = String> {
    let row = (
        layer_name(),
        summary_shape(),
        summary_count(),
        any::<bool>(),
    )
        .prop_map(|(name, shape, params, comma)| {
            let params = if comma {
                commas(params)
            } else {
                params.to_string()
            };
            (name, shape, params)
        });
    (vec(row, 0..12), summary_count(), summary_count()).prop_map(|(rows, total, trainable)| {
        let mut text = String::from(
            "--------\n        Layer (type)               Output Shape         Param #\n\
             ================================================================\n",
        );
        for (i, (name, shape, params)) in rows.iter().enumerate() {
            text.push_str(&format!(
                "{name:>18}-{}  {shape:>25}  {params:>15}\n",
                i + 1
            ));
        }
        text.push_str(&format!(
            "================================================================\n\
             Total params: {}\nTrainable params: {}\n",
            commas(total),
            commas(trainable)
        ));
        text
    })
}

/// A torchinfo tree: depths may jump, cells may be missing or extra.
fn torchinfo_text() -> impl Strategy<Value = String> {
    let cell = prop_oneof![
        3 => summary_shape(),
        1 => Just("--".to_owned()),
        1 => Just("(recursive)".to_owned()),
        2 => summary_count().prop_map(commas),
    ];
    let row = (layer_name(), 0..6u64, any::<u16>(), vec(cell, 2..5));
    (any::<bool>(), vec(row, 0..12), summary_count()).prop_map(|(input_column, rows, total)| {
        let mut text = String::from(if input_column {
            "Layer (type:depth-idx)                   Input Shape     Output Shape    Param #\n"
        } else {
            "Layer (type:depth-idx)                   Output Shape    Param #\n"
        });
        text.push_str("==========================================================\n");
        for (name, depth, idx, cells) in rows {
            let tree = match depth {
                0 => String::new(),
                d => format!("{}└─", "│    ".repeat(d as usize - 1)),
            };
            let label = if depth == 0 {
                name
            } else {
                format!("{name}: {depth}-{idx}")
            };
            text.push_str(&format!("{tree}{label:<40} {}\n", cells.join("    ")));
        }
        text.push_str(&format!(
            "==========================================================\nTotal params: {}\n",
            commas(total)
        ));
        text
    })
}

/// One line of a module print before indentation.
#[derive(Debug, Clone)]
enum PrintLine {
    Open(String, Option<u64>),
    Leaf(String, String, Option<u64>, Option<u64>),
    Close(Option<u64>),
}

/// A module print: opens and closes may not balance, repeats and
/// parameter counts reach the integer limits.
fn module_print_text() -> impl Strategy<Value = String> {
    let times = proptest::option::of(summary_count());
    let params = proptest::option::of(summary_count());
    let args = prop_oneof![
        (summary_count(), summary_count())
            .prop_map(|(i, o)| format!("in_features={i}, out_features={o}, bias=True")),
        (summary_count(), 1..1024u64).prop_map(|(rows, width)| format!("{rows}, {width}")),
        Just("p=0.1, inplace=False".to_owned()),
        Just("(768,), eps=1e-12".to_owned()),
        "[ -~]{0,20}",
    ];
    let line = prop_oneof![
        2 => (layer_name(), times.clone()).prop_map(|(n, t)| PrintLine::Open(n, t)),
        4 => (layer_name(), args, times, params.clone())
            .prop_map(|(n, a, t, p)| PrintLine::Leaf(n, a, t, p)),
        2 => params.clone().prop_map(PrintLine::Close),
    ];
    (
        layer_name(),
        vec(line, 0..16),
        any::<bool>(),
        params,
        summary_count(),
    )
        .prop_map(|(root, lines, balance, root_params, total)| {
            let mut text = format!("{root}(\n");
            let mut depth = 1usize;
            let note =
                |p: Option<u64>| p.map_or(String::new(), |p| format!(", {} params", commas(p)));
            let repeat = |t: Option<u64>| t.map_or(String::new(), |t| format!("{t} x "));
            for (k, line) in lines.into_iter().enumerate() {
                let pad = "  ".repeat(depth);
                match line {
                    PrintLine::Open(name, times) => {
                        text.push_str(&format!("{pad}({k}): {}{name}(\n", repeat(times)));
                        depth += 1;
                    }
                    PrintLine::Leaf(name, args, times, params) => text.push_str(&format!(
                        "{pad}({}_{k}): {}{name}({args}){}\n",
                        if k % 3 == 0 {
                            "position_embeddings"
                        } else {
                            "layer"
                        },
                        repeat(times),
                        note(params)
                    )),
                    PrintLine::Close(params) if depth > 1 => {
                        depth -= 1;
                        text.push_str(&format!("{}){}\n", "  ".repeat(depth), note(params)));
                    }
                    PrintLine::Close(_) => {}
                }
            }
            if balance {
                while depth > 1 {
                    depth -= 1;
                    text.push_str(&format!("{})\n", "  ".repeat(depth)));
                }
                text.push_str(&format!(
                    "){}\n=====\nTotal params: {}\n",
                    note(root_params),
                    commas(total)
                ));
            }
            text
        })
}

/// A summary to mutate: a seed or a generated text of any format.
fn summary_start() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => one_of(&SUMMARY_SEEDS),
        1 => torchsummary_text().prop_map(String::into_bytes),
        1 => torchinfo_text().prop_map(String::into_bytes),
        1 => module_print_text().prop_map(String::into_bytes),
    ]
}

#[test]
fn summary_inline_seeds_are_valid_summaries() {
    for seed in [TORCHSUMMARY, TORCHINFO, MODULE_PRINT] {
        if let Err(e) = Summary::parse(seed) {
            panic!("{e} in:\n{seed}");
        }
    }
}

proptest! {
    #![proptest_config(config(1500))]

    #[test]
    fn summary_arbitrary_text_never_panics(text in any::<String>()) {
        let _ = check_summary(&text);
    }

    #[test]
    fn summary_torchsummary_tables_never_panic(text in torchsummary_text()) {
        let _ = check_summary(&text);
    }

    #[test]
    fn summary_torchinfo_trees_never_panic(text in torchinfo_text()) {
        let _ = check_summary(&text);
    }

    #[test]
    fn summary_module_prints_never_panic(text in module_print_text()) {
        let _ = check_summary(&text);
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn summary_mutated_texts_never_panic(start in summary_start(), edits in edits()) {
        let bytes = mutated(&start, &edits);
        let _ = check_summary(&String::from_utf8_lossy(&bytes));
    }
}

/// Parsed features go straight into the estimators, at the job's batch
/// size (any `u32` a `.rad` may state).
fn batch_size() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1..=1024u64,
        1 => Just(u64::from(u32::MAX)),
        1 => 1..=u64::from(u32::MAX),
    ]
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn summary_features_always_get_an_estimate(
        start in summary_start(),
        edits in vec(edit(), 0..3),
        batch in batch_size(),
    ) {
        let bytes = mutated(&start, &edits);
        if let Ok(summary) = Summary::parse(&String::from_utf8_lossy(&bytes)) {
            let analytic = Analytic {
                context_mib: 1400,
                default_seq_len: 512,
                optimizer: Optimizer::Adam,
                layered: Layered::Training,
            };
            if let Ok(answer) = analytic.estimate(&summary.features, batch, "--seq_len 99999999999") {
                prop_assert!(answer.mib >= analytic.context_mib, "{:?}", answer);
            }
            let _ = feature_vector(&summary.features, batch);
        }
    }
}

// The configuration file.

/// Every key of the default configuration, by section.
const CONFIG_KEYS: &[(&str, &str)] = &[
    ("placement", "policy"),
    ("placement", "idle_first"),
    ("placement", "gate"),
    ("placement", "smact_cap"),
    ("placement", "occupancy_cap"),
    ("placement", "dram_cap"),
    ("placement", "smact_window_s"),
    ("placement", "margin_mib"),
    ("placement", "unknown_margin_mib"),
    ("placement", "reservation_ramp_s"),
    ("placement", "settle_s"),
    ("placement", "idle_used_mib"),
    ("legacy", "honour_policy_line"),
    ("legacy", "memory_line"),
    ("recovery", "mode"),
    ("recovery", "looser_step_mib"),
    ("recovery", "max_retries"),
    ("simulate", "sharing"),
    ("simulate", "mps_interference"),
    ("simulate", "streams_interference"),
    ("simulate", "warmup_s"),
    ("simulate", "warmup_start"),
    ("simulate", "smact_swing"),
    ("simulate", "smact_swing_period_s"),
    ("simulate", "fragmentation_mib"),
    ("simulate", "idle_power_w"),
    ("simulate", "max_power_w"),
    ("simulate", "power_exponent"),
    ("gpu", "nvml_library"),
    ("gpu", "metrics"),
    ("gpu", "dcgmi"),
    ("daemon", "spool"),
    ("daemon", "sample_interval_s"),
    ("daemon", "metrics_interval_s"),
    ("daemon", "gpu_log_max_mib"),
    ("daemon", "gpu_log_keep"),
    ("daemon", "cancel_grace_s"),
    ("daemon", "allow_root_jobs"),
    ("oom", "signatures"),
    ("oom", "stderr_tail_bytes"),
    ("estimate", "order"),
    ("estimate", "model"),
    ("estimate", "quantile"),
    ("estimate", "fine_margin"),
    ("estimate", "out_of_range_tolerance"),
    ("estimate", "models_dir"),
    ("estimate", "history_dir"),
    ("estimate", "history_margin"),
    ("estimate", "history_min_margin_mib"),
    ("estimate", "context_mib"),
    ("estimate", "transformer_seq_len"),
    ("estimate", "optimizer"),
    ("estimate", "analytic_formula"),
    ("slurm", "shard_mib"),
    ("slurm", "shards_per_gpu"),
    ("slurm", "sbatch"),
    ("slurm", "carma"),
    ("mps", "enabled"),
    ("mps", "control"),
    ("mps", "pipe_dir"),
    ("mps", "log_dir"),
    ("mps", "exclusive_process"),
    ("mps", "smi"),
    ("mps", "limit_memory"),
    ("mps", "active_thread_percentage"),
    ("placement", "smact_capp"),
    ("nowhere", "key"),
];

/// A TOML value of any type, at the edges of every range.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        select(&[
            "0",
            "-1",
            "1",
            "0.5",
            "1.5",
            "-0.0",
            "nan",
            "inf",
            "-inf",
            "1e308",
            "1e-308",
            "9223372036854775807",
            "-9223372036854775808",
            "4294967296",
            "true",
            "false",
            "\"\"",
            "\"magm\"",
            "\"best-fit\"",
            "\"looser\"",
            "\"streams\"",
            "\"/\"",
            "\"\\u0000\"",
            "[]",
            "[\"oracle\"]",
            "[\"declared\", \"declared\"]",
            "[\"whole-gpu\"]",
            "[1, \"a\"]",
            "{}",
            "{ a = 1 }",
            "1979-05-27T07:32:00Z",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|x| format!("{x:?}")),
        "\"[ -~&&[^\"\\\\]]{0,10}\"",
    ]
}

fn config_override() -> impl Strategy<Value = String> {
    vec((select(CONFIG_KEYS), toml_value()), 0..6).prop_map(|entries| {
        entries
            .into_iter()
            .map(|((section, key), value)| format!("[{section}]\n{key} = {value}\n"))
            .collect()
    })
}

/// A refusal of the config named `origin` names it and says why.
#[track_caller]
fn assert_config_error(origin: &Path, error: &ConfigError) {
    let text = error.to_string();
    assert!(
        text.contains(&origin.display().to_string()),
        "does not name {}: {text}",
        origin.display()
    );
    if let ConfigError::Invalid { message, .. } = error {
        assert!(!message.trim().is_empty(), "no reason: {text}");
    }
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn config_arbitrary_text_never_panics(text in any::<String>()) {
        if let Err(e) = Config::from_override("carma.toml", &text) {
            assert_config_error(Path::new("carma.toml"), &e);
        }
    }

    #[test]
    fn config_overrides_of_every_key_never_panic(text in config_override()) {
        if let Err(e) = Config::from_override("carma.toml", &text) {
            assert_config_error(Path::new("carma.toml"), &e);
        }
    }

    #[test]
    fn config_mutated_overrides_never_panic(text in config_override(), edits in edits()) {
        let bytes = mutated(text.as_bytes(), &edits);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("carma.toml");
        fs::write(&path, &bytes).unwrap();
        if let Err(e) = Config::load(Some(&path)) {
            assert_config_error(&path, &e);
        }
    }
}

// The estimator's job history.

fn fingerprint() -> Fingerprint {
    Fingerprint {
        command: "python train.py --batch_size 32".into(),
        summary_digest: Some("ab".repeat(32)),
        batch_size: Some(32),
        user: Some(1000),
    }
}

/// A history file to mutate: a real record of this job, or of another.
fn history_start() -> impl Strategy<Value = Vec<u8>> {
    (any::<bool>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(same, max, last, runs)| {
        let mut fingerprint = fingerprint();
        if !same {
            fingerprint.batch_size = None;
        }
        let record = Record {
            fingerprint,
            max_peak_mib: max,
            last_peak_mib: last,
            runs,
            max_run_s: same.then_some(f64::from(max as u32)),
        };
        serde_json::to_vec_pretty(&record).unwrap()
    })
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn history_lookup_of_any_file_never_panics_and_names_it(
        bytes in prop_oneof![
            1 => vec(any::<u8>(), 0..256),
            3 => (history_start(), vec(edit(), 0..4)).prop_map(|(s, e)| mutated(&s, &e)),
        ],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let fingerprint = fingerprint();
        let path = dir.path().join(format!("{}.json", fingerprint.key()));
        fs::write(&path, &bytes).unwrap();
        match History::open(dir.path()).lookup(&fingerprint) {
            Ok(Some(record)) => prop_assert_eq!(record.fingerprint, fingerprint),
            Ok(None) => {}
            Err(e) => {
                let text = e.to_string();
                prop_assert!(text.contains(&path.display().to_string()), "{}", text);
            }
        }
    }
}
