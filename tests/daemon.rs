//! The daemon end to end: real `carma daemon` processes on simulated GPUs,
//! real job processes under real supervisors, real renames. Each test is a
//! user story.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::{CARMA, Spool, executable, fake_job, sleepers, stderr, stdout};

#[test]
fn dropped_and_submitted_jobs_all_end_in_done() {
    let mut spool = Spool::new("2x40GiB");
    spool.start_daemon();
    // Three ways in: `carma submit`, `cp` into pending/, and a legacy job.
    let submitted = spool.submit("a.rad", &fake_job("a", "memory: 1G\n", "1G", 0.3));
    spool.drop_file("b.rad", &fake_job("b", "memory: 2G\n", "2G", 0.3));
    spool.drop_file(
        "c.rad",
        "gpus: 1\nmemory: 512M\necho hello from $CARMA_TASK_ID \\($CARMA_JOB_NAME\\) on GPU $CARMA_GPUS\n",
    );
    spool.wait_count("done", 3, 20.0);
    assert!(submitted.ends_with("-a"), "{submitted}");
    let (_, c) = spool.find("-c").unwrap();
    let out = fs::read_to_string(c.join("run-1/stdout")).unwrap();
    assert!(out.starts_with("hello from "), "{out}");
    assert!(out.contains("-c (c) on GPU "), "{out}");
    let exit: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(c.join("run-1/exit.json")).unwrap()).unwrap();
    assert_eq!(exit["code"], 0);
    assert!(spool.tasks("failed").is_empty());
    assert!(spool.tasks("pending").is_empty());
}

#[test]
fn a_job_file_of_almost_a_megabyte_of_quotes_runs_and_its_record_stays_small() {
    // JSON doubles each `"`: the run's launch.json was past the 1 MiB a
    // record could be, and the job could never start; and every ended
    // record (and history file) kept the whole script.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let quotes = format!(": '{}'\n", "\"".repeat(995));
    let rad = format!("memory: 1G\n{}echo ran\n", quotes.repeat(1000));
    assert!(rad.len() < 1 << 20);
    let name = spool.submit("quoted.rad", &rad);
    spool.wait_count("done", 1, 20.0);
    let task = spool.root.join("done").join(&name);
    let out = fs::read_to_string(task.join("run-1/stdout")).unwrap();
    assert_eq!(out, "ran\n");
    let record = fs::metadata(task.join("task.json")).unwrap().len();
    assert!(record < 16 << 10, "task.json is {record} bytes");
}

#[test]
fn an_underestimated_job_crashes_recovers_and_completes() {
    // One 10 GiB GPU. `big` really uses 6 GiB and says so. `liar` says
    // 1 GiB but takes 6: it fits beside `big` on paper (1 + 2 margin <= 4
    // free), dies with PyTorch's OOM message, goes to recovery/, and re-runs
    // alone once `big` is done.
    let mut spool = Spool::new("10GiB");
    spool.start_daemon();
    spool.submit("big.rad", &fake_job("big", "memory: 6G\n", "6G", 2.0));
    spool.wait_for("big to run", 10.0, || {
        spool.find("-big").is_some_and(|(s, _)| s == "running")
    });
    std::thread::sleep(Duration::from_millis(300));
    spool.submit("liar.rad", &fake_job("liar", "memory: 1G\n", "6G", 0.3));
    spool.wait_count("done", 2, 30.0);
    let (_, liar) = spool.find("-liar").unwrap();
    let first = fs::read_to_string(liar.join("run-1/stderr")).unwrap();
    assert!(
        first.contains("torch.OutOfMemoryError: CUDA out of memory"),
        "{first}"
    );
    assert!(
        liar.join("run-2/exit.json").exists(),
        "it ran a second time"
    );
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(liar.join("task.json")).unwrap()).unwrap();
    assert_eq!(record["crashes"], 1);
    let log = spool.daemon_log();
    assert!(log.contains("to recovery/ after OOM crash 1"), "{log}");
    let report = spool.carma().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["oom_crashes"], 1);
    assert_eq!(report["reruns"], 1);
    assert_eq!(report["tasks"], 2);
    // The simulated GPU's log: its own source, occupancy and DRAM from its
    // jobs' SM activity, averaged by the report.
    let gpu_log = fs::read_to_string(spool.root.join("gpu-log.csv")).unwrap();
    assert!(
        gpu_log.lines().nth(1).unwrap().contains(",simulated,"),
        "{gpu_log}"
    );
    let gpu = &report["gpus"][0];
    assert!(gpu["seconds"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        gpu["occupancy"].as_f64().is_some() && gpu["dram"].as_f64().is_some(),
        "{report}"
    );
    // The pictures of the run: the GPU log's lines and both tasks' runs,
    // the crashed one outlined in red.
    let plots = spool.root.join("plots");
    let out = spool
        .carma()
        .args(["report", "--plot"])
        .arg(&plots)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["gpus.svg", "gpus.png", "tasks.svg", "tasks.png"] {
        assert!(plots.join(name).exists(), "{name}");
    }
    let gpus = fs::read_to_string(plots.join("gpus.svg")).unwrap();
    assert!(gpus.contains("<polyline"), "no GPU log lines drawn");
    let tasks = fs::read_to_string(plots.join("tasks.svg")).unwrap();
    // Red outlines: the crashed run's bar and its legend entry.
    assert_eq!(
        tasks.matches("fill=\"none\" stroke=\"#FF0000\"").count(),
        2,
        "{tasks}"
    );
}

