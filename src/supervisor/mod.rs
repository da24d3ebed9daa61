//! The job supervisor: a small process, the same binary, that runs one run
//! of one task and writes down how it ended.
//!
//! # Theory of operation
//!
//! The daemon must be able to stop, restart or die while jobs run, and no
//! job may be lost or run twice. So the daemon never waits on a job
//! directly. For each run it:
//!
//! 1. writes `launch.json` (script, user, environment, GPUs, the boot)
//!    into the run directory, which gets its name with it inside and is
//!    flushed: it is all a power loss must not take;
//! 2. opens `supervisor.lock` there and takes an exclusive `flock` on it;
//! 3. starts `carma-supervise RUN_DIR --lock-fd 0` (or `carma supervise`:
//!    [`program`]), handing the locked descriptor down as its standard
//!    input, and closes its own copy; or has its nursery fork one, which
//!    gets the descriptor over the nursery's socket ([`crate::nursery`]).
//!    The supervisor makes itself a session of its own as its first act.
//!
//! From then on the lock is held exactly as long as the supervisor lives:
//! there is no moment in which a supervisor runs without holding it, so
//! "can I take the lock?" answers "is this run still supervised?" without
//! trusting a pid. `supervisor.json` (pid + start time) says whom to signal.
//!
//! The supervisor runs the script with `bash` in a process group of its
//! own, as the task's owner when the daemon is root (its groups, setgid,
//! setuid before exec), with stdout and stderr in the run directory. On
//! SIGTERM (a cancellation) it forwards SIGTERM to the job's group and
//! SIGKILL after the grace period, and keeps running to record the end.
//! At the job's wall-time limit it does the same with the limit's own
//! grace: the supervisor, not the daemon, keeps the time, so a limit holds
//! while the daemon is down.
//! When the job's main process ends, whatever it left in its group is
//! killed, and `exit.json` is written atomically as the supervisor's last
//! act. A daemon that was away finds it there.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use fs2::FileExt;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Gid, Pid, Uid, fchown, getgrouplist, setsid};

use crate::cgroup::RunCgroup;
use crate::procfs::ProcessId;
use crate::spawn::Spawn;
pub use crate::spool::record::{EXIT, LAUNCH};
use crate::spool::record::{Launch, RunExit, read_state, to_json, unix_now, write_json};
use crate::spool::{PRIVATE, write_replace};
pub use ending::stop_signals;
use ending::{Stops, Watch};
use program::Program;

/// File names inside a run directory (besides [`LAUNCH`] and [`EXIT`]).
pub const IDENTITY: &str = "supervisor.json";
pub const LOCK: &str = "supervisor.lock";
pub const PEAK: &str = "peak_mib";
/// Left by the daemon once it asked the run's supervisor to stop its job,
/// so that a daemon started later holds the run to its cancel's deadline
/// too ([`crate::lifecycle::Deadlines`]).
pub const STOP_ASKED: &str = "stop_asked";
pub const STDOUT: &str = "stdout";
pub const STDERR: &str = "stderr";
const SCRIPT: &str = "job.sh";
const LOG: &str = "supervisor.log";

mod ending;
pub mod program;

/// Starts the supervisor of the run in `run_dir` (whose `launch.json` is
/// written) as `exe supervise`. The returned child is the daemon's to
/// reap; the run's fate is in `exit.json`.
///
/// Nothing runs between fork and exec, so the standard library starts it
/// with `posix_spawn` (a `vfork`): a fork of the daemon copied its page
/// tables and then faulted on every page it touched before the exec, the
/// largest part of the daemon's own time per launch. The lock goes down as
/// standard input (the one kind of descriptor a spawn can hand down
/// without a hook), and the new session is the supervisor's own first act:
/// a signal to the daemon's group that meets it before then kills a
/// supervisor that has not yet said who it is, and so has started nothing.
pub fn start(program: &Program, run_dir: &Path) -> io::Result<Child> {
    let (lock, log) = lock_run(run_dir)?;
    spawn(program, run_dir, lock, log)
}

