//! The spool: a directory tree that *is* the queue's state.
//!
//! ```text
//! <spool>/
//!   pending/    tasks waiting for a GPU; users drop .rad files here too
//!   running/    tasks whose job runs now
//!   recovery/   tasks that crashed with OOM and wait to re-run
//!   done/       tasks that exited 0
//!   failed/     tasks that failed, were cancelled, or could not be read
//!   staging/    half-made tasks (`carma submit` by carma's own user,
//!               claims of dropped files), trash on its way out, and
//!               `daemon.lock`, held by the one daemon serving the spool;
//!               carma's alone
//!   cancel/     requests: cancel, hold, release, priority ([`request`])
//!   next-id     the next task number (locked while allocating; see counter.rs)
//!   archive.jsonl ended tasks pruned after `daemon.retention_days`
//!               ([`archive`]); carma's alone
//!   status.json the daemon's view, refreshed every second
//!   submit.sock where a running daemon takes submissions ([`socket`])
//! ```
//!
//! A task is a directory (see [`record`] for its contents) and changes
//! state by exactly one `rename` of that directory, so a crash at any
//! moment leaves every task in exactly one state directory, whole. Nothing
//! else is authoritative: a daemon that starts rebuilds everything from
//! these directories.
//!
//! # Who may do what (a root daemon serving several users)
//!
//! Users may create entries in `pending/` and `cancel/` (mode 1733, like
//! `/var/spool/cron`: nobody lists them, nobody removes another's entry).
//! Everything else is carma's: it copies what a user hands in into a task
//! directory of its own (`claim`, `submission`), records the job's user
//! as the file system showed it at that moment, and never reads its state
//! back from a file anyone else could have written
//! ([`record::read_state`]). State and task directories can be listed, so
//! anyone sees which tasks exist and where; a task directory's contents
//! are for its owner and carma only.

pub mod archive;
mod array;
mod arrivals;
mod atomic;
mod claim;
mod counter;
mod durable;
mod handed;
mod job_copy;
pub mod json;
mod name;
mod presence;
pub mod record;
pub mod request;
pub mod socket;
pub mod status;
mod submission;
mod trash;

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fs2::FileExt;
use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use thiserror::Error;

pub use atomic::{
    PRIVATE, PUBLIC, sync_dir, write_durable, write_replace, write_replace_with, write_whole,
};
pub use claim::forget_linked_original;
pub use counter::this_boot;
pub use handed::{Handed, Staged};
pub use name::TaskName;
use record::{RECORD, TaskRecord};
pub use submission::{Batch, Submitted, adoptable};

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
        "another carma daemon ({holder}) already serves the spool {}; \
         one daemon per spool",
        spool.display()
    )]
    Locked { spool: PathBuf, holder: String },
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
    /// Visible entries whose names are not UTF-8: no task can be named
    /// after them, but they are users' input all the same.
    pub odd: Vec<OsString>,
}

/// Held for the daemon's lifetime; dropping it releases the spool.
#[derive(Debug)]
pub struct SpoolLock {
    file: File,
    /// `daemon.alive`, locked for users to see ([`presence`]); none where
    /// it could not be made (users then read `/proc/locks`).
    _presence: Option<File>,
}

impl SpoolLock {
    /// The lock file's device and inode, for `status.json`: users, who
    /// cannot open the lock, find in `/proc/locks` whether it is held.
    pub fn id(&self) -> Option<(u64, u64)> {
        self.file.metadata().ok().map(|m| (m.dev(), m.ino()))
    }
}

/// A dropped file that became a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub name: TaskName,
    /// The file's name as it was dropped (lossy if it was not UTF-8).
    pub file: String,
    /// The same, exactly.
    pub drop: OsString,
    /// Its `task.json`, as written.
    pub record: TaskRecord,
    /// Why it could not become a job: it went straight to `failed/`.
    pub refused: Option<String>,
    /// What was put into its `job/`, when it became a job.
    pub copy: Option<JobCopy>,
}

