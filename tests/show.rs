//! `carma show`: a failed job tells its owner why, from carma's records
//! and the end of its stderr, and tells nobody else.

mod common;

use std::fs;

use common::{Spool, fake_job, stderr, stdout, two_users};

fn show_json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "carma show: {}", stderr(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn show_says_why_a_job_failed_and_status_lists_the_reason() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let failing = "name: broken\nmemory: 1G\necho starting\n\
                   printf 'line %s\\n' 1 2 3 >&2\n\
                   echo 'ValueError: bad input' >&2\nexit 2\n";
    let name = spool.submit("broken.rad", failing);
    // Asks for 50 GiB of a 40 GiB GPU while declaring 1 GiB: OOM, once
    // more on an idle GPU, then failed.
    let oom = spool.submit(
        "oom.rad",
        &fake_job("oom", "memory: 1G\nretries: 1\n", "50G", 0.2),
    );
    spool.wait_count("failed", 2, 30.0);

    let out = spool.carma().args(["show", &name]).output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let me = nix::unistd::getuid();
    let my_name = nix::unistd::User::from_uid(me).unwrap().unwrap().name;
    for want in [
        format!("{name}: failed\n"),
        "  reason     job failed: exit status 2: ValueError: bad input\n".into(),
        format!("  owner      {my_name} (uid {me})\n"),
        "  estimate   1GiB per GPU, from declared".into(),
        "\nrun-1: GPU 0, started ".into(),
        ", exit status 2 after ".into(),
        ", no OOM".into(),
        "  stderr (all):\n    line 1\n    line 2\n    line 3\n    ValueError: bad input\n".into(),
    ] {
        assert!(text.contains(&want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("run-2"), "{text}");
    // Where the run had a cgroup of its own (as root), what it measured:
    // its processes' CPU time.
    if spool.daemon_log().contains("jobs run in cgroups under") {
        assert!(text.contains(" CPU s"), "{text}");
    }

    // By the job's name (the one that ended), as JSON, two lines of stderr.
    let view = show_json(
        &spool
            .carma()
            .args(["show", "broken", "--json", "-n", "2"])
            .output()
            .unwrap(),
    );
    assert_eq!(view["name"], name.as_str());
    assert_eq!(view["state"], "failed");
    assert_eq!(view["runs"][0]["code"], 2);
    assert_eq!(view["runs"][0]["oom"], false);
    assert_eq!(
        view["runs"][0]["stderr_tail"],
        serde_json::json!(["line 3", "ValueError: bad input"])
    );
    assert_eq!(view["record_error"], serde_json::Value::Null);

    // Every run of the OOM task, each out of memory.
    let view = show_json(
        &spool
            .carma()
            .args(["show", &oom, "--json"])
            .output()
            .unwrap(),
    );
    let runs = view["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{view}");
    assert!(runs.iter().all(|r| r["oom"] == true), "{view}");

    let status = stdout(&spool.carma().arg("status").output().unwrap());
    assert!(
        status.contains(&format!(
            "\n  {name}  job failed: exit status 2: ValueError: bad input\n"
        )),
        "{status}"
    );
    assert!(status.contains(&format!("\n  {oom}  ")), "{status}");

    let missing = spool.carma().args(["show", "nosuchjob"]).output().unwrap();
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("no task `nosuchjob`"),
        "{}",
        stderr(&missing)
    );
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_user_sees_their_own_failure_and_nobody_elses() {
    let (alice, bob) = two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    let home = spool.user_dir(
        &alice,
        "alice-show",
        &[(
            "f.rad",
            "name: private\nmemory: 1G\necho 'alice-secret-line' >&2\nexit 3\n",
        )],
    );
    let out = alice.carma(&spool, &format!("submit {}", home.join("f.rad").display()));
    assert!(out.status.success(), "{}", stderr(&out));
    let name = stdout(&out).trim().to_owned();
    spool.wait_count("failed", 1, 20.0);

    // Alice: everything about her task, though carma's record is root's
    // (from the copy carma gave her when it ended), and where its output
    // is.
    let out = alice.carma(&spool, &format!("show {name}"));
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let run_dir = spool.root.join("failed").join(&name).join("run-1");
    for want in [
        format!("{name}: failed\n"),
        "  reason     job failed: exit status 3: alice-secret-line\n".into(),
        "  owner      carma-alice (uid ".into(),
        "  submitted  ".into(),
        "  ended      ".into(),
        "  estimate   1GiB per GPU, from declared".into(),
        "\nrun-1: GPU 0, started ".into(),
        ", exit status 3 after ".into(),
        format!("  stdout at {}\n", run_dir.join("stdout").display()),
        format!("  stderr at {}\n", run_dir.join("stderr").display()),
        "    alice-secret-line\n".into(),
    ] {
        assert!(text.contains(&want), "{want:?} not in:\n{text}");
    }
    assert!(
        !text.contains("carma's record of the task is root's"),
        "{text}"
    );
    let out = alice.carma(&spool, "report");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(": 1 tasks (0 done, 1 failed)"),
        "{}",
        stdout(&out)
    );
    let out = bob.carma(&spool, "report");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(": 0 tasks (0 done, 0 failed)"),
        "{}",
        stdout(&out)
    );
    let status = stdout(&alice.carma(&spool, "status"));
    assert!(
        status.contains(&format!(
            "  {name}  job failed: exit status 3: alice-secret-line"
        )),
        "{status}"
    );

    // Bob: that the task exists and whose it is, nothing of its content.
    for args in [
        format!("show {name}"),
        format!("show {name} --json"),
        "status".into(),
        "status --json".into(),
    ] {
        let out = bob.carma(&spool, &args);
        let text = stdout(&out);
        assert!(out.status.success(), "{args}: {}", stderr(&out));
        assert!(text.contains(&name), "{args}: {text}");
        assert!(
            !text.contains("alice-secret-line") && !text.contains("exit status 3"),
            "bob's `carma {args}` shows alice's failure:\n{text}"
        );
    }
    let text = stdout(&bob.carma(&spool, &format!("show {name}")));
    assert!(text.contains("  stderr: not readable by you\n"), "{text}");

    // A directory bob makes under a task's name in pending/, with a link
    // to alice's output inside, is no task: root's `carma show` does not
    // see it, let alone read through the link.
    spool.stop_daemon("TERM");
    let planted = spool.root.join("pending/000999-planted");
    let out = bob.run(&format!(
        "mkdir -p {p}/run-1 && ln -s {stderr} {p}/run-1/stderr && printf 'forged\\n' > {p}/reason",
        p = planted.display(),
        stderr = spool
            .root
            .join("failed")
            .join(&name)
            .join("run-1/stderr")
            .display()
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = spool.carma().args(["show", "999"]).output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no task `999`"), "{}", stderr(&out));
    assert!(!stdout(&out).contains("alice-secret-line"));
    fs::remove_dir_all(planted).unwrap();
}
