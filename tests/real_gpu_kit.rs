//! The real-GPU kit (`tools/real-gpu/`) against the fake NVML, so that the
//! scripts a lent GPU machine runs keep working between the rare sessions
//! that have one: on the H200, a step that had never run failed for a
//! reason no GPU was needed to find (docs/measured-h200.md).

use std::fs;
use std::process::Command;

#[test]
#[ignore = "needs cc and python3 (and root for step 7): runs tools/real-gpu/run.sh --fake, about 70 s"]
fn the_real_gpu_kit_runs_its_steps_against_the_fake_nvml() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("tools/real-gpu/run.sh")
        .args([
            "--fake",
            "--carma",
            env!("CARGO_BIN_EXE_carma"),
            "--steps",
            "1,2,3,5,7,8",
        ])
        .arg("--out")
        .arg(out.path())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run.sh runs");
    let summary = fs::read_to_string(out.path().join("summary.txt")).unwrap_or_default();
    assert!(
        run.status.success(),
        "{}\n{summary}",
        String::from_utf8_lossy(&run.stderr)
    );
    // 1: every reading agrees with the fake nvidia-smi.
    assert!(summary.contains("GPU 0 used MiB"), "{summary}");
    assert!(!summary.contains("DIFFERS"), "{summary}");
    // 2 and 3: the job over its memory crashed once and its re-run ended well.
    for job in ["greedy", "underestimated"] {
        assert!(
            summary.contains(&format!("-{job}: ended in done/ after 2 run(s)")),
            "{job}: {summary}"
        );
    }
    // 8: one job stopped at its time limit, one cancelled, both by
    // SIGTERM; nothing left on the GPU, and the next job ran.
    assert!(
        summary.contains("-timed: time limit: stopped after its 20s of wall time; timed out True, cancelled False, signal 15")
            && summary.contains("-cancelled: cancelled; timed out False, cancelled True, signal 15")
            && summary.contains("compute processes left on the GPU: 0")
            && summary.contains("-after (after the stops, same MPS server): done"),
        "{summary}"
    );
    // 5: both latencies were measured.
    assert!(
        summary.contains("submit -> first line p50") && !summary.contains("p50 n/a"),
        "{summary}"
    );
    // 7, as root: two users made, each job run as its user, the users gone.
    if nix::unistd::Uid::effective().is_root() {
        for user in ["carma-gpu-a", "carma-gpu-b"] {
            assert!(
                summary.contains(&format!("-{user}: done"))
                    && summary.contains(&format!("on GPU 0 as {user}")),
                "{user}: {summary}"
            );
            assert!(
                nix::unistd::User::from_name(user).unwrap().is_none(),
                "{user} left behind"
            );
        }
    } else {
        assert!(summary.contains("7. skipped: needs root"), "{summary}");
    }
}

/// Copies a directory tree, so that the analysis writes into a scratch copy.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn collocate(args: &[&std::ffi::OsStr]) -> std::process::Output {
    let run = Command::new("python3")
        .arg("tools/real-gpu/collocate.py")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("python3 runs");
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    run
}

#[test]
#[ignore = "needs python3: runs tools/real-gpu/collocate.py --fake, about 30 s"]
fn the_collocation_kit_runs_its_schedule_against_simulated_gpus() {
    let out = tempfile::tempdir().unwrap();
    let carma = std::ffi::OsStr::new(env!("CARGO_BIN_EXE_carma"));
    collocate(&[
        "run".as_ref(),
        "--fake".as_ref(),
        "--phase-s".as_ref(),
        "1.5".as_ref(),
        "--carma".as_ref(),
        carma,
        "--out".as_ref(),
        out.path().as_os_str(),
    ]);
    // Every worker followed the schedule and the daemon logged the GPU.
    for worker in ["light1", "light2", "medium1", "medium2", "heavy1", "heavy2"] {
        let record = fs::read_to_string(out.path().join(format!("streams/{worker}.json"))).unwrap();
        assert!(record.contains("\"steps\": [1"), "{worker}: {record}");
    }
    assert!(out.path().join("gpu-log.csv").exists());
    collocate(&["analyse".as_ref(), out.path().as_os_str()]);
    // Each of the six has a speed in the phase they all ran.
    let analysis = fs::read_to_string(out.path().join("analysis.md")).unwrap();
    let all = analysis
        .lines()
        .find(|l| l.starts_with("| light1+light2+medium1+medium2+heavy1+heavy2 |"))
        .unwrap_or_else(|| panic!("{analysis}"));
    for worker in ["light1", "light2", "medium1", "medium2", "heavy1", "heavy2"] {
        let speed = all.split(&format!(" {worker} ")).nth(1).unwrap_or("");
        assert!(
            speed.starts_with(|c: char| c.is_ascii_digit()),
            "{worker}: {all}"
        );
    }
}

#[test]
#[ignore = "needs python3"]
fn the_collocation_measurements_give_the_analysis_kept_beside_them() {
    let kept =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/measured-h200/collocated");
    for run in ["launch-bound-light", "data-stalled-light"] {
        let scratch = tempfile::tempdir().unwrap();
        copy_tree(&kept.join(run), scratch.path());
        collocate(&["analyse".as_ref(), scratch.path().as_os_str()]);
        assert_eq!(
            fs::read_to_string(scratch.path().join("analysis.md")).unwrap(),
            fs::read_to_string(kept.join(run).join("analysis.md")).unwrap(),
            "{run}"
        );
    }
    // The figures docs/simulation.md gives for the two runs together.
    let dirs: Vec<_> = ["launch-bound-light", "data-stalled-light"]
        .iter()
        .map(|run| kept.join(run).into_os_string())
        .collect();
    let mut args = vec![std::ffi::OsStr::new("fit")];
    args.extend(dirs.iter().map(|d| d.as_os_str()));
    let fit = String::from_utf8(collocate(&args).stdout).unwrap();
    for figure in [
        "k = 0.15 (its default): rms 0.122",
        "k = 0.380 (least squares): rms 0.112",
        "activity^1.3, k = 0.20: rms 0.103",
        "k = 0.55 (its default): rms 0.186",
    ] {
        assert!(fit.contains(figure), "{figure}: {fit}");
    }
}
