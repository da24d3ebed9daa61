//! A job's environment lines end to end: `conda activate ENV` in both
//! syntaxes, a venv's `source .../activate`, and the reason a task fails
//! with when one of them cannot be done, through a real daemon on
//! simulated GPUs and a fake conda installation (`tests/fake_conda`).

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{Spool, TestUser, fake_conda, stderr, two_users};

/// A spool whose daemon uses the fake conda in its test directory (set
/// through `daemon.conda`), and that installation's prefix.
fn spool_with_conda() -> (Spool, PathBuf, tempfile::TempDir) {
    let install = tempfile::tempdir().unwrap();
    let prefix = install.path().join("conda");
    fake_conda(&prefix);
    let config = format!("[daemon]\nconda = \"{}\"\n", prefix.display());
    let mut spool = Spool::with_config("2x40GiB", &config);
    spool.start_daemon();
    (spool, prefix, install)
}

/// A legacy (positional) job whose environment line is `activation`, with
/// the model summary it names beside it.
fn legacy_job(spool: &Spool, name: &str, activation: &str, command: &str) {
    let summary = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/models/lenet5_64.model"
    ))
    .unwrap();
    spool.job("lenet5_64.model", &summary);
    let text = format!(
        "# {name}: the research prototype's format\n{activation}\n{command}\n\
         lenet5_64.model\nMNIST\n64\ncollocation\n1\n1200\n1300\n1400\n1500\n"
    );
    spool.submit(&format!("{name}.rad"), &text);
}

fn read(task: &Path, file: &str) -> String {
    fs::read_to_string(task.join(file)).unwrap_or_default()
}

/// The task ending in `-name`, once it has ended in `state`.
fn ended(spool: &Spool, name: &str, state: &str) -> PathBuf {
    let stem = format!("-{name}");
    spool.wait_for(&format!("{name} in {state}/"), 20.0, || {
        spool
            .find(&stem)
            .is_some_and(|(s, _)| s == "done" || s == "failed")
    });
    let (at, dir) = spool.find(&stem).unwrap();
    assert_eq!(
        at,
        state,
        "{name}: reason {:?}, stderr {:?}",
        read(&dir, "reason"),
        read(&dir, "run-1/stderr")
    );
    dir
}

