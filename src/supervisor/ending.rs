//! A job's end, awaited by one thread: its exit, a cancellation (SIGTERM,
//! SIGINT or SIGHUP to the supervisor), its wall-time limit, and the grace
//! after either before SIGKILL.
//!
//! The signals are blocked and read from a `signalfd` together with
//! SIGCHLD, and the time limit and the grace are the timeout of one
//! `poll`, so the supervisor needs no thread besides its own. It had one
//! to watch signals, one to keep the time limit and one per grace period:
//! each a stack mapped and a `clone`, and once a process has two threads
//! every unmapping (its exit's included) interrupts the other CPUs to
//! flush their TLBs. A supervisor is forked for every run, and for short
//! jobs those threads were about an eighth of the server's CPU per job
//! (`tools/dispatch/burst-cpu.sh`, alternated with the build before: 14
//! pairs, 10 won, median ratio of CPU per job 0.87).
//!
//! Blocked from the supervisor's start, a stop signal is never lost and
//! never kills it: one that comes before the job runs is read before it
//! would be started, one that comes while it is being started is read
//! right after.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;

use crate::cgroup::RunCgroup;

/// How a job ended: its exit code or the signal that killed it, and
/// whether its wall-time limit passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Its first process outlived SIGKILL by [`HELD`]: the run ended
    /// without it.
    pub held: bool,
}

/// How long after SIGKILL the job's first process may take to end before
/// its run ends without it: a process waiting for a FUSE server that has
/// its request outlives SIGKILL until it is answered, and its user's own
/// server need never answer. Long enough for a CUDA process's teardown.
pub const HELD: Duration = Duration::from_secs(10);

/// The signals that stop a job: a cancellation's SIGTERM, and SIGINT and
/// SIGHUP as a terminal would send them.
pub fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(signal);
    }
    set
}

/// The supervisor's signals, held from its start to its end.
pub struct Watch {
    signals: SignalFd,
    /// A stop signal came.
    stopped: bool,
}

/// What stops the job of a run and when: its process group (whose
/// number is the job's first process, its leader), its cgroup, the grace
/// after a cancellation, and its time limit with that limit's own grace,
/// counted from `since`: before the job was started, so that a start held
/// up (a working directory that does not answer) counts against it.
pub struct Stops<'a> {
    pub group: Pid,
    pub cgroup: Option<&'a Path>,
    pub grace: Duration,
    pub time_limit: Option<(Duration, Duration)>,
    pub since: Instant,
}

