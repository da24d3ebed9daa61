//! Starting a job's process: forked straight into its run's cgroup and
//! made the job's user before `exec`.
//!
//! Moving a process into a cgroup after it exists (a write to
//! `cgroup.procs`) takes the kernel's cgroup write lock, which waits for an
//! RCU grace period: 5-15 ms per job on an idle 2-core machine, most of
//! carma's submit → first line. A child made by `clone3` with
//! `CLONE_INTO_CGROUP` (Linux 5.7) is born in the cgroup and takes only
//! the read side (0.3 ms). `std::process::Command` cannot ask for that,
//! so the fork and the steps before `exec` are here, done the way `std`
//! does them: everything allocated before the fork, only raw system calls
//! after it (the C library's `setuid` would try to signal the
//! parent's other threads, had it any), the `exec`'s failure reported
//! through a close-on-exec pipe. On x86-64 the child borrows its parent's
//! memory until its `exec`, as a `vfork` (and glibc's `posix_spawn`)
//! does: copying the page tables only for the `exec` to drop them, and
//! the copy-on-write faults on both sides after, were about a tenth of
//! what the supervisors and their trivial jobs spent (14 page faults a
//! job). Kernels without `clone3` or cgroups v2 get a plain fork that
//! writes itself into `cgroup.procs`, as before.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Marks a failure the child reports once it is the job's: entering the
/// working directory, the `exec`. Their causes are the user's to fix or
/// to make (a FUSE working directory that answers `EIO` or `EAGAIN` to
/// every lookup), so the same errno that passes by itself before the
/// switch (a full table of the system's, say) is final after it: taken
/// for passing, a launch was retried for good, a new run directory each
/// time, with everyone's launches paused.
const AS_ITS_USER: i32 = 1 << 30;

/// A start that failed once the process was the job's (see
/// `AS_ITS_USER`): not an OS error of the supervisor's, so it never
/// counts as one that passes by itself.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct JobsOwn(pub io::Error);

/// Everything the child needs, made before the fork.
pub struct Spawn {
    /// Where to look for the program, in order (its name joined to each
    /// directory of the job's `PATH`, or the one path it was given).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    env: Vec<CString>,
    /// The job's standard input, output and error.
    stdio: [OwnedFd; 3],
    /// Groups, group and user to become, when not staying root, and the
    /// saved user id to keep until `exec`.
    user: Option<(Vec<libc::gid_t>, libc::gid_t, libc::uid_t, libc::uid_t)>,
    workdir: CString,
    /// The cgroup directory to be born in, and its `cgroup.procs` for a
    /// kernel that cannot do that.
    cgroup: Option<(RawFd, RawFd)>,
    /// The file mode creation mask to run with; `None` keeps this
    /// process's.
    umask: Option<libc::mode_t>,
    /// This process is shielded from the kernel's OOM killer (a negative
    /// `oom_score_adj`, which a child inherits): the program is not.
    unshield: bool,
}

/// Whether `oom_score_adj`'s text shields its process from the OOM
/// killer.
fn shielded(adj: &str) -> bool {
    adj.trim().parse::<i32>().is_ok_and(|adj| adj < 0)
}

/// A C string from bytes a user gave (a path, an argument, a variable):
/// an interior NUL is refused with `what`, never cut short.
fn c_string(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::other(format!("{what} contains a NUL byte")))
}

