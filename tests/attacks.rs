//! Attacks on a root daemon by unprivileged users (issue 23): each test
//! is one hole found in review, pinned by the attack that found it. The
//! daemon must stay up, responsive (another user's job is taken in within
//! seconds, `status.json` fresh) and restartable after `kill -9`.
//!
//! They need root (to make the users and run the daemon as root), so they
//! are ignored by `cargo test`; `.ci/run` runs them:
//! `cargo test --test attacks -- --ignored`.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Spool, TestUser, sleepers, stderr, stdout, two_users};
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, mkdirat};

/// Two users and a root daemon on one simulated GPU.
fn shared_daemon(extra: &str) -> (TestUser, TestUser, Spool) {
    shared_daemon_on("1x40GiB", extra)
}

/// [`shared_daemon`] on the simulated GPUs `gpus`.
fn shared_daemon_on(gpus: &str, extra: &str) -> (TestUser, TestUser, Spool) {
    let (alice, bob) = two_users();
    let mut spool = Spool::shared(gpus, extra);
    spool.start_daemon();
    (alice, bob, spool)
}

/// The daemon still serves everyone: bob's job is taken in and runs to
/// the end within seconds, and the status it writes is fresh.
fn still_serves(spool: &Spool, bob: &TestUser, tag: &str) {
    let started = Instant::now();
    let name = spool.submit_as(
        bob,
        &format!("bob-{tag}"),
        &[("ok.rad", "memory: 1G\ntrue\n")],
    );
    spool.wait_for("bob's job to end in done/", 15.0, || {
        spool.root.join("done").join(&name).exists()
    });
    assert!(started.elapsed() < Duration::from_secs(15));
    let status: serde_json::Value =
        serde_json::from_slice(&fs::read(spool.root.join("status.json")).unwrap()).unwrap();
    let age = common::unix_now() - status["updated_at"].as_f64().unwrap();
    assert!(age < 3.0, "status.json is {age:.1} s old");
}

/// Waits until the daemon has handled (and removed) every request.
fn wait_for_cancel_emptied(spool: &Spool) {
    spool.wait_for("cancel/ to be emptied", 20.0, || {
        fs::read_dir(spool.root.join("cancel"))
            .unwrap()
            .next()
            .is_none()
    });
}

/// [`still_serves`], with bob's job taken in and done within 5 s.
fn still_serves_at_once(spool: &Spool, bob: &TestUser, tag: &str) {
    let started = Instant::now();
    still_serves(spool, bob, tag);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bob waited {:?}",
        started.elapsed()
    );
}

/// `user`'s job `rad` (submitted from their directory `dir`), once it
/// runs: its task's name.
fn running_as(spool: &Spool, user: &TestUser, dir: &str, rad: &str) -> String {
    let name = spool.submit_as(user, dir, &[("job.rad", rad)]);
    spool.wait_for("the job to run", 10.0, || {
        spool.root.join("running").join(&name).exists()
    });
    name
}

/// A job of `user`'s (`rad`, in their directory `dir`), submitted and
/// waited for until it is done; its task's name.
fn done_as(spool: &Spool, user: &TestUser, dir: &str, rad: &str) -> String {
    let name = spool.submit_as(user, dir, &[("job.rad", rad)]);
    spool.wait_for("the job to end in done/", 15.0, || {
        spool.root.join("done").join(&name).exists()
    });
    name
}

/// The next task number the spool would give.
fn next_id(spool: &Spool) -> u64 {
    fs::read_to_string(spool.root.join("next-id")).map_or(1, |text| {
        text.split_whitespace().next().unwrap().parse().unwrap()
    })
}

/// The reason of the failed task that holds `entry` in its `dropped/`.
fn set_aside(spool: &Spool, entry: &OsStr) -> Option<(PathBuf, String)> {
    spool.tasks("failed").into_iter().find_map(|task| {
        let dir = spool.root.join("failed").join(task);
        let kept = dir.join("dropped").join(entry);
        fs::symlink_metadata(&kept).ok()?;
        Some((kept, fs::read_to_string(dir.join("reason")).unwrap()))
    })
}

