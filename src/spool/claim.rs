//! Claims: files users dropped into `pending/` become task directories of
//! carma's own.
//!
//! A dropped file is the user's: they own it and may still hold it open.
//! So it is never used in place. Each file is renamed into a new
//! `staging/claim-<name>/` as `.orig-<its name>` (out of the user's reach),
//! read once without following links or blocking, and copied into the
//! task's `job/`; the job's user is the file's owner as the open file
//! showed it then, and is written down in carma's record right away. Only
//! once the claim is on disk ([`make_durable`]) is the user's original
//! deleted, so a crash at any moment leaves every drop either still a drop
//! or a whole task.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::durable::{make_durable, write_new};
use super::job_copy::{fill_job, job_name, read_job_file};
use super::record::{self, DROPPED, JOB, ORIGINAL, Outcome, RECORD, TaskRecord, unix_now};
use super::{
    Claimed, JobCopy, Spool, SpoolError, State, TASK_DIR_MODE, TaskName, at, make_dir, read_names,
    rename_new, sync_dir,
};

/// What a start's [`Spool::finish_claims`] did: the claims now waiting in
/// `pending/`, and those left in `staging/` (their entries) because they
/// could not be placed.
#[derive(Debug, Default)]
pub struct FinishedClaims {
    pub pending: Vec<TaskName>,
    pub stranded: Vec<String>,
}

/// What a batch of claims produced: the tasks made, and the error that
/// stopped the batch early (a full disk, say). Drops not claimed stay in
/// `pending/` for the next try.
#[derive(Debug, Default)]
pub struct ClaimBatch {
    pub claimed: Vec<Claimed>,
    /// Drops that were removed before they could be claimed (their owner
    /// deleted or moved them): nothing to run, but worth saying.
    pub vanished: Vec<String>,
    /// Drops whose claim failed and that are back in `pending/`: retried
    /// later, not at once (their move back is itself a file event).
    pub failed: Vec<OsString>,
    pub error: Option<SpoolError>,
}