impl Spawn {
    /// `program` with `args`, searched for in the `PATH` of `env` (which
    /// is all the environment the job gets) unless it names a path.
    pub fn new<'a>(
        program: &str,
        args: impl IntoIterator<Item = &'a OsStr>,
        env: &[(String, String)],
        stdio: [OwnedFd; 3],
        workdir: &Path,
    ) -> io::Result<Spawn> {
        let candidates = match program.contains('/') {
            true => vec![c_string(program.as_bytes(), "the program")?],
            false => {
                let path = env
                    .iter()
                    .find(|(k, _)| k == "PATH")
                    .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
                path.split(':')
                    .filter(|dir| !dir.is_empty())
                    .map(|dir| c_string(format!("{dir}/{program}").as_bytes(), "PATH"))
                    .collect::<io::Result<_>>()?
            }
        };
        let mut argv = vec![c_string(program.as_bytes(), "the program")?];
        for arg in args {
            argv.push(c_string(arg.as_bytes(), "an argument")?);
        }
        let env = env
            .iter()
            .map(|(k, v)| c_string(format!("{k}={v}").as_bytes(), "the environment"))
            .collect::<io::Result<_>>()?;
        Ok(Spawn {
            candidates,
            argv,
            env,
            stdio,
            user: None,
            workdir: c_string(workdir.as_os_str().as_bytes(), "the working directory")?,
            cgroup: None,
            umask: None,
            unshield: false,
        })
    }

    /// Runs the program with the file mode creation mask `mask` (its
    /// permission bits; the rest are dropped).
    pub fn umask(&mut self, mask: u32) {
        self.umask = Some(mask & 0o777);
    }

    /// Runs the program as `uid`/`gid` with the supplementary `groups`.
    pub fn user(&mut self, uid: u32, gid: u32, groups: &[nix::unistd::Gid]) {
        let groups = groups.iter().map(|g| g.as_raw()).collect();
        // Where a process's owner may trace it once its ids change
        // (`fs.suid_dumpable = 1`), the child must not be its user's
        // before `exec`: it shares its root parent's memory until then.
        // The saved user id stays root's (`exec` sets it to the effective
        // one), at a price: a FUSE mount of the user's, which admits only
        // processes whose every id is its owner's, cannot be the job's
        // working directory. Elsewhere every id is the user's at once.
        let traceable = std::fs::read("/proc/sys/fs/suid_dumpable")
            .map_or(true, |v| v != b"0\n" && v != b"2\n");
        let saved = match traceable {
            true => nix::unistd::geteuid().as_raw(),
            false => uid,
        };
        self.user = Some((groups, gid, uid, saved));
    }

    /// Runs the program without this process's shield from the kernel's
    /// OOM killer, if it has one: an administrator who protects the
    /// daemon (`OOMScoreAdjust=` in its unit) would otherwise protect
    /// every job, and the kernel would kill logins and other services
    /// first when a job takes the host's memory. The program starts at 0,
    /// the value a login gets, and, set by root, may not go below it.
    pub fn unshield_from_oom_killer(&mut self) {
        self.unshield =
            std::fs::read_to_string("/proc/self/oom_score_adj").is_ok_and(|adj| shielded(&adj));
    }

    /// Starts the program inside the cgroup whose directory is open at
    /// `dir` (its `cgroup.procs` open for writing at `procs`). Both stay
    /// open until [`Spawn::start`] returns.
    pub fn cgroup(&mut self, dir: RawFd, procs: RawFd) {
        self.cgroup = Some((dir, procs));
    }

    /// Forks, and execs in the child as a new process group leader.
    /// Returns once the program runs; its failure to start (a missing
    /// program, a working directory the user may not enter) is the
    /// error, with the OS error kept.
    pub fn start(&self) -> io::Result<Pid> {
        let argv = pointers(&self.argv);
        let env = pointers(&self.env);
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let mut child = Child {
            spawn: self,
            argv: &argv,
            env: &env,
            procs: None,
            report: write.as_raw_fd(),
            open_max: open_max(),
        };
        let pid = Pid::from_raw(self.fork(&mut child)?);
        drop(write);
        let mut errno = [0u8; 4];
        let mut got = 0;
        while got < errno.len() {
            match nix::unistd::read(&read, &mut errno[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if got == 0 {
            return Ok(pid);
        }
        let _ = waitpid(pid, None);
        let errno = i32::from_ne_bytes(errno);
        let error = io::Error::from_raw_os_error(errno & !AS_ITS_USER);
        Err(match errno & AS_ITS_USER {
            0 => error,
            _ => io::Error::other(JobsOwn(error)),
        })
    }

    /// `clone3` (into the cgroup, where there is one) where the kernel
    /// can; otherwise a plain fork whose child enters the cgroup itself.
    /// The child's id; the child never returns.
    fn fork(&self, child: &mut Child) -> io::Result<libc::pid_t> {
        match clone3(self.cgroup.map(|(dir, _)| dir), child) {
            Ok(pid) => return Ok(pid),
            // No clone3, or no CLONE_INTO_CGROUP: the old way below.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EOPNOTSUPP)
                ) => {}
            Err(e) => return Err(e),
        }
        // A write to `cgroup.procs` by a child born in the cgroup would
        // take the slow lock all the same, so only this child makes it.
        child.procs = self.cgroup.map(|(_, procs)| procs);
        // SAFETY: the child only makes raw system calls before exec.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            // SAFETY: in the child of a fork; it never returns.
            0 => unsafe { child.run() },
            pid => Ok(pid),
        }
    }
}

