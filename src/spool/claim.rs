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
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path};

use super::record::{self, DROPPED, JOB, Outcome, RECORD, TaskRecord, unix_now};
use super::{
    Claimed, MAX_SUMMARY_BYTES, PRIVATE, Spool, SpoolError, State, TASK_DIR_MODE, TaskName, at,
    make_dir, read_names, rename_new, safe, sync_dir,
};

/// What a batch of claims produced: the tasks made, and the error that
/// stopped the batch early (a full disk, say). Drops not claimed stay in
/// `pending/` for the next try.
#[derive(Debug, Default)]
pub struct ClaimBatch {
    pub claimed: Vec<Claimed>,
    /// Drops that were removed before they could be claimed (their owner
    /// deleted or moved them): nothing to run, but worth saying.
    pub vanished: Vec<String>,
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
        let first = match self.allocate(drops.len() as u64) {
            Ok(first) => first,
            Err(e) => {
                batch.error = Some(e);
                return batch;
            }
        };
        let now = unix_now();
        let jobs: Vec<(u64, &OsString)> = (first..).zip(drops).collect();
        let claim_all = |chunk: &[(u64, &OsString)]| -> Vec<ClaimOutcome> {
            chunk
                .iter()
                .map(|&(seq, drop)| self.claim_numbered(seq, drop, now))
                .collect()
        };
        // Each claim waits on the disk (directories and files made one
        // after another); a large batch overlaps those waits on threads.
        let threads = CLAIM_THREADS.min(jobs.len() / CLAIMS_PER_THREAD).max(1);
        let outcomes: Vec<ClaimOutcome> = match threads {
            1 => claim_all(&jobs),
            _ => std::thread::scope(|scope| {
                let workers: Vec<_> = jobs
                    .chunks(jobs.len().div_ceil(threads))
                    .map(|chunk| scope.spawn(move || claim_all(chunk)))
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_default())
                    .collect()
            }),
        };
        let mut staged = Vec::new();
        for outcome in outcomes {
            match outcome {
                (_, Ok(Some((dir, claimed)))) => staged.push((dir, claimed)),
                (lossy, Ok(None)) => batch.vanished.push(lossy),
                // One drop's trouble does not hold up the others; it stays
                // in pending/ for the next try.
                (_, Err(e)) => batch.error = Some(e),
            }
        }
        if staged.is_empty() {
            return batch;
        }
        // Every copy and record of the batch on disk; only then may the
        // users' originals go.
        let dirs: Vec<&Path> = staged.iter().map(|(dir, _)| dir.as_path()).collect();
        if let Err(e) = make_durable(&self.staging(), &dirs) {
            for (dir, _) in staged {
                self.undo_claim(&dir);
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

    /// Claims one drop as task number `seq` (see [`Spool::claim_one`]),
    /// with the drop's name for people.
    fn claim_numbered(&self, seq: u64, drop: &OsStr, now: f64) -> ClaimOutcome {
        let lossy = drop.to_string_lossy().into_owned();
        let stem = Path::new(&lossy)
            .file_stem()
            .map_or_else(|| lossy.clone(), |s| s.to_string_lossy().into_owned());
        let name = TaskName::new(seq, &stem);
        let dir = self.staging().join(format!("claim-{name}"));
        let claimed = self.claim_one(drop, &name, &dir, now);
        (lossy, claimed.map(|c| c.map(|c| (dir, c))))
    }

    /// Claims one drop into `dir`; `None` if it vanished first. On an
    /// error nothing is left behind: the drop is back in `pending/`.
    fn claim_one(
        &self,
        drop: &OsStr,
        name: &TaskName,
        dir: &Path,
        now: f64,
    ) -> Result<Option<Claimed>, SpoolError> {
        let pending = self.dir(State::Pending);
        let lossy = drop.to_string_lossy().into_owned();
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
        let owner = fs::symlink_metadata(&kept).map(|m| m.uid()).ok();
        let mut record = TaskRecord {
            owner,
            ..TaskRecord::new(name, lossy.clone(), now)
        };
        let refused = match drop.to_str() {
            _ if too_long => Some(format!(
                "its file name is {} bytes long; carma takes names of at most {} bytes",
                drop.len(),
                NAME_MAX - ORIGINAL.len()
            )),
            None => Some(format!(
                "its file name is not UTF-8 (`{lossy}`): rename it and submit it again"
            )),
            Some(_)
                if !lossy.ends_with(".rad")
                    && fs::symlink_metadata(&kept).is_ok_and(|m| m.is_file()) =>
            {
                Some(
                    "not a job file (no `.rad` name), and no job in pending/ named it; kept here. \
                     `carma submit JOB.rad` copies a job and its model summary together"
                        .to_string(),
                )
            }
            Some(file) => match read_job_file(&kept) {
                Err(reason) => Some(reason),
                Ok(bytes) => {
                    if let Err(e) = fill_job(dir, file, &bytes, &pending, owner) {
                        self.undo_claim(dir);
                        return Err(at(dir)(e));
                    }
                    None
                }
            },
        };
        if let Some(reason) = &refused {
            record.outcome = Some(Outcome::failed(reason));
        }
        let written = match &refused {
            Some(reason) if too_long => record::write_reason(dir, owner, reason),
            // Kept as it came, beside the reason.
            Some(reason) => make_dir(&dir.join(DROPPED), 0o700)
                .and_then(|()| rename_new(&kept, &dir.join(DROPPED).join(drop)))
                .and_then(|()| record::write_reason(dir, owner, reason)),
            None => Ok(()),
        }
        .and_then(|()| write_new(&dir.join(RECORD), &record::to_json(&record)));
        if let Err(e) = written {
            self.undo_claim(dir);
            return Err(at(dir)(e));
        }
        Ok(Some(Claimed {
            name: name.clone(),
            file: lossy,
            drop: drop.to_owned(),
            record,
            refused,
        }))
    }

    /// Puts a half-claimed drop back into `pending/` and removes the claim.
    fn undo_claim(&self, dir: &Path) {
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
        if let Err(e) = fs::remove_dir_all(dir) {
            log::warn!("cannot remove {}: {e}", dir.display());
        }
    }

    /// Finishes what a crashed daemon left in `staging/`: a claim whose
    /// record was written moves on (to `pending/`, or `failed/` if it was
    /// refused); an earlier one gives its drop back to `pending/` to be
    /// claimed again; a submission caught in adoption goes back to
    /// `pending/`. Staged submissions are left to their `carma submit`.
    pub fn finish_claims(&self) -> Result<Vec<TaskName>, SpoolError> {
        let staging = self.staging();
        let mut finished = Vec::new();
        let (entries, _) = read_names(&staging)?;
        let claims: Vec<std::path::PathBuf> = entries
            .iter()
            .filter(|e| e.starts_with("claim-"))
            .map(|e| staging.join(e))
            .collect();
        // Copies of a claim cut short by a power loss must be on disk
        // before their originals go.
        let claims: Vec<&Path> = claims.iter().map(|p| p.as_path()).collect();
        make_durable(&staging, &claims).map_err(at(&staging))?;
        for entry in entries {
            if entry.starts_with(super::array::STAGED_ELEMENT) {
                // An array element a crash left unplaced: made again.
                let _ = fs::remove_dir_all(staging.join(&entry));
                continue;
            }
            if let Some(original) = entry.strip_prefix("incoming-") {
                let back = self.dir(State::Pending).join(original);
                if let Err(e) = rename_new(&staging.join(&entry), &back) {
                    log::warn!("staging/{entry}: cannot put it back into pending/: {e}");
                }
                continue;
            }
            let Some(name) = entry.strip_prefix("claim-").and_then(TaskName::parse) else {
                continue;
            };
            let dir = staging.join(&entry);
            let Ok(mut record) = record::read_state::<TaskRecord>(&dir.join(RECORD)) else {
                self.undo_claim(&dir);
                continue;
            };
            let to = match record.outcome {
                Some(_) => State::Failed,
                None => {
                    // The copy is durable (synced above): the original goes.
                    for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                        if entry.file_name().as_bytes().starts_with(ORIGINAL) {
                            let _ = fs::remove_file(entry.path());
                        }
                    }
                    State::Pending
                }
            };
            // Never stops a start: what cannot be placed now stays, whole,
            // for the next one.
            match self.place(&dir, to, &name, Some(&mut record)) {
                Ok(name) if to == State::Pending => finished.push(name),
                Ok(_) => {}
                Err(e) => log::error!("staging/{entry}: cannot finish the claim: {e}"),
            }
        }
        Ok(finished)
    }
}

