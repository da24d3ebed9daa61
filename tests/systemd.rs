//! The shipped unit file is valid for systemd (`systemd-analyze verify`),
//! checked against this build's binary.

use std::fs;
use std::process::Command;

#[test]
fn the_unit_file_verifies() {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        analyze.is_ok_and(|o| o.status.success()),
        "systemd-analyze is missing: install systemd (`apt-get install systemd`); .ci/run does"
    );
    let unit = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/carma.service"
    ))
    .unwrap();
    assert!(
        unit.contains("KillMode=process"),
        "jobs must survive daemon restarts"
    );
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // One source of truth for the spool: the configuration file, which
    // `carma status`, `submit` and `cancel` read too.
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(!exec.contains("--spool"), "{exec}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("carma.service");
    fs::write(
        &path,
        unit.replace("/usr/local/bin/carma", env!("CARGO_BIN_EXE_carma")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && !text.contains("carma.service:"),
        "{text}"
    );
}
