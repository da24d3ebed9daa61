//! Runs: launching a task under a supervisor, learning how it ended, and
//! moving the task to where the core says it belongs.
//!
//! Every record is written durably (temp file, fsync, rename, directory
//! fsync) before the rename that makes it count, so a crash never leaves a
//! torn record behind a step that was taken. What fails for a reason that
//! may pass (a full disk, too many open files) is retried with backoff and
//! never costs a task: a launch that could not start puts the task back at
//! the head of its queue; an ended task whose move failed stays in the
//! daemon's hands ([`super::Closing`]) until the move succeeds.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::intake::last_run;
use super::{Closing, Daemon};
use crate::procfs::ProcessId;
use crate::sched::{Event, Exit, TaskId};
use crate::spool::record::{
    Launch, Outcome, RunAs, RunExit, WORK, give_dir_to_owner, read_state, unix_now, write_json,
    write_owner_copy, write_reason,
};
use crate::spool::{State, TASK_DIR_MODE, make_dir, sync_dir};
use crate::supervisor;

/// What a placement grants a run besides its GPUs (see
/// [`crate::sched::Action::Launch`]).
pub(super) struct Limits {
    /// Memory per GPU, when the run got a share of its GPUs.
    pub limit_mib: Option<u64>,
    /// Wall time, when the run has a limit.
    pub time_limit: Option<Duration>,
}

/// The work directory of a job dropped as a bare file: its user's, private.
fn make_work_dir(path: &Path, owner: Option<u32>) -> std::io::Result<()> {
    match make_dir(path, 0o700) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    give_dir_to_owner(path, owner)
}

/// The user this process runs as, for jobs of a daemon that is not root.
pub(super) fn current_user() -> RunAs {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid).ok().flatten();
    RunAs {
        uid: uid.as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        name: user
            .as_ref()
            .map_or_else(|| uid.to_string(), |u| u.name.clone()),
        home: user
            .as_ref()
            .map_or_else(|| PathBuf::from("/"), |u| u.dir.clone()),
        shell: user.map(|u| u.shell),
    }
}

impl Daemon {
    /// Carries out a launch: the run directory and its `launch.json` are
    /// written, the task directory is renamed into `running/` (the commit
    /// point), and the supervisor is started. A launch that fails here
    /// never started the job, so the task waits and is launched again.
    pub(super) fn launch(&mut self, id: TaskId, gpus: Vec<usize>, limits: Limits, why: String) {
        match self.start_run(id, &gpus, limits, &why) {
            Ok(()) => {
                if self.launch_retry.succeeded() {
                    log::info!("launches work again");
                }
            }
            Err(reason) => self.unlaunch(id.0, &reason),
        }
    }

    /// A launched task whose job did not start, for a reason that may
    /// pass: back to the head of its queue (its directory back where it
    /// waited), and launches pause for a backoff.
    pub(super) fn unlaunch(&mut self, seq: u64, reason: &str) {
        let (delay, first) = self.launch_retry.failed();
        let Some(task) = self.tasks.get_mut(&seq) else {
            return;
        };
        let name = task.name.clone();
        if first {
            log::warn!(
                "{name}: could not start: {reason}; it waits, launches retried in {delay:.1?}"
            );
        } else {
            log::info!("{name}: could not start: {reason}; retried in {delay:.1?}");
        }
        task.supervisor = None;
        task.adopted = false;
        if task.state == State::Running {
            let back = match task.record.crashes {
                0 => State::Pending,
                _ => State::Recovery,
            };
            // Best effort: a launch works from any directory of the task.
            match self.spool.move_task(&name, State::Running, back) {
                Ok(()) => task.state = back,
                Err(e) => log::debug!("{name}: stays in running/ until relaunched: {e}"),
            }
        }
        let retry_at = self.now() + delay;
        self.events.push(Event::NotStarted {
            task: TaskId(seq),
            retry_at,
        });
    }

