//! Notifications: a command run, as the job's owner, when a job ends
//! (`notify:` in the job file, else the configured `daemon.notify` hook).
//!
//! The command runs under a supervisor of its own, exactly as a job's run
//! does (as its owner, with a login environment and nothing of the
//! daemon's, its output in the task's `notify/` directory, in a cgroup of
//! its own held to `queue.max_processes`), with the job's number, name,
//! state and reason in the environment and a time limit: a hook that
//! hangs cannot pile up. The daemon keeps each notification's supervisor
//! as its child, reaps it once a second, and kills one that outlives its
//! limit as it kills an overdue run ([`crate::lifecycle::Overdue`]). It
//! runs once the task has reached `done/` or `failed/`; a daemon that
//! dies in between does not run it later (at most once, never twice).

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::environment::current_user;
use crate::cgroup::RunCgroup;
use crate::config::Config;
use crate::lifecycle::Closing;
use crate::spool::record::{Launch, RunAs, WORK, unix_now, write_json};
use crate::spool::{Spool, TASK_DIR_MODE, TaskName, make_dir};
use crate::supervisor;
use crate::supervisor::program::Program;

/// Longest a notification may run before it is stopped, seconds.
const NOTIFY_TIME_LIMIT_S: f64 = 60.0;

/// Seconds between SIGTERM and SIGKILL for a notification.
const NOTIFY_GRACE_S: f64 = 1.0;

/// Notifications of one user that may run at once: past them, a task's
/// end is not notified (and the log says so), so that ending a thousand
/// tasks at once (an array's cancel) does not start a thousand commands.
const NOTIFY_PER_USER: usize = 16;

/// Notifications whose supervisor has not been reaped yet.
#[derive(Debug, Default)]
pub(super) struct Notifications(Vec<Notification>);

/// One notification's supervisor, the daemon's child.
#[derive(Debug)]
struct Notification {
    name: TaskName,
    /// Whom it runs as.
    uid: u32,
    supervisor: Child,
    started: Instant,
    /// Its cgroup, where jobs have them.
    cgroup: Option<PathBuf>,
    /// When the daemon killed what it runs, past its limit.
    killed: Option<Instant>,
}

/// How long past its time limit and grace a notification may run before
/// the daemon kills what it runs, and then, as long again, its supervisor.
const OVERDUE: Duration = Duration::from_secs(5);

impl Notifications {
    /// Reaps the supervisors that ended, and ends those that outlive
    /// their limit by [`OVERDUE`]: first what they run (their cgroup and
    /// their children: a command held before its exec holds its
    /// supervisor too, see [`crate::lifecycle::Overdue`]), then, if that
    /// was not enough, the supervisor itself. Returns the cgroups of the
    /// reaped whose commands were killed, to be removed once empty: a
    /// supervisor removes its cgroup as it ends, one that was killed
    /// cannot, and each such cgroup left behind would stay for good.
    pub(super) fn tend(&mut self, now: Instant) -> Vec<PathBuf> {
        let limit = Duration::from_secs_f64(NOTIFY_TIME_LIMIT_S + NOTIFY_GRACE_S) + OVERDUE;
        let mut left = Vec::new();
        self.0.retain_mut(|n| {
            if !matches!(n.supervisor.try_wait(), Ok(None)) {
                left.extend(n.cgroup.take().filter(|_| n.killed.is_some()));
                return false;
            }
            match n.killed {
                None if now.saturating_duration_since(n.started) >= limit => {
                    if let Some(dir) = &n.cgroup {
                        RunCgroup::kill(dir);
                    }
                    if let Some(id) = crate::procfs::ProcessId::of(n.supervisor.id()) {
                        crate::procfs::signal_children(&id, Signal::SIGKILL);
                    }
                    log::warn!(
                        "{}: its notification outlived its time limit; what it runs was killed",
                        n.name
                    );
                    n.killed = Some(now);
                }
                Some(at) if now.saturating_duration_since(at) >= OVERDUE => {
                    // Not reaped yet, so its pid is still its own.
                    let _ = n.supervisor.kill();
                }
                _ => {}
            }
            true
        });
        left
    }
}

