//! Rebuilding all state from the spool when the daemon starts.
//!
//! Order matters: interrupted claims are finished first, then `running/`
//! is settled (a run that never started goes back to `pending/`, so it must
//! be settled before `pending/` is read), then `recovery/` and `pending/`
//! are queued in task-number order, which is submission order. Last, the
//! estimators' history is brought up to date from `done/`.
//!
//! A run is judged by its supervisor's lock first, by its records second:
//! a supervisor that holds the lock is alive, whatever any file says, and
//! its run is re-attached, never launched again. Only a run whose lock is
//! free, that was launched in this boot and that left no sign of a
//! supervisor (no `supervisor.json`, no `exit.json`) never started, and
//! goes back to the queue ([`supervisor::may_have_started`]). A run that
//! started is settled so wherever its task is found: a power loss may
//! undo a launch's move into `running/` (flushed while the job starts),
//! and such a task, found waiting, must not be launched a second time.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use nix::sys::signal::Signal;

use super::{Daemon, Task};
use crate::estimate::EstimateInput;
use crate::estimate::Fingerprint;
use crate::rad::{Syntax, TaskSpec};
use crate::sched::{Demand, Need};
use crate::spool::record::{Launch, TaskRecord, read_state};
use crate::spool::{State, TaskName};
use crate::supervisor;

/// How far back a start looks for submissions whose submitter may still
/// wait to learn what became of them.
const RECENT_SUBMISSION_S: f64 = 600.0;

impl Daemon {
    pub(super) fn restore(&mut self) -> Result<()> {
        let finished = self.spool.finish_claims()?;
        for name in finished.pending {
            log::info!("{name}: finished a claim interrupted by a crash");
        }
        self.stranded = finished.stranded;
        for state in [State::Done, State::Failed] {
            for name in self.spool.list(state)?.tasks {
                self.life.ended.insert(state, name);
            }
        }
        for name in self.spool.list(State::Running)?.tasks {
            self.restore_running(name);
        }
        for name in self.spool.list(State::Recovery)?.tasks {
            self.take(name, State::Recovery);
        }
        self.rescan();
        self.remember_recent_submissions();
        self.rebuild_history();
        Ok(())
    }

    /// Names, in the status, what recent submissions became: a submitter
    /// whose daemon died before it answered learns from the next daemon
    /// whether its jobs were taken ([`crate::spool::socket`]).
    fn remember_recent_submissions(&mut self) {
        let since = crate::spool::record::unix_now() - RECENT_SUBMISSION_S;
        let mut recent: Vec<(u64, String, String)> = self
            .life
            .tasks
            .values()
            .filter(|t| t.record.submitted_at >= since)
            .filter_map(|t| {
                let token = t.record.submitted_as.clone()?;
                Some((t.name.seq(), token, t.name.to_string()))
            })
            .collect();
        recent.sort_unstable();
        for (_, token, name) in recent {
            self.remember_adoption(token, &name);
        }
    }

