//! The reader against fake `dcgmi` scripts: values, errors, exits, hangs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

/// Writes an executable `dcgmi` into `dir` that records its arguments and
/// each start in `dir`, then runs `body`.
fn fake_dcgmi(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("dcgmi");
    let d = dir.display();
    fs::write(
        &path,
        format!("#!/bin/bash\necho \"$*\" > {d}/args\necho start >> {d}/starts\n{body}\n"),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn starts(dir: &Path) -> usize {
    fs::read_to_string(dir.join("starts")).map_or(0, |s| s.lines().count())
}

fn wait_for(what: &str, seconds: f64, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn values_are_fresh_until_a_silent_dcgmi_is_killed_and_started_again() {
    let dir = tempfile::tempdir().unwrap();
    // One round of values, then silence (checking that its reader lives,
    // so the script never outlives the test by long).
    let program = fake_dcgmi(
        dir.path(),
        "echo '#Entity   SMACT   SMOCC   DRAMA'\necho ID\n\
         echo 'GPU 0     0.812   0.456   N/A'\necho 'GPU 1     N/A     N/A     N/A'\n\
         echo 'GPU-I 3   0.1     0.1     0.1'\n\
         while sleep 0.1; do :; done",
    );
    let dmon = Dmon::start(&program, Duration::from_millis(100));
    assert_eq!(dmon.fresh_for(), Duration::from_millis(1300));
    wait_for("values", 5.0, || dmon.fresh(Instant::now()).len() == 2);
    let fresh = dmon.fresh(Instant::now());
    assert_eq!(
        fresh[&0],
        Fields {
            smact: Some(0.812),
            occupancy: Some(0.456),
            dram: None
        }
    );
    assert_eq!(fresh[&1].smact, None);
    assert_eq!(
        fs::read_to_string(dir.path().join("args")).unwrap(),
        "dmon -e 1002,1003,1005 -d 100\n"
    );
    // Stale after 1.3 s: nothing is used, and the silent child is killed
    // and started again after a second.
    wait_for("stale values", 5.0, || {
        dmon.fresh(Instant::now()).is_empty()
    });
    wait_for("a restart", 5.0, || starts(dir.path()) >= 2);
}

#[test]
fn errors_and_exits_give_no_values_and_restart_with_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let program = fake_dcgmi(
        dir.path(),
        "echo 'Error: Unable to connect to host engine.' >&2\nexit 1",
    );
    let dmon = Dmon::start(&program, Duration::from_millis(100));
    wait_for("a restart", 5.0, || starts(dir.path()) >= 2);
    assert!(dmon.fresh(Instant::now()).is_empty());
    // 1 s, then 2 s between starts: three starts take over 3 s.
    let begun = Instant::now();
    wait_for("a third start", 5.0, || starts(dir.path()) >= 3);
    assert!(begun.elapsed() >= Duration::from_millis(1500));
    let said = lock(&dmon.shared).said.clone();
    assert!(
        said.iter()
            .any(|s| s.contains("\"Error: Unable to connect to host engine.\"")),
        "{said:?}"
    );
    assert!(
        said.iter().any(|s| s.contains("ended (exit status: 1)")),
        "{said:?}"
    );
}

#[test]
fn a_missing_dcgmi_gives_no_values_and_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let dmon = Dmon::start(&dir.path().join("no-such-dcgmi"), Duration::from_secs(1));
    wait_for("the failure to be said", 5.0, || {
        lock(&dmon.shared)
            .said
            .iter()
            .any(|s| s.contains("cannot run"))
    });
    assert!(dmon.fresh(Instant::now()).is_empty());
}
