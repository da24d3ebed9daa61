//! The queue's rules end to end: time limits (and, as they come, holds,
//! priorities, dependencies, per-user limits). Each test is a user story
//! told to a real daemon on simulated GPUs.

mod common;

use std::fs;
use std::path::Path;

use common::{Spool, fake_job};

#[test]
fn a_job_past_its_time_limit_is_stopped_even_while_the_daemon_is_down() {
    // The job ignores SIGTERM, so only the SIGKILL after the grace ends
    // it. The daemon is killed while the job runs: the job's supervisor
    // keeps the time, and the restarted daemon files the task in failed/
    // with the reason "time limit".
    let mut spool = Spool::with_config("1x40GiB", "[daemon]\ntime_limit_grace_s = 0.5\n");
    spool.start_daemon();
    let name = spool.submit(
        "stubborn.rad",
        "name: stubborn\nmemory: 1G\ntime: 2s\ntrap '' TERM\nsleep 60\n",
    );
    spool.wait_count("running", 1, 10.0);
    // Killed once the supervisor has the run: a daemon killed between the
    // move to running/ and the hand-over leaves a run nobody started,
    // which the next daemon starts again.
    let run = spool.root.join("running").join(&name).join("run-1");
    spool.wait_for("the supervisor to take the run", 10.0, || {
        run.join("supervisor.json").exists()
    });
    spool.stop_daemon("KILL");
    spool.wait_for("the supervisor to record the end", 20.0, || {
        run.join("exit.json").exists()
    });
    let exit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(run.join("exit.json")).unwrap()).unwrap();
    assert_eq!(exit["timed_out"], true, "{exit}");
    assert_eq!(exit["signal"], 9, "SIGTERM was ignored, so SIGKILL: {exit}");
    spool.start_daemon();
    spool.wait_count("failed", 1, 10.0);
    let (_, dir) = spool.find(&name).unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert_eq!(
        reason.trim(),
        "time limit: stopped after its 2s of wall time"
    );
}

#[test]
fn a_cancelled_job_that_ignores_sigterm_is_killed_after_the_cancel_grace() {
    // Both stops at once: the job has a time limit with a long grace and
    // is cancelled before it; the sooner SIGKILL (the cancellation's)
    // ends it, and the run says it was cancelled, not timed out.
    let mut spool = Spool::with_config(
        "1x40GiB",
        "[daemon]\ncancel_grace_s = 0.5\ntime_limit_grace_s = 60\n",
    );
    spool.start_daemon();
    let name = spool.submit(
        "deaf.rad",
        "name: deaf\nmemory: 1G\ntime: 1h\ntrap '' TERM\necho trapped\nsleep 60\n",
    );
    let run = spool.root.join("running").join(&name).join("run-1");
    spool.wait_for("the job to run", 10.0, || {
        fs::read_to_string(run.join("stdout")).is_ok_and(|out| out.contains("trapped"))
    });
    let started = std::time::Instant::now();
    let out = spool.carma().args(["cancel", &name]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    spool.wait_count("failed", 1, 20.0);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let (_, dir) = spool.find(&name).unwrap();
    let exit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("run-1/exit.json")).unwrap()).unwrap();
    assert_eq!(exit["cancelled"], true, "{exit}");
    assert_eq!(exit["timed_out"], false, "{exit}");
    assert_eq!(exit["signal"], 9, "SIGTERM was ignored, so SIGKILL: {exit}");
}

#[test]
fn a_job_asking_for_more_than_the_maximum_time_is_refused() {
    let mut spool = Spool::with_config("1x40GiB", "[queue]\nmax_time_s = 3600\n");
    spool.start_daemon();
    let name = spool.submit("long.rad", "name: long\nmemory: 1G\ntime: 2h\ntrue\n");
    spool.wait_count("failed", 1, 10.0);
    let (_, dir) = spool.find(&name).unwrap();
    let reason = fs::read_to_string(dir.join("reason")).unwrap();
    assert!(
        reason.contains("time: 2h is more than the maximum of 1h"),
        "{reason}"
    );
}

/// A job that notes its start in `ledger` and holds the one GPU a while.
fn ledger_job(name: &str, ledger: &std::path::Path, extra: &str) -> String {
    format!(
        "name: {name}\nmemory: whole\n{extra}echo {name} >> {}\nsleep 0.3\n",
        ledger.display()
    )
}

/// Why the task `name` failed, as its `reason` file says.
fn reason(spool: &Spool, name: &str) -> String {
    let (_, dir) = spool.find(name).unwrap();
    fs::read_to_string(dir.join("reason")).unwrap()
}

/// `carma ARGS`, which must succeed; its stdout.
fn carma(spool: &Spool, args: &[&str]) -> String {
    let out = spool.carma().args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", common::stderr(&out));
    common::stdout(&out)
}

fn status(spool: &Spool) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(spool.root.join("status.json")).unwrap()).unwrap()
}

/// A script line that waits until `gate` exists.
fn wait_for_gate(gate: &Path) -> String {
    format!("while [ ! -e {} ]; do sleep 0.05; done\n", gate.display())
}