/// What the child runs on, made before the fork: the child touches
/// nothing else.
struct Child<'a> {
    spawn: &'a Spawn,
    argv: &'a [*const libc::c_char],
    env: &'a [*const libc::c_char],
    /// `cgroup.procs` to write itself into, when not born in the cgroup.
    procs: Option<RawFd>,
    /// The close-on-exec pipe that takes the errno of a failure.
    report: RawFd,
    /// One past the highest descriptor to close where the kernel has no
    /// `close_range` (this process's limit on open files).
    open_max: u32,
}

impl Child<'_> {
    /// The child's side: signals as a fresh program expects them, a new
    /// process group, into the cgroup through `procs` (after a plain
    /// fork; a write there by a child born in it would take the slow lock
    /// all the same), standard streams, the user, the working directory,
    /// exec. Any failure is written to `report` as the errno, and the
    /// child exits.
    unsafe fn run(&self) -> ! {
        let (spawn, argv, env, report) = (self.spawn, self.argv, self.env, self.report);
        let fail = |errno: i32| -> ! {
            let bytes = errno.to_ne_bytes();
            // SAFETY: raw write and exit; nothing allocated. Not the C
            // library's `write`, a cancellation point, which would mark
            // the parent's thread.
            unsafe {
                libc::syscall(libc::SYS_write, report, bytes.as_ptr(), bytes.len());
                libc::_exit(127)
            }
        };
        let last = || {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        // SAFETY: every call is a raw system call on values prepared
        // before the fork. Nothing is allocated or freed: a vfork-style
        // child shares its parent's heap.
        unsafe {
            // Every signal at its default: an ignored one stays ignored
            // across exec, and the job would inherit SIGPIPE (which Rust
            // ignores), SIGQUIT and SIGINT (ignored for a daemon started
            // with `&` from a script), SIGHUP (`nohup`), and glibc's two
            // internal signals (32, 33), which its posix_spawn leaves
            // ignored in the process it starts. Raw, as glibc's own
            // sigaction refuses those two; a handler, which exec would
            // reset, must not run in a child that shares its parent's
            // memory; SIGKILL and SIGSTOP cannot change.
            let default = KernelSigaction {
                handler: libc::SIG_DFL,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            for signal in 1..=64 {
                libc::syscall(libc::SYS_rt_sigaction, signal, &default, 0usize, 8usize);
            }
            if libc::setpgid(0, 0) < 0 {
                fail(last());
            }
            if let Some(procs) = self.procs
                && libc::syscall(libc::SYS_write, procs, b"0".as_ptr(), 1usize) < 0
            {
                fail(last());
            }
            for (target, fd) in spawn.stdio.iter().enumerate() {
                if libc::dup2(fd.as_raw_fd(), target as i32) < 0 {
                    fail(last());
                }
            }
            // Nothing beyond its three streams reaches the job, whatever
            // the supervisor (or the daemon, started from a shell) holds
            // without close-on-exec; closed now, not at the exec, so that
            // a child held before its exec holds none of them: the run's
            // lock among them would keep a killed supervisor's run
            // "supervised" ([`crate::lifecycle::Overdue`]). Only the
            // report stays, until the exec. A kernel older than 5.9 has
            // no `close_range`: the descriptors are then left as they
            // are, closed on exec where they say so.
            // Where there is none (a kernel older than 5.9, or a
            // container's filter that refuses it), one by one up to the
            // limit on open files: a descriptor the daemon inherited from
            // whoever started it, or one a library opened without
            // close-on-exec, must not reach a user's job.
            let report = report as u32;
            let close = |from: u32, to: u32| {
                if libc::syscall(libc::SYS_close_range, from, to, 0u32) < 0 {
                    for fd in from..=to.min(self.open_max) {
                        libc::syscall(libc::SYS_close, fd);
                    }
                }
            };
            if report > 3 {
                close(3, report - 1);
            }
            close(report.max(2) + 1, u32::MAX);
            if spawn.unshield {
                // Raised, which any process may do; written while still
                // root, it is also the least the job may set.
                let fd = libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    c"/proc/self/oom_score_adj".as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                );
                if fd < 0 || libc::syscall(libc::SYS_write, fd, b"0".as_ptr(), 1usize) < 0 {
                    fail(last());
                }
                libc::syscall(libc::SYS_close, fd);
            }
            if let Some((groups, gid, uid, saved)) = &spawn.user {
                // The audit system's login id, while this process may
                // still set it: one started by systemd has none, and a
                // job could then set any it likes (root's among them) for
                // every audit record of its own. Absent without audit.
                let fd = libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    c"/proc/self/loginuid".as_ptr(),
                    libc::O_WRONLY | libc::O_CLOEXEC,
                );
                if fd >= 0 {
                    let mut digits = [0u8; 10];
                    let at = decimal(*uid, &mut digits);
                    libc::syscall(
                        libc::SYS_write,
                        fd,
                        digits[at..].as_ptr(),
                        digits.len() - at,
                    );
                    libc::syscall(libc::SYS_close, fd);
                }
                // Raw, not the C library's: its set*id also signal the
                // parent's threads, which do not exist here. The saved
                // user id is `Spawn::user`'s choice.
                if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) < 0
                    || libc::syscall(libc::SYS_setresgid, *gid, *gid, *gid) < 0
                    || libc::syscall(libc::SYS_setresuid, *uid, *uid, *saved) < 0
                {
                    fail(last());
                }
                // Where the saved id stays root's until the exec, the
                // switch left every capability in place: none is kept,
                // and none is passed on to the job (ambient or
                // inheritable, as a unit's `AmbientCapabilities=` would).
                let header = CapHeader {
                    version: LINUX_CAPABILITY_VERSION_3,
                    pid: 0,
                };
                let none = [CapData::default(); 2];
                if libc::syscall(libc::SYS_capset, &header, none.as_ptr()) < 0
                    || libc::syscall(
                        libc::SYS_prctl,
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_CLEAR_ALL,
                        0,
                        0,
                        0,
                    ) < 0
                {
                    fail(last());
                }
                // The user may signal this process now, and where the
                // switch left it dumpable (`fs.suid_dumpable = 1`) a
                // SIGQUIT would write the memory it shares with its root
                // parent (the nursery's, other runs' launches among it)
                // into a core file of the user's. Not dumpable until the
                // `exec`, which makes the job's own memory; the parent
                // sets its flag back. Signals stay blocked until then.
                libc::syscall(libc::SYS_prctl, libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                // A session keyring of the job's own, as a login's
                // (`pam_keyinit`): the one it would inherit is the
                // daemon's, which every user's jobs would share, and
                // with it the keys each adds (credentials to file
                // servers). Kernels without keys, and containers whose
                // filter refuses `keyctl` (to the job as well), have none
                // to share this way.
                if libc::syscall(
                    libc::SYS_keyctl,
                    KEYCTL_JOIN_SESSION_KEYRING,
                    std::ptr::null::<libc::c_char>(),
                ) < 0
                    && !matches!(last(), libc::ENOSYS | libc::EPERM)
                {
                    fail(last() | AS_ITS_USER);
                }
            }
            // Then nothing blocked: the parent of a vfork-style clone
            // blocks every signal until its child has exec'd, so that no
            // handler of its runs in this child on their shared memory.
            set_blocked(0);
            if let Some(mask) = spawn.umask {
                libc::syscall(libc::SYS_umask, mask);
            }
            // From here on, what fails is the job's own.
            let fail = |errno: i32| -> ! { fail(errno | AS_ITS_USER) };
            if libc::chdir(spawn.workdir.as_ptr()) < 0 {
                fail(last());
            }
            // execvpe's search: the first candidate that can be run; a
            // missing one is passed over, a denied one remembered.
            let mut errno = libc::ENOENT;
            for path in &spawn.candidates {
                libc::execve(path.as_ptr(), argv.as_ptr(), env.as_ptr());
                match last() {
                    libc::ENOENT | libc::ENOTDIR => {}
                    libc::EACCES => errno = libc::EACCES,
                    other => fail(other),
                }
            }
            fail(errno)
        }
    }
}

