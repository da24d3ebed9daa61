//! Processes as Linux's `/proc` shows them, named by pid *and* start time.
//!
//! A bare pid is not an identity: after a process exits the kernel hands its
//! pid to the next process that asks, so "pid 4242 is alive" may be true of
//! a stranger. The start time (clock ticks after boot, field 22 of
//! `/proc/<pid>/stat`) never changes for a process and differs for the next
//! holder of the pid, so pid + start time names one process for the
//! machine's uptime. carma records that pair wherever it must find a process
//! again: a task's supervisor after a daemon restart, a simulated GPU's
//! memory claim.
//!
//! Everything here reads `/proc`; a process we cannot read (gone, or `/proc`
//! not mounted) is reported as absent, never as an error, because absent is
//! what every caller has to handle anyway.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One process, for as long as it lives: its pid and the start time that
/// tells it from later holders of that pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// Clock ticks after boot at which the process started.
    pub start_time: u64,
}

impl ProcessId {
    /// This process.
    pub fn current() -> Option<ProcessId> {
        ProcessId::of(std::process::id())
    }

    /// Whatever process holds `pid` now, zombies included (a zombie still
    /// holds its pid until it is reaped).
    pub fn of(pid: u32) -> Option<ProcessId> {
        start_time(pid).map(|start_time| ProcessId { pid, start_time })
    }

    /// Whether this very process still runs: its pid is taken by a process
    /// with the same start time that is not a zombie. A zombie has exited;
    /// only its exit status waits for its parent.
    pub fn is_alive(&self) -> bool {
        stat(self.pid).is_some_and(|stat| stat.start_time == self.start_time && !stat.has_exited())
    }
}

/// Start time of the process holding `pid`, in clock ticks after boot.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|stat| stat.start_time)
}

/// Real user id of the process holding `pid`.
pub fn real_uid(pid: u32) -> Option<u32> {
    uids(Path::new(&format!("/proc/{pid}"))).map(|[real, ..]| real)
}

/// The user ids (real, effective, saved, file system) of the process
/// whose `/proc` directory is `proc_dir` (`Uid:` in its `status`).
pub fn uids(proc_dir: &Path) -> Option<[u32; 4]> {
    let bytes = read_generated(&proc_dir.join("status")).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let mut ids = text
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .map(|id| id.parse().ok());
    Some([ids.next()??, ids.next()??, ids.next()??, ids.next()??])
}

/// Session id of the process holding `pid`.
pub fn session_id(pid: u32) -> Option<u32> {
    stat(pid).map(|stat| stat.session_id)
}

/// This process's children, zombies included, from the kernel's list of
/// each of its threads' children (`/proc/self/task/<tid>/children`: an
/// orphan handed to a subreaper may go to any of its threads). Where the
/// kernel keeps no such list, every process's `stat` is read for its
/// parent, which on a server running thousands of processes took
/// milliseconds at the end of every job.
pub fn own_children() -> Vec<u32> {
    if !has_children() {
        return Vec::new();
    }
    listed_children(std::process::id())
}

