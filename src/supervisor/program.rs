//! Which program supervises a run: `carma-supervise`, the small binary
//! beside `carma`, when it is of the daemon's own build; else the daemon's
//! binary itself, as `carma supervise`.
//!
//! Every run has a supervisor of its own, forked by the nursery. A fork
//! shares no page-table entries of the binary's code, so each supervisor
//! maps again, fault by fault, what it runs: in `carma`'s 10 MB of code
//! its few functions lie among everything else, in `carma-supervise`'s
//! 1.4 MB they lie together. In a burst of trivial jobs that cut the
//! supervisors' CPU by a sixth (docs/performance.md).
//!
//! The two binaries must agree on every file they share (`launch.json`,
//! `exit.json`, the nursery's messages), so the helper is used only when
//! it says it is of the very same build ([`crate::BUILD`]): an older one
//! left beside a newer `carma` (after `cargo run`, or a copy of `carma`
//! alone) is passed over. A root daemon runs it as root, so it must also
//! be a file that only root or the daemon's user can change or replace:
//! the file, found through any symbolic link, and every directory above
//! it. The daemon runs the file it checked by its real path, and checks
//! before each start that it is still that file (an upgrade replaces it):
//! a helper replaced or gone is left for `carma supervise`.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The helper's file name, beside `carma`.
pub const HELPER: &str = "carma-supervise";

/// How long the helper may take to say its build.
const ASK_TIME: Duration = Duration::from_secs(5);

/// A program that supervises runs, and how to call it.
#[derive(Debug, Clone)]
pub struct Program {
    /// `carma`, which supervises as `carma supervise`.
    carma: PathBuf,
    /// The helper as checked, by its real path; `None`: `carma` itself.
    helper: Option<Checked>,
    /// Set once the checked helper was found replaced (said once).
    replaced: OnceLock<()>,
}

/// A helper file as it was when checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Checked {
    path: PathBuf,
    identity: Identity,
}

/// What tells one file from its replacement: device, inode, size and
/// change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity(u64, u64, u64, i64, i64);

impl Identity {
    fn of(path: &Path) -> io::Result<Identity> {
        let meta = fs::metadata(path)?;
        Ok(Identity(
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.ctime(),
            meta.ctime_nsec(),
        ))
    }
}

impl Program {
    /// `carma` itself, as `carma supervise`.
    pub fn own(carma: &Path) -> Program {
        Program {
            carma: carma.to_owned(),
            helper: None,
            replaced: OnceLock::new(),
        }
    }

    /// `carma-supervise` beside `carma` if it is of this build and safe to
    /// run, else `carma supervise`; why not, when not.
    pub fn find(carma: &Path) -> (Program, Option<String>) {
        let beside = carma.with_file_name(HELPER);
        match check(&beside) {
            Ok(helper) => (
                Program {
                    helper: Some(helper),
                    ..Program::own(carma)
                },
                None,
            ),
            Err(why) => (
                Program::own(carma),
                Some(format!("{}: {why}", beside.display())),
            ),
        }
    }

    /// The binary that runs supervisors now.
    pub fn exe(&self) -> &Path {
        match &self.helper {
            Some(helper) if !self.is_replaced(helper) => &helper.path,
            _ => &self.carma,
        }
    }

    /// A command that runs it; its arguments follow.
    pub fn command(&self) -> Command {
        match &self.helper {
            Some(helper) if !self.is_replaced(helper) => Command::new(&helper.path),
            _ => {
                let mut command = Command::new(&self.carma);
                command.arg("supervise");
                command
            }
        }
    }

    /// Whether the checked helper is no longer the file it was (replaced
    /// by an upgrade, or gone); said in the log the first time.
    fn is_replaced(&self, helper: &Checked) -> bool {
        if self.replaced.get().is_some() {
            return true;
        }
        if Identity::of(&helper.path).ok() == Some(helper.identity) {
            return false;
        }
        if self.replaced.set(()).is_ok() {
            log::warn!(
                "{} is not the file checked at start (replaced or gone); runs are \
                 supervised by {} supervise until the daemon restarts",
                helper.path.display(),
                self.carma.display()
            );
        }
        true
    }
}

/// What `--version` of the helper of this build prints.
pub fn version_line() -> String {
    format!("{HELPER} {}\n", crate::BUILD)
}