#[test]
fn a_bad_file_goes_to_failed_with_its_reason_and_the_daemon_goes_on() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.drop_file("broken.rad", "gpus: 1\nbatchsize: 32\necho hi\n");
    spool.wait_count("failed", 1, 10.0);
    let (_, broken) = spool.find("-broken").unwrap();
    let reason = fs::read_to_string(broken.join("reason")).unwrap();
    assert!(reason.starts_with("broken.rad:2:1:"), "{reason}");
    assert!(reason.contains("did you mean `batch_size`"), "{reason}");
    assert!(broken.join("job/broken.rad").exists(), "the file is kept");
    // A symbolic link is refused, not followed.
    std::os::unix::fs::symlink("/etc/passwd", spool.root.join("pending/link.rad")).unwrap();
    spool.wait_count("failed", 2, 10.0);
    let (_, link) = spool.find("-link").unwrap();
    assert!(
        fs::read_to_string(link.join("reason"))
            .unwrap()
            .contains("symbolic link")
    );
    // The daemon still works.
    spool.submit("fine.rad", &fake_job("fine", "memory: 1G\n", "1G", 0.1));
    spool.wait_count("done", 1, 10.0);
}

#[test]
fn jobs_survive_a_daemon_killed_mid_run_and_complete_exactly_once() {
    // Six 1.5 s jobs on two GPUs, each appending its id to a ledger when it
    // finishes. The daemon is killed with SIGKILL while some run and others
    // wait, then restarted: every job completes, and exactly once.
    let mut spool = Spool::new("2x40GiB");
    let ledger = spool.dir.path().join("ledger");
    spool.start_daemon();
    for i in 0..6 {
        let job = format!(
            "name: job{i}\nmemory: whole\n{CARMA} fake-train --mem 30G --secs 1.5\necho $CARMA_TASK_ID >> {}\n",
            ledger.display()
        );
        spool.submit(&format!("job{i}.rad"), &job);
    }
    spool.wait_for("two jobs running", 10.0, || {
        spool.tasks("running").len() == 2
    });
    std::thread::sleep(Duration::from_millis(500));
    spool.stop_daemon("KILL");
    std::thread::sleep(Duration::from_millis(1500));
    spool.start_daemon();
    spool.wait_count("done", 6, 40.0);
    let ledger = fs::read_to_string(&ledger).unwrap();
    let mut ids: Vec<&str> = ledger.lines().collect();
    ids.sort();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, 6, "each job ran to its end once: {ledger}");
    assert_eq!(ids.len(), 6, "{ledger}");
    assert!(spool.tasks("failed").is_empty());
    for (_, dir) in spool.tasks("done").iter().filter_map(|n| spool.find(n)) {
        assert!(!dir.join("run-2").exists(), "{} ran twice", dir.display());
    }
}

#[test]
fn sigterm_stops_the_daemon_but_not_the_jobs() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.submit("long.rad", &fake_job("long", "memory: 1G\n", "1G", 2.0));
    spool.wait_for("the job to run", 10.0, || {
        !spool.tasks("running").is_empty()
    });
    let status = spool.stop_daemon("TERM");
    assert!(status.success(), "{status:?}");
    assert_eq!(spool.tasks("running").len(), 1, "the job is still running");
    // The job ends while no daemon runs; the next daemon finishes it.
    std::thread::sleep(Duration::from_millis(2500));
    spool.start_daemon();
    spool.wait_count("done", 1, 10.0);
    assert!(
        spool
            .daemon_log()
            .contains("ended while the daemon was away")
    );
}

#[test]
fn without_cgroups_a_jobs_hidden_processes_still_end_with_it() {
    // Without a cgroup a job was only its process group: `setsid sleep &`
    // or a double fork outlived the job's end, its cancellation and its
    // time limit. Its supervisor is a subreaper now, and inherits them.
    let mut spool = Spool::with_config(
        "3x40GiB",
        "[daemon]\njob_cgroups = false\ntime_limit_grace_s = 1.0\n",
    );
    spool.start_daemon();
    let job = |secs: &str, directives: &str, last: &str| {
        format!(
            "memory: 1G\n{directives}env -i setsid sleep {secs} > /dev/null 2>&1 < /dev/null &\n\
             ( setsid sleep {secs}1 > /dev/null 2>&1 < /dev/null & )\n{last}\n"
        )
    };
    let ended = spool.submit("e.rad", &job("424221", "", "sleep 0.3"));
    let cancelled = spool.submit("c.rad", &job("424222", "", "sleep 60"));
    let limited = spool.submit("t.rad", &job("424223", "time: 2s\n", "sleep 60"));
    spool.wait_for("the jobs to start their escapees", 10.0, || {
        !sleepers("4242221").is_empty()
    });
    let out = spool.carma().args(["cancel", &cancelled]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    spool.wait_for("all three to end", 20.0, || {
        [&ended, &cancelled, &limited].iter().all(|n| {
            spool
                .find(n)
                .is_some_and(|(state, _)| state == "done" || state == "failed")
        })
    });
    for secs in ["424221", "424222", "424223"] {
        for hidden in [secs.to_string(), format!("{secs}1")] {
            assert!(
                sleepers(&hidden).is_empty(),
                "sleep {hidden} outlived its job"
            );
        }
    }
    spool.assert_logged("jobs run without cgroups: daemon.job_cgroups is false");
}

#[test]
fn cancel_stops_running_and_waiting_tasks() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let long = spool.submit("long.rad", &fake_job("long", "memory: whole\n", "1G", 60.0));
    let queued = spool.submit(
        "queued.rad",
        &fake_job("queued", "memory: whole\n", "1G", 60.0),
    );
    spool.wait_for("the long job to run", 10.0, || {
        spool.tasks("running").len() == 1
    });
    let out = spool.carma().args(["cancel", &queued]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("cancelled"), "{}", stdout(&out));
    let out = spool.carma().args(["cancel", &long]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(spool.tasks("failed").len(), 2);
    for name in [&long, &queued] {
        let (_, dir) = spool.find(name).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("reason")).unwrap().trim(),
            "cancelled"
        );
    }
    let (_, long_dir) = spool.find(&long).unwrap();
    let exit = fs::read_to_string(long_dir.join("run-1/exit.json")).unwrap();
    assert!(exit.contains("\"cancelled\": true"), "{exit}");
    // Cancelling a finished task says so.
    let out = spool.carma().args(["cancel", &long]).output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("already ended"), "{}", stderr(&out));
}