/// The children of `pid`, zombies included, as the kernel lists them for
/// each of its threads; read the long way where no list names one (the
/// kernel keeps none, or a child is being handed from a thread that ended
/// to another).
fn listed_children(pid: u32) -> Vec<u32> {
    let listed = || -> std::io::Result<Vec<u32>> {
        let mut pids = Vec::new();
        for thread in fs::read_dir(format!("/proc/{pid}/task"))? {
            let text = fs::read_to_string(thread?.path().join("children"))?;
            pids.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        Ok(pids)
    };
    match listed() {
        Ok(pids) if !pids.is_empty() => pids,
        _ => children(pid),
    }
}

/// Sends `signal` to every child of `parent` while it lives; how many
/// were sent it. Each child is held by a pidfd before it is checked to be
/// `parent`'s child: a pid that passed to another process between the
/// listing and the signal is never signalled.
pub fn signal_children(parent: &ProcessId, signal: nix::sys::signal::Signal) -> usize {
    if !parent.is_alive() {
        return 0;
    }
    listed_children(parent.pid)
        .into_iter()
        .filter(|&child| {
            signal_checked(child, signal, || {
                stat(child).is_some_and(|s| s.parent == parent.pid) && parent.is_alive()
            })
        })
        .count()
}

/// Whether a child of `parent` has not yet called `exec`: it still runs
/// its parent's program (a child started `vfork`-style shares its
/// parent's memory, and with it the program, until then). Such a child
/// held by its user holds its parent with it ([`crate::lifecycle::Overdue`]).
pub fn has_child_before_exec(parent: &ProcessId) -> bool {
    let exe = |pid: u32| fs::read_link(format!("/proc/{pid}/exe")).ok();
    let Some(program) = exe(parent.pid) else {
        return false;
    };
    parent.is_alive()
        && listed_children(parent.pid)
            .into_iter()
            .any(|child| exe(child).as_ref() == Some(&program))
}

/// Sends `signal` to `process`, if it still runs (not to a later holder
/// of its pid): false if it does not.
pub fn signal(process: &ProcessId, signal: nix::sys::signal::Signal) -> io::Result<bool> {
    let gone = |e: &io::Error| e.raw_os_error() == Some(nix::libc::ESRCH);
    let sent = Held::new(process.pid).and_then(|held| match process.is_alive() {
        true => held.send(signal).map(|()| true),
        false => Ok(false),
    });
    match sent {
        Err(e) if gone(&e) => Ok(false),
        other => other,
    }
}

/// Sends `signal` to the process holding `pid` now, if `is_it` says, once
/// that process is held by a pidfd, that it is the one meant. The one way
/// carma signals a pid it read somewhere (a listing, a file): a plain
/// `kill` after a check could reach whoever took the pid in between.
pub fn signal_checked(
    pid: u32,
    signal: nix::sys::signal::Signal,
    is_it: impl FnOnce() -> bool,
) -> bool {
    Held::new(pid).is_ok_and(|held| is_it() && held.send(signal).is_ok())
}

/// Sends `signal` to every process `list` names, each held by a pidfd
/// and found in a fresh `list` after: never to a later holder of a pid
/// that left the list. One fresh listing per 256 processes,
/// not one per process (a job of ten thousand processes).
pub fn signal_listed(list: impl Fn() -> Vec<u32>, signal: nix::sys::signal::Signal) -> usize {
    let mut sent = 0;
    for chunk in list().chunks(HELD_AT_ONCE) {
        let held: Vec<Held> = chunk
            .iter()
            .filter_map(|&pid| Held::new(pid).ok())
            .collect();
        let still: std::collections::HashSet<u32> = list().into_iter().collect();
        sent += held
            .iter()
            .filter(|h| still.contains(&h.pid) && h.send(signal).is_ok())
            .count();
    }
    sent
}

/// Processes held by pidfds at once in [`signal_listed`]: descriptors
/// are few.
const HELD_AT_ONCE: usize = 256;

/// A process held by a pidfd: what it is checked to be stays what is
/// signalled, even if it ends and its pid is taken meanwhile.
struct Held {
    pid: u32,
    /// None where no pidfd could be had ([`Held::new`]).
    fd: Option<std::os::fd::OwnedFd>,
}

impl Held {
    /// The process holding `pid` now (ESRCH if none does).
    fn new(pid: u32) -> io::Result<Held> {
        use std::os::fd::{FromRawFd, OwnedFd};
        // SAFETY: a plain system call; the descriptor is owned at once.
        let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            // A kernel before 5.3 has no pidfd, and one out of
            // descriptors gives none: the check, then kill(2), a moment
            // apart, rather than no signal at all.
            return match e.raw_os_error() {
                Some(nix::libc::ENOSYS | nix::libc::EMFILE | nix::libc::ENFILE) => {
                    Ok(Held { pid, fd: None })
                }
                _ => Err(e),
            };
        }
        let fd = std::os::fd::RawFd::try_from(fd).map_err(io::Error::other)?;
        // SAFETY: a new descriptor, ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Held { pid, fd: Some(fd) })
    }

    fn send(&self, signal: nix::sys::signal::Signal) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.fd else {
            let pid = nix::unistd::Pid::from_raw(self.pid as i32);
            return nix::sys::signal::kill(pid, signal).map_err(io::Error::from);
        };
        // SAFETY: a plain system call on a descriptor we own.
        let sent = unsafe {
            nix::libc::syscall(
                nix::libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                signal as i32,
                std::ptr::null::<nix::libc::siginfo_t>(),
                0,
            )
        };
        match sent {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

/// Whether this process has a child, running or not yet reaped: one
/// `waitid` that reaps nothing, where most jobs leave nothing behind.
fn has_children() -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    waitid(Id::All, flags) != Err(nix::errno::Errno::ECHILD)
}

/// The processes whose parent is `pid`, zombies included. A child's pid
/// cannot pass to another process before its parent reaps it, so for the
/// parent itself the list names processes, not numbers that may be reused.
fn children(pid: u32) -> Vec<u32> {
    processes()
        .filter(|&(child, _)| stat(child).is_some_and(|stat| stat.parent == pid))
        .map(|(child, _)| child)
        .collect()
}

/// Processes holding a `flock` on the file `path`, from `/proc/locks`
/// (which names the process that took each lock): exclusive holders first.
/// A short-lived probe with a shared lock shows up too, which is why a
/// caller that found the lock taken asks again after a moment before it
/// names anyone.
pub fn flock_holders(path: &Path) -> Vec<u32> {
    let Ok(meta) = fs::metadata(path) else {
        return Vec::new();
    };
    let mut holders = flocks_on(meta.dev(), meta.ino());
    holders.sort_by_key(|&(pid, exclusive)| (!exclusive, pid));
    holders.dedup();
    holders.into_iter().map(|(pid, _)| pid).collect()
}

/// The `(pid, exclusive)` of every `flock` on the file with this device
/// and inode: what anyone may ask of a lock file they cannot open.
pub fn flocks_on(dev: u64, ino: u64) -> Vec<(u32, bool)> {
    fs::read_to_string("/proc/locks")
        .map_or_else(|_| Vec::new(), |text| parse_locks(&text, dev, ino))
}

/// The `(pid, exclusive)` of every granted `FLOCK` on the inode in the text
/// of `/proc/locks`: lines like
/// `3: FLOCK  ADVISORY  WRITE 4242 fd:01:1311 0 EOF`, device in hex
/// `major:minor`; waiters (`->`) are skipped.
fn parse_locks(text: &str, dev: u64, ino: u64) -> Vec<(u32, bool)> {
    let wanted = format!(
        "{:02x}:{:02x}:{ino}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, "FLOCK", _, kind, pid, file, ..] if *file == wanted => {
                    Some((pid.parse().ok()?, *kind == "WRITE"))
                }
                _ => None,
            }
        })
        .collect()
}