/// [`start`] with the run's lock taken and its log opened ([`lock_run`]).
pub fn spawn(program: &Program, run_dir: &Path, lock: File, log: File) -> io::Result<Child> {
    program
        .command()
        .arg(run_dir)
        .arg("--lock-fd")
        .arg("0")
        .stdin(lock)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
}

/// The run's `supervisor.lock`, locked by the daemon for the supervisor
/// it hands it to, and its `supervisor.log`.
pub fn lock_run(run_dir: &Path) -> io::Result<(File, File)> {
    let lock = crate::spool::open_lock_file(&run_dir.join(LOCK))?;
    lock.try_lock_exclusive()?;
    let log = crate::spool::open_lock_file(&run_dir.join(LOG))?;
    Ok((lock, log))
}

/// The last `bytes` of a job's output file, as text: where a job says why
/// it ended (an OOM message, a failed activation). The file is its
/// user's: opened without waiting ([`crate::safe::read_tail_beneath`]),
/// so a lease the user took on it fails the read instead of holding the
/// daemon for the lease's break time (45 s by default).
pub fn tail(path: &Path, bytes: u64) -> io::Result<String> {
    Ok(String::from_utf8_lossy(&tail_bytes(path, bytes)?).into_owned())
}

/// [`tail`] as the file has it, for a search that needs no text.
pub fn tail_bytes(path: &Path, bytes: u64) -> io::Result<Vec<u8>> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(OsStr::to_str)) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file in a directory", path.display()),
        ));
    };
    crate::safe::read_tail_beneath(dir, name, bytes)
}

/// Whether a supervisor still holds the run's lock.
pub fn is_running(run_dir: &Path) -> bool {
    crate::spool::is_locked(&run_dir.join(LOCK))
}

/// The run's supervisor, if it is alive and ready for signals: as its
/// `supervisor.json` says, or, should that not be readable, the process
/// that holds the run's lock file open (the lock is handed down to the
/// supervisor, so nobody else holds it). The supervisor writes
/// `supervisor.json` only once it handles SIGTERM itself, so before that
/// file exists nobody is named: a SIGTERM then would kill it before it
/// could record anything.
pub fn identity(run_dir: &Path) -> Option<ProcessId> {
    if !run_dir.join(IDENTITY).exists() {
        return None;
    }
    read_state::<ProcessId>(&run_dir.join(IDENTITY))
        .ok()
        .filter(ProcessId::is_alive)
        .or_else(|| {
            let me = std::process::id();
            crate::procfs::openers(&run_dir.join(LOCK))
                .into_iter()
                .filter(|&pid| pid != me)
                .find_map(ProcessId::of)
                .filter(ProcessId::is_alive)
        })
}

/// Whether the run in `run_dir` may have started its job, judged after
/// its supervisor is gone. A supervisor names itself ([`IDENTITY`]) before
/// it starts the job, without flushing the name: within the boot the run
/// was launched in (its `launch.json` says which), a run without a name
/// never started. After another boot the name may have been lost with
/// the page cache, and so may `launch.json`: such a run counts as started,
/// and is never launched again. A launch that names no boot is from a
/// supervisor that flushed its name, which then decides alone.
pub fn may_have_started(run_dir: &Path) -> bool {
    if run_dir.join(IDENTITY).exists() {
        return true;
    }
    match read_state::<Launch>(&run_dir.join(LAUNCH)) {
        Ok(launch) => launch
            .boot
            .is_some_and(|boot| Some(boot) != crate::spool::this_boot()),
        Err(_) => true,
    }
}

/// Whether run `run` of the task directory `task_dir` may have started its
/// job ([`may_have_started`]) and recorded no end.
pub fn started_unended(task_dir: &Path, run: u32) -> bool {
    let run_dir = task_dir.join(format!("run-{run}"));
    run > 0 && may_have_started(&run_dir) && !run_dir.join(EXIT).exists()
}

