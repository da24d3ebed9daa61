//! Putting on disk what carma made in the spool: new private files,
//! written without a sync each, then whole claim or task trees flushed at
//! once (file by file for a few, one `syncfs` for a burst). Only what
//! carma wrote is ever opened: never an entry a user handed in.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::record::{DROPPED, ORIGINAL};
use super::{PRIVATE, sync_dir};
use crate::safe;

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

/// Unwritten memory in the whole system past which a burst is flushed
/// file by file all the same. A flush of the file system waits for every
/// page dirty on it when it starts (not for those dirtied later), and
/// anyone who may write there can dirty gigabytes first: a user in their
/// own entries in `pending/`, or jobs writing checkpoints where the spool
/// shares a disk. Where that much is waiting, the wait would be theirs,
/// not the burst's; 64 MiB is a fraction of a second's writing.
const SYNCFS_UNWRITTEN_MAX: u64 = 64 << 20;

/// Whether `dirs` are flushed together, by a flush of their file system.
fn by_syncfs(dirs: usize) -> bool {
    dirs >= SYNCFS_FROM && flush_whole(crate::procfs::unwritten_bytes())
}

/// Whether a flush of the whole file system may wait for `unwritten`
/// bytes (unknown: no).
fn flush_whole(unwritten: Option<u64>) -> bool {
    unwritten.is_some_and(|bytes| bytes <= SYNCFS_UNWRITTEN_MAX)
}

/// Puts the trees `dirs` (made in `parent`) on disk, and their entries in
/// `parent`: for a claim, which stays in `staging/` as the only copy of
/// a job whose original is removed next.
pub(super) fn make_durable(parent: &Path, dirs: &[&Path]) -> io::Result<()> {
    if dirs.is_empty() {
        return Ok(());
    }
    match flush_trees(dirs)? {
        // The file system's flush took the entries too.
        true => Ok(()),
        false => sync_dir(parent),
    }
}

/// Puts the trees `dirs` on disk, but not their entries: for trees about
/// to be renamed into a directory that is flushed after the renames (a
/// flush of the one they leave would be undone by the rename). A few are
/// fsynced file by file and directory by directory: a flush of the whole
/// file system would also wait for whatever else is being written there
/// (jobs' checkpoints, on a busy server). A burst of many is flushed with
/// one `syncfs`, which costs less than thousands of fsyncs, unless much
/// else waits to be written ([`SYNCFS_UNWRITTEN_MAX`]).
pub(super) fn make_trees_durable(dirs: &[&Path]) -> io::Result<()> {
    flush_trees(dirs).map(drop)
}

/// [`make_trees_durable`]; whether it flushed the whole file system.
fn flush_trees(dirs: &[&Path]) -> io::Result<bool> {
    if by_syncfs(dirs.len()) {
        // Through a tree of the batch: its maker may open it where it may
        // not open the directory it is in (a user's submissions in
        // `pending/`).
        let file = fs::File::open(dirs[0])?;
        nix::unistd::syncfs(file.as_fd()).map_err(io::Error::from)?;
        return Ok(true);
    }
    dirs.iter().try_for_each(|dir| sync_tree(dir))?;
    Ok(false)
}

/// fsync of what carma wrote in the claim or task directory `dir`: its
/// files and directories, but never an entry a user handed in. A drop
/// kept as `.orig-NAME` is neither opened nor walked, nor is anything in
/// `dropped/` (only that directory itself is synced: it holds the rename).
/// Each directory is opened relative to its parent without following
/// links or blocking, so neither depth nor path length stops it, and the
/// walk is a loop, not a recursion.
pub(super) fn sync_tree(dir: &Path) -> io::Result<()> {
    let top = safe::open_dir(nix::fcntl::AT_FDCWD, dir.as_os_str())?;
    let mut stack = vec![(top, true)];
    while let Some((fd, is_top)) = stack.pop() {
        let mut entries = safe::listing(&fd)?;
        for entry in entries.iter() {
            let entry = entry?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if matches!(name.as_bytes(), b"." | b"..") || name.as_bytes().starts_with(ORIGINAL) {
                continue;
            }
            let stat = safe::stat_at(fd.as_fd(), name)?;
            if safe::is_dir(stat) {
                let child = safe::open_dir(&fd, name)?;
                match is_top && name == DROPPED {
                    true => nix::unistd::fsync(&child)?,
                    false => stack.push((child, false)),
                }
            } else if safe::is_regular(stat) {
                let file = nix::fcntl::openat(
                    &fd,
                    name,
                    nix::fcntl::OFlag::O_RDONLY
                        | nix::fcntl::OFlag::O_NOFOLLOW
                        | nix::fcntl::OFlag::O_NONBLOCK
                        | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                )?;
                nix::unistd::fsync(&file)?;
            }
        }
        nix::unistd::fsync(&fd)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_waits_for_no_one_elses_gigabytes() {
        assert!(flush_whole(Some(0)));
        assert!(flush_whole(Some(SYNCFS_UNWRITTEN_MAX)));
        // A user who dirtied a gigabyte on the spool's disk first.
        assert!(!flush_whole(Some(1 << 30)));
        assert!(!flush_whole(None));
        assert!(!by_syncfs(SYNCFS_FROM - 1));
    }
}
