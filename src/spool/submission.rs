//! Submissions: task directories handed in through `carma submit`.
//!
//! carma's own user (root on a server) stages a task whole in `staging/`
//! and renames it into `pending/` under a number it allocated. Anyone else
//! cannot write there: their `carma submit` builds a directory of its own
//! inside `pending/` under a hidden name, then renames it to a visible
//! `submit-…` name. The daemon never uses such a directory in place (its
//! owner could change it at any moment): it moves it aside, copies the
//! `.rad` and model summary into a task directory of its own under a
//! number it allocates (a user never picks their place in the queue), and
//! records the directory's owner as the job's user.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::durable::{make_durable, make_trees_durable, write_new};
use super::job_copy::fill_job;
use super::record::{self, DROPPED, Outcome, RECORD, TaskRecord, unix_now};
use super::socket::Job;
use super::{
    Claimed, JobCopy, Spool, SpoolError, State, TASK_DIR_MODE, TaskName, at, make_dir, rename_new,
    sync_dir,
};
use crate::rad::{DependencyRef, TaskSpec};
use crate::safe;

/// The file a user's submission describes itself in. Named apart from
/// carma's `task.json`: what it says is a request, never state.
pub const SUBMISSION: &str = "submission.json";

/// What a user's `submission.json` may ask for.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Request {
    /// The `.rad` file's name in the directory.
    rad: Option<String>,
    /// Where the job should run (it is entered as the job's user, so it can
    /// only be a directory that user may enter).
    workdir: Option<PathBuf>,
    /// The submitter's umask, for the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    umask: Option<u32>,
    /// Dependencies given on the command line (`--afterok 12`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    after: Vec<DependencyRef>,
}

/// A job `carma submit` handed over.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The task's name, when the submitter could give it (carma's own
    /// user); others learn it once the daemon takes the submission in.
    pub name: Option<TaskName>,
    /// The submission's name in `pending/`.
    pub entry: String,
}

/// The prefix of a submission's name in `staging/` while it is adopted.
pub(super) const INCOMING: &str = "incoming-";

/// Whether a directory named `entry` in `pending/` can be adopted: its name
/// in `staging/` must be a name the file system takes. A longer one is
/// claimed instead, and set aside with the reason.
pub fn adoptable(entry: &str) -> bool {
    INCOMING.len() + entry.len() <= super::claim::NAME_MAX
}

impl Spool {
    /// Takes in a directory that someone other than carma made in
    /// `pending/` (see the module documentation). A submission that cannot
    /// be used becomes a task in `failed/` holding it, with the reason
    /// (returned as [`SpoolError::Refused`]). On an I/O error (a full disk)
    /// the submission is put back where it was, to be taken again later.
    pub fn adopt_submission(&self, entry: &str) -> Result<Claimed, SpoolError> {
        let incoming = self.staging().join(format!("{INCOMING}{entry}"));
        let pending = self.dir(State::Pending).join(entry);
        rename_new(&pending, &incoming).map_err(at(&pending))?;
        let owner = fs::symlink_metadata(&incoming)
            .map_err(at(&incoming))?
            .uid();
        let read = read_submission(&incoming, owner);
        let stem = match &read {
            Ok(s) => super::job_copy::job_name(&s.rad_bytes)
                .unwrap_or_else(|| s.rad.trim_end_matches(".rad").to_string()),
            Err(_) => entry.to_string(),
        };
        let adopted = self
            .allocate(1)
            .and_then(|seq| self.adopt_into(entry, &incoming, owner, read, &stem, seq));
        if let Err(SpoolError::Io { .. }) = &adopted
            && let Err(e) = rename_new(&incoming, &pending)
        {
            log::error!("pending/{entry}: cannot put it back ({e}); it waits in staging/");
        }
        adopted
    }

