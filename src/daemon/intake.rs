//! Getting tasks in: files dropped into `pending/`, task directories
//! submitted there, cancellation requests, and rescans.
//!
//! Whatever cannot become a task (a file that does not parse, a symbolic
//! link, a job owned by an unknown user) still becomes a task directory and
//! moves to `failed/` with its reason beside it: bad input is kept, never
//! silently dropped, and the daemon goes on.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::unistd::{Uid, User};

use super::watch::Change;
use super::{Daemon, Task};
use crate::estimate::EstimateInput;
use crate::rad::{self, PolicyHint, TaskSpec};
use crate::sched::{Demand, Event, Need};
use crate::spool::record::{EstimateNote, RunAs, TaskRecord, unix_now, write_json};
use crate::spool::{State, TaskName};

/// How long a file may stay open for writing in `pending/` before the
/// daemon takes it anyway (a writer that crashed never closes it).
const UNFINISHED_GRACE: Duration = Duration::from_secs(5);

impl Daemon {
    pub(super) fn on_change(&mut self, change: Change) {
        match change {
            Change::Created(name) => {
                let path = self.spool.dir(State::Pending).join(&name);
                match fs::symlink_metadata(&path) {
                    // A regular file is complete when its writer closes it.
                    Ok(m) if m.is_file() => {
                        self.unfinished.insert(name, Instant::now());
                    }
                    Ok(_) => self.arrived(name),
                    Err(_) => {}
                }
            }
            Change::Written(name) | Change::MovedIn(name) => {
                self.unfinished.remove(&name);
                self.arrived(name);
            }
            Change::Gone(name) => {
                if let Some(name) = TaskName::parse(&name) {
                    self.vanished(&name);
                }
            }
            Change::CancelRequested => self.cancel_requests(),
            Change::Rescan => self.rescan(),
        }
    }

    /// Something complete appeared in `pending/`: a submitted task
    /// directory or a dropped file. Taken with the others of this turn of
    /// the loop ([`Daemon::take_arrivals`]), so that a burst of files is
    /// claimed in one batch.
    fn arrived(&mut self, entry: String) {
        self.arrivals.push(entry);
    }

    /// Takes everything that arrived during this turn of the loop.
    pub(super) fn take_arrivals(&mut self) {
        let arrivals = std::mem::take(&mut self.arrivals);
        let pending = self.spool.dir(State::Pending);
        let mut drops = Vec::new();
        for entry in arrivals {
            let path = pending.join(&entry);
            match TaskName::parse(&entry) {
                Some(name) if path.is_dir() && !path.is_symlink() => {
                    if !self.tasks.contains_key(&name.seq()) {
                        self.take(name, State::Pending);
                    }
                }
                _ => drops.push(entry),
            }
        }
        drops.sort();
        drops.dedup();
        self.take_drops(drops);
    }

    /// Files written long ago that never reported their close.
    pub(super) fn claim_stale_unfinished(&mut self) {
        let stale: Vec<String> = self
            .unfinished
            .iter()
            .filter(|(_, since)| since.elapsed() >= UNFINISHED_GRACE)
            .map(|(name, _)| name.clone())
            .collect();
        for name in &stale {
            self.unfinished.remove(name);
        }
        if !stale.is_empty() {
            self.take_drops(stale);
        }
    }

    /// Claims dropped entries and takes the resulting tasks. Only `.rad`
    /// files and entries that are not regular files (refused below) are
    /// claimed: other files may be model summaries the `.rad`s point to.
    pub(super) fn take_drops(&mut self, entries: Vec<String>) {
        let pending = self.spool.dir(State::Pending);
        let drops: Vec<String> = entries
            .into_iter()
            .filter(|entry| {
                entry.ends_with(".rad")
                    || fs::symlink_metadata(pending.join(entry)).is_ok_and(|m| !m.is_file())
            })
            .collect();
        let claimed = match self.spool.claim(&drops) {
            Ok(claimed) => claimed,
            Err(e) => {
                log::error!("cannot claim dropped files: {e}");
                return;
            }
        };
        for c in claimed {
            log::info!("{}: claimed pending/{}", c.name, c.file);
            self.take_with(c.name, State::Pending, Some(c.record));
        }
    }

    /// Reads a task directory found in `pending/` or `recovery/` and queues
    /// it; a task that cannot run goes to `failed/` with its reason.
    pub(super) fn take(&mut self, name: TaskName, state: State) {
        self.take_with(name, state, None);
    }

    /// [`Daemon::take`] with the task's record already in hand (a fresh
    /// claim), which spares reading it back.
    fn take_with(&mut self, name: TaskName, state: State, record: Option<TaskRecord>) {
        match self.load(&name, state, record) {
            Ok(task) => {
                let event = match state {
                    State::Recovery => Event::Recovering {
                        task: name.id(),
                        demand: task.demand.clone(),
                        crashes: task.record.crashes.max(1),
                    },
                    _ => Event::Queued {
                        task: name.id(),
                        demand: task.demand.clone(),
                    },
                };
                log::info!(
                    "{name}: queued in {state} ({} GPU(s), {} each)",
                    task.demand.gpus,
                    task.demand.need
                );
                self.tasks.insert(name.seq(), task);
                self.events.push(event);
            }
            Err(reason) => self.reject(&name, state, &reason),
        }
    }

