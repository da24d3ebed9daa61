//! The lifecycle's [`World`] on the real spool and real processes: each
//! effect the state machine asks for ([`crate::lifecycle`]), carried out.
//!
//! Every record is written durably (temp file, fsync, rename, directory
//! fsync) before the rename that makes it count, so a crash never leaves a
//! torn record behind a step that was taken.
//!
//! A task's move between the state directories is flushed once the step
//! is over, with every other move of the step: a burst moves dozens of
//! tasks into `running/` (and as many into `done/`) in one turn, and each
//! flush of those two directories took a quarter of a millisecond on a
//! disk. A crash before the flush leaves the task where it was, which a
//! restart settles as it settles a crash just before the move.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc::Sender;

use super::Msg;
use super::environment::current_user;
use crate::config::Config;
use crate::estimate::Chain;
use crate::gpu::GpuInfo;
use crate::lifecycle::{Closing, Graces, Limits, NotStarted, Started, Stop, Task, World};
use crate::nursery::{Born, Supervisors};
use crate::procfs::ProcessId;
use crate::spool::record::{
    KEPT_RUNS, Launch, REASON, RECORD, TaskRecord, WORK, drop_launches, give_dir_to_owner,
    kept_runs, to_json, unix_now, write_json, write_owner_copy, write_reason,
};
use crate::spool::{
    PRIVATE, Spool, State, TASK_DIR_MODE, TaskName, make_dir, sync_dir, write_replace, write_whole,
};
use crate::supervisor;
use crate::supervisor::last_run;
use std::cell::OnceCell;

/// What the daemon lends the lifecycle for one step: its spool, its
/// configuration and what starting a job needs.
pub(super) struct Hands<'a> {
    pub spool: &'a Spool,
    pub config: &'a Config,
    pub gpus: &'a [GpuInfo],
    /// Environment every job needs from the GPU backend.
    pub backend_env: &'a [(String, String)],
    /// Jobs run under MPS (where not on a MIG instance).
    pub mps: bool,
    pub job_cgroup: Option<&'a Path>,
    /// Notifications running, for the daemon to reap.
    pub notifications: &'a mut super::notify::Notifications,
    /// How supervisors are started: the carma binary, and its nursery.
    pub supervisors: &'a mut Supervisors,
    pub tx: &'a Sender<Msg>,
    pub chain: &'a Chain,
    /// Tasks to take in again once the step is over, and whether each is
    /// held to the per-user limits (an ended task requeued).
    pub take_in: Vec<(TaskName, State, bool)>,
    /// State directories whose entries the step changed, to flush once it
    /// is over ([`Hands::flush`]), and those whose flush failed before.
    pub unsynced: Vec<PathBuf>,
    /// carma's task directories in `pending/`, listed once for all the
    /// requests of a turn: 256 `cancel --array` requests a turn, each of
    /// another array, listed it 256 times (9 s with 10,000 waiting).
    pub pending: &'a OnceCell<Vec<TaskName>>,
}

impl Hands<'_> {
    /// Has `state`'s directory flushed once the step is over.
    fn sync_later(&mut self, state: State) {
        let dir = self.spool.dir(state);
        if !self.unsynced.contains(&dir) {
            self.unsynced.push(dir);
        }
    }

    /// Flushes the state directories the step's moves changed; returns
    /// those that could not be, with why, to be tried again.
    pub fn flush(&mut self) -> Vec<(PathBuf, io::Error)> {
        self.unsynced
            .drain(..)
            .filter_map(|dir| sync_dir(&dir).err().map(|e| (dir, e)))
            .collect()
    }
}