impl Spool {
    /// Turns entries dropped into `pending/` into task directories (see
    /// the module documentation). An entry that cannot be a job (not a
    /// regular file, a name that is not UTF-8, other hard links) still
    /// becomes a task, in `failed/`, holding the entry as it was and the
    /// reason. An entry that vanished before it could be claimed is logged
    /// with that reason and skipped.
    pub fn claim(&self, drops: &[OsString]) -> ClaimBatch {
        let mut batch = ClaimBatch::default();
        if drops.is_empty() {
            return batch;
        }
        let now = unix_now();
        let claim_all = |chunk: &[OsString]| -> Vec<ClaimOutcome> {
            chunk
                .iter()
                .map(|drop| (drop.clone(), self.claim_one(drop, &provisional_dir(self))))
                .collect()
        };
        // Each claim waits on the disk (directories and files made one
        // after another); a large batch overlaps those waits on threads.
        let threads = CLAIM_THREADS.min(drops.len() / CLAIMS_PER_THREAD).max(1);
        let outcomes: Vec<ClaimOutcome> = match threads {
            1 => claim_all(drops),
            _ => std::thread::scope(|scope| {
                let workers: Vec<_> = drops
                    .chunks(drops.len().div_ceil(threads))
                    .map(|chunk| scope.spawn(move || claim_all(chunk)))
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_default())
                    .collect()
            }),
        };
        let mut prepared = Vec::new();
        for (drop, outcome) in outcomes {
            match outcome {
                Ok(Some(p)) => prepared.push(p),
                Ok(None) => batch.vanished.push(drop.to_string_lossy().into_owned()),
                // One drop's trouble does not hold up the others; it stays
                // in pending/ for a later try.
                Err(e) => {
                    batch.failed.push(drop);
                    batch.error = Some(e);
                }
            }
        }
        // Numbers only for the claims that got this far: a drop that cannot
        // be claimed, however often it is tried, spends none.
        let staged = match self.number(prepared, now) {
            Ok(staged) => staged,
            Err((e, undone)) => {
                batch.failed.extend(undone);
                batch.error = Some(e);
                return batch;
            }
        };
        if staged.is_empty() {
            return batch;
        }
        // Every copy and record of the batch on disk; only then may the
        // users' originals go.
        let dirs: Vec<&Path> = staged.iter().map(|(dir, _)| dir.as_path()).collect();
        if let Err(e) = make_durable(&self.staging(), &dirs) {
            for (dir, claimed) in staged {
                self.undo_claim(&dir);
                batch.failed.push(claimed.drop);
            }
            batch.error = Some(at(&self.staging())(e));
            return batch;
        }
        for (dir, mut claimed) in staged {
            let to = match claimed.refused {
                Some(_) => State::Failed,
                None => State::Pending,
            };
            match self.place(&dir, to, &claimed.name, Some(&mut claimed.record)) {
                Ok(name) => {
                    claimed.name = name;
                    // The copy is durable and in place: the original goes.
                    if claimed.refused.is_none() {
                        let task = self.task_dir(to, &claimed.name);
                        if let Err(e) = fs::remove_file(original(&task, &claimed.drop)) {
                            log::warn!("{}: cannot remove the claimed original: {e}", claimed.name);
                        }
                    }
                    batch.claimed.push(claimed);
                }
                Err(e) => {
                    self.undo_claim(&dir);
                    batch.failed.push(claimed.drop);
                    batch.error = Some(e);
                }
            }
        }
        for dir in [
            self.dir(State::Pending),
            self.dir(State::Failed),
            self.staging(),
        ] {
            if let Err(e) = sync_dir(&dir) {
                log::warn!("cannot sync {}: {e}", dir.display());
            }
        }
        batch
    }

    /// Gives prepared claims their task numbers: each gets its record and
    /// its `claim-NAME` directory. On an error every claim is undone and
    /// its drop returned.
    #[allow(clippy::type_complexity)]
    fn number(
        &self,
        mut prepared: Vec<Prepared>,
        now: f64,
    ) -> Result<Vec<(PathBuf, Claimed)>, (SpoolError, Vec<OsString>)> {
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let undo_all = |prepared: &[Prepared]| -> Vec<OsString> {
            prepared
                .iter()
                .map(|p| {
                    self.undo_claim(&p.dir);
                    p.drop.clone()
                })
                .collect()
        };
        let first = match self.allocate(prepared.len() as u64) {
            Ok(first) => first,
            Err(e) => return Err((e, undo_all(&prepared))),
        };
        let mut staged: Vec<(PathBuf, Claimed)> = Vec::with_capacity(prepared.len());
        for (i, seq) in (first..).take(prepared.len()).enumerate() {
            let p = &prepared[i];
            let name = TaskName::new(seq, &p.stem);
            let dir = self.staging().join(format!("claim-{name}"));
            let mut record = TaskRecord {
                owner: p.owner,
                ..TaskRecord::new(&name, p.lossy.clone(), now)
            };
            if let Some(reason) = &p.refused {
                record.outcome = Some(Outcome::failed(reason));
            }
            let made = write_new(&p.dir.join(RECORD), &record::to_json(&record))
                .and_then(|()| rename_new(&p.dir, &dir));
            if let Err(e) = made {
                let mut undone = undo_all(&prepared[i..]);
                for (dir, claimed) in staged {
                    self.undo_claim(&dir);
                    undone.push(claimed.drop);
                }
                return Err((at(&p.dir)(e), undone));
            }
            staged.push((
                dir,
                Claimed {
                    name,
                    file: p.lossy.clone(),
                    drop: p.drop.clone(),
                    record,
                    refused: p.refused.clone(),
                    copy: prepared[i].copy.take(),
                },
            ));
        }
        Ok(staged)
    }

    /// Claims one drop into the new directory `dir` (without its record,
    /// which needs the task's number); `None` if it vanished first. On an
    /// error nothing is left behind: the drop is back in `pending/`.
    /// Nothing the user made is opened unless `lstat` showed a regular
    /// file, and a directory or anything else is kept without a look
    /// inside.
    fn claim_one(&self, drop: &OsStr, dir: &Path) -> Result<Option<Prepared>, SpoolError> {
        let pending = self.dir(State::Pending);
        let lossy = drop.to_string_lossy().into_owned();
        let mut stem = Path::new(&lossy)
            .file_stem()
            .map_or_else(|| lossy.clone(), |s| s.to_string_lossy().into_owned());
        make_dir(dir, TASK_DIR_MODE).map_err(at(dir))?;
        // A name too long to take a prefix is kept as it is, and refused.
        let too_long = drop.len() + ORIGINAL.len() > NAME_MAX;
        let kept = match too_long {
            true => dir.join(DROPPED).join(drop),
            false => original(dir, drop),
        };
        let made = match too_long {
            true => make_dir(&dir.join(DROPPED), 0o700),
            false => Ok(()),
        };
        match made.and_then(|()| rename_new(&pending.join(drop), &kept)) {
            Ok(()) => {}
            Err(e) => {
                let _ = fs::remove_dir_all(dir);
                if e.kind() == io::ErrorKind::NotFound {
                    return Ok(None);
                }
                return Err(at(&pending.join(drop))(e));
            }
        }
        let mut copy = None;
        let meta = fs::symlink_metadata(&kept).ok();
        let owner = meta.as_ref().map(|m| m.uid());
        let kind = meta.as_ref().map(|m| m.file_type());
        let refused = match drop.to_str() {
            _ if too_long => Some(format!(
                "its file name is {} bytes long; carma takes names of at most {} bytes",
                drop.len(),
                NAME_MAX - ORIGINAL.len()
            )),
            None => Some(format!(
                "its file name is not UTF-8 (`{lossy}`): rename it and submit it again"
            )),
            Some(_) if kind.is_some_and(|k| !k.is_file()) => Some(not_a_file(kind)),
            Some(_) if !lossy.ends_with(".rad") => Some(
                "not a job file (no `.rad` name), and no job in pending/ named it; kept here. \
                 `carma submit JOB.rad` copies a job and its model summary together"
                    .to_string(),
            ),
            Some(file) => match read_job_file(&kept) {
                Err(reason) => Some(reason),
                Ok(read) => {
                    // The job's own `name:`, when it gives one.
                    if let Some(name) = job_name(&read.bytes) {
                        stem = name;
                    }
                    let original = read.leased.as_ref().map(|open| (kept.as_path(), open));
                    match fill_job(dir, file, &read.bytes, original, &pending, owner) {
                        // A file larger than any real job is read back
                        // by the intake instead: a slice of claims holds
                        // only small copies, whatever users drop.
                        Ok(bytes) if read.bytes.len() <= HANDED_JOB_BYTES => {
                            copy = Some(JobCopy {
                                rad: read.bytes,
                                bytes,
                            })
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.undo_claim(dir);
                            return Err(at(dir)(e));
                        }
                    }
                    None
                }
            },
        };
        let written = match &refused {
            Some(reason) if too_long => record::write_reason(dir, owner, reason),
            // Kept as it came, beside the reason.
            Some(reason) => make_dir(&dir.join(DROPPED), 0o700)
                .and_then(|()| rename_new(&kept, &dir.join(DROPPED).join(drop)))
                .and_then(|()| record::write_reason(dir, owner, reason)),
            None => Ok(()),
        };
        if let Err(e) = written {
            self.undo_claim(dir);
            return Err(at(dir)(e));
        }
        Ok(Some(Prepared {
            dir: dir.to_owned(),
            drop: drop.to_owned(),
            lossy,
            stem,
            owner,
            refused,
            copy,
        }))
    }

    /// Puts a half-claimed drop back into `pending/` and removes the claim.
    /// carma's copies go first: one may be a second name of the drop
    /// itself ([`fill_job`]), which must not come back with two names.
    fn undo_claim(&self, dir: &Path) {
        if let Err(e) = fs::remove_dir_all(dir.join(JOB))
            && e.kind() != io::ErrorKind::NotFound
        {
            log::warn!("cannot remove {}/{JOB}: {e}", dir.display());
        }
        let originals = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| (e.path(), e.file_name()))
            .chain(
                fs::read_dir(dir.join(DROPPED))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| (e.path(), e.file_name())),
            )
            .filter_map(|(path, name)| {
                let bytes = name.as_bytes();
                let back = if path.parent() == Some(dir) {
                    OsStr::from_bytes(bytes.strip_prefix(ORIGINAL)?)
                } else {
                    OsStr::from_bytes(bytes)
                };
                Some((path, back.to_owned()))
            })
            .collect::<Vec<_>>();
        for (path, name) in originals {
            let back = self.dir(State::Pending).join(&name);
            if let Err(e) = rename_new(&path, &back) {
                log::error!(
                    "{}: cannot put it back into pending/ ({e}); it stays in {}",
                    name.to_string_lossy(),
                    dir.display()
                );
                return;
            }
        }
        if let Err(e) = self.discard(dir) {
            log::warn!("cannot remove {}: {e}", dir.display());
        }
    }

    /// Finishes what a crashed daemon left in `staging/`: a claim whose
    /// record was written moves on (to `pending/`, or `failed/` if it was
    /// refused); an earlier one gives its drop back to `pending/` to be
    /// claimed again; a submission caught in adoption goes back to
    /// `pending/`. Staged submissions are left to their `carma submit`.
    /// A claim that cannot be placed now (a full disk) is left whole, and
    /// named in the answer, for the daemon to place later
    /// ([`Spool::finish_claim`]): it must not wait for the next start.
    pub fn finish_claims(&self) -> Result<FinishedClaims, SpoolError> {
        let staging = self.staging();
        let mut finished = FinishedClaims::default();
        let (entries, odd) = read_names(&staging)?;
        let claims: Vec<PathBuf> = entries
            .iter()
            .filter(|e| e.starts_with("claim-"))
            .map(|e| staging.join(e))
            .collect();
        // Copies of a claim cut short by a power loss must be on disk
        // before their originals go. A claim that cannot be synced is
        // still finished: refusing to start would stop every user's jobs.
        let claims: Vec<&Path> = claims.iter().map(|p| p.as_path()).collect();
        if let Err(e) = make_durable(&staging, &claims) {
            log::error!("cannot sync the claims a crash left in staging/: {e}");
        }
        // Submissions whose claim was written: taken already, whatever
        // the crash left of them. A claim already placed in `pending/`
        // counts too: a crash between its placing and the removal of
        // what it was made from left both, and the submission went back
        // to be adopted, and run, a second time.
        let mut records: Vec<PathBuf> = claims.iter().map(|dir| dir.join(RECORD)).collect();
        if entries
            .iter()
            .any(|e| e.starts_with(super::submission::INCOMING))
            && let Ok(listing) = self.list(State::Pending)
        {
            records.extend(
                listing
                    .tasks
                    .iter()
                    .filter(|name| self.is_task_dir(State::Pending, name))
                    .map(|name| self.task_dir(State::Pending, name).join(RECORD)),
            );
        }
        let adopted: std::collections::HashSet<String> = records
            .iter()
            .filter_map(|path| record::read_state::<TaskRecord>(path).ok())
            .filter_map(|r| r.submitted_as)
            .collect();
        for entry in odd {
            // carma makes only UTF-8 names here: not its own.
            let _ = self.discard(&staging.join(entry));
        }
        let kept = entries
            .iter()
            .filter(|e| e.starts_with(super::trash::KEPT))
            .count();
        if kept > 0 {
            log::warn!(
                "{}: {kept} directories of users kept whole from trees handed in by others \
                 (kept-*); give them back to their owners or remove them",
                staging.display()
            );
        }
        for entry in entries {
            let path = staging.join(&entry);
            if entry.starts_with(super::trash::TRASH)
                || entry.starts_with(super::trash::KEPT)
                || entry == super::LOCK
            {
                continue;
            }
            if entry.starts_with(super::array::STAGED_ELEMENT) {
                // An array element a crash left unplaced: made again.
                let _ = self.discard(&path);
                continue;
            }
            if entry.starts_with(PROVISIONAL) {
                // Cut short before its number: its drop goes back.
                self.undo_claim(&path);
                continue;
            }
            if let Some(original) = entry.strip_prefix(super::submission::INCOMING) {
                self.return_submission(&path, original, adopted.contains(original));
                continue;
            }
            if entry.starts_with("submit-") {
                // carma's own user's `carma submit`, finishing now or
                // crashed long ago.
                if is_stale(&path) {
                    log::warn!("staging/{entry}: a submission its carma submit left; removed");
                    let _ = self.discard(&path);
                }
                continue;
            }
            if entry
                .strip_prefix("claim-")
                .and_then(TaskName::parse)
                .is_none()
            {
                log::warn!("staging/{entry}: not carma's; removed");
                let _ = self.discard(&path);
                continue;
            }
            match self.finish_claim(&entry) {
                Ok(Some((name, State::Pending))) => finished.pending.push(name),
                Ok(_) => {}
                Err(e) => {
                    log::error!("staging/{entry}: cannot finish the claim: {e}; tried again later");
                    finished.stranded.push(entry);
                }
            }
        }
        self.sweep_abandoned_submissions();
        Ok(finished)
    }

    /// Finishes the claim `staging/<entry>` (`claim-<task>`) a crash left:
    /// moved on into `pending/`, or `failed/` if it was refused; where it
    /// went (None: its record was not written, and its drop went back).
    pub fn finish_claim(&self, entry: &str) -> Result<Option<(TaskName, State)>, SpoolError> {
        let path = self.staging().join(entry);
        let Some(name) = entry.strip_prefix("claim-").and_then(TaskName::parse) else {
            return Ok(None);
        };
        let mut record = match record::read_state::<TaskRecord>(&path.join(RECORD)) {
            Ok(record) => record,
            // Cut short before its record was written: its drop goes back.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::InvalidData
                ) =>
            {
                log::warn!("staging/{entry}: a claim cut short before its record ({e}); undone");
                self.undo_claim(&path);
                return Ok(None);
            }
            // A read that may pass (EIO, out of descriptors): kept whole
            // for a later try, never undone (its drop may be gone).
            Err(e) => return Err(at(&path)(e)),
        };
        let to = match record.outcome {
            Some(_) => State::Failed,
            None => {
                // The copy is durable (synced above): the original goes.
                for entry in fs::read_dir(&path).into_iter().flatten().flatten() {
                    if entry.file_name().as_bytes().starts_with(ORIGINAL) {
                        forget_original(self, &entry.path());
                    }
                }
                State::Pending
            }
        };
        // What cannot be placed now stays, whole, for a later try.
        let name = self.place(&path, to, &name, Some(&mut record))?;
        Ok(Some((name, to)))
    }

    /// A submission a crash caught between its move into `staging/` and
    /// its claim: back into `pending/` to be taken again, unless its claim
    /// was made (then it is done with). Under a name of its own if its old
    /// one is taken now; never lost.
    fn return_submission(&self, path: &Path, original: &str, adopted: bool) {
        if adopted {
            let _ = self.discard(path);
            return;
        }
        let pending = self.dir(State::Pending);
        let returned = (0..PLACE_BACK_TRIES).any(|i| {
            let back = match i {
                0 => original.to_string(),
                i => format!("{original}-{i}"),
            };
            rename_new(path, &pending.join(back)).is_ok()
        });
        if !returned {
            log::error!(
                "{}: cannot put it back into pending/; it waits there",
                path.display()
            );
        }
    }

    /// Removes what submitters that crashed left behind: their hidden
    /// `.submit-*` directories in `pending/`, once nobody could still be
    /// filling them. Never looks inside.
    pub fn sweep_abandoned_submissions(&self) {
        let pending = self.dir(State::Pending);
        let Ok(entries) = fs::read_dir(&pending) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.as_bytes().starts_with(b".submit-") && is_stale(&entry.path()) {
                log::warn!(
                    "pending/{}: a submission its carma submit never finished; removed",
                    name.to_string_lossy()
                );
                let _ = self.discard(&entry.path());
            }
        }
    }
}

