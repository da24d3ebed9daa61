//! Where supervisors are born: one process, started by the daemon ahead of
//! need (`carma-supervise --nursery`), that forks a supervisor for each run
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
//! nursery's (its socket, its blocked signals). The nursery reports each
//! fork (the supervisor's pid, which the GPU readings need) and, once it
//! has reaped the child, its end, over the socket, as a reaper thread does
//! for a supervisor the daemon started.
//!
//! Single-threaded on purpose: a fork copies only the thread that calls
//! it, so the nursery starts none, and the child may do whatever a freshly
//! started supervisor does.
//!
//! Failures leave nothing unknown. A nursery that cannot take a run (gone,
//! or its socket broken) is replaced, and that run gets a supervisor of its
//! own start; so does a run handed to a nursery that is behind: the
//! hand-over never waits, and at most `MAX_UNTAKEN` runs wait in a
//! nursery's queue. One that has not taken a run in `STALLED` (stopped,
//! say) is replaced, and the runs in its queue, which nobody supervised,
//! go back to the daemon's. A nursery that dies leaves its supervisors running (they are
//! init's children then), and the daemon, told by the end of the socket,
//! looks at every running run once a second, as at runs of an earlier
//! daemon. A run the nursery took but could not fork never started (no
//! supervisor named itself) and is reported ended once the nursery let go
//! of its lock, so the daemon sends it back to the queue. A nursery whose daemon is gone reads the end of the
//! socket and exits; its supervisors stay. Its command line stays
//! `carma-supervise --nursery` (or `carma supervise --nursery`, see
//! [`crate::supervisor::program`]), and so do its children's (moving it
//! takes `CAP_SYS_RESOURCE`): a run's `supervisor.json` names its
//! supervisor, which holds the run's `supervisor.lock` open.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recv,
    recvmsg, send, sendmsg, socketpair,
};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, fork, setsid};

use crate::supervisor::program::Program;

/// The longest run directory path a hand-over carries.
const MAX_PATH: usize = 4096;

/// A run's tag on the socket: the task's number and the run's.
const TAG: usize = 12;

/// A report on the socket: its kind, the run's tag, a pid.
const REPORT: usize = 1 + TAG + 4;
/// The nursery took a run and forked its supervisor (pid 0: could not).
const TAKEN: u8 = 1;
/// A run's supervisor ended.
const ENDED: u8 = 2;

/// Hand-overs a nursery may have not yet taken. Beyond them a launch
/// starts a supervisor of its own: a nursery that is behind (stopped,
/// slowed) holds few runs, each with its GPUs and no supervisor yet.
const MAX_UNTAKEN: usize = 8;

/// A nursery that has not taken its oldest hand-over in this long is
/// replaced; the runs it held go back to the queue (nobody named itself
/// their supervisor).
const STALLED: Duration = Duration::from_secs(10);

/// How often a nursery is started at most: one that dies at once (a
/// broken binary) is not started again at every turn of the loop.
const RESTART_GAP: Duration = Duration::from_secs(1);

/// What the nursery tells the daemon, through the callback it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The supervisor of run `run` of task `seq` was forked as `pid`.
    Forked { seq: u64, run: u32, pid: u32 },
    /// The supervisor of run `run` of task `seq` has exited (or never
    /// started: then it named nobody, and the run did not start).
    Ended { seq: u64, run: u32 },
    /// Nursery number `nursery` is gone: the ends of its supervisors will
    /// not be reported.
    Gone { nursery: u64 },
}

/// How a run's supervisor came to be.
pub enum Born {
    /// Handed to the nursery, which reports its pid and its end.
    Forked,
    /// Started for the run; the caller reaps it.
    Started(Child),
}

/// How the daemon starts supervisors: through its nursery when it has one.
pub struct Supervisors {
    /// What starts a nursery, or a supervisor when there is none.
    program: Program,
    nursery: Option<Nursery>,
    /// Nurseries started so far, to tell a replaced one's end apart.
    started: u64,
    /// When the last one was started.
    started_at: Option<Instant>,
    report: Arc<dyn Fn(Report) + Send + Sync>,
}

impl Supervisors {
    /// `report` is called from the nursery's reader thread.
    pub fn new(program: Program, report: impl Fn(Report) + Send + Sync + 'static) -> Supervisors {
        Supervisors {
            program,
            nursery: None,
            started: 0,
            started_at: None,
            report: Arc::new(report),
        }
    }

