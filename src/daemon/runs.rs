//! Runs: launching a task under a supervisor, learning how it ended, and
//! moving the task to where the core says it belongs.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Daemon;
use crate::procfs::ProcessId;
use crate::sched::{Event, Exit, TaskId};
use crate::spool::record::{Launch, Outcome, RunAs, RunExit, read_json, unix_now, write_json};
use crate::spool::{State, sync_dir, write_durable, write_replace};
use crate::supervisor;

/// The working directory of a job dropped straight into `pending/` (it has
/// no directory of its own): `work/` in its task directory, its user's.
const WORK: &str = "work";

fn make_work_dir(path: &std::path::Path, user: Option<&RunAs>) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    if let Some(user) = user {
        nix::unistd::chown(
            path,
            Some(nix::unistd::Uid::from_raw(user.uid)),
            Some(nix::unistd::Gid::from_raw(user.gid)),
        )?;
    }
    Ok(())
}

impl Daemon {
    /// Carries out a launch: the run directory and its `launch.json` are
    /// written, the task directory is renamed into `running/` (the commit
    /// point), and the supervisor is started. Directory syncs come after
    /// the start, so the job does not wait for the disk; a power cut before
    /// them kills the job too, and the restarted daemon sees a run that
    /// never started.
    pub(super) fn launch(
        &mut self,
        id: TaskId,
        gpus: Vec<usize>,
        limit_mib: Option<u64>,
        why: String,
    ) {
        let started = self.start_run(id, &gpus, limit_mib, &why);
        if let Err(exit) = started {
            self.events.push(Event::Exited { task: id, exit });
        }
    }