/// The lines of the file at `path`, sorted.
fn sorted_lines(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn holds_and_priorities_order_the_queue_and_survive_a_killed_daemon() {
    // One GPU, taken by `first` until released by a file. Behind it:
    // `low`, `held` and `urgent`, in that order. `held` is held, `urgent`
    // gets priority 5. The daemon is killed and restarted: the hold and
    // the priority are still there, and the queue runs urgent, low, and
    // held only once released.
    let mut spool = Spool::new("1x40GiB");
    let ledger = spool.dir.path().join("ledger");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    spool.submit(
        "first.rad",
        &format!(
            "name: first\nmemory: whole\nwhile [ ! -e {} ]; do sleep 0.05; done\n",
            gate.display()
        ),
    );
    spool.wait_count("running", 1, 10.0);
    for name in ["low", "held", "urgent"] {
        spool.submit(&format!("{name}.rad"), &ledger_job(name, &ledger, ""));
    }
    let said = carma(&spool, &["hold", "held"]);
    assert!(said.contains("held, priority 0"), "{said}");
    let said = carma(&spool, &["priority", "urgent", "5"]);
    assert!(said.contains("priority 5"), "{said}");
    spool.stop_daemon("KILL");
    spool.start_daemon();
    let waiting = status(&spool)["waiting"].clone();
    let listed: Vec<(String, i64, bool, String)> = waiting
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let name = w["name"].as_str().unwrap();
            let stem = name.split_once('-').unwrap().1.to_owned();
            let why = w["why"].as_str().unwrap().to_owned();
            (
                stem,
                w["priority"].as_i64().unwrap(),
                w["held"].as_bool().unwrap(),
                why,
            )
        })
        .collect();
    assert_eq!(listed[0].0, "urgent", "{listed:?}");
    assert_eq!((listed[0].1, listed[0].2), (5, false));
    assert!(listed[0].3.starts_with("needs an idle GPU"), "{listed:?}");
    assert_eq!(listed[1].0, "low");
    assert!(
        listed[1].3.contains("-urgent (priority 5 > 0)"),
        "{listed:?}"
    );
    assert_eq!((listed[2].0.as_str(), listed[2].2), ("held", true));
    assert!(listed[2].3.starts_with("held (carma release"), "{listed:?}");
    let shown = carma(&spool, &["show", "held"]);
    assert!(shown.contains("priority   0, held"), "{shown}");
    let shown = carma(&spool, &["status"]);
    assert!(shown.contains("priority 5: needs an idle GPU"), "{shown}");

    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 3, 20.0);
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "urgent\nlow\n");
    carma(&spool, &["release", "held"]);
    spool.wait_count("done", 4, 20.0);
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "urgent\nlow\nheld\n");
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn users_change_only_their_own_tasks_and_only_within_their_priorities() {
    // A root daemon serves alice and bob. Bob may not hold alice's task;
    // alice may lower her task's priority but not raise it above 0, and a
    // job file of hers asking for priority 5 is refused.
    let (alice, bob) = common::two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    let blocker = spool.submit_as(
        &alice,
        "a",
        &[("blocker.rad", "name: blocker\nmemory: whole\nsleep 30\n")],
    );
    let waiting = spool.submit_as(
        &alice,
        "b",
        &[("waiting.rad", "name: waiting\nmemory: whole\ntrue\n")],
    );
    spool.wait_count("running", 1, 10.0);
    // Refused by the command itself, at once, and nothing is left for
    // the daemon; then, past the command, by the daemon, which says so.
    let out = bob.carma(&spool, &format!("hold {waiting}"));
    assert!(!out.status.success(), "{}", common::stdout(&out));
    assert!(
        common::stderr(&out).contains(&format!(
            "{waiting}: hold refused: {waiting} belongs to carma-alice; only its owner or root may hold"
        )),
        "{}",
        common::stderr(&out)
    );
    assert!(!spool.root.join(format!("cancel/hold.{waiting}")).exists());
    let since = common::unix_now();
    bob.run(&format!(
        "touch {}/cancel/hold.{waiting}",
        spool.root.display()
    ));
    let verdict = wait_for_verdict(&spool, &format!("hold.{waiting}"), bob.uid, since);
    assert_eq!(verdict["refused"], true, "{verdict}");
    assert!(
        verdict["said"]
            .as_str()
            .unwrap()
            .contains("belongs to carma-alice"),
        "{verdict}"
    );
    let out = alice.carma(&spool, &format!("priority {waiting} 5"));
    assert!(!out.status.success(), "{}", common::stdout(&out));
    let out = alice.carma(&spool, &format!("priority {waiting} -3"));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains("priority -3"));
    let out = alice.carma(&spool, &format!("priority {waiting} 1"));
    assert!(!out.status.success(), "{}", common::stdout(&out));
    assert!(
        common::stderr(&out).contains("users may give priorities from -1000 to 0"),
        "{}",
        common::stderr(&out)
    );
    let out = alice.carma(&spool, &format!("hold {waiting}"));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains(&format!("{waiting}: held\n")));

    let (greedy, said) = spool.submit_refused_as(
        &alice,
        "c",
        &[("greedy.rad", "name: greedy\npriority: 5\ntrue\n")],
    );
    assert!(said.contains("users may give priorities"), "{said}");
    spool.wait_for("greedy to be refused", 10.0, || {
        spool
            .find(&greedy)
            .is_some_and(|(state, _)| state == "failed")
    });
    let reason = reason(&spool, &greedy);
    assert!(
        reason.contains("users may give priorities from -1000 to 0"),
        "{reason}"
    );
    let out = alice.carma(&spool, &format!("cancel {blocker}"));
    assert!(out.status.success(), "{}", common::stderr(&out));
}