/// Processes of the file's owner that have the file `path` open, found
/// through their `/proc/<pid>/fd` links (by device and inode, not by
/// name). For a lock that was handed down to a child process,
/// `/proc/locks` still names the parent that took it; the processes
/// holding the file open are the truth. Each open file is looked at
/// with the attributes the kernel has cached: a fresh look at a file on
/// a user's FUSE mount would ask that file system, which may never
/// answer. Only processes of the file's owner are looked at, which
/// leaves out every other user's.
pub fn openers(path: &Path) -> Vec<u32> {
    let Ok(target) = fs::metadata(path) else {
        return Vec::new();
    };
    let wanted = (
        nix::sys::stat::major(target.dev()),
        nix::sys::stat::minor(target.dev()),
        target.ino(),
    );
    processes()
        .filter(|(_, dir)| fs::metadata(dir).is_ok_and(|m| m.uid() == target.uid()))
        .filter(|(_, dir)| {
            fs::read_dir(dir.join("fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| cached_identity(&fd.path()) == Some(wanted))
            })
        })
        .map(|(pid, _)| pid)
        .collect()
}

/// The device (major, minor) and inode of the file a `/proc` descriptor
/// link names, as the kernel has them cached (`AT_STATX_DONT_SYNC`: no
/// request to the file's file system).
fn cached_identity(link: &Path) -> Option<(u64, u64, u64)> {
    use nix::libc;
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(link.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero `statx` is a valid value for the kernel to fill.
    let mut stat: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a buffer of the kernel's size.
    let done = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::AT_STATX_DONT_SYNC,
            libc::STATX_INO,
            &mut stat,
        )
    };
    (done == 0).then(|| {
        (
            u64::from(stat.stx_dev_major),
            u64::from(stat.stx_dev_minor),
            stat.stx_ino,
        )
    })
}

