//! Regression tests, each named after the bug it pins (found in review).
//!
//! The attack tests act as two unprivileged users, `carma-alice` and
//! `carma-bob`, made by the test setup; they need root, so a plain `cargo
//! test` ignores them and `.ci/run` runs them as root.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use common::{Spool, fake_job, stderr, stdout, two_users};

#[test]
fn a_fifo_dropped_into_pending_does_not_hang_the_daemon() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    nix::unistd::mkfifo(
        &spool.root.join("pending/evil.rad"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    spool.wait_count("failed", 1, 10.0);
    let (_, dir) = spool.find("-evil").unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert!(reason.contains("not a regular file"), "{reason}");
    spool.submit("ok.rad", &fake_job("ok", "memory: 1G\n", "1G", 0.1));
    spool.wait_count("done", 1, 10.0);
}

#[test]
fn a_running_job_whose_rad_changed_is_not_failed_on_restart() {
    // The daemon dies; meanwhile the job's .rad becomes invalid. The new
    // daemon must adopt the run as launched, not move it to failed/ while
    // it runs.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let name = spool.submit("a.rad", "name: a\nmemory: whole\nsleep 2\necho finished\n");
    spool.wait_for("a to run", 10.0, || !spool.tasks("running").is_empty());
    spool.stop_daemon("KILL");
    let rad = spool.root.join("running").join(&name).join("job/a.rad");
    let mut text = fs::read_to_string(&rad).unwrap();
    text.push_str("bogus_key: 1\n");
    fs::write(&rad, text).unwrap();
    spool.start_daemon();
    std::thread::sleep(Duration::from_millis(500));
    assert!(spool.tasks("failed").is_empty(), "{}", spool.daemon_log());
    spool.wait_count("done", 1, 10.0);
    let (_, dir) = spool.find(&name).unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("run-1/stdout")).unwrap(),
        "finished\n"
    );
    assert!(
        spool
            .daemon_log()
            .contains("adopting its run as it was launched")
    );
}

#[test]
fn a_cancel_in_the_same_instant_as_the_submit_still_cancels() {
    // Both requests can reach the daemon in one turn of its loop; the
    // cancel must not be dropped for naming a task not taken yet.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    for i in 0..5 {
        let name = spool.submit(
            &format!("c{i}.rad"),
            &fake_job(&format!("c{i}"), "memory: 1G\n", "1G", 30.0),
        );
        fs::write(spool.root.join("cancel").join(&name), "").unwrap();
    }
    spool.wait_count("failed", 5, 20.0);
    for name in spool.tasks("failed") {
        let reason =
            fs::read_to_string(spool.root.join("failed").join(&name).join("reason")).unwrap();
        assert_eq!(reason.trim(), "cancelled", "{name}");
    }
}

/// Two users and a root daemon on one simulated GPU that both may submit
/// to (tests that use it need root and are ignored by a plain `cargo test`).
fn shared_daemon() -> (common::TestUser, common::TestUser, Spool) {
    let (alice, bob) = two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    (alice, bob, spool)
}