#[test]
fn dependencies_wait_survive_a_killed_daemon_and_fail_when_unmeetable() {
    // Two GPUs. `prep` runs until a gate file appears; `train` waits for
    // it to succeed, `rescue` for it to fail, `orphan` for a task that
    // does not exist. The daemon is killed and restarted while they wait.
    let mut spool = Spool::new("2x40GiB");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    let prep = spool.submit(
        "prep.rad",
        &format!(
            "name: prep\nmemory: 1G\nwhile [ ! -e {} ]; do sleep 0.05; done\n",
            gate.display()
        ),
    );
    spool.wait_count("running", 1, 10.0);
    let train = spool.submit(
        "train.rad",
        "name: train\nmemory: 1G\nafterok: prep\ntrue\n",
    );
    let rescue = spool.submit(
        "rescue.rad",
        "name: rescue\nmemory: 1G\nafternotok: 1\ntrue\n",
    );
    let orphan = spool.submit("orphan.rad", "name: orphan\nafterany: 4242\ntrue\n");
    spool.wait_count("failed", 1, 10.0);
    assert!(
        reason(&spool, &orphan).contains("afterany: 4242: no such task"),
        "{}",
        reason(&spool, &orphan)
    );
    spool.stop_daemon("KILL");
    spool.start_daemon();
    let shown = carma(&spool, &["show", "train"]);
    assert!(
        shown.contains(&format!("waits for {prep} to succeed (afterok)")),
        "{shown}"
    );
    assert_eq!(spool.tasks("running").len(), 1, "only prep runs");

    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 2, 20.0);
    spool.wait_count("failed", 2, 10.0);
    assert_eq!(spool.find(&train).unwrap().0, "done");
    assert_eq!(
        reason(&spool, &rescue).trim(),
        "dependency never satisfied: afternotok: task 1 succeeded"
    );
}

/// A job of `user`'s that notes its start in `ledger` (which all users
/// may write) and runs until `gate` exists.
fn gated_job(name: &str, ledger: &std::path::Path, gate: &std::path::Path) -> String {
    format!(
        "name: {name}\nmemory: whole\necho {name} >> {}\nwhile [ ! -e {} ]; do sleep 0.05; done\n",
        ledger.display(),
        gate.display()
    )
}

/// A shared spool with a root daemon, a ledger every user may append to,
/// and a gate file that ends the gated jobs.
fn two_user_spool(gpus: &str, extra: &str) -> (Spool, std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let mut spool = Spool::shared(gpus, extra);
    let ledger = spool.dir.path().join("ledger");
    fs::write(&ledger, "").unwrap();
    fs::set_permissions(&ledger, fs::Permissions::from_mode(0o666)).unwrap();
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    (spool, ledger, gate)
}

/// Alice submits `a1` and, once it runs, `a2`; then Bob submits `b1`.
/// Returns the task names of `a2` and `b1`.
fn alice_twice_then_bob(
    spool: &Spool,
    alice: &common::TestUser,
    bob: &common::TestUser,
    ledger: &Path,
    gate: &Path,
) -> (String, String) {
    let job = |name: &str| gated_job(name, ledger, gate);
    spool.submit_as(alice, "a1", &[("a1.rad", &job("a1"))]);
    spool.wait_count("running", 1, 10.0);
    let a2 = spool.submit_as(alice, "a2", &[("a2.rad", &job("a2"))]);
    let b1 = spool.submit_as(bob, "b1", &[("b1.rad", &job("b1"))]);
    (a2, b1)
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_user_at_the_running_limit_waits_while_another_users_job_passes() {
    // Two GPUs, one running job per user. Alice's second job waits with
    // the limit as its reason although a GPU is idle; Bob's job, submitted
    // after it, takes that GPU.
    let (alice, bob) = common::two_users();
    let (spool, ledger, gate) = two_user_spool("2x40GiB", "[queue]\nmax_running_per_user = 1\n");
    let (a2, _) = alice_twice_then_bob(&spool, &alice, &bob, &ledger, &gate);
    spool.wait_count("running", 2, 10.0);
    let out = alice.carma(&spool, &format!("show {a2}"));
    let shown = common::stdout(&out);
    assert!(
        shown.contains("waits: its user runs 1 jobs, the most a user may"),
        "{shown}"
    );
    spool.wait_for("b1 to start", 10.0, || {
        fs::read_to_string(&ledger).unwrap() == "a1\nb1\n"
    });
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 3, 20.0);
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "a1\nb1\na2\n");
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn fair_share_lets_the_user_who_used_less_go_first() {
    // One GPU. While Alice's first job runs, she submits a second, then
    // Bob submits one. Bob has used no GPU time, Alice has: his job goes
    // before her second although it came later.
    let (alice, bob) = common::two_users();
    let (spool, ledger, gate) = two_user_spool("1x40GiB", "");
    let (a2, b1) = alice_twice_then_bob(&spool, &alice, &bob, &ledger, &gate);
    spool.wait_for("both to be queued", 10.0, || {
        status(&spool)["waiting"]
            .as_array()
            .is_some_and(|w| w.len() == 2)
    });
    let waiting = status(&spool)["waiting"].clone();
    assert_eq!(waiting[0]["name"], b1.as_str(), "{waiting}");
    assert_eq!(waiting[1]["name"], a2.as_str(), "{waiting}");
    let why = waiting[1]["why"].as_str().unwrap();
    assert!(
        why.contains("fair share: carma-bob used the GPUs less lately than carma-alice"),
        "{why}"
    );
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 3, 20.0);
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "a1\nb1\na2\n");
}

