//! Runs: learning how a run ended, from its supervisor's reaper or, for
//! runs an earlier daemon started, by looking; the lifecycle
//! ([`crate::lifecycle`]) decides what follows.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Daemon;
use crate::lifecycle::RunEnd;
use crate::procfs::ProcessId;
use crate::sched::Exit;
use crate::spool::record::{Launch, RunExit, read_state};
use crate::spool::{Spool, State, TaskName};
use crate::supervisor;

impl Daemon {
    /// The nursery forked the supervisor of a run: its pid, for the GPU
    /// readings to tell the run's processes by their session.
    pub(super) fn on_forked(&mut self, seq: u64, run: u32, pid: u32) {
        let now = self.now();
        if self.life.is_current(seq, run)
            && let Some(task) = self.life.tasks.get_mut(&seq)
        {
            task.supervisor = ProcessId::of(pid);
            // The supervisor counts its limit from about now, however
            // long the launch's flushes and the nursery took: so does the
            // backstop.
            task.deadlines.since = task.deadlines.since.max(now);
        }
    }

    /// One of our supervisors exited.
    pub(super) fn on_reaped(&mut self, seq: u64, run: u32) {
        if self.life.is_current(seq, run) {
            self.collect(seq);
        }
    }

    /// The supervisors' nursery `nursery` is gone: the runs it forked
    /// supervisors for are looked at once a second, as those of an earlier
    /// daemon are (all running runs: looking costs little, and a run whose
    /// end is reported as well is collected once).
    pub(super) fn on_nursery_gone(&mut self, nursery: u64) {
        log::debug!("the supervisors' nursery {nursery} is gone; its runs are looked at");
        self.supervisors.gone(nursery);
        for task in self.life.tasks.running_mut() {
            task.adopted = true;
        }
    }

    /// Runs started by an earlier daemon: looked at once a second, as
    /// every run is for whether it is overdue ([`Daemon::end_overdue`]),
    /// and notifications for their end.
    pub(super) fn poll_adopted(&mut self) {
        let now = self.now();
        if now.saturating_sub(self.polled) < Duration::from_secs(1) {
            return;
        }
        self.polled = now;
        // A live supervisor whose fork was not reported (its nursery died)
        // is named by its own record, once it has written it.
        for task in self.life.tasks.running_mut() {
            if task.adopted && task.supervisor.is_none() {
                let dir = run_dir(&self.spool, &task.name, task.run);
                if supervisor::is_running(&dir) {
                    task.supervisor = supervisor::identity(&dir);
                }
            }
        }
        let due: Vec<u64> = self
            .life
            .tasks
            .values()
            .filter(|t| t.state == State::Running && t.adopted)
            .filter(|t| {
                let run_dir = run_dir(&self.spool, &t.name, t.run);
                run_dir.join(supervisor::EXIT).exists() || !supervisor::is_running(&run_dir)
            })
            .map(|t| t.name.seq())
            .collect();
        for seq in due {
            self.collect(seq);
        }
        self.end_overdue();
        for dir in self.notifications.tend(std::time::Instant::now()) {
            self.backstop.leave(dir);
        }
    }

    /// Task `seq`'s run is looked at once a second from now on, as a run
    /// of an earlier daemon is.
    fn look_again(&mut self, seq: u64) {
        if let Some(task) = self.life.tasks.get_mut(&seq) {
            task.adopted = true;
        }
    }