/// The name a drop has inside its claim until its copy is durable: hidden
/// (never taken for a task's file) and keeping the original name, so an
/// interrupted claim can give it back.
const ORIGINAL: &[u8] = b".orig-";

/// One drop's claim: its name for people, and the task made in its
/// `staging/` directory (`None`: it vanished first).
type ClaimOutcome = (
    String,
    Result<Option<(std::path::PathBuf, Claimed)>, SpoolError>,
);

/// Threads that claim a batch at once, and the fewest claims worth a
/// thread of their own.
const CLAIM_THREADS: usize = 4;
const CLAIMS_PER_THREAD: usize = 64;

/// Longest file name Linux takes.
const NAME_MAX: usize = 255;

fn original(dir: &Path, drop: &OsStr) -> std::path::PathBuf {
    let mut name = OsString::from(OsStr::from_bytes(ORIGINAL));
    name.push(drop);
    dir.join(name)
}

/// Reads a dropped entry as a job file, or says why it cannot be one.
fn read_job_file(path: &Path) -> Result<Vec<u8>, String> {
    let (bytes, meta) = safe::read_regular(path, crate::rad::MAX_FILE_BYTES).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            return "is a symbolic link; carma runs only regular files".to_string();
        }
        let text = e.to_string();
        // The path is carma's staging copy; the user knows the file by name.
        text.rsplit_once(": ")
            .map_or(text.clone(), |(_, why)| why.to_string())
    })?;
    if meta.nlink() > 1 {
        return Err("has other hard links; a job file must be a file of its own".into());
    }
    refuse_shared_writes(&meta)?;
    Ok(bytes)
}