#[test]
fn with_backfill_a_short_job_passes_a_blocked_head_and_an_unbounded_one_does_not() {
    // Two GPUs. `first` (limit 10 min) holds one; `wide` wants both and
    // is reserved them from when `first` ends at the latest. `quick`
    // (limit 5 min) ends before that and runs on the idle GPU; `endless`
    // (no limit) could hold it past the reservation and waits.
    let mut spool = Spool::with_config("2x40GiB", "[queue]\nbackfill = true\n");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    let hold = wait_for_gate(&gate);
    spool.submit(
        "first.rad",
        &format!("name: first\nmemory: whole\ntime: 10m\n{hold}"),
    );
    spool.wait_count("running", 1, 10.0);
    let wide = spool.submit("wide.rad", "name: wide\ngpus: 2\nmemory: whole\ntrue\n");
    let endless = spool.submit("endless.rad", "name: endless\nmemory: whole\ntrue\n");
    let quick = spool.submit("quick.rad", "name: quick\nmemory: whole\ntime: 5m\ntrue\n");
    spool.wait_for("quick to be done", 10.0, || {
        spool.find(&quick).is_some_and(|(state, _)| state == "done")
    });
    assert_eq!(spool.find(&wide).unwrap().0, "pending");
    assert_eq!(spool.find(&endless).unwrap().0, "pending");
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 4, 20.0);
}

#[test]
fn with_backfill_a_job_that_ran_before_passes_a_blocked_head_by_its_history() {
    // `again` states no limit, but it ran here before: history knows it
    // took a second, so it may use the GPU that `wide`'s reservation
    // leaves idle until `first` (limit 10 min) ends.
    let mut spool = Spool::with_config("2x40GiB", "[queue]\nbackfill = true\n");
    spool.start_daemon();
    let again = fake_job("again", "memory: whole\n", "1G", 0.2);
    spool.submit("again.rad", &again);
    spool.wait_count("done", 1, 10.0);
    let gate = spool.dir.path().join("gate");
    let hold = wait_for_gate(&gate);
    spool.submit(
        "first.rad",
        &format!("name: first\nmemory: whole\ntime: 10m\n{hold}"),
    );
    spool.wait_count("running", 1, 10.0);
    let wide = spool.submit("wide.rad", "name: wide\ngpus: 2\nmemory: whole\ntrue\n");
    let second = spool.submit("again.rad", &again);
    spool.wait_for("the repeat to be done", 15.0, || {
        spool
            .find(&second)
            .is_some_and(|(state, _)| state == "done")
    });
    assert_eq!(spool.find(&wide).unwrap().0, "pending");
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 4, 20.0);
}

#[test]
fn a_job_notifies_its_owner_when_it_ends_or_the_configured_hook_does() {
    let dir = tempfile::tempdir().unwrap();
    let hook_note = dir.path().join("hook");
    let hook = format!(
        "[daemon]\nnotify = \"cat /proc/self/cgroup > {0}.cgroup; \
         echo hook $CARMA_JOB_NAME $CARMA_STATE > {0}\"\n",
        hook_note.display()
    );
    let mut spool = Spool::with_config("1x40GiB", &hook);
    spool.start_daemon();
    let note = dir.path().join("note");
    let name = spool.submit(
        "doomed.rad",
        &format!(
            "name: doomed\nmemory: 1G\nnotify: echo \"$CARMA_TASK_ID $CARMA_STATE $CARMA_REASON\" > {}\nexit 3\n",
            note.display()
        ),
    );
    spool.submit("plain.rad", "name: plain\nmemory: 1G\ntrue\n");
    spool.wait_for("both notifications", 20.0, || {
        note.exists() && hook_note.exists()
    });
    spool.wait_for("the notes to be written", 10.0, || {
        fs::read_to_string(&note).is_ok_and(|n| n.ends_with('\n'))
            && fs::read_to_string(&hook_note).is_ok_and(|n| n.ends_with('\n'))
    });
    assert_eq!(
        fs::read_to_string(&note).unwrap(),
        format!("{name} failed job failed: exit status 3\n")
    );
    assert_eq!(fs::read_to_string(&hook_note).unwrap(), "hook plain done\n");
    // Where jobs run in cgroups, so do notifications, each in its own.
    if spool.daemon_log().contains("jobs run in cgroups under") {
        let cgroup = fs::read_to_string(dir.path().join("hook.cgroup")).unwrap();
        assert!(cgroup.trim_end().ends_with("-plain-run-0"), "{cgroup}");
    }
}