#[test]
fn a_two_gpu_job_gets_two_gpus() {
    let mut spool = Spool::new("2x40GiB");
    spool.start_daemon();
    spool.submit(
        "pair.rad",
        &format!("name: pair\ngpus: 2\nmemory: 4G\necho gpus=$CARMA_GPUS visible=$CUDA_VISIBLE_DEVICES\n{CARMA} fake-train --mem 4G --secs 0.3\n"),
    );
    spool.wait_count("done", 1, 10.0);
    let (_, dir) = spool.find("-pair").unwrap();
    let out = fs::read_to_string(dir.join("run-1/stdout")).unwrap();
    assert!(
        out.starts_with("gpus=0,1 visible=0,1") || out.starts_with("gpus=1,0 visible=1,0"),
        "{out}"
    );
}

#[test]
fn jobs_on_a_partitioned_gpu_run_on_its_instances_at_once() {
    // One GPU, partitioned into two 10 GiB instances: two 6 GiB jobs
    // (8 GiB with the margin) cannot share an instance, so they run at
    // once, one per instance, each seeing its instance's UUID.
    let mut spool = Spool::new("1x40GiB:mig=2g.10gb+2g.10gb");
    spool.start_daemon();
    for name in ["a", "b"] {
        spool.submit(
            &format!("{name}.rad"),
            &format!(
                "name: {name}\nmemory: 6G\necho gpus=$CARMA_GPUS visible=$CUDA_VISIBLE_DEVICES\n\
                 {CARMA} fake-train --mem 6G --secs 3\n"
            ),
        );
    }
    spool.wait_for("both jobs running", 10.0, || {
        spool.tasks("running").len() == 2
    });
    spool.wait_count("done", 2, 20.0);
    let mut seen: Vec<String> = ["a", "b"]
        .iter()
        .map(|name| {
            let (_, dir) = spool.find(&format!("-{name}")).unwrap();
            fs::read_to_string(dir.join("run-1/stdout"))
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        ["gpus=0 visible=MIG-SIM-0-0", "gpus=1 visible=MIG-SIM-0-1"]
    );
    spool.assert_logged("Simulated GPU GPU 0 MIG 2g.10gb");
}

#[test]
fn a_bad_mig_spec_says_where() {
    let spool = Spool::new("1x40GiB");
    let out = spool
        .carma()
        .args(["daemon", "--simulate-gpus", "1x40GiB:mig=3g.20gb+9g.5gb"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("column 21: expected a MIG profile such as 3g.20gb"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn one_daemon_per_spool() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let out = spool
        .carma()
        .args(["daemon", "--simulate-gpus", "1x40GiB"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("already serves"), "{}", stderr(&out));
}

#[test]
fn without_simulated_gpus_or_nvml_the_daemon_says_what_to_do() {
    let spool = Spool::new("1x40GiB");
    // A library that is not there, so the test means the same on a server
    // with a driver.
    let out = spool
        .carma()
        .args(["daemon"])
        .env(
            "CARMA_NVML_LIB",
            spool.dir.path().join("none/libnvidia-ml.so"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = stderr(&out);
    assert!(
        err.contains("NVML") && err.contains("--simulate-gpus"),
        "{err}"
    );
    // Under systemd the reason is in the journal at error priority.
    use std::os::unix::fs::MetadataExt;
    let log = spool.dir.path().join("journal");
    let file = fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    let status = spool
        .carma()
        .args(["daemon"])
        .env(
            "CARMA_NVML_LIB",
            spool.dir.path().join("none/libnvidia-ml.so"),
        )
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stderr(file)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(78));
    let journal = fs::read_to_string(&log).unwrap();
    assert!(
        journal.starts_with("<3>carma: cannot load NVML"),
        "{journal}"
    );
}

#[test]
fn status_shows_queues_and_gpus_and_why_the_head_waits() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let name = spool.submit("s.rad", &fake_job("s", "memory: 30G\n", "30G", 30.0));
    let waiting = spool.submit("t.rad", &fake_job("t", "memory: 20G\n", "1G", 30.0));
    spool.wait_for("the job to run", 10.0, || spool.tasks("running").len() == 1);
    // The second cannot fit beside the first: the status says so, plainly.
    let why = format!("{waiting} needs 22GiB free on a GPU; GPU 0: 10GiB free < 22GiB");
    spool.wait_for("the status to show it", 10.0, || {
        let out = spool.carma().args(["status", "--json"]).output().unwrap();
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        status["running"][0]["name"] == name.as_str()
            && status["gpus"][0]["used_mib"] == 30 * 1024
            && status["pending"].as_array().is_some_and(|p| p.len() == 1)
            && status["daemon_running"] == true
            && status["head_waits_for"] == why.as_str()
    });
    let out = spool.carma().arg("status").output().unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("running (1)") && text.contains(&name),
        "{text}"
    );
    let head: String = why.chars().take(60).collect();
    assert!(text.contains(&format!("\nhead: {head}")), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
}

#[test]
fn status_lists_a_long_queue_in_dispatch_order_filters_it_and_fits_the_terminal() {
    // One GPU held by `blocker`; 45 jobs wait behind it, the last with the
    // highest priority: it is the head, and shown first.
    let mut spool = Spool::new("1x40GiB");
    let gate = spool.dir.path().join("gate");
    spool.start_daemon();
    let blocker = spool.submit(
        "blocker.rad",
        &format!(
            "name: blocker\nmemory: whole\nwhile [ ! -e {} ]; do sleep 0.05; done\n",
            gate.display()
        ),
    );
    spool.wait_count("running", 1, 10.0);
    for i in 0..44 {
        spool.submit(
            &format!("j{i}.rad"),
            &format!("name: job-with-a-rather-long-name-{i}\nmemory: whole\ntrue\n"),
        );
    }
    let urgent = spool.submit(
        "urgent.rad",
        "name: urgent\npriority: 5\nmemory: whole\ntrue\n",
    );
    spool.wait_for("45 waiting", 10.0, || {
        let out = spool.carma().args(["status", "--json"]).output().unwrap();
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        status["waiting"].as_array().is_some_and(|w| w.len() == 45)
    });
    let text = stdout(&spool.carma().arg("status").output().unwrap());
    assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
    assert!(text.contains("GPU  used + reserved / total"), "{text}");
    assert!(
        text.contains("waiting (45: 0 recovering from an OOM crash, 45 pending)"),
        "{text}"
    );
    let first = text
        .lines()
        .skip_while(|l| !l.starts_with("waiting ("))
        .nth(1)
        .unwrap();
    assert!(first.starts_with(&format!("  {urgent}  ")), "{text}");
    assert!(
        text.contains("  ... and 25 more (carma status --all lists them)"),
        "{text}"
    );
    let all = stdout(&spool.carma().args(["status", "--all"]).output().unwrap());
    assert_eq!(
        all.matches("-job-with-a-rather-long-name-").count(),
        44,
        "{all}"
    );
    let running = stdout(
        &spool
            .carma()
            .args(["status", "--state", "running"])
            .output()
            .unwrap(),
    );
    assert!(
        running.contains(&blocker) && !running.contains("waiting ("),
        "{running}"
    );
    let nobody = stdout(
        &spool
            .carma()
            .args(["status", "--user", "nobody"])
            .output()
            .unwrap(),
    );
    assert!(
        nobody.contains("running (0)") && nobody.contains("waiting (0"),
        "{nobody}"
    );

    // A snapshot from before the tasks ended, left by a daemon that is
    // gone: not shown as current, and what ended since is not shown as
    // running or waiting.
    let snapshot = fs::read(spool.root.join("status.json")).unwrap();
    fs::write(&gate, "").unwrap();
    spool.wait_count("done", 46, 30.0);
    spool.stop_daemon("KILL");
    fs::write(spool.root.join("status.json"), snapshot).unwrap();
    let text = stdout(&spool.carma().arg("status").output().unwrap());
    assert!(text.starts_with("NO DAEMON serving the spool"), "{text}");
    assert!(
        text.contains("running (0)") && text.contains("waiting (0"),
        "{text}"
    );
    assert!(text.contains("done 46"), "{text}");
}

#[test]
fn sighup_reloads_the_configuration() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let config = fs::read_to_string(&spool.config).unwrap();
    fs::write(
        &spool.config,
        format!("{config}\n[recovery]\nmax_retries = 5\n"),
    )
    .unwrap();
    spool.signal_daemon("HUP");
    // What changed, key by key, in the file's words: no Rust debug dump.
    spool.wait_for("the reload", 10.0, || {
        spool
            .daemon_log()
            .contains("configuration reloaded: recovery.max_retries: 2 -> 5\n")
    });
    // A broken file is refused and the old configuration kept.
    fs::write(&spool.config, "[recovery]\nmax_retriez = 5\n").unwrap();
    spool.signal_daemon("HUP");
    spool.wait_for("the refusal", 10.0, || {
        spool.daemon_log().contains("reload failed")
    });
    spool.signal_daemon("USR1");
    spool.wait_for("the state dump", 10.0, || {
        spool.daemon_log().contains("state: 0 running")
    });
}

#[test]
fn a_job_that_ran_before_is_estimated_from_its_history() {
    // No declaration, no summary: the first run asks for a whole GPU. The
    // daemon sees it use 3 GiB; the same job submitted again is estimated
    // from that peak plus the history margin (5%, at least 256 MiB).
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let job = format!("name: again\n{CARMA} fake-train --mem 3G --secs 0.6\n");
    let first = spool.submit("again.rad", &job);
    spool.wait_count("done", 1, 10.0);
    let second = spool.submit("again.rad", &job);
    spool.wait_count("done", 2, 10.0);
    let estimate = |name: &str| -> serde_json::Value {
        let (_, dir) = spool.find(name).unwrap();
        let record: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("task.json")).unwrap()).unwrap();
        record["estimate"].clone()
    };
    assert_eq!(estimate(&first)["source"], "whole-gpu");
    assert_eq!(estimate(&second)["source"], "history");
    assert_eq!(estimate(&second)["need"], 3072 + 256);
    let (_, dir) = spool.find(&first).unwrap();
    let exit = fs::read_to_string(dir.join("run-1/exit.json")).unwrap();
    assert!(exit.contains("\"peak_mib\": 3072"), "{exit}");
}

#[test]
fn under_journald_log_lines_carry_syslog_priorities() {
    // systemd sets JOURNAL_STREAM to the device and inode of the stream it
    // connected to stderr; the daemon then writes `<N>` priority prefixes.
    use std::os::unix::fs::MetadataExt;
    let mut spool = Spool::new("1x40GiB");
    fs::write(spool.log_path(), "").unwrap();
    let meta = fs::metadata(spool.log_path()).unwrap();
    spool.daemon_env.push((
        "JOURNAL_STREAM".into(),
        format!("{}:{}", meta.dev(), meta.ino()),
    ));
    spool.start_daemon();
    spool.drop_file("bad.rad", "gpus: x\necho\n");
    let name = spool.submit("ok.rad", &fake_job("ok", "memory: 1G\n", "1G", 0.1));
    spool.wait_count("done", 1, 10.0);
    spool.wait_count("failed", 1, 10.0);
    let log = spool.daemon_log();
    assert!(log.lines().all(|l| l.starts_with('<')), "{log}");
    assert!(log.contains(&format!("<6>{name}: run 1 on GPU 0")), "{log}");
    assert!(
        log.lines()
            .any(|l| l.starts_with("<3>") && l.contains("-bad: refused: bad.rad:1:7")),
        "{log}"
    );
}

#[test]
fn under_mps_the_daemon_runs_the_control_daemon_and_caps_each_job() {
    // A fake nvidia-cuda-mps-control records how it is called; jobs print
    // the MPS variables they got. A fake nvidia-smi keeps the GPUs'
    // compute modes in a file: EXCLUSIVE_PROCESS while MPS runs, the
    // original mode back after.
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("mps-calls");
    let control = dir.path().join("nvidia-cuda-mps-control");
    executable(
        &control,
        &format!(
            "#!/bin/sh\necho \"args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY\" >> {0}\n\
             if [ \"$1\" != -d ]; then cat >> {0}; fi\n",
            record.display()
        ),
    );
    let modes = dir.path().join("modes");
    fs::write(&modes, "SIM-0, Default\n").unwrap();
    let smi = dir.path().join("nvidia-smi");
    executable(
        &smi,
        &format!(
            "#!/bin/sh\ncase \"$1\" in\n\
             --query-gpu=*) cat {0} ;;\n\
             -i) echo \"$2, $4\" > {0}; echo \"$*\" >> {0}.calls ;;\n\
             *) exit 2 ;;\nesac\n",
            modes.display()
        ),
    );
    let pipes = dir.path().join("pipes");
    let mut spool = Spool::with_config(
        "1x40GiB",
        &format!(
            "[mps]\nenabled = true\ncontrol = \"{}\"\npipe_dir = \"{}\"\nlog_dir = \"{}\"\nsmi = \"{}\"\n",
            control.display(),
            pipes.display(),
            dir.path().join("logs").display(),
            smi.display()
        ),
    );
    spool.start_daemon();
    assert_eq!(
        fs::read_to_string(&modes).unwrap(),
        "SIM-0, EXCLUSIVE_PROCESS\n"
    );
    assert!(spool.root.join("mps-compute-modes.json").is_file());
    spool.submit(
        "capped.rad",
        "name: capped\nmemory: 6G\necho limit=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT pipe=$CUDA_MPS_PIPE_DIRECTORY\n",
    );
    spool.wait_count("done", 1, 10.0);
    let (_, task) = spool.find("-capped").unwrap();
    let out = fs::read_to_string(task.join("run-1/stdout")).unwrap();
    // 6 GiB estimate + 2 GiB margin on the job's one device.
    assert_eq!(
        out.trim(),
        format!("limit=0=8192M pipe={}", pipes.display())
    );
    assert!(spool.stop_daemon("TERM").success());
    let calls = fs::read_to_string(&record).unwrap();
    assert_eq!(
        calls,
        format!("args=-d pipe={0}\nargs= pipe={0}\nquit\n", pipes.display())
    );
    assert_eq!(fs::read_to_string(&modes).unwrap(), "SIM-0, DEFAULT\n");
    assert!(!spool.root.join("mps-compute-modes.json").exists());
}

#[test]
fn compute_modes_saved_by_a_crashed_daemon_are_the_ones_restored() {
    // The first daemon switched GPU 0 to EXCLUSIVE_PROCESS and was killed
    // before restoring it. Its saved file says the GPU was PROHIBITED: the
    // second daemon must restore that, not the EXCLUSIVE_PROCESS it finds.
    let dir = tempfile::tempdir().unwrap();
    let modes = dir.path().join("modes");
    fs::write(&modes, "SIM-0, Exclusive_Process\n").unwrap();
    let smi = dir.path().join("nvidia-smi");
    executable(
        &smi,
        &format!(
            "#!/bin/sh\ncase \"$1\" in\n--query-gpu=*) cat {0} ;;\n-i) echo \"$2, $4\" > {0} ;;\nesac\n",
            modes.display()
        ),
    );
    let control = dir.path().join("control");
    executable(&control, "#!/bin/sh\ncat >/dev/null\n");
    let mut spool = Spool::with_config(
        "1x40GiB",
        &format!(
            "[mps]\nenabled = true\ncontrol = \"{}\"\npipe_dir = \"{1}/p\"\nlog_dir = \"{1}/l\"\nsmi = \"{2}\"\n",
            control.display(),
            dir.path().display(),
            smi.display()
        ),
    );
    fs::create_dir_all(&spool.root).unwrap();
    let saved = spool.root.join("mps-compute-modes.json");
    fs::write(&saved, r#"{"SIM-0":"PROHIBITED"}"#).unwrap();
    fs::set_permissions(&saved, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    spool.start_daemon();
    assert!(spool.stop_daemon("TERM").success());
    assert_eq!(fs::read_to_string(&modes).unwrap(), "SIM-0, PROHIBITED\n");
    assert!(!saved.exists());
}

#[test]
fn a_dropped_job_brings_its_model_summary_along() {
    // A user copies a job and the summary it names into pending/; the
    // summary travels into the task directory and feeds the estimator.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let summary = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/models/lenet5_64.model"
    ))
    .unwrap();
    spool.drop_file("lenet.model", &summary);
    spool.drop_file(
        "lenet.rad",
        "model: lenet.model\nbatch_size: 64\necho trained\n",
    );
    spool.wait_count("done", 1, 10.0);
    let (_, dir) = spool.find("-lenet").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("job/lenet.model")).unwrap(),
        summary
    );
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("task.json")).unwrap()).unwrap();
    // The ensemble answered, lowered by the formula (the learned CNN floor
    // is 0).
    assert_eq!(
        record["estimate"]["source"], "ensemble+analytic",
        "{record}"
    );
    // The summary stays in pending/ a while for other jobs that name it,
    // then goes: every task that named it has its own copy.
    spool.wait_for("the copied summary to leave pending/", 20.0, || {
        !spool.root.join("pending/lenet.model").exists()
    });
    assert!(spool.tasks("failed").is_empty());
}