/// Every process now: its pid and its `/proc/<pid>` directory.
pub fn processes() -> impl Iterator<Item = (u32, std::path::PathBuf)> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, entry.path()))
        })
}

/// The fields of `/proc/<pid>/stat` that carma uses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stat {
    /// Field 3: `R`, `S`, `D`, `Z` (zombie), `X` (dead), ...
    state: char,
    /// Field 4.
    parent: u32,
    /// Field 6.
    session_id: u32,
    /// Field 22.
    start_time: u64,
}

impl Stat {
    fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

fn stat(pid: u32) -> Option<Stat> {
    // Field 2 is whatever name the process gave itself, in bytes that need
    // not be UTF-8; refusing the whole line for it would make a job's
    // process invisible (its GPU memory unattributed) by renaming itself.
    let bytes = read_generated(Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    parse_stat(&String::from_utf8_lossy(&bytes))
}

/// Bytes of memory waiting to be written back, or being written, in the
/// whole system (`Dirty` and `Writeback` in `/proc/meminfo`): what a flush
/// of a file system may have to wait for. `None` when it cannot be read.
pub fn unwritten_bytes() -> Option<u64> {
    let text = read_generated_text(Path::new("/proc/meminfo")).ok()?;
    unwritten_in(&text)
}

fn unwritten_in(meminfo: &str) -> Option<u64> {
    let kib = |key: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    };
    Some(
        kib("Dirty:")?
            .saturating_add(kib("Writeback:")?)
            .saturating_mul(1024),
    )
}

/// A file the kernel makes as it is read (`/proc`, cgroupfs), whole. Its
/// size says nothing (0 or a page), and read as a regular file it was
/// asked its size and then read in 32-byte pieces: six syscalls for a
/// process's `stat`, which supervisors and the daemon read for every run.
/// Here it is read into a page at once.
pub fn read_generated(path: &Path) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(4096);
    fs::File::open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_generated`] as text.
pub fn read_generated_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_generated(path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads a `/proc/<pid>/stat` line. Field 2, the command name, is in
/// parentheses and may itself contain spaces and parentheses (`a) (b` is a
/// valid name), so the fields after it are counted from the *last* `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, after_comm) = text.rsplit_once(')')?;
    // Field 3 is the first after the command name.
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).copied();
    let mut state = field(3)?.chars();
    let (Some(state), None) = (state.next(), state.next()) else {
        return None;
    };
    Some(Stat {
        state,
        parent: field(4)?.parse().ok()?,
        session_id: field(6)?.parse().ok()?,
        start_time: field(22)?.parse().ok()?,
    })
}

/// A mount, as `/proc/self/mountinfo` lists it.
#[derive(Debug, PartialEq)]
pub struct Mount {
    /// The mount's id: a mount made later at the same point is another.
    pub id: u64,
    pub point: PathBuf,
    /// The file system's type (`fuse.sshfs`, say).
    pub kind: String,
    /// The uid a FUSE mount names as its owner (`user_id=`).
    pub owner: Option<u32>,
}

