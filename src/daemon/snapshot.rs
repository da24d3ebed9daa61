//! What the daemon publishes in `status.json` ([`crate::spool::status`]):
//! GPUs, running tasks, the queue in dispatch order with why each task
//! waits, receipts and verdicts. Written every second, and at once when a
//! submitter or a requester waits for it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};

use super::{Daemon, Task};
use crate::http::Published;
use crate::sched::{DependencyKind, Place, Precedence, TaskId};
use crate::spool::record::unix_now;
use crate::spool::status::{GpuStatus, RunningTask, Status, WaitingTask};
use crate::spool::{PUBLIC, State, write_replace_with};

/// Every waiting task's place in the queue, in dispatch order.
type Places = [(TaskId, Place)];

/// The waiting tasks of a status file, each made as it is written: with
/// thousands waiting, the whole list beside the file being written was
/// the daemon's largest allocation.
struct Waiting<'a> {
    daemon: &'a Daemon,
    places: &'a Places,
}

impl Serialize for Waiting<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.places
                .iter()
                .filter_map(|(id, place)| self.daemon.waiting_task(*id, place)),
        )
    }
}

/// The least time between two writes of the status file asked for by
/// what someone waits for.
const STATUS_SPACING: Duration = Duration::from_millis(50);

impl Daemon {
    /// The status, every waiting task in it.
    pub(super) fn status(&self) -> Status {
        let places = self.life.core.places();
        let waiting = places
            .iter()
            .filter_map(|(id, place)| self.waiting_task(*id, place))
            .collect();
        self.status_with(&places, waiting, self.adopted.entries())
    }

    /// The status with the waiting tasks at `places` as `waiting` holds
    /// them, and the adopted submissions as `adopted` does.
    fn status_with<W, A>(&self, places: &Places, waiting: W, adopted: A) -> Status<W, A> {
        let mut by_state: BTreeMap<(State, u64), &Task> = BTreeMap::new();
        for t in self.life.tasks.values() {
            by_state.insert((t.state, t.name.seq()), t);
        }
        let names = |state: State| -> Vec<String> {
            places
                .iter()
                .filter_map(|(id, _)| self.life.tasks.get(&id.0))
                .filter(|t| waits_in(t) == state)
                .map(|t| t.name.to_string())
                .collect()
        };
        let running: Vec<&Task> = by_state
            .range((State::Running, 0)..=(State::Running, u64::MAX))
            .map(|(_, t)| *t)
            .collect();
        Status {
            updated_at: unix_now(),
            daemon_pid: std::process::id(),
            lock: self.lock_id,
            backend: self.backend_name.clone(),
            gpus: self
                .gpus
                .iter()
                .map(|g| {
                    let reading = self.readings.iter().find(|r| r.index == g.index);
                    GpuStatus {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        name: g.name.clone(),
                        total_mib: g.total_mib,
                        mig: g.mig.is_some(),
                        used_mib: reading.map_or(0, |r| r.used_mib),
                        reserved_mib: self.life.core.reserved_mib(g.index),
                        smact: reading.map_or(0.0, |r| r.smact),
                        occupancy: reading.and_then(|r| r.occupancy),
                        dram: reading.and_then(|r| r.dram),
                        source: reading.and_then(|r| r.source),
                        power_w: reading.and_then(|r| r.power_w),
                        error: reading.and_then(|r| r.error.clone()),
                        tasks: running
                            .iter()
                            .filter(|t| t.gpus.contains(&g.index))
                            .map(|t| t.name.to_string())
                            .collect(),
                    }
                })
                .collect(),
            running: running
                .iter()
                .map(|t| RunningTask {
                    name: t.name.to_string(),
                    run: t.run,
                    gpus: t.gpus.clone(),
                    since: t.since,
                    time_limit_s: t.time_limit_s,
                    array: t.array_label(),
                    peak_mib: t.peak_mib,
                    user: t.user.to_string(),
                })
                .collect(),
            recovery: names(State::Recovery),
            pending: names(State::Pending),
            waiting,
            head_waits_for: self.life.core.head_waits_for().map(|w| {
                let name = self
                    .life
                    .tasks
                    .get(&w.task.0)
                    .map_or_else(|| format!("task {}", w.task.0), |t| t.name.to_string());
                format!("{name} {}", w.why)
            }),
            adopted,
            ending: self
                .life
                .closing
                .values()
                .map(|c| c.name.to_string())
                .collect(),
            verdicts: self.life.verdicts.recent(),
        }
    }

