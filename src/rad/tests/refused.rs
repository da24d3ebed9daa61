//! Job files refused, each with the line, the column and what was expected.

use super::*;

// Refusals: keyed syntax.

#[test]
fn unknown_key_suggests_the_closest() {
    refused(
        "gpus: 1\nbatchsize: 32\npython a.py\n",
        2,
        1,
        &["unknown key `batchsize`", "did you mean `batch_size`?"],
    );
    refused(
        "flavour: vanilla\npython a.py\n",
        1,
        1,
        &["unknown key `flavour`", "expected one of name, model"],
    );
}

#[test]
fn bad_unit_points_at_the_unit() {
    refused("memory: 12Q\npython a.py\n", 1, 11, &["unknown unit `Q`"]);
}

#[test]
fn memory_needs_a_size_or_whole() {
    refused(
        "memory: lots\nrun\n",
        1,
        9,
        &["positive size", "`whole`", "\"lots\""],
    );
    refused("memory: 0\nrun\n", 1, 9, &["positive size", "\"0\""]);
    refused("memory: -4G\nrun\n", 1, 9, &["positive size", "\"-4G\""]);
}

#[test]
fn directives_without_commands_are_refused() {
    refused(
        "gpus: 1\nmodel: x.model\n",
        3,
        1,
        &["expected at least one command line", "end of file"],
    );
}

#[test]
fn empty_whitespace_and_comment_only_files_have_no_command() {
    let words = &["expected at least one command line"][..];
    refused("", 1, 1, words);
    refused("  \n\t\n", 3, 1, words);
    refused("# a\n# b", 2, 4, words);
}

#[test]
fn gpus_must_be_a_positive_integer() {
    let words = ["expected the number of GPUs (a positive integer)"];
    refused("gpus: 0\nrun\n", 1, 7, &[words[0], "found \"0\""]);
    refused("gpus: -2\nrun\n", 1, 7, &[words[0], "found \"-2\""]);
    refused("gpus: two\nrun\n", 1, 7, &[words[0], "found \"two\""]);
    refused("gpus: 1.5\nrun\n", 1, 7, &[words[0]]);
}

#[test]
fn numbers_too_large_for_u32_are_named() {
    refused(
        "gpus: 99999999999\nrun\n",
        1,
        7,
        &["number of GPUs", "too large", "4294967295"],
    );
    refused(
        "batch_size: 4294967296\nrun\n",
        1,
        13,
        &["batch size", "too large"],
    );
}

#[test]
fn retries_may_be_zero_but_not_negative() {
    refused("retries: -1\nrun\n", 1, 10, &["re-runs", "non-negative"]);
}

#[test]
fn time_limits_take_units_or_a_clock() {
    let secs = |text: &str| spec(text).time.map(|t| t.as_secs());
    assert_eq!(secs("time: 2h\nrun\n"), Some(7200));
    assert_eq!(secs("time: 90m # an epoch or two\nrun\n"), Some(5400));
    assert_eq!(secs("time: 1:30:00\nrun\n"), Some(5400));
    assert_eq!(secs("gpus: 1\nrun\n"), None);
    refused("time: 90\nrun\n", 1, 9, &["90m, not 90"]);
    refused("time: 2hours\nrun\n", 1, 9, &["`o` is not a unit"]);
    refused("time: 1:61:00\nrun\n", 1, 9, &["00 to 59"]);
    refused("time: 0s\nrun\n", 1, 7, &["zero"]);
    refused("time:\nrun\n", 1, 6, &["2h, 90m"]);
    refused("tme: 2h\nrun\n", 1, 1, &["did you mean `time`?"]);
}

#[test]
fn priorities_are_signed_integers_within_a_million() {
    assert_eq!(spec("priority: -5\nrun\n").priority, Some(-5));
    assert_eq!(spec("priority: +7\nrun\n").priority, Some(7));
    let words = ["a priority (an integer from -1000000 to 1000000)"];
    refused("priority: high\nrun\n", 1, 11, &words);
    refused("priority: 1000001\nrun\n", 1, 11, &words);
    refused("priority: 1.5\nrun\n", 1, 11, &words);
    refused("priority: --1\nrun\n", 1, 11, &words);
}

