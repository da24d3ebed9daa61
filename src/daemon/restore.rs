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

use super::Daemon;
use crate::sched::Event;
use crate::spool::record::{Launch, read_json};
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
        let mut task = match self.load(&name, State::Running, None) {
            Ok(task) => task,
            Err(reason) => return self.reject(&name, State::Running, &reason),
        };
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

    /// Puts a task whose run never started back into `pending/`, where it
    /// keeps its place (its number).
    fn requeue(&mut self, name: &TaskName, why: &str) {
        log::warn!("{name}: back to pending/: {why}");
        if let Err(e) = self.spool.move_task(name, State::Running, State::Pending) {
            log::error!("{name}: cannot move back to pending/: {e}");
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