    /// The waiting task `id` at `place`, with why it waits.
    fn waiting_task(&self, id: TaskId, place: &Place) -> Option<WaitingTask> {
        let name = |id: TaskId| {
            self.life
                .tasks
                .get(&id.0)
                .map_or_else(|| format!("task {}", id.0), |t| t.name.to_string())
        };
        let t = self.life.tasks.get(&id.0)?;
        let why = match place {
            Place::Held => format!("held (carma release {} lets it run)", t.name),
            Place::Waiting(d) => {
                let until = match d.kind {
                    DependencyKind::After => "start",
                    DependencyKind::AfterOk => "succeed",
                    DependencyKind::AfterAny => "end",
                    DependencyKind::AfterNotOk => "fail",
                };
                format!("waits for {} to {until} ({})", name(d.task), d.kind.key())
            }
            Place::Head => self
                .life
                .core
                .head_waits_for()
                .map(|w| w.why)
                .unwrap_or_default(),
            Place::OverLimit(why) => format!("waits: {why}"),
            Place::Behind { head, by } => {
                let ahead = self.life.tasks.get(&head.0);
                let why = match by {
                    Precedence::Recovery => "recovering from an OOM crash".to_string(),
                    Precedence::Priority => format!(
                        "priority {} > {}",
                        ahead.map_or(0, |h| h.priority),
                        t.priority
                    ),
                    Precedence::FairShare => format!(
                        "fair share: {} used the GPUs less lately than {}",
                        ahead.map_or("its user", |h| &*h.user),
                        t.user
                    ),
                    Precedence::Arrival => "submitted earlier".to_string(),
                };
                format!("behind {} ({why})", name(*head))
            }
        };
        Some(WaitingTask {
            name: t.name.to_string(),
            user: t.user.to_string(),
            priority: t.priority,
            held: t.record.held,
            array: t.array_label(),
            why,
            estimate: t.record.estimate.clone(),
        })
    }

    /// Has the status file written at the next turn of the loop, not up
    /// to a second later: someone waits for what it will say (a receipt,
    /// a verdict). Not sooner than [`STATUS_SPACING`] after the last
    /// write, though, nor than four times as long as it took (as for a
    /// receipt): each write lists every waiting task, and a user can ask
    /// for a verdict at every turn (a write of 100 ms, with 50,000
    /// waiting, every 150 ms).
    pub(super) fn status_due(&mut self) {
        let spacing = STATUS_SPACING.max(self.receipt_spacing());
        self.status_due_at(Instant::now().max(self.status_wrote + spacing));
    }

    /// How long after a status write the next one a receipt asks for may
    /// come: four times as long as the write took, so that writes take at
    /// most a fifth of the loop's time however many tasks wait (a
    /// millisecond for a queue of a few hundred).
    pub(super) fn receipt_spacing(&self) -> Duration {
        self.status_took.saturating_mul(4)
    }

    /// Has the status file written at the first turn of the loop at or
    /// after `at`.
    pub(super) fn status_due_at(&mut self, at: Instant) {
        if let Some(due) = at.checked_sub(Duration::from_secs(1)) {
            self.status_written = self.status_written.min(due);
        }
    }

    /// Writes the status file, then sends the answers that waited for it
    /// to name their tasks.
    pub(super) fn write_status(&mut self) {
        self.status_written = Instant::now();
        self.status_wrote = self.status_written;
        self.receipt_due = false;
        // The status page keeps a whole status; without one, the waiting
        // tasks are made as the file is written.
        let (written, status) = match self.feed.is_some() {
            true => {
                let status = self.status();
                (self.write_status_file(&status), Some(status))
            }
            false => {
                let places = self.life.core.places();
                let waiting = Waiting {
                    daemon: self,
                    places: &places,
                };
                (
                    self.write_status_file(&self.status_with(&places, waiting, &self.adopted)),
                    None,
                )
            }
        };
        match written {
            // Once per run of failures: a full disk would repeat it every
            // second.
            Err(e) if !self.status_failing => {
                log::warn!("cannot write {}: {e}", self.spool.status_file().display());
                self.status_failing = true;
            }
            Err(_) => {}
            Ok(()) => self.status_failing = false,
        }
        self.status_took = self.status_wrote.elapsed();
        if let Some(status) = status {
            self.publish(status);
        }
        self.send_answers();
    }

    /// Sends the socket's answers held for the status file.
    pub(super) fn send_answers(&mut self) {
        for (answer, reply) in self.answers.drain(..) {
            answer.send(&reply);
        }
    }

    fn write_status_file<W: Serialize, A: Serialize>(
        &self,
        status: &Status<W, A>,
    ) -> std::io::Result<()> {
        // Compact, as `carma status --json` prints it: the status is
        // written twice per submission, and indenting made a third of its
        // bytes.
        write_replace_with(&self.spool.status_file(), PUBLIC, |out| {
            serde_json::to_writer(out, status).map_err(std::io::Error::other)
        })
    }

    /// Hands `status` to the status page, when it is served, with what
    /// only the daemon knows: tasks that ended, the intake's backlog.
    fn publish(&mut self, status: Status) {
        let Some(feed) = &mut self.feed else {
            return;
        };
        let (done, failed) = self.life.ended.counts();
        let latest_failed = self
            .life
            .ended
            .iter()
            .rev()
            .filter(|(state, _)| *state == State::Failed)
            .take(crate::http::RECENT_FAILURES)
            .map(|(_, name)| name.clone())
            .collect();
        feed.publish(Published {
            status,
            endings: self.life.endings.shared(),
            done,
            failed,
            latest_failed,
            backlog: self.unfinished.len() + self.loose.waiting() + self.entry_retry.len(),
            ..Published::default()
        });
    }
}

/// The queue a waiting task is listed in: a recovering task whose move
/// failed waits in `running/`.
fn waits_in(t: &Task) -> State {
    match t.state {
        State::Running => State::Recovery,
        state => state,
    }
}
