//! Where supervisors are born: one process, started by the daemon ahead of
//! need (`carma supervise --nursery`), that forks a supervisor for each run
//! the daemon hands it.
//!
//! Starting the `carma` binary for each run (its exec, the dynamic loader
//! with its relocations, the runtime's start, the command line) cost about
//! 1 ms of CPU per job, the largest part of a supervisor's own; a fork of
//! the nursery, already past all of that, costs about a tenth. It is also
//! off the way to a job's first line: a launch sends one datagram and goes
//! on.
//!
//! The daemon and its nursery share a socket pair (the nursery's standard
//! input), which nothing else can reach. A launch sends the task's number,
//! the run's, the run directory's path, and the locked `supervisor.lock`
//! and the run's `supervisor.log` as passed descriptors. The nursery forks;
//! the child is the run's supervisor exactly as one started for it: the
//! lock held from before the hand-over ([`crate::supervisor`]'s theory of
//! operation holds unchanged), a session of its own, and nothing of the
//! nursery's (its socket, its blocked signals). The nursery reaps its
//! children and reports each one's end to the daemon over the socket, as a
//! reaper thread does for a supervisor the daemon started.
//!
//! Single-threaded on purpose: a fork copies only the thread that calls
//! it, so the nursery starts none, and the child may do whatever a freshly
//! started supervisor does.
//!
//! Failures leave nothing unknown. A nursery that cannot take a run (gone,
//! or its socket broken) is replaced, and that run gets a supervisor of its
//! own start; so does a run handed to a nursery that is behind (stopped,
//! say: the hand-over never waits). A nursery that dies leaves its supervisors running (they are
//! init's children then), and the daemon, told by the end of the socket,
//! looks at every running run once a second, as at runs of an earlier
//! daemon. A run the nursery took but could not fork never started (no
//! supervisor named itself) and is reported ended, so the daemon sends it
//! back to the queue. A nursery whose daemon is gone reads the end of the
//! socket and exits; its supervisors stay. Its command line stays `carma
//! supervise --nursery`, and so do its children's (moving it takes
//! `CAP_SYS_RESOURCE`): a run's `supervisor.json` names its supervisor,
//! which holds the run's `supervisor.lock` open.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recv,
    recvmsg, send, sendmsg, socketpair,
};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, setsid};

/// The longest run directory path a hand-over carries.
const MAX_PATH: usize = 4096;

/// A run's tag on the socket: the task's number and the run's.
const TAG: usize = 12;

/// What the nursery tells the daemon, through the callback it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The supervisor of run `run` of task `seq` has exited (or never
    /// started: then it named nobody, and the run did not start).
    Ended { seq: u64, run: u32 },
    /// Nursery number `nursery` is gone: the ends of its supervisors will
    /// not be reported.
    Gone { nursery: u64 },
}

/// How a run's supervisor came to be.
pub enum Born {
    /// Forked by the nursery, which reports its end.
    Forked,
    /// Started for the run; the caller reaps it.
    Started(Child),
}

/// How the daemon starts supervisors: through its nursery when it has one.
pub struct Supervisors {
    /// The carma binary, started as `carma supervise`.
    exe: PathBuf,
    nursery: Option<Nursery>,
    /// Nurseries started so far, to tell a replaced one's end apart.
    started: u64,
    report: Arc<dyn Fn(Report) + Send + Sync>,
}

impl Supervisors {
    /// `report` is called from the nursery's reader thread.
    pub fn new(exe: PathBuf, report: impl Fn(Report) + Send + Sync + 'static) -> Supervisors {
        Supervisors {
            exe,
            nursery: None,
            started: 0,
            report: Arc::new(report),
        }
    }

