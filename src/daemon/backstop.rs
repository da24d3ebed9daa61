//! The backstop behind supervisors: a run that should have ended long ago
//! ([`crate::lifecycle::Overdue`]) has its job killed by the daemon; the
//! cgroups of runs whose processes outlived a kill are removed once empty.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::Daemon;
use super::runs::run_dir;
use crate::cgroup::RunCgroup;
use crate::lifecycle::{OVERDUE_TIME_LIMIT as TIME_LIMIT, Overdue};
use crate::procfs::ProcessId;
use crate::sched::{Exit, Time};
use crate::supervisor;

/// How long after the kill of an overdue run's job the run may take to
/// end before its supervisor is killed too, and how often the kill is
/// repeated meanwhile.
const AGAIN: Duration = Duration::from_secs(5);

/// Runs whose job the daemon killed, by task number and run, and the
/// cgroups of dead supervisors' runs whose processes outlived the kill.
#[derive(Debug, Default)]
pub(super) struct Backstop {
    forced: HashMap<(u64, u32), Forcing>,
    left: Vec<PathBuf>,
}

#[derive(Debug)]
struct Forcing {
    /// The last kill.
    at: Time,
    /// What should have ended the run.
    why: &'static str,
    /// Its supervisor was killed as well.
    supervisor_killed: bool,
}

impl Backstop {
    /// How run `run` of task `seq` ended, when the daemon killed its
    /// supervisor: by its time limit, or by its cancellation.
    pub(super) fn ended(&self, seq: u64, run: u32) -> Option<Exit> {
        let forcing = self
            .forced
            .get(&(seq, run))
            .filter(|f| f.supervisor_killed)?;
        Some(match forcing.why {
            TIME_LIMIT => Exit::TimeLimit,
            _ => Exit::Cancelled,
        })
    }

    /// A cgroup (a run's, or a killed notification's) to remove once its
    /// processes are gone.
    pub(super) fn leave(&mut self, dir: PathBuf) {
        self.left.push(dir);
    }
}

impl Daemon {
    /// Kills the job of every overdue run: all of its run's cgroup, and
    /// each child of its supervisor (where a job has no cgroup, its first
    /// process, held before its `exec`, is one). A process stopped by a
    /// signal dies, and the supervisor, woken, records the end as a
    /// cancellation or a time limit. A process waiting for a FUSE server
    /// that has its request dies only once it is answered: its supervisor
    /// waits on, and is killed [`AGAIN`] later if that process has still
    /// not called `exec`, so that the run ends and its GPU is free; the
    /// job's process dies as soon as it returns.
    pub(super) fn end_overdue(&mut self) {
        let now = self.moment();
        self.backstop
            .left
            .retain(|dir| !crate::cgroup::remove_emptied(dir));
        let overdue = self.life.overdue(now);
        let forced = &mut self.backstop.forced;
        forced.retain(|run, _| overdue.iter().any(|o| (o.name.seq(), o.run) == *run));
        for run in overdue {
            let key = (run.name.seq(), run.run);
            let escalate = match forced.get(&key) {
                None => false,
                Some(f) if now.at.saturating_sub(f.at) < AGAIN => continue,
                Some(f) => !f.supervisor_killed,
            };
            let supervisor = run
                .supervisor
                .or_else(|| supervisor::identity(&run_dir(&self.spool, &run.name, run.run)));
            let killed = kill(self.job_cgroup.as_deref(), &run, supervisor.as_ref());
            // Only a supervisor that still waits for its job's first
            // process to start: one that is ending the run (retrying
            // exit.json on a full disk, waiting for leftovers) records it
            // as it should, in time.
            let supervisor_killed = escalate
                && supervisor.is_some_and(|s| {
                    crate::procfs::has_child_before_exec(&s)
                        && crate::procfs::signal(&s, Signal::SIGKILL).unwrap_or(false)
                });
            if !forced.contains_key(&key) {
                log::warn!(
                    "{}: run {} outlived {} and its grace by {} s without its supervisor \
                     ending it; its job was killed ({killed})",
                    run.name,
                    run.run,
                    run.why,
                    crate::lifecycle::OVERDUE_MARGIN.as_secs()
                );
            }
            if supervisor_killed {
                log::warn!(
                    "{}: run {} still had not ended {} s later: its job's first process \
                     is held in the kernel (a FUSE working directory that does not \
                     answer, say), and its supervisor with it; the supervisor was killed",
                    run.name,
                    run.run,
                    AGAIN.as_secs()
                );
            }
            let entry = forced.entry(key).or_insert(Forcing {
                at: now.at,
                why: run.why,
                supervisor_killed: false,
            });
            entry.at = now.at;
            entry.supervisor_killed |= supervisor_killed;
        }
    }
}

/// Kills what runs of `run`'s job: all of its cgroup under `job_cgroup`,
/// or where it has none, the children of its `supervisor` (each looked at
/// before it is signalled: up to the run's 16,384 processes, a job's
/// orphans among them, at every pass; in a cgroup every one of them, its
/// first process included, is killed with it). What it did, in words.
fn kill(job_cgroup: Option<&Path>, run: &Overdue, supervisor: Option<&ProcessId>) -> String {
    let mut did = Vec::new();
    if let Some(parent) = job_cgroup {
        let dir = parent.join(crate::cgroup::run_name(run.name.as_str(), run.run));
        if dir.is_dir() {
            RunCgroup::kill(&dir);
            did.push(format!("cgroup.kill in {}", dir.display()));
        }
    }
    if let Some(supervisor) = supervisor.filter(|_| did.is_empty()) {
        let n = crate::procfs::signal_children(supervisor, Signal::SIGKILL);
        did.push(format!(
            "SIGKILL to {n} children of supervisor {}",
            supervisor.pid
        ));
    }
    match did.is_empty() {
        true => "nothing of it was found".into(),
        false => did.join("; "),
    }
}