#[test]
fn requeue_runs_an_ended_task_again_and_stops_a_running_one_to_queue_it() {
    // The job notes each run; runs after the first wait for a gate. It
    // ends (run 1), is requeued from done/ (run 2 starts and waits), is
    // requeued while running (run 2 is stopped, run 3 starts), and ends.
    let mut spool = Spool::new("1x40GiB");
    let ledger = spool.dir.path().join("ledger");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    let name = spool.submit(
        "again.rad",
        &format!(
            "name: again\nmemory: 1G\necho $CARMA_RUN >> {ledger}\n\
             if [ $CARMA_RUN -gt 1 ]; then while [ ! -e {gate} ]; do sleep 0.05; done; fi\n",
            ledger = ledger.display(),
            gate = gate.display()
        ),
    );
    spool.wait_count("done", 1, 10.0);
    let said = carma(&spool, &["requeue", &name]);
    assert!(said.contains("requeued"), "{said}");
    let runs = |n: &str| fs::read_to_string(&ledger).unwrap_or_default() == n;
    spool.wait_for("run 2", 10.0, || runs("1\n2\n"));
    let said = carma(&spool, &["requeue", &name]);
    assert!(said.contains("being stopped"), "{said}");
    spool.wait_for("run 3", 20.0, || runs("1\n2\n3\n"));
    let (state, dir) = spool.find(&name).unwrap();
    assert_eq!(state, "running");
    let exit = fs::read_to_string(dir.join("run-2/exit.json")).unwrap();
    assert!(exit.contains("\"cancelled\": true"), "{exit}");
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 1, 10.0);
    assert!(spool.tasks("failed").is_empty());
    let out = spool.carma().args(["requeue", &name]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));

    // Three runs, no OOM crash: the report and its CSV agree.
    spool.wait_count("done", 1, 10.0);
    let csv = spool.dir.path().join("tasks.csv");
    let report = carma(&spool, &["report", "--csv", csv.to_str().unwrap()]);
    assert!(report.contains("  OOM crashes       0\n"), "{report}");
    let csv = fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = header.iter().position(|&c| c == "oom_crashes").unwrap();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(row[column], "0", "{csv}");
}

#[test]
fn a_task_keeps_the_launches_of_its_latest_32_runs() {
    // Each run's launch.json is root's copy of the script: a task
    // requeued again and again keeps the latest 32, and every run's exit.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let name = spool.submit("again.rad", "name: again\nmemory: 1G\ntrue\n");
    spool.wait_count("done", 1, 10.0);
    let (_, dir) = spool.find(&name).unwrap();
    // Runs 2 to 40, as an older carma that kept every launch left them.
    for run in 2..=40 {
        let to = dir.join(format!("run-{run}"));
        fs::create_dir(&to).unwrap();
        for file in ["launch.json", "exit.json", "supervisor.json"] {
            fs::copy(dir.join("run-1").join(file), to.join(file)).unwrap();
        }
    }
    let said = carma(&spool, &["requeue", &name]);
    assert!(said.contains("requeued"), "{said}");
    spool.wait_count("done", 1, 10.0);
    let (state, dir) = spool.find(&name).unwrap();
    assert_eq!(state, "done");
    let launched = |run: u32| dir.join(format!("run-{run}/launch.json")).exists();
    assert!(launched(41), "the new run keeps its launch");
    assert!(!launched(9), "run 41 took run 9's launch");
    assert!((10..=41).all(launched));
    assert!(dir.join("run-9/exit.json").exists(), "a run's exit stays");
}

#[test]
fn an_array_job_runs_one_task_per_index_at_most_n_at_once_and_cancels_together() {
    let mut spool = Spool::new("4x40GiB");
    let ledger = spool.dir.path().join("ledger");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    // Three indices, each noting its array and index.
    let first = spool.submit(
        "sweep.rad",
        &format!(
            "name: sweep\nmemory: 1G\narray: 1-3\necho $CARMA_ARRAY_JOB_ID $CARMA_ARRAY_INDEX >> {}\n",
            ledger.display()
        ),
    );
    spool.wait_count("done", 3, 20.0);
    let job = first.split_once('-').unwrap().0.trim_start_matches('0');
    assert_eq!(
        sorted_lines(&ledger),
        [1, 2, 3].map(|i| format!("{job} {i}"))
    );

    // Four indices, two at once, on four GPUs: two run, two wait for the
    // array's limit; cancelled together.
    let held = spool.submit(
        "pairs.rad",
        &format!(
            "name: pairs\nmemory: 1G\narray: 1-4%2\nwhile [ ! -e {} ]; do sleep 0.05; done\n",
            gate.display()
        ),
    );
    spool.wait_for("two running, two waiting", 10.0, || {
        spool.tasks("running").len() == 2 && spool.tasks("pending").len() == 2
    });
    spool.wait_for("the array's limit as the reason", 10.0, || {
        let waiting = status(&spool)["waiting"].clone();
        waiting[0]["why"]
            .as_str()
            .is_some_and(|w| w.contains("the most it allows at once (%2)"))
    });
    carma(&spool, &["cancel", "--array", &held]);
    spool.wait_count("failed", 4, 20.0);
    assert_eq!(spool.tasks("done").len(), 3);
}