/// What a claim or a submission put into a task's `job/`, handed to the
/// daemon's intake with the task: it was just read, checked and written
/// by carma, in carma's own directory, so the intake need not read it
/// back (a burst of 10,000 drops read each job file three times).
#[derive(Debug, Clone, PartialEq)]
pub struct JobCopy {
    /// The job file's content.
    pub rad: Vec<u8>,
    /// The bytes of every file in `job/`, which count against the owner's
    /// share of the spool.
    pub bytes: u64,
}

/// A spool directory tree.
#[derive(Debug, Clone)]
pub struct Spool {
    root: PathBuf,
}

/// How long a starting daemon keeps asking for a spool lock that is taken:
/// a short-lived probe (`carma status` takes a shared lock for a moment)
/// must not keep a daemon from its spool.
const LOCK_PATIENCE: Duration = Duration::from_secs(5);

impl Spool {
    pub fn new(root: impl Into<PathBuf>) -> Spool {
        Spool { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates any missing directory of the tree, and gives them their
    /// modes: as root, `pending/` and `cancel/` are open to every user for
    /// new entries (1733), `staging/` is carma's alone (0700), the rest can
    /// be listed (0755); a daemon that is not root serves only its own
    /// user, so nobody else may write anywhere. A tree that is not
    /// carma's is refused: a spool root another user could change (made
    /// by them first under a shared `/scratch`, say), or a directory of
    /// it that is a link or another user's, would let them swap the
    /// state directories and read or remove everyone's drops.
    pub fn create(&self) -> Result<(), SpoolError> {
        let root = nix::unistd::geteuid().is_root();
        let shared = if root { 0o1733 } else { 0o755 };
        let mut dirs: Vec<(PathBuf, u32)> = vec![(self.root.clone(), 0o755)];
        dirs.extend(State::ALL.iter().map(|&s| {
            let mode = if s == State::Pending { shared } else { 0o755 };
            (self.dir(s), mode)
        }));
        dirs.push((self.staging(), 0o700));
        dirs.push((self.cancel_dir(), shared));
        let me = nix::unistd::geteuid().as_raw();
        let not_carmas = |dir: &Path, why: String| {
            at(dir)(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("not carma's: {why}; refused"),
            ))
        };
        for (dir, mode) in dirs {
            fs::create_dir_all(&dir).map_err(at(&dir))?;
            // The root may be a link of root's ([`crate::safe::private_dir`]
            // checks it below); the state directories are real ones.
            let meta = match dir == self.root {
                true => fs::metadata(&dir),
                false => fs::symlink_metadata(&dir),
            }
            .map_err(at(&dir))?;
            if !meta.is_dir() {
                return Err(not_carmas(&dir, "a link, or not a directory".into()));
            }
            if meta.uid() != me {
                return Err(not_carmas(
                    &dir,
                    format!("owned by uid {}, not {me}", meta.uid()),
                ));
            }
            if meta.mode() & 0o7777 != mode {
                fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).map_err(at(&dir))?;
            }
        }
        crate::safe::private_dir(&self.root).map_err(|why| not_carmas(&self.root, why))
    }