/// How long a half-made submission may sit untouched before it counts as
/// abandoned: a `carma submit` takes milliseconds.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Names tried when a submission goes back to `pending/`.
const PLACE_BACK_TRIES: usize = 8;

fn is_stale(path: &Path) -> bool {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().unwrap_or_default() >= ABANDONED_AFTER)
}

/// One drop's claim: the drop, and what was prepared for it in `staging/`
/// (`None`: it vanished first).
type ClaimOutcome = (OsString, Result<Option<Prepared>, SpoolError>);

/// A drop moved into a claim directory of its own, copied (or refused),
/// waiting for its task number.
#[derive(Debug)]
struct Prepared {
    dir: PathBuf,
    drop: OsString,
    /// The drop's name for people (lossy if it was not UTF-8).
    lossy: String,
    /// What the task will be named after.
    stem: String,
    owner: Option<u32>,
    refused: Option<String>,
    copy: Option<JobCopy>,
}

/// The largest job file a claim hands to the intake with the task (see
/// [`JobCopy`]); real ones are a few hundred bytes.
pub(super) const HANDED_JOB_BYTES: usize = 16 * 1024;

/// Prefix of a claim in `staging/` that has no number yet: a crash leaves
/// it without a record, and a starting daemon gives its drop back.
pub(super) const PROVISIONAL: &str = "claiming-";

