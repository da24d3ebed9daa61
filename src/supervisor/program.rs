//! Which program supervises a run: `carma-supervise`, the small binary
//! beside `carma`, when it is of the daemon's own build; else the daemon's
//! binary itself, as `carma supervise`.
//!
//! Every run has a supervisor of its own, forked by the nursery. A fork
//! shares no page-table entries of the binary's code, so each supervisor
//! maps again, fault by fault, what it runs: in `carma`'s 10 MB of code
//! its few functions lie among everything else, in `carma-supervise`'s
//! 1 MB they lie together. In a burst of trivial jobs that cut the
//! supervisors' CPU by a quarter (docs/performance.md).
//!
//! The two binaries must agree on every file they share (`launch.json`,
//! `exit.json`, the nursery's messages), so the helper is used only when
//! it says it is of the very same build ([`crate::BUILD`]): an older one
//! left beside a newer `carma` (after `cargo run`, or a copy of `carma`
//! alone) is passed over, and so is one that anyone but its owner (root
//! or the daemon's user) may change or replace, as the daemon would run
//! it.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The helper's file name, beside `carma`.
pub const HELPER: &str = "carma-supervise";

/// How long the helper may take to say its build.
const ASK_TIME: Duration = Duration::from_secs(5);

/// A program that supervises runs, and how to call it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    exe: PathBuf,
    /// Whether `exe` is `carma` itself, called as `carma supervise`.
    subcommand: bool,
}

impl Program {
    /// `carma` itself, as `carma supervise`.
    pub fn own(carma: &Path) -> Program {
        Program {
            exe: carma.to_owned(),
            subcommand: true,
        }
    }

    /// `carma-supervise` beside `carma` if it is of this build and safe to
    /// run, else `carma supervise`; why not, when not.
    pub fn find(carma: &Path) -> (Program, Option<String>) {
        let helper = carma.with_file_name(HELPER);
        match check(&helper) {
            Ok(()) => (
                Program {
                    exe: helper,
                    subcommand: false,
                },
                None,
            ),
            Err(why) => (
                Program::own(carma),
                Some(format!("{}: {why}", helper.display())),
            ),
        }
    }

    /// The binary.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// A command that runs it; its arguments follow.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.exe);
        if self.subcommand {
            command.arg("supervise");
        }
        command
    }
}

/// What `--version` of the helper of this build prints.
pub fn version_line() -> String {
    format!("{HELPER} {}\n", crate::BUILD)
}

/// Whether `helper` may supervise this daemon's runs.
fn check(helper: &Path) -> Result<(), String> {
    let meta = fs::metadata(helper).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => "not installed".to_owned(),
        _ => e.to_string(),
    })?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!("owned by uid {}, not root or uid {me}", meta.uid()));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err("writable by others than its owner".into());
    }
    // Nor may anyone else replace it after this check: its directory
    // must be closed to others, or sticky (where only a file's owner may
    // rename it away).
    let dir = helper.parent().unwrap_or(Path::new("/"));
    let dir_mode = fs::metadata(dir)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if dir_mode & 0o022 != 0 && dir_mode & 0o1000 == 0 {
        return Err(format!("{} is writable by others", dir.display()));
    }
    let said = ask(helper).map_err(|e| format!("cannot ask its build: {e}"))?;
    if said != version_line() {
        return Err(format!(
            "of another build ({}; this is {})",
            said.trim(),
            crate::BUILD
        ));
    }
    Ok(())
}

/// The helper's `--version` line, read within [`ASK_TIME`].
fn ask(helper: &Path) -> io::Result<String> {
    let mut child = Command::new(helper)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + ASK_TIME;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut said = String::new();
    if let Some(out) = child.stdout.take() {
        out.take(4096).read_to_string(&mut said)?;
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory with `carma` (never run) and a `carma-supervise` script
    /// that prints `says` for its version, with `mode`.
    fn beside(says: &str, mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let carma = dir.path().join("carma");
        fs::write(&carma, "").unwrap();
        let helper = dir.path().join(HELPER);
        fs::write(&helper, format!("#!/bin/sh\nprintf '%s' '{says}'\n")).unwrap();
        fs::set_permissions(&helper, fs::Permissions::from_mode(mode)).unwrap();
        (dir, carma)
    }

    #[test]
    fn the_helper_of_this_build_supervises() {
        let (_dir, carma) = beside(&version_line(), 0o755);
        let (program, why) = Program::find(&carma);
        assert_eq!(why, None);
        assert_eq!(program.exe(), carma.with_file_name(HELPER));
        assert_eq!(program.command().get_args().count(), 0);
    }

    #[test]
    fn carma_itself_supervises_when_the_helper_is_missing_of_another_build_or_open_to_others() {
        let other = "carma-supervise 0.0.1+0000000000000000\n";
        for (says, mode, expected) in [
            (other, 0o755, "of another build"),
            ("", 0o755, "of another build"),
            (&version_line() as &str, 0o775, "writable by others"),
            (&version_line(), 0o757, "writable by others"),
        ] {
            let (_dir, carma) = beside(says, mode);
            let (program, why) = Program::find(&carma);
            assert_eq!(program, Program::own(&carma), "{says:?} {mode:o}");
            let why = why.unwrap();
            assert!(why.contains(expected), "{why}");
            let args: Vec<_> = program.command().get_args().map(|a| a.to_owned()).collect();
            assert_eq!(args, ["supervise"]);
        }
        let dir = tempfile::tempdir().unwrap();
        let (program, why) = Program::find(&dir.path().join("carma"));
        assert_eq!(program, Program::own(&dir.path().join("carma")));
        assert!(why.unwrap().contains("not installed"));
        // In a directory others may write to, it could be replaced.
        let (dir, carma) = beside(&version_line(), 0o755);
        for (mode, passed_over) in [(0o777, true), (0o1777, false), (0o755, false)] {
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode)).unwrap();
            let (_, why) = Program::find(&carma);
            assert_eq!(why.is_some(), passed_over, "{mode:o}: {why:?}");
        }
    }
}
