//! The spool: a directory tree that *is* the queue's state.
//!
//! ```text
//! <spool>/
//!   pending/    tasks waiting for a GPU; users drop .rad files here too
//!   running/    tasks whose job runs now
//!   recovery/   tasks that crashed with OOM and wait to re-run
//!   done/       tasks that exited 0
//!   failed/     tasks that failed, were cancelled, or could not be read
//!   staging/    half-made tasks (`carma submit`, claims of dropped files)
//!   cancel/     cancellation requests, one empty file per task name
//!   next-id     the next task number (locked while allocating)
//!   daemon.lock held by the one daemon serving this spool
//!   status.json the daemon's view, refreshed every second
//! ```
//!
//! A task is a directory (see [`record`] for its contents) and changes
//! state by exactly one `rename` of that directory, so a crash at any
//! moment leaves every task in exactly one state directory, whole. Nothing
//! else is authoritative: a daemon that starts rebuilds everything from
//! these directories.

mod atomic;
mod name;
pub mod record;
pub mod safe;

use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fs2::FileExt;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use thiserror::Error;

pub use atomic::{sync_dir, write_durable, write_replace};
pub use name::TaskName;
use record::{TaskRecord, unix_now, write_json};

use crate::rad::TaskSpec;

/// The state directories, in the order a task moves through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    Pending,
    Running,
    Recovery,
    Done,
    Failed,
}

impl State {
    pub const ALL: [State; 5] = [
        State::Pending,
        State::Running,
        State::Recovery,
        State::Done,
        State::Failed,
    ];

    /// The directory's name.
    pub fn dir_name(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Recovery => "recovery",
            State::Done => "done",
            State::Failed => "failed",
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// Spool failures that stop the command at hand.
#[derive(Debug, Error)]
pub enum SpoolError {
    #[error("spool {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "another carma daemon (pid {pid}) already serves the spool {}; \
         one daemon per spool",
        spool.display()
    )]
    Locked { spool: PathBuf, pid: String },
    #[error("no task `{query}` in the spool {}", spool.display())]
    NotFound { spool: PathBuf, query: String },
    #[error("`{query}` names several tasks: {}", names.join(", "))]
    Ambiguous { query: String, names: Vec<String> },
    #[error("{name}: refused: {reason}")]
    Refused { name: TaskName, reason: String },
}

/// Attaches the path to an I/O error.
fn at(path: &Path) -> impl FnOnce(io::Error) -> SpoolError + '_ {
    move |source| SpoolError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What a state directory holds.
#[derive(Debug, Default)]
pub struct Listing {
    /// Task directories, in task-number order.
    pub tasks: Vec<TaskName>,
    /// Other visible entries: in `pending/`, files users dropped.
    pub drops: Vec<String>,
}

/// Held for the daemon's lifetime; dropping it releases the spool.
#[derive(Debug)]
pub struct SpoolLock {
    _file: File,
}

/// A dropped file that became a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub name: TaskName,
    /// The file's name inside the task directory (as it was dropped).
    pub file: String,
    /// Its `task.json`, as written.
    pub record: TaskRecord,
}

/// A spool directory tree.
#[derive(Debug, Clone)]
pub struct Spool {
    root: PathBuf,
}