/// `clone3`, into the cgroup open at `cgroup` where there is one, with
/// `child` run in the child. On x86-64 the child shares its parent's
/// memory on a stack of its own while the parent waits for its exec
/// (`CLONE_VM | CLONE_VFORK`, as glibc's `posix_spawn` does): no page
/// table is copied for an exec to drop, and neither side takes a
/// copy-on-write fault after. Elsewhere a copy, and only to be born in a
/// cgroup; `ENOSYS` leaves the rest to a fork.
#[cfg(target_arch = "x86_64")]
fn clone3(cgroup: Option<RawFd>, child: &mut Child) -> io::Result<libc::pid_t> {
    let stack = ChildStack::new()?;
    let mut args = CloneArgs {
        flags: CLONE_VM | CLONE_VFORK,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.bottom as u64,
        stack_size: CHILD_STACK as u64,
        ..CloneArgs::default()
    };
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir as u64;
    }
    // No handler of the parent's may run in the child before it has set
    // every signal to its default (`Child::run`).
    let blocked = set_blocked(u64::MAX);
    // SAFETY: a flag read.
    let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE) };
    // SAFETY: the child runs `Child::run` on `stack`, which it never
    // leaves, and makes only raw system calls on what `child` holds; the
    // parent resumes once the child has exec'd or exited, before `stack`
    // is unmapped.
    let pid = unsafe { clone3_vfork(&args, child) };
    set_blocked(blocked);
    // The child's switch to its user set the memory they shared to the
    // system's `fs.suid_dumpable` (0 by default: no core dump); this
    // process is still what it was.
    if dumpable > 0 {
        // SAFETY: a flag set back.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, dumpable as libc::c_ulong) };
    }
    match pid {
        pid if pid < 0 => Err(io::Error::from_raw_os_error(-pid as i32)),
        pid => Ok(pid as libc::pid_t),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn clone3(cgroup: Option<RawFd>, child: &mut Child) -> io::Result<libc::pid_t> {
    let Some(dir) = cgroup else {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    };
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: dir as u64,
        ..CloneArgs::default()
    };
    // SAFETY: a fork (no shared memory, no new stack); the child only
    // makes raw system calls before exec.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        // SAFETY: in the child of a fork; it never returns.
        0 => unsafe { child.run() },
        pid => Ok(pid as libc::pid_t),
    }
}