    /// Brings the history up to date with every task in `done/`: each
    /// record there carries its job's fingerprint and peak. A peak whose
    /// history write was lost (a crash right after the move) is recovered;
    /// peaks already in the history change nothing. Only the records of
    /// tasks the history does not list as taken in are read, so a start
    /// does not grow with `done/`.
    fn rebuild_history(&mut self) {
        let Ok(listing) = self.spool.list(State::Done) else {
            return;
        };
        let absorbed = self.chain.history().absorbed();
        let mut peaks: HashMap<String, (Fingerprint, u64, u64, Option<f64>)> = HashMap::new();
        for name in listing
            .tasks
            .iter()
            .filter(|n| !absorbed.contains(&n.seq()))
        {
            let Ok(record) = self.spool.load_record(State::Done, name) else {
                continue;
            };
            let (Some(fingerprint), Some(peak)) = (record.fingerprint, record.peak_mib) else {
                continue;
            };
            let entry = peaks
                .entry(fingerprint.key())
                .or_insert((*fingerprint, 0, 0, None));
            entry.1 = entry.1.max(peak);
            entry.2 += 1;
            entry.3 = match (entry.3, record.run_s) {
                (Some(a), Some(b)) => Some(f64::max(a, b)),
                (a, b) => a.or(b),
            };
        }
        let (mut learned, mut lost) = (0, false);
        for (fingerprint, peak, runs, run_s) in peaks.into_values() {
            match self.chain.history().absorb(&fingerprint, peak, runs, run_s) {
                Ok(true) => learned += 1,
                Ok(false) => {}
                Err(e) => {
                    lost = true;
                    log::warn!("history: cannot record a peak from done/: {e}");
                }
            }
        }
        if learned > 0 {
            log::info!("history: {learned} job(s) brought up to date from done/");
        }
        // A record that could not be read has nothing to give either; a
        // peak the history could not take is read again next time.
        let taken_in = listing.tasks.iter().map(TaskName::seq);
        if !lost && let Err(e) = self.chain.history().keep_absorbed(taken_in) {
            log::warn!("history: cannot note which tasks of done/ it holds: {e}");
        }
    }

    /// Settles one task found in `running/`.
    fn restore_running(&mut self, name: TaskName) {
        let dir = self.spool.task_dir(State::Running, &name);
        let run = supervisor::last_run(&dir);
        let run_dir = dir.join(format!("run-{run}"));
        // Asked first: a live supervisor wins over any record.
        let alive = run > 0 && supervisor::is_running(&run_dir);
        let has_exit = run_dir.join(supervisor::EXIT).exists();
        let started = run > 0 && supervisor::may_have_started(&run_dir);
        if !alive && !has_exit && !started {
            return self.requeue(&name, "its supervisor never started");
        }
        let launch = read_state::<Launch>(&run_dir.join(supervisor::LAUNCH));
        if let Err(e) = &launch {
            log::warn!("{name}: run {run}: {e}; its supervisor is judged by its lock");
        }
        let launch = launch.ok();
        // A job that runs (or ran) is never refused now: whatever its
        // directory says today, it is adopted as it was launched, and
        // decided on when it ends.
        let mut task = match self.load(&name, State::Running, None, false) {
            Ok(task) => task,
            Err(reason) => {
                log::warn!("{name}: {reason}; adopting its run as it was launched");
                self.as_launched(&name, launch.as_ref())
            }
        };
        task.peak_mib = std::fs::read_to_string(run_dir.join(supervisor::PEAK))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let gpus = launch
            .as_ref()
            .map_or_else(|| task.record.gpus.clone(), |l| l.gpus.clone());
        task.run = run;
        task.gpus = gpus.clone();
        task.since = launch
            .as_ref()
            .map_or(task.record.submitted_at, |l| l.launched_at);
        task.time_limit_s = launch.as_ref().and_then(|l| l.time_limit_s);
        // An earlier daemon's run: its deadlines count from its launch as
        // far back as the wall clock says, once, on this daemon's clock.
        let ago = crate::spool::record::unix_now() - task.since;
        task.deadlines = crate::lifecycle::Deadlines {
            since: self
                .now()
                .saturating_sub(Duration::try_from_secs_f64(ago.max(0.0)).unwrap_or(Duration::MAX)),
            graces: launch.as_ref().map_or_else(
                || crate::lifecycle::Graces {
                    cancel_s: self.config.daemon.cancel_grace_s.get(),
                    time_limit_s: self.config.daemon.time_limit_grace_s.get(),
                },
                |l| crate::lifecycle::Graces {
                    cancel_s: l.grace_s,
                    time_limit_s: l.time_limit_grace_s,
                },
            ),
            // Asked of an earlier daemon: its grace counts from now.
            stop_asked: run_dir
                .join(supervisor::STOP_ASKED)
                .exists()
                .then(|| self.now()),
        };
        task.supervisor = supervisor::identity(&run_dir);
        task.adopted = true;
        let missing: Vec<String> = gpus
            .iter()
            .filter(|&&g| g >= self.gpus.len())
            .map(ToString::to_string)
            .collect();
        if !missing.is_empty() {
            // The daemon restarted with fewer GPUs. The job runs where it
            // was put; it is seen through to its end, but counts on no GPU
            // this daemon has, and its re-run, if any, is placed afresh.
            log::warn!(
                "{name}: runs on GPU {}, which this daemon does not have ({} GPU(s)); \
                 left to finish, counted on none of this daemon's GPUs",
                missing.join(","),
                self.gpus.len()
            );
        }
        self.life.adopt_running(task);
        if alive {
            log::info!("{name}: re-attached to run {run}, still running");
        } else if has_exit {
            log::info!("{name}: run {run} ended while the daemon was away");
            self.collect(name.seq());
        } else {
            // The supervisor died without recording the end (a reboot, a
            // SIGKILL): what the job did is unknown. Collecting stops
            // whatever is left of it, and the user decides whether to run
            // it again.
            log::warn!("{name}: run {run} lost its supervisor");
            self.collect(name.seq());
        }
    }