#[test]
fn an_array_cut_short_by_a_crash_is_made_whole_at_the_next_start_and_no_index_twice() {
    let mut spool = Spool::new("1x40GiB");
    let ledger = spool.dir.path().join("ledger");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    let wait = wait_for_gate(&gate);
    let blocker = spool.submit("block.rad", &format!("memory: whole\n{wait}"));
    spool.wait_for("the blocker to run", 10.0, || {
        spool.root.join("running").join(&blocker).exists()
    });
    let first = spool.submit(
        "arr.rad",
        &format!(
            "memory: whole\narray: 1-4\necho $CARMA_ARRAY_INDEX >> {}\n",
            ledger.display()
        ),
    );
    spool.wait_for("the array's four elements", 10.0, || {
        spool.tasks("pending").len() == 4
    });
    spool.stop_daemon("KILL");
    // As a crash while its elements were made leaves it: its first
    // element not marked expanded, one element missing.
    let record_path = spool.root.join("pending").join(&first).join("task.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&fs::read(&record_path).unwrap()).unwrap();
    record["array"]["expanded"] = false.into();
    fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    let element = |name: &String| {
        let path = spool.root.join("pending").join(name).join("task.json");
        let record: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        record["array"]["index"].as_u64().unwrap()
    };
    let third = spool
        .tasks("pending")
        .into_iter()
        .find(|name| element(name) == 3)
        .unwrap();
    fs::remove_dir_all(spool.root.join("pending").join(third)).unwrap();
    spool.start_daemon();
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 5, 30.0);
    assert_eq!(sorted_lines(&ledger), ["1", "2", "3", "4"]);
}