fn provisional_dir(spool: &Spool) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    spool.staging().join(format!(
        "{PROVISIONAL}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Why an entry that is not a regular file is not a job, by its type.
fn not_a_file(kind: Option<fs::FileType>) -> String {
    use std::os::unix::fs::FileTypeExt;
    let what = match kind {
        Some(k) if k.is_dir() => {
            "a directory that `carma submit` did not make (kept as it came, unopened)"
        }
        Some(k) if k.is_symlink() => "a symbolic link, not a regular file",
        Some(k) if k.is_fifo() => "a FIFO, not a regular file",
        Some(k) if k.is_socket() => "a socket, not a regular file",
        Some(k) if k.is_block_device() || k.is_char_device() => "a device, not a regular file",
        _ => "not a regular file",
    };
    format!("is {what}; carma runs only regular files")
}

/// Threads that claim a batch at once, and the fewest claims worth a
/// thread of their own.
const CLAIM_THREADS: usize = 4;
const CLAIMS_PER_THREAD: usize = 64;

/// Longest file name Linux takes.
pub(super) const NAME_MAX: usize = 255;

/// Removes a claimed drop's original: a file at once (it may be a second
/// name of the job's own file, which must be left with one), anything else
/// by way of the trash (a user's tree may be large).
fn forget_original(spool: &Spool, path: &Path) {
    let is_file = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file());
    let _ = match is_file {
        true => fs::remove_file(path),
        false => spool.discard(path),
    };
}

/// A task directory's leftover original of a claim a crash cut short after
/// the task was placed (before its original's removal), when it is a
/// second name of the job file `job`: removed, so the job's file has one
/// name again. Whether one was.
pub fn forget_linked_original(task_dir: &Path, job: &fs::Metadata) -> bool {
    let linked = fs::read_dir(task_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(ORIGINAL))
        .filter(|e| {
            fs::symlink_metadata(e.path()).is_ok_and(|m| {
                m.file_type().is_file() && m.dev() == job.dev() && m.ino() == job.ino()
            })
        })
        .map(|e| e.path())
        .collect::<Vec<_>>();
    linked.iter().all(|path| fs::remove_file(path).is_ok()) && !linked.is_empty()
}

fn original(dir: &Path, drop: &OsStr) -> std::path::PathBuf {
    let mut name = OsString::from(OsStr::from_bytes(ORIGINAL));
    name.push(drop);
    dir.join(name)
}
