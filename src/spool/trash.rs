//! Getting rid of trees that users made, without walking them as root.
//!
//! A root daemon must delete what users hand in (a submission once its
//! copy is made, a directory squatting a request's name), and a user
//! controls everything inside: a tree 50,000 levels deep overflows any
//! recursive delete (`std::fs::remove_dir_all` recurses), a path longer
//! than `PATH_MAX` defeats every by-path call, and an entry swapped for a
//! FIFO or a link between a look and an open would block root or lead it
//! out of the tree.
//!
//! So nothing is deleted in place. [`Spool::discard`] moves the entry
//! into `staging/` (carma's alone) under a fresh `trash-` name: one
//! `rename`, constant time, whatever the entry holds. [`Spool::empty_trash`]
//! then removes the trash off the event loop, without recursion and
//! without following anything: each trash directory is opened with
//! `O_NOFOLLOW | O_NONBLOCK` relative to `staging/`, its files are
//! unlinked with `unlinkat`, and each of its subdirectories is *hoisted*,
//! renamed up into `staging/` as trash of its own. No depth is ever more
//! than one below `staging/`, no path is ever longer than two names, and
//! nothing but `staging/` and one directory at a time is held open.
//!
//! Before a directory is listed it becomes root's, mode 0700: a user
//! whose shell sits inside their discarded tree can no longer add names
//! to it (which kept the one trash thread listing and unlinking the same
//! directory for good). The tree's owner is written into its trash name
//! first, and each hoisted subdirectory carries it: only what that owner
//! (or a rootless container of theirs, under their subordinate ids) owns
//! goes. A directory of someone else's, moved in from a shared project
//! directory by the tree's owner (who could not delete what is inside
//! it), is kept whole in `staging/kept-*`. In a tree of carma's own (a
//! task directory at its retention) each user's subtree (its `work/`) is
//! held to that user. Files go whoever owns them: unlinking a name takes
//! no more than its owner could. Nothing is looked at through a mount
//! point: a subdirectory is hoisted (a mount is detached first) before
//! its owner is read.

use std::collections::HashSet;
use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nix::dir::Type;
use nix::fcntl::{RenameFlags, renameat2};
use nix::unistd::UnlinkatFlags;

use super::{Spool, rename_new};
use crate::safe::{is_dir, listing, open_dir, stat_at};

/// The prefix of trash entries in `staging/`.
pub const TRASH: &str = "trash-";

/// Names read from a directory before acting on them: a directory of a
/// million entries is emptied in bounded memory, a batch at a time.
const BATCH: usize = 4096;

impl Spool {
    /// Moves `path`, an entry of a spool directory, into the trash: one
    /// `rename`, never a look inside. [`Spool::empty_trash`] deletes it
    /// later.
    pub fn discard(&self, path: &Path) -> io::Result<()> {
        rename_new(path, &self.staging().join(trash_name()))
    }

    /// Deletes what is in the trash, until it is empty or `deadline`
    /// passes (then false: what is left waits for the next call). Meant for
    /// a thread of its own: a user's tree may be large.
    pub fn empty_trash(&self, deadline: Option<Instant>) -> io::Result<bool> {
        let staging = open_dir(nix::fcntl::AT_FDCWD, self.staging().as_os_str())?;
        // Entries that could not be removed in this call: passed over
        // until the next, never tried again at once in a loop.
        let mut stuck = HashSet::new();
        loop {
            let trash: Vec<OsString> = trash_entries(&staging)?
                .into_iter()
                .filter(|name| !stuck.contains(name))
                .collect();
            if trash.is_empty() {
                return Ok(stuck.is_empty());
            }
            for name in trash {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(false);
                }
                if let Err(e) = remove_entry(&staging, &name) {
                    // Gone meanwhile is fine; anything else waits for the
                    // next call rather than stopping the rest.
                    if e.kind() != io::ErrorKind::NotFound {
                        log::debug!("staging/{}: {e}", name.to_string_lossy());
                        stuck.insert(name);
                    }
                }
            }
        }
    }
}

/// A fresh trash name, unique in this process and across processes.
fn trash_name() -> String {
    trash_name_of(None)
}

/// A fresh trash name; for a subdirectory hoisted out of a tree, with the
/// tree's owner (`trash-u<uid>-...`), whose subdirectories alone go.
fn trash_name_of(owner: Option<u32>) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let owner = owner.map_or_else(String::new, |uid| format!("u{uid}-"));
    format!(
        "{TRASH}{owner}{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The owner of the tree a hoisted trash entry came from.
fn owner_of(name: &OsStr) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix(TRASH)?.strip_prefix('u')?;
    rest.split_once('-')?.0.parse().ok()
}