#[test]
fn a_job_dropped_before_its_summary_waits_for_it() {
    // `cp job.rad pending/; cp job.model pending/`: the job must not be
    // claimed in between and lose its summary.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let summary = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/models/lenet5_64.model"
    ))
    .unwrap();
    spool.drop_file(
        "late.rad",
        "model: late.model\nbatch_size: 64\necho trained\n",
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(spool.tasks("pending").is_empty(), "not claimed yet");
    spool.drop_file("late.model", &summary);
    spool.wait_count("done", 1, 15.0);
    let (_, dir) = spool.find("-late").unwrap();
    assert_eq!(
        fs::read_to_string(dir.join("job/late.model")).unwrap(),
        summary
    );
    let log = spool.daemon_log();
    assert!(!log.contains("estimating without it"), "{log}");
}

#[test]
fn a_file_no_job_names_goes_to_failed_with_its_reason() {
    // A stray file is not left lying in pending/: it becomes a refused
    // entry in failed/, kept, with the reason. A job whose summary never
    // comes runs without it after a short wait.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    spool.drop_file("notes.txt", "remember the milk\n");
    spool.drop_file("lonely.rad", "model: never.model\necho ran\n");
    spool.wait_count("done", 1, 15.0);
    spool.wait_count("failed", 1, 20.0);
    let (_, stray) = spool.find("-notes").unwrap();
    let reason = fs::read_to_string(stray.join("reason")).unwrap();
    assert!(reason.contains("not a job file"), "{reason}");
    assert!(stray.join("dropped/notes.txt").is_file());
    assert!(!spool.root.join("pending/notes.txt").exists());
    let log = spool.daemon_log();
    assert!(
        log.contains("model summary `never.model` not found"),
        "{log}"
    );
}