    /// Reads how the current run of task `seq` ended and tells the core.
    pub(super) fn collect(&mut self, seq: u64) {
        let Some(task) = self.life.tasks.get(&seq) else {
            return;
        };
        let run_dir = run_dir(&self.spool, &task.name, task.run);
        let name = task.name.clone();
        let run = task.run;
        // When the run was launched: this daemon's own launch is in
        // memory, an earlier daemon's is read back (a launch.json is as
        // large as its script, up to megabytes of escapes, and each run's
        // end was one more parse on the loop).
        let launched_at = (!task.adopted && task.since > 0.0).then_some(task.since);
        let user = task
            .run_as
            .as_ref()
            .map_or_else(|| nix::unistd::geteuid().as_raw(), |u| u.uid);
        let (exit, peak_mib, run_s) = match read_state::<RunExit>(&run_dir.join(supervisor::EXIT)) {
            Ok(exit) if exit.transient => {
                let reason = exit.error.unwrap_or_default();
                let end = match exit.as_its_user {
                    true => self.life.failed_as_its_user(seq, reason),
                    false => RunEnd::NotStarted(reason),
                };
                return self.ended(seq, end);
            }
            Ok(exit) => {
                // A supervisor removes its run's cgroup as it ends, unless
                // processes held in the kernel outlived the kill there.
                if let Some(parent) = &self.job_cgroup {
                    let dir = parent.join(crate::cgroup::run_name(name.as_str(), run));
                    if !crate::cgroup::remove_emptied(&dir) {
                        self.backstop.leave(dir);
                    }
                }
                let run_s = launched_at
                    .or_else(|| {
                        read_state::<Launch>(&run_dir.join(supervisor::LAUNCH))
                            .ok()
                            .map(|launch| launch.launched_at)
                    })
                    .map(|launched_at| exit.ended_at - launched_at);
                (
                    self.classify(&name.to_string(), &exit, &run_dir),
                    exit.peak_mib,
                    run_s,
                )
            }
            // Unreadable for now (out of descriptors, say), not missing: a
            // dead supervisor must not be judged by a failed read. Looked
            // at again once a second, as a run of an earlier daemon is.
            Err(e) if supervisor::is_transient(&e) => {
                log::debug!("{name}: cannot read how run {run} ended yet ({e}); looked at again");
                return self.look_again(seq);
            }
            // Said to have ended while its lock is still held: whoever
            // holds it lets go soon.
            Err(_) if supervisor::is_running(&run_dir) => return self.look_again(seq),
            // It names itself before it starts the job: without that, the
            // job never ran (it could not write in a full disk, say),
            // unless the name was lost with a boot since.
            Err(_) if !supervisor::may_have_started(&run_dir) => {
                let why = "its supervisor ended before it started the job";
                return self.ended(seq, RunEnd::NotStarted(why.into()));
            }
            Err(_) => {
                // Whatever is left of the job goes with its supervisor:
                // all of its run's cgroup, then (where jobs have no
                // cgroups) the processes that still say they are the run.
                let run_cgroup = crate::cgroup::run_name(name.as_str(), run);
                let in_cgroup = self
                    .job_cgroup
                    .as_deref()
                    .and_then(|parent| crate::cgroup::end_orphaned_run(parent, &run_cgroup));
                // The environment scan (every process's) only where the
                // run had no cgroup: a user can bring this about at will.
                let had_cgroup = in_cgroup.is_some();
                let (in_cgroup, left) = in_cgroup.unwrap_or((0, None));
                if let Some(dir) = left {
                    log::debug!(
                        "{name}: {} is removed once the processes killed there have ended",
                        dir.display()
                    );
                    self.backstop.leave(dir);
                }
                let killed = in_cgroup
                    + match had_cgroup {
                        true => 0,
                        false => {
                            super::restore::kill_leftovers(self.spool.root(), &name, run, user)
                        }
                    };
                if killed > 0 {
                    log::warn!("{name}: stopped {killed} processes its dead supervisor left");
                }
                // Killed by the daemon with its job, held before it
                // started: ended as its supervisor would have said.
                let exit = self.backstop.ended(seq, run).unwrap_or_else(|| {
                    Exit::Failed(
                        "its supervisor died without recording how the job ended \
                         (a reboot or a SIGKILL); submit it again to re-run it"
                            .into(),
                    )
                });
                (exit, None, None)
            }
        };
        self.ended(
            seq,
            RunEnd::Exited {
                exit,
                peak_mib,
                run_s,
            },
        );
    }

    /// Tells the lifecycle how task `seq`'s run ended.
    fn ended(&mut self, seq: u64, end: RunEnd) {
        self.with_world(|life, now, world| life.run_ended(now, seq, end, world));
    }

    /// Success, cancellation, an activation line that stopped the job (its
    /// reason from stderr), OOM (by the signatures in stderr), or another
    /// failure.
    fn classify(&self, name: &str, exit: &RunExit, run_dir: &Path) -> Exit {
        if exit.succeeded() {
            return Exit::Success;
        }
        if exit.timed_out {
            return Exit::TimeLimit;
        }
        if exit.cancelled {
            return Exit::Cancelled;
        }
        if exit.error.is_none() {
            match crate::job_script::setup_failure(exit.code, run_dir) {
                Ok(Some(why)) => return Exit::Failed(why),
                Ok(None) => {}
                Err(e) => log::warn!("{name}: cannot read its stderr: {e}"),
            }
            match self.config.oom.find_in(&run_dir.join(supervisor::STDERR)) {
                Ok(Some(signature)) => {
                    log::warn!(
                        "{name}: out of GPU memory ({}: \"{signature}\")",
                        exit.describe()
                    );
                    return Exit::Oom;
                }
                Ok(None) => {}
                Err(e) => log::warn!("{name}: cannot read its stderr: {e}"),
            }
        }
        Exit::Failed(with_last_word(exit.describe(), run_dir))
    }
}

/// Longest stretch of a job's last stderr line kept in its failure reason.
const LAST_WORD_CHARS: usize = 200;

/// `how` the job ended, with the last line it wrote to stderr: usually the
/// exception that ended it, which "exit status 1" alone does not say. The
/// reason is its owner's to read (and root's); `carma show` has more.
fn with_last_word(how: String, run_dir: &Path) -> String {
    let tail = supervisor::tail(&run_dir.join(supervisor::STDERR), 4096).unwrap_or_default();
    match crate::task_view::last_lines(&tail, 1).pop() {
        Some(line) if !line.trim().is_empty() => {
            let line: String = line.trim().chars().take(LAST_WORD_CHARS).collect();
            format!("{how}: {line}")
        }
        _ => how,
    }
}

/// Where a task's run `run` lives while it runs.
pub(super) fn run_dir(spool: &Spool, name: &TaskName, run: u32) -> PathBuf {
    spool
        .task_dir(State::Running, name)
        .join(format!("run-{run}"))
}