#[test]
fn dependencies_name_tasks_by_number_task_name_or_job_name() {
    use crate::rad::{DependencyRef, TaskRef};
    use crate::sched::DependencyKind::{AfterNotOk, AfterOk};
    let spec = spec("afterok: 12, 000015-prep,prep\nafternotok: 3\nrun\n");
    let dep = |kind, task| DependencyRef { kind, task };
    assert_eq!(
        spec.after,
        [
            dep(AfterOk, TaskRef::Id(12)),
            dep(AfterOk, TaskRef::Id(15)),
            dep(AfterOk, TaskRef::Name("prep".into())),
            dep(AfterNotOk, TaskRef::Id(3)),
        ]
    );
    let words = ["expected tasks to wait for"];
    refused("afterok: 12,,13\nrun\n", 1, 13, &words);
    refused("afterany:\nrun\n", 1, 10, &words);
    refused("after: a b\nrun\n", 1, 8, &words);
    refused("after: ../x\nrun\n", 1, 8, &words);
    refused(
        "afterok: 99999999999999999999\nrun\n",
        1,
        10,
        &["too large"],
    );
    refused("aftrok: 1\nrun\n", 1, 1, &["did you mean `afterok`?"]);
}

#[test]
fn arrays_are_index_ranges_with_an_optional_limit() {
    use crate::rad::ArraySpec;
    let array = |text: &str| spec(&format!("array: {text}\nrun\n")).array;
    let a = |first, last, at_once| {
        Some(ArraySpec {
            first,
            last,
            at_once,
        })
    };
    assert_eq!(array("1-10"), a(1, 10, None));
    assert_eq!(array("0-99%4"), a(0, 99, Some(4)));
    assert_eq!(array("5"), a(5, 5, None));
    let words = ["an index range such as 1-10"];
    refused("array: 10-1\nrun\n", 1, 8, &words);
    refused("array: 1-1001\nrun\n", 1, 8, &words);
    refused("array: 1-x\nrun\n", 1, 8, &words);
    refused("array: 1-10%0\nrun\n", 1, 13, &words);
    refused("array: 1-10%\nrun\n", 1, 13, &words);
}

#[test]
fn duplicate_keys_name_the_first() {
    refused(
        "gpus: 1\npython a.py\ngpus: 2\n",
        3,
        1,
        &["duplicate key `gpus`", "line 1"],
    );
}

#[test]
fn bad_policy_suggests_the_closest() {
    refused(
        "policy: colocate\nrun\n",
        1,
        9,
        &[
            "expected `exclusive` or `collocate`",
            "did you mean `collocate`?",
        ],
    );
}

#[test]
fn empty_values_say_what_was_expected() {
    refused("gpus:\nrun\n", 1, 6, &["number of GPUs", "found nothing"]);
    refused(
        "policy:   # later\nrun\n",
        1,
        11,
        &["`exclusive`", "found nothing"],
    );
    refused("model:\nrun\n", 1, 7, &["model summary", "found nothing"]);
}

#[test]
fn names_cannot_hold_slashes() {
    refused("name: a/b\nrun\n", 1, 8, &["job name (without `/`)"]);
}

#[test]
fn model_paths_stay_in_the_job_directory() {
    refused(
        "model: /etc/shadow\nrun\n",
        1,
        8,
        &["relative to the .rad's directory", "own directory"],
    );
    refused(
        "model: models/../../x.model\nrun\n",
        1,
        15,
        &["`..` leaves"],
    );
    refused("model: C:\\x.model\nrun\n", 1, 8, &["own directory"]);
    refused("model: ~/x.model\nrun\n", 1, 8, &["own directory"]);
}

#[test]
fn model_paths_are_short_and_shallow() {
    // Each look for a summary walks its path: a root daemon's walk is
    // kept short whatever a job names.
    let long = format!("model: {}.txt\nrun\n", "m".repeat(1100));
    refused(
        &long,
        1,
        8,
        &["directory, at most 1024 bytes and 32 names deep, found"],
    );
    let deep = format!("model: {}m.txt\nrun\n", "./".repeat(40));
    refused(
        &deep,
        1,
        8,
        &["directory, at most 1024 bytes and 32 names deep, found"],
    );
}

// Refusals: legacy syntax.

#[test]
fn legacy_gpu_count_must_be_numeric() {
    refused(
        &legacy_with(8, "two"),
        8,
        1,
        &[
            "expected the number of GPUs (a positive integer), found \"two\"",
            LEGACY_NOTE,
        ],
    );
}

#[test]
fn legacy_batch_size_zero_and_fractions_are_refused() {
    refused(
        &legacy_with(6, "0"),
        6,
        1,
        &["batch size", "\"0\"", LEGACY_NOTE],
    );
    refused(&legacy_with(6, " 32.5"), 6, 2, &["batch size", "\"32.5\""]);
}