impl Spool {
    pub fn new(root: impl Into<PathBuf>) -> Spool {
        Spool { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates any missing directory of the tree.
    pub fn create(&self) -> Result<(), SpoolError> {
        for dir in State::ALL
            .iter()
            .map(|&s| self.dir(s))
            .chain([self.staging(), self.cancel_dir()])
        {
            fs::create_dir_all(&dir).map_err(at(&dir))?;
        }
        Ok(())
    }

    pub fn dir(&self, state: State) -> PathBuf {
        self.root.join(state.dir_name())
    }

    pub fn task_dir(&self, state: State, name: &TaskName) -> PathBuf {
        self.dir(state).join(name.as_str())
    }

    pub fn staging(&self) -> PathBuf {
        self.root.join("staging")
    }

    /// Where `carma cancel` leaves requests for the daemon.
    pub fn cancel_dir(&self) -> PathBuf {
        self.root.join("cancel")
    }

    /// The daemon's status file.
    pub fn status_file(&self) -> PathBuf {
        self.root.join("status.json")
    }

    /// Takes the one-daemon-per-spool lock, or says who holds it.
    pub fn lock(&self) -> Result<SpoolLock, SpoolError> {
        let path = self.root.join("daemon.lock");
        let mut file = open_lock_file(&path).map_err(at(&path))?;
        if file.try_lock_exclusive().is_err() {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(SpoolError::Locked {
                spool: self.root.clone(),
                pid: pid.trim().to_owned(),
            });
        }
        file.set_len(0).map_err(at(&path))?;
        write!(file, "{}", std::process::id()).map_err(at(&path))?;
        Ok(SpoolLock { _file: file })
    }

    /// Whether a daemon holds this spool's lock now.
    pub fn daemon_running(&self) -> bool {
        is_locked(&self.root.join("daemon.lock"))
    }

    /// Reserves `count` consecutive task numbers and returns the first.
    /// Safe across processes (`carma submit` and the daemon allocate
    /// concurrently); a lost or damaged counter is rebuilt from the
    /// highest number in the tree.
    pub fn allocate(&self, count: u64) -> Result<u64, SpoolError> {
        let path = self.root.join("next-id");
        let mut file = open_lock_file(&path).map_err(at(&path))?;
        file.lock_exclusive().map_err(at(&path))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(at(&path))?;
        let next = match text.trim().parse::<u64>() {
            Ok(next) => next,
            Err(_) => self.highest_seq()? + 1,
        };
        file.seek(io::SeekFrom::Start(0)).map_err(at(&path))?;
        file.set_len(0).map_err(at(&path))?;
        writeln!(file, "{}", next + count).map_err(at(&path))?;
        file.sync_data().map_err(at(&path))?;
        Ok(next)
    }

    /// The highest task number anywhere in the tree (0 if none).
    fn highest_seq(&self) -> Result<u64, SpoolError> {
        let mut highest = 0;
        for dir in State::ALL
            .iter()
            .map(|&s| self.dir(s))
            .chain([self.staging()])
        {
            for entry in read_names(&dir)? {
                let bare = entry
                    .strip_prefix("claim-")
                    .or_else(|| entry.strip_prefix("submit-"))
                    .unwrap_or(&entry);
                if let Some(name) = TaskName::parse(bare) {
                    highest = highest.max(name.seq());
                }
            }
        }
        Ok(highest)
    }

    /// The tasks and other entries of a state directory. Hidden entries
    /// (editors' and carma's temporaries) are skipped.
    pub fn list(&self, state: State) -> Result<Listing, SpoolError> {
        let mut listing = Listing::default();
        for entry in read_names(&self.dir(state))? {
            match TaskName::parse(&entry) {
                Some(name) => listing.tasks.push(name),
                None => listing.drops.push(entry),
            }
        }
        listing.tasks.sort();
        listing.drops.sort();
        Ok(listing)
    }

    /// Moves a task between states: one `rename` that never replaces an
    /// existing directory. Both directories are synced so the move survives
    /// a power loss.
    pub fn move_task(&self, name: &TaskName, from: State, to: State) -> io::Result<()> {
        self.move_task_unsynced(name, from, to)?;
        sync_dir(&self.dir(to))?;
        sync_dir(&self.dir(from))
    }

    /// [`Spool::move_task`] without the directory syncs, for a caller that
    /// syncs later (the launch path starts the job first).
    pub fn move_task_unsynced(&self, name: &TaskName, from: State, to: State) -> io::Result<()> {
        rename_new(&self.task_dir(from, name), &self.task_dir(to, name))
    }

    /// Turns files dropped into `pending/` into task directories: each file
    /// moves into a new `staging/claim-<name>/`, which then moves into
    /// `pending/<name>/`. The task's record is returned, not written: until
    /// the task first runs, everything in it is known from the directory
    /// (its creation time is the submission time), and a burst of 10,000
    /// drops then costs 10,000 fewer files. A file that vanished meanwhile is
    /// skipped. Whatever the file is (a symbolic link, a FIFO), it is moved,
    /// never opened here: judging it is the caller's business.
    pub fn claim(&self, drops: &[String]) -> Result<Vec<Claimed>, SpoolError> {
        if drops.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.allocate(drops.len() as u64)?;
        let pending = self.dir(State::Pending);
        let staging = self.staging();
        let now = unix_now();
        let mut claimed = Vec::with_capacity(drops.len());
        for (seq, file) in (first..).zip(drops) {
            let stem = Path::new(file)
                .file_stem()
                .map_or_else(|| file.clone(), |s| s.to_string_lossy().into_owned());
            let name = TaskName::new(seq, &stem);
            let dir = staging.join(format!("claim-{name}"));
            fs::create_dir(&dir).map_err(at(&dir))?;
            match fs::rename(pending.join(file), dir.join(file)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let _ = fs::remove_dir(&dir);
                    continue;
                }
                Err(e) => {
                    let _ = fs::remove_dir(&dir);
                    return Err(at(&pending)(e));
                }
            }
            let owner = fs::symlink_metadata(dir.join(file)).ok().map(|m| m.uid());
            let record = TaskRecord {
                owner,
                ..TaskRecord::new(&name, file.clone(), now)
            };
            claimed.push(Claimed {
                name,
                file: file.clone(),
                record,
            });
        }
        for c in &claimed {
            let dir = staging.join(format!("claim-{}", c.name));
            rename_new(&dir, &pending.join(c.name.as_str())).map_err(at(&dir))?;
        }
        sync_dir(&pending).map_err(at(&pending))?;
        sync_dir(&staging).map_err(at(&staging))?;
        Ok(claimed)
    }

    /// Takes in a directory that appeared in `pending/` but that the daemon
    /// may not trust: one another user made (`carma submit` runs as the
    /// user, or a directory was moved in by hand). The user could change
    /// anything in it at any moment, so nothing is used in place: the
    /// directory is moved aside, its `.rad` (the only one, owned by the
    /// directory's owner, not hard-linked) and the model summary that
    /// names are read without following links, copied into a new task
    /// directory made by the daemon, and recorded with the directory's
    /// owner as the job's user. Only `workdir` and `submitted_at` are taken
    /// from the user's `task.json`. The submitted name is kept unless
    /// `taken` says its number is in use. A submission that cannot be used
    /// becomes a task in `failed/` holding it, with the reason.
    pub fn adopt_submission(
        &self,
        entry: &str,
        taken: impl Fn(&TaskName) -> bool,
    ) -> Result<Claimed, SpoolError> {
        let incoming = self.staging().join(format!("incoming-{entry}"));
        rename_new(&self.dir(State::Pending).join(entry), &incoming).map_err(at(&incoming))?;
        let owner = fs::symlink_metadata(&incoming)
            .map_err(at(&incoming))?
            .uid();
        let submitted = TaskName::parse(entry).filter(|n| !taken(n));
        match read_submission(&incoming, owner) {
            Ok(submission) => {
                let name = match submitted {
                    Some(name) => name,
                    None => TaskName::new(self.allocate(1)?, stem_of(&submission.rad)),
                };
                let dir = self.staging().join(format!("claim-{name}"));
                fs::create_dir(&dir).map_err(at(&dir))?;
                let record = TaskRecord {
                    owner: Some(owner),
                    workdir: submission.workdir,
                    ..TaskRecord::new(&name, submission.rad.clone(), submission.submitted_at)
                };
                let mut files = vec![(submission.rad.clone(), submission.rad_bytes)];
                files.extend(submission.model);
                for (relative, bytes) in files {
                    let path = dir.join(&relative);
                    if let Some(parent) = path.parent() {
                        fs::create_dir_all(parent).map_err(at(parent))?;
                    }
                    fs::write(&path, bytes).map_err(at(&path))?;
                }
                write_json(&dir.join("task.json"), &record).map_err(at(&dir))?;
                let target = self.task_dir(State::Pending, &name);
                rename_new(&dir, &target).map_err(at(&target))?;
                if let Err(e) = fs::remove_dir_all(&incoming) {
                    log::warn!("cannot remove {}: {e}", incoming.display());
                }
                Ok(Claimed {
                    file: submission.rad,
                    name,
                    record,
                })
            }
            Err(reason) => {
                let name = match submitted {
                    Some(name) => name,
                    None => TaskName::new(self.allocate(1)?, entry),
                };
                // Made whole in staging/, then renamed into failed/ at once.
                let dir = self.staging().join(format!("claim-{name}"));
                fs::create_dir(&dir).map_err(at(&dir))?;
                rename_new(&incoming, &dir.join("submitted")).map_err(at(&dir))?;
                let record = TaskRecord {
                    owner: Some(owner),
                    outcome: Some(record::Outcome {
                        state: State::Failed.to_string(),
                        reason: Some(reason.clone()),
                        at: unix_now(),
                    }),
                    ..TaskRecord::new(&name, "", unix_now())
                };
                write_json(&dir.join("task.json"), &record).map_err(at(&dir))?;
                write_durable(&dir.join("reason"), format!("{reason}\n").as_bytes())
                    .map_err(at(&dir))?;
                let target = self.task_dir(State::Failed, &name);
                rename_new(&dir, &target).map_err(at(&target))?;
                Err(SpoolError::Refused { name, reason })
            }
        }
    }

    /// Finishes claims a crashed daemon left in `staging/`: a claim with its
    /// file moves on to `pending/`, an empty one is removed, a submission
    /// caught in adoption goes back to `pending/`. Staged submissions are
    /// left to their `carma submit`.
    pub fn finish_claims(&self) -> Result<Vec<TaskName>, SpoolError> {
        let staging = self.staging();
        let mut finished = Vec::new();
        for entry in read_names(&staging)? {
            // A submission caught in adoption goes back to be adopted again.
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
            let empty = fs::read_dir(&dir).map_err(at(&dir))?.next().is_none();
            if empty {
                fs::remove_dir(&dir).map_err(at(&dir))?;
            } else {
                rename_new(&dir, &self.task_dir(State::Pending, &name)).map_err(at(&dir))?;
                finished.push(name);
            }
        }
        Ok(finished)
    }

    /// Submits a checked job: its `.rad` and model summary are copied into
    /// `staging/`, recorded, and the whole task directory renamed into
    /// `pending/`, so the daemon never sees half a task.
    pub fn submit(&self, rad: &Path, spec: &TaskSpec) -> Result<TaskName, SpoolError> {
        let seq = self.allocate(1)?;
        let stem = spec.name.clone().unwrap_or_else(|| {
            rad.file_stem()
                .map_or_else(|| "job".into(), |s| s.to_string_lossy().into_owned())
        });
        let name = TaskName::new(seq, &stem);
        let dir = self.staging().join(format!("submit-{name}"));
        let result = self.stage(rad, spec, &name, &dir);
        if result.is_err() {
            let _ = fs::remove_dir_all(&dir);
        }
        result?;
        let pending = self.dir(State::Pending);
        rename_new(&dir, &pending.join(name.as_str())).map_err(at(&dir))?;
        sync_dir(&pending).map_err(at(&pending))?;
        Ok(name)
    }

    fn stage(
        &self,
        rad: &Path,
        spec: &TaskSpec,
        name: &TaskName,
        dir: &Path,
    ) -> Result<(), SpoolError> {
        fs::create_dir(dir).map_err(at(dir))?;
        let file_name = rad
            .file_name()
            .map_or_else(|| "job.rad".into(), |n| n.to_string_lossy().into_owned());
        copy_synced(rad, &dir.join(&file_name))?;
        let rad_dir = rad
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Some(model) = &spec.model {
            let target = dir.join(model);
            if let Some(parent) = target.parent() {
                fs::create_dir_all(parent).map_err(at(parent))?;
            }
            copy_synced(&rad_dir.join(model), &target)?;
        }
        let workdir = fs::canonicalize(rad_dir).map_err(at(rad_dir))?;
        let record = TaskRecord {
            workdir: Some(workdir),
            ..TaskRecord::new(name, file_name, unix_now())
        };
        write_json(&dir.join("task.json"), &record).map_err(at(dir))
    }

    /// Finds a task by its full name, its number, or a unique prefix.
    pub fn find(&self, query: &str) -> Result<(State, TaskName), SpoolError> {
        let number = query.trim_start_matches('t').parse::<u64>().ok();
        let mut hits = Vec::new();
        for state in State::ALL {
            for name in self.list(state)?.tasks {
                let exact = name.as_str() == query || Some(name.seq()) == number;
                if exact {
                    return Ok((state, name));
                }
                if name.as_str().starts_with(query) {
                    hits.push((state, name));
                }
            }
        }
        match hits.len() {
            0 => Err(SpoolError::NotFound {
                spool: self.root.clone(),
                query: query.to_owned(),
            }),
            1 => Ok(hits.remove(0)),
            _ => Err(SpoolError::Ambiguous {
                query: query.to_owned(),
                names: hits.into_iter().map(|(_, n)| n.to_string()).collect(),
            }),
        }
    }

    /// Reads a task's `task.json`, rebuilding it from the directory when it
    /// is missing (a claimed task that never ran; see [`Spool::claim`]) or
    /// damaged.
    pub fn load_record(&self, state: State, name: &TaskName) -> Result<TaskRecord, SpoolError> {
        let dir = self.task_dir(state, name);
        match record::read_json::<TaskRecord>(&dir.join("task.json")) {
            Ok(record) => Ok(record),
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    log::warn!("{name}: {e}; task.json rebuilt from the directory");
                }
                let rad = read_names(&dir)?
                    .into_iter()
                    .find(|n| n.ends_with(".rad"))
                    .unwrap_or_default();
                let submitted_at = fs::metadata(&dir)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or_else(unix_now, |d| d.as_secs_f64());
                Ok(TaskRecord::new(name, rad, submitted_at))
            }
        }
    }
}