impl World for Hands<'_> {
    fn answers_for(&self, uid: u32) -> u32 {
        crate::accounts::accountable(uid)
    }

    fn write_record(&mut self, at: State, name: &TaskName, record: &TaskRecord) -> io::Result<()> {
        write_json(&self.spool.task_dir(at, name).join(RECORD), record)
    }

    fn move_task(&mut self, name: &TaskName, from: State, to: State) -> io::Result<()> {
        self.spool.move_task_unsynced(name, from, to)?;
        self.sync_later(to);
        self.sync_later(from);
        Ok(())
    }

    fn holds(&self, state: State, name: &TaskName) -> bool {
        self.spool.is_task_dir(state, name)
    }

    fn write_ending(&mut self, at: State, name: &TaskName, record: &TaskRecord) -> io::Result<()> {
        let dir = self.spool.task_dir(at, name);
        if let Some(reason) = record.outcome.as_ref().and_then(|o| o.reason.as_ref()) {
            write_reason(&dir, record.owner, reason)?;
        }
        write_owner_copy(&dir, record.owner, record)
    }

    fn load_record(&self, state: State, name: &TaskName) -> Result<TaskRecord, String> {
        self.spool
            .load_record(state, name)
            .map_err(|e| e.to_string())
    }

    fn remove_reason(&mut self, state: State, name: &TaskName) -> io::Result<()> {
        match std::fs::remove_file(self.spool.task_dir(state, name).join(REASON)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn pending_from(&self, seq: u64) -> Vec<TaskName> {
        let listed = self.pending.get_or_init(|| {
            self.spool
                .list(State::Pending)
                .map(|listing| listing.tasks)
                .unwrap_or_default()
                .into_iter()
                // Anyone may put a task's name in pending/: only carma's
                // own directories are task directories, whose records may
                // be read.
                .filter(|name| self.spool.is_task_dir(State::Pending, name))
                .collect()
        });
        listed
            .iter()
            .filter(|name| name.seq() >= seq)
            .cloned()
            .collect()
    }

    /// The run directory and its `launch.json` are written, the task
    /// directory is renamed into `running/` (the commit point), and the
    /// supervisor is started; then the task's record is brought up to date.
    fn start(
        &mut self,
        task: &Task,
        gpus: &[usize],
        limits: &Limits,
        why: &str,
    ) -> Result<Started, NotStarted> {
        let from = task.state;
        let moved = std::cell::Cell::new(false);
        let failed = |what: &str, e: io::Error| NotStarted {
            at: if moved.get() { State::Running } else { from },
            reason: format!("{what}: {e}"),
        };
        let name = &task.name;
        let from_dir = self.spool.task_dir(from, name);
        // A run directory left by a launch that failed keeps its number.
        let run = task.run.max(last_run(&from_dir)) + 1;
        let run_name = format!("run-{run}");
        let launch = self.launch(task, run, gpus, limits, why);
        if task.record.workdir.is_none() {
            make_work_dir(&from_dir.join(WORK), task.record.owner)
                .map_err(|e| failed("cannot create the work directory", e))?;
        }
        // The run directory gets its name with its `launch.json` inside, so
        // within a boot a run directory always has one. Only the directory
        // is flushed before the job can start: a run launched in an earlier
        // boot counts as started whatever its files say
        // ([`supervisor::may_have_started`]), so neither `launch.json` nor
        // the supervisor's name needs its own flush on the way to the job.
        // Only the latest runs keep their launch, root's copy of the
        // script: a task requeued again and again would gather them.
        if let Some(old) = run.checked_sub(KEPT_RUNS).filter(|&old| old > 0)
            && let Err(e) = drop_launches(&from_dir, old..=old)
        {
            log::warn!("{name}: cannot remove run-{old}'s launch.json: {e}");
        }
        let staged = from_dir.join(format!(".{run_name}"));
        let named = from_dir.join(&run_name);
        let _ = self.spool.discard(&staged);
        make_dir(&staged, TASK_DIR_MODE)
            .map_err(|e| failed("cannot create the run directory", e))?;
        write_replace(&staged.join(supervisor::LAUNCH), &to_json(&launch), PRIVATE)
            .and_then(|()| std::fs::rename(&staged, &named))
            .map_err(|e| failed("cannot write launch.json", e))?;
        // The run directory and its entry, before the move that makes the
        // launch count.
        sync_dir(&named)
            .and_then(|()| sync_dir(&from_dir))
            .map_err(|e| failed("cannot sync the task's directory", e))?;
        if from != State::Running {
            self.spool
                .move_task_unsynced(name, from, State::Running)
                .map_err(|e| failed("cannot move to running/", e))?;
            moved.set(true);
        }
        let running = self.spool.task_dir(State::Running, name);
        let run_dir = running.join(&run_name);
        let seq = name.seq();
        let born = self
            .supervisors
            .start(&run_dir, seq, run)
            .map_err(|e| failed("cannot start the supervisor", e))?;
        let (supervisor, reported) = match born {
            // The nursery reports its pid and its end.
            Born::Forked => (None, true),
            Born::Started(child) => (ProcessId::of(child.id()), self.reap(name, run, child)),
        };
        // The record (its estimate, this run's GPUs) once the job is on
        // its way, off the path to its first line, and whole but not
        // flushed into its directory: a crash may leave the record of
        // before, and a restart reads the GPUs from launch.json and
        // estimates the task again.
        if let Err(e) = write_whole(&running.join(RECORD), &to_json(&task.record)) {
            log::warn!("{name}: cannot update task.json: {e}");
        }
        self.sync_later(State::Running);
        self.sync_later(from);
        Ok(Started {
            run,
            supervisor,
            launched_at: launch.launched_at,
            graces: Graces {
                cancel_s: launch.grace_s,
                time_limit_s: launch.time_limit_grace_s,
            },
            reported,
        })
    }

    fn stop(&mut self, name: &TaskName, run: u32) -> Stop {
        let run_dir = self
            .spool
            .task_dir(State::Running, name)
            .join(format!("run-{run}"));
        match supervisor::cancel(&run_dir) {
            Ok(true) => {
                // Not flushed: a boot since ends the run anyway.
                if let Err(e) = write_whole(&run_dir.join(supervisor::STOP_ASKED), b"") {
                    log::warn!("{name}: cannot note its cancel in run-{run}: {e}");
                }
                Stop::Asked
            }
            Ok(false) if supervisor::is_running(&run_dir) => Stop::NotYet,
            Ok(false) => Stop::Over,
            Err(e) => Stop::Failed(e.to_string()),
        }
    }

    fn remember_peak(&mut self, name: &TaskName, record: &TaskRecord) {
        let (Some(fingerprint), Some(peak)) = (&record.fingerprint, record.peak_mib) else {
            return;
        };
        match self.chain.history().record(fingerprint, peak, record.run_s) {
            Ok(r) => {
                log::info!(
                    "{name}: history: peak {peak} MiB (largest of {} runs: {} MiB)",
                    r.runs,
                    r.max_peak_mib
                );
                if let Err(e) = self.chain.history().note_absorbed(name.seq()) {
                    log::warn!("{name}: history: cannot note it as taken in: {e}");
                }
            }
            Err(e) => log::warn!("{name}: cannot record its peak in the history: {e}"),
        }
    }

    fn remember_run_time(&mut self, name: &TaskName, record: &TaskRecord) {
        let (Some(fingerprint), Some(run_s)) = (&record.fingerprint, record.run_s) else {
            return;
        };
        if let Err(e) = self.chain.history().record_run_time(fingerprint, run_s) {
            log::warn!("{name}: cannot record its run time in the history: {e}");
        }
    }

    fn notify(&mut self, closing: &Closing) {
        super::notify::send(
            self.spool,
            self.config,
            self.supervisors.program(),
            self.job_cgroup,
            closing,
            self.notifications,
        );
    }

    fn take_in(&mut self, name: &TaskName, state: State) {
        self.take_in.push((name.clone(), state, false));
    }

    fn take_in_requeued(&mut self, name: &TaskName) {
        // Its number stays: the run it had in `done/` must not stand for
        // the next one, whose record a start may have to read back.
        if let Err(e) = self.chain.history().note_unabsorbed(name.seq()) {
            log::warn!("{name}: history: cannot note it as run again: {e}");
        }
        self.take_in.push((name.clone(), State::Pending, true));
    }

    fn drop_copies(&mut self, state: State, name: &TaskName) -> io::Result<()> {
        // The step's moves first: the task whose copies go may have been
        // moved a moment ago, and a crash must not find it back where it
        // was, without them.
        let failed = self.flush();
        if let Some((dir, e)) = failed.first() {
            let why = io::Error::new(e.kind(), format!("cannot flush {}: {e}", dir.display()));
            self.unsynced.extend(failed.into_iter().map(|(dir, _)| dir));
            return Err(why);
        }
        let dir = self.spool.task_dir(state, name);
        drop_launches(&dir, kept_runs(&dir))?;
        let job = dir.join(crate::spool::record::JOB);
        match std::fs::symlink_metadata(&job) {
            Ok(m) if m.is_dir() => self.spool.discard(&job),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Hands<'_> {
    /// Reaps a supervisor started for its run on a thread of its own,
    /// which tells the loop; false when there is no such thread, and the
    /// run is looked at as an adopted one instead.
    fn reap(&self, name: &TaskName, run: u32, mut child: Child) -> bool {
        let tx = self.tx.clone();
        let seq = name.seq();
        let reaper = std::thread::Builder::new()
            .name(format!("reap-{seq}"))
            .spawn(move || {
                let _ = child.wait();
                let _ = tx.send(Msg::Reaped(seq, run));
            });
        if let Err(e) = &reaper {
            log::warn!("{name}: no reaper thread ({e}); polling its run");
        }
        reaper.is_ok()
    }

    /// What the supervisor of run `run` needs: the script as bash runs it,
    /// the login environment of the job's user with carma's variables,
    /// its limits.
    fn launch(&self, task: &Task, run: u32, gpus: &[usize], limits: &Limits, why: &str) -> Launch {
        let daemon = &self.config.daemon;
        let mut carma_env = self.backend_env.to_vec();
        // carma's one MPS control daemon serves whole GPUs; MPS on a MIG
        // instance needs a control daemon of its own (NVIDIA's MIG guide),
        // which carma does not run: a job on an instance runs without MPS.
        let on_instance = gpus
            .iter()
            .any(|&g| self.gpus.get(g).is_some_and(|info| info.mig.is_some()));
        if self.mps && !on_instance {
            carma_env.extend(self.config.mps.job_env(gpus.len(), limits.limit_mib));
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
        let name = &task.name;
        let indices: Vec<String> = gpus.iter().map(ToString::to_string).collect();
        let user = task.run_as.as_deref().cloned().unwrap_or_else(current_user);
        let mut env = super::environment::login_env(&user, &daemon.job_path);
        env.extend(carma_env);
        env.extend([
            ("CUDA_VISIBLE_DEVICES".to_string(), devices.join(",")),
            ("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string()),
            (
                "CARMA_SPOOL".to_string(),
                self.spool.root().display().to_string(),
            ),
            ("CARMA_TASK_ID".to_string(), name.to_string()),
            ("CARMA_JOB_NAME".to_string(), name.stem().to_string()),
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
            .host_limits(task.job.host)
            .unwrap_or(task.job.host);
        let running_dir = self.spool.task_dir(State::Running, name);
        Launch {
            task: name.to_string(),
            umask: task.record.umask,
            run,
            gpus: gpus.to_vec(),
            limit_mib: limits.limit_mib,
            why: why.to_string(),
            launched_at: unix_now(),
            script: crate::job_script::build(
                &task.job.script(),
                &crate::job_script::conda::Search::new(&daemon.conda, &user.home),
            ),
            workdir: task
                .record
                .workdir
                .clone()
                .unwrap_or_else(|| running_dir.join(WORK)),
            run_as: task.run_as.as_deref().cloned(),
            groups: task.run_as.as_deref().and_then(super::environment::groups),
            env,
            grace_s: daemon.cancel_grace_s.get(),
            time_limit_s: limits.time_limit.map(|t| t.as_secs_f64()),
            time_limit_grace_s: daemon.time_limit_grace_s.get(),
            cgroup: self.job_cgroup.map(Path::to_path_buf),
            cpus: host.cpus,
            host_memory_mib: host.memory_mib,
            max_processes: Some(self.config.queue.max_processes).filter(|&n| n > 0),
            crashes: Some(task.record.crashes),
            boot: crate::spool::this_boot(),
        }
    }
}

/// The work directory of a job dropped as a bare file: its user's, private.
fn make_work_dir(path: &Path, owner: Option<u32>) -> io::Result<()> {
    match make_dir(path, 0o700) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    give_dir_to_owner(path, owner)
}