/// A job runs as its file's owner, so its content must be the owner's
/// alone: a file others may write could have been written by them (and
/// moved into `pending/` by them, from a directory both may write).
pub(super) fn refuse_shared_writes(meta: &fs::Metadata) -> Result<(), String> {
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by others than its owner (mode {:o}); a job runs as its file's owner, \
             so only the owner may write it (chmod go-w)",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Writes carma's copies of a job into `dir/job/`: the `.rad` as `file`,
/// and the model summary it names, read below `base` (where the user put
/// both) without following links. A summary found only under a name that
/// differs in case is copied under its own name, where the job's check
/// finds it and says so. A summary that cannot be read, or that belongs to
/// someone other than `owner`, is not copied: the job's check then reports
/// it missing.
pub(super) fn fill_job(
    dir: &Path,
    file: &str,
    bytes: &[u8],
    base: &Path,
    owner: Option<u32>,
) -> io::Result<()> {
    let job = dir.join(JOB);
    make_dir(&job, 0o700)?;
    write_new(&job.join(file), bytes)?;
    let model = crate::rad::parse_bytes(bytes)
        .ok()
        .and_then(|parsed| parsed.spec.model);
    let Some(mut model) = model else {
        return Ok(());
    };
    let mut read = safe::read_beneath(base, &model, MAX_SUMMARY_BYTES);
    if read
        .as_ref()
        .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
    {
        if let Some(found) = crate::rad::case_match(base, &model) {
            read = safe::read_beneath(base, &found, MAX_SUMMARY_BYTES);
            model = found;
        }
    }
    let summary = match read {
        Ok((summary, meta)) if Some(meta.uid()) == owner || owner.is_none() => summary,
        Ok((_, meta)) => {
            log::warn!(
                "{file}: the model summary {model} belongs to uid {}, not to the job's owner; \
                 not used",
                meta.uid()
            );
            return Ok(());
        }
        Err(_) => return Ok(()),
    };
    let target = job.join(&model);
    let mut made = job.clone();
    if let Some(parent) = Path::new(&model).parent() {
        for part in parent.components() {
            if let Component::Normal(part) = part {
                made.push(part);
                if !made.is_dir() {
                    make_dir(&made, 0o700)?;
                }
            }
        }
    }
    write_new(&target, &summary)
}

/// Creates a private file that must not exist yet, without syncing it (the
/// caller syncs a whole batch).
pub(super) fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    file.write_all(bytes)
}

/// Claims made in fewer directories than this are flushed file by file;
/// more at once, by one flush of the file system.
const SYNCFS_FROM: usize = 16;

/// Puts the trees `dirs` (made in `parent`) on disk. A few are fsynced
/// file by file and directory by directory: a flush of the whole file
/// system would also wait for whatever else is being written there (jobs'
/// checkpoints, on a busy server). A burst of many is flushed with one
/// `syncfs`, which costs less than thousands of fsyncs.
pub(super) fn make_durable(parent: &Path, dirs: &[&Path]) -> io::Result<()> {
    if dirs.is_empty() {
        return Ok(());
    }
    if dirs.len() >= SYNCFS_FROM {
        let file = fs::File::open(parent)?;
        return nix::unistd::syncfs(file.as_fd()).map_err(io::Error::from);
    }
    for dir in dirs {
        sync_tree(dir)?;
    }
    sync_dir(parent)
}

/// fsync of every file and directory below `dir`, then of `dir` itself;
/// links and other entries are left alone (they are not carma's writes).
pub(super) fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            sync_tree(&entry.path())?;
        } else if kind.is_file() && !entry.file_name().as_bytes().starts_with(ORIGINAL) {
            fs::File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(dir)
}
