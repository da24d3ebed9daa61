//! Getting tasks in: files dropped into `pending/`, task directories
//! submitted there, cancellation requests, and rescans.
//!
//! Whatever cannot become a task (a file that does not parse, a symbolic
//! link, a job owned by an unknown user) still becomes a task directory and
//! moves to `failed/` with its reason beside it: bad input is kept, never
//! silently dropped, and the daemon goes on.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::unistd::Uid;

use super::watch::Change;
use super::{Daemon, Task};
use crate::accounts::accountable;
use crate::estimate::EstimateInput;
use crate::lifecycle::{Refusal, Refused};
use crate::rad::{self, FileError, JobFile};
use crate::sched::{ArrayOf, Demand, Need};
use crate::spool::record::{
    ArrayMember, EstimateNote, JOB, RECORD, TaskRecord, kept_launch_bytes, unix_now, write_json,
};
use crate::spool::{Claimed, JobCopy, SpoolError, State, TaskName};
use crate::supervisor::{is_transient, last_run, started_unended};

/// How every directory a user's `carma submit` hands in is named.
const SUBMISSION_PREFIX: &str = "submit-";

/// Drops claimed in one go: enough to keep the claim threads busy and to
/// share one flush, few enough that the claims' records (about 600 bytes
/// each) stay small beside the tasks.
const CLAIMS_AT_ONCE: usize = 512;

