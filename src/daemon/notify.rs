//! Notifications: a command run, as the job's owner, when a job ends
//! (`notify:` in the job file, else the configured `daemon.notify` hook).
//!
//! The command runs under a supervisor of its own, exactly as a job's run
//! does (as its owner, with a login environment and nothing of the
//! daemon's, its output in the task's `notify/` directory), with the job's
//! number, name, state and reason in the environment and a time limit: a
//! hook that hangs cannot pile up. It runs once the task has reached
//! `done/` or `failed/`; a daemon that dies in between does not run it
//! later (at most once, never twice).

use super::environment::current_user;
use crate::config::Config;
use crate::lifecycle::Closing;
use crate::spool::record::{Launch, WORK, unix_now, write_json};
use crate::spool::{Spool, TASK_DIR_MODE, make_dir};
use crate::supervisor;
use crate::supervisor::program::Program;

/// Longest a notification may run before it is stopped, seconds.
const NOTIFY_TIME_LIMIT_S: f64 = 60.0;

/// Runs the notification of a task that landed in `closing.to` (`done`
/// or `failed`): the job file's `notify:`, else the configured hook, if
/// either. Failures are logged, never fatal.
pub(super) fn send(spool: &Spool, config: &Config, program: &Program, closing: &Closing) {
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
    let user = closing
        .run_as
        .as_deref()
        .cloned()
        .unwrap_or_else(current_user);
    let mut env = super::environment::login_env(&user, &config.daemon.job_path);
    env.extend([
        ("CARMA_TASK_ID".to_string(), name.to_string()),
        ("CARMA_JOB_NAME".to_string(), name.stem().to_string()),
        ("CARMA_STATE".to_string(), state.to_string()),
        (
            "CARMA_REASON".to_string(),
            reason.unwrap_or_default().to_string(),
        ),
    ]);
    let launch = Launch {
        task: name.to_string(),
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
        run_as: closing.run_as.as_deref().cloned(),
        groups: closing
            .run_as
            .as_deref()
            .and_then(super::environment::groups),
        env,
        grace_s: 1.0,
        time_limit_s: Some(NOTIFY_TIME_LIMIT_S),
        time_limit_grace_s: 1.0,
        cgroup: None,
        cpus: None,
        host_memory_mib: None,
        max_processes: None,
        crashes: None,
        boot: None,
    };
    let started = notify_dir(&dir)
        .and_then(|notify_dir| {
            write_json(&notify_dir.join(supervisor::LAUNCH), &launch).map(|()| notify_dir)
        })
        .and_then(|notify_dir| supervisor::start(program, &notify_dir));
    match started {
        Ok(mut child) => {
            log::info!("{name}: notifying: {command}");
            // Reaped, so it leaves no zombie; its end is in notify/.
            let reaper = std::thread::Builder::new()
                .name(format!("notify-{}", name.seq()))
                .spawn(move || {
                    let _ = child.wait();
                });
            if let Err(e) = reaper {
                log::warn!("{name}: no thread to reap the notification: {e}");
            }
        }
        Err(e) => log::warn!("{name}: cannot run its notification: {e}"),
    }
}

/// A fresh directory for one notification in the task directory `dir`:
/// `notify/`, then `notify-2/`, ... (a requeued task ends, and notifies,
/// again).
fn notify_dir(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
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