/// The mounts of a mount table's bytes (`/proc/self/mountinfo`): read as
/// bytes, since the names in it are users' (not UTF-8, say).
pub fn mounts(table: &[u8]) -> impl Iterator<Item = Mount> + '_ {
    table.split(|&b| b == b'\n').filter_map(parse_mount)
}

/// One line of `mountinfo`: `id parent major:minor root point options
/// [optional fields] - type source super-options`. Every field is
/// escaped ([`unescape`]), so spaces separate them.
fn parse_mount(line: &[u8]) -> Option<Mount> {
    let split = line.windows(3).position(|w| w == b" - ")?;
    let (mount, fs) = (&line[..split], &line[split + 3..]);
    let mut fields = mount.split(|&b| b == b' ');
    let id = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let point = unescape(fields.nth(3)?);
    let mut fs = fs.split(|&b| b == b' ');
    let kind = String::from_utf8_lossy(fs.next()?).into_owned();
    let owner = fs
        .nth(1)
        .and_then(|opts| {
            opts.split(|&b| b == b',')
                .find_map(|o| o.strip_prefix(b"user_id="))
        })
        .and_then(|uid| std::str::from_utf8(uid).ok()?.parse().ok());
    Some(Mount {
        id,
        point: PathBuf::from(point),
        kind,
        owner,
    })
}