impl Daemon {
    pub(super) fn on_change(&mut self, change: Change) {
        match change {
            Change::Created(name) => {
                let path = self.spool.dir(State::Pending).join(&name);
                match fs::symlink_metadata(&path) {
                    // A regular file is complete when its writer closes it;
                    // a directory made in place (rather than moved in whole,
                    // as `carma submit` does) once it has been left alone
                    // for a while.
                    Ok(m) if m.is_file() || m.is_dir() => self.await_close(name, m.uid()),
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
            // Acted on after this turn's arrivals are taken: a request may
            // name a task submitted in the same instant.
            Change::CancelRequested => self.cancel_due = true,
            Change::Rescan => self.rescan_due = true,
        }
    }

    /// An entry of `pending/` (`owner`'s) that is being written is taken
    /// once it is complete ([`Daemon::claim_stale_unfinished`]), unless
    /// too many wait ([`super::unfinished`]).
    fn await_close(&mut self, name: String, owner: u32) {
        if !self.unfinished.wait(name.clone(), accountable(owner)) {
            self.arrived(name);
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
        self.take_entries(arrivals, Vec::new());
    }

    /// Takes entries of `pending/`: the daemon's own task directories are
    /// queued, other directories adopted as submissions, files claimed.
    /// Entries whose names are not UTF-8 (`odd`) are claimed too, to be
    /// refused with that reason.
    /// A directory is adopted only when its name says `carma submit` made
    /// it; any other (or an entry of another kind) is claimed, which sets
    /// it aside unopened with its reason. Entries whose intake failed wait
    /// for their own retry.
    pub(super) fn take_entries(&mut self, mut entries: Vec<String>, mut odd: Vec<OsString>) {
        entries.sort();
        entries.dedup();
        let now = self.now();
        entries.retain(|e| !self.entry_retry.waiting(OsStr::new(e), now));
        odd.retain(|e| !self.entry_retry.waiting(e, now));
        let pending = self.spool.dir(State::Pending);
        let euid = Uid::effective().as_raw();
        let mut drops = Vec::new();
        for entry in entries {
            let Ok(meta) = fs::symlink_metadata(pending.join(&entry)) else {
                continue;
            };
            if !meta.is_dir() {
                drops.push(entry);
                continue;
            }
            match TaskName::parse(&entry) {
                Some(name) if meta.uid() == euid => {
                    if !self.life.tasks.contains_key(&name.seq())
                        && !self.life.closing.contains_key(&name.seq())
                    {
                        self.take(name, State::Pending);
                    }
                }
                // `carma submit` names its directory after its user: one
                // named after another user is no submission of theirs
                // (it would count against their receipts in the status).
                _ if entry.starts_with(SUBMISSION_PREFIX)
                    && meta.uid() != euid
                    && super::adoptions::submitter(&entry) == Some(meta.uid())
                    && crate::spool::adoptable(&entry) =>
                {
                    self.adopt(&entry, meta.uid())
                }
                _ => odd.push(entry.into()),
            }
        }
        self.take_drops(drops, odd);
    }

    /// Adopts a directory `owner` made in `pending/` (see
    /// [`crate::spool::Spool::adopt_submission`]). Refusals count as
    /// refused drops do, and past their limit the directory waits as a
    /// drop does ([`Daemon::drop_waits`]).
    fn adopt(&mut self, entry: &str, owner: u32) {
        let payer = accountable(owner);
        if self.junk_drops.refuses(payer, self.now()) {
            self.entry_retry.failed(entry.into(), self.now());
            return;
        }
        match self.spool.adopt_submission(entry) {
            Ok(c) => {
                log::info!("{}: adopted pending/{entry}", c.name);
                self.remember_adoption(entry.to_string(), &c.name.to_string());
                // The submitter waits for this receipt.
                self.receipt_due = true;
                if self.take_fresh(c).is_some() {
                    self.junk_drops.count(payer, self.now());
                }
            }
            Err(SpoolError::Refused { name, reason }) => {
                self.junk_drops.count(payer, self.now());
                log::error!("{name}: refused: {reason}");
                self.remember_adoption(entry.to_string(), &name.to_string());
                self.receipt_due = true;
                self.life.refused_drop(name, unix_now());
            }
            Err(e) => self.entry_failed(
                entry.into(),
                &format!("pending/{entry}: cannot take it in: {e}"),
            ),
        }
        if !self.entry_retry.waiting(OsStr::new(entry), self.now()) {
            self.entry_retry.succeeded(OsStr::new(entry));
        }
    }

    /// Says in `status.json`, for a while, which task the submission
    /// `entry` became: its submitter may be looking for it there. Every
    /// user reads that file: a control character in the name a user gave
    /// is written as an escape (JSON leaves C1 controls and
    /// bidirectional overrides as they are).
    pub(super) fn remember_adoption(&mut self, entry: String, name: &str) {
        self.adopted
            .remember(crate::journal::one_line(&entry), name.to_string());
    }

    /// Looking at `pending/` failed for a reason that may pass (too many
    /// open files): all of it is looked at again after a backoff.
    fn intake_failed(&mut self, what: &str) {
        let (delay, first) = self.intake_retry.failed(self.now());
        if first {
            log::warn!("{what}; it stays in pending/, tried again in {delay:.1?} and later");
        } else {
            log::debug!("{what}; tried again in {delay:.1?}");
        }
    }

    /// Taking in one entry of `pending/` failed (it is back where it was):
    /// it is tried again after its own backoff.
    fn entry_failed(&mut self, entry: OsString, what: &str) {
        let (delay, first) = self.entry_retry.failed(entry, self.now());
        if first {
            log::warn!("{what}; it stays in pending/, tried again in {delay:.1?} and later");
        } else {
            log::debug!("{what}; tried again in {delay:.1?}");
        }
    }

    /// Entries created in `pending/` that were left alone for a while
    /// without a close (a writer that crashed, a directory made in place),
    /// or waited for long enough.
    pub(super) fn claim_stale_unfinished(&mut self) {
        let pending = self.spool.dir(State::Pending);
        let quiet = |name: &str| {
            fs::symlink_metadata(pending.join(name))
                .and_then(|m| m.modified())
                .map_or(true, |t| {
                    t.elapsed().unwrap_or_default() >= super::unfinished::GRACE
                })
        };
        let stale = self.unfinished.take_stale(quiet);
        if !stale.is_empty() {
            self.take_entries(stale, Vec::new());
        }
    }

    /// Claims dropped entries (not directories) and takes the resulting
    /// tasks. `.rad` files are claimed once their model summary is there
    /// (or has been waited for), entries that are not regular files (links,
    /// FIFOs) at once, to be refused. Other files may be model summaries
    /// the `.rad`s point to: [`Daemon::tidy_pending`] looks after them.
    pub(super) fn take_drops(&mut self, entries: Vec<String>, odd: Vec<OsString>) {
        let pending = self.spool.dir(State::Pending);
        let mut drops: Vec<OsString> = Vec::new();
        for entry in entries {
            // Before its summary is looked for (and marked copied) and its
            // file read: a drop that waits is not looked at.
            if self.drop_waits(OsStr::new(&entry)) {
                continue;
            }
            let regular = fs::symlink_metadata(pending.join(&entry)).is_ok_and(|m| m.is_file());
            if !regular {
                drops.push(entry.into());
            } else if entry.ends_with(".rad") {
                if self.loose.ready(&pending, &entry, &self.unfinished) {
                    drops.push(entry.into());
                }
            } else {
                self.loose.saw(entry);
            }
        }
        drops.extend(odd);
        self.claim_drops(drops);
    }

    /// Whether the drop `entry` waits, unclaimed, for the end of a minute
    /// in which its owner's drops were refused 100 times
    /// ([`crate::lifecycle::PerMinute`]): each refusal is a task in `failed/`,
    /// on root's disk, and a user may drop junk by the thousand a second.
    /// It is tried again on its own backoff, and stays meanwhile where its
    /// owner put it, on their quota.
    fn drop_waits(&mut self, entry: &OsStr) -> bool {
        let now = self.now();
        let path = self.spool.dir(State::Pending).join(entry);
        let waits = fs::symlink_metadata(path)
            .is_ok_and(|m| self.junk_drops.refuses(accountable(m.uid()), now));
        if waits {
            self.entry_retry.failed(entry.to_owned(), now);
        }
        waits
    }

    /// Claims `drops` and takes the tasks made of them, a slice of
    /// [`CLAIMS_AT_ONCE`] at a time: a burst of 10,000 drops never holds
    /// all its claims in memory beside the tasks made of them, nor all
    /// their arrivals for the core, and its first tasks are queued (and
    /// may start) while the rest are claimed. Not at a start: nothing is
    /// placed before the requests left while no daemon ran have acted.
    pub(super) fn claim_drops(&mut self, drops: Vec<OsString>) {
        // Whose drops wait is asked before each slice: a user's refusals
        // in one slice count for the next.
        let mut drops = drops.into_iter().peekable();
        while drops.peek().is_some() {
            let slice: Vec<OsString> = drops
                .by_ref()
                .filter(|entry| !self.drop_waits(entry))
                .take(CLAIMS_AT_ONCE)
                .collect();
            if slice.is_empty() {
                continue;
            }
            self.claim_slice(&slice);
            if self.restored && drops.peek().is_some() {
                self.step();
            }
        }
    }

    fn claim_slice(&mut self, drops: &[OsString]) {
        let batch = self.spool.claim(drops);
        let now = Instant::now();
        for file in batch.vanished {
            // Anyone can make and remove names by the thousand.
            if let Some(held) = self.hush.allow("vanished", None, now) {
                log::warn!(
                    "pending/{file}: removed before carma could claim it \
                     (deleted or moved away by its owner); nothing to run{}",
                    crate::journal::left_out(held)
                );
            }
        }
        let why = batch.error.as_ref().map(ToString::to_string);
        for drop in batch.failed {
            let what = format!(
                "pending/{}: cannot claim it: {}",
                drop.to_string_lossy(),
                why.as_deref().unwrap_or("an error")
            );
            self.entry_failed(drop, &what);
        }
        for mut c in batch.claimed {
            self.entry_retry.succeeded(&c.drop);
            match c.refused.take() {
                Some(reason) => {
                    let owner = c.record.owner.map(accountable);
                    if let Some(owner) = owner {
                        self.junk_drops.count(owner, self.now());
                    }
                    // Kept with its reason in failed/ whether or not it is
                    // logged.
                    if let Some(held) = self.hush.allow("refused drop", owner, now) {
                        log::error!(
                            "{}: refused pending/{}: {reason}{}",
                            c.name,
                            c.file,
                            crate::journal::left_out(held)
                        );
                    }
                    self.life.refused_drop(c.name, unix_now());
                }
                None => {
                    log::info!("{}: claimed pending/{}", c.name, c.file);
                    let owner = c.record.owner.map(accountable);
                    // Refused at intake (a job file that does not parse,
                    // say): junk as much as a drop that is no file.
                    if let (Some(_), Some(owner)) = (self.take_fresh(c), owner) {
                        self.junk_drops.count(owner, self.now());
                    }
                }
            }
        }
    }

    /// Reads a task directory found in `pending/` or `recovery/` and queues
    /// it; a task that cannot run goes to `failed/` with its reason.
    pub(super) fn take(&mut self, name: TaskName, state: State) {
        let _ = self.take_as(name, state, None, false);
    }

    /// [`Daemon::take`] with the task fresh from a claim or a submission,
    /// its record and its job in hand, which spares reading them back.
    /// Why the task was refused, if it was.
    pub(super) fn take_fresh(&mut self, claimed: Claimed) -> Option<String> {
        let fresh = Fresh {
            record: claimed.record,
            copy: claimed.copy,
        };
        self.take_as(claimed.name, State::Pending, Some(fresh), true)
    }

    /// [`Daemon::take`] (or [`Daemon::take_fresh`]), held to the per-user
    /// limits when `limited` (a fresh submission, or an ended task
    /// requeued: a new waiting task either way).
    pub(super) fn take_as(
        &mut self,
        name: TaskName,
        state: State,
        fresh: Option<Fresh>,
        limited: bool,
    ) -> Option<String> {
        let is_fresh = fresh.is_some();
        match self.load(&name, state, fresh, limited) {
            Err(NotLoaded::Later(why)) => {
                self.entry_failed(
                    name.to_string().into(),
                    &format!("{name}: cannot take it in yet: {why}"),
                );
                None
            }
            Ok(task) if started_unended(&self.spool.task_dir(state, &name), task.run) => {
                self.resume_unended(name, state);
                None
            }
            Ok(task) => {
                self.fresh.push(name.seq());
                if self.life.admit(task) {
                    self.expand_array(name.seq(), is_fresh);
                }
                None
            }
            Err(NotLoaded::Refused(reason)) => {
                if is_fresh {
                    self.forget_copies(&name, state, &reason);
                }
                self.reject(&name, state, &reason);
                Some(reason.to_string())
            }
        }
    }

    /// Builds the daemon's view of a task from its directory, or from
    /// what its claim or submission hands over (`fresh`: a task that never
    /// ran). A read that fails for a reason that passes (out of
    /// descriptors) refuses nothing: the task is taken in again later.
    pub(super) fn load(
        &mut self,
        name: &TaskName,
        state: State,
        fresh: Option<Fresh>,
        limited: bool,
    ) -> Result<Task, NotLoaded> {
        use Refusal::{Dependency, InvalidJob, OverLimit, Owner, Unrecorded};
        let dir = self.spool.task_dir(state, name);
        let job = dir.join(JOB);
        let is_fresh = fresh.is_some();
        let (mut record, copy) = match fresh {
            Some(Fresh { record, copy }) => (record, copy),
            None => {
                let record = self.spool.load_record(state, name).map_err(|e| match &e {
                    SpoolError::Io { source, .. } if is_transient(source) => {
                        NotLoaded::Later(e.to_string())
                    }
                    _ => InvalidJob.because(e.to_string()).into(),
                })?;
                (record, None)
            }
        };
        // The record is the daemon's (task directories are its own), but a
        // damaged one must still not lead it out of the directory.
        if record.rad.contains('/') || record.rad.is_empty() {
            return Err(InvalidJob
                .because(format!(
                    "task.json names `{}`, not a file of the task",
                    record.rad
                ))
                .into());
        }
        let Some(owner) = record.owner else {
            return Err(Owner
                .because("its record names no owner; submit it again")
                .into());
        };
        let rad_path = job.join(&record.rad);
        check_kept_job(&dir, &rad_path, &record.rad)?;
        let checked = match &copy {
            // Written by carma a moment ago in its own directory, from
            // what it read: nothing to read back.
            Some(copy) => rad::check_bytes(&rad_path, &copy.rad),
            None => rad::check_file(&rad_path),
        };
        let JobFile { spec, warnings } = checked.map_err(|e| match &e {
            FileError::Read { source, .. } if is_transient(source) => {
                NotLoaded::Later(e.to_string())
            }
            _ => InvalidJob.because(relative(&e.to_string(), &job)).into(),
        })?;
        let (run_as, user) = self.run_as(owner)?;
        let unprivileged = !self.life.privileged(owner);
        let refused = spec
            .priority
            .filter(|_| unprivileged)
            .and_then(|p| self.config.queue.priority_refusal(p))
            .or_else(|| {
                spec.retries
                    .filter(|_| unprivileged)
                    .and_then(|r| self.config.recovery.retries_refusal(r))
            });
        // A task that ran before holds its latest runs' launches too.
        let bytes = match &copy {
            Some(copy) => copy.bytes,
            None if is_fresh => crate::spool::tree_bytes(&job),
            None => crate::spool::tree_bytes(&job).saturating_add(kept_launch_bytes(&dir)),
        };
        // Counted when first taken in, or requeued; a restart reloads what
        // was accepted. An array's task requeued is one task.
        let elements = match record.array {
            Some(_) => 1,
            None => spec.array.map_or(1, |a| u64::from(a.last - a.first) + 1),
        };
        let refused = refused
            .or_else(|| self.config.queue.host_limits(spec.host).err())
            .or_else(|| {
                (limited && unprivileged)
                    .then(|| self.over_limits(owner, elements, bytes))
                    .flatten()
            });
        if let Some(why) = refused {
            return Err(OverLimit.because(why).into());
        }
        if let (Some(array), None, State::Pending) = (spec.array, record.array, state) {
            // The submitted task: the array's first element. The daemon
            // makes the others once it is taken in.
            record.array = Some(ArrayMember {
                job: name.seq(),
                index: array.first,
                at_once: array.at_once,
                expanded: false,
            });
        }
        let resolved_before = record.after.is_some();
        let after = self
            .dependencies(name, owner, &spec, &mut record)
            .map_err(|why| Dependency.because(why))?;
        if !resolved_before && !after.is_empty() {
            // Written now, so a restart waits for the same tasks.
            write_json(&dir.join(RECORD), &record)
                .map_err(|e| Unrecorded.because(format!("cannot record its dependencies: {e}")))?;
        }
        let (mut input, summary_warning) =
            EstimateInput::from_spec(&spec, &job, &self.config.legacy);
        input.user = self.history_user(owner);
        if record.estimate.is_none() {
            // Said once, when the job is first estimated; a restart that
            // reloads the task does not repeat it.
            for warning in warnings.iter().chain(&summary_warning) {
                log::warn!("{name}: {}", relative(warning, &job));
            }
            let estimate = self.chain.estimate(&input);
            log::info!("{name}: estimate {}", estimate.describe());
            record.estimate = Some(EstimateNote {
                need: estimate.need,
                source: estimate.source_text(),
            });
        }
        let demand = Demand {
            gpus: spec.gpus,
            need: record.estimate.as_ref().map_or(Need::Unknown, |e| e.need),
            exclusive: self.config.legacy.exclusive(&spec),
            user: Some(owner),
            max_retries: spec.retries,
            time_limit: spec.time,
            priority: record.priority.or(spec.priority).unwrap_or(0),
            after,
            // How long the same job ran before, for backfill to plan with
            // when the job states no time limit.
            history: self
                .chain
                .history()
                .lookup(&input.fingerprint())
                .ok()
                .flatten()
                .and_then(|r| r.max_run_s)
                .and_then(|s| Duration::try_from_secs_f64(s).ok()),
            array: record.array.map(|a| ArrayOf {
                job: a.job,
                at_once: a.at_once,
            }),
        };
        Ok(Task {
            name: name.clone(),
            state,
            job: spec.into(),
            record,
            owner: demand.user,
            priority: demand.priority,
            demand: Some(Box::new(demand)),
            run_as,
            user,
            run: if is_fresh { 0 } else { last_run(&dir) },
            gpus: Vec::new(),
            supervisor: None,
            adopted: false,
            since: 0.0,
            time_limit_s: None,
            deadlines: Default::default(),
            start_failures: 0,
            peak_mib: 0,
            run_s: None,
            fingerprint: input.fingerprint(),
            bytes,
        })
    }

    /// A task directory left `pending/` without the daemon moving it: a
    /// user took it back. The core forgets it. (Whatever a user put under
    /// its name since is looked at, not followed.)
    fn vanished(&mut self, name: &TaskName) {
        if !self.spool.is_task_dir(State::Pending, name) {
            self.life.forget(name);
        }
    }

    /// Looks at all of `pending/` again: new task directories and drops
    /// are taken, tasks that disappeared are forgotten.
    pub(super) fn rescan(&mut self) {
        self.rescan_due = false;
        self.backlog.rescanning();
        let started = Instant::now();
        let listed = self.spool.list(State::Pending);
        self.last_rescan = Some((started, started.elapsed()));
        let listing = match listed {
            Ok(listing) => listing,
            Err(e) => {
                self.intake_failed(&format!("cannot rescan pending/: {e}"));
                return;
            }
        };
        // A retry of an entry that is gone is never due again: due, it
        // would ask for a rescan at every turn.
        let listed: std::collections::HashSet<OsString> = listing
            .tasks
            .iter()
            .map(|name| OsString::from(name.as_str()))
            .chain(listing.drops.iter().map(OsString::from))
            .chain(listing.odd.iter().cloned())
            .collect();
        self.entry_retry.retain(|entry| listed.contains(entry));
        let present: std::collections::HashSet<&TaskName> = listing.tasks.iter().collect();
        let gone: Vec<TaskName> = self
            .life
            .tasks
            .values()
            .filter(|t| t.state == State::Pending && !present.contains(&t.name))
            .map(|t| t.name.clone())
            .collect();
        for name in gone {
            self.vanished(&name);
        }
        // A file being written right now is left for its close event.
        let pending = self.spool.dir(State::Pending);
        let mut entries: Vec<String> = listing
            .tasks
            .iter()
            .filter(|name| !self.life.tasks.contains_key(&name.seq()))
            .map(ToString::to_string)
            .collect();
        for entry in listing.drops {
            let writer = fs::symlink_metadata(pending.join(&entry))
                .ok()
                .filter(|m| {
                    m.is_file()
                        && m.modified()
                            .is_ok_and(|t| t.elapsed().unwrap_or_default() < Duration::from_secs(1))
                })
                .map(|m| m.uid());
            if let Some(owner) = writer {
                self.await_close(entry, owner);
            } else {
                entries.push(entry);
            }
        }
        self.take_entries(entries, listing.odd);
        self.cancel_due = true;
    }
}

impl Daemon {
    /// Whose history answers for a job of `owner`'s: theirs alone, unless
    /// the configuration shares history among all users.
    pub(super) fn history_user(&self, owner: u32) -> Option<u32> {
        (!self.config.estimate.history_shared).then_some(owner)
    }
}

/// Why a task directory was not taken in.
#[derive(Debug)]
pub(super) enum NotLoaded {
    /// It cannot run: it goes to `failed/` with the reason.
    Refused(Refused),
    /// It could not be read now, for a reason that passes (out of
    /// descriptors or memory): taken in again after a backoff.
    Later(String),
}

impl From<Refused> for NotLoaded {
    fn from(refused: Refused) -> NotLoaded {
        NotLoaded::Refused(refused)
    }
}

impl std::fmt::Display for NotLoaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotLoaded::Refused(refused) => refused.fmt(f),
            NotLoaded::Later(why) => f.write_str(why),
        }
    }
}