/// Runs the notification of a task that landed in `closing.to` (`done`
/// or `failed`): the job file's `notify:`, else the configured hook, if
/// either, in a cgroup under `job_cgroup` where jobs have them. Its
/// supervisor is kept in `running`. Failures are logged, never fatal.
pub(super) fn send(
    spool: &Spool,
    config: &Config,
    program: &Program,
    job_cgroup: Option<&Path>,
    closing: &Closing,
    running: &mut Notifications,
) {
    let Some(command) = closing
        .notify
        .clone()
        .or_else(|| Some(config.daemon.notify.clone()).filter(|c| !c.is_empty()))
    else {
        return;
    };
    let (name, state) = (&closing.name, closing.to);
    let reason = closing
        .record
        .outcome
        .as_ref()
        .and_then(|o| o.reason.as_deref());
    let dir = spool.task_dir(state, name);
    let Some(user) = notified_as(config, closing) else {
        log::info!("{name}: no notification: its owner has no account carma may run it as");
        return;
    };
    let owned = running.0.iter().filter(|n| n.uid == user.uid).count();
    if owned >= NOTIFY_PER_USER {
        log::info!(
            "{name}: no notification: {owned} of {}'s notifications run already",
            user.name
        );
        return;
    }
    let mut env = super::environment::login_env(&user, &config.daemon.job_path);
    env.extend([
        ("CARMA_TASK_ID".to_string(), name.to_string()),
        ("CARMA_JOB_NAME".to_string(), name.stem().to_string()),
        ("CARMA_STATE".to_string(), state.to_string()),
        (
            "CARMA_REASON".to_string(),
            crate::journal::one_line(reason.unwrap_or_default()),
        ),
    ]);
    let launch = Launch {
        task: name.to_string(),
        umask: closing.record.umask,
        run: 0,
        gpus: Vec::new(),
        limit_mib: None,
        why: "notification".into(),
        launched_at: unix_now(),
        script: vec![command.clone()],
        workdir: closing.record.workdir.clone().unwrap_or_else(|| {
            // A task that never ran has no work/: the user's home.
            let work = dir.join(WORK);
            match work.is_dir() {
                true => work,
                false => user.home.clone(),
            }
        }),
        run_as: nix::unistd::geteuid().is_root().then(|| user.clone()),
        groups: super::environment::groups(&user),
        env,
        grace_s: NOTIFY_GRACE_S,
        time_limit_s: Some(NOTIFY_TIME_LIMIT_S),
        time_limit_grace_s: NOTIFY_GRACE_S,
        cgroup: job_cgroup.map(Path::to_path_buf),
        cpus: None,
        host_memory_mib: None,
        max_processes: Some(config.queue.max_processes).filter(|&n| n > 0),
        crashes: None,
        boot: None,
    };
    let started = notify_dir(&dir)
        .and_then(|notify_dir| {
            write_json(&notify_dir.join(supervisor::LAUNCH), &launch).map(|()| notify_dir)
        })
        .and_then(|notify_dir| supervisor::start(program, &notify_dir));
    match started {
        Ok(supervisor) => {
            log::info!("{name}: notifying: {command}");
            // Reaped by `tend`, so it leaves no zombie; its end is in
            // notify/.
            running.0.push(Notification {
                name: name.clone(),
                uid: user.uid,
                supervisor,
                started: Instant::now(),
                cgroup: job_cgroup
                    .map(|parent| parent.join(crate::cgroup::run_name(name.as_str(), 0))),
                killed: None,
            });
        }
        Err(e) => log::warn!("{name}: cannot run its notification: {e}"),
    }
}

/// Whom the notification of `closing` runs as: its job's user. A task
/// refused before it had one is its owner's, and when the daemon is root
/// never root's on another's behalf (the configured hook would run as
/// root in the owner's directory); `None` when no such account is there.
fn notified_as(config: &Config, closing: &Closing) -> Option<RunAs> {
    if let Some(user) = closing.run_as.as_deref() {
        return Some(user.clone());
    }
    if !nix::unistd::geteuid().is_root() {
        return Some(current_user());
    }
    closing
        .record
        .owner
        .filter(|&uid| uid != 0 || config.daemon.allow_root_jobs)
        .and_then(super::environment::account)
}

/// A fresh directory for one notification in the task directory `dir`:
/// `notify/`, then `notify-2/`, ... (a requeued task ends, and notifies,
/// again).
fn notify_dir(dir: &Path) -> std::io::Result<PathBuf> {
    for n in 1..=NOTIFICATIONS_KEPT {
        let path = match n {
            1 => dir.join("notify"),
            n => dir.join(format!("notify-{n}")),
        };
        match make_dir(&path, TASK_DIR_MODE) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            made => return made.map(|()| path),
        }
    }
    Err(std::io::Error::other(format!(
        "{NOTIFICATIONS_KEPT} notifications were sent already"
    )))
}

/// Notifications of one task, at most (each a requeue's end).
const NOTIFICATIONS_KEPT: u32 = 100;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_past_its_limit_loses_its_processes_then_its_supervisor() {
        // A stand-in supervisor: its first child is killed, and it goes
        // on with a second, as one held in the kernel would stay.
        let supervisor = std::process::Command::new("sh")
            .args(["-c", "sleep 100; sleep 100"])
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut running = Notifications(vec![Notification {
            name: TaskName::new(7, "n"),
            uid: 0,
            supervisor,
            started: start,
            cgroup: Some(PathBuf::from("/nonexistent/carma-test-notify")),
            killed: None,
        }]);
        let sleeps = |running: &Notifications| {
            let id = crate::procfs::ProcessId::of(running.0[0].supervisor.id()).unwrap();
            crate::procfs::signal_children(&id, Signal::SIGCONT)
        };
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(sleeps(&running), 1);
        running.tend(start + Duration::from_secs(60));
        assert_eq!(running.0.len(), 1, "within its limit and grace: left alone");
        let late = start + Duration::from_secs(67);
        running.tend(late);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(running.0.len(), 1);
        assert!(running.0[0].killed.is_some());
        running.tend(late + Duration::from_secs(1));
        assert_eq!(running.0.len(), 1, "its supervisor gets its time");
        let mut left = running.tend(late + OVERDUE);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !running.0.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            left.extend(running.tend(late + OVERDUE));
        }
        assert!(running.0.is_empty(), "killed and reaped");
        assert_eq!(
            left,
            [PathBuf::from("/nonexistent/carma-test-notify")],
            "its cgroup, which its killed supervisor could not remove, is handed on"
        );
    }
}