fn record(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(dir.join("task.json")).unwrap()).unwrap()
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_user_file_named_like_carmas_record_cannot_forge_the_owner() {
    // Hole 1: alice names her "model summary" task.json (and another file
    // run-1/launch.json), each claiming bob as the job's owner; the daemon
    // is killed while her job runs and restarted. The job runs as alice,
    // before and after, and carma's record is carma's.
    let (alice, bob, mut spool) = shared_daemon();
    let forged = format!(
        r#"{{"name":"000001-x","rad":"x.rad","submitted_at":0,"owner":{}}}"#,
        bob.uid
    );
    let name = spool.submit_as(
        &alice,
        "alice-forge",
        &[
            (
                "x.rad",
                "model: task.json\nmemory: 1G\nid -u\nsleep 1.5\nid -u\n",
            ),
            ("task.json", &forged),
            ("run-1/launch.json", &forged),
        ],
    );
    spool.wait_for("the job to run", 10.0, || {
        !spool.tasks("running").is_empty()
    });
    spool.stop_daemon("KILL");
    spool.start_daemon();
    spool.wait_count("done", 1, 15.0);
    let dir = spool.root.join("done").join(&name);
    let out = fs::read_to_string(dir.join("run-1/stdout")).unwrap();
    assert_eq!(out, format!("{0}\n{0}\n", alice.uid));
    assert_eq!(record(&dir)["owner"], alice.uid);
    let meta = fs::metadata(dir.join("task.json")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    assert_eq!(
        fs::read_to_string(dir.join("job/task.json")).unwrap(),
        forged,
        "kept as hers"
    );
    // A dropped file is no different: its owner is what the file system
    // showed when carma took it, whatever it names.
    let drop_dir = spool.user_dir(
        &alice,
        "alice-drop",
        &[
            ("d.rad", "model: task.json\nmemory: 1G\nid -u\n"),
            ("task.json", &forged),
        ],
    );
    let pending = spool.root.join("pending");
    let out = alice.run(&format!(
        "cp {0}/task.json {0}/d.rad {1}/",
        drop_dir.display(),
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_count("done", 2, 10.0);
    let (_, dir) = spool.find("-d").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("run-1/stdout")).unwrap(),
        format!("{}\n", alice.uid)
    );
}

/// A daemon killed (SIGKILL) while its job runs: the job wrote `start`
/// into the ledger its script names and goes on with `rest` (where
/// `LEDGER` stands for the ledger's path). The spool, the task's name and
/// the ledger.
fn killed_while_running(rest: &str) -> (Spool, String, std::path::PathBuf) {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let ledger = spool.dir.path().join("ledger");
    let script = format!("name: t\nmemory: 1G\necho start >> LEDGER\n{rest}")
        .replace("LEDGER", &ledger.display().to_string());
    let name = spool.submit("t.rad", &script);
    spool.wait_for("the job to start", 10.0, || ledger.exists());
    spool.stop_daemon("KILL");
    (spool, name, ledger)
}

/// The rest of a power loss after [`killed_while_running`]: the run's
/// supervisor dies too (SIGKILL), and is waited for.
fn power_loss(spool: &Spool, run: &std::path::Path) {
    let supervisor = {
        let text = fs::read_to_string(run.join("supervisor.json")).unwrap();
        let id: serde_json::Value = serde_json::from_str(&text).unwrap();
        id["pid"].as_i64().unwrap() as i32
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    spool.wait_for("the supervisor to die", 10.0, || {
        fs::read_to_string(format!("/proc/{supervisor}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    });
}

#[test]
fn a_torn_launch_record_never_launches_a_live_job_twice() {
    // Hole 2: the daemon dies while a job runs and its launch.json (and
    // supervisor.json) are torn. The live supervisor wins: the run is
    // re-attached, never started again.
    let (mut spool, name, ledger) = killed_while_running("sleep 2\necho end >> LEDGER\n");
    let run = spool.root.join("running").join(&name).join("run-1");
    for file in ["launch.json", "supervisor.json"] {
        let text = fs::read(run.join(file)).unwrap();
        fs::write(run.join(file), &text[..text.len() / 2]).unwrap();
    }
    spool.start_daemon();
    spool.wait_count("done", 1, 15.0);
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "start\nend\n");
    assert!(!spool.root.join("done").join(&name).join("run-2").exists());
    assert!(
        spool.daemon_log().contains("re-attached to run 1"),
        "{}",
        spool.daemon_log()
    );
}

#[test]
fn a_started_run_whose_move_into_running_was_lost_is_not_launched_again() {
    // A launch renames the task into running/ and flushes that directory
    // while its job starts. A power loss in between leaves the task in
    // pending/ with a run that named its supervisor (so its job started)
    // and recorded no end. That run is settled as one found in running/
    // (its supervisor died: the task fails), never launched a second time.
    // The power loss: the daemon and the supervisor die at once.
    let (mut spool, name, ledger) = killed_while_running("sleep 30\n");
    let running = spool.root.join("running").join(&name);
    power_loss(&spool, &running.join("run-1"));
    // ... and the rename into running/ was never flushed.
    fs::rename(&running, spool.root.join("pending").join(&name)).unwrap();
    spool.start_daemon();
    spool.wait_count("failed", 1, 15.0);
    let dir = spool.root.join("failed").join(&name);
    assert!(!dir.join("run-2").exists(), "launched again");
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "start\n");
    let log = spool.daemon_log();
    assert!(
        log.contains("its launch's move into running/ was lost"),
        "{log}"
    );
}

#[test]
fn a_run_launched_before_a_power_loss_is_not_launched_again_though_its_name_was_lost() {
    // Neither launch.json nor the supervisor's name is flushed before the
    // job starts; only the run directory is. A power loss can take both
    // while the job had started: the run counts as started, as it was
    // launched in another boot, and is never launched a second time. Two
    // cases: the task found in running/ with launch.json from another
    // boot, and the task found in pending/ (its move lost too) with no
    // launch.json at all.
    for move_lost in [false, true] {
        let (mut spool, name, ledger) = killed_while_running("sleep 30\n");
        let running = spool.root.join("running").join(&name);
        let run = running.join("run-1");
        power_loss(&spool, &run);
        fs::remove_file(run.join("supervisor.json")).unwrap();
        if move_lost {
            fs::remove_file(run.join("launch.json")).unwrap();
            fs::rename(&running, spool.root.join("pending").join(&name)).unwrap();
        } else {
            let text = fs::read_to_string(run.join("launch.json")).unwrap();
            let mut launch: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(launch["boot"].is_string(), "{text}");
            launch["boot"] = "a-boot-before-the-power-loss".into();
            fs::write(run.join("launch.json"), launch.to_string()).unwrap();
        }
        spool.start_daemon();
        spool.wait_count("failed", 1, 15.0);
        let dir = spool.root.join("failed").join(&name);
        assert!(!dir.join("run-2").exists(), "launched again");
        assert_eq!(fs::read_to_string(&ledger).unwrap(), "start\n");
    }
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn another_user_cannot_read_or_list_a_running_jobs_files() {
    // Hole 3: while alice's job runs, bob can neither list its task
    // directory nor read its job file, script, launch record (the job's
    // environment) or output; alice reads her output.
    let (alice, bob, spool) = shared_daemon();
    let name = spool.submit_as(
        &alice,
        "alice-private",
        &[("p.rad", "memory: 1G\necho secret-output\nsleep 30\n")],
    );
    let dir = spool.root.join("running").join(&name);
    spool.wait_for("the job's output", 10.0, || {
        fs::read_to_string(dir.join("run-1/stdout")).is_ok_and(|s| s.contains("secret"))
    });
    for path in [
        "job/p.rad",
        "task.json",
        "run-1/launch.json",
        "run-1/job.sh",
        "run-1/stdout",
        "run-1/stderr",
        "run-1/supervisor.json",
    ] {
        let out = bob.run(&format!("cat {}", dir.join(path).display()));
        assert!(!out.status.success(), "bob read {path}: {}", stdout(&out));
    }
    for listed in [dir.clone(), dir.join("run-1"), dir.join("job")] {
        let out = bob.run(&format!("ls {}", listed.display()));
        assert!(!out.status.success(), "bob listed {}", listed.display());
    }
    let out = alice.run(&format!("cat {}", dir.join("run-1/stdout").display()));
    assert_eq!(stdout(&out), "secret-output\n", "{}", stderr(&out));
    for path in ["task.json", "run-1/launch.json"] {
        let meta = fs::metadata(dir.join(path)).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600), "{path}");
    }
    // Nor can bob cancel it; alice can.
    let out = bob.carma(&spool, &format!("cancel {name} --wait 1"));
    assert!(!out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(spool.root.join("running").join(&name).exists());
    assert!(
        stderr(&out).contains("cancel refused: ")
            && stderr(&out).contains("belongs to carma-alice"),
        "{}",
        stderr(&out)
    );
    let out = alice.carma(&spool, &format!("cancel {name}"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(spool.root.join("failed").join(&name).exists());
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_user_submit_to_a_sticky_pending_reports_success_exactly_once() {
    // Hole 4: pending/ is 1733 (users may add entries, not list them), so
    // a user cannot fsync it. The submission succeeds once its rename is
    // done, and exactly one task comes of it.
    let (alice, _, mut spool) = shared_daemon();
    spool.stop_daemon("TERM");
    let mode = fs::metadata(spool.root.join("pending")).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o1733, "the daemon made pending/ shared");
    let home = spool.user_dir(&alice, "alice-sub", &[("s.rad", "memory: 1G\nid -u\n")]);
    let out = alice.carma(&spool, &format!("submit {}", home.join("s.rad").display()));
    assert!(out.status.success(), "{}", stderr(&out));
    let entry = stdout(&out).trim().to_owned();
    assert!(entry.starts_with("submit-"), "{entry}");
    spool.start_daemon();
    spool.wait_count("done", 1, 10.0);
    assert_eq!(spool.tasks("done").len(), 1);
    let (_, dir) = spool.find("-s").unwrap();
    assert_eq!(record(&dir)["submitted_as"], entry.as_str());
    assert_eq!(
        fs::read_to_string(dir.join("run-1/stdout")).unwrap(),
        format!("{}\n", alice.uid)
    );
    // With a daemon running, the submitter learns the task's name.
    let out = alice.carma(&spool, &format!("submit {}", home.join("s.rad").display()));
    assert!(out.status.success(), "{}", stderr(&out));
    let name = stdout(&out).trim().to_owned();
    assert!(name.starts_with("000002-"), "{name}: {}", stderr(&out));
    spool.wait_count("done", 2, 10.0);
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_job_runs_with_the_groups_its_user_has_when_it_starts() {
    // The daemon looks the groups up as it launches (the supervisor no
    // longer loads the name service): a group the user joined after the
    // submission counts, and nothing of root's.
    let (alice, _, mut spool) = shared_daemon();
    spool.stop_daemon("TERM");
    let group = "carma-shared";
    let _ = Command::new("groupadd").args(["--system", group]).status();
    let home = spool.user_dir(&alice, "alice-groups", &[("g.rad", "memory: 1G\nid -G\n")]);
    let out = alice.carma(&spool, &format!("submit {}", home.join("g.rad").display()));
    assert!(out.status.success(), "{}", stderr(&out));
    let joined = Command::new("usermod")
        .args(["--append", "--groups", group, alice.name])
        .status()
        .unwrap();
    assert!(joined.success(), "usermod");
    spool.start_daemon();
    spool.wait_count("done", 1, 10.0);
    let _ = Command::new("gpasswd")
        .args(["--delete", alice.name, group])
        .output();
    let gid = nix::unistd::Group::from_name(group)
        .unwrap()
        .unwrap()
        .gid
        .as_raw();
    let (_, dir) = spool.find("-g").unwrap();
    let mut seen: Vec<u32> = fs::read_to_string(dir.join("run-1/stdout"))
        .unwrap()
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    seen.sort_unstable();
    let mut wanted = vec![alice.gid, gid];
    wanted.sort_unstable();
    assert_eq!(seen, wanted);
    let launch: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("run-1/launch.json")).unwrap()).unwrap();
    assert!(
        launch["groups"].as_array().is_some_and(|g| g.len() == 2),
        "{launch}"
    );
}

#[test]
fn a_non_utf8_name_in_pending_is_kept_in_failed_with_a_reason() {
    // Hole 7.
    use std::os::unix::ffi::OsStrExt;
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.rad");
    fs::write(spool.root.join("pending").join(odd), "gpus: 1\necho\n").unwrap();
    spool.wait_count("failed", 1, 10.0);
    let (_, dir) = spool.find("-caf_").unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert!(reason.contains("not UTF-8"), "{reason}");
    assert!(dir.join("dropped").join(odd).exists(), "kept as it came");
}

#[test]
fn a_short_lived_lock_probe_does_not_keep_a_daemon_from_its_spool() {
    // Hole 8: `flock -s` holds the lock for a moment as the daemon starts;
    // the daemon waits it out. A real second daemon is refused with the
    // pid of the daemon that holds the lock, not a pid a file says.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.stop_daemon("TERM");
    let lock = spool.root.join("daemon.lock");
    let mut probe = std::process::Command::new("flock")
        .arg("-s")
        .arg(&lock)
        .args(["sleep", "1"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    spool.start_daemon();
    probe.wait().unwrap();
    fs::write(&lock, "424242").unwrap();
    let out = spool
        .carma()
        .args(["daemon", "--simulate-gpus", "1x40GiB"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("pid {}", spool.daemon_pid().unwrap())),
        "{err}"
    );
    assert!(!err.contains("424242"), "{err}");
}

#[test]
fn history_and_reports_survive_a_restart_and_a_lost_history_write() {
    // Hole 9: a finished job's peak is in its record in done/; a history
    // write that was lost (a crash right after the move) is recovered
    // from there when the daemon starts again, and the report still
    // counts the task.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.submit("h.rad", &fake_job("h", "memory: 4G\n", "3G", 1.0));
    spool.wait_count("done", 1, 15.0);
    spool.stop_daemon("KILL");
    let (_, dir) = spool.find("-h").unwrap();
    let peak = record(&dir)["peak_mib"].as_u64().unwrap();
    assert!(peak >= 3 * 1024, "{peak}");
    // Lost: the kill may even have come before it was written.
    let _ = fs::remove_dir_all(spool.root.join("history"));
    spool.start_daemon();
    let history: Vec<_> = fs::read_dir(spool.root.join("history"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(history.len(), 1);
    let saved: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(history[0].path()).unwrap()).unwrap();
    assert_eq!(saved["max_peak_mib"], peak);
    let report = spool.carma().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["tasks"], 1);
    // The same job again, undeclared, is estimated from history.
    spool.submit("h.rad", &fake_job("h", "", "3G", 1.0));
    spool.wait_count("done", 2, 15.0);
    assert!(
        spool.daemon_log().contains("from history"),
        "{}",
        spool.daemon_log()
    );
}

#[test]
fn a_start_reads_only_the_records_of_done_the_history_has_not_taken_in() {
    // The history notes which tasks of done/ it holds; a start reads the
    // others' records only. Its job records deleted behind its back, the
    // history is not rebuilt for a task it lists, and is once the list is
    // gone too.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.submit("h.rad", &fake_job("h", "memory: 4G\n", "3G", 1.0));
    spool.wait_count("done", 1, 15.0);
    spool.stop_daemon("TERM");
    let history = spool.root.join("history");
    let seq = spool
        .find("-h")
        .unwrap()
        .1
        .file_name()
        .unwrap()
        .to_string_lossy()[..6]
        .parse::<u64>()
        .unwrap();
    let listed = fs::read_to_string(history.join("absorbed")).unwrap();
    assert!(listed.lines().any(|l| l == seq.to_string()), "{listed}");
    let jobs = |history: &std::path::Path| {
        fs::read_dir(history)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    for job in jobs(&history) {
        fs::remove_file(job).unwrap();
    }
    spool.start_daemon();
    spool.stop_daemon("TERM");
    assert!(jobs(&history).is_empty(), "a listed task's record was read");
    fs::remove_file(history.join("absorbed")).unwrap();
    spool.start_daemon();
    spool.stop_daemon("TERM");
    assert_eq!(jobs(&history).len(), 1, "rebuilt from done/");
    assert!(
        fs::read_to_string(history.join("absorbed"))
            .unwrap()
            .contains(&seq.to_string())
    );
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_job_gets_its_owners_login_environment_and_nothing_of_the_daemons() {
    // Hole 10.
    let (alice, _) = two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.daemon_env.extend([
        ("PYENV_ROOT".into(), "/root/.pyenv".into()),
        ("DAEMON_SECRET".into(), "hunter2".into()),
        (
            "PATH".into(),
            "/root/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
    ]);
    spool.start_daemon();
    let name = spool.submit_as(&alice, "alice-env", &[("e.rad", "memory: 1G\nenv\n")]);
    spool.wait_count("done", 1, 10.0);
    let env = fs::read_to_string(spool.root.join("done").join(&name).join("run-1/stdout")).unwrap();
    let vars: std::collections::BTreeMap<&str, &str> =
        env.lines().filter_map(|l| l.split_once('=')).collect();
    for gone in ["PYENV_ROOT", "DAEMON_SECRET", "CARMA_CONFIG", "RUST_LOG"] {
        assert!(!vars.contains_key(gone), "{gone} leaked: {env}");
    }
    // Set by carma itself (a job's own `carma submit` reaches its spool),
    // not passed through from the daemon's environment.
    assert_eq!(vars["CARMA_SPOOL"], spool.root.to_str().unwrap());
    assert_eq!(vars["PATH"], "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(vars["USER"], alice.name);
    assert_eq!(vars["LOGNAME"], alice.name);
    assert_eq!(vars["HOME"], alice.home.to_str().unwrap());
    assert_eq!(vars["SHELL"], "/bin/sh");
    assert_eq!(vars["CARMA_TASK_ID"], name);
    assert_eq!(vars["CUDA_VISIBLE_DEVICES"], "0");
    assert!(
        vars.contains_key("LANG") || vars.contains_key("LC_ALL"),
        "{env}"
    );
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_root_owned_job_is_refused_at_submit_unless_root_jobs_are_allowed() {
    // Hole 10: the test config allows root jobs; this one does not.
    let mut spool = Spool::with_config("1x40GiB", "[daemon]\nallow_root_jobs = false\n");
    spool.start_daemon();
    spool.stop_daemon("TERM");
    let rad = spool.job("r.rad", "memory: 1G\nid -u\n");
    let out = spool.carma().arg("submit").arg(&rad).output().unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("owned by root") && err.contains("allow_root_jobs"),
        "{err}"
    );
    assert!(spool.tasks("pending").is_empty());
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_dropped_job_of_another_user_can_write_in_its_working_directory() {
    let (alice, _, spool) = shared_daemon();
    let home = spool.user_dir(
        &alice,
        "alice-w",
        &[(
            "w.rad",
            "name: w\nmemory: 1G\nid -u; echo ckpt > model.ckpt\n",
        )],
    );
    let out = alice.run(&format!(
        "cp {} {}/pending/",
        home.join("w.rad").display(),
        spool.root.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_count("done", 1, 10.0);
    let (_, dir) = spool.find("-w").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("run-1/stdout")).unwrap(),
        format!("{}\n", alice.uid)
    );
    let work = dir.join("work");
    assert_eq!(
        fs::read_to_string(work.join("model.ckpt")).unwrap(),
        "ckpt\n"
    );
    let meta = fs::metadata(&work).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (alice.uid, 0o700));
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_name_squatted_in_pending_cannot_redirect_a_tasks_records_or_a_chown() {
    // Review finding: bob made pending/<his running task's name> with
    // `reason` a link to a root file; when the task failed, the daemon
    // wrote its records there and chowned the link's target to bob.
    let (_, bob) = two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    let victim = spool.dir.path().join("victim");
    fs::write(&victim, "SECRET\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    let name = spool.submit_as(
        &bob,
        "bob-squat",
        &[("sq.rad", "memory: 1G\nsleep 1.5\nexit 1\n")],
    );
    spool.wait_for("the job to run", 10.0, || {
        !spool.tasks("running").is_empty()
    });
    // Made whole beside the spool and renamed in at once: a directory
    // made in place is taken in as a submission before its links are.
    let made = spool.user_dir(&bob, "bob-squat-made", &[]).join("squat");
    let squat = spool.root.join("pending").join(&name);
    let out = bob.run(&format!(
        "mkdir {0} && ln -s {1} {0}/reason && ln -s {1} {0}/task.json && mv -T {0} {2}",
        made.display(),
        victim.display(),
        squat.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the task to fail", 15.0, || {
        spool.root.join("failed").join(&name).is_dir()
    });
    let meta = fs::metadata(&victim).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "SECRET\n");
    let failed = spool.root.join("failed").join(&name);
    assert_eq!(
        fs::symlink_metadata(&failed).unwrap().uid(),
        0,
        "carma's own directory"
    );
    assert!(
        record(&failed)["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("exit status 1")
    );
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn files_squatting_task_names_neither_lose_nor_double_a_task() {
    // Review finding: user files named like the next task numbers made
    // claims fail after the original was deleted, and left half-made
    // tasks that a restart ran a second time.
    let (alice, bob, mut spool) = shared_daemon();
    let ledger = spool.dir.path().join("ledger");
    fs::write(&ledger, "").unwrap();
    fs::set_permissions(&ledger, fs::Permissions::from_mode(0o666)).unwrap();
    let pending = spool.root.join("pending");
    let out = bob.run(&format!(
        "for i in $(seq 1 12); do n=$(printf %06d $i); : > {0}/$n-sq; : > {0}/$n-dbl; done",
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let job = |tag: &str| format!("memory: 1G\necho {tag} >> {}\n", ledger.display());
    let home = spool.user_dir(
        &alice,
        "alice-sq",
        &[("sq.rad", &job("sq")), ("dbl.rad", &job("dbl"))],
    );
    let out = alice.run(&format!(
        "cp {} {}/",
        home.join("sq.rad").display(),
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = alice.carma(
        &spool,
        &format!("submit {}", home.join("dbl.rad").display()),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_count("done", 2, 15.0);
    spool.stop_daemon("KILL");
    spool.start_daemon();
    std::thread::sleep(Duration::from_millis(1500));
    let mut lines: Vec<String> = fs::read_to_string(&ledger)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, ["dbl", "sq"], "each ran exactly once");
    assert_eq!(spool.tasks("done").len(), 2);
    spool.wait_for("staging/ to hold only the lock", 5.0, || {
        common::visible_entries(&spool.root.join("staging")) == ["daemon.lock"]
    });
}

#[test]
fn a_drop_with_an_overlong_name_is_refused_without_holding_up_others() {
    // Review finding: a 250-byte name failed its claim and stopped the
    // whole batch, over and over.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.stop_daemon("TERM");
    let long = format!("{}.rad", "0".repeat(246));
    fs::write(spool.root.join("pending").join(&long), "memory: 1G\necho\n").unwrap();
    fs::write(spool.root.join("pending/b.rad"), "memory: 1G\necho b\n").unwrap();
    spool.start_daemon();
    spool.wait_count("done", 1, 10.0);
    spool.wait_count("failed", 1, 10.0);
    let failed = spool.root.join("failed").join(&spool.tasks("failed")[0]);
    let reason = fs::read_to_string(failed.join("reason")).unwrap();
    assert!(reason.contains("bytes long"), "{reason}");
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_submitted_directory_others_may_write_is_refused() {
    // Review finding: bob rewrote the job in alice's world-writable
    // directory and moved the directory into pending/: it ran as alice.
    let (alice, bob, spool) = shared_daemon();
    let proj = spool.user_dir(&alice, "shared/proj", &[("job.rad", "memory: 1G\nid -u\n")]);
    fs::set_permissions(&proj, fs::Permissions::from_mode(0o777)).unwrap();
    // A directory both may write, without the sticky bit.
    fs::set_permissions(proj.parent().unwrap(), fs::Permissions::from_mode(0o777)).unwrap();
    // Named as alice's `carma submit` names its directories: only those
    // are read at all.
    let out = bob.run(&format!(
        "mv {} {}/pending/submit-{}-1-1",
        proj.display(),
        spool.root.display(),
        alice.uid
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_count("failed", 1, 10.0);
    let failed = spool.root.join("failed").join(&spool.tasks("failed")[0]);
    let reason = fs::read_to_string(failed.join("reason")).unwrap();
    assert!(reason.contains("writable by others"), "{reason}");
    assert!(spool.tasks("done").is_empty());
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_directory_squatting_a_cancel_request_does_not_block_the_owners_cancel() {
    // Review finding: bob's cancel/<alice's task> directory stayed, and
    // alice's request could not be written.
    let (alice, bob, spool) = shared_daemon();
    let name = spool.submit_as(&alice, "alice-c", &[("c.rad", "memory: 1G\nsleep 30\n")]);
    spool.wait_for("the job to run", 10.0, || {
        !spool.tasks("running").is_empty()
    });
    let out = bob.run(&format!("mkdir {}/cancel/{name}", spool.root.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the squat to go", 10.0, || {
        !spool.root.join("cancel").join(&name).exists()
    });
    assert!(spool.root.join("running").join(&name).exists());
    let out = alice.carma(&spool, &format!("cancel {name}"));
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn status_of_a_missing_spool_fails_and_os_errors_are_said_once() {
    let spool = Spool::new("1x40GiB");
    let out = spool.carma().arg("status").output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no spool at"), "{}", stderr(&out));
    // An OS error quoted by its context is not repeated after it.
    fs::create_dir_all(&spool.root).unwrap();
    let out = spool.carma().args(["cancel", "1"]).output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn report_keeps_refused_and_cancelled_tasks_out_of_its_averages() {
    // Issue 12 item 10.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.drop_file("broken.rad", "gpus: 1\nbatchsize: 1\necho\n");
    let long = spool.submit("long.rad", "name: long\nmemory: whole\nsleep 30\n");
    let waiting = spool.submit("waits.rad", "name: waits\nmemory: whole\necho never\n");
    spool.wait_for("the long job", 10.0, || !spool.tasks("running").is_empty());
    let out = spool.carma().args(["cancel", &waiting]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = spool.carma().args(["cancel", &long]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    spool.submit("ok.rad", &fake_job("ok", "memory: 1G\n", "1G", 0.1));
    spool.wait_count("done", 1, 10.0);
    let report = spool.carma().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["tasks"], 1, "{report}");
    assert_eq!(report["refused"], 1, "{report}");
    assert_eq!(report["cancelled"], 2, "{report}");
}

#[test]
fn ended_tasks_are_archived_after_their_retention_and_still_reported() {
    // Issue 23 item 7: nothing ever cleaned done/ or failed/ (root's disk,
    // and every start listed them). After daemon.retention_days (here
    // about a second) a task's directory goes and one archive line keeps
    // what the report needs.
    let mut spool = Spool::with_config("1x40GiB", "[daemon]\nretention_days = 0.00002\n");
    spool.start_daemon();
    let ok = spool.submit("ok.rad", &fake_job("ok", "memory: 1G\n", "1G", 0.1));
    spool.drop_file("broken.rad", "gpus: 1\nbatchsize: 1\necho\n");
    spool.wait_count("done", 1, 10.0);
    spool.wait_for("both to be archived", 15.0, || {
        spool.tasks("done").is_empty() && spool.tasks("failed").is_empty()
    });
    let archive = fs::read_to_string(spool.root.join("archive.jsonl")).unwrap();
    assert_eq!(archive.lines().count(), 2, "{archive}");
    assert!(archive.contains(&ok));
    let mode = fs::metadata(spool.root.join("archive.jsonl"))
        .unwrap()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "records are carma's");
    let report = spool.carma().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["tasks"], 1, "{report}");
    assert_eq!(report["refused"], 1, "{report}");
    // A restart reads neither directory's old tasks nor loses the archive.
    spool.stop_daemon("TERM");
    spool.start_daemon();
    spool.submit("again.rad", &fake_job("again", "memory: 1G\n", "1G", 0.1));
    spool.wait_for("the next job to run", 10.0, || {
        fs::read_to_string(spool.root.join("archive.jsonl")).is_ok_and(|a| a.lines().count() == 3)
    });
}

#[test]
fn a_job_asking_for_more_host_cpus_or_memory_than_allowed_is_refused() {
    let mut spool = Spool::with_config(
        "1x40GiB",
        "[queue]\nmax_cpus = 2\nmax_host_memory_mib = 4096\n",
    );
    spool.start_daemon();
    let cpus = spool.submit("c.rad", "name: c\nmemory: 1G\ncpus: 4\ntrue\n");
    let mem = spool.submit("m.rad", "name: m\nmemory: 1G\nhost_memory: 8G\ntrue\n");
    let fits = spool.submit(
        "f.rad",
        "name: f\nmemory: 1G\ncpus: 1.5\nhost_memory: 2G\ntrue\n",
    );
    spool.wait_for("all three to end", 10.0, || {
        spool.root.join("failed").join(&cpus).exists()
            && spool.root.join("failed").join(&mem).exists()
            && spool.root.join("done").join(&fits).exists()
    });
    let reason = |name: &str| {
        fs::read_to_string(spool.root.join("failed").join(name).join("reason")).unwrap()
    };
    assert!(
        reason(&cpus).contains("queue.max_cpus"),
        "{}",
        reason(&cpus)
    );
    assert!(
        reason(&mem).contains("queue.max_host_memory_mib"),
        "{}",
        reason(&mem)
    );
    let launch: serde_json::Value = serde_json::from_slice(
        &fs::read(
            spool
                .root
                .join("done")
                .join(&fits)
                .join("run-1/launch.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(launch["cpus"], 1.5);
    assert_eq!(launch["host_memory_mib"], 2048);
}
