//! The environment a job starts with: what a login of its owner would get,
//! never the daemon's.
//!
//! The daemon runs as root with root's `PATH`, its own `CARMA_CONFIG`,
//! `RUST_LOG`, perhaps a `PYENV_ROOT` or `LD_PRELOAD`: none of it is the
//! job's business, and some of it would change what the job runs. So the
//! supervisor clears the environment, and the job gets exactly this list:
//! the user's identity from the password database, a fixed `PATH` from the
//! configuration, the system's locale, and what carma itself sets (GPUs,
//! task id, MPS), which the caller appends.

use std::fs;
use std::path::{Path, PathBuf};

use crate::spool::record::RunAs;

/// Files that hold the system locale, as `KEY=value` lines (Debian's, then
/// systemd's).
const LOCALE_FILES: [&str; 2] = ["/etc/default/locale", "/etc/locale.conf"];

/// The login environment of `user` with `path` as `PATH`.
pub fn login_env(user: &RunAs, path: &str) -> Vec<(String, String)> {
    let shell = user
        .shell
        .as_ref()
        .filter(|s| !s.as_os_str().is_empty())
        .map_or_else(|| "/bin/sh".to_string(), |s| s.display().to_string());
    let mut env = vec![
        ("HOME".to_string(), user.home.display().to_string()),
        ("USER".to_string(), user.name.clone()),
        ("LOGNAME".to_string(), user.name.clone()),
        ("SHELL".to_string(), shell),
        ("PATH".to_string(), path.to_string()),
    ];
    env.extend(system_locale());
    env
}

/// The system's locale settings, or `LANG=C.UTF-8` when it names none.
fn system_locale() -> Vec<(String, String)> {
    for file in LOCALE_FILES {
        if let Ok(text) = fs::read_to_string(Path::new(file)) {
            let vars = parse_locale(&text);
            if !vars.is_empty() {
                return vars;
            }
        }
    }
    vec![("LANG".to_string(), "C.UTF-8".to_string())]
}

/// `LANG`, `LANGUAGE` and `LC_*` assignments from a locale file; anything
/// else (comments, other variables, odd values) is skipped.
fn parse_locale(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.trim().split_once('=')?;
            let key = key.trim();
            let value = value.trim().trim_matches('"').trim_matches('\'');
            let wanted = key == "LANG" || key == "LANGUAGE" || key.starts_with("LC_");
            let sane = !value.is_empty()
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-@:".contains(c));
            (wanted && sane && key.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
                .then(|| (key.to_string(), value.to_string()))
        })
        .collect()
}

/// `user`'s groups as initgroups(3) would set them, for the launch: `None`
/// where the lookup fails, and the supervisor tries again (and says why
/// the job cannot start).
pub(super) fn groups(user: &RunAs) -> Option<Vec<u32>> {
    let name = std::ffi::CString::new(user.name.as_str()).ok()?;
    let groups = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(user.gid)).ok()?;
    Some(groups.into_iter().map(nix::unistd::Gid::as_raw).collect())
}

/// The account of `uid`, as a job of theirs runs; `None` without one.
pub(super) fn account(uid: u32) -> Option<RunAs> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()?;
    Some(RunAs {
        uid,
        gid: user.gid.as_raw(),
        name: user.name,
        home: user.dir,
        shell: Some(user.shell),
    })
}

/// The user this process runs as, for jobs of a daemon that is not root.
pub(super) fn current_user() -> RunAs {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid).ok().flatten();
    RunAs {
        uid: uid.as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        name: user
            .as_ref()
            .map_or_else(|| uid.to_string(), |u| u.name.clone()),
        home: user
            .as_ref()
            .map_or_else(|| PathBuf::from("/"), |u| u.dir.clone()),
        shell: user.map(|u| u.shell),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_login_environment_names_the_user_and_nothing_of_the_daemon() {
        let user = RunAs {
            uid: 1000,
            gid: 1000,
            name: "alice".into(),
            home: PathBuf::from("/home/alice"),
            shell: Some(PathBuf::from("/bin/zsh")),
        };
        let env = login_env(&user, "/usr/bin:/bin");
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("HOME"), Some("/home/alice"));
        assert_eq!(get("USER"), Some("alice"));
        assert_eq!(get("LOGNAME"), Some("alice"));
        assert_eq!(get("SHELL"), Some("/bin/zsh"));
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        assert!(get("LANG").is_some() || get("LC_ALL").is_some());
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            keys.iter()
                .all(
                    |k| ["HOME", "USER", "LOGNAME", "SHELL", "PATH", "LANGUAGE"].contains(k)
                        || k.starts_with("LANG")
                        || k.starts_with("LC_")
                ),
            "{keys:?}"
        );
    }

    #[test]
    fn locale_files_give_only_locale_variables() {
        let text = "# comment\nLANG=\"en_US.UTF-8\"\nLC_TIME=de_DE.UTF-8\n\
                    LD_PRELOAD=/evil.so\nLC_ALL=$(rm -rf /)\nLANGUAGE=en_US:en\n";
        assert_eq!(
            parse_locale(text),
            [
                ("LANG".to_string(), "en_US.UTF-8".to_string()),
                ("LC_TIME".to_string(), "de_DE.UTF-8".to_string()),
                ("LANGUAGE".to_string(), "en_US:en".to_string()),
            ]
        );
    }
}