    /// The carma binary.
    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// Starts the supervisor of run `run` of task `seq` in `run_dir`, as
    /// [`crate::supervisor::start`] does: forked by the nursery when there
    /// is one and it takes the run, started afresh otherwise.
    pub fn start(&mut self, run_dir: &Path, seq: u64, run: u32) -> io::Result<Born> {
        let (lock, log) = crate::supervisor::lock_run(run_dir)?;
        if let Some(nursery) = &self.nursery {
            match nursery.hand(seq, run, run_dir, &lock, &log) {
                Ok(()) => return Ok(Born::Forked),
                // Behind on its hand-overs (stopped, or slowed down): this
                // run does not wait for it.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    log::debug!("the supervisors' nursery is behind; a supervisor is started");
                }
                Err(e) => {
                    log::debug!("the supervisors' nursery did not take the run ({e})");
                    nursery.end();
                    self.nursery = None;
                }
            }
        }
        crate::supervisor::spawn(&self.exe, run_dir, lock, log).map(Born::Started)
    }

    /// Starts a nursery if there is none; called when the daemon is idle.
    /// One that could not start is tried again at the next call.
    pub fn refill(&mut self) {
        if self.nursery.is_none() {
            self.started += 1;
            match Nursery::start(&self.exe, self.started, Arc::clone(&self.report)) {
                Ok(nursery) => self.nursery = Some(nursery),
                Err(e) => log::debug!("cannot start the supervisors' nursery ({e})"),
            }
        }
    }

    /// Nursery number `nursery` was reported gone: a new one is started at
    /// the next [`Supervisors::refill`].
    pub fn gone(&mut self, nursery: u64) {
        if self.nursery.as_ref().is_some_and(|n| n.number == nursery) {
            self.nursery = None;
        }
    }
}

/// The nursery, as the daemon holds it; its reader thread holds the child.
struct Nursery {
    number: u64,
    pid: u32,
    socket: OwnedFd,
}

impl Nursery {
    /// `exe supervise --nursery`, its standard input a socket to us; its
    /// errors go where the daemon's go. A thread reads its reports.
    fn start(
        exe: &Path,
        number: u64,
        report: Arc<dyn Fn(Report) + Send + Sync>,
    ) -> io::Result<Nursery> {
        let (ours, theirs) = pair()?;
        let mut child = Command::new(exe)
            .args(["supervise", "--nursery"])
            .stdin(theirs)
            .stdout(Stdio::null())
            .spawn()?;
        let pid = child.id();
        let reader = ours.try_clone()?;
        let thread = std::thread::Builder::new()
            .name(format!("nursery-{number}"))
            .spawn(move || {
                while let Some((seq, run)) = read_report(reader.as_raw_fd()) {
                    report(Report::Ended { seq, run });
                }
                drop(reader);
                let _ = child.wait();
                report(Report::Gone { nursery: number });
            });
        let nursery = Nursery {
            number,
            pid,
            socket: ours,
        };
        if let Err(e) = thread {
            nursery.end();
            return Err(e);
        }
        Ok(nursery)
    }

    /// Hands run `run` of task `seq` in `run_dir` over, with its locked
    /// `lock` and its `log` (which the caller closes after). Never waits:
    /// a nursery that does not take its hand-overs (the kernel queues only
    /// `net.unix.max_dgram_qlen` of them) must not hold up the daemon.
    fn hand(&self, seq: u64, run: u32, run_dir: &Path, lock: &File, log: &File) -> io::Result<()> {
        let path = run_dir.as_os_str().as_bytes();
        if path.len() > MAX_PATH {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the run directory's path is too long to hand over",
            ));
        }
        let tag = tag(seq, run);
        let fds = [lock.as_raw_fd(), log.as_raw_fd()];
        sendmsg::<()>(
            self.socket.as_raw_fd(),
            &[IoSlice::new(&tag), IoSlice::new(path)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        )?;
        Ok(())
    }

    /// Kills a nursery that failed us; its reader thread reaps it and
    /// reports it gone. Its supervisors live on.
    fn end(&self) {
        // The reader holds the child until it reports the nursery gone, so
        // the pid is not reused before this.
        let _ = nix::sys::signal::kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
    }
}