/// The trash entries of `staging/`.
fn trash_entries(staging: &OwnedFd) -> io::Result<Vec<OsString>> {
    let mut dir = listing(staging)?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name.as_bytes().starts_with(TRASH.as_bytes()) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// Removes one trash entry of `staging/`: a file at once, a directory
/// after its files are unlinked and its subdirectories hoisted into the
/// trash, each still of its tree's owner. A hoisted directory that is
/// neither the tree owner's nor one of their subordinate ids' (another
/// user's, moved in) is kept whole instead ([`KEPT`]).
fn remove_entry(staging: &OwnedFd, name: &OsStr) -> io::Result<()> {
    let stat = stat_at(staging.as_fd(), name)?;
    if !is_dir(stat) {
        return unlink(staging.as_fd(), name, UnlinkatFlags::NoRemoveDir);
    }
    let mine = nix::unistd::geteuid().as_raw();
    let Some(owner) = owner_of(name) else {
        // The owner into the name before anything changes it: a pass cut
        // short after the directory became root's below must not take
        // root for its owner.
        let tagged = retagged(name, stat.st_uid);
        rename_in(staging, name, &tagged)?;
        return remove_entry(staging, OsStr::new(&tagged));
    };
    if stat.st_uid != owner && owner != mine && !crate::accounts::is_subordinate(owner, stat.st_uid)
    {
        log::warn!(
            "staging/{}: a directory of uid {} in a tree of uid {owner}'s that was discarded; \
             kept",
            name.to_string_lossy(),
            stat.st_uid
        );
        let kept = format!("{KEPT}{}", name.to_string_lossy().trim_start_matches(TRASH));
        return rename_in(staging, name, &kept);
    }
    // In a tree of carma's own (a task directory at its retention), each
    // subdirectory is its own owner's (a user's `work/`).
    let subtree_owner = (owner != mine).then_some(owner);
    let dir = open_dir(staging, name)?;
    make_private(&dir);
    loop {
        let batch = read_batch(&dir)?;
        if batch.is_empty() {
            break;
        }
        for (child, kind) in batch {
            // Where the file system says what it is, nothing is looked at
            // through a mount point (a FUSE server may never answer).
            let is_subdir = match kind {
                Some(Type::Directory) => true,
                Some(_) => false,
                None => is_dir(stat_at(dir.as_fd(), &child)?),
            };
            let done = match is_subdir {
                true => hoist_or_detach(&dir, &child, staging, subtree_owner),
                false => unlink_or_detach(&dir, &child),
            };
            match done {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
    }
    unlink(staging.as_fd(), name, UnlinkatFlags::RemoveDir)
}

/// `name` (a trash name without an owner) with the owner `uid` in it.
fn retagged(name: &OsStr, uid: u32) -> String {
    let rest = name.to_string_lossy();
    format!("{TRASH}u{uid}-{}", rest.trim_start_matches(TRASH))
}

fn rename_in(staging: &OwnedFd, from: &OsStr, to: &str) -> io::Result<()> {
    renameat2(staging, from, staging, to, RenameFlags::RENAME_NOREPLACE).map_err(io::Error::from)
}

/// The prefix in `staging/` of what the trash kept: another user's
/// directories, which a discarded tree's owner moved into it.
pub const KEPT: &str = "kept-";

/// Makes the open directory root's (or carma's user's), mode 0700, before
/// it is listed: its former owner can add no name to it from then on.
/// Best effort: a daemon that is not root owns what it deletes already.
fn make_private(dir: &OwnedFd) {
    let me = nix::unistd::geteuid();
    let _ = nix::unistd::fchown(dir, Some(me), Some(nix::unistd::getegid()));
    let _ = nix::sys::stat::fchmod(dir, nix::sys::stat::Mode::from_bits_truncate(0o700));
}

/// [`hoist`], and where `child` is a mount the user made in the tree
/// before handing it in (a FUSE mount: no longer theirs to unmount, in
/// carma's `staging/`), detached first: then it is a plain directory.
fn hoist_or_detach(
    dir: &OwnedFd,
    child: &OsStr,
    staging: &OwnedFd,
    owner: Option<u32>,
) -> io::Result<()> {
    hoist(dir, child, staging, owner).or_else(|e| {
        if e.raw_os_error() != Some(nix::libc::EBUSY) {
            return Err(e);
        }
        detach(dir, child)?;
        hoist(dir, child, staging, owner)
    })
}

/// Unlinks the file `child` of `dir`, detaching first a mount on it
/// (`fusermount` mounts on a user's regular file too): the unlink failed
/// with EBUSY at every pass, and the tree stayed in `staging/` for good.
fn unlink_or_detach(dir: &OwnedFd, child: &OsStr) -> io::Result<()> {
    unlink(dir.as_fd(), child, UnlinkatFlags::NoRemoveDir).or_else(|e| {
        if e.raw_os_error() != Some(nix::libc::EBUSY) {
            return Err(e);
        }
        detach(dir, child)?;
        unlink(dir.as_fd(), child, UnlinkatFlags::NoRemoveDir)
    })
}

/// Renames the subdirectory `child` of `dir` up into `staging/` as trash
/// of its own, still of `owner`'s tree (`None`: of its own owner's).
fn hoist(dir: &OwnedFd, child: &OsStr, staging: &OwnedFd, owner: Option<u32>) -> io::Result<()> {
    renameat2(
        dir,
        child,
        staging,
        trash_name_of(owner).as_str(),
        RenameFlags::RENAME_NOREPLACE,
    )
    .map_err(io::Error::from)
}

/// Detaches the mount at `child` of `dir` (lazily: whoever still uses it
/// keeps it until they let go), never following a link there.
fn detach(dir: &OwnedFd, child: &OsStr) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let path = Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(child);
    nix::mount::umount2(
        &path,
        nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW,
    )
    .map_err(io::Error::from)
}

/// Up to [`BATCH`] entries of a directory (without `.` and `..`), with
/// their types where the file system tells them.
fn read_batch(dir: &OwnedFd) -> io::Result<Vec<(OsString, Option<Type>)>> {
    // A fresh listing each time: entries acted on are gone from it.
    let mut entries = listing(dir)?;
    let mut batch = Vec::new();
    for entry in entries.iter() {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        batch.push((
            OsStr::from_bytes(name.to_bytes()).to_owned(),
            entry.file_type(),
        ));
        if batch.len() >= BATCH {
            break;
        }
    }
    Ok(batch)
}

fn unlink(dir: BorrowedFd<'_>, name: &OsStr, flags: UnlinkatFlags) -> io::Result<()> {
    nix::unistd::unlinkat(dir, name, flags).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::super::tests::spool;
    use super::*;
    use nix::sys::stat::Mode;
    use std::fs;

    #[test]
    fn a_tree_deeper_than_any_stack_and_any_path_is_removed() {
        let (_dir, spool) = spool();
        let top = spool.root().join("pending/deep");
        fs::create_dir(&top).unwrap();
        // 20,000 levels of 200-byte names: 4 MB of path, far past PATH_MAX.
        let name = "d".repeat(200);
        let mut fd = open_dir(nix::fcntl::AT_FDCWD, top.as_os_str()).unwrap();
        for level in 0..20_000 {
            nix::sys::stat::mkdirat(&fd, name.as_str(), Mode::from_bits_truncate(0o755)).unwrap();
            if level % 1000 == 0 {
                fs::write(format!("/proc/self/fd/{}/f", fd_number(&fd)), "x").unwrap();
                nix::unistd::mkfifo(
                    Path::new(&format!("/proc/self/fd/{}/fifo", fd_number(&fd))),
                    Mode::from_bits_truncate(0o600),
                )
                .unwrap();
                std::os::unix::fs::symlink(
                    "/etc/shadow",
                    format!("/proc/self/fd/{}/link", fd_number(&fd)),
                )
                .unwrap();
            }
            fd = open_dir(&fd, OsStr::new(&name)).unwrap();
        }
        drop(fd);
        spool.discard(&top).unwrap();
        assert!(!top.exists());
        assert!(spool.empty_trash(None).unwrap());
        assert!(fs::read_dir(spool.staging()).unwrap().next().is_none());
        assert!(Path::new("/etc/passwd").exists());
    }

    #[test]
    fn a_deadline_leaves_the_rest_for_later() {
        let (_dir, spool) = spool();
        for i in 0..50 {
            let d = spool.root().join(format!("pending/d{i}"));
            fs::create_dir_all(d.join("a/b/c")).unwrap();
            spool.discard(&d).unwrap();
        }
        assert!(!spool.empty_trash(Some(Instant::now())).unwrap());
        assert!(spool.empty_trash(None).unwrap());
    }

    #[test]
    #[ignore = "needs root: mounts a file system in the tree (.ci/run runs it)"]
    fn a_mount_left_in_a_tree_is_detached_and_the_rest_never_spins() {
        let (_dir, spool) = spool();
        let top = spool.root().join("pending/m");
        fs::create_dir_all(top.join("a/mnt")).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            &top.join("a/mnt"),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        fs::write(top.join("a/mnt/f"), "x").unwrap();
        // A mount on a file, as `fusermount` makes on a user's own.
        fs::write(top.join("a/file"), "").unwrap();
        let elsewhere = tempfile::NamedTempFile::new().unwrap();
        nix::mount::mount(
            Some(elsewhere.path()),
            &top.join("a/file"),
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        spool.discard(&top).unwrap();
        assert!(spool.empty_trash(None).unwrap());
        assert!(fs::read_dir(spool.staging()).unwrap().next().is_none());
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(spool.root().to_str().unwrap()), "{mounts}");
        // An entry that cannot go is passed over until the next call.
        let busy = spool.root().join("pending/busy");
        fs::create_dir_all(busy.join("d")).unwrap();
        spool.discard(&busy).unwrap();
        let staging = spool.staging();
        let trash = fs::read_dir(&staging)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        // Immutable: its files can be neither unlinked nor moved out.
        let lsattr = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&trash)
            .status();
        if lsattr.is_ok_and(|s| s.success()) {
            assert!(!spool.empty_trash(None).unwrap(), "it gives up at once");
            std::process::Command::new("chattr")
                .arg("-i")
                .arg(&trash)
                .status()
                .unwrap();
        }
        assert!(spool.empty_trash(None).unwrap());
    }

    #[test]
    #[ignore = "needs root: makes a tree of two users' and writes in it as one (.ci/run runs it)"]
    fn a_tree_is_emptied_however_its_owner_writes_in_it_and_another_users_part_is_kept() {
        use std::os::unix::fs::{PermissionsExt, chown};
        use std::os::unix::process::CommandExt;
        let (_dir, spool) = spool();
        let top = spool.root().join("pending/tree");
        let (owner, other) = (65534, 65533);
        for (dir, uid) in [("", owner), ("mine", owner), ("theirs", other)] {
            let dir = top.join(dir);
            fs::create_dir_all(&dir).unwrap();
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
            fs::write(dir.join("f"), "x").unwrap();
            chown(&dir, Some(uid), Some(uid)).unwrap();
        }
        // Its owner's shell sits inside and makes files as fast as it can.
        let mut writer = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec 2>/dev/null; i=0; while :; do : > w$i; i=$((i + 1)); done")
            .current_dir(&top)
            .uid(owner)
            .gid(owner)
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        spool.discard(&top).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            spool
                .empty_trash(Some(Instant::now() + std::time::Duration::from_secs(20)))
                .unwrap()
        );
        let _ = writer.kill();
        let _ = writer.wait();
        let kept = only_kept(&spool, other);
        fs::remove_dir_all(&kept).unwrap();
        // A task directory of carma's at its retention: the user's
        // `work/` goes whole, but for what another user owns in it.
        let task = spool.root().join("done/000001-x");
        fs::create_dir_all(task.join("run-1")).unwrap();
        for (dir, uid) in [
            ("work", owner),
            ("work/sub", owner),
            ("work/sub/theirs", other),
        ] {
            fs::create_dir(task.join(dir)).unwrap();
            fs::write(task.join(dir).join("f"), "x").unwrap();
            chown(task.join(dir), Some(uid), Some(uid)).unwrap();
        }
        spool.discard(&task).unwrap();
        assert!(spool.empty_trash(None).unwrap());
        only_kept(&spool, other);
    }

    /// The one entry left in `staging/`: kept, the other user's directory
    /// whole, as it was.
    fn only_kept(spool: &Spool, other: u32) -> std::path::PathBuf {
        use std::os::unix::fs::MetadataExt;
        let kept: Vec<_> = fs::read_dir(spool.staging())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let name = kept[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(KEPT), "{name}");
        assert_eq!(fs::metadata(&kept[0]).unwrap().uid(), other);
        assert_eq!(fs::read(kept[0].join("f")).unwrap(), b"x");
        kept[0].clone()
    }

    fn fd_number(fd: &OwnedFd) -> i32 {
        use std::os::fd::AsRawFd;
        fd.as_raw_fd()
    }
}
