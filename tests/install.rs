//! `make install` into a scratch DESTDIR, with this build's binary (no
//! second release build): every file lands where systemd, the shells and
//! man look, the configuration an administrator edited is kept, and
//! `make uninstall` takes back everything else.

use std::fs;
use std::path::Path;
use std::process::Command;

/// Runs `make TARGET` in the repository with `vars`, and says why it failed.
fn make(target: &str, vars: &[String]) {
    let out = Command::new("make")
        .arg("-s")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg(target)
        .args(vars)
        .output();
    let out = out.expect("make is missing: install make (`apt-get install make`); .ci/run does");
    assert!(
        out.status.success(),
        "make {target}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn vars(destdir: &Path, prefix: &str) -> Vec<String> {
    vec![
        format!("DESTDIR={}", destdir.display()),
        format!("PREFIX={prefix}"),
        format!("CARMA={}", env!("CARGO_BIN_EXE_carma")),
    ]
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn make_install_puts_every_file_in_place_and_keeps_the_configuration() {
    let dest = tempfile::tempdir().unwrap();
    let root = dest.path();
    let config = root.join("etc/carma/carma.toml");
    fs::create_dir_all(config.parent().unwrap()).unwrap();
    fs::write(&config, "# edited by the administrator\n").unwrap();
    make("install", &vars(root, "/usr/local"));

    let local = root.join("usr/local");
    for (name, built) in [
        ("carma", env!("CARGO_BIN_EXE_carma")),
        ("carma-supervise", env!("CARGO_BIN_EXE_carma-supervise")),
    ] {
        let installed = fs::metadata(local.join("bin").join(name)).unwrap();
        assert_eq!(
            installed.len(),
            fs::metadata(built).unwrap().len(),
            "{name}"
        );
    }
    let unit = read(&local.join("lib/systemd/system/carma.service"));
    assert!(unit.contains("\nExecStart=/usr/local/bin/carma "), "{unit}");
    assert_eq!(
        read(&local.join("lib/tmpfiles.d/carma.conf")),
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/carma.conf"))
    );
    assert_eq!(read(&config), "# edited by the administrator\n");
    for (path, says) in [
        (
            "share/bash-completion/completions/carma",
            "complete -F _carma",
        ),
        ("share/zsh/site-functions/_carma", "#compdef carma"),
        (
            "share/fish/vendor_completions.d/carma.fish",
            "complete -c carma",
        ),
    ] {
        let script = read(&local.join(path));
        assert!(script.contains(says) && script.contains("daemon"), "{path}");
    }
    let man = local.join("share/man/man1");
    assert!(read(&man.join("carma.1")).contains("carma\\-daemon(1)"));
    assert!(read(&man.join("carma-daemon.1")).contains("\\fBcarma daemon\\fR"));
    assert!(read(&man.join("carma-daemon.1")).contains("78 (EX_CONFIG)"));
    // The pages the unit's Documentation= names.
    for page in unit
        .lines()
        .filter_map(|l| l.strip_prefix("Documentation="))
        .flat_map(str::split_whitespace)
    {
        let name = page.strip_prefix("man:").unwrap().replace("(1)", ".1");
        assert!(man.join(&name).is_file(), "{name}");
    }
    // The job file format has its page, a key per entry.
    let rad = read(&local.join("share/man/man5/carma-rad.5"));
    assert!(rad.contains("\\fBafterok:\\fR") && rad.contains("\\fBhost_memory:\\fR"));
    // Hidden commands have no page.
    assert!(!man.join("carma-supervise.1").exists());

    make("uninstall", &vars(root, "/usr/local"));
    let mut left = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                left.push(path);
            }
        }
    }
    assert_eq!(left, [config]);
}

#[test]
fn make_install_under_usr_points_the_unit_at_its_binary_and_adds_the_sample_configuration() {
    let dest = tempfile::tempdir().unwrap();
    let root = dest.path();
    make("install", &vars(root, "/usr"));
    assert!(root.join("usr/bin/carma").is_file());
    let unit = read(&root.join("usr/lib/systemd/system/carma.service"));
    assert!(unit.contains("\nExecStart=/usr/bin/carma "), "{unit}");
    assert!(!unit.contains("/usr/local/bin"), "{unit}");
    assert_eq!(
        read(&root.join("etc/carma/carma.toml")),
        read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/carma.toml"))
    );
}