    fn start_run(
        &mut self,
        id: TaskId,
        gpus: &[usize],
        limits: Limits,
        why: &str,
    ) -> Result<(), String> {
        let Limits {
            limit_mib,
            time_limit,
        } = limits;
        let grace_s = self.config.daemon.cancel_grace_s.get();
        let time_limit_grace_s = self.config.daemon.time_limit_grace_s.get();
        let job_path = self.config.daemon.job_path.clone();
        let mut carma_env = self.backend_env.clone();
        // carma's one MPS control daemon serves whole GPUs; MPS on a MIG
        // instance needs a control daemon of its own (NVIDIA's MIG guide),
        // which carma does not run: a job on an instance runs without MPS.
        let on_instance = gpus
            .iter()
            .any(|&g| self.gpus.get(g).is_some_and(|info| info.mig.is_some()));
        if self.mps.is_some() && !on_instance {
            carma_env.extend(self.config.mps.job_env(gpus.len(), limit_mib));
        }
        // Whole GPUs by NVML index, MIG instances by UUID (GpuInfo::device).
        let devices: Vec<String> = gpus
            .iter()
            .map(|&g| {
                self.gpus
                    .get(g)
                    .map_or_else(|| g.to_string(), |info| info.device.clone())
            })
            .collect();
        let Some(task) = self.tasks.get_mut(&id.0) else {
            return Err("the daemon lost track of this task".into());
        };
        let name = task.name.clone();
        let from = task.state;
        let from_dir = self.spool.task_dir(from, &name);
        // A run directory left by a launch that failed keeps its number.
        let run = task.run.max(last_run(&from_dir)) + 1;
        let run_name = format!("run-{run}");
        let running_dir = self.spool.task_dir(State::Running, &name);
        let indices: Vec<String> = gpus.iter().map(ToString::to_string).collect();
        let user = task.run_as.clone().unwrap_or_else(current_user);
        let mut env = super::environment::login_env(&user, &job_path);
        env.extend(carma_env);
        env.extend([
            ("CUDA_VISIBLE_DEVICES".to_string(), devices.join(",")),
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
            ("CARMA_TASK_ID".to_string(), name.to_string()),
            ("CARMA_RUN".to_string(), run.to_string()),
            ("CARMA_GPUS".to_string(), indices.join(",")),
        ]);
        if let Some(a) = task.record.array {
            env.extend([
                ("CARMA_ARRAY_JOB_ID".to_string(), a.job.to_string()),
                ("CARMA_ARRAY_INDEX".to_string(), a.index.to_string()),
            ]);
        }
        // Refused at intake when over the maximum; a maximum lowered since
        // does not stop a job that was accepted.
        let host = self
            .config
            .queue
            .host_limits(task.spec.host)
            .unwrap_or(task.spec.host);
        let launch = Launch {
            task: name.to_string(),
            run,
            gpus: gpus.to_vec(),
            limit_mib,
            why: why.to_string(),
            launched_at: unix_now(),
            script: crate::job_script::build(
                &task.spec.script,
                &crate::job_script::conda::Search::new(&self.config.daemon.conda, &user.home),
            ),
            workdir: task
                .record
                .workdir
                .clone()
                .unwrap_or_else(|| running_dir.join(WORK)),
            run_as: task.run_as.clone(),
            env,
            grace_s,
            time_limit_s: time_limit.map(|t| t.as_secs_f64()),
            time_limit_grace_s,
            cgroup: self.job_cgroup.clone(),
            cpus: host.cpus,
            host_memory_mib: host.memory_mib,
        };
        let failed = |what: &str, e: std::io::Error| format!("{what}: {e}");
        if task.record.workdir.is_none() {
            make_work_dir(&from_dir.join(WORK), task.record.owner)
                .map_err(|e| failed("cannot create the work directory", e))?;
        }
        let staged = from_dir.join(&run_name);
        make_dir(&staged, TASK_DIR_MODE)
            .map_err(|e| failed("cannot create the run directory", e))?;
        write_json(&staged.join(supervisor::LAUNCH), &launch)
            .map_err(|e| failed("cannot write launch.json", e))?;
        task.record.gpus = gpus.to_vec();
        write_json(&from_dir.join(crate::spool::record::RECORD), &task.record)
            .map_err(|e| failed("cannot write task.json", e))?;
        if from != State::Running {
            match self.spool.move_task_unsynced(&name, from, State::Running) {
                Ok(()) => {}
                Err(e) => return Err(failed("cannot move to running/", e)),
            }
        }
        task.state = State::Running;
        task.run = run;
        task.gpus = gpus.to_vec();
        task.since = launch.launched_at;
        task.time_limit_s = launch.time_limit_s;
        task.peak_mib = 0;
        task.adopted = false;
        let run_dir = running_dir.join(&run_name);
        let child = supervisor::start(&self.exe, &run_dir)
            .map_err(|e| failed("cannot start the supervisor", e))?;
        task.supervisor = ProcessId::of(child.id());
        let estimate = task.record.estimate.as_ref().map_or_else(
            || "none".to_string(),
            |e| format!("{} from {}", e.need, e.source),
        );
        let time = time_limit.map_or_else(String::new, |t| {
            format!("; time limit {}", crate::wall_time::format(t))
        });
        log::info!(
            "{name}: run {run} on GPU {} as {}: {why}; estimate {estimate}{time}",
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
        let synced = sync_dir(&self.spool.dir(State::Running))
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
        let run = task.run;
        let user = task
            .run_as
            .as_ref()
            .map_or_else(|| nix::unistd::geteuid().as_raw(), |u| u.uid);
        let exit = match read_state::<RunExit>(&run_dir.join(supervisor::EXIT)) {
            Ok(exit) if exit.transient => {
                let reason = exit.error.unwrap_or_default();
                return self.unlaunch(seq, &reason);
            }
            Ok(exit) => self.classify(&name.to_string(), &exit, &run_dir),
            Err(_) if supervisor::is_running(&run_dir) => return,
            // It names itself before it starts the job: without that, the
            // job never ran (it could not write in a full disk, say).
            Err(_) if !run_dir.join(supervisor::IDENTITY).exists() => {
                return self.unlaunch(seq, "its supervisor ended before it started the job");
            }
            Err(_) => {
                // Whatever is left of the job goes with its supervisor.
                let killed = super::restore::kill_leftovers(&name, run, user);
                if killed > 0 {
                    log::warn!("{name}: stopped {killed} processes its dead supervisor left");
                }
                Exit::Failed(
                    "its supervisor died without recording how the job ended \
                     (a reboot or a SIGKILL); submit it again to re-run it"
                        .into(),
                )
            }
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

    /// The core is done with a task: it goes to `done/` or `failed/` with
    /// its outcome, its peak and fingerprint recorded (history is rebuilt
    /// from `done/`, so a crash between the move and the history write
    /// loses nothing).
    pub(super) fn finish(&mut self, id: TaskId, to: State, reason: Option<String>) {
        if self.tasks.get(&id.0).is_some_and(|t| t.record.requeue) {
            return self.requeue_stopped(id.0);
        }
        let Some(task) = self.tasks.remove(&id.0) else {
            return;
        };
        let mut record = task.record;
        let run_dir = self
            .spool
            .task_dir(task.state, &task.name)
            .join(format!("run-{}", task.run));
        let exit = read_state::<RunExit>(&run_dir.join(supervisor::EXIT)).ok();
        let peak = exit
            .as_ref()
            .and_then(|e| e.peak_mib)
            .unwrap_or(0)
            .max(task.peak_mib);
        record.peak_mib = (peak > 0).then_some(peak);
        record.run_s = exit.filter(|_| to == State::Done).and_then(|e| {
            let launch = read_state::<Launch>(&run_dir.join(supervisor::LAUNCH)).ok()?;
            Some(e.ended_at - launch.launched_at).filter(|s| *s >= 0.0)
        });
        record.fingerprint = Some(task.fingerprint);
        record.outcome = Some(match &reason {
            Some(reason) => Outcome::failed(reason),
            None => Outcome {
                state: to.to_string(),
                reason: None,
                at: unix_now(),
            },
        });
        let notify = self.notification(
            task.spec.notify.as_ref(),
            task.run_as.as_ref(),
            record.workdir.as_ref(),
        );
        self.close(Closing {
            name: task.name,
            owner: record.owner,
            record,
            from: task.state,
            to,
            run: task.run,
            retry: super::Backoff::default(),
            notify,
        });
    }

    /// A task whose job `carma requeue` stopped: back to `pending/` and
    /// the queue, as if just submitted. Should the move fail, the task
    /// stays in the daemon's hands in `running/`, from where the next
    /// launch starts it just as well.
    fn requeue_stopped(&mut self, seq: u64) {
        let Some(task) = self.tasks.remove(&seq) else {
            return;
        };
        let name = task.name.clone();
        let mut record = task.record.clone();
        record.requeued();
        let dir = self.spool.task_dir(task.state, &name);
        let moved = write_json(&dir.join(crate::spool::record::RECORD), &record)
            .and_then(|()| self.spool.move_task(&name, task.state, State::Pending));
        let state = match moved {
            Ok(()) => State::Pending,
            Err(e) => {
                log::warn!(
                    "{name}: requeued, but stays in {}/ for now: {e}",
                    task.state
                );
                task.state
            }
        };
        log::info!("{name}: requeued after run {}", task.run);
        self.take(name, state);
    }

    /// Takes an ended task to its final directory now, or keeps it for a
    /// retry if the disk refuses.
    pub(super) fn close(&mut self, closing: Closing) {
        let seq = closing.name.seq();
        self.closing.insert(seq, closing);
        self.try_close(seq);
    }

    /// Ended tasks and intake whose retry is due.
    pub(super) fn retry_due(&mut self) {
        let due: Vec<u64> = self
            .closing
            .iter()
            .filter(|(_, c)| c.retry.due())
            .map(|(&seq, _)| seq)
            .collect();
        for seq in due {
            self.try_close(seq);
        }
        if self.entry_retry.due() && !self.intake_retry.due() {
            self.rescan();
        }
        if self.intake_retry.due() {
            self.rescan();
            // A failure during the rescan has set a new, later retry; a
            // retry still due means nothing failed this time.
            if self.intake_retry.due() && self.intake_retry.succeeded() {
                log::info!("pending/ is taken in again");
            }
        }
    }

    fn try_close(&mut self, seq: u64) {
        let Some(c) = self.closing.get(&seq) else {
            return;
        };
        let (name, from, to) = (c.name.clone(), c.from, c.to);
        // A move that renamed but failed after (a directory sync) left the
        // task in `to`: carma's own directory there, not a user's entry.
        let at = match self.spool.is_task_dir(from, &name) {
            true => from,
            false if self.spool.is_task_dir(to, &name) => to,
            false => {
                log::error!("{name}: its directory left {from}/; it cannot be moved to {to}/");
                self.closing.remove(&seq);
                return;
            }
        };
        let dir = self.spool.task_dir(at, &name);
        let reason = c.record.outcome.as_ref().and_then(|o| o.reason.clone());
        let written = write_json(&dir.join(crate::spool::record::RECORD), &c.record)
            .and_then(|()| match &reason {
                Some(reason) => write_reason(&dir, c.owner, reason),
                None => Ok(()),
            })
            .and_then(|()| write_owner_copy(&dir, c.owner, &c.record))
            .and_then(|()| match at {
                at if at == to => Ok(()),
                at => self.spool.move_task(&name, at, to),
            });
        let Some(c) = self.closing.get_mut(&seq) else {
            return;
        };
        if let Err(e) = written {
            let (delay, first) = c.retry.failed();
            if first {
                log::warn!(
                    "{name}: cannot move to {to}/: {e}; kept, and tried again in {delay:.1?} and later"
                );
            }
            return;
        }
        let Some(c) = self.closing.remove(&seq) else {
            return;
        };
        self.ended.insert(to, name.clone());
        if c.retry.next().is_some() {
            log::info!("{name}: moved to {to}/ at last");
        }
        let peak = c.record.peak_mib.unwrap_or(0);
        if to == State::Done && peak > 0 {
            if let Some(fingerprint) = &c.record.fingerprint {
                match self
                    .chain
                    .history()
                    .record(fingerprint, peak, c.record.run_s)
                {
                    Ok(r) => log::info!(
                        "{name}: history: peak {peak} MiB (largest of {} runs: {} MiB)",
                        r.runs,
                        r.max_peak_mib
                    ),
                    Err(e) => log::warn!("{name}: cannot record its peak in the history: {e}"),
                }
            }
        }
        match &reason {
            None => log::info!("{name}: done after {} run(s); peak {peak} MiB", c.run),
            Some(reason) => log::error!("{name}: failed: {reason}"),
        }
        if let Some(notify) = &c.notify {
            self.notify(&name, to, reason.as_deref(), notify);
        }
    }

    /// An OOM crash: the task waits in `recovery/` to run again. A move
    /// that fails leaves the directory in `running/`, from where the next
    /// launch starts it just as well.
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
            .and_then(|()| {
                task.state = State::Recovery;
                write_json(&dir.join(crate::spool::record::RECORD), &task.record)
            });
        match moved {
            Ok(()) => log::warn!("{name}: to recovery/ after OOM crash {crashes}; {why}"),
            Err(e) => log::warn!(
                "{name}: OOM crash {crashes}; {why}; its directory stays in {}/ for now: {e}",
                task.state
            ),
        }
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