/// What a submitted directory holds that carma uses.
struct Submission {
    rad: String,
    rad_bytes: Vec<u8>,
    /// The model summary's relative path and content.
    model: Option<(String, Vec<u8>)>,
    workdir: Option<PathBuf>,
    submitted_at: f64,
}

/// Reads a submitted directory owned by `owner`; the error is the reason
/// it cannot be used.
fn read_submission(dir: &Path, owner: u32) -> Result<Submission, String> {
    let user_record: serde_json::Value = safe::read_regular(&dir.join("task.json"), 1 << 20)
        .ok()
        .and_then(|(bytes, _)| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let rad = match user_record["rad"].as_str() {
        Some(rad) => rad.to_owned(),
        None => {
            let rads: Vec<String> = read_names(dir)
                .map_err(|e| e.to_string())?
                .into_iter()
                .filter(|n| n.ends_with(".rad"))
                .collect();
            match &rads[..] {
                [one] => one.clone(),
                [] => return Err("the submitted directory holds no .rad file".into()),
                _ => {
                    return Err(format!(
                        "the submitted directory holds several .rad files: {}",
                        rads.join(", ")
                    ));
                }
            }
        }
    };
    if rad.contains('/') || rad.starts_with('.') || !rad.ends_with(".rad") {
        return Err(format!(
            "`{rad}` is not the name of a .rad file in the directory"
        ));
    }
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
    let model = crate::rad::parse_bytes(&rad_bytes)
        .ok()
        .and_then(|parsed| parsed.spec.model)
        .and_then(|model| {
            let (bytes, _) = safe::read_beneath(dir, &model, MAX_SUMMARY_BYTES).ok()?;
            Some((model, bytes))
        });
    Ok(Submission {
        rad,
        rad_bytes,
        model,
        workdir: user_record["workdir"].as_str().map(PathBuf::from),
        submitted_at: user_record["submitted_at"]
            .as_f64()
            .unwrap_or_else(unix_now),
    })
}

/// Largest model summary copied into a task: real ones are tens of
/// kilobytes.
pub const MAX_SUMMARY_BYTES: u64 = 64 << 20;

/// A `.rad` file's stem, for a task name.
fn stem_of(file: &str) -> &str {
    file.strip_suffix(".rad").unwrap_or(file)
}

/// Opens (creating it if needed, never truncating) a file that is
/// `flock`ed: its content may matter to whoever holds the lock.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Whether some process holds an exclusive `flock` on the file at `path`
/// (false when there is no such file). A lock dies with its holder, so this
/// answers "is the holder alive?" without trusting a pid.
pub fn is_locked(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match FileExt::try_lock_shared(&file) {
        Ok(()) => {
            let _ = FileExt::unlock(&file);
            false
        }
        Err(_) => true,
    }
}

/// `rename` that fails instead of replacing an existing target.
fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).map_err(io::Error::from)
}

/// Copies a regular file and syncs the copy.
fn copy_synced(from: &Path, to: &Path) -> Result<(), SpoolError> {
    fs::copy(from, to).map_err(at(from))?;
    File::open(to).and_then(|f| f.sync_all()).map_err(at(to))
}

/// Visible entry names of a directory (hidden ones skipped).
fn read_names(dir: &Path) -> Result<Vec<String>, SpoolError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(at(dir))? {
        let entry = entry.map_err(at(dir))?;
        let name = entry.file_name();
        if let Some(name) = name.to_str().filter(|n| !n.starts_with('.')) {
            names.push(name.to_owned());
        } else if !name.as_encoded_bytes().starts_with(b".") {
            log::warn!(
                "{}: ignoring an entry whose name is not UTF-8: {}",
                dir.display(),
                OsStr::new(&name).to_string_lossy()
            );
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests;
