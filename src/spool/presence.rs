//! Whether a daemon serves the spool, for users who may not open its lock.
//!
//! The daemon's lock is private (any user who could open it could hold it
//! and keep the daemon out). Beside it the daemon keeps `daemon.alive`, a
//! file everyone may read, under an open-file-description write lock for
//! as long as it runs. A user asks the kernel whether that lock is held
//! (`F_OFD_GETLK`, which takes nothing) in microseconds, where reading all
//! of `/proc/locks` took 9-17 ms on the development machine's kernel, on
//! every `carma submit`. The file is made fresh and locked before it is
//! renamed into place, so nobody can have held it first; a read lock a
//! user takes once the daemon is gone is not a write lock, and reads as
//! no daemon.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;

use super::PUBLIC;

const PRESENCE: &str = "daemon.alive";

/// The whole file, write-locked (or asked about a write lock).
fn whole_file_write_lock() -> libc::flock {
    // SAFETY: `flock` is plain data; zero is a valid value of each field.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock
}

/// Makes `root/daemon.alive` anew and holds its lock while the returned
/// file stays open.
pub(super) fn hold(root: &Path) -> io::Result<File> {
    let temp = root.join(format!(".{PRESENCE}.tmp{}", std::process::id()));
    let _ = fs::remove_file(&temp);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(PUBLIC)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&temp)?;
    let locked = fcntl(&file, FcntlArg::F_OFD_SETLK(&whole_file_write_lock()))
        .map_err(io::Error::from)
        .and_then(|_| fs::rename(&temp, root.join(PRESENCE)));
    if let Err(e) = locked {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    Ok(file)
}

/// Whether a daemon holds `root/daemon.alive`; `None` where the file or
/// the kernel cannot say (a daemon from before the file, a kernel before
/// 3.15).
pub(super) fn says(root: &Path) -> Option<bool> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(root.join(PRESENCE))
        .ok()?;
    let mut probe = whole_file_write_lock();
    fcntl(&file, FcntlArg::F_OFD_GETLK(&mut probe)).ok()?;
    Some(probe.l_type == libc::F_WRLCK as libc::c_short)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_says_served_exactly_while_its_holder_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(says(dir.path()), None, "no file, no word");
        let held = hold(dir.path()).unwrap();
        assert_eq!(says(dir.path()), Some(true));
        drop(held);
        assert_eq!(says(dir.path()), Some(false));
    }

    #[test]
    fn a_read_lock_left_on_the_file_is_not_a_daemon() {
        let dir = tempfile::tempdir().unwrap();
        drop(hold(dir.path()).unwrap());
        let squatter = File::open(dir.path().join(PRESENCE)).unwrap();
        let mut read = whole_file_write_lock();
        read.l_type = libc::F_RDLCK as libc::c_short;
        fcntl(&squatter, FcntlArg::F_OFD_SETLK(&read)).unwrap();
        assert_eq!(says(dir.path()), Some(false));
        // A daemon starting now makes a fresh file the squatter never had.
        let _held = hold(dir.path()).unwrap();
        assert_eq!(says(dir.path()), Some(true));
    }
}