fn tag(seq: u64, run: u32) -> [u8; TAG] {
    let mut tag = [0u8; TAG];
    tag[..8].copy_from_slice(&seq.to_le_bytes());
    tag[8..].copy_from_slice(&run.to_le_bytes());
    tag
}

fn untag(tag: &[u8]) -> (u64, u32) {
    let seq = u64::from_le_bytes(tag[..8].try_into().expect("8 bytes"));
    let run = u32::from_le_bytes(tag[8..TAG].try_into().expect("4 bytes"));
    (seq, run)
}

/// The daemon's side: the next run whose supervisor ended, `None` at the
/// end of the socket (the nursery is gone) or on anything else.
fn read_report(socket: RawFd) -> Option<(u64, u32)> {
    let mut buf = [0u8; TAG];
    loop {
        match recv(socket, &mut buf, MsgFlags::empty()) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(TAG) => return Some(untag(&buf)),
            _ => return None,
        }
    }
}

/// A connected pair of sequenced-packet sockets: one message per
/// hand-over or report, and the end of the socket when the other side
/// closes (a datagram pair would wait on forever).
fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// A run handed to the nursery: its tag, its directory, its locked
/// `supervisor.lock`, its `supervisor.log`.
pub struct Handed {
    pub seq: u64,
    pub run: u32,
    pub run_dir: PathBuf,
    pub lock: File,
    pub log: OwnedFd,
}

/// The nursery's side: takes the next run from `socket`. `None` when the
/// daemon has gone.
fn take_run(socket: RawFd) -> io::Result<Option<Handed>> {
    let mut buf = vec![0u8; TAG + MAX_PATH + 1];
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
            // A daemon killed with runs still unread in its socket.
            Err(nix::errno::Errno::ECONNRESET) => return Ok(None),
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
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) || fds.len() != 2 || len <= TAG
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a hand-over that is not a run with its directory, lock and log",
        ));
    }
    let (seq, run) = untag(&buf);
    let log = fds.pop().expect("two descriptors");
    let lock = File::from(fds.pop().expect("two descriptors"));
    Ok(Some(Handed {
        seq,
        run,
        run_dir: PathBuf::from(OsStr::from_bytes(&buf[TAG..len])),
        lock,
        log,
    }))
}

/// `carma supervise --nursery`: forks a supervisor for each run the daemon
/// hands over on standard input, reports each one's end there, and exits
/// when the daemon has gone.
pub fn nursery() -> io::Result<()> {
    // Out of the daemon's session: a signal meant for the daemon's group
    // must never reach its runs, nor their nursery.
    setsid()?;
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let before = chld.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
    let ended = SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
    let socket = 0;
    // Children not yet reaped, by pid: which run each supervises.
    let mut born: HashMap<i32, (u64, u32)> = HashMap::new();
    loop {
        let (handed, reaped) = {
            // SAFETY: descriptor 0 is the socket, open for the whole loop.
            let stdin = unsafe { std::os::fd::BorrowedFd::borrow_raw(socket) };
            let mut fds = [
                PollFd::new(stdin, PollFlags::POLLIN),
                PollFd::new(ended.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => other?,
            };
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        };
        if reaped {
            while let Ok(Some(_)) = ended.read_signal() {}
            if !reap(&mut born, socket) {
                return Ok(());
            }
        }
        if !handed {
            continue;
        }
        let Some(run) = take_run(socket)? else {
            return Ok(());
        };
        // SAFETY: this process runs no other thread (see the module
        // documentation), so the child is whole.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => supervise_forked(run, &before, ended),
            Ok(ForkResult::Parent { child }) => {
                born.insert(child.as_raw(), (run.seq, run.run));
            }
            Err(e) => {
                // Nobody holds the run's lock once it is dropped here, and
                // nobody named itself: the run did not start.
                log::warn!(
                    "cannot fork the supervisor of {}: {e}",
                    run.run_dir.display()
                );
                if !report_ended(socket, run.seq, run.run) {
                    return Ok(());
                }
            }
        }
    }
}