    /// The carma binary.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Starts the supervisor of run `run` of task `seq` in `run_dir`, as
    /// [`crate::supervisor::start`] does: forked by the nursery when there
    /// is one and it takes the run, started afresh otherwise.
    pub fn start(&mut self, run_dir: &Path, seq: u64, run: u32) -> io::Result<Born> {
        let (lock, log) = crate::supervisor::lock_run(run_dir)?;
        if let Some(nursery) = &self.nursery {
            match nursery.hand(seq, run, run_dir, &lock, &log) {
                Ok(()) => return Ok(Born::Forked),
                // Behind on its hand-overs, or a path too long to hand
                // over: this run does not wait for it.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::InvalidInput
                    ) =>
                {
                    log::debug!("the supervisors' nursery does not take this run now ({e})");
                }
                Err(e) => {
                    log::debug!("the supervisors' nursery did not take the run ({e})");
                    self.end_nursery();
                }
            }
        }
        crate::supervisor::spawn(&self.program, run_dir, lock, log).map(Born::Started)
    }

    /// Keeps a nursery: replaces one that stalled, starts one if there is
    /// none. Called at every turn of the daemon's loop, once it is idle.
    pub fn refill(&mut self) {
        if let Some(untaken) = self.nursery.as_ref().and_then(Nursery::oldest_untaken)
            && untaken.elapsed() >= STALLED
        {
            log::warn!(
                "the supervisors' nursery has not taken a run for {} s; it is replaced \
                 and the runs it held go back to the queue",
                STALLED.as_secs()
            );
            self.end_nursery();
        }
        if self.nursery.is_some() || self.started_at.is_some_and(|t| t.elapsed() < RESTART_GAP) {
            return;
        }
        self.started += 1;
        self.started_at = Some(Instant::now());
        match Nursery::start(&self.program, self.started, Arc::clone(&self.report)) {
            Ok(nursery) => self.nursery = Some(nursery),
            Err(e) => log::warn!(
                "cannot start the supervisors' nursery ({e}); supervisors are started one by one"
            ),
        }
    }

    /// Nursery number `nursery` was reported gone: a new one is started at
    /// the next [`Supervisors::refill`].
    pub fn gone(&mut self, nursery: u64) {
        if self.nursery.as_ref().is_some_and(|n| n.number == nursery) {
            self.nursery = None;
        }
    }

    /// Kills the nursery; its reader thread reaps it and reports it gone.
    /// The supervisors it forked live on.
    fn end_nursery(&mut self) {
        if let Some(nursery) = self.nursery.take() {
            let _ = locked(&nursery.child).kill();
        }
    }
}

/// The nursery, as the daemon holds it.
struct Nursery {
    number: u64,
    /// Shared with the reader thread, which alone waits for it: `kill` on
    /// a child already waited for signals nobody.
    child: Arc<Mutex<Child>>,
    socket: OwnedFd,
    /// When each hand-over not yet taken was sent, oldest first.
    untaken: Arc<Mutex<VecDeque<Instant>>>,
}

impl Nursery {
    /// `exe supervise --nursery`, its standard input a socket to us; its
    /// errors go where the daemon's go. A thread reads its reports.
    fn start(
        program: &Program,
        number: u64,
        report: Arc<dyn Fn(Report) + Send + Sync>,
    ) -> io::Result<Nursery> {
        let (ours, theirs) = pair()?;
        let reader = ours.try_clone()?;
        // The thread first: a nursery without one would be nobody's to reap.
        let (give, take) = std::sync::mpsc::channel::<Arc<Mutex<Child>>>();
        let untaken = Arc::new(Mutex::new(VecDeque::new()));
        let taken = Arc::clone(&untaken);
        std::thread::Builder::new()
            .name(format!("nursery-{number}"))
            .spawn(move || {
                let Ok(child) = take.recv() else {
                    return;
                };
                read_reports(reader.as_raw_fd(), &taken, &*report);
                drop(reader);
                // At the end of the socket, or at a broken one: the
                // nursery goes, and is reaped.
                let mut child = locked(&child);
                let _ = child.kill();
                let _ = child.wait();
                drop(child);
                report(Report::Gone { nursery: number });
            })?;
        let child = program
            .command()
            .arg("--nursery")
            .stdin(theirs)
            .stdout(Stdio::null())
            .spawn()?;
        let child = Arc::new(Mutex::new(child));
        let _ = give.send(Arc::clone(&child));
        Ok(Nursery {
            number,
            child,
            socket: ours,
            untaken,
        })
    }

    /// When the oldest hand-over it has not taken yet was sent.
    fn oldest_untaken(&self) -> Option<Instant> {
        locked(&self.untaken).front().copied()
    }