    fn adopt_into(
        &self,
        entry: &str,
        incoming: &Path,
        owner: u32,
        read: Result<Submission, String>,
        stem: &str,
        seq: u64,
    ) -> Result<Claimed, SpoolError> {
        let name = TaskName::new(seq, stem);
        let dir = self.staging().join(format!("claim-{name}"));
        make_dir(&dir, TASK_DIR_MODE).map_err(at(&dir))?;
        let mut record = TaskRecord {
            owner: Some(owner),
            submitted_as: Some(entry.to_string()),
            ..TaskRecord::new(&name, "", unix_now())
        };
        let mut copied = 0;
        let made = match &read {
            Ok(submission) => {
                record.rad = submission.rad.clone();
                record.workdir = submission.workdir.clone();
                record.umask = submission.umask;
                record.submitted_after = submission.after.clone();
                fill_job(
                    &dir,
                    &submission.rad,
                    &submission.rad_bytes,
                    None,
                    incoming,
                    Some(owner),
                )
                .map(|bytes| copied = bytes)
            }
            Err(reason) => {
                record.outcome = Some(Outcome::failed(reason));
                record::write_reason(&dir, Some(owner), reason)
            }
        }
        .and_then(|()| write_new(&dir.join(RECORD), &record::to_json(&record)))
        .and_then(|()| make_durable(&self.staging(), &[&dir]));
        if let Err(e) = made {
            let _ = self.discard(&dir);
            return Err(at(&dir)(e));
        }
        let to = match &read {
            Ok(_) => State::Pending,
            Err(_) => {
                // The submission is kept, as it was, beside the reason.
                make_dir(&dir.join(DROPPED), 0o700)
                    .and_then(|()| rename_new(incoming, &dir.join(DROPPED).join(entry)))
                    .map_err(at(&dir))?;
                State::Failed
            }
        };
        let name = match self.place(&dir, to, &name, Some(&mut record)) {
            Ok(name) => name,
            Err(e) => {
                // Nothing half-made stays behind to be finished (and run)
                // a second time by the next start.
                if to == State::Failed {
                    let _ = rename_new(&dir.join(DROPPED).join(entry), incoming);
                }
                let _ = self.discard(&dir);
                return Err(e);
            }
        };
        if to == State::Pending {
            // The user's tree, however deep: out of the way in one rename.
            if let Err(e) = self.discard(incoming) {
                log::warn!("cannot remove {}: {e}", incoming.display());
            }
        }
        match read {
            Ok(submission) => Ok(Claimed {
                file: record.rad.clone(),
                drop: entry.into(),
                name,
                record,
                refused: None,
                copy: Some(JobCopy {
                    rad: submission.rad_bytes,
                    bytes: copied,
                }),
            }),
            Err(reason) => Err(SpoolError::Refused { name, reason }),
        }
    }

