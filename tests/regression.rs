//! Regression tests, each named after the bug it pins (found in review).

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use common::{Spool, fake_job};

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

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
    let rad = spool.root.join("running").join(&name).join("a.rad");
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

/// A spool a root daemon serves and an unprivileged user (nobody) can
/// submit to, as the README describes.
fn shared_spool() -> Spool {
    let mut spool = Spool::new("1x40GiB");
    fs::set_permissions(spool.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    spool.start_daemon();
    fs::set_permissions(
        spool.root.join("pending"),
        fs::Permissions::from_mode(0o1733),
    )
    .unwrap();
    spool
}

/// Runs `script` as nobody.
fn as_nobody(script: &str) {
    let status = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .status()
        .unwrap();
    assert!(status.success(), "{script}");
}

#[test]
fn another_users_submission_is_copied_and_run_as_that_user_never_trusted() {
    if !is_root() {
        // Only root can act as a second user; as anyone else the spool has
        // a single user and this bug cannot happen.
        eprintln!("skipped: needs root to submit as another user");
        return;
    }
    let spool = shared_spool();
    let home = spool.dir.path().join("home");
    fs::create_dir(&home).unwrap();
    fs::set_permissions(&home, fs::Permissions::from_mode(0o777)).unwrap();
    // nobody hand-makes a task directory whose record points outside it
    // and moves it in: refused, and nothing outside is read.
    let pending = spool.root.join("pending");
    as_nobody(&format!(
        "set -e; d={home}/000777-x; mkdir $d; printf 'gpus: 1\\nid -u\\n' > $d/x.rad; \
         printf '{{\"name\":\"000777-x\",\"rad\":\"../../../../etc/passwd\",\"submitted_at\":0}}' > $d/task.json; \
         mv $d {pending}/",
        home = home.display(),
        pending = pending.display()
    ));
    spool.wait_count("failed", 1, 10.0);
    let reason = fs::read_to_string(spool.root.join("failed/000777-x/reason")).unwrap();
    assert!(reason.contains("not the name of a .rad file"), "{reason}");
    // A proper submission by nobody runs as nobody, from a directory the
    // daemon made and nobody cannot change.
    as_nobody(&format!(
        "set -e; d={home}/000778-y; mkdir $d; printf 'gpus: 1\\nid -u; pwd\\n' > $d/y.rad; \
         printf '{{\"name\":\"000778-y\",\"rad\":\"y.rad\",\"submitted_at\":0,\"workdir\":\"{home}\"}}' > $d/task.json; \
         mv $d {pending}/",
        pending = pending.display(),
        home = home.display()
    ));
    spool.wait_count("done", 1, 10.0);
    let dir = spool.root.join("done/000778-y");
    assert_eq!(
        fs::metadata(&dir).unwrap().uid(),
        0,
        "the daemon owns the task directory"
    );
    let out = fs::read_to_string(dir.join("run-1/stdout")).unwrap();
    assert_eq!(out, format!("65534\n{}\n", home.display()));
}

#[test]
fn a_dropped_job_of_another_user_can_write_in_its_working_directory() {
    if !is_root() {
        eprintln!("skipped: needs root to drop a job as another user");
        return;
    }
    let spool = shared_spool();
    let job = spool.dir.path().join("w.rad");
    fs::write(&job, "name: w\nmemory: 1G\nid -u; echo ckpt > model.ckpt\n").unwrap();
    fs::set_permissions(&job, fs::Permissions::from_mode(0o644)).unwrap();
    as_nobody(&format!(
        "cp {} {}/pending/",
        job.display(),
        spool.root.display()
    ));
    spool.wait_count("done", 1, 10.0);
    let (_, dir) = spool.find("-w").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("run-1/stdout")).unwrap(),
        "65534\n"
    );
    assert_eq!(
        fs::read_to_string(dir.join("work/model.ckpt")).unwrap(),
        "ckpt\n"
    );
}