#[test]
fn a_restart_with_fewer_gpus_sees_the_job_on_a_missing_gpu_through() {
    // Two whole-GPU jobs fill two GPUs; the daemon comes back with one.
    // The job on the GPU that is gone is not lost: the log says so, and
    // it ends in done/ like the other.
    let mut spool = Spool::new("2x40GiB");
    spool.start_daemon();
    for name in ["first", "second"] {
        spool.submit(
            &format!("{name}.rad"),
            &fake_job(name, "policy: exclusive\n", "1G", 4.0),
        );
    }
    spool.wait_count("running", 2, 10.0);
    // Both jobs hold their memory (a fake job that claimed it after the
    // GPU vanished would fail, as a real one would).
    spool.wait_for("both jobs to hold their memory", 10.0, || {
        let status = fs::read_to_string(spool.root.join("status.json")).unwrap_or_default();
        let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
        status["gpus"]
            .as_array()
            .is_some_and(|gpus| gpus.iter().all(|g| g["used_mib"].as_u64() > Some(0)))
    });
    assert!(spool.stop_daemon("TERM").success());
    spool.start_daemon_with(&["--simulate-gpus", "1x40GiB"], &[]);
    let log = spool.daemon_log();
    assert!(
        log.contains("runs on GPU 1, which this daemon does not have (1 GPU(s))"),
        "{log}"
    );
    spool.wait_count("done", 2, 20.0);
}

