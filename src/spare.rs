//! A supervisor started ahead of need: the daemon keeps one waiting,
//! already past its exec, the dynamic loader and its runtime's start, so
//! a launch hands it the run instead of starting a process. Starting the
//! `carma` binary took about 1.5 ms of the way from a submission to the
//! job's first line; the spare's start happens while the daemon is idle.
//!
//! The daemon and its spare share a socket pair (the spare's standard
//! input), which nothing else can reach. A launch sends one datagram: the
//! run directory's path, with the locked `supervisor.lock` and the run's
//! `supervisor.log` as passed descriptors. From then on the spare is the
//! run's supervisor, exactly as one started for it: the lock held from
//! before the hand-over ([`crate::supervisor`]'s theory of operation holds
//! unchanged), a session of its own, the daemon's to reap. A spare that
//! died is replaced by a fresh start; one whose daemon is gone reads the
//! end of the socket and exits. Its command line stays `carma supervise
//! --spare` (moving it takes `CAP_SYS_RESOURCE`): the run's
//! `supervisor.json` names it, and it holds the run's `supervisor.lock`
//! open, as every supervisor does.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

/// The longest run directory path a hand-over carries.
const MAX_PATH: usize = 4096;

/// The waiting spare, as the daemon holds it.
pub struct Spare {
    child: Child,
    socket: OwnedFd,
}

/// How the daemon starts supervisors: through its spare when it has one.
pub struct Supervisors {
    /// The carma binary, started as `carma supervise`.
    exe: PathBuf,
    spare: Option<Spare>,
}

impl Supervisors {
    pub fn new(exe: PathBuf) -> Supervisors {
        Supervisors { exe, spare: None }
    }

    /// The carma binary.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Starts the supervisor of the run in `run_dir`, as
    /// [`crate::supervisor::start`] does: handed to the spare when there is
    /// one and it takes it, started afresh otherwise.
    pub fn start(&mut self, run_dir: &Path) -> io::Result<Child> {
        let (lock, log) = crate::supervisor::lock_run(run_dir)?;
        if let Some(spare) = self.spare.take() {
            match spare.hand(run_dir, &lock, &log) {
                Ok(child) => return Ok(child),
                Err(e) => log::debug!("the spare supervisor did not take the run ({e})"),
            }
        }
        crate::supervisor::spawn(&self.exe, run_dir, lock, log)
    }

    /// Starts a spare if none waits; called when the daemon is idle. A
    /// spare that could not start is tried again at the next call.
    pub fn refill(&mut self) {
        if self.spare.is_none() {
            match Spare::start(&self.exe) {
                Ok(spare) => self.spare = Some(spare),
                Err(e) => log::debug!("cannot start a spare supervisor ({e})"),
            }
        }
    }
}

impl Spare {
    /// `exe supervise --spare`, its standard input a socket to us; its
    /// errors before a hand-over go where the daemon's go.
    fn start(exe: &Path) -> io::Result<Spare> {
        let (ours, theirs) = pair()?;
        let child = Command::new(exe)
            .args(["supervise", "--spare"])
            .stdin(theirs)
            .stdout(Stdio::null())
            .spawn()?;
        Ok(Spare {
            child,
            socket: ours,
        })
    }

    /// Hands the run in `run_dir` over, with its locked `lock` and its
    /// `log` (which the caller closes after). A spare that died is reaped,
    /// and the error returned.
    fn hand(mut self, run_dir: &Path, lock: &File, log: &File) -> io::Result<Child> {
        let path = run_dir.as_os_str().as_bytes();
        if path.len() > MAX_PATH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the run directory's path is too long to hand over",
            ));
        }
        let fds = [lock.as_raw_fd(), log.as_raw_fd()];
        let sent = sendmsg::<()>(
            self.socket.as_raw_fd(),
            &[IoSlice::new(path)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        );
        match sent {
            Ok(_) => Ok(self.child),
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(e.into())
            }
        }
    }
}

/// A connected pair of sequenced-packet sockets: one message per
/// hand-over, and the end of the socket when the other side closes (a
/// datagram pair would wait on forever).
fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// A run handed to a spare: its directory, its locked `supervisor.lock`,
/// its `supervisor.log`.
pub struct Handed {
    pub run_dir: PathBuf,
    pub lock: File,
    pub log: OwnedFd,
}

/// The spare's side: waits on `socket` for a run. `None` when the daemon
/// has gone without handing one over.
pub fn wait_for_run(socket: RawFd) -> io::Result<Option<Handed>> {
    let mut buf = vec![0u8; MAX_PATH + 1];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = loop {
        match recvmsg::<()>(
            socket,
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other?,
        }
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            // SAFETY: the kernel just installed these descriptors in this
            // process for us; nothing else holds them.
            fds.extend(
                received
                    .into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let len = msg.bytes;
    let flags = msg.flags;
    if len == 0 && fds.is_empty() {
        return Ok(None);
    }
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) || fds.len() != 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a hand-over that is not a run directory with its lock and log",
        ));
    }
    let log = fds.pop().expect("two descriptors");
    let lock = File::from(fds.pop().expect("two descriptors"));
    Ok(Some(Handed {
        run_dir: PathBuf::from(OsStr::from_bytes(&buf[..len])),
        lock,
        log,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_hand_over_carries_the_path_and_both_descriptors_and_a_closed_socket_ends_the_wait() {
        let (ours, theirs) = pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-1");
        std::fs::create_dir(&run).unwrap();
        let (lock, log) = crate::supervisor::lock_run(&run).unwrap();
        let fds = [lock.as_raw_fd(), log.as_raw_fd()];
        sendmsg::<()>(
            ours.as_raw_fd(),
            &[IoSlice::new(run.as_os_str().as_bytes())],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .unwrap();
        drop((lock, log));
        let handed = wait_for_run(theirs.as_raw_fd()).unwrap().unwrap();
        assert_eq!(handed.run_dir, run);
        // The lock is still held (by the handed descriptor), and the log
        // is the run's.
        assert!(crate::supervisor::is_running(&run));
        let mut log = File::from(handed.log);
        log.write_all(b"hello").unwrap();
        let mut text = String::new();
        File::open(run.join("supervisor.log"))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hello");
        drop(handed.lock);
        assert!(!crate::supervisor::is_running(&run));
        drop(ours);
        assert!(wait_for_run(theirs.as_raw_fd()).unwrap().is_none());
    }
}
