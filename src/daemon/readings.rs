//! GPU readings as the daemon uses them: samples for the scheduling core,
//! each task's peak memory, the GPU log's rows, and the state SIGUSR1
//! writes to the journal.

use std::collections::{BTreeMap, HashMap};

use super::Daemon;
use crate::gpu::GpuReading;
use crate::sched::{Event, GpuSample, TaskId};
use crate::spool::record::unix_now;
use crate::spool::{PRIVATE, State, write_replace};

impl Daemon {
    /// Turns GPU readings into a core sample, attributing per-process
    /// memory to tasks through the process's session (each supervisor
    /// leads a session that its job's processes belong to).
    pub(super) fn on_readings(&mut self, readings: Vec<GpuReading>) {
        let sessions: HashMap<u32, u64> = self
            .life
            .tasks
            .values()
            .filter_map(|t| Some((t.supervisor?.pid, t.name.seq())))
            .collect();
        let mut samples = Vec::with_capacity(readings.len());
        self.process_tasks.clear();
        for reading in &readings {
            match (&reading.error, self.gpu_errors.get(&reading.index)) {
                (Some(e), last) if last != Some(e) => {
                    log::warn!("GPU {}: {e}; skipped until it reads again", reading.index);
                    self.gpu_errors.insert(reading.index, e.clone());
                }
                (None, Some(_)) => {
                    log::info!("GPU {}: reads again", reading.index);
                    self.gpu_errors.remove(&reading.index);
                }
                _ => {}
            }
            let mut per_task: BTreeMap<u64, u64> = BTreeMap::new();
            for p in &reading.processes {
                let owner = crate::procfs::session_id(p.pid).and_then(|sid| sessions.get(&sid));
                if let Some(&seq) = owner {
                    *per_task.entry(seq).or_default() += p.used_mib;
                    if let Some(task) = self.life.tasks.get(&seq) {
                        self.process_tasks.insert(p.pid, task.name.to_string());
                    }
                }
            }
            for (&seq, &mib) in &per_task {
                self.note_peak(seq, mib);
            }
            samples.push(GpuSample {
                gpu: reading.index,
                used_mib: reading.used_mib,
                smact: reading.smact,
                occupancy: reading.occupancy,
                dram: reading.dram,
                healthy: reading.error.is_none(),
                tasks: per_task
                    .into_iter()
                    .map(|(seq, mib)| (TaskId(seq), mib))
                    .collect(),
            });
        }
        self.readings = readings;
        self.readings_at = unix_now();
        self.life.push(Event::Sample(samples));
    }

    /// Records a task's peak memory in its run directory when it grows,
    /// where the supervisor picks it up for `exit.json`.
    pub(super) fn note_peak(&mut self, seq: u64, mib: u64) {
        let Some(task) = self.life.tasks.get_mut(&seq) else {
            return;
        };
        if mib <= task.peak_mib {
            return;
        }
        task.peak_mib = mib;
        let path = self
            .spool
            .task_dir(State::Running, &task.name)
            .join(format!("run-{}", task.run))
            .join(crate::supervisor::PEAK);
        if let Err(e) = write_replace(&path, format!("{mib}\n").as_bytes(), PRIVATE) {
            log::warn!("{}: cannot record peak memory: {e}", task.name);
        }
    }

    /// SIGUSR1: the queue and GPUs, in the log.
    pub(super) fn log_state(&self) {
        let status = self.status();
        log::info!(
            "state: {} running, {} in recovery, {} pending",
            status.running.len(),
            status.recovery.len(),
            status.pending.len()
        );
        for t in &status.running {
            log::info!(
                "{}: running run {} on GPU {:?} as {}, peak {} MiB",
                t.name,
                t.run,
                t.gpus,
                t.user,
                t.peak_mib
            );
        }
        if let Some(why) = &status.head_waits_for {
            log::info!("waiting: {why}");
        }
        for g in &status.gpus {
            log::info!(
                "GPU {}: {} of {} MiB used, SMACT {:.2}, tasks [{}]{}",
                g.index,
                g.used_mib,
                g.total_mib,
                g.smact,
                g.tasks.join(", "),
                g.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(", error: {e}"))
            );
        }
    }

    /// Appends the latest readings to the GPU log; a failure is logged
    /// once per run of failures (a full disk would repeat it every second).
    pub(super) fn log_gpus(&mut self) {
        let rows = crate::gpu::log::rows(self.readings_at, &self.readings, &self.process_tasks);
        match self.gpu_log.append(&rows) {
            Err(e) if !self.gpu_log_failing => {
                log::warn!("cannot write the GPU log: {e}; retried every interval, said once");
                self.gpu_log_failing = true;
            }
            Err(_) => {}
            Ok(()) => {
                if std::mem::take(&mut self.gpu_log_failing) {
                    log::info!("the GPU log is written again");
                }
            }
        }
    }
}