    /// Builds the daemon's view of a task from its directory (and its
    /// record, when the caller has it: a fresh claim, which never ran).
    pub(super) fn load(
        &self,
        name: &TaskName,
        state: State,
        record: Option<TaskRecord>,
    ) -> Result<Task, String> {
        let dir = self.spool.task_dir(state, name);
        let fresh = record.is_some();
        let mut record = match record {
            Some(record) => record,
            None => self
                .spool
                .load_record(state, name)
                .map_err(|e| e.to_string())?,
        };
        let rad_path = dir.join(&record.rad);
        if fresh {
            bring_model(&self.spool.dir(State::Pending), &dir, &rad_path);
        }
        let meta = fs::symlink_metadata(&rad_path)
            .map_err(|e| format!("{}: cannot read: {e}", record.rad))?;
        if meta.file_type().is_symlink() {
            return Err(format!(
                "{}: is a symbolic link; carma runs only regular files",
                record.rad
            ));
        }
        if !meta.is_file() {
            return Err(format!("{}: not a regular file", record.rad));
        }
        let spec = rad::check_file(&rad_path).map_err(|e| relative(&e.to_string(), &dir))?;
        let (run_as, user) = self.run_as(meta.uid())?;
        let input = EstimateInput::from_spec(&spec, &dir).unwrap_or_else(|e| {
            log::warn!(
                "{name}: estimating without the model summary: {}",
                relative(&e, &dir)
            );
            EstimateInput::from_spec(
                &TaskSpec {
                    model: None,
                    ..spec.clone()
                },
                &dir,
            )
            .unwrap_or_default()
        });
        if record.estimate.is_none() {
            let estimate = self.chain.estimate(&input);
            log::info!("{name}: estimate {}", estimate.describe());
            record.estimate = Some(EstimateNote {
                need: estimate.need,
                source: estimate.source.map_or("none", |s| s.name()).to_string(),
            });
        }
        let demand = Demand {
            gpus: spec.gpus,
            need: record.estimate.as_ref().map_or(Need::Unknown, |e| e.need),
            exclusive: spec.policy == Some(PolicyHint::Exclusive),
            user: Some(meta.uid()),
            max_retries: spec.retries,
        };
        Ok(Task {
            name: name.clone(),
            state,
            spec,
            record,
            demand,
            run_as,
            user,
            run: if fresh { 0 } else { last_run(&dir) },
            gpus: Vec::new(),
            supervisor: None,
            adopted: false,
            since: 0.0,
            peak_mib: 0,
            fingerprint: input.fingerprint(),
        })
    }

    /// Who a job owned by `uid` runs as: itself when the daemon is root
    /// (root's own jobs only when allowed), else the daemon's user.
    fn run_as(&self, uid: u32) -> Result<(Option<RunAs>, String), String> {
        let user = User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .ok_or_else(|| format!("its owner (uid {uid}) has no account on this machine"))?;
        if !Uid::effective().is_root() {
            return Ok((None, user.name));
        }
        if uid == 0 && !self.config.daemon.allow_root_jobs {
            return Err(
                "owned by root: carma does not run jobs as root unless daemon.allow_root_jobs is set"
                    .into(),
            );
        }
        let run_as = RunAs {
            uid,
            gid: user.gid.as_raw(),
            name: user.name.clone(),
            home: user.dir,
        };
        Ok((Some(run_as), user.name))
    }

    /// Moves a task that never reached the core to `failed/`.
    pub(super) fn reject(&mut self, name: &TaskName, state: State, reason: &str) {
        log::error!("{name}: refused: {reason}");
        let dir = self.spool.task_dir(state, name);
        let mut record = self
            .spool
            .load_record(state, name)
            .unwrap_or_else(|_| TaskRecord {
                name: name.to_string(),
                rad: String::new(),
                submitted_at: unix_now(),
                workdir: None,
                estimate: None,
                crashes: 0,
                outcome: None,
            });
        record.outcome = Some(crate::spool::record::Outcome {
            state: State::Failed.to_string(),
            reason: Some(reason.to_string()),
            at: unix_now(),
        });
        let written = write_json(&dir.join("task.json"), &record)
            .and_then(|()| {
                crate::spool::write_durable(&dir.join("reason"), format!("{reason}\n").as_bytes())
            })
            .and_then(|()| self.spool.move_task(name, state, State::Failed));
        if let Err(e) = written {
            log::error!("{name}: cannot move to failed/: {e}");
        }
        self.tasks.remove(&name.seq());
    }

