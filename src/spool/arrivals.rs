//! Word from the kernel when an entry appears in a directory, for a
//! command that waits on the daemon (a submit's receipt, a request's
//! verdict): the daemon answers by renaming a new `status.json` into the
//! spool.
//!
//! This is dnotify (`fcntl(F_NOTIFY)`), not inotify. Closing an inotify
//! instance waits for an SRCU grace period (`fsnotify_destroy_group`):
//! 19 ms of the 33 ms an ordinary user's `carma submit` took on the
//! development machine went to the process's exit after its answer was
//! printed. dnotify's marks belong to one group that lives as long as the
//! kernel, so releasing one waits for nothing. Its word comes as a signal:
//! `SIGIO`, sent to the waiting thread alone (`F_SETOWN_EX`), which blocks
//! it and reads it from a `signalfd`. Our own reads of the directory make
//! no event (only creations and moves in are asked for).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, pthread_sigmask, signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// `<linux/fcntl.h>`: an entry was created in, or moved into, the
/// directory; keep watching after the first event.
const DN_CREATE: libc::c_int = 0x0000_0004;
const DN_MULTISHOT: libc::c_int = 0x8000_0000_u32 as libc::c_int;
/// `<asm-generic/fcntl.h>`: signal one thread, not the process (the
/// `libc` crate does not carry these).
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// A watch on one directory, held by the thread that made it.
pub(super) struct Arrivals {
    /// Closing it ends the watch; dropped before the signal is unblocked.
    dir: Option<File>,
    signals: SignalFd,
    /// The thread's signal mask before the watch.
    before: SigSet,
}

impl Arrivals {
    /// Watches `dir` for entries created or moved into it. Fails where the
    /// kernel has no dnotify or the directory cannot be opened; the caller
    /// then reads on a timer.
    pub(super) fn watch(dir: &Path) -> io::Result<Arrivals> {
        let sigio = SigSet::from(Signal::SIGIO);
        ignore_stray_sigio()?;
        let mut before = SigSet::empty();
        let watch = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&sigio), Some(&mut before))
            .and_then(|()| {
                SignalFd::with_flags(&sigio, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            })
            .map_err(io::Error::from)
            .and_then(|signals| {
                let dir = File::open(dir)?;
                arm(&dir)?;
                Ok(Arrivals {
                    dir: Some(dir),
                    signals,
                    before,
                })
            });
        if watch.is_err() {
            let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), None);
            heed_sigio_again();
        }
        watch
    }

    /// Waits until an entry appears or `timeout` passes; whether one did.
    /// Several arrivals since the last wait count as one.
    pub(super) fn wait(&self, timeout: Duration) -> bool {
        let millis = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
        let ready = matches!(poll(&mut fds, PollTimeout::from(millis)), Ok(n) if n > 0);
        self.drain();
        ready
    }

    fn drain(&self) {
        while let Ok(Some(_)) = self.signals.read_signal() {}
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        // No signal follows the close; what came before is read, so
        // unblocking delivers nothing.
        drop(self.dir.take());
        self.drain();
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.before), None);
        heed_sigio_again();
    }
}

/// How many watches this process holds, and `SIGIO`'s disposition before
/// the first.
static WATCHES: Mutex<(usize, SigHandler)> = Mutex::new((0, SigHandler::SigDfl));

/// `F_NOTIFY` sends its signal to the whole process until `F_SETOWN_EX`
/// narrows it to the waiting thread, a moment later. A `SIGIO` in that
/// moment must not end the process where another thread does not block
/// it: while any watch is held the signal is ignored, so such threads
/// drop it, while a thread that blocks it still queues it. Fails, and
/// changes nothing, where someone else handles `SIGIO`.
fn ignore_stray_sigio() -> io::Result<()> {
    let mut watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
    if watches.0 == 0 {
        // SAFETY: `SIG_IGN` runs no code in the process.
        let found = unsafe { signal(Signal::SIGIO, SigHandler::SigIgn) }?;
        if !matches!(found, SigHandler::SigDfl | SigHandler::SigIgn) {
            // SAFETY: puts back exactly the disposition found.
            unsafe { signal(Signal::SIGIO, found) }?;
            return Err(io::Error::other("SIGIO is handled elsewhere"));
        }
        watches.1 = found;
    }
    watches.0 += 1;
    Ok(())
}

/// Puts `SIGIO`'s disposition back once no watch is held, so that
/// nothing this process starts later inherits it ignored.
fn heed_sigio_again() {
    let mut watches = WATCHES.lock().unwrap_or_else(|e| e.into_inner());
    watches.0 = watches.0.saturating_sub(1);
    if watches.0 == 0 {
        // SAFETY: the default or ignoring disposition found before the
        // first watch; neither runs code in the process.
        let _ = unsafe { signal(Signal::SIGIO, watches.1) };
    }
}

/// Asks for `SIGIO` on this thread when an entry appears in `dir`.
fn arm(dir: &File) -> io::Result<()> {
    let fd = dir.as_raw_fd();
    // SAFETY: `fcntl` on a descriptor `dir` owns, with an integer argument.
    if unsafe { libc::fcntl(fd, libc::F_NOTIFY, DN_CREATE | DN_MULTISHOT) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let owner = FOwnerEx {
        kind: F_OWNER_TID,
        pid: nix::unistd::gettid().as_raw(),
    };
    // SAFETY: `owner` has the layout of `struct f_owner_ex` that outlives the call, which
    // only reads it.
    if unsafe { libc::fcntl(fd, F_SETOWN_EX, &owner) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_rename_into_the_directory_wakes_the_waiter_and_a_quiet_one_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let arrivals = Arrivals::watch(dir.path()).unwrap();
        let start = Instant::now();
        assert!(!arrivals.wait(Duration::from_millis(30)), "nothing came");
        assert!(start.elapsed() >= Duration::from_millis(25));
        // Reading the directory and its files is no arrival.
        let quiet = tempfile::tempdir().unwrap();
        std::fs::write(quiet.path().join("status.json"), "{}").unwrap();
        let _ = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(
            !arrivals.wait(Duration::from_millis(10)),
            "a read is no arrival"
        );
        let root = dir.path().to_owned();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::rename(quiet.path().join("status.json"), root.join("status.json")).unwrap();
        });
        assert!(arrivals.wait(Duration::from_secs(10)), "the rename woke it");
        writer.join().unwrap();
        drop(arrivals);
        // The watch is gone: the thread's mask is as it was, and a later
        // creation sends nothing that could end the process.
        let mask = SigSet::thread_get_mask().unwrap();
        assert!(!mask.contains(Signal::SIGIO));
        std::fs::write(dir.path().join("later"), "").unwrap();
    }
}
