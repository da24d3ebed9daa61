//! `carma check` as a user meets it: write job files, check them, read what
//! the command says and how it exits. Each test works in its own temporary
//! directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

fn carma_check(args: &[&Path], json: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_carma"));
    command.arg("check").args(args);
    if json {
        command.arg("--json");
    }
    command.output().expect("carma runs")
}

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(&path, text).unwrap();
    path
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

const GOOD: &str = "model: resnet.model\nbatch_size: 32\nconda activate tf\npython r.py\n";

#[test]
fn valid_files_print_one_json_object_per_line_and_exit_zero() {
    let dir = TempDir::new().unwrap();
    write(&dir, "resnet.model", "(a model summary)\n");
    let keyed = write(&dir, "resnet.rad", GOOD);
    let legacy = write(
        &dir,
        "old.rad",
        "# legacy\nconda activate tf\npython r.py\nresnet.model\nimagenet\n16\ncollocation\n2\n",
    );
    let output = carma_check(&[&keyed, &legacy], true);
    assert!(output.status.success(), "{}", stderr(&output));
    let lines: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["file"], keyed.display().to_string());
    assert_eq!(lines[0]["syntax"], "keyed");
    assert_eq!(lines[0]["name"], "resnet");
    assert_eq!(lines[0]["batch_size"], 32);
    assert_eq!(lines[0]["script"][1], "python r.py");
    assert_eq!(lines[1]["syntax"], "legacy");
    assert_eq!(lines[1]["name"], "old");
    assert_eq!(lines[1]["gpus"], 2);
    assert_eq!(lines[1]["policy"], "collocate");
}

#[test]
fn readable_output_lists_the_fields() {
    let dir = TempDir::new().unwrap();
    write(&dir, "resnet.model", "(a model summary)\n");
    let keyed = write(&dir, "resnet.rad", GOOD);
    let output = carma_check(&[&keyed], false);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!("{}: ok\n", keyed.display())),
        "{text}"
    );
    assert!(text.contains("  batch_size  32\n"), "{text}");
}

#[test]
fn one_bad_file_among_good_ones_is_reported_and_the_rest_still_checked() {
    let dir = TempDir::new().unwrap();
    write(&dir, "resnet.model", "(a model summary)\n");
    let first = write(&dir, "first.rad", GOOD);
    let bad = write(&dir, "bad.rad", "gpus: 1\nbatchsize: 32\npython r.py\n");
    let last = write(&dir, "last.rad", GOOD);
    let output = carma_check(&[&first, &bad, &last], true);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        stdout(&output).lines().count(),
        2,
        "both good files printed"
    );
    let errors = stderr(&output);
    let expected = format!(
        "{}:2:1: unknown key `batchsize`: did you mean `batch_size`?",
        bad.display()
    );
    assert!(errors.contains(&expected), "{errors}");
}

const BERT_LEGACY: &str =
    "# legacy\nconda activate tf\npython b.py\n  bert_base.model\nwiki\n32\nexclusive\n1\n";

/// A legacy job naming `bert_base.model`, beside `summaries`, checked:
/// accepted whatever the summaries are. Returns its path and the output.
fn check_bert_beside(summaries: &[&str], json: bool) -> (TempDir, PathBuf, Output) {
    let dir = TempDir::new().unwrap();
    for name in summaries {
        write(&dir, name, "(a model summary)\n");
    }
    let rad = write(&dir, "bert.rad", BERT_LEGACY);
    let output = carma_check(&[&rad], json);
    assert!(output.status.success(), "{}", stderr(&output));
    (dir, rad, output)
}