    /// Hands run `run` of task `seq` in `run_dir` over ([`hand_over`]).
    fn hand(&self, seq: u64, run: u32, run_dir: &Path, lock: &File, log: &File) -> io::Result<()> {
        hand_over(
            &self.socket,
            &self.untaken,
            (seq, run),
            run_dir,
            [lock, log],
        )
    }
}

/// Hands run `tag` in `run_dir` over on `socket`, with its locked lock
/// and its log (which the caller closes after), and notes it in
/// `untaken`. Never waits: with [`MAX_UNTAKEN`] hand-overs not yet taken,
/// or a full socket, it refuses (`WouldBlock`).
fn hand_over(
    socket: &OwnedFd,
    untaken: &Mutex<VecDeque<Instant>>,
    (seq, run): (u64, u32),
    run_dir: &Path,
    [lock, log]: [&File; 2],
) -> io::Result<()> {
    let path = run_dir.as_os_str().as_bytes();
    if path.len() > MAX_PATH {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the run directory's path is too long to hand over",
        ));
    }
    let mut untaken = locked(untaken);
    if untaken.len() >= MAX_UNTAKEN {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{MAX_UNTAKEN} hand-overs not yet taken"),
        ));
    }
    let tag = tag(seq, run);
    let fds = [lock.as_raw_fd(), log.as_raw_fd()];
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&tag), IoSlice::new(path)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        None,
    )?;
    untaken.push_back(Instant::now());
    Ok(())
}