#[test]
fn a_requeued_task_notifies_again_and_one_that_never_ran_notifies_too() {
    // Issue 23: after `carma requeue` the second notification failed with
    // "File exists"; a job cancelled before it ran failed its notification
    // on a missing work/.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let notes = spool.dir.path().join("notes");
    let job = |name: &str, rest: &str| {
        format!(
            "name: {name}\nmemory: whole\nnotify: echo \"$CARMA_TASK_ID $CARMA_STATE\" >> {}\n{rest}",
            notes.display()
        )
    };
    let twice = spool.submit("twice.rad", &job("twice", "true\n"));
    spool.wait_for("the first end", 10.0, || {
        fs::read_to_string(&notes).is_ok_and(|n| n.lines().count() == 1)
    });
    let out = spool.carma().args(["requeue", &twice]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    spool.wait_for("the second notification", 10.0, || {
        fs::read_to_string(&notes).is_ok_and(|n| n.lines().count() == 2)
    });
    let long = spool.submit("long.rad", "name: long\nmemory: whole\nsleep 30\n");
    let never = spool.submit("never.rad", &job("never", "true\n"));
    spool.wait_for("the long job", 10.0, || {
        spool.root.join("running").join(&long).exists()
    });
    let out = spool.carma().args(["cancel", &never]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    spool.wait_for("the cancelled job's notification", 10.0, || {
        fs::read_to_string(&notes).is_ok_and(|n| n.contains(&format!("{never} failed")))
    });
    let notes = fs::read_to_string(&notes).unwrap();
    assert_eq!(
        notes.matches(&format!("{twice} done")).count(),
        2,
        "{notes}"
    );
}

#[test]
fn a_jobs_name_names_its_task_whether_dropped_or_submitted() {
    // Issue 24, item 4: `name:` was ignored on the daemon: the task was
    // named after the file, `carma show myjob` found nothing and
    // `afterok: myjob` failed.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.drop_file("x.rad", "name: prep\nmemory: 1G\ntrue\n");
    // A dropped file is taken in when its event comes: `afterok: prep`
    // names a task that must be known by then.
    spool.wait_for("the dropped job to be taken in", 10.0, || {
        spool.find("-prep").is_some()
    });
    let train = spool.submit("y.rad", "name: train\nafterok: prep\nmemory: 1G\ntrue\n");
    assert!(train.ends_with("-train"), "{train}");
    spool.wait_count("done", 2, 15.0);
    let prep = spool
        .find("-prep")
        .expect("the dropped job is named prep")
        .0;
    assert_eq!(prep, "done");
    let out = spool.carma().args(["show", "prep"]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
}

/// The daemon's verdict on request `file` by `uid`, from the status file
/// given at `since` or later.
fn wait_for_verdict(spool: &Spool, file: &str, uid: u32, since: f64) -> serde_json::Value {
    let mut found = serde_json::Value::Null;
    spool.wait_for("the daemon's verdict", 10.0, || {
        let verdicts = status(spool)["verdicts"].clone();
        let verdict =
            verdicts.as_array().into_iter().flatten().find(|v| {
                v["request"] == file && v["uid"] == uid && v["at"].as_f64() >= Some(since)
            });
        found = verdict.cloned().unwrap_or_default();
        !found.is_null()
    });
    found
}

#[test]
fn every_request_gets_a_verdict_in_words_and_a_refusal_exits_non_zero() {
    // One GPU: `first` runs until a gate opens, `second` waits.
    let mut spool = Spool::new("1x40GiB");
    let gate = spool.dir.path().join("gate");
    let hold = wait_for_gate(&gate);
    // With no daemon, what needs none is checked and said at once.
    spool.start_daemon();
    spool.stop_daemon("TERM");
    let first = spool.submit("first.rad", &format!("name: first\nmemory: whole\n{hold}"));
    let out = spool.carma().args(["hold", &first]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out)
            .contains("hold requested; no daemon runs now, it takes effect when one starts"),
        "{}",
        common::stdout(&out)
    );
    spool.start_daemon();
    spool.wait_for("the hold to take effect", 10.0, || {
        status(&spool)["waiting"][0]["held"] == true
    });
    let out = spool.carma().args(["release", &first]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains(&format!("{first}: released\n")));
    spool.wait_count("running", 1, 10.0);
    let second = spool.submit("second.rad", "name: second\nmemory: whole\ntrue\n");
    spool.wait_count("pending", 1, 10.0);

    // A request the command would not leave, left by hand: the daemon
    // refuses it and says why.
    let me = nix::unistd::getuid().as_raw();
    let since = common::unix_now();
    fs::write(spool.root.join(format!("cancel/hold.{first}")), "").unwrap();
    let verdict = wait_for_verdict(&spool, &format!("hold.{first}"), me, since);
    assert_eq!(verdict["refused"], true, "{verdict}");
    assert!(
        verdict["said"]
            .as_str()
            .unwrap()
            .contains("runs already (carma cancel stops it)"),
        "{verdict}"
    );
    let verdict = {
        fs::write(spool.root.join("cancel/hold.999999"), "").unwrap();
        wait_for_verdict(&spool, "hold.999999", me, since)
    };
    assert_eq!(verdict["said"], "refused: no task 999999", "{verdict}");

    // A waiting task shows its estimate.
    spool.wait_for("second to wait", 10.0, || {
        status(&spool)["waiting"][0]["name"] == second.as_str()
    });
    let shown = carma(&spool, &["show", &second]);
    assert!(shown.contains("  estimate   a whole GPU"), "{shown}");

    // Done: said in the daemon's words; then where the task stands.
    let out = spool
        .carma()
        .args(["priority", &second, "7"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    let said = common::stdout(&out);
    assert!(
        said.contains(&format!("{second}: priority 0 -> 7\n")),
        "{said}"
    );
    assert!(said.contains(&format!("{second}: priority 7; ")), "{said}");
    let out = spool.carma().args(["cancel", &second]).output().unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains(&format!("{second}: cancelled while waiting\n")),
        "{}",
        common::stdout(&out)
    );
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 1, 10.0);
    let out = spool.carma().args(["cancel", &first]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        common::stderr(&out).contains("already ended"),
        "{}",
        common::stderr(&out)
    );
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_users_submissions_are_made_durable_without_a_false_warning() {
    // Over the daemon's socket, then by pending/ (a user may not open
    // pending/ to fsync it: the submission is flushed through its own
    // directory, opened before the rename, unless the daemon claims it
    // at once).
    let (alice, _) = common::two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    let dir = spool.user_dir(&alice, "jobs", &[("quick.rad", "memory: 1G\ntrue\n")]);
    let script = format!(
        "for i in $(seq 15); do CARMA_SPOOL={} CARMA_CONFIG={} {} submit {}/quick.rad || exit 1; done",
        spool.root.display(),
        spool.config.display(),
        env!("CARGO_BIN_EXE_carma"),
        dir.display()
    );
    for way in ["received quick.rad", "adopted pending/submit-"] {
        let out = alice.run(&script);
        assert!(out.status.success(), "{}", common::stderr(&out));
        assert!(
            !common::stderr(&out).contains("durable"),
            "{}",
            common::stderr(&out)
        );
        assert!(spool.daemon_log().contains(way), "{}", spool.daemon_log());
        // Without its socket, the daemon is found by pending/ alone.
        let _ = fs::remove_file(spool.root.join("submit.sock"));
    }
    spool.wait_count("done", 30, 30.0);

    // Chained on the command line; --parsable gives the number the daemon
    // gave.
    let out = alice.carma(
        &spool,
        &format!("submit --parsable --afterany 1 {}/quick.rad", dir.display()),
    );
    assert!(out.status.success(), "{}", common::stderr(&out));
    let id: u64 = common::stdout(&out).trim().parse().unwrap();
    spool.wait_count("done", 31, 10.0);
    let (_, task) = spool.find(&format!("{id:06}-quick")).unwrap();
    let record = fs::read_to_string(task.join("task.json")).unwrap();
    assert!(record.contains("\"kind\": \"afterany\""), "{record}");
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn the_name_submit_prints_before_the_daemon_numbers_a_job_names_its_task() {
    // With no daemon, a user's submission waits unnumbered and `carma
    // submit` prints its `submit-…` name; every command takes that name,
    // and once a daemon numbers the job it names the task.
    let (alice, _) = common::two_users();
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon();
    spool.stop_daemon("TERM");
    let entry = spool.submit_as(&alice, "j", &[("j.rad", "memory: 1G\nsleep 60\n")]);
    assert!(entry.starts_with("submit-"), "{entry}");
    let out = alice.carma(&spool, &format!("show {entry}"));
    assert!(!out.status.success(), "{}", common::stdout(&out));
    assert!(
        common::stderr(&out).contains("has not been taken in yet"),
        "{}",
        common::stderr(&out)
    );
    spool.start_daemon();
    spool.wait_count("running", 1, 10.0);
    let out = alice.carma(&spool, &format!("show {entry}"));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains("-j: running"),
        "{}",
        common::stdout(&out)
    );
    let out = alice.carma(&spool, &format!("cancel {entry}"));
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains("cancelled"),
        "{}",
        common::stdout(&out)
    );
}

#[test]
fn submit_chains_jobs_by_number_or_by_name_from_the_command_line() {
    // Two GPUs. `prep` ran once already; a second `prep` runs until a
    // gate opens. `train`, chained on the command line by name, waits for
    // the newest prep; `eval`, chained by the number `--parsable` gave,
    // waits for train. Neither job file names a dependency.
    let mut spool = Spool::new("2x40GiB");
    let ledger = spool.dir.path().join("ledger");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    let first = carma(
        &spool,
        &[
            "submit",
            "--parsable",
            spool
                .job("prep0.rad", "name: prep\nmemory: 1G\ntrue\n")
                .to_str()
                .unwrap(),
        ],
    );
    assert!(first.trim().parse::<u64>().is_ok(), "{first:?}");
    spool.wait_count("done", 1, 10.0);
    let prep = spool.job("prep.rad", &gated_job("prep", &ledger, &gate));
    let prep = carma(&spool, &["submit", "--parsable", prep.to_str().unwrap()]);
    let train = spool.job(
        "train.rad",
        &format!(
            "name: train\nmemory: 1G\necho train >> {}\n",
            ledger.display()
        ),
    );
    let train = carma(
        &spool,
        &[
            "submit",
            "--parsable",
            "--afterok",
            "prep",
            train.to_str().unwrap(),
        ],
    );
    let eval = spool.job(
        "eval.rad",
        &format!(
            "name: eval\nmemory: 1G\necho eval >> {}\n",
            ledger.display()
        ),
    );
    let out = carma(
        &spool,
        &["submit", "--afterok", train.trim(), eval.to_str().unwrap()],
    );
    assert!(out.trim().ends_with("-eval"), "{out}");
    spool.wait_for("prep to start", 10.0, || {
        fs::read_to_string(&ledger).unwrap_or_default() == "prep\n"
    });
    spool.wait_for("train to wait for the newest prep", 10.0, || {
        let why = status(&spool)["waiting"][0]["why"].clone();
        why.as_str().is_some_and(|w| {
            w.starts_with(&format!(
                "waits for {:06}-prep to succeed",
                prep.trim().parse::<u64>().unwrap()
            ))
        })
    });
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "prep\n");
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 4, 20.0);
    assert_eq!(fs::read_to_string(&ledger).unwrap(), "prep\ntrain\neval\n");
    let record = fs::read_to_string(spool.find("-train").unwrap().1.join("task.json")).unwrap();
    assert!(
        record.contains(&format!("\"task\": {}", prep.trim())),
        "{record}"
    );

    // A bad list is said as the file's `afterok:` would be, and nothing
    // is submitted.
    let out = spool
        .carma()
        .args([
            "submit",
            "--afterok",
            "prep,two words",
            eval.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = common::stderr(&out);
    assert!(
        said.contains("--afterok \"prep,two words\": at character 6: expected tasks to wait for"),
        "{said}"
    );
    assert_eq!(spool.tasks("done").len() + spool.tasks("pending").len(), 4);
}

#[test]
fn submit_refuses_a_directory_that_is_not_a_spool() {
    let spool = Spool::new("1x40GiB");
    let empty = tempfile::tempdir().unwrap();
    let job = spool.job("a.rad", "memory: 1G\ntrue\n");
    let out = spool
        .carma()
        .arg("submit")
        .arg("--spool")
        .arg(empty.path())
        .arg(&job)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = common::stderr(&out);
    assert!(
        said.contains("is not a carma spool (it has no pending/"),
        "{said}"
    );
    assert!(said.contains("nothing submitted"), "{said}");
    assert_eq!(fs::read_dir(empty.path()).unwrap().count(), 0);
}

#[test]
fn a_hold_left_while_no_daemon_ran_acts_before_a_burst_of_drops_is_placed() {
    // A start claims the drops it finds a slice at a time, and while
    // serving the core places tasks between slices. At a start it must
    // not: a hold left while no daemon ran is read after the intake, and
    // the held task would have started first.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.submit("blocker.rad", "name: blocker\nmemory: whole\nsleep 1\n");
    let held = spool.submit("held.rad", "name: held\nmemory: whole\ntrue\n");
    spool.stop_daemon("TERM");
    fs::write(spool.root.join("cancel").join(format!("hold.{held}")), "").unwrap();
    for i in 0..600 {
        fs::write(
            spool.root.join("pending").join(format!("burst{i:03}.rad")),
            "memory: 1G\ntrue\n",
        )
        .unwrap();
    }
    // The blocker ends while no daemon runs: the GPU is free at the start.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    spool.start_daemon();
    spool.wait_count("done", 601, 60.0);
    assert!(
        spool.root.join("pending").join(&held).exists(),
        "the held task left pending/: {}",
        spool.daemon_log()
    );
    assert!(
        !spool
            .root
            .join("pending")
            .join(&held)
            .join("run-1")
            .exists()
    );
}