/// A path as the kernel writes it in the mount table: space, tab, newline
/// and backslash as three octal digits after a backslash, every other
/// byte as it is.
fn unescape(bytes: &[u8]) -> OsString {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_holders_of_a_file_are_found_by_its_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::write(&path, "").unwrap();
        let me = std::process::id();
        assert!(!super::openers(&path).contains(&me));
        let held = std::fs::File::open(&path).unwrap();
        // Another name of another file is not it.
        std::fs::write(dir.path().join("other"), "").unwrap();
        assert_eq!(super::openers(&path), [me]);
        drop(held);
    }

    #[test]
    fn unwritten_memory_is_dirty_and_under_writeback() {
        let meminfo = "MemTotal:       24000000 kB\nDirty:              1200 kB\n\
                       Writeback:            34 kB\nWritebackTmp:          0 kB\n";
        assert_eq!(super::unwritten_in(meminfo), Some((1200 + 34) * 1024));
        assert_eq!(super::unwritten_in("Dirty: 5 kB\n"), None);
        assert!(super::unwritten_bytes().is_some());
    }

    use super::*;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// A real line from a shell, with a command name that tries to fool a
    /// parser that splits on the first `)`.
    const TRICKY: &str = "4242 (a) (b 1 2) S 1 4242 4240 34816 4242 4194560 123 0 0 0 \
        1 2 0 0 20 0 1 0 987654 8568832 1104 18446744073709551615 1 1 0 0 0 0 \
        65536 3686404 1266761467 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn a_processs_real_uid_is_read_from_its_status() {
        let me = nix::unistd::getuid().as_raw();
        assert_eq!(real_uid(std::process::id()), Some(me));
        assert_eq!(real_uid(u32::MAX), None);
    }

    #[test]
    fn parses_after_the_last_parenthesis() {
        assert_eq!(
            parse_stat(TRICKY),
            Some(Stat {
                state: 'S',
                parent: 1,
                session_id: 4240,
                start_time: 987654,
            })
        );
    }

    #[test]
    fn truncated_or_garbled_lines_are_not_processes() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("4242 (sleep) S 1 2 3"), None);
        assert_eq!(parse_stat("4242 (sleep"), None);
        let garbled = TRICKY.replace(" 987654 ", " soon ");
        assert_eq!(parse_stat(&garbled), None);
    }

    #[test]
    fn this_process_is_alive() {
        let me = ProcessId::current().unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(me.is_alive());
        assert!(session_id(me.pid).is_some());
    }

    #[test]
    fn a_child_is_listed_under_its_parent_until_it_is_reaped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let me = std::process::id();
        assert!(children(me).contains(&child.id()));
        assert!(own_children().contains(&child.id()));
        child.kill().unwrap();
        // A zombie until reaped.
        std::thread::sleep(Duration::from_millis(50));
        assert!(own_children().contains(&child.id()));
        child.wait().unwrap();
        assert!(!children(me).contains(&child.id()));
        assert!(!own_children().contains(&child.id()));
    }

    #[test]
    fn the_same_pid_with_another_start_time_is_another_process() {
        let me = ProcessId::current().unwrap();
        let impostor = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!impostor.is_alive());
    }

    #[test]
    fn a_child_is_alive_until_it_exits_and_dead_as_a_zombie() {
        let mut child = Command::new("sleep").arg("0.2").spawn().unwrap();
        let id = ProcessId::of(child.id()).unwrap();
        assert!(id.is_alive());
        wait_for_zombie(&child);
        // Not reaped yet: the pid is still taken, by a zombie.
        assert_eq!(ProcessId::of(child.id()), Some(id));
        assert!(!id.is_alive());
        child.wait().unwrap();
        assert!(!id.is_alive());
        assert_eq!(ProcessId::of(child.id()), None);
    }

    #[test]
    fn a_command_name_with_parentheses_reads_like_any_other() {
        let dir = tempfile::tempdir().unwrap();
        let sleep = ["/bin/sleep", "/usr/bin/sleep"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap();
        let tricky = dir.path().join("a) (b 1 2");
        std::os::unix::fs::symlink(sleep, &tricky).unwrap();
        let mut child = Command::new(&tricky).arg("5").spawn().unwrap();
        // Until the child has exec'd, /proc shows the forked test thread's
        // name: wait for the exec, not for a fixed time.
        let comm_path = format!("/proc/{}/comm", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut comm = fs::read_to_string(&comm_path).unwrap();
        while comm.trim_end() != "a) (b 1 2" && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
            comm = fs::read_to_string(&comm_path).unwrap();
        }
        assert_eq!(comm.trim_end(), "a) (b 1 2");
        let id = ProcessId::of(child.id()).unwrap();
        assert!(id.is_alive());
        assert_eq!(session_id(child.id()), session_id(std::process::id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!id.is_alive());
    }

    /// Found while writing the property test below: a command name that is
    /// not UTF-8 made the whole stat line unreadable, so the process looked
    /// absent.
    #[test]
    fn a_command_name_that_is_not_utf8_is_still_a_process() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let sleep = ["/bin/sleep", "/usr/bin/sleep"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap();
        let latin1 = dir.path().join(OsStr::from_bytes(b"caf\xe9) (\xff"));
        std::os::unix::fs::symlink(sleep, &latin1).unwrap();
        let mut child = Command::new(&latin1).arg("5").spawn().unwrap();
        let id = ProcessId::of(child.id());
        let session = session_id(child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(id.is_some_and(|id| id.pid == child.id()));
        assert_eq!(session, session_id(std::process::id()));
    }

    /// A `/proc/<pid>/stat` line as the kernel writes it, with `comm` as the
    /// command name.
    fn stat_line(comm: &[u8], state: char, session: u32, start: u64) -> Vec<u8> {
        let mut line = b"4242 (".to_vec();
        line.extend_from_slice(comm);
        line.extend_from_slice(
            format!(
                ") {state} 1 4242 {session} 34816 4242 4194560 123 0 0 0 1 2 0 0 20 0 1 0 \
                 {start} 8568832 1104 18446744073709551615 1 1 0 0 0 0 65536 3686404 \
                 1266761467 0 0 0 17 1 0 0 0 0 0\n"
            )
            .as_bytes(),
        );
        line
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(1000),
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        })]

        /// The command name is chosen by the process (any bytes but NUL, up
        /// to 15 of them, parentheses and spaces included): it must never
        /// change what the other fields read as.
        #[test]
        fn any_command_name_reads_the_same_fields(
            comm in proptest::collection::vec(1..=255u8, 0..16),
            state in proptest::sample::select(&['R', 'S', 'D', 'Z', 'X', 'T', 'I']),
            session in proptest::prelude::any::<u32>(),
            start in proptest::prelude::any::<u64>(),
        ) {
            let line = stat_line(&comm, state, session, start);
            let stat = parse_stat(&String::from_utf8_lossy(&line));
            proptest::prop_assert_eq!(stat, Some(Stat { state, parent: 1, session_id: session, start_time: start }));
        }

        #[test]
        fn any_text_reads_or_is_no_process(text in proptest::prelude::any::<String>()) {
            let _ = parse_stat(&text);
        }
    }

    fn wait_for_zombie(child: &Child) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while stat(child.id()).is_some_and(|s| s.state != 'Z') {
            assert!(Instant::now() < deadline, "child never exited");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn lock_lines_name_their_holders() {
        let dev = nix::sys::stat::makedev(0xfd, 1);
        let text = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1311 0 EOF\n\
                    2: FLOCK  ADVISORY  READ  77 fd:01:1311 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 78 fd:01:1311 0 EOF\n\
                    3: POSIX  ADVISORY  WRITE 99 fd:01:1311 0 EOF\n\
                    4: FLOCK  ADVISORY  WRITE 55 fd:01:9999 0 EOF\n";
        assert_eq!(parse_locks(text, dev, 1311), [(4242, true), (77, false)]);
    }

    #[test]
    fn the_holder_of_a_lock_and_the_openers_of_a_file_are_found() {
        use fs2::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let file = fs::File::create(&path).unwrap();
        file.lock_exclusive().unwrap();
        let me = std::process::id();
        assert_eq!(flock_holders(&path), [me]);
        assert!(openers(&path).contains(&me));
        drop(file);
        assert!(flock_holders(&path).is_empty());
        assert!(!openers(&path).contains(&me));
    }

    #[test]
    fn a_process_left_off_its_list_after_it_is_held_is_not_signalled() {
        use nix::sys::signal::Signal;
        let mut kept = Command::new("sleep").arg("30").spawn().unwrap();
        let mut killed = Command::new("sleep").arg("30").spawn().unwrap();
        let (keep, kill) = (kept.id(), killed.id());
        // The first listing names both; every later one only the second,
        // as if the first had left the cgroup and its pid been taken.
        let listings = std::cell::Cell::new(0);
        let list = || {
            listings.set(listings.get() + 1);
            match listings.get() {
                1 => vec![keep, kill],
                _ => vec![kill],
            }
        };
        assert_eq!(signal_listed(list, Signal::SIGKILL), 1);
        wait_for_zombie(&killed);
        assert!(ProcessId::of(keep).unwrap().is_alive());
        assert!(!signal_checked(keep, Signal::SIGKILL, || false));
        assert!(ProcessId::of(keep).unwrap().is_alive());
        kept.kill().unwrap();
        kept.wait().unwrap();
        killed.wait().unwrap();
    }

    #[test]
    fn a_process_is_signalled_only_while_it_is_the_one_meant() {
        use nix::sys::signal::Signal;
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let id = ProcessId::of(child.id()).unwrap();
        let impostor = ProcessId {
            start_time: id.start_time + 1,
            ..id
        };
        assert!(!signal(&impostor, Signal::SIGKILL).unwrap());
        assert!(id.is_alive());
        assert!(signal(&id, Signal::SIGKILL).unwrap());
        wait_for_zombie(&child);
        child.wait().unwrap();
        assert!(!signal(&id, Signal::SIGKILL).unwrap());
    }

    #[test]
    fn escaped_paths_read_as_the_kernel_meant_them() {
        assert_eq!(
            unescape(b"a\\040b\\011c\\134d"),
            OsString::from("a b\tc\\d")
        );
        // Not an escape: kept as written.
        assert_eq!(unescape(b"a\\9b\\04"), OsString::from("a\\9b\\04"));
    }
}