#[test]
fn simulated_gpus_run_without_mps_when_it_cannot_start() {
    // The installed sample configuration turns MPS on; trying carma out
    // with --simulate-gpus on a machine without MPS must still work.
    let mut spool = Spool::with_config(
        "1x40GiB",
        "[mps]\nenabled = true\ncontrol = \"/nonexistent/nvidia-cuda-mps-control\"\n",
    );
    spool.start_daemon();
    spool.submit("a.rad", &fake_job("a", "memory: 1G\n", "1G", 0.2));
    spool.wait_count("done", 1, 10.0);
    let log = spool.daemon_log();
    assert!(
        log.contains("simulated GPUs run without it, as if mps.enabled = false"),
        "{log}"
    );
}

/// The parent of process `pid`, if it lives.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The children of `parent` started as `carma-supervise --nursery`: the
/// daemon's nursery, or the supervisors a nursery forked.
fn nursery_children(parent: u32) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            parent_of(pid) == Some(parent) && cmdline.split(|&b| b == 0).any(|a| a == b"--nursery")
        })
        .collect()
}

/// The pid a run's `supervisor.json` names.
fn supervisor_of(run_dir: &Path) -> u32 {
    let text = fs::read_to_string(run_dir.join("supervisor.json")).unwrap();
    let id: serde_json::Value = serde_json::from_str(&text).unwrap();
    id["pid"].as_u64().unwrap() as u32
}

/// Waits until task `name`'s first run has named its supervisor; its pid.
fn running_supervisor(spool: &Spool, name: &str) -> u32 {
    let run = spool.root.join("running").join(name).join("run-1");
    spool.wait_for("the run's supervisor", 10.0, || {
        run.join("supervisor.json").exists()
    });
    supervisor_of(&run)
}

fn nursery_of(spool: &Spool, daemon: u32, not: Option<u32>) -> u32 {
    spool.wait_for("the supervisors' nursery", 10.0, || {
        nursery_children(daemon).iter().any(|&p| Some(p) != not)
    });
    nursery_children(daemon)
        .into_iter()
        .find(|&p| Some(p) != not)
        .unwrap()
}