    /// Submits checked jobs: each one's `.rad` and model summary are
    /// copied into a directory that is renamed into `pending/` whole, so
    /// the daemon never sees half a task. The jobs of one call share their
    /// durability (a group commit): all are staged, flushed together (one
    /// `syncfs` for a burst, see `make_durable`), renamed one by one,
    /// and `pending/` is flushed once, so a hundred files cost little more
    /// than one. None is submitted when one cannot be staged. Success is
    /// reported once the renames are done: a later durability step that
    /// fails (a user cannot fsync `pending/`, which they may not read) is a
    /// warning, never a failure that would make the user submit the jobs
    /// twice.
    pub fn submit(
        &self,
        jobs: &[(&Path, &TaskSpec)],
        after: &[DependencyRef],
    ) -> Result<Batch, SpoolError> {
        let own_spool = self.is_mine();
        let first = match own_spool && !jobs.is_empty() {
            true => Some(self.allocate(jobs.len() as u64)?),
            false => None,
        };
        let mut staged: Vec<Staged> = Vec::new();
        let unstage = |staged: &[Staged]| {
            for job in staged {
                let _ = fs::remove_dir_all(&job.dir);
            }
        };
        for (i, (rad, spec)) in jobs.iter().enumerate() {
            match self.stage(rad, spec, after, first.map(|f| f + i as u64)) {
                Ok(job) => staged.push(job),
                Err(e) => {
                    unstage(&staged);
                    return Err(e);
                }
            }
        }
        let pending = self.dir(State::Pending);
        let dirs: Vec<&Path> = staged.iter().map(|job| job.dir.as_path()).collect();
        // carma's own submissions: only the trees, since the directory
        // they are staged in is left by the renames and `pending/` is
        // flushed after them. Anyone else's are flushed only if the
        // daemon does not take them in ([`Batch::flush`]). The handle is
        // held across the renames: once in pending/ the daemon may claim
        // an entry at once, and a flush after must not need its path.
        let trees = match own_spool {
            true => make_trees_durable(&dirs),
            false => Ok(()),
        };
        let handle = trees.and_then(|()| dirs.first().map(File::open).transpose());
        let handle = match handle {
            Ok(handle) => handle,
            Err(e) => {
                let failed = dirs
                    .first()
                    .map_or_else(|| pending.clone(), |d| d.to_path_buf());
                unstage(&staged);
                return Err(at(&failed)(e));
            }
        };
        let mut batch = Batch::default();
        let mut jobs = staged.into_iter();
        for job in jobs.by_ref() {
            let placed = match &job.name {
                Some(name) => self.place(&job.dir, State::Pending, name, None).map(Some),
                None => rename_new(&job.dir, &pending.join(&job.entry))
                    .map(|()| None)
                    .map_err(at(&job.dir)),
            };
            match placed {
                Ok(name) => batch.submitted.push(Submitted {
                    entry: name.as_ref().map_or(job.entry, ToString::to_string),
                    name,
                }),
                Err(e) => {
                    let _ = fs::remove_dir_all(&job.dir);
                    batch.failed = Some(e);
                    break;
                }
            }
        }
        unstage(jobs.as_slice());
        match (handle, batch.submitted.is_empty(), own_spool) {
            (Some(handle), false, true) => {
                batch.warning = durable_entry(&pending, &handle).err().map(not_durable);
            }
            (Some(handle), false, false) => batch.unflushed = Some(handle),
            _ => {}
        }
        Ok(batch)
    }

    /// One job's directory, made in `staging/` (carma's own user, under
    /// task number `number`) or under a hidden name in `pending/`
    /// (anyone else), not yet flushed.
    fn stage(
        &self,
        rad: &Path,
        spec: &TaskSpec,
        after: &[DependencyRef],
        number: Option<u64>,
    ) -> Result<Staged, SpoolError> {
        let read = read_job(rad, spec)?;
        let (file_name, bytes, meta) = (read.file_name, read.bytes, read.meta);
        let rad_dir = read.rad_dir.as_path();
        let (dir, entry, name) = match number {
            Some(number) => {
                let name = TaskName::new(number, &read.stem);
                let dir = self.staging().join(format!("submit-{name}"));
                (dir, name.to_string(), Some(name))
            }
            None => {
                let token = format!(
                    "submit-{}-{}-{}",
                    nix::unistd::geteuid(),
                    std::process::id(),
                    unix_now().to_bits()
                );
                (
                    self.dir(State::Pending).join(format!(".{token}")),
                    token,
                    None,
                )
            }
        };
        let made = match &name {
            Some(name) => {
                // carma's own record: the job runs as the file's owner.
                let record = TaskRecord {
                    owner: Some(meta.uid()),
                    workdir: Some(read.workdir.clone()),
                    umask: Some(super::umask()),
                    submitted_after: after.to_vec(),
                    ..TaskRecord::new(name, file_name.clone(), unix_now())
                };
                make_dir(&dir, TASK_DIR_MODE)
                    .and_then(|()| {
                        fill_job(&dir, &file_name, &bytes, None, rad_dir, Some(meta.uid()))
                            .map(|_| ())
                    })
                    .and_then(|()| write_new(&dir.join(RECORD), &record::to_json(&record)))
            }
            None => {
                let request = Request {
                    rad: Some(file_name.clone()),
                    workdir: Some(read.workdir.clone()),
                    umask: Some(super::umask()),
                    after: after.to_vec(),
                };
                make_dir(&dir, 0o700)
                    .and_then(|()| copy_user_files(&dir, &file_name, &bytes, rad_dir, spec))
                    .and_then(|()| write_new(&dir.join(SUBMISSION), &record::to_json(&request)))
            }
        };
        if let Err(e) = made {
            let _ = fs::remove_dir_all(&dir);
            return Err(at(&dir)(e));
        }
        Ok(Staged { dir, entry, name })
    }
}