/// A directory `levels` deep under `top` (made if missing), each level
/// named `name` and owned by `user`; made through descriptors, as a user
/// would with `cd`, since its path is far longer than any path may be.
fn deep_tree(top: &Path, levels: usize, name: &str, user: &TestUser) -> OwnedFd {
    use nix::unistd::{Gid, Uid, fchownat};
    fs::create_dir_all(top).unwrap();
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
    let owner = (Some(Uid::from_raw(user.uid)), Some(Gid::from_raw(user.gid)));
    let mut fd: OwnedFd = nix::fcntl::open(top, flags, Mode::empty()).unwrap();
    fchownat(&fd, ".", owner.0, owner.1, nix::fcntl::AtFlags::empty()).unwrap();
    for _ in 0..levels {
        mkdirat(&fd, name, Mode::from_bits_truncate(0o755)).unwrap();
        fchownat(
            &fd,
            name,
            owner.0,
            owner.1,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
        fd = openat(&fd, name, flags, Mode::empty()).unwrap();
    }
    fd
}

/// A file of `user`'s in the directory `dir`.
fn user_file(dir: &OwnedFd, name: &str, text: &str, user: &TestUser) {
    use std::io::Write;
    let fd = openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let mut file = fs::File::from(fd);
    file.write_all(text.as_bytes()).unwrap();
    nix::unistd::fchown(
        &file,
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
    )
    .unwrap();
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_users_tree_in_pending_is_set_aside_unopened_and_nobody_waits() {
    // Hole 1: a directory with a non-UTF-8 name was claimed and its tree
    // walked and opened by path as root: a FIFO inside blocked the loop
    // for good, a link led root to /etc/shadow.
    let (alice, bob, mut spool) = shared_daemon("");
    let home = spool.user_dir(&alice, "alice-trees", &[]);
    let script = format!(
        r#"set -e
cd {home}
mkfifo outside
for d in "$(printf 'evil\377')" plain-dir 000777-looks-like-a-task submitnot; do
    mkdir "$d"; mkfifo "$d/fifo"; ln -s /etc/shadow "$d/shadow"
    ln -s {home}/outside "$d/hang"; ln -s {home}/outside "$d/job.rad"
done
mkfifo pipe.rad
ln -s /etc/shadow shadow.rad
ln -s {home}/outside hang.rad
for e in "$(printf 'evil\377')" plain-dir 000777-looks-like-a-task submitnot pipe.rad shadow.rad hang.rad; do
    mv "$e" {pending}/
done
"#,
        home = home.display(),
        pending = spool.root.join("pending").display(),
    );
    let out = alice.run(&script);
    assert!(out.status.success(), "{}", stderr(&out));
    still_serves(&spool, &bob, "1");
    spool.wait_for("every entry set aside", 10.0, || {
        spool.tasks("failed").len() >= 7
    });
    let evil = OsStr::from_bytes(b"evil\xff");
    for (entry, why) in [
        (evil, "not UTF-8"),
        (
            OsStr::new("plain-dir"),
            "a directory that `carma submit` did not make",
        ),
        (OsStr::new("000777-looks-like-a-task"), "did not make"),
        (OsStr::new("submitnot"), "did not make"),
        (OsStr::new("pipe.rad"), "a FIFO"),
        (OsStr::new("shadow.rad"), "a symbolic link"),
        (OsStr::new("hang.rad"), "a symbolic link"),
    ] {
        let (kept, reason) =
            set_aside(&spool, entry).unwrap_or_else(|| panic!("{entry:?} is not kept in failed/"));
        assert!(reason.contains(why), "{entry:?}: {reason}");
        if fs::symlink_metadata(&kept).unwrap().is_dir() {
            // Kept whole, as it came: nothing inside was touched.
            for inner in ["fifo", "shadow", "hang", "job.rad"] {
                assert!(fs::symlink_metadata(kept.join(inner)).is_ok(), "{inner}");
            }
        }
    }
    // Nothing of /etc/shadow was copied anywhere in the spool.
    let shadow = fs::read(Path::new("/etc/shadow")).unwrap_or_default();
    let copies = common::files_below(&spool.root)
        .into_iter()
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .filter(|p| !shadow.is_empty() && fs::read(p).is_ok_and(|b| b == shadow))
        .count();
    assert_eq!(copies, 0);
    // SIGTERM is heard.
    let stopped = Instant::now();
    assert!(spool.stop_daemon("TERM").success());
    assert!(stopped.elapsed() < Duration::from_secs(5));
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_claim_that_cannot_be_made_never_spins_and_a_crash_leaves_a_clean_start() {
    // Hole 2: twenty nested 250-byte names under a non-UTF-8 name made
    // the claim fail, put the drop back, and its own event claimed it
    // again: thousands of task numbers in seconds, nobody else taken in.
    // After `kill -9`, staging/ stopped every start.
    let (alice, bob, mut spool) = shared_daemon("");
    let long = "l".repeat(250);
    let model = format!("m/{}/s.model", vec![long.as_str(); 20].join("/"));
    let far = format!("model: {model}\nmemory: 1G\ntrue\n");
    let home = spool.user_dir(&alice, "alice-long", &[("far.rad", &far)]);
    deep_tree(
        &home.join(OsStr::from_bytes(b"deep\xff")),
        20,
        &long,
        &alice,
    );
    let bottom = deep_tree(&home.join("m"), 20, &long, &alice);
    user_file(&bottom, "s.model", "summary", &alice);
    let script = format!(
        // One `mv` per entry: GNU mv 9 looks at each directory it moved
        // when it moves several, and the daemon may have taken it by then.
        "cd {home} && mv \"$(printf 'deep\\377')\" {pending}/ && mv far.rad {pending}/",
        home = home.display(),
        pending = spool.root.join("pending").display(),
    );
    let before = next_id(&spool);
    let out = alice.run(&script);
    assert!(out.status.success(), "{}", stderr(&out));
    still_serves(&spool, &bob, "1");
    std::thread::sleep(Duration::from_secs(2));
    let spent = next_id(&spool) - before;
    assert!(
        spent <= 3,
        "{spent} task numbers spent on 2 drops and bob's job"
    );
    assert!(set_aside(&spool, OsStr::from_bytes(b"deep\xff")).is_some());
    // A summary path that long is refused with the job, saying why (each
    // look for it walked every name).
    spool.wait_for("far.rad to be refused", 15.0, || {
        spool
            .find("far")
            .is_some_and(|(state, _)| state == "failed")
    });
    let (_, far_dir) = spool.find("far").unwrap();
    let reason = fs::read_to_string(far_dir.join("reason")).unwrap();
    assert!(reason.contains("at most 1024 bytes"), "{reason}");
    assert!(next_id(&spool) - before <= 3);

    // Killed; crashed submitters and claims leave things behind.
    spool.stop_daemon("KILL");
    let staging = spool.root.join("staging");
    for left in ["submit-000900-crashed", "junk", "claiming-1-1"] {
        fs::create_dir(staging.join(left)).unwrap();
    }
    fs::write(
        staging.join("claiming-1-1/.orig-back.rad"),
        "memory: 1G\ntrue\n",
    )
    .unwrap();
    let hidden = spool
        .root
        .join("pending")
        .join(format!(".submit-{}-1-1", alice.uid));
    fs::create_dir(&hidden).unwrap();
    deep_tree(&hidden.join("d"), 100, "d", &alice);
    for old in [staging.join("submit-000900-crashed"), hidden.clone()] {
        let out = std::process::Command::new("touch")
            .args(["-d", "2 hours ago"])
            .arg(&old)
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    spool.start_daemon();
    spool.wait_for("a clean staging/", 10.0, || {
        common::visible_entries(&staging) == ["daemon.lock"]
    });
    assert!(!hidden.exists(), "the abandoned submission is gone");
    spool.wait_for("the interrupted claim to be made again", 10.0, || {
        spool.find("back").is_some_and(|(state, _)| state == "done")
    });
    still_serves(&spool, &bob, "2");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_tree_deeper_than_the_stack_neither_crashes_the_daemon_nor_doubles_a_task() {
    // Hole 3: 19,000 levels (53,000 with an 8 MiB stack) in cancel/ or
    // pending/ overflowed the recursive delete; the daemon crashed on
    // every start, and a submission became a task again on each.
    // The test's own clean-up (`TempDir`) deletes recursively: a stack
    // that a failing test can unwind through with deep trees left over.
    std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(deep_trees)
        .unwrap()
        .join()
        .unwrap();
}

fn deep_trees() {
    let (alice, bob, mut spool) = shared_daemon("");
    let home = spool.user_dir(&alice, "alice-deep", &[]);
    deep_tree(&home.join("deep"), 70_000, "d", &alice);
    let submission = home.join(format!("submit-{}-1-1", alice.uid));
    deep_tree(&submission.join("d"), 70_000, "d", &alice);
    fs::write(submission.join("job.rad"), "memory: 1G\ntrue\n").unwrap();
    let out = std::process::Command::new("chown")
        .arg(format!("{}:{}", alice.uid, alice.gid))
        .arg(&submission)
        .arg(submission.join("job.rad"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = alice.run(&format!(
        "mv {}/deep {}/cancel/ && mv {} {}/pending/",
        home.display(),
        spool.root.display(),
        submission.display(),
        spool.root.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    still_serves(&spool, &bob, "1");
    spool.wait_for("the submission to run", 15.0, || {
        spool.find("job").is_some_and(|(state, _)| state == "done")
    });
    assert!(spool.daemon_exited().is_none(), "the daemon crashed");
    spool.wait_for("the trees to be deleted", 60.0, || {
        common::visible_entries(&spool.root.join("staging")) == ["daemon.lock"]
    });
    assert!(!spool.root.join("cancel/deep").exists());
    spool.stop_daemon("KILL");
    spool.start_daemon();
    still_serves(&spool, &bob, "2");
    let jobs = spool
        .tasks("done")
        .iter()
        .filter(|n| n.ends_with("-job"))
        .count();
    assert_eq!(jobs, 1, "the submission ran once");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn no_user_can_hold_the_daemons_lock() {
    // Hole 4: daemon.lock was 0644; a shared flock on it, taken while the
    // daemon was down, kept every restarted daemon out.
    let (alice, bob, mut spool) = shared_daemon("");
    // Alice, who cannot open the lock, still learns that a daemon runs.
    let out = alice.carma(&spool, "status");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("carma daemon (pid"),
        "alice is told the daemon is down: {}",
        stdout(&out)
    );
    spool.stop_daemon("TERM");
    let pids = alice.run(&format!(
        "for f in {root}/* {root}/staging/daemon.lock {root}/daemon.lock; do \
         flock -s \"$f\" sleep 30 >/dev/null 2>&1 & echo $!; done",
        root = spool.root.display()
    ));
    let pids: Vec<String> = stdout(&pids)
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    spool.start_daemon();
    still_serves(&spool, &bob, "1");
    for pid in pids {
        let _ = std::process::Command::new("kill").arg(&pid).status();
    }
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_hard_link_to_another_users_file_cannot_cancel_their_job() {
    // Hole 8: a request is authorised by its file's owner, and a hard
    // link to bob's file in cancel/ cancelled bob's job.
    let (alice, bob, spool) = shared_daemon("");
    let name = running_as(&spool, &bob, "bob-run", "memory: 1G\nsleep 30\n");
    let bobs = spool.user_dir(&bob, "bob-file", &[("shared", "")]);
    fs::set_permissions(
        bobs.join("shared"),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let out = alice.run(&format!(
        "ln {}/shared {}/cancel/{name}",
        bobs.display(),
        spool.root.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the request to be refused", 10.0, || {
        !spool.root.join("cancel").join(&name).exists()
    });
    std::thread::sleep(Duration::from_millis(1500));
    assert!(spool.root.join("running").join(&name).exists(), "cancelled");
    assert!(spool.daemon_log().contains("has other hard links"));
    assert!(bobs.join("shared").exists(), "bob's file is his");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_name_made_and_removed_in_pending_forgets_no_other_users_task() {
    // Hole 13: a task that left `pending/` was forgotten by its number
    // alone, so `touch pending/42-x; rm pending/42-x` dropped bob's
    // waiting task 42 from the queue, leaving its directory unrun.
    let (alice, bob, spool) = shared_daemon("");
    running_as(&spool, &bob, "bob-first", "memory: 39G\nsleep 3\n");
    let waiting = spool.submit_as(&bob, "bob-waits", &[("b.rad", "memory: 39G\ntrue\n")]);
    let number = waiting.split_once('-').unwrap().0;
    for stem in ["x", "y"] {
        let fake = spool.root.join("pending").join(format!("{number}-{stem}"));
        let out = alice.run(&format!("touch {0} && rm -f {0}", fake.display()));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    // A number with fewer digits names the same task number too.
    let short = number.trim_start_matches('0');
    let fake = spool.root.join("pending").join(format!("{short}-z"));
    let out = alice.run(&format!("touch {0} && rm -f {0}", fake.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for(
        "bob's waiting job to run once the GPU is free",
        30.0,
        || spool.root.join("done").join(&waiting).exists(),
    );
    assert!(
        !spool
            .daemon_log()
            .contains("removed from pending/ by someone else")
    );
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_flood_of_names_made_and_removed_in_pending_holds_nobody_up() {
    // Hole 14: every event on a name that is not UTF-8 rescanned all of
    // `pending/` at once, and the loop drained changes for as long as
    // they came, so a user making and removing such a name in a loop
    // stopped launches, answers and the status file, and grew the
    // daemon's queue without end.
    let (alice, bob, spool) = shared_daemon("");
    let pending = spool.root.join("pending");
    // Hidden names are never taken in, and each makes every listing of
    // `pending/` longer.
    let flood = format!(
        "import os, time\n\
         for i in range(20000):\n\
         \x20   os.close(os.open(b'{0}/.h%d' % i, os.O_CREAT | os.O_WRONLY, 0o600))\n\
         end = time.time() + 8\n\
         names = [os.path.join(b'{0}', bytes([0xff, 0x41 + i])) for i in range(32)]\n\
         while time.time() < end:\n\
         \x20   for name in names:\n\
         \x20       os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o600))\n\
         \x20   for name in names:\n\
         \x20       try: os.unlink(name)\n\
         \x20       except FileNotFoundError: pass\n\
         \x20   for i in range(64):\n\
         \x20       name = b'{0}/%d-x' % i\n\
         \x20       os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o600))\n\
         \x20       try: os.unlink(name)\n\
         \x20       except FileNotFoundError: pass\n",
        pending.display()
    );
    let script = spool.user_dir(&alice, "alice-flood", &[("flood.py", &flood)]);
    let out = alice.run(&format!(
        "nohup python3 {}/flood.py >/dev/null 2>&1 &",
        script.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    std::thread::sleep(Duration::from_secs(2));
    still_serves_at_once(&spool, &bob, "during");
    spool.wait_for("the flood to end", 20.0, || {
        fs::read_dir(&pending).unwrap().flatten().all(|e| {
            let name = e.file_name();
            name.to_str().is_some_and(|n| !n.ends_with("-x"))
        })
    });
    std::thread::sleep(Duration::from_secs(7));
    still_serves_at_once(&spool, &bob, "after");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn bidirectional_controls_in_a_job_reach_neither_status_nor_the_log() {
    // Hole 12: U+202E in a job's text reached `carma status` and the log
    // as it was, and reversed what people read.
    let (alice, bob, spool) = shared_daemon("");
    let home = spool.user_dir(
        &alice,
        "alice-bidi",
        &[(
            "rtl\u{202E}gpj.rad",
            "gpus: 1\u{202E}2\u{2066}\nmemory: 1G\ntrue\n",
        )],
    );
    let out = alice.run(&format!(
        "cp {}/rtl*.rad {}/pending/",
        home.display(),
        spool.root.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the job to be refused", 10.0, || {
        spool
            .find("rtl_gpj")
            .is_some_and(|(state, _)| state == "failed")
    });
    for out in [
        alice.carma(&spool, "status"),
        alice.carma(&spool, "show rtl_gpj"),
        bob.carma(&spool, "status"),
        alice.carma(&spool, "status --json"),
    ] {
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            !text.contains('\u{202E}') && !text.contains('\u{2066}'),
            "{text}"
        );
    }
    let log = spool.daemon_log();
    assert!(log.contains("rtl"));
    assert!(!log.contains('\u{202E}') && !log.contains('\u{2066}'));
    assert!(log.contains("\\u{202e}"), "escaped, not dropped");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_job_cannot_ask_for_endless_oom_reruns() {
    // Hole 5: `retries: 1000000` and a job that prints PyTorch's OOM line
    // re-ran ahead of everyone, without end.
    let (alice, bob, spool) = shared_daemon("");
    let fake = "memory: 1G\nretries: 1000000\n\
                echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2\nexit 1\n";
    let home = spool.user_dir(&alice, "alice-oom", &[("fake.rad", fake)]);
    let out = alice.carma(
        &spool,
        &format!("submit {}", home.join("fake.rad").display()),
    );
    let refused = format!("{}{}", stdout(&out), stderr(&out));
    spool.wait_for("the job to be refused", 10.0, || {
        spool
            .find("fake")
            .is_some_and(|(state, _)| state == "failed")
    });
    let (_, dir) = spool.find("fake").unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert!(
        reason.contains("recovery.user_max_retries"),
        "{reason}\n{refused}"
    );
    assert!(!dir.join("run-1").exists(), "it never ran");
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn one_users_runs_do_not_set_another_users_estimates() {
    // Hole 9: history was keyed by command, summary and batch size alone:
    // alice's 30 GiB run of a job set bob's estimate for the same job.
    let (alice, bob, spool) = shared_daemon("");
    let job = format!(
        "gpus: 1\n{} fake-train --mem 30G --secs 0.3 --smact 0.1\n",
        common::CARMA
    );
    let source = |name: &str| -> String {
        let dir = spool.find(name).unwrap().1;
        let record: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("task.json")).unwrap()).unwrap();
        record["estimate"]["source"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    let first = spool.submit_as(&alice, "alice-h1", &[("h.rad", &job)]);
    spool.wait_for("alice's run", 15.0, || {
        spool.root.join("done").join(&first).exists()
    });
    let again = spool.submit_as(&alice, "alice-h2", &[("h.rad", &job)]);
    let bobs = spool.submit_as(&bob, "bob-h", &[("h.rad", &job)]);
    spool.wait_for("both to end", 20.0, || {
        [&again, &bobs]
            .iter()
            .all(|n| spool.root.join("done").join(n).exists())
    });
    assert!(source(&again).contains("history"), "{}", source(&again));
    assert!(!source(&bobs).contains("history"), "{}", source(&bobs));
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_flood_of_requests_naming_no_task_holds_nobody_up() {
    // Hole 6: each request naming no live task listed every state
    // directory inside the loop: 2,000 junk files in cancel/ stalled
    // everyone for 18 s.
    let (alice, bob, spool) = shared_daemon("");
    // Some history, as a server has.
    for i in 0..20 {
        spool.submit_as(
            &bob,
            &format!("bob-h{i}"),
            &[("h.rad", "memory: 1G\ntrue\n")],
        );
    }
    spool.wait_count("done", 20, 30.0);
    // Hidden names and names that are not UTF-8 too: passed over, they
    // stayed for good, and every look at cancel/ read them all.
    let out = alice.run(&format!(
        "cd {}/cancel && i=0; while [ $i -lt 2000 ]; do : > \"$((i + 100000))-junk\"; \
         : > \"hold.$((i + 100000))-junk\"; : > \".hidden-$i\"; i=$((i + 1)); done; \
         : > \"$(printf 'hold.\\377\\376')\"",
        spool.root.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    still_serves_at_once(&spool, &bob, "1");
    wait_for_cancel_emptied(&spool);
    assert!(
        spool
            .daemon_log()
            .contains("requests naming no task within a minute")
    );
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_flood_of_requests_on_ones_own_task_is_cut_off_and_holds_nobody_up() {
    // Each answered request may write a record and the status file and
    // logged a line: a user changing their own task in a loop kept root's
    // disk busy and could fill the journal past journald's rate limit,
    // which then drops everyone's lines.
    let (alice, bob, spool) = shared_daemon_on("2x40GiB", "");
    running_as(
        &spool,
        &alice,
        "alice-pre",
        "name: pre\nmemory: 1G\nsleep 60\n",
    );
    let next = spool.submit_as(
        &alice,
        "alice-next",
        &[("next.rad", "memory: 1G\nafterok: pre\ntrue\n")],
    );
    let out = alice.run(&format!(
        "cd {}/cancel && i=0; while [ $i -lt 1000 ]; do : > \"priority.-$i.{next}\"; i=$((i + 1)); done",
        spool.root.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for_cancel_emptied(&spool);
    still_serves_at_once(&spool, &bob, "1");
    let log = spool.daemon_log();
    assert!(
        log.contains("600 requests answered within a minute"),
        "{log}"
    );
    let about = format!("(uid {}):", alice.uid);
    let lines = log.lines().filter(|l| l.contains(&about)).count();
    assert!(lines <= 100, "{lines} lines about alice's requests");
    let status = fs::read_to_string(spool.root.join("status.json")).unwrap();
    assert!(
        status.contains("more than 600 requests within a minute"),
        "{status}"
    );
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_user_cannot_fill_roots_disk_with_copies() {
    // Hole 7: `array: 1-200` with an 8 MiB summary left 1.68 GB owned by
    // root in the spool.
    let (alice, bob, spool) = shared_daemon("[queue]\nuser_max_array = 150\n");
    let summary = "x".repeat(8 << 20);
    let job = "model: big.model\nmemory: 1G\narray: 1-140\ntrue\n";
    let (name, said) = spool.submit_refused_as(
        &alice,
        "alice-big",
        &[("big.rad", job), ("big.model", &summary)],
    );
    assert!(said.contains("queue.user_max_spool_mib"), "{said}");
    spool.wait_for("the job to be refused", 10.0, || {
        spool.root.join("failed").join(&name).exists()
    });
    let reason = fs::read_to_string(spool.root.join("failed").join(&name).join("reason")).unwrap();
    assert!(reason.contains("queue.user_max_spool_mib"), "{reason}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        spool.tasks("pending").len() + spool.tasks("done").len(),
        0,
        "no element made"
    );
    let (wide, _) = spool.submit_refused_as(
        &alice,
        "alice-wide",
        &[("w.rad", "memory: 1G\narray: 1-200\ntrue\n")],
    );
    spool.wait_for("the wide array to be refused", 10.0, || {
        spool.root.join("failed").join(&wide).exists()
    });
    let reason = fs::read_to_string(spool.root.join("failed").join(&wide).join("reason")).unwrap();
    assert!(reason.contains("queue.user_max_array"), "{reason}");
    still_serves(&spool, &bob, "1");
}

/// [`shared_daemon`] whose jobs run in cgroups (what the tests of a job's
/// processes need), and alice.
fn daemon_with_cgroups(extra: &str) -> (TestUser, Spool) {
    let (alice, _bob, spool) = shared_daemon(extra);
    let log = spool.daemon_log();
    assert!(log.contains("jobs run in cgroups under"), "{log}");
    (alice, spool)
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_dead_supervisors_job_ends_however_it_hid_its_processes() {
    // A job whose supervisor dies (SIGKILL, the OOM killer) is ended by
    // the daemon. Its leftovers were found by the variables every job
    // carries, which a job can drop: `env -i setsid sleep` outlived its
    // task. The run's cgroup holds it whatever it changed.
    let (alice, spool) = daemon_with_cgroups("");
    let name = spool.submit_as(
        &alice,
        "alice-hide",
        &[(
            "h.rad",
            "memory: 1G\nenv -i setsid sleep 424205 > /dev/null 2>&1 < /dev/null &\nsleep 60\n",
        )],
    );
    spool.wait_for("the job to start its escapee", 10.0, || {
        !sleepers("424205").is_empty()
    });
    let identity = spool
        .root
        .join("running")
        .join(&name)
        .join("run-1/supervisor.json");
    let id: serde_json::Value = serde_json::from_slice(&fs::read(identity).unwrap()).unwrap();
    let supervisor = id["pid"].as_i64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    spool.wait_for("the task to fail", 15.0, || {
        spool.root.join("failed").join(&name).exists()
    });
    // Killed as the task failed; gone a moment later (not waited for).
    spool.wait_for("the hidden sleep to end", 5.0, || {
        sleepers("424205").is_empty()
    });
    assert!(
        spool
            .daemon_log()
            .contains("processes its dead supervisor left"),
        "{}",
        spool.daemon_log()
    );
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_jobs_background_processes_end_with_it() {
    // Hole 10: `setsid sleep 4242 &` left the job's process group and
    // outlived its time limit, its cancellation and its task.
    let (alice, spool) = daemon_with_cgroups("[daemon]\ntime_limit_grace_s = 1\n");
    let escape = |secs: &str, rest: &str| {
        format!("memory: 1G\n{rest}setsid sleep {secs} > /dev/null 2>&1 < /dev/null &\nsleep 0.3\n")
    };
    let limited = spool.submit_as(
        &alice,
        "alice-t",
        &[(
            "t.rad",
            &format!("{}sleep 60\n", escape("424201", "time: 2s\n")),
        )],
    );
    let ended = spool.submit_as(&alice, "alice-e", &[("e.rad", &escape("424202", ""))]);
    let cancelled = spool.submit_as(
        &alice,
        "alice-c",
        &[("c.rad", &format!("{}sleep 60\n", escape("424203", "")))],
    );
    spool.wait_for("the jobs to start their escapees", 10.0, || {
        !sleepers("424203").is_empty()
    });
    let out = alice.carma(&spool, &format!("cancel {cancelled}"));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("all three to end", 20.0, || {
        [&limited, &ended, &cancelled].iter().all(|n| {
            spool.root.join("done").join(n).exists() || spool.root.join("failed").join(n).exists()
        })
    });
    for secs in ["424201", "424202", "424203"] {
        assert!(sleepers(secs).is_empty(), "sleep {secs} outlived its job");
    }
    let exit: serde_json::Value = serde_json::from_slice(
        &fs::read(spool.root.join("done").join(&ended).join("run-1/exit.json")).unwrap(),
    )
    .unwrap();
    assert!(exit["cpu_s"].as_f64().is_some(), "{exit}");
}

/// A perl script (perl-base is in every Debian) that speaks to the
/// daemon's submission socket as `user` would: the test's raw requests.
/// `args` follow the socket's path on its command line.
fn socket_client(
    spool: &Spool,
    user: &TestUser,
    script: &str,
    args: &str,
) -> std::process::Command {
    let file = spool.dir.path().join(format!("client-{}.pl", user.name));
    fs::write(
        &file,
        format!("use strict; use IO::Socket::UNIX;\n{script}"),
    )
    .unwrap();
    let mut command = std::process::Command::new("setpriv");
    command
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .args(["--clear-groups", "sh", "-c"])
        .arg(format!(
            "exec perl {} {} {args}",
            file.display(),
            spool.root.join("submit.sock").display()
        ));
    command
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn the_submission_socket_runs_nobodys_job_as_another_user() {
    // A request is the sender's words: only the kernel says who sent it.
    let (alice, bob, spool) = shared_daemon("");
    let before = next_id(&spool);
    let forge = r#"
my ($path, $owner, $token) = @ARGV;
my $rad = "memory: 1G\nid -u > /tmp/carma-forged-$owner\n";
my $header = qq({"token":"$token","jobs":[{"rad":"x.rad","rad_len":) . length($rad)
    . qq(,"owner":$owner,"workdir":"/tmp"}]});
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $path) or die "connect: $!";
print $s "carma-submit/1\n" . pack("V", length $header) . $header . $rad;
local $/; print scalar <$s>;
"#;
    let own_token = format!("submit-{}-1-2", alice.uid);
    for owner in [bob.uid, 0] {
        let out = socket_client(&spool, &alice, forge, &format!("{owner} {own_token}"))
            .output()
            .unwrap();
        let reply = stdout(&out);
        assert!(
            reply.contains("refused") && reply.contains("only carma's own user"),
            "owner {owner}: {reply} {}",
            stderr(&out)
        );
    }
    // Nor may a request go under another user's token (which decides, after
    // a crash, what became of that user's submission).
    let bobs_token = format!("submit-{}-1-2", bob.uid);
    let out = socket_client(
        &spool,
        &alice,
        forge,
        &format!("{} {bobs_token}", alice.uid),
    )
    .output()
    .unwrap();
    assert!(
        stdout(&out).contains("the sender's uid"),
        "{} {}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(next_id(&spool), before, "no task was made");
    // A stranger's bytes are answered, not taken.
    let junk = r#"
my $s = IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $ARGV[0]) or die "connect: $!";
print $s "GET / HTTP/1.1\r\n\r\n"; local $/; print scalar <$s>;
"#;
    let out = socket_client(&spool, &alice, junk, "").output().unwrap();
    assert!(
        stdout(&out).contains("not a carma-submit/1"),
        "{}",
        stdout(&out)
    );
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn connections_that_never_finish_hold_up_neither_their_user_nor_anyone_else() {
    // Each connection is read by a reader thread of its own, for at most 10 s;
    // a user has 4 at a time. Alice holds all of hers, silent.
    let (alice, bob, spool) = shared_daemon("");
    // Each held connection the daemon gives up on is made again at once.
    let hold = r#"
use IO::Select;
my ($path, $n) = @ARGV; my $held = IO::Select->new;
sub one { $held->add(IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $path) or die "connect: $!"); }
one() for 1 .. $n;
$| = 1; print "held\n";
my $end = time + 60;
while (time < $end) { for my $s ($held->can_read(1)) { $held->remove($s); close $s; one(); } }
"#;
    let mut holder = socket_client(&spool, &alice, hold, "4")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "held\n");
    still_serves_at_once(&spool, &bob, "1");
    // Alice's own submission is declined by the socket and goes by
    // pending/ instead: still taken, still named.
    let name = spool.submit_as(&alice, "alice-1", &[("a.rad", "memory: 1G\ntrue\n")]);
    spool.wait_for("alice's job to end in done/", 15.0, || {
        spool.root.join("done").join(&name).exists()
    });
    assert!(spool.daemon_log().contains("adopted pending/submit-"));
    let _ = holder.kill();
    let _ = holder.wait();
}

/// Bytes of the files below `dir`.
fn bytes_below(dir: &Path) -> u64 {
    common::files_below(dir)
        .iter()
        .filter_map(|p| fs::symlink_metadata(p).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn jobs_refused_over_a_users_limits_leave_no_copies_on_roots_disk() {
    // A user at queue.user_max_tasks hands over job after job, each with
    // an 8 MiB summary: every one is refused, and none may leave its
    // copies behind in failed/ (root's disk, kept for retention_days).
    let (alice, bob, spool) = shared_daemon("[queue]\nuser_max_tasks = 1\n");
    spool.submit_as(
        &alice,
        "alice-hog",
        &[("hog.rad", "memory: 1G\nsleep 424211\n")],
    );
    let summary = "x".repeat(8 << 20);
    let job = "model: big.model\nmemory: 1G\ntrue\n";
    for i in 0..6 {
        let (name, said) = spool.submit_refused_as(
            &alice,
            &format!("alice-big{i}"),
            &[("big.rad", job), ("big.model", &summary)],
        );
        assert!(said.contains("queue.user_max_tasks"), "{said}");
        spool.wait_for("the job to be refused", 10.0, || {
            spool.root.join("failed").join(&name).exists()
        });
    }
    assert!(spool.daemon_log().contains("received big.rad from uid"));
    let held = bytes_below(&spool.root.join("failed"));
    assert!(
        held < 8 << 20,
        "{} MiB of refused jobs' copies kept in failed/",
        held >> 20
    );
    // The hog's GPU, for bob.
    for pid in sleepers("424211") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn short_jobs_with_large_summaries_keep_their_copies_only_up_to_the_cap() {
    // Each job ends at once, so the per-user limits at intake (waiting and
    // running tasks) never bite; what ended tasks keep is root's disk until
    // retention_days. Past queue.user_max_ended_mib, the oldest copies go.
    let (alice, bob, spool) = shared_daemon("[queue]\nuser_max_ended_mib = 10\n");
    let summary = "x".repeat(4 << 20);
    let job = "model: big.model\nmemory: 1G\ntrue\n";
    let mut ended = Vec::new();
    for i in 0..6 {
        let name = spool.submit_as(
            &alice,
            &format!("alice-big{i}"),
            &[("big.rad", job), ("big.model", &summary)],
        );
        spool.wait_for("the job to end", 15.0, || {
            spool.root.join("done").join(&name).exists()
        });
        ended.push(name);
    }
    spool.wait_for("the oldest copies to go", 10.0, || {
        bytes_below(&spool.root.join("done")) <= 10 << 20
    });
    let done = spool.root.join("done");
    assert!(
        !done.join(&ended[0]).join("job").exists(),
        "the oldest kept its copies"
    );
    assert!(
        done.join(&ended[5]).join("job").exists(),
        "the newest lost its copies"
    );
    assert!(
        done.join(&ended[0]).join("task.json").exists(),
        "its record stays"
    );
    let out = alice.carma(&spool, &format!("requeue {}", ended[0]));
    assert!(
        !out.status.success() && stderr(&out).contains("were not kept"),
        "{}",
        stderr(&out)
    );
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn refused_job_files_are_kept_only_up_to_the_cap() {
    // A job file refused as it is taken in is kept beside its reason, for
    // its owner to read; dropped again and again, those copies counted
    // against no limit. They count against queue.user_max_ended_mib now.
    let (alice, bob, spool) = shared_daemon("[queue]\nuser_max_ended_mib = 5\n");
    let comment = format!("# {}\n", "x".repeat(60_000));
    let bad = format!("{}memory: banana\ntrue\n", comment.repeat(15));
    let dir = spool.user_dir(&alice, "alice-bad", &[("bad.rad", &bad)]);
    for i in 0..12 {
        let out = alice.run(&format!(
            "cp {} {}/pending/bad{i}.rad",
            dir.join("bad.rad").display(),
            spool.root.display()
        ));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let failed = spool.root.join("failed");
    spool.wait_for("the twelve to be refused", 20.0, || {
        fs::read_dir(&failed).map_or(0, |d| d.count()) >= 12
    });
    spool.wait_for("what they keep to come under the cap", 10.0, || {
        bytes_below(&failed) <= 6 << 20
    });
    assert!(
        spool
            .daemon_log()
            .contains("its owner's ended tasks keep more than"),
        "{}",
        spool.daemon_log()
    );
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn arrays_handed_in_at_once_are_held_to_a_users_task_limit() {
    // An array counted as one task until its elements were taken in, a
    // turn later: one submit of 64 arrays of 1,000 passed
    // queue.user_max_tasks (10,000) 64 times over.
    let (_alice, bob, spool) = shared_daemon("[queue]\nuser_max_tasks = 50\n");
    let rad = "memory: 1G\narray: 1-20\nsleep 424213\n";
    let files: Vec<(String, &str)> = (1..=4).map(|i| (format!("a{i}.rad"), rad)).collect();
    let named: Vec<(&str, &str)> = files.iter().map(|(f, t)| (f.as_str(), *t)).collect();
    let home = spool.user_dir(&bob, "bob-arrays", &named);
    let paths: Vec<String> = files
        .iter()
        .map(|(f, _)| home.join(f).display().to_string())
        .collect();
    let out = bob.carma(&spool, &format!("submit {}", paths.join(" ")));
    assert!(!out.status.success(), "all four taken: {}", stdout(&out));
    assert!(
        stderr(&out).contains("queue.user_max_tasks"),
        "{}",
        stderr(&out)
    );
    let held: usize = ["pending", "running"]
        .iter()
        .map(|state| spool.tasks(state).len())
        .sum();
    assert_eq!(held, 40, "two arrays of 20 taken, two refused");
    for pid in sleepers("424213") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn requeuing_ended_tasks_is_held_to_a_users_limits() {
    // queue.user_max_tasks bounds a user's waiting and running tasks; a
    // requeued task that ended is a new waiting one, and was taken in
    // unchecked: a user could wait out their ended tasks and requeue
    // them all past the limit.
    let (alice, bob, spool) = shared_daemon("[queue]\nuser_max_tasks = 1\n");
    let ended = done_as(&spool, &alice, "alice-1", "memory: 1G\ntrue\n");
    spool.submit_as(
        &alice,
        "alice-hog",
        &[("hog.rad", "memory: 1G\nsleep 424212\n")],
    );
    spool.wait_for("the hog to run", 15.0, || !sleepers("424212").is_empty());
    let out = alice.carma(&spool, &format!("requeue {ended}"));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the requeued task to be refused", 10.0, || {
        spool.root.join("failed").join(&ended).exists()
    });
    let reason = fs::read_to_string(spool.root.join("failed").join(&ended).join("reason")).unwrap();
    assert!(reason.contains("queue.user_max_tasks"), "{reason}");
    // Its files are kept: requeued once under the limit, it runs.
    for pid in sleepers("424212") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    spool.wait_for("the hog to end", 15.0, || {
        spool.tasks("running").is_empty() && spool.tasks("pending").is_empty()
    });
    let out = alice.carma(&spool, &format!("requeue {ended}"));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the requeued task to run again", 15.0, || {
        spool.root.join("done").join(&ended).exists()
    });
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_task_requeued_again_and_again_counts_its_runs_against_its_users_limits() {
    // Each run keeps root's copy of the job's script (`launch.json`), and
    // a requeue was counted by its job files alone: a user requeueing one
    // task in a loop filled root's disk a script at a time.
    let (alice, bob, spool) = shared_daemon("[queue]\nuser_max_spool_mib = 1\n");
    let line = format!(": {}\n", "x".repeat(60_000));
    let rad = format!("memory: 1G\n{}", line.repeat(5));
    let name = done_as(&spool, &alice, "alice-big", &rad);
    let failed = spool.root.join("failed").join(&name);
    let mut runs = 1;
    while !failed.exists() {
        assert!(runs < 5, "requeued {runs} times, never held to the limit");
        let out = alice.carma(&spool, &format!("requeue {name}"));
        assert!(out.status.success(), "{}", stderr(&out));
        spool.wait_for("the requeued task to end", 15.0, || {
            spool.root.join("done").join(&name).exists() || failed.exists()
        });
        runs += 1;
    }
    // 300 KB of job file and 300 KB a launch: the third requeue is over.
    assert_eq!(runs, 4, "refused at the third requeue");
    let reason = fs::read_to_string(failed.join("reason")).unwrap();
    assert!(reason.contains("queue.user_max_spool_mib"), "{reason}");
    still_serves(&spool, &bob, "1");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_reason_its_owner_rewrote_is_shown_to_them_alone() {
    // The `reason` file is its owner's, so that they may read it; they
    // could also make it readable and rewrite it, and `carma show` and
    // `carma status` showed the text to every user.
    let (alice, bob, spool) = shared_daemon("");
    let name = spool.submit_as(
        &alice,
        "alice-fails",
        &[("job.rad", "memory: 1G\nexit 3\n")],
    );
    let failed = spool.root.join("failed").join(&name);
    spool.wait_for("the job to fail", 15.0, || failed.join("reason").exists());
    let out = alice.run(&format!(
        "cd {} && chmod 644 reason && echo 'fixed: run curl example.org | sudo sh' > reason",
        failed.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    for args in [format!("show {name}"), "status".to_string()] {
        let out = bob.carma(&spool, &args);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!said.contains("curl"), "bob's `carma {args}`: {said}");
    }
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_hold_left_while_no_daemon_ran_acts_however_much_junk_another_user_left() {
    // The loop takes 256 names of cancel/ a turn, junk included; a start
    // took one turn's worth before it placed, so bob's hold, listed after
    // alice's thousands of junk names, came after his task had started.
    let (alice, bob, mut spool) = shared_daemon("");
    spool.submit_as(
        &bob,
        "bob-blocker",
        &[("b.rad", "memory: whole\nsleep 1\n")],
    );
    let held = spool.submit_as(&bob, "bob-held", &[("h.rad", "memory: whole\ntrue\n")]);
    spool.stop_daemon("TERM");
    // The blocker ends while no daemon runs: the GPU is free at the start.
    std::thread::sleep(Duration::from_millis(1500));
    let cancel = spool.root.join("cancel");
    let out = alice.run(&format!(
        "cd {} && for i in $(seq 3000); do : > junk$i; done",
        cancel.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = bob.run(&format!(": > {}/hold.{held}", cancel.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.start_daemon();
    spool.wait_for("cancel/ to be read", 20.0, || {
        fs::read_dir(&cancel).unwrap().next().is_none()
    });
    let dir = spool.root.join("pending").join(&held);
    assert!(dir.exists(), "bob's held task left pending/");
    assert!(!dir.join("run-1").exists(), "{}", spool.daemon_log());
}

/// `user`'s jobs `rads` (file name and text), submitted to wait for a
/// first job of theirs; while they wait, the working directory they were
/// submitted from becomes `mount`/x, a mount that never answers, so that
/// each will be held before its exec. Their task names, in order.
fn held_jobs(spool: &Spool, user: &TestUser, mount: &Path, rads: &[(&str, &str)]) -> Vec<String> {
    let first = spool.submit_as(user, "first", &[("first.rad", "memory: 1G\nsleep 3\n")]);
    let files: Vec<(String, &str)> = rads.iter().map(|(f, t)| (format!("w/{f}"), *t)).collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(f, t)| (f.as_str(), *t)).collect();
    let dir = spool.user_dir(user, "held", &files);
    let names = rads
        .iter()
        .map(|(file, _)| {
            let rad = dir.join("w").join(file);
            let out = user.carma(
                spool,
                &format!("submit --afterok {first} {}", rad.display()),
            );
            assert!(out.status.success(), "{}", stderr(&out));
            stdout(&out).trim().to_owned()
        })
        .collect();
    let out = user.run(&format!(
        "cd {} && mv w w.real && ln -s {} w",
        dir.display(),
        mount.join("x").display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    names
}

#[test]
#[ignore = "needs root: mounts a FUSE file system and attacks as a user (.ci/run runs it)"]
fn a_job_whose_own_directory_fails_to_enter_is_retried_only_a_few_times() {
    // A start that failed with an errno that passes by itself (EIO,
    // EAGAIN) was retried: the task went back to the head of the queue,
    // everyone's launches paused, and each try left a new run directory
    // on root's disk, for good, as a user's FUSE working directory may
    // answer so to every lookup. Once the process is the job's, such a
    // failure is retried only a few times.
    let (_alice, bob, spool) = shared_daemon("");
    let at = spool.dir.path().join("fuse");
    let fuse = common::silent_fuse::SilentFuse::failing(&at, nix::libc::EIO);
    let names = held_jobs(&spool, &bob, &at, &[("eio.rad", "memory: 1G\ntrue\n")]);
    let reason = spool.root.join("failed").join(&names[0]).join("reason");
    spool.wait_for("the job to fail", 20.0, || reason.exists());
    let reason = fs::read_to_string(reason).unwrap();
    assert!(
        reason.contains("could not start 3 times") && reason.contains("Input/output error"),
        "{reason}"
    );
    let runs = fs::read_dir(spool.root.join("failed").join(&names[0]))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
        .count();
    assert_eq!(runs, 3, "{}", spool.daemon_log());
    still_serves_at_once(&spool, &bob, "1");
    drop(fuse);
}

#[test]
#[ignore = "needs root: mounts a FUSE file system and attacks as a user (.ci/run runs it)"]
fn a_job_held_in_the_kernel_after_its_exec_still_ends_at_its_time_limit() {
    // A job reading from a FUSE file system that never answers (its
    // user's own) outlives SIGKILL. Its supervisor waited for it for good,
    // and the daemon's backstop killed only supervisors whose job had not
    // started: the run held its GPU past its time limit, for good.
    let (_alice, bob, spool) = shared_daemon("[daemon]\ntime_limit_grace_s = 1\n");
    let at = spool.dir.path().join("fuse");
    let fuse = common::silent_fuse::SilentFuse::mount(&at);
    // Read by bash itself, the job's first process.
    let rad = format!("memory: 40G\ntime: 2s\n. {}/x\n", at.display());
    let name = spool.submit_as(&bob, "held", &[("held.rad", &rad)]);
    let reason = spool.root.join("failed").join(&name).join("reason");
    spool.wait_for("the held job to end", 40.0, || reason.exists());
    let reason = fs::read_to_string(reason).unwrap();
    assert!(reason.contains("time limit"), "{reason}");
    // Its whole GPU is free again.
    still_serves(&spool, &bob, "1");
    drop(fuse);
}

#[test]
#[ignore = "needs root: mounts a FUSE file system and attacks as a user (.ci/run runs it)"]
fn a_job_held_before_its_exec_is_killed_at_its_time_limit_and_at_its_cancellation() {
    // Between its switch to the user's ids and its exec, a job's first
    // process is its user's to hold: with SIGSTOP, or with a working
    // directory on a FUSE mount that never answers (here). Its supervisor
    // waited with it, its time limit not counting and a cancel queued,
    // and the task held its GPU for good. The daemon now kills such a
    // job, with cgroups and without.
    let (_alice, bob) = two_users();
    let spools = ["", "job_cgroups = false\n"].map(|extra| {
        // A GPU each: a job joins a busy GPU only once it is seen busy.
        let mut spool = Spool::shared(
            "2x40GiB",
            &format!("[daemon]\ntime_limit_grace_s = 1\n{extra}"),
        );
        spool.start_daemon();
        spool
    });
    // Dropped first, before the spools' directories are removed.
    let fuse = common::silent_fuse::SilentFuse::mount(&spools[0].dir.path().join("fuse"));
    let mut held = Vec::new();
    for spool in &spools {
        let names = held_jobs(
            spool,
            &bob,
            &spools[0].dir.path().join("fuse"),
            &[
                ("limited.rad", "memory: 1G\ntime: 2s\ntrue\n"),
                ("cancelled.rad", "memory: 1G\ntrue\n"),
            ],
        );
        let [limited, cancelled] = <[String; 2]>::try_from(names).unwrap();
        held.push((spool, limited, cancelled));
    }
    for (spool, _, cancelled) in &held {
        spool.wait_for("the held job to be launched", 15.0, || {
            spool.root.join("running").join(cancelled).exists()
        });
        std::thread::sleep(Duration::from_millis(500));
        let out = bob.carma(spool, &format!("cancel {cancelled}"));
        assert!(
            out.status.success(),
            "{}\n{}",
            stderr(&out),
            spool.daemon_log()
        );
    }
    for (spool, limited, cancelled) in &held {
        let failed =
            |name: &str| fs::read_to_string(spool.root.join("failed").join(name).join("reason"));
        spool.wait_for("both held jobs to fail", 60.0, || {
            failed(limited).is_ok() && failed(cancelled).is_ok()
        });
        let (limit, cancel) = (failed(limited).unwrap(), failed(cancelled).unwrap());
        assert!(limit.contains("time limit"), "{limit}");
        assert!(cancel.contains("cancel"), "{cancel}");
        spool.assert_logged("without its supervisor ending it");
        // Held in the kernel by the mount, the job's process outlives
        // SIGKILL: its supervisor, held with it, was killed instead.
        spool.assert_logged("the supervisor was killed");
        still_serves_at_once(spool, &bob, "after");
    }
    drop(fuse);
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_lease_on_a_jobs_output_holds_up_nobody() {
    // The daemon reads a failed job's stderr, its user's file, for why it
    // failed. A write lease its user took on it held each open for the
    // lease's break time (45 s), and the daemon with it.
    let (alice, bob, spool) = shared_daemon("");
    let name = running_as(
        &spool,
        &alice,
        "alice-lease",
        "memory: 1G\necho boom >&2\nexec 2>&-\nsleep 2\nexit 3\n",
    );
    let stderr = spool.root.join("running").join(&name).join("run-1/stderr");
    // F_SETLEASE (1024), F_WRLCK (1): granted once nobody else has the
    // file open, which the job no longer does; SIGIO, which says a lease
    // is being broken, ignored.
    let mut holder = socket_client(
        &spool,
        &alice,
        "$SIG{IO} = 'IGNORE'; $| = 1; shift;\n\
         open(my $f, '<', $ARGV[0]) or die \"open: $!\";\n\
         until (fcntl($f, 1024, 1)) { select(undef, undef, undef, 0.01) }\n\
         print \"held\\n\"; sleep 120;\n",
        &stderr.display().to_string(),
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut said = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut said,
    )
    .unwrap();
    assert_eq!(said, "held\n");
    spool.wait_for("alice's job to fail", 10.0, || {
        spool.root.join("failed").join(&name).exists()
    });
    still_serves_at_once(&spool, &bob, "lease");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn naming_another_users_summary_neither_copies_nor_removes_it() {
    // A summary carma copied into the tasks that named it is removed from
    // pending/ after a grace. alice's job named bob's summary, which bob
    // had dropped for a job of his still to come: carma marked it copied
    // (though it copies only the owner's) and removed it.
    let (alice, bob, spool) = shared_daemon("");
    let pending = spool.root.join("pending");
    let out = bob.run(&format!(
        "umask 077; printf 'conv 3x3 64\\n' > {}/bob-model.txt",
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = alice.run(&format!(
        "printf 'name: nosy\\nmodel: bob-model.txt\\nmemory: 1G\\ntrue\\n' > {}/nosy.rad",
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("alice's job to end", 15.0, || {
        ["done", "failed"].iter().any(|state| {
            spool
                .tasks(state)
                .iter()
                .any(|task| task.ends_with("-nosy"))
        })
    });
    let (state, task) = spool.find("-nosy").unwrap();
    let copies: Vec<_> = fs::read_dir(task.join("job"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(copies, [OsStr::new("nosy.rad")], "in {state}/");
    // Unclaimed by any job of bob's, it is kept for him with its reason.
    spool.wait_for("bob's summary to be set aside", 20.0, || {
        set_aside(&spool, OsStr::new("bob-model.txt")).is_some()
    });
    let (kept, reason) = set_aside(&spool, OsStr::new("bob-model.txt")).unwrap();
    assert_eq!(fs::read(&kept).unwrap(), b"conv 3x3 64\n");
    assert!(reason.contains("no job in pending/ named it"), "{reason}");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_file_put_under_a_copied_summarys_name_is_not_removed_in_its_place() {
    // A summary carma copied is removed from pending/ after a grace, by
    // name: alice removed hers once her job had it, bob dropped a file
    // under the same name, and carma removed bob's, unkept.
    let (alice, bob, spool) = shared_daemon("");
    let pending = spool.root.join("pending");
    let out = alice.run(&format!(
        "cd {} && printf 'conv 3x3 64\\n' > m.txt && \
         printf 'name: mine\\nmodel: m.txt\\nmemory: 1G\\ntrue\\n' > mine.rad",
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("alice's job to end", 15.0, || {
        spool.tasks("done").iter().any(|t| t.ends_with("-mine"))
    });
    let (_, task) = spool.find("-mine").unwrap();
    assert!(task.join("job").join("m.txt").exists(), "alice's copy");
    let out = alice.run(&format!("rm {}/m.txt", pending.display()));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = bob.run(&format!(
        "umask 077; printf 'bobs\\n' > {}/m.txt",
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("bob's file to be kept for him", 20.0, || {
        set_aside(&spool, OsStr::new("m.txt")).is_some()
    });
    let (kept, reason) = set_aside(&spool, OsStr::new("m.txt")).unwrap();
    assert_eq!(fs::read(&kept).unwrap(), b"bobs\n");
    assert!(reason.contains("no job in pending/ named it"), "{reason}");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn the_hook_for_a_refused_job_runs_as_its_owner_not_as_root() {
    // A task refused before it had an account to run as was notified as
    // the daemon's user: the configured hook ran as root, in the owner's
    // working directory.
    let notes = tempfile::tempdir().unwrap();
    let open = std::os::unix::fs::PermissionsExt::from_mode(0o1777);
    fs::set_permissions(notes.path(), open).unwrap();
    let (alice, _bob, spool) = shared_daemon(&format!(
        "[daemon]\nnotify = \"id -u > {}/$CARMA_JOB_NAME\"\n",
        notes.path().display()
    ));
    // Run in its owner's home (the task never ran: it has no work/).
    fs::create_dir_all(&alice.home).unwrap();
    std::os::unix::fs::chown(&alice.home, Some(alice.uid), Some(alice.gid)).unwrap();
    let out = alice.run(&format!(
        "printf 'memory: 1G\\nafterok: nosuchjob\\ntrue\\n' > {}/typo.rad",
        spool.root.join("pending").display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let note = notes.path().join("typo");
    spool.wait_for("the refused job's notification", 15.0, || {
        fs::read_to_string(&note).is_ok_and(|n| n.ends_with('\n'))
    });
    assert_eq!(
        fs::read_to_string(&note).unwrap().trim(),
        alice.uid.to_string()
    );
}

/// Seconds of CPU the process `pid` has used (user and system).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn submissions_that_cannot_be_moved_or_copied_are_refused_and_nothing_spins() {
    // `pending/submit-<247 bytes>` could not be renamed to
    // `staging/incoming-<name>` (too long a name), nor could a submission
    // whose `.rad` names itself as its model be copied: each was put back
    // and tried again for ever, and once the first was removed its retry
    // stayed due, a rescan of `pending/` at every turn of the loop.
    let (alice, bob, spool) = shared_daemon("");
    let pending = spool.root.join("pending");
    let prefix = format!("submit-{}-", bob.uid);
    let long = format!("{prefix}{}", "a".repeat(247 - prefix.len()));
    let own = format!("{prefix}self");
    // Named after alice: no submission of hers, and not adopted as one.
    let forged = format!("submit-{}-1-1", alice.uid);
    let out = bob.run(&format!(
        "cd {} && mkdir {long} && printf 'memory: 1G\\ntrue\\n' > {long}/job.rad && \
         mkdir {own} && printf 'memory: 1G\\nmodel: job.rad\\ntrue\\n' > {own}/job.rad && \
         mkdir {forged} && printf 'memory: 1G\\ntrue\\n' > {forged}/job.rad",
        pending.display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("all three to leave pending/", 10.0, || {
        [&long, &own, &forged]
            .iter()
            .all(|e| !pending.join(e).exists())
    });
    spool.assert_logged(&format!("adopted pending/{own}"));
    // Leaving pending/ is the claim; being set aside in failed/ follows it.
    spool.wait_for("the forged one to be set aside", 10.0, || {
        set_aside(&spool, OsStr::new(&forged)).is_some()
    });
    spool.wait_for("the long one to be set aside", 10.0, || {
        spool.tasks("failed").iter().any(|t| {
            fs::read_to_string(spool.root.join("failed").join(t).join("reason"))
                .is_ok_and(|r| r.contains("did not make"))
        })
    });
    let daemon = spool.daemon_pid().unwrap();
    let before = cpu_seconds(daemon);
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_seconds(daemon) - before;
    assert!(
        used < 1.0,
        "the daemon used {used:.2} s of CPU in 3 s, idle"
    );
    still_serves_at_once(&spool, &bob, "spin");
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_dependency_by_name_is_the_owners_task_whatever_others_name_theirs() {
    // A name names the newest of its owner's tasks of that name, never
    // another user's; each dependency read the record of every ended task
    // of that name, whoever's, and copied and sorted every task the
    // daemon knew.
    let (alice, bob, spool) = shared_daemon("");
    let bobs = done_as(&spool, &bob, "bob-prep", "name: prep\nmemory: 1G\ntrue\n");
    let mut alices = Vec::new();
    for i in 0..3 {
        alices.push(spool.submit_as(
            &alice,
            &format!("alice-prep-{i}"),
            &[("prep.rad", "memory: 1G\ntrue\n")],
        ));
    }
    spool.wait_count("done", 4, 20.0);
    let train = spool.submit_as(
        &bob,
        "bob-train",
        &[("train.rad", "memory: 1G\nafterok: prep\ntrue\n")],
    );
    spool.wait_for("bob's train to end", 15.0, || {
        spool.root.join("done").join(&train).exists()
    });
    let record: serde_json::Value = serde_json::from_slice(
        &fs::read(spool.root.join("done").join(&train).join("task.json")).unwrap(),
    )
    .unwrap();
    let waited = record["after"][0]["task"].as_u64().unwrap();
    assert_eq!(
        waited.to_string(),
        bobs.split('-').next().unwrap().trim_start_matches('0')
    );
    // alice has no train: a name of bob's is not hers.
    let (name, _) = spool.submit_refused_as(
        &alice,
        "alice-train",
        &[("train.rad", "memory: 1G\nafterok: train\ntrue\n")],
    );
    spool.wait_for("alice's train to be refused", 10.0, || {
        spool.root.join("failed").join(&name).exists()
    });
    let reason = fs::read_to_string(spool.root.join("failed").join(&name).join("reason")).unwrap();
    assert!(
        reason.contains("no task of yours has this job name"),
        "{reason}"
    );
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_flood_of_junk_drops_waits_on_its_owners_quota_not_roots_disk() {
    // Each drop carma refuses becomes a task in failed/ (its record, its
    // reason: inodes on root's disk), and a user can drop junk by the
    // thousand a second. Past 100 refusals a minute, a user's drops wait
    // in pending/, where they are theirs.
    let (alice, bob, spool) = shared_daemon("");
    let out = alice.run(&format!(
        "cd {} && i=0; while [ $i -lt 1500 ]; do echo 'batch_sise: 3' > bad-$i.rad; i=$((i + 1)); done",
        spool.root.join("pending").display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("the limit to be said", 15.0, || {
        spool
            .daemon_log()
            .contains("100 drops refused within a minute")
    });
    still_serves_at_once(&spool, &bob, "junk");
    std::thread::sleep(Duration::from_secs(2));
    let refused = spool.tasks("failed").len();
    assert!(
        (100..=100 + 512 + 1).contains(&refused),
        "{refused} refused in the first minute"
    );
    let waiting = fs::read_dir(spool.root.join("pending"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("bad-"))
        .count();
    assert_eq!(refused + waiting, 1500, "none lost");
}

#[test]
#[ignore = "needs root: mounts a FUSE file system and attacks as a user (.ci/run runs it)"]
fn a_cancel_asked_before_the_daemon_died_still_ends_a_held_job() {
    // The backstop's deadline for a cancel lived in the daemon alone: a
    // daemon started after it held a job held before its exec to no
    // deadline at all.
    let (_alice, bob, mut spool) = shared_daemon("");
    let fuse = common::silent_fuse::SilentFuse::mount(&spool.dir.path().join("fuse"));
    let fuse_dir = spool.dir.path().join("fuse");
    let held = held_jobs(
        &spool,
        &bob,
        &fuse_dir,
        &[("held.rad", "memory: 1G\ntrue\n")],
    )
    .remove(0);
    spool.wait_for("the held job to be launched", 15.0, || {
        spool
            .root
            .join("running")
            .join(&held)
            .join("run-1/supervisor.json")
            .exists()
    });
    let out = bob.carma(&spool, &format!("cancel --wait 0 {held}"));
    assert!(
        spool
            .root
            .join("running")
            .join(&held)
            .join("run-1/stop_asked")
            .exists(),
        "{}",
        stderr(&out)
    );
    spool.stop_daemon("KILL");
    spool.start_daemon();
    spool.wait_for("the held job to fail as cancelled", 30.0, || {
        spool.root.join("failed").join(&held).exists()
    });
    let reason = fs::read_to_string(spool.root.join("failed").join(&held).join("reason")).unwrap();
    assert!(reason.contains("cancel"), "{reason}");
    drop(fuse);
}

/// Whether something is mounted on `at`, as this process's mount table
/// says (the path whole, followed by the field's end).
fn mounted(at: &Path) -> bool {
    let table = fs::read("/proc/self/mountinfo").unwrap();
    let point = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::as_bytes(at.as_os_str());
    table
        .windows(point.len() + 1)
        .any(|w| w[..point.len()] == *point && w[point.len()] == b' ')
}

#[test]
#[ignore = "needs root: mounts a FUSE file system and attacks as a user (.ci/run runs it)"]
fn a_mount_in_pending_is_taken_away_and_never_holds_the_daemon() {
    // Where users may mount with `allow_other`, a directory of bob's in
    // pending/ with a FUSE file system that never answers mounted on it
    // held the daemon's first look at it (`lstat`), and every user's jobs
    // with it, for good.
    let (_alice, bob, spool) = shared_daemon("");
    // A name that is not UTF-8 made the mount table unreadable as text.
    let at = spool
        .root
        .join("pending")
        .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"bobs-mount-\xff"));
    // Stopped while the mount is made, the daemon first looks at the
    // directory once it is a mount.
    spool.signal_daemon("STOP");
    fs::create_dir(&at).unwrap();
    std::os::unix::fs::chown(&at, Some(bob.uid), Some(bob.gid)).unwrap();
    let fuse = common::silent_fuse::SilentFuse::mount(&at);
    spool.signal_daemon("CONT");
    still_serves(&spool, &bob, "1");
    spool.wait_for("the mount to be taken away", 5.0, || !mounted(&at));
    spool.assert_logged("a fuse mount of uid 0 where the daemon looks in the spool; taken away");
    drop(fuse);
}

#[test]
#[ignore = "needs root: mounts a FUSE file system and attacks as a user (.ci/run runs it)"]
fn a_mount_on_what_a_task_gives_its_user_is_taken_away_and_one_inside_work_stays() {
    // A task directory gives its user `work/` (a job dropped as a bare
    // file), each run's `stdout` and `stderr`, the reason and the owner's
    // copy; the daemon reads the end of `stderr` when a run fails and
    // hands `work/` over again at a re-run, through whatever is mounted
    // there. A file system that never answers held the loop for good.
    let (_alice, bob, spool) = shared_daemon("");
    let dir = spool.user_dir(
        &bob,
        "bob-drop",
        &[(
            "sleeper.rad",
            "memory: 1G
sleep 60
",
        )],
    );
    fs::rename(
        dir.join("sleeper.rad"),
        spool.root.join("pending/sleeper.rad"),
    )
    .unwrap();
    spool.wait_for("the job to run", 10.0, || {
        spool
            .find("sleeper")
            .is_some_and(|(state, _)| state == "running")
    });
    let (_, task) = spool.find("sleeper").unwrap();
    // The job's data, mounted inside its `work/`: its own, left alone.
    let data = task.join("work/data");
    let kept = common::silent_fuse::SilentFuse::failing(&data, nix::libc::EIO);
    let run = task.join("run-1");
    let fuse = common::silent_fuse::SilentFuse::mount(&run);
    let said = "run-1: a fuse mount of uid 0 where the daemon looks in the spool; taken away";
    spool.wait_for("the mount on run-1 to be taken away", 5.0, || {
        !mounted(&run) && spool.daemon_log().contains(said)
    });
    assert!(mounted(&data), "the job's own mount inside work/ stays");
    // Unmounted where it is, before the task moves on with it.
    drop(kept);
    // The run fails: the daemon reads the end of its stderr.
    let out = spool
        .carma()
        .args(["cancel", &task.file_name().unwrap().to_string_lossy()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    still_serves(&spool, &bob, "1");
    drop(fuse);
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn a_users_subordinate_ids_share_their_limits() {
    // With `newuidmap` (a rootless container), a user acts as any of
    // their subordinate ids (`/etc/subuid`), and each id had limits of its
    // own: 15 of them got 15 times the refused drops a minute.
    let (alice, bob, spool) = shared_daemon("");
    let first = 600_000;
    let line = format!("{}:{first}:100\n", bob.name);
    // Taken out again however the test ends.
    struct Subuid(String);
    impl Drop for Subuid {
        fn drop(&mut self) {
            if let Ok(text) = fs::read_to_string("/etc/subuid") {
                let _ = fs::write("/etc/subuid", text.replace(&self.0, ""));
            }
        }
    }
    let subuid = fs::read_to_string("/etc/subuid").unwrap_or_default();
    let _added = (!subuid.contains(&line)).then(|| {
        let mut file = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open("/etc/subuid")
            .unwrap();
        std::io::Write::write_all(&mut file, line.as_bytes()).unwrap();
        Subuid(line.clone())
    });
    let made = spool.dir.path().join("made");
    fs::create_dir(&made).unwrap();
    for id in 0..15u32 {
        for i in 0..100 {
            let path = made.join(format!("bad-{id}-{i}.rad"));
            fs::write(&path, "batch_sise: 3\n").unwrap();
            std::os::unix::fs::chown(&path, Some(first + id), Some(first + id)).unwrap();
        }
    }
    for entry in fs::read_dir(&made).unwrap().flatten() {
        fs::rename(
            entry.path(),
            spool.root.join("pending").join(entry.file_name()),
        )
        .unwrap();
    }
    spool.wait_for("the limit to be said", 15.0, || {
        spool.daemon_log().contains(&format!(
            "uid {}: 100 drops refused within a minute",
            bob.uid
        ))
    });
    // Bob's own jobs wait as well, now; everyone else's do not.
    still_serves_at_once(&spool, &alice, "subordinate");
    std::thread::sleep(Duration::from_secs(2));
    let refused = spool.tasks("failed").len();
    assert!(
        (100..=100 + 512 + 1).contains(&refused),
        "{refused} refused in the first minute"
    );
}

#[test]
#[ignore = "needs root: makes users and attacks as them (.ci/run runs it)"]
fn jobs_refused_over_the_socket_count_as_refused_drops() {
    // Each job refused is a task in failed/ (a record and a reason on
    // root's disk) and a line in the journal; dropped files were held to
    // 100 refusals a minute, jobs handed over the socket were not.
    let (alice, bob, spool) = shared_daemon("");
    let files: Vec<(String, &str)> = (0..60)
        .map(|i| {
            (
                format!("r{i}.rad"),
                "memory: 1G\nafterok: no-such-task\ntrue\n",
            )
        })
        .collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (n.as_str(), *t)).collect();
    let dir = spool.user_dir(&alice, "alice-refused", &files);
    let submit = || alice.carma(&spool, &format!("submit {}/*.rad", dir.display()));
    for _ in 0..2 {
        let out = submit();
        assert!(stderr(&out).contains("will not run"), "{}", stderr(&out));
    }
    let out = submit();
    assert!(!out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("not submitted: more than 100 of its owner's jobs were refused"),
        "{}",
        stderr(&out)
    );
    assert_eq!(spool.tasks("failed").len(), 120);
    // From then on until the minute is over, a request is answered as it
    // is read: its jobs were written and flushed by root, each given a
    // number, and then thrown away.
    let numbered = next_id(&spool);
    let out = submit();
    assert!(
        stderr(&out).contains("not submitted: more than 100 of its owner's jobs were refused"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        next_id(&spool),
        numbered,
        "no job of the request was written"
    );
    still_serves_at_once(&spool, &bob, "refused");
}