#[test]
fn the_nursery_forks_supervisors_its_death_loses_no_run_and_it_leaves_with_the_daemon() {
    let mut spool = Spool::new("2x40GiB");
    spool.start_daemon();
    let daemon = spool.daemon_pid().unwrap();
    let nursery = nursery_of(&spool, daemon, None);
    // `carma-supervise`, built beside `carma`, of this build (unless this
    // checkout is open to others: then `carma supervise`, as the check
    // says); the daemon says which.
    let (expected, why) = carma::supervisor::program::Program::find(Path::new(CARMA));
    let program = fs::read_link(format!("/proc/{nursery}/exe")).unwrap();
    assert_eq!(program, expected.exe());
    if why.is_none() {
        let helper = fs::canonicalize(env!("CARGO_BIN_EXE_carma-supervise")).unwrap();
        assert_eq!(program, helper);
    }
    let said = format!("runs are supervised by {}", expected.exe().display());
    spool.assert_logged(&said);

    // A run's supervisor is the nursery's child, in a session of its own;
    // the job has nothing of the nursery's (its socket, its signalfd, its
    // blocked SIGCHLD).
    let first = spool.submit(
        "first.rad",
        "memory: 1G\nls -l /proc/self/fd/\ngrep SigBlk /proc/self/status\nsleep 3\n",
    );
    let supervisor = running_supervisor(&spool, &first);
    assert_eq!(parent_of(supervisor), Some(nursery));
    let session = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(supervisor as i32)));
    assert_eq!(session.unwrap().as_raw() as u32, supervisor);

    // A nursery that dies takes no run with it: its supervisor goes on,
    // and the run's end is found; the next run's supervisor comes from a
    // new nursery.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(nursery as i32),
        nix::sys::signal::SIGKILL,
    )
    .unwrap();
    assert!(Path::new(&format!("/proc/{supervisor}")).exists());
    spool.wait_count("done", 1, 15.0);
    let run = spool.root.join("done").join(&first).join("run-1");
    let exit = fs::read_to_string(run.join("exit.json")).unwrap();
    assert!(exit.contains("\"code\": 0"), "{exit}");
    let seen = fs::read_to_string(run.join("stdout")).unwrap();
    assert!(seen.contains("SigBlk:\t0000000000000000"), "{seen}");
    assert!(
        !seen.contains("socket:") && !seen.contains("signalfd"),
        "{seen}"
    );
    assert!(!spool.daemon_log().contains("died without recording"));
    let second_nursery = nursery_of(&spool, daemon, Some(nursery));
    let second = spool.submit("second.rad", "memory: 1G\nsleep 30\n");
    let supervisor = running_supervisor(&spool, &second);
    assert_eq!(parent_of(supervisor), Some(second_nursery));

    // The nursery leaves with the daemon; the running supervisor stays.
    assert!(spool.stop_daemon("TERM").success());
    spool.wait_for("the nursery to exit", 10.0, || {
        parent_of(second_nursery).is_none()
            || fs::read_to_string(format!("/proc/{second_nursery}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    });
    assert!(Path::new(&format!("/proc/{supervisor}")).exists());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(supervisor as i32),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn without_its_helper_carma_supervises_runs_itself() {
    // `carma` alone, without `carma-supervise` beside it: a hard link in a
    // directory of its own under the target directory.
    let alone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let carma = alone.path().join("carma");
    if fs::hard_link(CARMA, &carma).is_err() {
        fs::copy(CARMA, &carma).unwrap();
    }
    let mut spool = Spool::new("1x40GiB");
    // The wrapper drops the usual binary and runs the lone one instead.
    let lone = carma.to_str().unwrap();
    spool.spawn_daemon_wrapped(&["sh", "-c", "shift; exec \"$0\" \"$@\"", lone]);
    spool.wait_daemon_ready(20.0);
    let daemon = spool.daemon_pid().unwrap();
    let nursery = nursery_of(&spool, daemon, None);
    assert_eq!(
        fs::read_link(format!("/proc/{nursery}/exe")).unwrap(),
        carma
    );
    let cmdline = fs::read(format!("/proc/{nursery}/cmdline")).unwrap();
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    assert_eq!(&args[1..3], [&b"supervise"[..], b"--nursery"]);
    spool.assert_logged(&format!("runs are supervised by {lone} supervise ("));

    let task = spool.submit("alone.rad", "memory: 1G\necho supervised\n");
    spool.wait_count("done", 1, 15.0);
    let out = fs::read_to_string(spool.root.join("done").join(&task).join("run-1/stdout"));
    assert_eq!(out.unwrap(), "supervised\n");
    assert!(spool.stop_daemon("TERM").success());
}

#[test]
fn a_stopped_nursery_is_replaced_and_the_run_it_held_runs_once() {
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let daemon = spool.daemon_pid().unwrap();
    let nursery = nursery_of(&spool, daemon, None);
    let stopped = nix::unistd::Pid::from_raw(nursery as i32);
    nix::sys::signal::kill(stopped, nix::sys::signal::SIGSTOP).unwrap();
    // Handed to a nursery that takes nothing: after 10 s it is replaced,
    // and the run, which nobody supervised, starts again elsewhere.
    let name = spool.submit("held.rad", "memory: 1G\necho ran\n");
    spool.wait_count("done", 1, 30.0);
    let done = spool.root.join("done").join(&name);
    // Its first run never started (nobody named itself its supervisor);
    // the second ran it, once.
    assert!(!done.join("run-1").join("supervisor.json").exists());
    let stdout = fs::read_to_string(done.join("run-2").join("stdout")).unwrap();
    assert_eq!(stdout, "ran\n");
    assert!(!done.join("run-3").exists());
    assert!(spool.daemon_log().contains("has not taken a run for 10 s"));
    assert_ne!(nursery_of(&spool, daemon, Some(nursery)), nursery);
}

/// A job as `carma submit` hands it over the daemon's socket.
fn socket_job(rad: &str, text: &str) -> carma::spool::socket::Job {
    carma::spool::socket::Job {
        rad: rad.into(),
        rad_bytes: text.as_bytes().to_vec(),
        summary: None,
        workdir: Some(std::env::temp_dir()),
        umask: None,
        owner: None,
    }
}

#[test]
fn a_running_daemon_takes_jobs_over_its_socket_and_says_at_once_what_it_refused() {
    // Other users' `carma submit` speaks to the socket (carma's own user
    // makes its tasks by itself); here the spool's owner speaks to it
    // through the same library.
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    let socket = spool.root.join("submit.sock");
    assert!(socket.exists(), "the daemon listens on submit.sock");
    let lib = carma::spool::Spool::new(&spool.root);
    let jobs = vec![
        socket_job("a.rad", "memory: 1G\necho ran\n"),
        socket_job("dep.rad", "memory: 1G\nafterok: 999999\ntrue\n"),
    ];
    // A token is `submit-` and the sender's uid, then anything.
    let me = nix::unistd::geteuid();
    let handed = lib.hand_over(jobs, &[], &format!("submit-{me}-test-1"));
    assert!(handed.rest.is_none(), "{:?}", handed.rest);
    let [ran, refused] = &handed.receipts[..] else {
        panic!("{:?}", handed.receipts);
    };
    let name = ran.name.clone().unwrap();
    assert!(name.ends_with("-a") && ran.refused.is_none(), "{ran:?}");
    spool.assert_logged(&format!("{name}: received a.rad from uid"));
    // Refused as the daemon took it in: the answer says why, and its task
    // holds the reason.
    let why = refused.refused.clone().unwrap();
    assert!(why.contains("afterok: 999999: no such task"), "{why}");
    let refused = refused.name.clone().unwrap();
    spool.wait_for("the refused task in failed/", 5.0, || {
        spool.root.join("failed").join(&refused).exists()
    });
    spool.wait_count("done", 1, 10.0);
    let out = fs::read_to_string(spool.root.join("done").join(&name).join("run-1/stdout"));
    assert_eq!(out.unwrap(), "ran\n");
    // Stopped, the daemon takes its socket away: submissions go by
    // pending/, and the next daemon takes them in.
    assert!(spool.stop_daemon("TERM").success());
    assert!(!socket.exists(), "a stopped daemon leaves no socket");
    let waiting = spool.submit("b.rad", "memory: 1G\ntrue\n");
    assert!(waiting.ends_with("-b"), "{waiting}");
    spool.start_daemon();
    spool.wait_count("done", 2, 10.0);
}

#[test]
fn a_submitter_whose_daemon_died_before_answering_learns_from_the_next_what_it_took() {
    use carma::spool::socket::{Settled, Unsent};
    use std::io::Read;
    use std::os::unix::net::UnixListener;
    let mut spool = Spool::new("1x40GiB");
    spool.start_daemon();
    assert!(spool.stop_daemon("TERM").success());
    let lib = carma::spool::Spool::new(&spool.root);
    for taken in [true, false] {
        // A daemon that reads the request whole and dies without an
        // answer; the next one's status names what it took, or not.
        let socket = spool.root.join("submit.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let status = spool.root.join("status.json");
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut head = [0u8; 19];
            stream.read_exact(&mut head).unwrap();
            let len = u32::from_le_bytes(head[15..19].try_into().unwrap()) as usize;
            let mut header = vec![0u8; len];
            stream.read_exact(&mut header).unwrap();
            let header: serde_json::Value = serde_json::from_slice(&header).unwrap();
            let token = header["token"].as_str().unwrap().to_owned();
            let adopted = match taken {
                true => serde_json::json!([[token, "000777-a"]]),
                false => serde_json::json!([]),
            };
            let next = serde_json::json!({
                "updated_at": common::unix_now() + 1.0, "daemon_pid": 1, "backend": "",
                "gpus": [], "running": [], "recovery": [], "pending": [],
                "head_waits_for": null, "adopted": adopted,
            });
            drop(stream);
            fs::remove_file(&socket).unwrap();
            fs::write(&status, next.to_string()).unwrap();
        });
        let token = format!("submit-{}-test-2", nix::unistd::geteuid());
        let handed = lib.hand_over(vec![socket_job("a.rad", "true\n")], &[], &token);
        server.join().unwrap();
        assert!(handed.receipts.is_empty());
        let Some(Unsent::Unanswered(unanswered)) = handed.rest else {
            panic!("{:?}", handed.rest);
        };
        let settled = lib.settle(&unanswered, Duration::from_secs(10));
        match taken {
            true => assert_eq!(settled, Settled::Taken(vec!["000777-a".into()])),
            false => assert_eq!(settled, Settled::NotTaken),
        }
    }
}

#[test]
fn a_job_never_inherits_signals_ignored_by_whoever_started_the_daemon() {
    // `trap '' QUIT INT` (or nohup's SIGHUP) before `carma daemon`: an
    // ignored signal stays ignored across exec, into the nursery and the
    // supervisors; the job gets every signal at its default all the same.
    let mut spool = Spool::new("1x40GiB");
    spool.spawn_daemon_wrapped(&["bash", "-c", "trap '' QUIT INT HUP; exec \"$@\"", "bash"]);
    spool.wait_daemon_ready(20.0);
    let name = spool.submit("ign.rad", "memory: 1G\ngrep SigIgn /proc/self/status\n");
    spool.wait_count("done", 1, 15.0);
    let run = spool.root.join("done").join(&name).join("run-1");
    let seen = fs::read_to_string(run.join("stdout")).unwrap();
    assert!(seen.contains("SigIgn:\t0000000000000000"), "{seen}");
}

#[test]
fn a_submitted_job_runs_with_its_submitters_umask() {
    // As a shell's umask goes to what it starts (and Slurm's jobs get
    // their submitter's): the daemon's own mask is no one's choice.
    let mut spool = Spool::new("1x40GiB");
    let submit = |spool: &Spool, file: &str| {
        let path = spool.job(file, "memory: 1G\numask\n");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask 027 && exec {CARMA} submit {}",
                path.display()
            ))
            .env("CARMA_SPOOL", &spool.root)
            .env("CARMA_CONFIG", &spool.config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // While no daemon serves (a submission left in pending/), and over
    // its socket.
    spool.start_daemon();
    spool.stop_daemon("TERM");
    submit(&spool, "early.rad");
    spool.start_daemon();
    submit(&spool, "late.rad");
    spool.drop_file("dropped.rad", "memory: 1G\numask\n");
    spool.wait_count("done", 3, 20.0);
    let mask = |name: &str| {
        let (_, dir) = spool.find(name).unwrap();
        fs::read_to_string(dir.join("run-1/stdout")).unwrap()
    };
    assert_eq!(mask("-early"), "0027\n");
    assert_eq!(mask("-late"), "0027\n");
    // A dropped file has no submitter: the daemon's mask.
    assert_ne!(mask("-dropped"), "0027\n");
}