    /// Settles a task found waiting in `state` whose last run started and
    /// recorded no end: a power loss lost the launch's move into
    /// `running/` (flushed while the job starts), not the run. It is
    /// settled as a run found in `running/` is, never launched again.
    pub(super) fn resume_unended(&mut self, name: TaskName, state: State) {
        log::warn!("{name}: its last run started, but its launch's move into running/ was lost");
        match self.spool.move_task(&name, state, State::Running) {
            Ok(()) => self.restore_running(name),
            // Left where it is, not queued: the next look at the spool
            // tries again.
            Err(e) => log::error!("{name}: cannot move into running/: {e}"),
        }
    }

    /// A running task whose directory no longer loads (its owner's account
    /// is gone, its record is damaged): what its launch and record say is
    /// enough to see the run to its end.
    fn as_launched(&self, name: &TaskName, launch: Option<&Launch>) -> Task {
        let record = self
            .spool
            .load_record(State::Running, name)
            .unwrap_or_else(|_| TaskRecord::new(name, "", launch.map_or(0.0, |l| l.launched_at)));
        let gpus = launch.map_or_else(|| record.gpus.clone(), |l| l.gpus.clone());
        let spec = TaskSpec {
            name: Some(name.to_string()),
            gpus: gpus.len().max(1) as u32,
            ..TaskSpec::new(
                Syntax::Keyed,
                launch.map(|l| l.script.clone()).unwrap_or_default(),
            )
        };
        let fingerprint = record.fingerprint.as_deref().cloned().unwrap_or_else(|| {
            EstimateInput {
                command: spec.script.join("\n"),
                user: record.owner.and_then(|o| self.history_user(o)),
                ..EstimateInput::default()
            }
            .fingerprint()
        });
        let run_as = launch.and_then(|l| l.run_as.clone()).map(Arc::new);
        let demand = Demand {
            gpus: spec.gpus,
            need: record.estimate.as_ref().map_or(Need::Unknown, |e| e.need),
            exclusive: false,
            user: record.owner.or(run_as.as_ref().map(|u| u.uid)),
            max_retries: None,
            time_limit: launch
                .and_then(|l| l.time_limit_s)
                .and_then(|s| Duration::try_from_secs_f64(s).ok()),
            priority: record.priority.unwrap_or(0),
            after: Vec::new(),
            history: None,
            array: record.array.map(|a| crate::sched::ArrayOf {
                job: a.job,
                at_once: a.at_once,
            }),
        };
        Task {
            name: name.clone(),
            state: State::Running,
            owner: demand.user,
            priority: demand.priority,
            demand: Some(Box::new(demand)),
            job: spec.into(),
            user: run_as
                .as_ref()
                .map_or_else(
                    || {
                        record
                            .owner
                            .map_or("unknown".into(), |uid| format!("uid {uid}"))
                    },
                    |u| u.name.clone(),
                )
                .into(),
            record,
            run_as,
            run: 0,
            gpus: Vec::new(),
            supervisor: None,
            adopted: true,
            since: launch.map_or(0.0, |l| l.launched_at),
            time_limit_s: None,
            deadlines: Default::default(),
            start_failures: 0,
            peak_mib: 0,
            run_s: None,
            fingerprint,
            bytes: 0,
        }
    }

