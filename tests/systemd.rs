//! The shipped unit file is valid for systemd (`systemd-analyze verify`),
//! checked against this build's binary, and keeps the hardening and
//! restart policy the README explains.

use std::fs;
use std::process::Command;

#[test]
fn the_unit_file_verifies() {
    let analyze = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        analyze.is_ok_and(|o| o.status.success()),
        "systemd-analyze is missing: install systemd (`apt-get install systemd`); .ci/run does"
    );
    let unit = unit();
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
    // `--man=no`: the `Documentation=` pages are checked by tests/install.rs
    // (they are installed with the binary, not here).
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
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

/// The unit's `Key=value` lines (comments and sections left out).
fn directives(unit: &str) -> Vec<(&str, &str)> {
    unit.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .collect()
}

fn unit() -> String {
    fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/systemd/carma.service"
    ))
    .unwrap()
}

#[test]
fn the_unit_is_hardened_only_where_jobs_keep_what_their_users_have() {
    let unit = unit();
    let set = directives(&unit);
    for (key, value) in [
        ("ProtectSystem", "full"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert!(set.contains(&(key, value)), "{key}={value} missing");
    }
    // Jobs inherit all of these; each would take away something a job's
    // user has (the unit's comments say what).
    for key in [
        "ProtectHome",
        "PrivateTmp",
        "NoNewPrivileges",
        "CapabilityBoundingSet",
        "DevicePolicy",
        "DeviceAllow",
        "PrivateDevices",
        "ProtectKernelModules",
        "ProtectClock",
        "ProtectKernelLogs",
        "ProtectHostname",
        "RestrictSUIDSGID",
        "LockPersonality",
        "MemoryDenyWriteExecute",
        "RestrictNamespaces",
        "PrivateUsers",
        "SystemCallFilter",
        "RestrictAddressFamilies",
        "PrivateNetwork",
        "ProtectProc",
        "ProcSubset",
    ] {
        assert!(
            set.iter().all(|(k, _)| *k != key),
            "{key} would reach the jobs"
        );
        assert!(
            unit.lines().any(|l| l.starts_with('#') && l.contains(key)),
            "the unit does not say why {key} is not set"
        );
    }
}

#[test]
fn a_missing_nvml_is_not_restarted_and_failures_do_not_loop() {
    let unit = unit();
    let set = directives(&unit);
    // carma's exit status for "no GPUs to serve" (commands/daemon.rs).
    assert!(set.contains(&("RestartPreventExitStatus", "78")));
    assert!(set.contains(&("Restart", "on-failure")));
    assert!(set.contains(&("StartLimitBurst", "5")));
    assert!(set.contains(&("StartLimitIntervalSec", "10min")));
    let unit_section = &unit[..unit.find("[Service]").unwrap()];
    assert!(
        unit_section.contains("\nStartLimitBurst="),
        "start limits belong in [Unit]"
    );
}