/// Sets this thread's blocked signals to `mask` (bit `n - 1` for signal
/// `n`, the kernel's own set: the C library's calls leave its two internal
/// signals out) and returns those blocked before.
/// `keyctl`'s operation that gives the caller a new session keyring.
const KEYCTL_JOIN_SESSION_KEYRING: libc::c_int = 1;

/// `capset`'s header and data (two 32-bit halves of each set), version 3.
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Writes `n` in decimal at the end of `digits`; where it starts.
/// Allocates nothing: it runs in a child that shares its parent's heap.
fn decimal(mut n: u32, digits: &mut [u8; 10]) -> usize {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return at;
        }
    }
}

/// This process's limit on open files, as `close_range`'s stand-in
/// closes up to it (at most 2^20 descriptors).
fn open_max() -> u32 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: one struct the kernel fills.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    match got {
        0 => limit.rlim_cur.min(1 << 20) as u32,
        _ => 1 << 20,
    }
}

fn set_blocked(mask: u64) -> u64 {
    let mut before = 0u64;
    // SAFETY: two 8-byte sets, the kernel's size.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &mask as *const u64,
            &mut before as *mut u64,
            8usize,
        )
    };
    before
}

/// The raw `clone3` whose child calls `child.run()` on the stack `args`
/// gives it: the C library has no wrapper for `clone3`, and its
/// `syscall` would return on the new, empty stack. The parent gets the
/// child's id or a negated errno.
///
/// # Safety
/// `args` must hold `CLONE_VM` with a stack the child may use, and the
/// caller must keep `child` and that stack until the child has exec'd.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_vfork(args: &CloneArgs, child: &Child) -> libc::c_long {
    unsafe extern "C" fn entry(child: *const libc::c_void) -> ! {
        // SAFETY: `child` is the `Child` the parent passed, alive until
        // this exec's or exits.
        unsafe { (*child.cast::<Child>()).run() }
    }
    let ret: libc::c_long;
    // SAFETY: the parent's side is one system call; the child's starts
    // on the empty stack's top (a page's end: aligned as a call needs)
    // and never returns from `entry`.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // The child: no frame above `entry` for a backtrace to walk.
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *const CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") (child as *const Child).cast::<libc::c_void>(),
            in("r13") entry as unsafe extern "C" fn(*const libc::c_void) -> !,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// The vfork-style child's stack size: it runs a few system calls.