    /// Puts a task whose run never started back where it waited: into
    /// `recovery/` when it had crashed before, else into `pending/`, where
    /// it keeps its place (its number).
    fn requeue(&mut self, name: &TaskName, why: &str) {
        let crashed = self
            .spool
            .load_record(State::Running, name)
            .is_ok_and(|r| r.crashes > 0);
        let to = if crashed {
            State::Recovery
        } else {
            State::Pending
        };
        log::warn!("{name}: back to {to}/: {why}");
        if let Err(e) = self.spool.move_task(name, State::Running, to) {
            // Queued from where it is: a launch starts it from running/
            // just as well, and nothing waits for a restart.
            log::warn!("{name}: cannot move back to {to}/ ({e}); queued from running/");
            self.take(name.clone(), State::Running);
        }
    }
}

/// Sends SIGKILL to every process of the job's user whose environment
/// names this task's run of this spool (`CARMA_SPOOL`, `CARMA_TASK_ID`,
/// `CARMA_RUN`): the job's processes carry all three, whatever became of
/// their pids' sessions, and another spool's task of the same name is
/// never touched. Anyone may set those variables, so a process that is
/// not wholly the job's user's (another user's, a set-user-ID program) is
/// never touched either. The user's processes' environments are read up
/// to [`ENVIRON_READ`] bytes in all, on the loop: a user who can make
/// this scan happen (a job whose supervisor the backstop kills) chooses
/// how many processes and how large an environment each has.
pub(super) fn kill_leftovers(spool: &Path, name: &TaskName, run: u32, user: u32) -> usize {
    let vars = [
        format!("CARMA_SPOOL={}", spool.display()),
        format!("CARMA_TASK_ID={name}"),
        format!("CARMA_RUN={run}"),
    ];
    let left = std::cell::Cell::new(ENVIRON_READ);
    let killed = crate::procfs::processes()
        .filter(|(_, dir)| runs_only_as(dir, user))
        .filter(|(pid, dir)| {
            crate::procfs::signal_checked(*pid, Signal::SIGKILL, || {
                runs_only_as(dir, user) && environ_has(dir, &vars, &left)
            })
        })
        .count();
    if left.get() == 0 {
        log::warn!(
            "{name}: run {run}'s leftover processes were looked for in {} MiB of its user's \
             processes' environments, no more; some may be left",
            ENVIRON_READ >> 20
        );
    }
    killed
}

/// Bytes of environments [`kill_leftovers`] reads at most, in all and of
/// one process: a job's own environment is a few KiB.
const ENVIRON_READ: u64 = 64 << 20;
const ENVIRON_READ_EACH: u64 = 1 << 20;

/// Whether every uid of the process (real, effective, saved, file system)
/// is `user`.
fn runs_only_as(proc_dir: &Path, user: u32) -> bool {
    crate::procfs::uids(proc_dir).is_some_and(|ids| ids.iter().all(|&id| id == user))
}

fn environ_has(proc_dir: &Path, wanted: &[String], left: &std::cell::Cell<u64>) -> bool {
    use std::io::Read;
    let most = left.get().min(ENVIRON_READ_EACH);
    let mut environ = Vec::new();
    let read = fs::File::open(proc_dir.join("environ"))
        .and_then(|f| f.take(most).read_to_end(&mut environ));
    left.set(left.get() - environ.len() as u64);
    if read.is_err() {
        return false;
    }
    let vars: Vec<&[u8]> = environ.split(|&c| c == 0).collect();
    wanted.iter().all(|w| vars.contains(&w.as_bytes()))
}
