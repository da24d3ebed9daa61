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
//! through a close-on-exec pipe. Kernels without `clone3` or cgroups v2 get
//! a plain fork that writes itself into `cgroup.procs`, as before.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Everything the child needs, made before the fork.
pub struct Spawn {
    /// Where to look for the program, in order (its name joined to each
    /// directory of the job's `PATH`, or the one path it was given).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    env: Vec<CString>,
    /// The job's standard input, output and error.
    stdio: [OwnedFd; 3],
    /// Groups, group and user to become, when not staying root.
    user: Option<(Vec<libc::gid_t>, libc::gid_t, libc::uid_t)>,
    workdir: CString,
    /// The cgroup directory to be born in, and its `cgroup.procs` for a
    /// kernel that cannot do that.
    cgroup: Option<(RawFd, RawFd)>,
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
        })
    }

    /// Runs the program as `uid`/`gid` with the supplementary `groups`.
    pub fn user(&mut self, uid: u32, gid: u32, groups: &[nix::unistd::Gid]) {
        let groups = groups.iter().map(|g| g.as_raw()).collect();
        self.user = Some((groups, gid, uid));
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
        let (child, born_in_cgroup) = self.fork()?;
        if child == 0 {
            let procs = self
                .cgroup
                .filter(|_| !born_in_cgroup)
                .map(|(_, procs)| procs);
            // SAFETY: in the child of a fork, only raw system calls on
            // what was prepared above; it never returns.
            unsafe { self.child(&argv, &env, procs, write.as_raw_fd()) }
        }
        drop(write);
        let pid = Pid::from_raw(child);
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
        Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
    }

    /// `clone3` into the cgroup where the kernel can; otherwise a plain
    /// fork whose child enters the cgroup itself. The child's id (0 in the
    /// child), and whether it was born in the cgroup.
    fn fork(&self) -> io::Result<(libc::pid_t, bool)> {
        if let Some((dir, _)) = self.cgroup {
            let args = CloneArgs {
                flags: CLONE_INTO_CGROUP,
                exit_signal: libc::SIGCHLD as u64,
                cgroup: dir as u64,
                ..CloneArgs::default()
            };
            // SAFETY: a fork (no shared memory, no new stack); the child
            // only makes raw system calls before exec.
            let pid = unsafe {
                libc::syscall(
                    libc::SYS_clone3,
                    &args as *const CloneArgs,
                    std::mem::size_of::<CloneArgs>(),
                )
            };
            if pid >= 0 {
                return Ok((pid as libc::pid_t, true));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // No clone3, or no CLONE_INTO_CGROUP: the old way below.
                Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EOPNOTSUPP) => {}
                _ => return Err(e),
            }
        }
        // SAFETY: the child only makes raw system calls before exec.
        match unsafe { libc::fork() } {
            -1 => Err(io::Error::last_os_error()),
            pid => Ok((pid, false)),
        }
    }

    /// The child's side: signals as a fresh program expects them, a new
    /// process group, into the cgroup through `procs` (after a plain
    /// fork; a write there by a child born in it would take the slow lock
    /// all the same), standard streams, the user, the working directory,
    /// exec. Any failure is written to `report` as the errno, and the
    /// child exits.
    unsafe fn child(
        &self,
        argv: &[*const libc::c_char],
        env: &[*const libc::c_char],
        procs: Option<RawFd>,
        report: RawFd,
    ) -> ! {
        let fail = |errno: i32| -> ! {
            let bytes = errno.to_ne_bytes();
            // SAFETY: raw write and exit; nothing allocated.
            unsafe {
                libc::write(report, bytes.as_ptr().cast(), bytes.len());
                libc::_exit(127)
            }
        };
        let last = || {
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        };
        // SAFETY: every call is a raw system call on values prepared
        // before the fork; `sigset_t` is plain data.
        unsafe {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            if libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &none,
                0usize,
                8usize,
            ) < 0
            {
                fail(last());
            }
            // Every signal at its default: an ignored one stays ignored
            // across exec, and the job would inherit SIGPIPE (which Rust
            // ignores), SIGQUIT and SIGINT (ignored for a daemon started
            // with `&` from a script), SIGHUP (`nohup`), and glibc's two
            // internal signals (32, 33), which its posix_spawn leaves
            // ignored in the process it starts. Raw, as glibc's own
            // sigaction refuses those two; a handler needs no reset (exec
            // does it), and SIGKILL and SIGSTOP cannot change.
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
            if let Some(procs) = procs {
                if libc::write(procs, b"0".as_ptr().cast(), 1) < 0 {
                    fail(last());
                }
            }
            for (target, fd) in self.stdio.iter().enumerate() {
                if libc::dup2(fd.as_raw_fd(), target as i32) < 0 {
                    fail(last());
                }
            }
            // Nothing beyond its three streams reaches the job, whatever
            // the supervisor (or the daemon, started from a shell) holds
            // without close-on-exec. A kernel older than 5.11 refuses the
            // flag; those descriptors are then left as they are.
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            if let Some((groups, gid, uid)) = &self.user {
                // Raw, not the C library's: its set*id also signal the
                // parent's threads, which do not exist here.
                if libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) < 0
                    || libc::syscall(libc::SYS_setresgid, *gid, *gid, *gid) < 0
                    || libc::syscall(libc::SYS_setresuid, *uid, *uid, *uid) < 0
                {
                    fail(last());
                }
            }
            if libc::chdir(self.workdir.as_ptr()) < 0 {
                fail(last());
            }
            // execvpe's search: the first candidate that can be run; a
            // missing one is passed over, a denied one remembered.
            let mut errno = libc::ENOENT;
            for path in &self.candidates {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

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
        let e = none.unwrap().start().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let gone = dir.path().join("gone");
        let spawn = Spawn::new("sh", [], &env(), stdio(dir.path()), &gone).unwrap();
        assert_eq!(
            spawn.start().unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
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