/// Reaps every child that ended and reports its run; false when the
/// daemon is gone.
fn reap(born: &mut HashMap<i32, (u64, u32)>, socket: RawFd) -> bool {
    loop {
        let pid = match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(WaitStatus::StillAlive) | Err(_) => return true,
            Ok(status) => status.pid(),
        };
        if let Some((seq, run)) = pid.and_then(|pid| born.remove(&pid.as_raw()))
            && !report_ended(socket, seq, run)
        {
            return false;
        }
    }
}

/// Tells the daemon that run `run` of task `seq` has no supervisor any
/// more; false when the daemon is gone (the only way a send on the pair
/// fails), which is no error: the next daemon looks at the run.
fn report_ended(socket: RawFd, seq: u64, run: u32) -> bool {
    send(socket, &tag(seq, run), MsgFlags::MSG_NOSIGNAL).is_ok()
}

/// The forked child: sheds what is the nursery's (its signal mask, the
/// reaping descriptor, the socket on standard input, the daemon's
/// session), takes the run's log as its standard error and supervises.
fn supervise_forked(run: Handed, before: &SigSet, ended: SignalFd) -> ! {
    drop(ended);
    let code = match shed(before, &run.log) {
        Ok(()) => {
            drop(run.log);
            match crate::supervisor::supervise(&run.run_dir, run.lock) {
                Ok(()) => 0,
                Err(e) => {
                    let _ = writeln!(io::stderr(), "carma supervise: {e}");
                    1
                }
            }
        }
        Err(e) => {
            let _ = writeln!(io::stderr(), "carma supervise: {e}");
            1
        }
    };
    std::process::exit(code)
}

fn shed(before: &SigSet, log: &OwnedFd) -> io::Result<()> {
    before.thread_set_mask()?;
    nix::unistd::dup2_stdin(File::open("/dev/null")?)?;
    setsid()?;
    nix::unistd::dup2_stderr(log)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_hand_over_carries_the_tag_the_path_and_both_descriptors_and_a_closed_socket_ends_the_wait()
    {
        let (ours, theirs) = pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-1");
        std::fs::create_dir(&run).unwrap();
        let (lock, log) = crate::supervisor::lock_run(&run).unwrap();
        let nursery = Nursery {
            number: 1,
            pid: 0,
            socket: ours,
        };
        nursery.hand(7, 3, &run, &lock, &log).unwrap();
        drop((lock, log));
        let handed = take_run(theirs.as_raw_fd()).unwrap().unwrap();
        assert_eq!((handed.seq, handed.run), (7, 3));
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

        // A report comes back whole; the end of the socket ends the reader.
        assert!(report_ended(theirs.as_raw_fd(), 7, 3));
        assert_eq!(read_report(nursery.socket.as_raw_fd()), Some((7, 3)));
        drop(theirs);
        assert_eq!(read_report(nursery.socket.as_raw_fd()), None);
        assert!(!report_ended(nursery.socket.as_raw_fd(), 7, 3));
        let (ours, theirs) = pair().unwrap();
        drop(ours);
        assert!(take_run(theirs.as_raw_fd()).unwrap().is_none());
    }

    #[test]
    fn a_nursery_that_takes_nothing_never_holds_up_a_launch() {
        let (ours, _theirs) = pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-1");
        std::fs::create_dir(&run).unwrap();
        let (lock, log) = crate::supervisor::lock_run(&run).unwrap();
        let nursery = Nursery {
            number: 1,
            pid: 0,
            socket: ours,
        };
        // The kernel queues a few hand-overs (net.unix.max_dgram_qlen),
        // then the next one is refused at once instead of waiting.
        let refused = (0..100_000)
            .map(|_| nursery.hand(1, 1, &run, &lock, &log))
            .find_map(Result::err)
            .expect("a queue that never fills");
        assert_eq!(refused.kind(), io::ErrorKind::WouldBlock, "{refused}");
    }
}