/// A job file as `carma submit` reads it, once, for either path.
struct ReadJob {
    file_name: String,
    /// What its task is named after.
    stem: String,
    /// The directory it is in, as given, and as an absolute path (where
    /// the job runs).
    rad_dir: PathBuf,
    workdir: PathBuf,
    bytes: Vec<u8>,
    meta: fs::Metadata,
}

/// Reads the job file `rad` (checked as `spec`): never through a link,
/// and, when carma's own user submits another user's file, only one that
/// user alone can write.
fn read_job(rad: &Path, spec: &TaskSpec) -> Result<ReadJob, SpoolError> {
    let file_name = rad
        .file_name()
        .map_or_else(|| "job.rad".into(), |n| n.to_string_lossy().into_owned());
    let stem = spec
        .name
        .clone()
        .unwrap_or_else(|| file_name.trim_end_matches(".rad").to_string());
    let rad_dir = rad
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let workdir = fs::canonicalize(&rad_dir).map_err(at(&rad_dir))?;
    // Never through a link: root submitting a user's file must not be
    // led to another user's.
    if fs::symlink_metadata(rad).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(SpoolError::Io {
            path: rad.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "is a symbolic link; submit the file itself",
            ),
        });
    }
    let (bytes, meta) = safe::read_regular(rad, crate::rad::MAX_FILE_BYTES).map_err(at(rad))?;
    if owned_by_someone_else(&meta) {
        super::job_copy::refuse_shared_writes(&meta).map_err(|why| SpoolError::Io {
            path: rad.to_owned(),
            source: io::Error::new(io::ErrorKind::PermissionDenied, why),
        })?;
    }
    Ok(ReadJob {
        file_name,
        stem,
        rad_dir,
        workdir,
        bytes,
        meta,
    })
}

impl Spool {
    /// Whether this process runs as the spool's owner (carma's own user),
    /// who makes whole tasks in it by itself.
    pub fn is_mine(&self) -> bool {
        fs::metadata(self.staging()).is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
    }

    /// A checked job as it is handed over the submission socket
    /// ([`super::socket`]): read as for the file path, with the model
    /// summary it names. carma's own user says whom the job runs as (the
    /// file's owner, whose summary alone is taken); anyone else's jobs
    /// are their own. `None` when the job cannot go that way (a file name
    /// the socket does not take): it goes by the file path.
    pub fn socket_job(&self, rad: &Path, spec: &TaskSpec) -> Result<Option<Job>, SpoolError> {
        let read = read_job(rad, spec)?;
        if super::socket::check_rad_name(&read.file_name).is_err() {
            return Ok(None);
        }
        let owner = self.is_mine().then_some(read.meta.uid());
        let summary =
            super::job_copy::summary_beneath(&read.file_name, &read.bytes, &read.rad_dir, owner);
        Ok(Some(Job {
            rad: read.file_name,
            rad_bytes: read.bytes,
            summary,
            workdir: Some(read.workdir),
            umask: Some(super::umask()),
            owner,
        }))
    }
}

/// A job's directory made and not yet in `pending/`.
struct Staged {
    dir: PathBuf,
    /// Its name in `pending/` to be.
    entry: String,
    name: Option<TaskName>,
}

/// What one `carma submit` handed over.
#[derive(Debug, Default)]
pub struct Batch {
    /// In the order given; the jobs after one that could not be placed are
    /// not submitted.
    pub submitted: Vec<Submitted>,
    /// Why the rest was not submitted.
    pub failed: Option<SpoolError>,
    /// A step after the submissions that could not be taken (making the
    /// renames durable): the jobs are submitted all the same.
    pub warning: Option<String>,
    /// A user's submissions, not flushed: the daemon's claim puts a copy
    /// on disk before it names the task (the name is the receipt), so
    /// flushing the user's copy too only made the submitter wait. One
    /// that gets no name in time is flushed by [`Batch::flush`] before the
    /// command reports it submitted.
    unflushed: Option<File>,
}

