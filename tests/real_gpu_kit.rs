//! The real-GPU kit (`tools/real-gpu/`) against the fake NVML, so that the
//! scripts a lent GPU machine runs keep working between the rare sessions
//! that have one: on the H200, a step that had never run failed for a
//! reason no GPU was needed to find (docs/measured-h200.md).

use std::fs;
use std::process::Command;

#[test]
#[ignore = "needs cc and python3 (and root for step 7): runs tools/real-gpu/run.sh --fake, about 40 s"]
fn the_real_gpu_kit_runs_its_steps_against_the_fake_nvml() {
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("tools/real-gpu/run.sh")
        .args([
            "--fake",
            "--carma",
            env!("CARGO_BIN_EXE_carma"),
            "--steps",
            "1,2,3,5,7",
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