#[test]
fn legacy_negative_and_unit_memory_is_ignored_with_a_warning() {
    let spec = warned(
        &legacy_with(10, "-5"),
        10,
        1,
        &[
            "Horus estimate in MiB (a positive number; 40000 means",
            "\"-5\"",
            "the line is ignored",
        ],
    );
    assert_eq!(spec.published.horus, None);
    assert_eq!(spec.memory, Some(Need::Mib(19828)));
    let spec = warned(&legacy_with(9, "16G"), 9, 1, &["measured peak", "\"16G\""]);
    assert_eq!(spec.memory, None);
    let spec = warned(&legacy_with(12, "0"), 12, 1, &["GPUMemNet", "\"0\""]);
    assert_eq!(spec.published.gpumemnet, None);
}

#[test]
fn legacy_with_too_few_lines_says_which_is_missing() {
    let five: Vec<&str> = LEGACY.lines().take(5).collect();
    refused(
        &(five.join("\n") + "\n"),
        6,
        1,
        &[
            "expected the batch size (a positive integer) on line 6, found end of file",
            LEGACY_NOTE,
        ],
    );
    refused(
        "# just a comment\nconda activate tf",
        2,
        18,
        &["the command to run on line 3"],
    );
}

#[test]
fn legacy_with_thirteen_lines_is_refused() {
    refused(
        &format!("{LEGACY}\n1234\n"),
        13,
        1,
        &["at most 12 lines", "\"1234\"", LEGACY_NOTE],
    );
}

#[test]
fn legacy_misspelt_policy_is_ignored_with_a_suggestion() {
    // The prototype never read line 7: a typo there must not cost the job.
    let spec = warned(
        &legacy_with(7, "exclusiv"),
        7,
        1,
        &["did you mean `exclusive`?", "the line is ignored"],
    );
    assert_eq!(spec.policy, None);
    warned(
        &legacy_with(7, "colocation"),
        7,
        1,
        &["did you mean `collocation`?"],
    );
}

#[test]
fn legacy_line_one_must_be_a_comment() {
    refused(
        &legacy_with(1, "assumption: none"),
        1,
        1,
        &["unknown key `assumption`"],
    );
    refused(
        &legacy_with(1, "the model"),
        1,
        1,
        &["a comment starting with `#`", LEGACY_NOTE],
    );
}

#[test]
fn legacy_blank_required_lines_are_refused() {
    refused(
        &legacy_with(3, "   "),
        3,
        4,
        &["the command to run", "found nothing"],
    );
}

#[test]
fn legacy_model_path_stays_in_the_job_directory() {
    refused(
        &legacy_with(4, "../../etc/passwd"),
        4,
        1,
        &["`..` leaves", LEGACY_NOTE],
    );
}

// Refusals: not text.

#[test]
fn binary_junk_is_binary_data() {
    refused_bytes(b"\x7fELF\x02\x01\x01\x00\x00", 1, 1, &["binary data"]);
    refused_bytes(
        b"gpus: 1\npython a.py\x07\n",
        2,
        12,
        &["binary data", "0x07"],
    );
}

#[test]
fn nul_bytes_are_binary_data() {
    refused_bytes(b"gpus: 1\npython\x00 a.py\n", 2, 7, &["binary data", "NUL"]);
}

#[test]
fn non_utf8_is_located() {
    refused_bytes(
        b"gpus: 1\npython caf\xe9.py\n",
        2,
        11,
        &["not UTF-8", "0xE9"],
    );
    // Columns count characters, not bytes.
    refused_bytes(
        "# café\npython é"
            .as_bytes()
            .iter()
            .chain(b"\xff")
            .copied()
            .collect::<Vec<_>>()
            .as_slice(),
        2,
        9,
        &["not UTF-8", "0xFF"],
    );
}

#[test]
fn stray_carriage_returns_are_refused() {
    refused("gpus: 1\rpython a.py\n", 1, 8, &["carriage return"]);
}

#[test]
fn a_ten_megabyte_line_is_refused_quickly() {
    let mut text = String::from("gpus: 1\n");
    text.push_str(&"é".repeat(5 * 1024 * 1024));
    let started = std::time::Instant::now();
    refused(
        &text,
        2,
        MAX_LINE_BYTES / 2 + 1,
        &["line too long", "at most 65536 bytes"],
    );
    assert!(started.elapsed().as_secs() < 5, "{:?}", started.elapsed());
}

#[test]
fn too_many_lines_are_refused() {
    refused(
        &"\n".repeat(MAX_LINES),
        MAX_LINES + 1,
        1,
        &["too many lines"],
    );
}