#[cfg(target_arch = "x86_64")]
const CHILD_STACK: usize = 64 * 1024;

/// The vfork-style child's stack, mapped for one start, with a page
/// below it that faults: an overflow kills the child instead of writing
/// into its parent's memory.
#[cfg(target_arch = "x86_64")]
struct ChildStack {
    map: *mut libc::c_void,
    len: usize,
    /// The lowest address the child may use.
    bottom: *mut libc::c_void,
}

#[cfg(target_arch = "x86_64")]
impl ChildStack {
    fn new() -> io::Result<ChildStack> {
        // SAFETY: plain data from the kernel.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = CHILD_STACK + page;
        // SAFETY: a fresh anonymous mapping, owned by the value returned.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack {
            map,
            len,
            // SAFETY: within the mapping.
            bottom: unsafe { map.cast::<u8>().add(page).cast() },
        };
        // SAFETY: the mapping's first page, which nothing uses.
        if unsafe { libc::mprotect(map, page, libc::PROT_NONE) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used.
        unsafe { libc::munmap(self.map, self.len) };
    }
}

/// Reaps every child that has ended, without waiting for the others.
pub fn reap_ended() {
    while let Ok(status) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// The kernel's `struct sigaction` (x86-64 and arm64 alike: handler,
/// flags, restorer, an 8-byte mask; not the C library's, whose mask is
/// 128 bytes), for `rt_sigaction` made by hand.
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// A NULL-terminated array of pointers into `strings`, for exec.
fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// `clone3`'s argument (`struct clone_args`, Linux 5.7 with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Born in the cgroup `CloneArgs::cgroup` names (Linux 5.7).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
#[cfg(target_arch = "x86_64")]
const CLONE_VM: u64 = libc::CLONE_VM as u64;
#[cfg(target_arch = "x86_64")]
const CLONE_VFORK: u64 = libc::CLONE_VFORK as u64;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    /// The exit code or the killing signal of the child `pid` (waited for
    /// by its number, so tests side by side never take each other's).
    fn wait(pid: Pid) -> (Option<i32>, Option<i32>) {
        match waitpid(pid, None).unwrap() {
            WaitStatus::Exited(_, code) => (Some(code), None),
            WaitStatus::Signaled(_, signal, _) => (None, Some(signal as i32)),
            other => panic!("{other:?}"),
        }
    }

    fn stdio(dir: &Path) -> [OwnedFd; 3] {
        let null = OwnedFd::from(fs::File::open("/dev/null").unwrap());
        let out = OwnedFd::from(fs::File::create(dir.join("out")).unwrap());
        let err = OwnedFd::from(fs::File::create(dir.join("err")).unwrap());
        [null, out, err]
    }

    fn env() -> Vec<(String, String)> {
        vec![
            ("PATH".into(), "/nonexistent:/usr/bin:/bin".into()),
            ("GREETING".into(), "hello".into()),
        ]
    }

    #[test]
    fn the_program_is_found_on_the_jobs_path_with_only_its_environment() {
        let dir = tempfile::tempdir().unwrap();
        let args = ["-c", "echo $GREETING $HOME; pwd; exit 3"].map(OsStr::new);
        let spawn = Spawn::new("sh", args, &env(), stdio(dir.path()), dir.path()).unwrap();
        let pid = spawn.start().unwrap();
        assert_eq!(wait(pid), (Some(3), None));
        let out = fs::read_to_string(dir.path().join("out")).unwrap();
        let here = fs::canonicalize(dir.path()).unwrap();
        assert_eq!(out, format!("hello\n{}\n", here.display()));
    }

    #[test]
    fn a_job_gets_no_descriptor_beyond_its_streams_though_its_starter_held_one_open() {
        let dir = tempfile::tempdir().unwrap();
        // Open without close-on-exec, as a daemon started from a shell may
        // inherit one.
        let held = fs::File::open("/dev/null").unwrap();
        let fd = held.as_raw_fd();
        nix::fcntl::fcntl(
            &held,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
        )
        .unwrap();
        let script = format!("test -e /proc/self/fd/{fd} && echo leaked; echo ran");
        let args = ["-c", script.as_str()].map(OsStr::new);
        let spawn = Spawn::new("sh", args, &env(), stdio(dir.path()), dir.path()).unwrap();
        let pid = spawn.start().unwrap();
        assert_eq!(wait(pid), (Some(0), None));
        let out = fs::read_to_string(dir.path().join("out")).unwrap();
        assert_eq!(out, "ran\n");
        drop(held);
    }

    #[test]
    fn a_job_starts_with_no_signal_blocked_or_ignored_and_its_starter_keeps_its_mask() {
        use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
        let dir = tempfile::tempdir().unwrap();
        let mut usr1 = SigSet::empty();
        usr1.add(Signal::SIGUSR1);
        let mut before = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&usr1), Some(&mut before)).unwrap();
        let args = ["-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"].map(OsStr::new);
        let spawn = Spawn::new("sh", args, &env(), stdio(dir.path()), dir.path()).unwrap();
        let started = spawn.start();
        let mut after = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), Some(&mut after)).unwrap();
        assert_eq!(wait(started.unwrap()), (Some(0), None));
        assert!(after.contains(Signal::SIGUSR1));
        assert!(!after.contains(Signal::SIGUSR2) || before.contains(Signal::SIGUSR2));
        let out = fs::read_to_string(dir.path().join("out")).unwrap();
        assert_eq!(
            out,
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
        );
    }

    #[test]
    #[ignore = "needs root: starts the job as nobody"]
    fn a_job_as_its_user_holds_no_id_capability_or_keyring_of_root_and_its_starter_stays_dumpable()
    {
        const NOBODY: u32 = 65534;
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        // The shell's own auxiliary vector: AT_SECURE (23) would be 1
        // had the exec counted as a change of privilege. The session
        // keyring it sees: one of its own (root's, inherited, would not
        // be listed to it). Its audit login id, where audit is.
        let script = "grep -E '^(Uid|Gid|Cap(Inh|Prm|Eff|Amb)):' /proc/self/status; \
                      od -An -v -tu8 -w16 /proc/$$/auxv | awk '$1 == 23 { print \"AT_SECURE\", $2 }'; \
                      if [ -r /proc/keys ]; then \
                        awk '$8 == \"keyring\" && $9 ~ /^_(uid_)?ses/ { print \"keyring\", $6 }' /proc/keys | sort -u; \
                      else echo keyring 65534; fi; \
                      echo loginuid $(cat /proc/self/loginuid 2>/dev/null || echo none)";
        let args = ["-c", script].map(OsStr::new);
        let mut spawn = Spawn::new("sh", args, &env(), stdio(dir.path()), dir.path()).unwrap();
        let nobody = nix::unistd::Gid::from_raw(NOBODY);
        spawn.user(NOBODY, NOBODY, &[nobody]);
        let pid = spawn.start().unwrap();
        assert_eq!(wait(pid), (Some(0), None));
        // SAFETY: a flag read.
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_DUMPABLE) }, 1);
        let out = fs::read_to_string(dir.path().join("out")).unwrap();
        let ids = "65534\t65534\t65534\t65534";
        let none = "0000000000000000";
        // Unset (systemd's services, this test): the job's own now. Set
        // already: root may change it, unless the kernel keeps it.
        let login = match fs::read_to_string("/proc/self/loginuid") {
            Err(_) => "none".to_string(),
            Ok(id) if id == "4294967295" => NOBODY.to_string(),
            Ok(id) => match out.ends_with(&format!("loginuid {id}\n")) {
                true => id,
                false => NOBODY.to_string(),
            },
        };
        assert_eq!(
            out,
            format!(
                "Uid:\t{ids}\nGid:\t{ids}\nCapInh:\t{none}\nCapPrm:\t{none}\n\
                 CapEff:\t{none}\nCapAmb:\t{none}\nAT_SECURE 0\nkeyring 65534\n\
                 loginuid {login}\n"
            )
        );
    }

    #[test]
    fn a_job_starts_at_zero_when_its_starter_is_shielded_from_the_oom_killer_and_at_its_starters_score_otherwise()
     {
        // Only a shielded (negative) score is raised; lowering one takes
        // a capability this test may lack, so the child's write is tried
        // from a score above zero, where anyone may lower it again.
        assert!(shielded("-500\n") && !shielded("0\n") && !shielded("300\n"));
        assert!(!shielded("") && !shielded("-x"));
        let dir = tempfile::tempdir().unwrap();
        let own = fs::read_to_string("/proc/self/oom_score_adj").unwrap();
        fs::write("/proc/self/oom_score_adj", "300").unwrap();
        let start = |unshield: Option<bool>| {
            let args = ["-c", "cat /proc/self/oom_score_adj"].map(OsStr::new);
            let mut spawn = Spawn::new("sh", args, &env(), stdio(dir.path()), dir.path()).unwrap();
            spawn.unshield_from_oom_killer();
            if let Some(unshield) = unshield {
                spawn.unshield = unshield;
            }
            let started = spawn.start();
            started
                .map(wait)
                .map(|_| fs::read_to_string(dir.path().join("out")).unwrap())
        };
        let (kept, raised) = (start(None), start(Some(true)));
        fs::write("/proc/self/oom_score_adj", own.trim()).unwrap();
        assert_eq!(kept.unwrap(), "300\n", "a score above zero is inherited");
        assert_eq!(raised.unwrap(), "0\n");
    }

    #[test]
    fn a_job_leads_its_own_process_group_and_may_be_killed_by_a_signal() {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "-c",
            "ps -o pgid= -p $$ > pgid; echo $$ > pid; kill -TERM $$",
        ]
        .map(OsStr::new);
        let spawn = Spawn::new("sh", args, &env(), stdio(dir.path()), dir.path()).unwrap();
        let pid = spawn.start().unwrap();
        assert_eq!(wait(pid), (None, Some(libc::SIGTERM)));
        let pgid = fs::read_to_string(dir.path().join("pgid")).unwrap();
        assert_eq!(pgid.trim(), pid.to_string());
    }

    #[test]
    fn a_program_that_cannot_start_is_the_error_with_its_os_error() {
        let dir = tempfile::tempdir().unwrap();
        let none = Spawn::new(
            "no-such-program-carma",
            [],
            &env(),
            stdio(dir.path()),
            dir.path(),
        );
        // The job's own failure, its OS error inside: never one of the
        // supervisor's that passes by itself.
        let jobs_own = |e: io::Error| {
            assert_eq!(e.raw_os_error(), None);
            e.get_ref()
                .and_then(|inner| inner.downcast_ref::<JobsOwn>())
                .and_then(|own| own.0.raw_os_error())
        };
        let e = none.unwrap().start().unwrap_err();
        assert_eq!(jobs_own(e), Some(libc::ENOENT));
        let gone = dir.path().join("gone");
        let spawn = Spawn::new("sh", [], &env(), stdio(dir.path()), &gone).unwrap();
        assert_eq!(jobs_own(spawn.start().unwrap_err()), Some(libc::ENOENT));
    }

    #[test]
    fn a_nul_in_what_a_user_gave_is_refused_before_any_fork() {
        let dir = tempfile::tempdir().unwrap();
        let bad = vec![("X".to_string(), "a\0b".to_string())];
        let e = Spawn::new("sh", [], &bad, stdio(dir.path()), dir.path())
            .err()
            .unwrap();
        assert!(e.to_string().contains("NUL"), "{e}");
    }
}