    /// A task directory left `pending/` without the daemon moving it: a
    /// user took it back. The core forgets it.
    fn vanished(&mut self, name: &TaskName) {
        let ours = self
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.state == State::Pending);
        if ours && !self.spool.task_dir(State::Pending, name).exists() {
            log::warn!("{name}: removed from pending/ by someone else; forgotten");
            self.tasks.remove(&name.seq());
            self.events.push(Event::Cancel { task: name.id() });
        }
    }

    /// Looks at all of `pending/` again: new task directories and drops
    /// are taken, tasks that disappeared are forgotten.
    pub(super) fn rescan(&mut self) {
        let listing = match self.spool.list(State::Pending) {
            Ok(listing) => listing,
            Err(e) => {
                log::error!("cannot rescan pending/: {e}");
                return;
            }
        };
        let present: std::collections::HashSet<u64> =
            listing.tasks.iter().map(TaskName::seq).collect();
        let gone: Vec<TaskName> = self
            .tasks
            .values()
            .filter(|t| t.state == State::Pending && !present.contains(&t.name.seq()))
            .map(|t| t.name.clone())
            .collect();
        for name in gone {
            self.vanished(&name);
        }
        for name in listing.tasks {
            if !self.tasks.contains_key(&name.seq()) {
                self.take(name, State::Pending);
            }
        }
        // A file being written right now is left for its close event.
        let recent = |entry: &String| {
            fs::symlink_metadata(self.spool.dir(State::Pending).join(entry))
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(1))
        };
        let (fresh, settled): (Vec<String>, Vec<String>) =
            listing.drops.into_iter().partition(recent);
        for entry in fresh {
            self.unfinished.entry(entry).or_insert_with(Instant::now);
        }
        self.take_drops(settled);
        self.cancel_requests();
    }

    /// Acts on the requests in `cancel/`: a waiting task is failed as
    /// cancelled, a running one's supervisor is asked to stop its job.
    /// Only the task's owner, root, or the daemon's user may cancel.
    pub(super) fn cancel_requests(&mut self) {
        let dir = self.spool.cancel_dir();
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let requester = fs::symlink_metadata(&path).map(|m| m.uid()).ok();
            let _ = fs::remove_file(&path);
            let Some(request) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if request.starts_with('.') {
                continue;
            }
            let Some(task) = self
                .tasks
                .values()
                .find(|t| t.name.as_str() == request || t.name.seq().to_string() == request)
            else {
                log::warn!("cancel {request}: no such task waiting or running");
                continue;
            };
            let owner = task.demand.user;
            let allowed = requester.is_some_and(|uid| {
                uid == 0 || Some(uid) == owner || uid == Uid::effective().as_raw()
            });
            if !allowed {
                log::warn!(
                    "{}: cancel refused: requested by uid {} who does not own it",
                    task.name,
                    requester.unwrap_or(u32::MAX)
                );
                continue;
            }
            let name = task.name.clone();
            match task.state {
                State::Running => {
                    let run_dir = self
                        .spool
                        .task_dir(State::Running, &name)
                        .join(format!("run-{}", task.run));
                    match crate::supervisor::cancel(&run_dir) {
                        Ok(true) => log::info!("{name}: cancelling: job asked to stop"),
                        Ok(false) => log::warn!("{name}: cancel: its supervisor is not running"),
                        Err(e) => log::error!("{name}: cancel: cannot signal its supervisor: {e}"),
                    }
                }
                _ => {
                    log::info!("{name}: cancelled while waiting");
                    self.events.push(Event::Cancel { task: name.id() });
                }
            }
        }
    }
}

/// The highest run number in a task directory (0 if it never ran).
pub(super) fn last_run(dir: &Path) -> u32 {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("run-")?.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Copies the model summary a freshly claimed `.rad` names from `pending/`,
/// where the user dropped both, into its task directory (a copy: other
/// dropped jobs may name the same file).
fn bring_model(pending: &Path, dir: &Path, rad: &Path) {
    let model = fs::read(rad)
        .ok()
        .and_then(|bytes| rad::parse_bytes(&bytes).ok())
        .and_then(|parsed| parsed.spec.model);
    let Some(model) = model else {
        return;
    };
    if dir.join(&model).exists() {
        return;
    }
    let from = pending.join(&model);
    // A symbolic link could point at any file the root daemon can read.
    if !fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
        return;
    }
    let to = dir.join(&model);
    let copied = to
        .parent()
        .map_or(Ok(()), fs::create_dir_all)
        .and_then(|()| fs::copy(&from, &to).map(drop));
    if let Err(e) = copied {
        log::warn!("cannot copy the model summary {}: {e}", from.display());
    }
}

/// An error message with the task directory's prefix removed, so the
/// reason reads `job.rad:3:5: ...`.
fn relative(message: &str, dir: &Path) -> String {
    let prefix = format!("{}/", dir.display());
    message.replacen(&prefix, "", 1)
}