/// The highest run number in a task directory (0 if it never ran).
pub fn last_run(task_dir: &Path) -> u32 {
    fs::read_dir(task_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("run-")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Asks the run's supervisor to cancel its job. Returns false when no live
/// supervisor was found.
pub fn cancel(run_dir: &Path) -> io::Result<bool> {
    match identity(run_dir) {
        Some(id) => crate::procfs::signal(&id, Signal::SIGTERM),
        None => Ok(false),
    }
}

/// `carma supervise RUN_DIR --lock-fd N`: the supervisor of `run_dir`,
/// started for it; `lock_fd` is the locked `supervisor.lock` the daemon
/// handed down.
pub fn supervise_handed(run_dir: &Path, lock_fd: RawFd) -> io::Result<()> {
    // Out of the daemon's session and process group before anything else:
    // a signal meant for the daemon must never reach its runs.
    setsid()?;
    let lock = take_lock(lock_fd)?;
    supervise(run_dir, lock)
}

/// The supervisor process: runs the job of `run_dir` and records its end,
/// holding the run's locked `lock` throughout.
pub(crate) fn supervise(run_dir: &Path, lock: File) -> io::Result<()> {
    // Signals are watched before the supervisor makes itself known: once
    // `carma cancel` can find it, a SIGTERM must stop the job, not the
    // supervisor, which still has the run's end to record.
    let mut watch = Watch::start()?;
    let launch = read_state::<Launch>(&run_dir.join(LAUNCH));
    // Every process the job orphans becomes ours, however it hid (a double
    // fork, a new session, a cleared environment): see [`end_orphans`].
    nix::sys::prctl::set_child_subreaper(true)?;
    let me = ProcessId::current()
        .ok_or_else(|| io::Error::other("cannot read this process in /proc"))?;
    // Within the boot the run was launched in, the page cache is the
    // truth: the name needs no flush before the job starts (see
    // [`may_have_started`]). A launch that names no boot (or none could be
    // read) is judged by the name alone, which must then be on disk.
    match &launch {
        Ok(l) if l.boot.is_some() => {
            write_replace(&run_dir.join(IDENTITY), &to_json(&me), PRIVATE)?;
        }
        _ => write_json(&run_dir.join(IDENTITY), &me)?,
    }
    let started_at = unix_now();
    // Anything that goes wrong before the job runs is recorded as the
    // run's end, so the daemon learns of it instead of seeing a vanished
    // supervisor.
    let time_limit = launch.as_ref().ok().and_then(|l| {
        let limit = l.time_limit_s.map(seconds)?;
        Some((limit, seconds(l.time_limit_grace_s)))
    });
    let grace = launch
        .as_ref()
        .map_or(Duration::ZERO, |l| seconds(l.grace_s));
    let since = std::time::Instant::now();
    let outcome = match launch {
        Err(e) => Err((false, false, e.to_string())),
        Ok(_) if watch.stopped() => Err((false, false, "cancelled before it started".into())),
        Ok(launch) => spawn_job(run_dir, &launch, run_cgroup(&launch)).map_err(|e| {
            let own = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<crate::spawn::JobsOwn>());
            let transient = is_transient(own.map_or(&e, |own| &own.0));
            let error = match &launch.workdir {
                dir if e.raw_os_error().is_some() || own.is_some() => {
                    format!("cannot start bash in {}: {e}", dir.display())
                }
                _ => e.to_string(),
            };
            (transient, own.is_some(), error)
        }),
    };
    let mut exit = RunExit::started(started_at);
    match outcome {
        Ok((child, cgroup)) => {
            let stops = Stops {
                group: child,
                cgroup: cgroup.as_ref().map(RunCgroup::dir),
                grace,
                time_limit,
                since,
            };
            // Once something of the job is held in the kernel, what is
            // left is not waited for long: it dies only when released.
            let mut patience = (ORPHAN_PATIENCE, CGROUP_PATIENCE);
            match watch.wait(&stops) {
                Ok(ended) => {
                    exit.timed_out = ended.timed_out;
                    exit.code = ended.code;
                    exit.signal = ended.signal;
                    if ended.held {
                        patience = (HELD_PATIENCE, HELD_PATIENCE);
                    }
                }
                // Its end is recorded without a status: never left running
                // unwatched.
                Err(e) => {
                    let _ = writeln!(io::stderr(), "cannot wait for the job: {e}; ending it");
                    let _ = killpg(child, Signal::SIGKILL);
                }
            }
            // Those that left the group (setsid) are this process's
            // children now, and in the cgroup where there is one.
            if !end_orphans(patience.0) {
                let _ = writeln!(
                    io::stderr(),
                    "processes the job left behind outlived SIGKILL for {:?}",
                    patience.0
                );
            }
            if let Some(cgroup) = cgroup {
                let dir = cgroup.dir().to_owned();
                let (usage, empty) = cgroup.finish(patience.1);
                if !empty {
                    let _ = writeln!(
                        io::stderr(),
                        "processes of the job outlived it in {}",
                        dir.display()
                    );
                }
                exit.host_peak_mib = usage.peak_mib;
                exit.host_oom_kills = usage.oom_kills.filter(|&n| n > 0);
                exit.cpu_s = usage.cpu_s;
            }
        }
        Err((transient, as_its_user, error)) => {
            exit.error = Some(error);
            exit.transient = transient;
            exit.as_its_user = as_its_user;
        }
    }
    exit.ended_at = unix_now();
    exit.cancelled = watch.stopped();
    exit.peak_mib = fs::read_to_string(run_dir.join(PEAK))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    record_exit(run_dir, &exit);
    drop(lock);
    Ok(())
}

/// How long the end of a run keeps killing the processes the job left
/// behind before it gives up on them.
const ORPHAN_PATIENCE: Duration = Duration::from_secs(10);

/// Kills and reaps this process's children until none is left, or
/// `patience` has passed (`false`). The supervisor is a subreaper, so once
/// the job's first process is gone every process of the job that still
/// runs is a child of it, or a descendant of one: each round ends a
/// generation, whose children then come to the supervisor. This is what
/// holds a job together where there is no cgroup; with one, the children
/// are those `cgroup.kill` is about to end.
fn end_orphans(patience: Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        crate::spawn::reap_ended();
        let left = crate::procfs::own_children();
        if left.is_empty() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        for pid in left {
            // A child is not reaped but by us, so its pid is still its own.
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Takes the locked descriptor the daemon handed down as this process's
/// own, closed on exec so the job never holds the run's lock, and off the
/// standard descriptors, where standard input becomes `/dev/null` again.
fn take_lock(fd: RawFd) -> io::Result<File> {
    // SAFETY: the daemon passed this descriptor for us to own; it is not
    // used anywhere else in this process.
    let mut handed = unsafe { OwnedFd::from_raw_fd(fd) };
    // A duplicate at 3 or above, with close-on-exec.
    let lock = File::from(handed.try_clone()?);
    if fd <= 2 {
        nix::unistd::dup2(File::open("/dev/null")?, &mut handed)?;
        // The standard descriptor stays open, on /dev/null now.
        std::mem::forget(handed);
    }
    Ok(lock)
}

/// Writes `exit.json`, however long it takes: while the disk is full (or
/// fails), the supervisor keeps its lock and tries again with backoff, so
/// the daemon sees a run that has not ended yet rather than one whose end
/// was lost. An error that does not pass (the run directory was removed)
/// ends the wait: there is nowhere left to record anything.
fn record_exit(run_dir: &Path, exit: &RunExit) {
    let mut delay = Duration::from_millis(100);
    let mut reported = false;
    while let Err(e) = write_json(&run_dir.join(EXIT), exit) {
        if !is_transient(&e) {
            let _ = writeln!(io::stderr(), "cannot record the run's end: {e}; giving up");
            return;
        }
        if !reported {
            // Not eprintln!: it panics when the log cannot be written,
            // and a full disk is exactly when this runs.
            let _ = writeln!(
                io::stderr(),
                "cannot record the run's end: {e}; trying again until it can be"
            );
            reported = true;
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_secs(10));
    }
}

/// How long the end of a run waits for its cgroup to empty after
/// `cgroup.kill`.
const CGROUP_PATIENCE: Duration = Duration::from_secs(10);

/// Both of those, once the job's first process was found held in the
/// kernel ([`ending::HELD`]): the rest of it is likely held too.
const HELD_PATIENCE: Duration = Duration::from_millis(500);

/// The run's cgroup, made under the launch's; none (a process group only,
/// said on the supervisor's stderr) when it cannot be made.
fn run_cgroup(launch: &Launch) -> Option<RunCgroup> {
    let parent = launch.cgroup.as_ref()?;
    let name = crate::cgroup::run_name(&launch.task, launch.run);
    match RunCgroup::create(parent, &name) {
        Ok(cgroup) => {
            if let Err(why) =
                cgroup.limit(launch.cpus, launch.host_memory_mib, launch.max_processes)
            {
                let _ = writeln!(io::stderr(), "{}: {why}", cgroup.dir().display());
            }
            Some(cgroup)
        }
        Err(e) => {
            let _ = writeln!(
                io::stderr(),
                "cannot make the cgroup {}/{name}: {e}; the job runs in a process group only",
                parent.display()
            );
            None
        }
    }
}

/// Seconds from a launch record as a duration; what cannot be one (NaN,
/// negative, too large) saturates, never panics.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}

/// Whether a failure to start the job may pass by itself (resources that
/// run out and come back), so the task should wait and start again rather
/// than fail for good. Missing programs, bad users and refused directories
/// do not pass.
pub fn is_transient(error: &io::Error) -> bool {
    use nix::libc;
    matches!(
        error.raw_os_error(),
        Some(
            libc::EAGAIN
                | libc::ENOMEM
                | libc::EMFILE
                | libc::ENFILE
                | libc::ENOSPC
                | libc::EDQUOT
                | libc::EINTR
                | libc::ENOBUFS
                | libc::EIO
        )
    )
}

/// Starts `bash job.sh` in its own process group, as the task's user, with
/// exactly the environment the launch gives (nothing of the supervisor's or
/// the daemon's). The script and the output files are the user's, private.
fn spawn_job(
    run_dir: &Path,
    launch: &Launch,
    cgroup: Option<RunCgroup>,
) -> io::Result<(Pid, Option<RunCgroup>)> {
    // A root daemon names whom every job runs as, root's own jobs
    // included (`daemon.allow_root_jobs`): a launch that names nobody was
    // damaged or half-read, and is no reason to run a job as root.
    if launch.run_as.is_none() && Uid::effective().is_root() {
        return Err(io::Error::other(
            "its launch names no user to run as, and a job never runs as root for want of one",
        ));
    }
    let script = run_dir.join(SCRIPT);
    let mut text = launch.script.join("\n");
    text.push('\n');
    let private = |path: &Path| {
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(path)
    };
    let mut job_sh = private(&script)?;
    job_sh.write_all(text.as_bytes())?;
    let stdout = private(&run_dir.join(STDOUT))?;
    let stderr = private(&run_dir.join(STDERR))?;
    let run_as = launch.run_as.clone();
    if let Some(user) = &run_as {
        // The script and the job's output are its user's, and nobody
        // else's, to read: handed over on the open files.
        for file in [&job_sh, &stdout, &stderr] {
            fchown(
                file,
                Some(Uid::from_raw(user.uid)),
                Some(Gid::from_raw(user.gid)),
            )?;
        }
    }
    job_sh.set_permissions(fs::Permissions::from_mode(0o400))?;
    let null = OwnedFd::from(File::open("/dev/null")?);
    let args = [
        OsStr::new("--noprofile"),
        OsStr::new("--norc"),
        script.as_os_str(),
    ];
    let stdio = [null, OwnedFd::from(stdout), OwnedFd::from(stderr)];
    // Entered as the job's user, after the switch: a directory the user
    // may not enter fails the job instead of being entered as root.
    let mut spawn = Spawn::new("bash", args, &launch.env, stdio, &launch.workdir)?;
    spawn.unshield_from_oom_killer();
    if let Some(user) = &run_as {
        // initgroups(3) reads the group database, which is not safe
        // between fork and exec; its two halves are: getgrouplist (by the
        // daemon as it launched, or now), setgroups there.
        let groups = match &launch.groups {
            Some(groups) => groups.iter().copied().map(Gid::from_raw).collect(),
            None => {
                let name = std::ffi::CString::new(user.name.as_str())
                    .map_err(|_| io::Error::other("user name contains a NUL byte"))?;
                getgrouplist(&name, Gid::from_raw(user.gid))?
            }
        };
        spawn.user(user.uid, user.gid, &groups);
    }
    if let Some(cgroup) = &cgroup {
        // Born in the run's cgroup while still root, before anything of
        // the job's runs: nothing it starts can be outside.
        spawn.cgroup(cgroup.dir_fd(), cgroup.procs_fd());
    }
    if let Some(mask) = launch.umask {
        spawn.umask(mask);
    }
    // The raw OS error is kept: whether it may pass depends on it.
    Ok((spawn.start()?, cgroup))
}

/// Each run's launch and, when it ended normally, its exit, in order.
pub fn runs_of(dir: &Path) -> Vec<(Launch, Option<RunExit>)> {
    let mut runs: Vec<(u32, Launch, Option<RunExit>)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n: u32 = e.file_name().to_str()?.strip_prefix("run-")?.parse().ok()?;
            let launch = read_state::<Launch>(&e.path().join(LAUNCH)).ok()?;
            let exit = read_state::<RunExit>(&e.path().join(EXIT)).ok();
            // A launch whose supervisor never started, or whose job could
            // not start for a reason that passed, did not run.
            let started = match &exit {
                Some(exit) => !exit.transient,
                None => e.path().join(IDENTITY).exists(),
            };
            started.then_some((n, launch, exit))
        })
        .collect();
    runs.sort_by_key(|r| r.0);
    runs.into_iter().map(|(_, l, e)| (l, e)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run directory whose `launch.json` names `boot`.
    fn launched_in(boot: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let launch = serde_json::json!({
            "task": "t-1", "run": 1, "gpus": [0], "why": "", "launched_at": 0.0,
            "script": ["true"], "workdir": "/", "env": [], "grace_s": 1.0,
            "boot": boot,
        });
        fs::write(dir.path().join(LAUNCH), launch.to_string()).unwrap();
        dir
    }

    #[test]
    fn a_run_without_a_name_never_started_only_within_the_boot_it_was_launched_in() {
        let this = crate::spool::this_boot().expect("Linux names its boot");
        // Launched in this boot: the page cache is the truth.
        let run = launched_in(Some(&this));
        assert!(!may_have_started(run.path()));
        fs::write(run.path().join(IDENTITY), "{}").unwrap();
        assert!(may_have_started(run.path()), "it named itself");
        // Launched in another boot: its name may have been lost.
        assert!(may_have_started(launched_in(Some("another-boot")).path()));
        // Its launch.json lost as well (never flushed).
        let lost = launched_in(Some(&this));
        fs::remove_file(lost.path().join(LAUNCH)).unwrap();
        assert!(may_have_started(lost.path()));
        // A launch from before boots were recorded: its supervisor flushed
        // its name, which decides alone.
        assert!(!may_have_started(launched_in(None).path()));
    }

    #[test]
    #[ignore = "needs root: what a root supervisor refuses"]
    fn a_root_supervisor_runs_no_job_whose_launch_names_no_user() {
        let run = launched_in(None);
        let launch: Launch = read_state(&run.path().join(LAUNCH)).unwrap();
        let e = spawn_job(run.path(), &launch, None).unwrap_err();
        assert!(e.to_string().contains("names no user"), "{e}");
        assert!(
            !run.path().join(STDOUT).exists(),
            "nothing of the job's made"
        );
    }
}
