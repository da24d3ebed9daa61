//! The shipped unit file is valid for systemd (`systemd-analyze verify`),
//! checked against this build's binary, and keeps the hardening and
//! restart policy the README explains. The tmpfiles.d entry makes the
//! spool the daemon makes.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
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
        ("RestrictRealtime", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert!(set.contains(&(key, value)), "{key}={value} missing");
    }
    // Jobs inherit all of these; each would take away something a job's
    // user has (the unit's comments say what).
    for key in [
        "ProtectControlGroups",
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

/// Every directory at or below `root`: its path from `root`, mode (octal),
/// owner and group.
fn layout(root: &Path) -> BTreeMap<String, (String, u32, u32)> {
    let mut found = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        let meta = fs::symlink_metadata(&dir).unwrap();
        let name = dir.strip_prefix(root).unwrap().display().to_string();
        found.insert(
            name,
            (
                format!("{:o}", meta.mode() & 0o7777),
                meta.uid(),
                meta.gid(),
            ),
        );
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                todo.push(entry.path());
            }
        }
    }
    found
}

#[test]
#[ignore = "needs root: the daemon opens pending/ and cancel/ to all only as root, and systemd-tmpfiles gives root's directories only as root (.ci/run runs it)"]
fn the_tmpfiles_entry_makes_the_spool_the_daemon_makes() {
    let tmpfiles = Command::new("systemd-tmpfiles").arg("--version").output();
    assert!(
        tmpfiles.is_ok_and(|o| o.status.success()),
        "systemd-tmpfiles is missing: install systemd (`apt-get install systemd`); .ci/run does"
    );
    let spool = carma::config::Config::load(None).unwrap().daemon.spool;
    assert_eq!(spool, Path::new("/var/spool/carma"), "carma.conf names it");
    let spool = spool.strip_prefix("/").unwrap();

    let by_tmpfiles = tempfile::tempdir().unwrap();
    let out = Command::new("systemd-tmpfiles")
        .arg("--create")
        .arg(format!("--root={}", by_tmpfiles.path().display()))
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/carma.conf"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let by_daemon = tempfile::tempdir().unwrap();
    // What `carma daemon` does to its spool before anything else.
    carma::spool::Spool::new(by_daemon.path().join(spool))
        .create()
        .unwrap();

    let made = layout(&by_tmpfiles.path().join(spool));
    assert_eq!(made, layout(&by_daemon.path().join(spool)));
    // The root, the five states, staging/ and cancel/.
    assert_eq!(made.len(), 8, "{made:?}");
    assert_eq!(made["pending"], ("1733".to_string(), 0, 0));
}