    /// Why the directory is not a spool a daemon made, if it is not: what
    /// a submission is handed to must be one, never a directory that a
    /// mistyped `--spool` would turn into one.
    pub fn not_a_spool(&self) -> Option<String> {
        let root = self.root.display();
        if !self.root.is_dir() {
            return Some(format!("no spool at {root}"));
        }
        let mut dirs: Vec<PathBuf> = State::ALL.iter().map(|&s| self.dir(s)).collect();
        dirs.extend([self.staging(), self.cancel_dir()]);
        let missing: Vec<String> = dirs
            .iter()
            .filter(|d| !fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
            .filter_map(|d| Some(d.file_name()?.to_string_lossy().into_owned()))
            .collect();
        (!missing.is_empty()).then(|| {
            format!(
                "{root} is not a carma spool (it has no {}/)",
                missing.join("/, no ")
            )
        })
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

    /// In `staging/`, carma's alone: a lock any user could open, any user
    /// could hold (a shared `flock` is enough to keep a daemon out).
    fn lock_path(&self) -> PathBuf {
        self.staging().join(LOCK)
    }

    /// Takes the one-daemon-per-spool lock, or says who holds it. A lock
    /// that is taken is asked for again for a few seconds, so a probe that
    /// holds it for a moment does not keep the daemon out; the holder named
    /// is the process the kernel says holds it, not a pid some file says.
    pub fn lock(&self) -> Result<SpoolLock, SpoolError> {
        let path = self.lock_path();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(PRIVATE)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(at(&path))?;
        let deadline = Instant::now() + LOCK_PATIENCE;
        while file.try_lock_exclusive().is_err() {
            if Instant::now() >= deadline {
                let holders = crate::procfs::flock_holders(&path);
                let holder = match holders.as_slice() {
                    [] => "a process that let go just now".to_string(),
                    [pid] => format!("pid {pid}"),
                    pids => format!(
                        "pids {}",
                        pids.iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                return Err(SpoolError::Locked {
                    spool: self.root.clone(),
                    holder,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The pid inside is for people; carma itself asks the kernel.
        file.set_len(0).map_err(at(&path))?;
        write!(file, "{}", std::process::id()).map_err(at(&path))?;
        // Where older carmas kept the lock, anyone could open it.
        let _ = fs::remove_file(self.root.join("daemon.lock"));
        let presence = presence::hold(&self.root)
            .inspect_err(|e| log::warn!("cannot make {}/daemon.alive: {e}", self.root.display()))
            .ok();
        Ok(SpoolLock {
            file,
            _presence: presence,
        })
    }

    /// Whether a daemon holds this spool's lock now. A user, who may not
    /// open the lock, asks the kernel (`/proc/locks`) whether the lock the
    /// daemon's status names is held by the daemon it names.
    pub fn daemon_running(&self) -> bool {
        match File::open(self.lock_path()) {
            Ok(file) => match FileExt::try_lock_shared(&file) {
                Ok(()) => false,
                Err(_) => true,
            },
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                presence::says(&self.root).unwrap_or_else(|| self.status_says_locked())
            }
            Err(_) => false,
        }
    }

    fn status_says_locked(&self) -> bool {
        #[derive(serde::Deserialize)]
        struct LockNote {
            daemon_pid: u32,
            lock: Option<(u64, u64)>,
        }
        let note = fs::read(self.status_file())
            .ok()
            .and_then(|bytes| serde_json::from_slice::<LockNote>(&bytes).ok());
        note.and_then(|n| Some((n.daemon_pid, n.lock?)))
            .is_some_and(|(pid, (dev, ino))| {
                crate::procfs::flocks_on(dev, ino).contains(&(pid, true))
            })
    }

    /// Reserves `count` consecutive task numbers and returns the first.
    /// Safe across processes (`carma submit` by carma's own user and the
    /// daemon allocate concurrently) and across a power loss, with a flush
    /// only every `counter::RESERVE` numbers (see `counter`); a lost or
    /// damaged counter is rebuilt from the highest number in the tree.
    pub fn allocate(&self, count: u64) -> Result<u64, SpoolError> {
        let path = self.root.join("next-id");
        let mut file = open_lock_file(&path).map_err(at(&path))?;
        file.lock_exclusive().map_err(at(&path))?;
        let boot = counter::this_boot();
        let stored = counter::read(&mut file).map_err(at(&path))?;
        let taken = match stored.and_then(|c| counter::take(c, boot.as_deref(), count)) {
            Some(taken) => taken,
            None => {
                let next = self.highest_seq()?.saturating_add(1);
                counter::take(counter::rebuilt(next), boot.as_deref(), count).ok_or_else(|| {
                    at(&path)(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the task numbers are used up",
                    ))
                })?
            }
        };
        counter::write(&file, &taken).map_err(at(&path))?;
        Ok(taken.first)
    }

    /// The highest number of carma's own task directories anywhere in the
    /// tree (0 if none): entries users made under task names in
    /// `pending/` do not count, or one named `18446744073709551615-x`
    /// would use up every number.
    fn highest_seq(&self) -> Result<u64, SpoolError> {
        let me = nix::unistd::geteuid().as_raw();
        let mut highest = 0;
        for dir in State::ALL
            .iter()
            .map(|&s| self.dir(s))
            .chain([self.staging()])
        {
            for entry in read_names(&dir)?.0 {
                let bare = entry
                    .strip_prefix("claim-")
                    .or_else(|| entry.strip_prefix("submit-"))
                    .unwrap_or(&entry);
                let Some(name) = TaskName::parse(bare) else {
                    continue;
                };
                if fs::symlink_metadata(dir.join(&entry)).is_ok_and(|m| m.uid() == me) {
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
        let (names, odd) = read_names(&self.dir(state))?;
        for entry in names {
            match TaskName::parse(&entry) {
                Some(name) => listing.tasks.push(name),
                None => listing.drops.push(entry),
            }
        }
        listing.tasks.sort();
        listing.drops.sort();
        listing.odd = odd;
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

    /// Whether `state/name` is a task directory of carma's: a directory
    /// (not a link to one) owned by carma's user. Anyone may put an entry
    /// under a task's name in `pending/` while the task is elsewhere.
    pub fn is_task_dir(&self, state: State, name: &TaskName) -> bool {
        fs::symlink_metadata(self.task_dir(state, name))
            .is_ok_and(|m| m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw())
    }

    /// Every task in the state directories this process may list
    /// (`pending/` is not listable by the users of a shared spool). In
    /// `pending/`, where anyone may make entries, only carma's own task
    /// directories: a user's `000042-<escapes>` would otherwise answer
    /// root's `carma show 42` in place of task 42, its name printed raw.
    pub fn visible_tasks(&self) -> Result<Vec<(State, TaskName)>, SpoolError> {
        // carma's user owns `pending/` (whoever looks: root, or carma).
        let carma = fs::symlink_metadata(self.dir(State::Pending)).map(|m| m.uid());
        let carmas = |state: State, name: &TaskName| {
            state != State::Pending
                || fs::symlink_metadata(self.task_dir(state, name))
                    .is_ok_and(|m| m.is_dir() && carma.as_ref().is_ok_and(|&uid| m.uid() == uid))
        };
        let mut tasks = Vec::new();
        for state in State::ALL {
            match self.list(state) {
                Ok(listing) => tasks.extend(
                    listing
                        .tasks
                        .into_iter()
                        .filter(|n| carmas(state, n))
                        .map(|n| (state, n)),
                ),
                Err(SpoolError::Io { source, .. })
                    if source.kind() == io::ErrorKind::PermissionDenied => {}
                Err(e) => return Err(e),
            }
        }
        Ok(tasks)
    }

    /// Finds a task by its full name, its number, a unique prefix, or the
    /// job's name (`resnet50` for `000042-resnet50`): the one task of that
    /// name that has not ended, else the one that has (several are
    /// ambiguous, and named in the error).
    pub fn find(&self, query: &str) -> Result<(State, TaskName), SpoolError> {
        self.find_among(query, self.visible_tasks()?)
    }

    /// [`Spool::find`] among the given tasks (say, those the daemon's
    /// status names, for a user who cannot list `pending/`).
    pub fn find_among(
        &self,
        query: &str,
        tasks: Vec<(State, TaskName)>,
    ) -> Result<(State, TaskName), SpoolError> {
        let number = query.trim_start_matches('t').parse::<u64>().ok();
        let mut hits = Vec::new();
        let mut named_live = Vec::new();
        let mut named_ended = Vec::new();
        for (state, name) in tasks {
            let exact = name.as_str() == query || Some(name.seq()) == number;
            if exact {
                return Ok((state, name));
            }
            if name.as_str().starts_with(query) {
                hits.push((state, name.clone()));
            }
            // By the job's name: the task that has not ended, when one does.
            if name.stem() == query {
                match state {
                    State::Pending | State::Running | State::Recovery => {
                        named_live.push((state, name))
                    }
                    State::Done | State::Failed => named_ended.push((state, name)),
                }
            }
        }
        let named = if named_live.is_empty() {
            named_ended
        } else {
            named_live
        };
        if hits.is_empty() || named.len() == 1 {
            hits = named;
        }
        match hits.len() {
            0 => Err(SpoolError::NotFound {
                spool: self.root.clone(),
                query: query.to_owned(),
            }),
            1 => Ok(hits.remove(0)),
            _ => {
                hits.sort_by(|a, b| a.1.cmp(&b.1));
                Err(SpoolError::Ambiguous {
                    query: query.to_owned(),
                    names: hits.into_iter().map(|(_, n)| n.to_string()).collect(),
                })
            }
        }
    }

    /// Reads a task's `task.json`: carma writes one for every task it takes
    /// in, so a missing or foreign one is an error, never rebuilt from
    /// what the directory holds.
    pub fn load_record(&self, state: State, name: &TaskName) -> Result<TaskRecord, SpoolError> {
        let path = self.task_dir(state, name).join(RECORD);
        record::read_state(&path).map_err(at(&path))
    }
}

pub use crate::summary::MAX_SUMMARY_BYTES;

/// Bytes of the regular files in carma's own tree `dir` (a task's `job/`:
/// what a submission cost the spool); links are not followed.
pub fn tree_bytes(dir: &Path) -> u64 {
    let mut bytes = 0;
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => todo.push(entry.path()),
                Ok(m) if m.is_file() => bytes += m.len(),
                _ => {}
            }
        }
    }
    bytes
}

/// Opens (creating it if needed, never truncating) a file that is
/// `flock`ed: its content may matter to whoever holds the lock. Made
/// private to carma's user.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(PRIVATE)
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

/// Makes a directory of carma's with exactly `mode`, whatever the umask
/// (set again only where the umask took bits away: claims make thousands
/// of directories, and each extra call costs).
pub fn make_dir(path: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new().mode(mode).create(path)?;
    if mode & umask() != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// This process's umask, read once (reading it means setting it).
pub fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        use nix::sys::stat::{Mode, umask};
        let old = umask(Mode::from_bits_truncate(0o077));
        umask(old);
        old.bits()
    })
}

/// Mode of a task directory and a run directory: the owner reaches their
/// files by name (logs, work directory), nobody can list them, and each
/// file inside says by its own mode who may read it.
pub const TASK_DIR_MODE: u32 = 0o711;

impl Spool {
    /// Renames a task directory made in `staging/` into `to` under `name`,
    /// or, when that name is taken (anyone may put an entry under a task's
    /// name in `pending/`), under a fresh number; the record inside, when
    /// given, is rewritten to match. Returns the name the task got. A name
    /// taken by someone else can delay a task, never lose or duplicate it.
    fn place(
        &self,
        staged: &Path,
        to: State,
        name: &TaskName,
        mut record: Option<&mut TaskRecord>,
    ) -> Result<TaskName, SpoolError> {
        let mut name = name.clone();
        for _ in 0..PLACE_TRIES {
            match rename_new(staged, &self.task_dir(to, &name)) {
                Ok(()) => return Ok(name),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    log::warn!(
                        "{to}/{name} is taken by something that is not this task; renumbered"
                    );
                    name = TaskName::new(self.allocate(1)?, name.stem());
                    if let Some(record) = record.as_deref_mut() {
                        record.name = name.to_string();
                        record::write_json(&staged.join(RECORD), record).map_err(at(staged))?;
                    }
                }
                Err(e) => return Err(at(staged)(e)),
            }
        }
        Err(at(staged)(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{PLACE_TRIES} task names in a row are taken in {to}/"),
        )))
    }
}

/// The daemon's lock, in `staging/`.
const LOCK: &str = "daemon.lock";

/// Fresh numbers tried when a task's name is taken.
const PLACE_TRIES: usize = 8;

/// `rename` that fails instead of replacing an existing target.
fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).map_err(io::Error::from)
}

/// Visible entry names of a directory (hidden ones skipped): the UTF-8
/// ones, and the others as they are.
fn read_names(dir: &Path) -> Result<(Vec<String>, Vec<OsString>), SpoolError> {
    let mut names = Vec::new();
    let mut odd = Vec::new();
    for entry in fs::read_dir(dir).map_err(at(dir))? {
        let name = entry.map_err(at(dir))?.file_name();
        if name.as_bytes().starts_with(b".") {
            continue;
        }
        match name.into_string() {
            Ok(name) => names.push(name),
            Err(name) => odd.push(name),
        }
    }
    Ok((names, odd))
}

#[cfg(test)]
mod tests;