/// A lock that a panicked holder left is still good here: the data is a
/// child handle or a queue of instants.
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// The daemon's side: reads the nursery's reports until the end of the
/// socket (the nursery is gone) or anything else it cannot read.
fn read_reports(socket: RawFd, untaken: &Mutex<VecDeque<Instant>>, report: &dyn Fn(Report)) {
    let mut buf = [0u8; REPORT];
    loop {
        match recv(socket, &mut buf, MsgFlags::empty()) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(REPORT) => {}
            _ => return,
        }
        let (seq, run) = untag(&buf[1..=TAG]);
        let pid = u32::from_le_bytes(buf[1 + TAG..].try_into().expect("4 bytes"));
        match buf[0] {
            TAKEN => {
                locked(untaken).pop_front();
                if pid != 0 {
                    report(Report::Forked { seq, run, pid });
                }
            }
            ENDED => report(Report::Ended { seq, run }),
            _ => return,
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

/// `carma-supervise --nursery`: forks a supervisor for each run the daemon
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
        let (seq, run_number) = (run.seq, run.run);
        let forked = match unsafe { fork() } {
            Ok(ForkResult::Child) => supervise_forked(run, &before, ended),
            Ok(ForkResult::Parent { child }) => {
                born.insert(child.as_raw(), (seq, run_number));
                Some(child.as_raw().unsigned_abs())
            }
            Err(e) => {
                log::warn!(
                    "cannot fork the supervisor of {}: {e}",
                    run.run_dir.display()
                );
                None
            }
        };
        // Its lock let go before anything is said: a run reported ended
        // must not look supervised still.
        drop(run);
        let told = match forked {
            Some(pid) => tell(socket, TAKEN, seq, run_number, pid),
            // Nobody named itself: the run did not start.
            None => {
                tell(socket, TAKEN, seq, run_number, 0) && tell(socket, ENDED, seq, run_number, 0)
            }
        };
        if !told {
            return Ok(());
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
            && !tell(socket, ENDED, seq, run, 0)
        {
            return false;
        }
    }
}

/// Sends the daemon a report of `kind` on run `run` of task `seq`; false
/// when the daemon is gone (the only way a send on the pair fails), which
/// is no error: the next daemon looks at the run.
fn tell(socket: RawFd, kind: u8, seq: u64, run: u32, pid: u32) -> bool {
    let mut report = [0u8; REPORT];
    report[0] = kind;
    report[1..=TAG].copy_from_slice(&tag(seq, run));
    report[1 + TAG..].copy_from_slice(&pid.to_le_bytes());
    send(socket, &report, MsgFlags::MSG_NOSIGNAL).is_ok()
}

/// The forked child: sheds what is the nursery's (the reaping descriptor,
/// its signal mask, the socket on standard input, the daemon's session),
/// takes the run's log as its standard error and supervises.
fn supervise_forked(run: Handed, before: &SigSet, ended: SignalFd) -> ! {
    drop(ended);
    let code = match shed(before, run.log) {
        Ok(()) => match crate::supervisor::supervise(&run.run_dir, run.lock) {
            Ok(()) => 0,
            Err(e) => {
                let _ = writeln!(io::stderr(), "carma supervise: {e}");
                1
            }
        },
        Err(e) => {
            // Said in the journal's form: standard error may still be the
            // daemon's.
            log::error!("the supervisor of {}: {e}", run.run_dir.display());
            1
        }
    };
    std::process::exit(code)
}

/// The run's log first, so that what fails after goes there. The stop
/// signals stay blocked from here on: the supervisor reads them.
fn shed(before: &SigSet, log: OwnedFd) -> io::Result<()> {
    nix::unistd::dup2_stderr(&log)?;
    drop(log);
    let mut mask = *before;
    for signal in crate::supervisor::stop_signals().iter() {
        mask.add(signal);
    }
    mask.thread_set_mask()?;
    nix::unistd::dup2_stdin(File::open("/dev/null")?)?;
    setsid()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The daemon's and the nursery's ends of a pair, and a run with its
    /// lock taken and its log open.
    struct Fixture {
        ours: OwnedFd,
        theirs: OwnedFd,
        _dir: tempfile::TempDir,
        run: PathBuf,
        lock: File,
        log: File,
        untaken: Mutex<VecDeque<Instant>>,
    }

    fn fixture() -> Fixture {
        let (ours, theirs) = pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run-1");
        std::fs::create_dir(&run).unwrap();
        let (lock, log) = crate::supervisor::lock_run(&run).unwrap();
        Fixture {
            ours,
            theirs,
            _dir: dir,
            run,
            lock,
            log,
            untaken: Mutex::default(),
        }
    }

    #[test]
    fn a_hand_over_carries_the_tag_the_path_and_both_descriptors_and_reports_come_back_whole() {
        let f = fixture();
        hand_over(&f.ours, &f.untaken, (7, 3), &f.run, [&f.lock, &f.log]).unwrap();
        drop((f.lock, f.log));
        let handed = take_run(f.theirs.as_raw_fd()).unwrap().unwrap();
        assert_eq!((handed.seq, handed.run), (7, 3));
        assert_eq!(handed.run_dir, f.run);
        // The lock is still held (by the handed descriptor), and the log
        // is the run's.
        assert!(crate::supervisor::is_running(&f.run));
        let mut log = File::from(handed.log);
        log.write_all(b"hello").unwrap();
        let mut text = String::new();
        File::open(f.run.join("supervisor.log"))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "hello");
        drop(handed.lock);
        assert!(!crate::supervisor::is_running(&f.run));

        // The reports, until the end of the socket: a fork, an end, and a
        // run that could not be forked.
        assert!(tell(f.theirs.as_raw_fd(), TAKEN, 7, 3, 4242));
        assert!(tell(f.theirs.as_raw_fd(), ENDED, 7, 3, 0));
        assert!(tell(f.theirs.as_raw_fd(), TAKEN, 8, 1, 0));
        assert!(tell(f.theirs.as_raw_fd(), ENDED, 8, 1, 0));
        drop(f.theirs);
        let reports = Mutex::new(Vec::new());
        read_reports(f.ours.as_raw_fd(), &f.untaken, &|r| {
            locked(&reports).push(r);
        });
        assert_eq!(
            reports.into_inner().unwrap(),
            [
                Report::Forked {
                    seq: 7,
                    run: 3,
                    pid: 4242
                },
                Report::Ended { seq: 7, run: 3 },
                Report::Ended { seq: 8, run: 1 },
            ]
        );
        assert!(locked(&f.untaken).is_empty(), "every hand-over was taken");
        assert!(!tell(f.ours.as_raw_fd(), ENDED, 7, 3, 0));
        let (ours, theirs) = pair().unwrap();
        drop(ours);
        assert!(take_run(theirs.as_raw_fd()).unwrap().is_none());
    }

    #[test]
    fn a_nursery_behind_on_its_hand_overs_gets_no_more_until_it_takes_one() {
        let f = fixture();
        let hand = || hand_over(&f.ours, &f.untaken, (1, 1), &f.run, [&f.lock, &f.log]);
        for _ in 0..MAX_UNTAKEN {
            hand().unwrap();
        }
        let refused = hand().unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::WouldBlock, "{refused}");

        // One taken (and reported) makes room for one more. (A nursery
        // that closed with hand-overs unread would end the reports with
        // ECONNRESET, maybe before this one.)
        let runs: Vec<Handed> = (0..MAX_UNTAKEN)
            .map(|_| take_run(f.theirs.as_raw_fd()).unwrap().unwrap())
            .collect();
        assert!(tell(f.theirs.as_raw_fd(), TAKEN, 1, 1, 0));
        drop((f.theirs, runs));
        read_reports(f.ours.as_raw_fd(), &f.untaken, &|_| {});
        assert_eq!(locked(&f.untaken).len(), MAX_UNTAKEN - 1);
    }
}