/// An error message with the task directory's prefix removed, so the
/// reason reads `job.rad:3:5: ...`.
fn relative(message: &str, dir: &Path) -> String {
    let prefix = format!("{}/", dir.display());
    message.replacen(&prefix, "", 1)
}

/// A task fresh from a claim or a submission: its record, and what was
/// put into its `job/` ([`crate::spool::JobCopy`], absent only where the
/// producer did not keep it), handed over so that neither is read back.
pub(super) struct Fresh {
    pub record: TaskRecord,
    pub copy: Option<JobCopy>,
}

/// Refuses the job file `rad` (at `path`, in the task directory `dir`):
/// a symbolic link or anything but a regular file of its own. Only carma
/// writes there, but a damaged spool must not lead it elsewhere. A second
/// name left by a claim cut short, or whose removal failed (the drop's
/// original, linked), is removed.
fn check_kept_job(dir: &Path, path: &Path, rad: &str) -> Result<(), NotLoaded> {
    use Refusal::InvalidJob;
    let meta = fs::symlink_metadata(path)
        .map_err(|e| InvalidJob.because(format!("{rad}: cannot read: {e}")))?;
    if meta.file_type().is_symlink() {
        return Err(InvalidJob
            .because(format!(
                "{rad}: is a symbolic link; carma runs only regular files"
            ))
            .into());
    }
    if !meta.is_file() {
        return Err(InvalidJob
            .because(format!("{rad}: not a regular file"))
            .into());
    }
    if meta.nlink() > 1 && !(meta.nlink() == 2 && crate::spool::forget_linked_original(dir, &meta))
    {
        return Err(InvalidJob
            .because(format!(
                "{rad}: has other hard links; a job file must be a file of its own"
            ))
            .into());
    }
    Ok(())
}
