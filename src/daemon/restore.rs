//! Rebuilding all state from the spool when the daemon starts.
//!
//! Order matters: interrupted claims are finished first, then `running/`
//! is settled (a run that never started goes back to `pending/`, so it must
//! be settled before `pending/` is read), then `recovery/` and `pending/`
//! are queued in task-number order, which is submission order.

use std::fs;
use std::path::Path;

use anyhow::Result;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{Daemon, Task};
use crate::estimate::EstimateInput;
use crate::rad::{PublishedEstimates, Syntax, TaskSpec};
use crate::sched::{Demand, Event, Need};
use crate::spool::record::{Launch, TaskRecord, read_json};
use crate::spool::{State, TaskName};
use crate::supervisor;

impl Daemon {
    pub(super) fn restore(&mut self) -> Result<()> {
        for name in self.spool.finish_claims()? {
            log::info!("{name}: finished a claim interrupted by a crash");
        }
        for name in self.spool.list(State::Running)?.tasks {
            self.restore_running(name);
        }
        for name in self.spool.list(State::Recovery)?.tasks {
            self.take(name, State::Recovery);
        }
        self.rescan();
        Ok(())
    }

    /// Settles one task found in `running/`.
    fn restore_running(&mut self, name: TaskName) {
        let dir = self.spool.task_dir(State::Running, &name);
        let run = super::intake::last_run(&dir);
        let run_dir = dir.join(format!("run-{run}"));
        let launch = read_json::<Launch>(&run_dir.join(supervisor::LAUNCH));
        let has_exit = run_dir.join(supervisor::EXIT).exists();
        let alive = supervisor::is_running(&run_dir);
        let started = run_dir.join(supervisor::IDENTITY).exists();
        let Ok(launch) = launch else {
            return self.requeue(&name, "its launch was never completed");
        };
        if !has_exit && !alive && !started {
            return self.requeue(&name, "its supervisor never started");
        }
        // A job that runs (or ran) is never refused now: whatever its
        // directory says today, it is adopted as it was launched, and
        // decided on when it ends.
        let mut task = match self.load(&name, State::Running, None) {
            Ok(task) => task,
            Err(reason) => {
                log::warn!("{name}: {reason}; adopting its run as it was launched");
                self.as_launched(&name, &launch)
            }
        };
        task.peak_mib = std::fs::read_to_string(run_dir.join(supervisor::PEAK))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        task.run = run;
        task.gpus = launch.gpus.clone();
        task.since = launch.launched_at;
        task.supervisor = supervisor::identity(&run_dir);
        task.adopted = true;
        self.events.push(Event::Running {
            task: name.id(),
            demand: task.demand.clone(),
            gpus: launch.gpus,
            crashes: task.record.crashes,
        });
        self.tasks.insert(name.seq(), task);
        if has_exit {
            log::info!("{name}: run {run} ended while the daemon was away");
            self.collect(name.seq());
        } else if alive {
            log::info!("{name}: re-attached to run {run}, still running");
        } else {
            // The supervisor died without recording the end (a reboot, a
            // SIGKILL): what the job did is unknown. Stop whatever is left
            // of it, and let the user decide whether to run it again.
            let killed = kill_leftovers(&name, run);
            log::warn!(
                "{name}: run {run} lost its supervisor; stopped {killed} leftover processes"
            );
            self.collect(name.seq());
        }
    }

    /// A running task whose directory no longer loads (its `.rad` changed,
    /// its owner's account is gone): what its launch says is enough to see
    /// the run to its end.
    fn as_launched(&self, name: &TaskName, launch: &Launch) -> Task {
        let record = self
            .spool
            .load_record(State::Running, name)
            .unwrap_or_else(|_| TaskRecord::new(name, "", launch.launched_at));
        let spec = TaskSpec {
            syntax: Syntax::Keyed,
            name: Some(name.to_string()),
            script: launch.script.clone(),
            model: None,
            dataset: None,
            batch_size: None,
            gpus: launch.gpus.len().max(1) as u32,
            policy: None,
            memory: None,
            published: PublishedEstimates::default(),
            retries: None,
        };
        let fingerprint = EstimateInput {
            command: spec.script.join("\n"),
            ..EstimateInput::default()
        }
        .fingerprint();
        Task {
            name: name.clone(),
            state: State::Running,
            demand: Demand {
                gpus: spec.gpus,
                need: record.estimate.as_ref().map_or(Need::Unknown, |e| e.need),
                exclusive: false,
                user: launch.run_as.as_ref().map(|u| u.uid).or(record.owner),
                max_retries: None,
            },
            spec,
            record,
            run_as: launch.run_as.clone(),
            user: launch
                .run_as
                .as_ref()
                .map_or_else(|| "the daemon's user".to_string(), |u| u.name.clone()),
            run: 0,
            gpus: Vec::new(),
            supervisor: None,
            adopted: true,
            since: launch.launched_at,
            peak_mib: 0,
            fingerprint,
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
            log::error!("{name}: cannot move back to {to}/: {e}");
        }
    }
}

/// Sends SIGKILL to every process whose environment names this task's run
/// (`CARMA_TASK_ID`, `CARMA_RUN`): the job's processes carry both, and
/// nothing else does, whatever became of their pids' sessions.
pub(super) fn kill_leftovers(name: &TaskName, run: u32) -> usize {
    let task_var = format!("CARMA_TASK_ID={name}");
    let run_var = format!("CARMA_RUN={run}");
    let mut killed = 0;
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if environ_has(&entry.path(), &task_var, &run_var)
            && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}

fn environ_has(proc_dir: &Path, a: &str, b: &str) -> bool {
    let Ok(environ) = fs::read(proc_dir.join("environ")) else {
        return false;
    };
    let vars: Vec<&[u8]> = environ.split(|&c| c == 0).collect();
    vars.contains(&a.as_bytes()) && vars.contains(&b.as_bytes())
}