#[test]
fn a_summary_name_with_the_wrong_case_is_used_with_a_warning() {
    let (_dir, rad, output) = check_bert_beside(&["BERT_base.model"], false);
    let errors = stderr(&output);
    assert!(
        errors.contains(&format!(
            "{}:4:3: warning: model summary `bert_base.model` not found; \
             using `BERT_base.model`, which differs only in case",
            rad.display()
        )),
        "{errors}"
    );
    assert!(
        stdout(&output).contains("  model       BERT_base.model\n"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn two_summaries_matching_but_for_case_are_not_guessed_between() {
    let (_dir, _, output) = check_bert_beside(&["BERT_base.model", "Bert_Base.model"], true);
    let checked: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(checked["model"], serde_json::Value::Null);
    let warning = checked["warnings"][0].as_str().unwrap();
    assert!(warning.contains("not found"), "{warning}");
    assert!(warning.contains("estimating without it"), "{warning}");
}

#[test]
fn a_directory_of_very_many_names_is_not_searched_for_another_case() {
    // The daemon searched `pending/` (and users' directories) whole, on
    // its loop, for each job naming a summary it did not find.
    let mut names: Vec<String> = (0..4096).map(|i| format!("f{i}")).collect();
    names.push("BERT_base.model".into());
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (_dir, _, output) = check_bert_beside(&names, true);
    let checked: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(checked["model"], serde_json::Value::Null);
    // 4,096 names with the job file itself.
    let (_dir, _, output) = check_bert_beside(&names[2..], true);
    let checked: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(checked["model"], "BERT_base.model");
}

#[test]
fn a_missing_summary_is_a_warning_with_a_suggestion() {
    let (_dir, rad, output) = check_bert_beside(&["BERT_base_v2.model"], false);
    let errors = stderr(&output);
    assert!(
        errors.contains(&format!(
            "{}:4:3: warning: model summary `bert_base.model` not found",
            rad.display()
        )),
        "{errors}"
    );
    assert!(errors.contains("estimating without it"), "{errors}");
    assert!(stdout(&output).contains("  model       -\n"));
}

#[test]
fn summaries_in_subdirectories_are_suggested_with_their_directory() {
    let dir = TempDir::new().unwrap();
    write(&dir, "models/resnet50_32.model", "(a model summary)\n");
    let rad = write(&dir, "r.rad", "model: models/resnet50-32.model\nrun\n");
    let errors = stderr(&carma_check(&[&rad], false));
    assert!(errors.contains(":1:8: "), "{errors}");
    assert!(
        errors.contains("did you mean `models/resnet50_32.model`?"),
        "{errors}"
    );
}

#[cfg(unix)]
#[test]
fn a_summary_that_links_out_of_the_job_directory_is_never_read() {
    let outside = TempDir::new().unwrap();
    let secret = write(&outside, "secret.model", "someone else's file\n");
    let dir = TempDir::new().unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join("m.model")).unwrap();
    let rad = write(&dir, "r.rad", "model: m.model\nrun\n");
    let output = carma_check(&[&rad], false);
    assert!(output.status.success(), "{}", stderr(&output));
    let errors = stderr(&output);
    assert!(errors.contains(":1:8: warning: "), "{errors}");
    assert!(errors.contains("outside the job's directory"), "{errors}");
    assert!(stdout(&output).contains("  model       -\n"));
}

#[test]
fn unreadable_and_non_regular_paths_are_reported_too() {
    let dir = TempDir::new().unwrap();
    let missing = dir.path().join("missing.rad");
    let output = carma_check(&[&missing, dir.path()], false);
    assert_eq!(output.status.code(), Some(1));
    let errors = stderr(&output);
    assert!(
        errors.contains(&format!("{}: cannot read", missing.display())),
        "{errors}"
    );
    assert!(errors.contains("not a regular file"), "{errors}");
}

#[test]
fn binary_files_are_refused_with_a_position() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("junk.rad");
    fs::write(&path, b"python a.py\n\x00\x01\x02").unwrap();
    let errors = stderr(&carma_check(&[&path], false));
    assert!(
        errors.contains(&format!("{}:2:1: binary data", path.display())),
        "{errors}"
    );
}

#[test]
fn the_shipped_examples_pass() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<PathBuf> = [examples.clone(), examples.join("fake")]
        .iter()
        .flat_map(|dir| fs::read_dir(dir).unwrap())
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rad"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "{files:?}");
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let output = carma_check(&paths, true);
    assert!(output.status.success(), "{}", stderr(&output));
    let checked: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(checked.len(), files.len());
    assert!(checked.iter().all(|spec| spec["syntax"] == "keyed"));
    // The sample configuration loads.
    let config = carma::config::Config::load(Some(&examples.join("carma.toml"))).unwrap();
    assert!(config.mps.enabled);
    // A `name:` wins over the file name.
    assert!(checked.iter().any(|spec| spec["name"] == "lenet5-mnist"));
}