/// The helper at `beside`, by its real path, if it may supervise this
/// daemon's runs.
fn check(beside: &Path) -> Result<Checked, String> {
    let path = fs::canonicalize(beside).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => "not installed".to_owned(),
        _ => e.to_string(),
    })?;
    let meta = fs::metadata(&path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    crate::safe::closed_to_others(&path, &meta, false)?;
    for dir in path.ancestors().skip(1) {
        let meta = fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        crate::safe::closed_to_others(dir, &meta, true)?;
    }
    let identity = Identity::of(&path).map_err(|e| e.to_string())?;
    let said = ask(&path).map_err(|e| format!("cannot ask its build: {e}"))?;
    if said != version_line() {
        return Err(format!(
            "of another build ({}; this is {})",
            said.trim(),
            crate::BUILD
        ));
    }
    // The file asked is the file checked.
    if Identity::of(&path).ok() != Some(identity) {
        return Err("replaced while it was checked".into());
    }
    Ok(Checked { path, identity })
}

/// The helper's `--version` line, read within [`ASK_TIME`].
fn ask(helper: &Path) -> io::Result<String> {
    let mut child = spawn_asking(helper)?;
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

/// Starts `helper --version`. A file just written may be held open for
/// writing, for a moment, by a process another thread forked before its
/// exec (`ETXTBSY`): tried again for up to half a second.
fn spawn_asking(helper: &Path) -> io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        let started = Command::new(helper)
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        match started {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            started => return started,
        }
    }
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

    fn args(program: &Program) -> Vec<String> {
        let command = program.command();
        command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn the_helper_of_this_build_supervises_until_it_is_replaced() {
        let (dir, carma) = beside(&version_line(), 0o755);
        let (program, why) = Program::find(&carma);
        assert_eq!(why, None);
        let helper = fs::canonicalize(carma.with_file_name(HELPER)).unwrap();
        assert_eq!(program.exe(), helper);
        assert!(args(&program).is_empty());

        // An upgrade puts another file in its place: `carma supervise`.
        let new = dir.path().join("new");
        fs::write(&new, "#!/bin/sh\n").unwrap();
        fs::rename(&new, &helper).unwrap();
        assert_eq!(program.exe(), carma);
        assert_eq!(args(&program), ["supervise"]);
        // And it stays so, even were the file put back.
        let clone = program.clone();
        assert_eq!(clone.exe(), carma);
    }

    #[test]
    fn carma_itself_supervises_when_the_helper_is_missing_of_another_build_or_open_to_others() {
        let other = "carma-supervise 0.0.1+0000000000000000\n";
        let this = version_line();
        let mut cases = vec![
            (other, 0o755, "of another build"),
            ("", 0o755, "of another build"),
            (&this as &str, 0o757, "writable by others"),
            (&this, 0o644, "cannot ask its build"),
        ];
        if is_root() {
            // Root runs it: its group may not change it either.
            cases.push((&this, 0o775, "writable by others"));
        }
        for (says, mode, expected) in cases {
            let (_dir, carma) = beside(says, mode);
            let (program, why) = Program::find(&carma);
            assert_eq!(program.exe(), carma, "{says:?} {mode:o}");
            let why = why.unwrap();
            assert!(why.contains(expected), "{why}");
            assert_eq!(args(&program), ["supervise"]);
        }
        let dir = tempfile::tempdir().unwrap();
        let (program, why) = Program::find(&dir.path().join("carma"));
        assert_eq!(program.exe(), dir.path().join("carma"));
        assert!(why.unwrap().contains("not installed"));
    }

    #[test]
    fn the_helper_is_passed_over_where_others_could_replace_it() {
        // In a directory others may write to, not sticky.
        let (dir, carma) = beside(&version_line(), 0o755);
        let mut modes = vec![(0o777, true), (0o1777, false), (0o755, false)];
        if is_root() {
            modes.push((0o775, true));
        }
        for (mode, passed_over) in modes {
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode)).unwrap();
            let (_, why) = Program::find(&carma);
            assert_eq!(why.is_some(), passed_over, "{mode:o}: {why:?}");
        }
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();

        // Below such a directory, however deep.
        let open = tempfile::tempdir().unwrap();
        let deep = open.path().join("bin");
        fs::create_dir(&deep).unwrap();
        fs::rename(dir.path().join(HELPER), deep.join(HELPER)).unwrap();
        let carma = deep.join("carma");
        fs::set_permissions(open.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let (_, why) = Program::find(&carma);
        assert!(why.unwrap().contains("writable by others"));

        // A link beside carma is followed: what it names is checked, and
        // run by its own path, so changing the link changes nothing.
        fs::set_permissions(open.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let links = tempfile::tempdir().unwrap();
        let carma = links.path().join("carma");
        std::os::unix::fs::symlink(deep.join(HELPER), links.path().join(HELPER)).unwrap();
        let (program, why) = Program::find(&carma);
        assert_eq!(why, None);
        let real = fs::canonicalize(deep.join(HELPER)).unwrap();
        assert_eq!(program.exe(), real);
        fs::remove_file(links.path().join(HELPER)).unwrap();
        std::os::unix::fs::symlink("/bin/sh", links.path().join(HELPER)).unwrap();
        assert_eq!(program.exe(), real);
    }
}