#[test]
fn jobs_of_both_syntaxes_run_in_their_conda_environment_and_venvs_still_work() {
    let (spool, prefix, _install) = spool_with_conda();
    let env_python = prefix.join("envs/tf/bin/python");
    legacy_job(
        &spool,
        "legacy",
        "conda activate tf",
        "python train.py --batch_size 64",
    );
    spool.submit(
        "keyed.rad",
        "name: keyed\nmemory: 1G\nconda activate tf   # the env\npython train.py\n",
    );
    spool.submit(
        "run.rad",
        "name: run\nmemory: 1G\nconda run -n tf --no-capture-output python run.py\n",
    );
    // A venv beside the job file, as `python -m venv venv` makes one.
    let venv = spool.dir.path().join("jobs/venv");
    spool.job(
        "venv/bin/activate",
        &format!(
            "export VIRTUAL_ENV={0}\nexport PATH=\"$VIRTUAL_ENV/bin:$PATH\"\n",
            venv.display()
        ),
    );
    let venv_python = venv.join("bin/python");
    fs::copy(&env_python, &venv_python).unwrap();
    spool.submit(
        "venv.rad",
        "name: venv\nmemory: 1G\nsource venv/bin/activate\npython venv.py\n",
    );
    for (name, python, args) in [
        ("legacy", &env_python, "train.py --batch_size 64"),
        ("keyed", &env_python, "train.py"),
        ("run", &env_python, "run.py"),
    ] {
        let task = ended(&spool, name, "done");
        let out = read(&task, "run-1/stdout");
        assert!(
            out.starts_with(&format!(
                "python {} {args}\nCONDA_DEFAULT_ENV=tf\n",
                python.display()
            )),
            "{name}: {out}"
        );
        assert!(
            out.contains(&format!(
                "CONDA_PREFIX={}\n",
                prefix.join("envs/tf").display()
            )),
            "{name}: {out}"
        );
    }
    let task = ended(&spool, "venv", "done");
    let out = read(&task, "run-1/stdout");
    assert!(
        out.starts_with(&format!(
            "python {} venv.py\nCONDA_DEFAULT_ENV=\n",
            venv_python.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("VIRTUAL_ENV={}\n", venv.display())),
        "{out}"
    );
    // Only the conda job's script got the hook.
    assert!(read(&task, "run-1/job.sh").contains("source venv/bin/activate ||"));
    assert!(!read(&task, "run-1/job.sh").contains("shell.bash hook"));
}

#[test]
fn a_missing_environment_stops_the_job_with_a_clear_reason() {
    let (spool, _prefix, _install) = spool_with_conda();
    legacy_job(
        &spool,
        "legacy",
        "conda activate pytorch",
        "python train.py",
    );
    spool.submit(
        "keyed.rad",
        "name: keyed\nmemory: 1G\necho setting up\nconda activate tf2\npython train.py\n",
    );
    spool.submit(
        "venv.rad",
        "name: venv\nmemory: 1G\nsource venv/bin/activate\npython train.py\n",
    );
    for (name, env) in [("legacy", "pytorch"), ("keyed", "tf2")] {
        let task = ended(&spool, name, "failed");
        let reason = format!("job failed: conda environment `{env}` not found");
        assert_eq!(read(&task, "reason").trim(), reason, "{name}");
        let record: serde_json::Value = serde_json::from_str(&read(&task, "task.json")).unwrap();
        assert_eq!(record["outcome"]["reason"], reason.as_str());
        // Conda's own words are in the job's stderr; python never ran.
        let stderr = read(&task, "run-1/stderr");
        assert!(
            stderr.contains(&format!("Could not find conda environment: {env}")),
            "{stderr}"
        );
        assert!(!read(&task, "run-1/stdout").contains("python"), "{name}");
        // The journal line follows the move.
        spool.wait_for("the reason in the journal", 5.0, || {
            spool.daemon_log().contains(&reason)
        });
    }
    let task = ended(&spool, "venv", "failed");
    assert_eq!(
        read(&task, "reason").trim(),
        "job failed: `source venv/bin/activate` failed (status 1)"
    );
}

/// Whether this machine has conda in one of the system places a job
/// looks at last (then a test that wants none found says "skipped").
fn system_conda() -> bool {
    let usual = [
        "/opt/conda",
        "/opt/miniconda3",
        "/opt/anaconda3",
        "/opt/miniforge3",
    ];
    let found = usual.iter().any(|p| Path::new(p).exists());
    if found {
        eprintln!("skipped: this machine has conda in one of {usual:?}");
    }
    found
}

#[test]
fn a_job_that_finds_no_conda_says_where_it_looked() {
    if system_conda() {
        return;
    }
    let missing = "/nonexistent/conda";
    let mut spool = Spool::with_config("1x40GiB", &format!("[daemon]\nconda = \"{missing}\"\n"));
    spool.start_daemon();
    spool.submit(
        "keyed.rad",
        "name: keyed\nmemory: 1G\nconda activate tf\npython train.py\n",
    );
    let task = ended(&spool, "keyed", "failed");
    let reason = read(&task, "reason");
    assert!(
        reason.starts_with(&format!(
            "job failed: conda not found (looked in daemon.conda = {missing}, $CONDA_EXE, conda on PATH, "
        )),
        "{reason}"
    );
    assert!(reason.contains("/miniconda3, "), "{reason}");
    assert!(reason.trim_end().ends_with("/opt/miniforge3)"), "{reason}");
}

/// The fake conda as `~/miniconda3` of a test user, removed again (with
/// the home, if it was made for it) when dropped.
struct HomeConda {
    home: PathBuf,
    made_home: bool,
}

impl HomeConda {
    fn install(user: &TestUser) -> HomeConda {
        let conda = HomeConda {
            home: user.home.clone(),
            made_home: !user.home.exists(),
        };
        fs::create_dir_all(&conda.home).unwrap();
        let _ = fs::remove_dir_all(conda.prefix());
        fake_conda(&conda.prefix());
        if conda.made_home {
            chown(&[], user.uid, user.gid, &conda.home);
        }
        conda.give_to(user.uid, user.gid);
        conda
    }

    fn prefix(&self) -> PathBuf {
        self.home.join("miniconda3")
    }

    /// Makes the installation `uid`'s.
    fn give_to(&self, uid: u32, gid: u32) {
        chown(&["-R"], uid, gid, &self.prefix());
    }
}

impl Drop for HomeConda {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(self.prefix());
        if self.made_home {
            let _ = fs::remove_dir(&self.home);
        }
    }
}

fn chown(args: &[&str], uid: u32, gid: u32, path: &Path) {
    let status = std::process::Command::new("chown")
        .args(args)
        .arg(format!("{uid}:{gid}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_users_own_conda_in_their_home_serves_only_if_it_is_theirs() {
    let (alice, bob) = two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    let conda = HomeConda::install(&alice);
    let submit = |name: &str| {
        let job = format!("name: {name}\nmemory: 1G\nconda activate tf\npython {name}.py\n");
        let file = format!("{name}.rad");
        let dir = spool.user_dir(&alice, name, &[(&file, &job)]);
        let out = alice.carma(&spool, &format!("submit {}", dir.join(&file).display()));
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // The job runs as alice and finds her ~/miniconda3.
    submit("mine");
    let task = ended(&spool, "mine", "done");
    let out = read(&task, "run-1/stdout");
    let env = conda.prefix().join("envs/tf");
    assert!(
        out.starts_with(&format!("python {}/bin/python mine.py\n", env.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("CONDA_PREFIX={}\n", env.display())),
        "{out}"
    );
    // The same installation, bob's: alice's job does not run his code.
    conda.give_to(bob.uid, bob.gid);
    submit("theirs");
    if system_conda() {
        return;
    }
    let task = ended(&spool, "theirs", "failed");
    let reason = read(&task, "reason");
    assert!(
        reason.starts_with("job failed: conda not found (looked in $CONDA_EXE, "),
        "{reason}"
    );
    assert!(!read(&task, "run-1/stdout").contains("python"));
}