impl Watch {
    /// Blocks the stop signals and SIGCHLD in this (single-threaded)
    /// process and opens them as a descriptor. A job started after this
    /// must unblock them before its exec ([`crate::spawn`] does).
    pub fn start() -> io::Result<Watch> {
        // Ignored (by whoever started this process), SIGCHLD would let
        // the kernel reap the job, and its end would be lost.
        // SAFETY: no handler is installed, only the default restored.
        unsafe { nix::sys::signal::signal(Signal::SIGCHLD, nix::sys::signal::SigHandler::SigDfl) }?;
        let mut set = stop_signals();
        set.add(Signal::SIGCHLD);
        set.thread_swap_mask(SigmaskHow::SIG_BLOCK)?;
        let signals = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Watch {
            signals,
            stopped: false,
        })
    }

    /// Whether a stop signal came so far. (Reading a nonblocking
    /// `signalfd` fails only on a bad descriptor: what was read stands.)
    pub fn stopped(&mut self) -> bool {
        let _ = self.drain();
        self.stopped
    }

    /// Reads every signal that came; whether SIGCHLD was among them.
    fn drain(&mut self) -> io::Result<bool> {
        let mut child = false;
        while let Some(info) = self.signals.read_signal()? {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => child = true,
                Ok(_) => self.stopped = true,
                Err(_) => {}
            }
        }
        Ok(child)
    }

    /// Waits until the job (the leader of `stops.group`) ends, stopping
    /// it as `stops` say meanwhile. Every other child that ends is reaped
    /// as well: the supervisor is a subreaper, so the processes a job
    /// orphans become its children, and none may linger as a zombie while
    /// it runs.
    pub fn wait(&mut self, stops: &Stops) -> io::Result<Ended> {
        // A limit or a grace too long to be an `Instant` (launch.json's
        // seconds saturate) never comes: `checked_add`, never `+`, which
        // panics.
        let mut limit_at = stops
            .time_limit
            .and_then(|(limit, _)| stops.since.checked_add(limit));
        let mut kill_at: Option<Instant> = None;
        // Once SIGKILL went out: when the job's first process is taken as
        // gone though it has not ended ([`HELD`]).
        let mut give_up_at: Option<Instant> = None;
        let mut stopping = false;
        let mut timed_out = false;
        // SIGCHLD may have come before the signals were read: look once.
        let mut child = true;
        loop {
            if self.drain()? {
                child = true;
            }
            // The limit before the end: a job that ends once its limit
            // has passed (killed by the daemon's backstop while its start
            // was held, say) ended by its limit.
            let now = Instant::now();
            if let Some((_, grace)) = stops.time_limit
                && limit_at.is_some_and(|at| at <= now)
            {
                limit_at = None;
                timed_out = true;
                terminate(stops, now.checked_add(grace), &mut kill_at);
            }
            if child {
                child = false;
                if let Some((code, signal)) = reap(stops.group)? {
                    return Ok(Ended {
                        code,
                        signal,
                        timed_out,
                        held: false,
                    });
                }
            }
            if self.stopped && !stopping {
                stopping = true;
                terminate(stops, now.checked_add(stops.grace), &mut kill_at);
            }
            if kill_at.is_some_and(|at| at <= now) {
                kill_at = None;
                give_up_at = now.checked_add(HELD);
                let _ = killpg(stops.group, Signal::SIGKILL);
                if let Some(dir) = stops.cgroup {
                    RunCgroup::kill(dir);
                }
            }
            if give_up_at.is_some_and(|at| at <= now) {
                // Held in the kernel (a read from its user's FUSE file
                // system that never answers): it dies when it returns, but
                // the run, and its GPUs, end now, as its limit or its
                // cancel said. What is left of it stays in its cgroup,
                // which the daemon removes once it empties.
                let _ = writeln!(
                    io::stderr(),
                    "the job outlived SIGKILL for {} s (held in the kernel); its run ends without it",
                    HELD.as_secs()
                );
                return Ok(Ended {
                    code: None,
                    signal: None,
                    timed_out,
                    held: true,
                });
            }
            let next = [limit_at, kill_at, give_up_at].into_iter().flatten().min();
            let timeout = match next {
                None => PollTimeout::NONE,
                Some(at) => {
                    // Rounded up: woken early, it would only poll again.
                    let ms = at
                        .saturating_duration_since(now)
                        .as_nanos()
                        .div_ceil(1_000_000);
                    PollTimeout::try_from(ms.min(i32::MAX as u128) as i32)
                        .unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = [PollFd::new(self.signals.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// SIGTERM to the job's group and every process of its cgroup now,
/// SIGKILL at `kill_by` (never, if `None`) or at the time already set,
/// whichever is sooner.
fn terminate(stops: &Stops, kill_by: Option<Instant>, kill_at: &mut Option<Instant>) {
    let _ = killpg(stops.group, Signal::SIGTERM);
    if let Some(dir) = stops.cgroup {
        RunCgroup::signal(dir, Signal::SIGTERM);
    }
    *kill_at = [*kill_at, kill_by].into_iter().flatten().min();
}

/// Reaps every child that ended; `job`'s exit code or killing signal if
/// it was among them. The job's group gets SIGKILL first, while the
/// leader's zombie still holds the group's number: whatever the job left
/// behind in it goes with it, and once the leader is reaped the number
/// could be another process group's.
fn reap(job: Pid) -> io::Result<Option<(Option<i32>, Option<i32>)>> {
    let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        let status = match waitid(Id::All, peek) {
            Ok(status) => status,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        };
        let Some(pid) = status.pid() else {
            return Ok(None);
        };
        if pid == job {
            let _ = killpg(job, Signal::SIGKILL);
        }
        waitpid(pid, Some(WaitPidFlag::WNOHANG))?;
        if pid == job {
            return Ok(Some(match status {
                WaitStatus::Exited(_, code) => (Some(code), None),
                WaitStatus::Signaled(_, signal, _) => (None, Some(signal as i32)),
                _ => (None, None),
            }));
        }
    }
}