    fn start_run(
        &mut self,
        id: TaskId,
        gpus: &[usize],
        limit_mib: Option<u64>,
        why: &str,
    ) -> Result<(), Exit> {
        let mut env = self.backend_env.clone();
        if self.mps.is_some() {
            env.extend(self.config.mps.job_env(gpus.len(), limit_mib));
        }
        let grace_s = self.config.daemon.cancel_grace_s;
        let Some(task) = self.tasks.get_mut(&id.0) else {
            return Err(Exit::Failed("the daemon lost track of this task".into()));
        };
        let name = task.name.clone();
        let from = task.state;
        let run = task.run + 1;
        let from_dir = self.spool.task_dir(from, &name);
        let run_name = format!("run-{run}");
        let running_dir = self.spool.task_dir(State::Running, &name);
        let indices: Vec<String> = gpus.iter().map(ToString::to_string).collect();
        env.extend([
            ("CUDA_VISIBLE_DEVICES".to_string(), indices.join(",")),
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
            ("CARMA_TASK_ID".to_string(), name.to_string()),
            ("CARMA_RUN".to_string(), run.to_string()),
            ("CARMA_GPUS".to_string(), indices.join(",")),
        ]);
        let launch = Launch {
            task: name.to_string(),
            run,
            gpus: gpus.to_vec(),
            limit_mib,
            why: why.to_string(),
            launched_at: unix_now(),
            script: task.spec.script.clone(),
            workdir: task
                .record
                .workdir
                .clone()
                .unwrap_or_else(|| running_dir.join(WORK)),
            run_as: task.run_as.clone(),
            env,
            grace_s,
        };
        let failed = |what: &str, e: std::io::Error| {
            log::error!("{name}: cannot launch: {what}: {e}");
            Exit::Failed(format!("cannot launch: {what}: {e}"))
        };
        if task.record.workdir.is_none() {
            make_work_dir(&from_dir.join(WORK), task.run_as.as_ref())
                .map_err(|e| failed("cannot create the work directory", e))?;
        }
        let staged = from_dir.join(&run_name);
        std::fs::create_dir(&staged).map_err(|e| failed("cannot create the run directory", e))?;
        let json = serde_json::to_vec_pretty(&launch).map_err(std::io::Error::other);
        json.and_then(|j| write_replace(&staged.join(supervisor::LAUNCH), &j))
            .map_err(|e| failed("cannot write launch.json", e))?;
        // A claimed task's first record; synced with the launch below.
        let json = serde_json::to_vec_pretty(&task.record).map_err(std::io::Error::other);
        json.and_then(|j| write_replace(&from_dir.join("task.json"), &j))
            .map_err(|e| failed("cannot write task.json", e))?;
        match self.spool.move_task_unsynced(&name, from, State::Running) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                log::warn!("{name}: vanished from {from}/ as it was launched");
                return Err(Exit::Cancelled);
            }
            Err(e) => return Err(failed("cannot move to running/", e)),
        }
        task.state = State::Running;
        task.run = run;
        task.gpus = gpus.to_vec();
        task.since = launch.launched_at;
        task.peak_mib = 0;
        task.adopted = false;
        let run_dir = running_dir.join(&run_name);
        let child = supervisor::start(&self.exe, &run_dir)
            .map_err(|e| failed("cannot start the supervisor", e))?;
        task.supervisor = ProcessId::of(child.id());
        log::info!(
            "{name}: run {run} on GPU {} as {}: {why}",
            indices.join(","),
            task.user
        );
        let tx = self.tx.clone();
        let seq = id.0;
        let reaper = std::thread::Builder::new()
            .name(format!("reap-{seq}"))
            .spawn(move || {
                let mut child = child;
                let _ = child.wait();
                let _ = tx.send(super::Msg::Reaped(seq, run));
            });
        if let Err(e) = reaper {
            // The run is polled like an adopted one instead.
            log::warn!("{name}: no reaper thread ({e}); polling its run");
            task.adopted = true;
        }
        let synced = File::open(run_dir.join(supervisor::LAUNCH))
            .and_then(|f| f.sync_all())
            .and_then(|()| File::open(running_dir.join("task.json"))?.sync_all())
            .and_then(|()| sync_dir(&self.spool.dir(State::Running)))
            .and_then(|()| sync_dir(&self.spool.dir(from)));
        if let Err(e) = synced {
            log::warn!("{name}: cannot sync the launch to disk: {e}");
        }
        Ok(())
    }

    /// One of our supervisors exited.
    pub(super) fn on_reaped(&mut self, seq: u64, run: u32) {
        let current = self
            .tasks
            .get(&seq)
            .is_some_and(|t| t.state == State::Running && t.run == run);
        if current {
            self.collect(seq);
        }
    }

    /// Runs started by an earlier daemon: looked at once a second.
    pub(super) fn poll_adopted(&mut self) {
        if self.polled.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.polled = Instant::now();
        let due: Vec<u64> = self
            .tasks
            .values()
            .filter(|t| t.state == State::Running && t.adopted)
            .filter(|t| {
                let run_dir = self.run_dir(t);
                run_dir.join(supervisor::EXIT).exists() || !supervisor::is_running(&run_dir)
            })
            .map(|t| t.name.seq())
            .collect();
        for seq in due {
            self.collect(seq);
        }
    }

    fn run_dir(&self, task: &super::Task) -> PathBuf {
        self.spool
            .task_dir(State::Running, &task.name)
            .join(format!("run-{}", task.run))
    }

    /// Reads how the current run of task `seq` ended and tells the core.
    pub(super) fn collect(&mut self, seq: u64) {
        let Some(task) = self.tasks.get(&seq) else {
            return;
        };
        let run_dir = self.run_dir(task);
        let name = task.name.clone();
        let exit = match read_json::<RunExit>(&run_dir.join(supervisor::EXIT)) {
            Ok(exit) => self.classify(&name.to_string(), &exit, &run_dir),
            Err(_) if supervisor::is_running(&run_dir) => return,
            Err(_) => Exit::Failed(
                "its supervisor died without recording how the job ended \
                 (a reboot or a SIGKILL); submit it again to re-run it"
                    .into(),
            ),
        };
        if let Some(task) = self.tasks.get_mut(&seq) {
            task.adopted = false;
            task.supervisor = None;
        }
        self.events.push(Event::Exited {
            task: TaskId(seq),
            exit,
        });
    }

    /// Success, OOM (by the signatures in stderr), cancellation, or
    /// another failure.
    fn classify(&self, name: &str, exit: &RunExit, run_dir: &std::path::Path) -> Exit {
        if exit.succeeded() {
            return Exit::Success;
        }
        if exit.cancelled {
            return Exit::Cancelled;
        }
        if exit.error.is_none() {
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
        Exit::Failed(exit.describe())
    }

    /// Moves a task to `done/` or `failed/` with its outcome recorded.
    pub(super) fn finish(&mut self, id: TaskId, to: State, reason: Option<String>) {
        let Some(mut task) = self.tasks.remove(&id.0) else {
            return;
        };
        let name = task.name.clone();
        let dir = self.spool.task_dir(task.state, &name);
        task.record.outcome = Some(Outcome {
            state: to.to_string(),
            reason: reason.clone(),
            at: unix_now(),
        });
        let mut written = write_json(&dir.join("task.json"), &task.record);
        if let Some(reason) = &reason {
            written = written.and_then(|()| {
                write_durable(&dir.join("reason"), format!("{reason}\n").as_bytes())
            });
        }
        let moved = written.and_then(|()| self.spool.move_task(&name, task.state, to));
        let peak = read_json::<RunExit>(
            &self
                .spool
                .task_dir(to, &name)
                .join(format!("run-{}", task.run))
                .join(supervisor::EXIT),
        )
        .ok()
        .and_then(|e| e.peak_mib)
        .unwrap_or(0)
        .max(task.peak_mib);
        if to == State::Done && peak > 0 {
            match self.chain.history().record(&task.fingerprint, peak) {
                Ok(r) => log::info!(
                    "{name}: history: peak {peak} MiB (largest of {} runs: {} MiB)",
                    r.runs,
                    r.max_peak_mib
                ),
                Err(e) => log::warn!("{name}: cannot record its peak in the history: {e}"),
            }
        }
        match (&moved, &reason) {
            (Err(e), _) => log::error!("{name}: cannot move to {to}/: {e}"),
            (Ok(()), None) => log::info!("{name}: done after {} run(s); peak {peak} MiB", task.run),
            (Ok(()), Some(reason)) => log::error!("{name}: failed: {reason}"),
        }
    }

    /// An OOM crash: the task waits in `recovery/` to run again.
    pub(super) fn recover(&mut self, id: TaskId, crashes: u32, why: &str) {
        let Some(task) = self.tasks.get_mut(&id.0) else {
            return;
        };
        task.record.crashes = crashes;
        let name = task.name.clone();
        // Moved first, counted second: a crash in between leaves the task in
        // recovery/ with one crash too few (one more re-run allowed), never
        // one crash counted twice.
        let dir = self.spool.task_dir(State::Recovery, &name);
        let moved = self
            .spool
            .move_task(&name, State::Running, State::Recovery)
            .and_then(|()| write_json(&dir.join("task.json"), &task.record));
        match moved {
            Ok(()) => {
                task.state = State::Recovery;
                log::warn!("{name}: to recovery/ after OOM crash {crashes}; {why}");
            }
            Err(e) => log::error!("{name}: cannot move to recovery/: {e}"),
        }
    }
}