impl Batch {
    /// Puts on disk the submissions the daemon did not name (a flush of
    /// the file system through one of them: a user may not open
    /// `pending/`); a warning when that fails.
    pub fn flush(&mut self) -> Option<String> {
        let handle = self.unflushed.take()?;
        nix::unistd::syncfs(handle.as_fd())
            .map_err(io::Error::from)
            .err()
            .map(not_durable)
    }
}

/// The warning for submissions that could not be made durable.
fn not_durable(e: io::Error) -> String {
    format!(
        "submitted, but the submissions could not be made durable ({e}); \
         a power loss now could lose them"
    )
}

/// Whether a file carma's own user submits belongs to someone else (root
/// submitting a user's job): its content must then be that user's alone.
fn owned_by_someone_else(meta: &fs::Metadata) -> bool {
    meta.uid() != nix::unistd::geteuid().as_raw()
}

/// Makes a rename into `dir` durable: fsync of `dir`, or, where this user
/// may not open it (`pending/` is 1733), a flush of its whole file system
/// through the entry, opened before the rename (the daemon may have moved
/// it on since).
fn durable_entry(dir: &Path, entry: &File) -> io::Result<()> {
    match sync_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            nix::unistd::syncfs(entry.as_fd()).map_err(io::Error::from)
        }
        Err(e) => Err(e),
    }
}

/// A user's own copy of their job for the daemon to take: the `.rad` and
/// its model summary, at the path the `.rad` names.
fn copy_user_files(
    dir: &Path,
    file: &str,
    bytes: &[u8],
    rad_dir: &Path,
    spec: &TaskSpec,
) -> io::Result<()> {
    write_new(&dir.join(file), bytes)?;
    if let Some(model) = &spec.model {
        let (summary, _) = safe::read_beneath(rad_dir, model, super::MAX_SUMMARY_BYTES)?;
        let target = dir.join(model);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        write_new(&target, &summary)?;
    }
    Ok(())
}

/// What a submitted directory holds that carma uses.
#[derive(Debug)]
struct Submission {
    rad: String,
    rad_bytes: Vec<u8>,
    workdir: Option<PathBuf>,
    umask: Option<u32>,
    after: Vec<DependencyRef>,
}

/// Reads a submitted directory owned by `owner`; the error is the reason
/// it cannot be used.
fn read_submission(dir: &Path, owner: u32) -> Result<Submission, String> {
    // Whoever else could write in it could have written the job: a job
    // runs as the directory's owner, so everything in it must be theirs.
    let meta = fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    super::job_copy::refuse_shared_writes(&meta)
        .map_err(|why| format!("the submitted directory {why}"))?;
    let request: Request = match safe::read_beneath(dir, SUBMISSION, 1 << 20) {
        Ok((bytes, meta)) => {
            if meta.uid() != owner {
                return Err(format!(
                    "{SUBMISSION} belongs to uid {}, the directory to uid {owner}",
                    meta.uid()
                ));
            }
            super::job_copy::refuse_shared_writes(&meta)
                .map_err(|why| format!("{SUBMISSION} {why}"))?;
            serde_json::from_slice(&bytes).map_err(|e| format!("{SUBMISSION}: {e}"))?
        }
        Err(_) => Request::default(),
    };
    let rad = match request.rad {
        Some(rad) => rad,
        None => {
            // Named in the reason: a few, whatever the directory holds
            // (its names are its owner's, as many and as long as they
            // like).
            const NAMED: usize = 4;
            // Looked at on the daemon's loop: a directory of millions of
            // names (hard links cost their owner nothing) is not listed
            // to its end.
            const LISTED: usize = 4096;
            let mut rads = Vec::new();
            let mut count = 0usize;
            let listing = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for (seen, entry) in listing.enumerate() {
                if seen == LISTED {
                    return Err(format!(
                        "the submitted directory holds more than {LISTED} names and no \
                         {SUBMISSION} naming its job"
                    ));
                }
                let name = entry
                    .map_err(|e| format!("{}: {e}", dir.display()))?
                    .file_name();
                match name.to_str() {
                    Some(name) if name.ends_with(".rad") && !name.starts_with('.') => {
                        count += 1;
                        if rads.len() < NAMED {
                            rads.push(name.to_owned());
                        }
                    }
                    _ => {}
                }
            }
            match (count, &rads[..]) {
                (1, [one]) => one.clone(),
                (0, _) => return Err("the submitted directory holds no .rad file".into()),
                _ => {
                    let more = count - rads.len();
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    return Err(format!(
                        "the submitted directory holds {count} .rad files: {}{more}",
                        rads.iter()
                            .map(|r| crate::shell::quote(r))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
        }
    };
    super::socket::check_rad_name(&rad)?;
    let (rad_bytes, meta) = safe::read_beneath(dir, &rad, crate::rad::MAX_FILE_BYTES)
        .map_err(|e| format!("{rad}: {e}"))?;
    if meta.uid() != owner {
        return Err(format!(
            "{rad} belongs to uid {}, the directory to uid {owner}: a job runs as the owner of both",
            meta.uid()
        ));
    }
    if meta.nlink() > 1 {
        return Err(format!(
            "{rad} has other hard links; submit a file of its own"
        ));
    }
    super::job_copy::refuse_shared_writes(&meta).map_err(|why| format!("{rad} {why}"))?;
    let workdir = match request.workdir {
        Some(dir) if dir.is_absolute() => Some(dir),
        Some(dir) => {
            return Err(format!(
                "the working directory {} is not an absolute path",
                dir.display()
            ));
        }
        None => None,
    };
    let after = checked_dependencies(SUBMISSION, request.after)?;
    Ok(Submission {
        rad,
        rad_bytes,
        workdir,
        umask: request.umask.map(|m| m & 0o777),
        after,
    })
}

/// A submission's own dependencies, held to the rules of a job file's
/// (a user wrote them): at most as many as one `afterok:` line takes, each
/// a task reference that line would accept. `what` says where they came
/// from.
pub(super) fn checked_dependencies(
    what: &str,
    after: Vec<DependencyRef>,
) -> Result<Vec<DependencyRef>, String> {
    if after.len() > crate::rad::MAX_DEPENDENCIES {
        return Err(format!(
            "{what}: {} dependencies; at most {} are taken",
            after.len(),
            crate::rad::MAX_DEPENDENCIES
        ));
    }
    for dependency in &after {
        let text = dependency.task.to_string();
        let again = crate::rad::dependencies(dependency.kind, &text)
            .map_err(|why| format!("{what}: {}: {why}", dependency.kind.key()))?;
        if again != [dependency.clone()] {
            return Err(format!(
                "{what}: {}: `{}` is not one task",
                dependency.kind.key(),
                crate::rad::clip(&text)
            ));
        }
    }
    Ok(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_many_job_files_is_refused_with_a_reason_of_a_few_names() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(200);
        for i in 0..50 {
            fs::write(dir.path().join(format!("{long}{i:02}.rad")), "").unwrap();
        }
        fs::write(dir.path().join(".hidden.rad"), "").unwrap();
        let owner = nix::unistd::geteuid().as_raw();
        let why = read_submission(dir.path(), owner).err().unwrap();
        assert!(
            why.starts_with("the submitted directory holds 50 .rad files: "),
            "{why}"
        );
        assert!(why.ends_with(" and 46 more"), "{why}");
        assert!(why.len() < 1000, "{} bytes", why.len());
    }

    #[test]
    fn a_directory_of_very_many_names_is_not_listed_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("job.rad"), "").unwrap();
        for i in 0..5000 {
            fs::hard_link(dir.path().join("job.rad"), dir.path().join(format!("n{i}"))).unwrap();
        }
        let owner = nix::unistd::geteuid().as_raw();
        let why = read_submission(dir.path(), owner).err().unwrap();
        assert!(why.contains("more than 4096 names"), "{why}");
    }
}
