//! Jobs in cgroups (v2), so that a job is all of its processes.
//!
//! A process group is not a container: `setsid sleep 4242 &` in a job
//! leaves the group, and outlived the job's time limit, its cancellation
//! and its task. So each run gets a cgroup of its own, and the job's first
//! process enters it before it execs (nothing it starts can be outside):
//! its end is `cgroup.kill` and a wait until the cgroup is empty, the way
//! Slurm's `proctrack/cgroup` ends a step. The cgroup also measures the
//! run: its peak host memory (`memory.peak`, where the memory controller
//! is on) and its CPU time (`cpu.stat`).
//!
//! Layout: the daemon's own cgroup (a unit with `Delegate=yes` under
//! systemd, or wherever root started it) gets `carma-<spool digest>/`, one
//! per spool so that daemons of different spools never meet, and each run
//! `<task>-run-<n>/` below it. When the daemon is alone in its cgroup it
//! moves itself into a leaf (`carma-daemon/`, the rule that a cgroup with
//! controllers for its children holds no processes itself) and turns on
//! the memory and cpu controllers for the jobs; otherwise jobs get
//! cgroups without them (killing and CPU time still work). Where no
//! cgroup v2 is writable (or `daemon.job_cgroups` is false) the daemon says
//! so once at start, and a job is held together by its supervisor alone: a
//! subreaper, which inherits every process the job orphans and ends them
//! with it, the way Slurm's `proctrack/linuxproc` follows a job's process
//! tree.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::procfs::read_generated_text;

/// The cgroup v2 directory of this process, from `/proc/self/mountinfo`
/// (where the unified hierarchy is mounted: `/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid system) and `/proc/self/cgroup`.
fn own_cgroup() -> Result<PathBuf, String> {
    let mountinfo = fs::read("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mount = crate::procfs::mounts(&mountinfo)
        .find(|m| m.kind == "cgroup2")
        .map(|m| m.point)
        .ok_or("no cgroup v2 hierarchy is mounted")?;
    let cgroups =
        fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let own = cgroups
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2")?;
    Ok(mount.join(own.trim_start_matches('/')))
}

/// Sets up the cgroup that the jobs of the spool at `spool` run under (see
/// the module documentation) and returns it; the error says why jobs run
/// without cgroups.
pub fn jobs_parent(spool: &Path) -> Result<PathBuf, String> {
    let own = own_cgroup()?;
    let parent = own.join(parent_name(spool));
    match fs::create_dir(&parent) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(format!("cannot create {}: {e}", parent.display()));
        }
        _ => {}
    }
    if !parent.join("cgroup.kill").exists() {
        return Err(format!(
            "{} has no cgroup.kill (Linux 5.14 or later is needed)",
            parent.display()
        ));
    }
    if alone_in(&own) {
        let leaf = own.join("carma-daemon");
        let moved = match fs::create_dir(&leaf) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
            _ => fs::write(leaf.join("cgroup.procs"), "0"),
        };
        if moved.is_ok() {
            let available = fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
            for controller in ["memory", "cpu", "pids"] {
                if available.split_whitespace().any(|c| c == controller) {
                    for dir in [&own, &parent] {
                        let _ =
                            fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}"));
                    }
                }
            }
        }
    }
    Ok(parent)
}

/// Which of the controllers the host limits need (cpu, memory, pids) the
/// jobs' cgroup `parent` does not give its runs.
pub fn missing_controllers(parent: &Path) -> Vec<&'static str> {
    let on = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    ["cpu", "memory", "pids"]
        .into_iter()
        .filter(|c| !on.split_whitespace().any(|o| o == *c))
        .collect()
}

/// Whether this process is the only one in the cgroup `dir`.
fn alone_in(dir: &Path) -> bool {
    let me = std::process::id().to_string();
    read_generated_text(&dir.join("cgroup.procs"))
        .is_ok_and(|procs| procs.lines().all(|pid| pid == me))
}

/// The name of the cgroup that the jobs of the spool at `spool` run under.
fn parent_name(spool: &Path) -> String {
    let digest = crate::summary::hex_digest(spool.as_os_str().as_encoded_bytes());
    format!("carma-{}", &digest[..12])
}

/// Removes the jobs' cgroup of a daemon that stops, when no job is left
/// in it (a cgroup directory is removed with `rmdir`, only when empty).
pub fn remove_parent(parent: &Path) {
    let _ = fs::remove_dir(parent);
}

/// Ends every job of the spool at `spool` still in its cgroup (below this
/// process's) and removes the cgroups: for whoever ran a daemon there and
/// killed it (a test), so that nothing is left behind.
pub fn clear_for(spool: &Path) {
    let Ok(own) = own_cgroup() else {
        return;
    };
    let parent = own.join(parent_name(spool));
    for run in fs::read_dir(&parent).into_iter().flatten().flatten() {
        if run.file_type().is_ok_and(|t| t.is_dir())
            && let Ok(cgroup) = RunCgroup::open(run.path())
        {
            let _ = cgroup.finish(Duration::from_secs(5));
        }
    }
    remove_parent(&parent);
}

/// The name of the cgroup of run `run` of the task named `task`, under
/// the jobs' cgroup: the supervisor makes it, and the daemon finds it when
/// the supervisor is gone.
pub fn run_name(task: &str, run: u32) -> String {
    format!("{task}-run-{run}")
}

/// Ends what the run cgroup `name` under `parent` still holds once its
/// supervisor died without ending it, and removes the cgroup: every
/// process the job started is in it, whatever it did to its session or its
/// environment. How many processes it held, and the cgroup if it was not
/// empty the moment after `cgroup.kill`: it is left, for
/// [`remove_emptied`] to take once they are gone. Not waited for: the
/// daemon's loop would wait (it waited up to 500 ms for each, and a user
/// whose jobs' processes are held in the kernel, by a FUSE server that
/// never answers, could have a hundred supervisors killed at once). `None`
/// when there is no such cgroup (the run had none, or it was removed
/// already).
pub fn end_orphaned_run(parent: &Path, name: &str) -> Option<(usize, Option<PathBuf>)> {
    let cgroup = RunCgroup::open(parent.join(name)).ok()?;
    let held = pids(cgroup.dir()).len();
    let dir = cgroup.dir().to_owned();
    let (_, empty) = cgroup.finish(Duration::ZERO);
    Some((held, (!empty).then_some(dir)))
}

/// Removes the cgroup `dir` if it has emptied; whether it is gone.
pub fn remove_emptied(dir: &Path) -> bool {
    match fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// The period of `cpu.max`, microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// One run's cgroup.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    /// The directory, opened before the job is forked: the job is born
    /// in it ([`crate::spawn`]).
    dir_fd: fs::File,
    /// `cgroup.procs`, opened before the job is forked: on a kernel that
    /// cannot start a process in a cgroup, the job writes itself into it
    /// between fork and exec, where nothing may allocate.
    procs: fs::File,
}

/// What a run's cgroup measured.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub peak_mib: Option<u64>,
    pub cpu_s: Option<f64>,
    pub oom_kills: Option<u64>,
}

impl RunCgroup {
    /// Makes the cgroup `name` under `parent` (a leftover of an earlier
    /// try of the same run is taken over, once empty).
    pub fn create(parent: &Path, name: &str) -> io::Result<RunCgroup> {
        let dir = parent.join(name);
        match fs::create_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        Self::open(dir)
    }

    /// The cgroup at `dir`, which exists.
    fn open(dir: PathBuf) -> io::Result<RunCgroup> {
        let procs = fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))?;
        let dir_fd = fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_DIRECTORY)
            .open(&dir)?;
        Ok(RunCgroup { dir, dir_fd, procs })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Caps the run's CPU time at `cpus` CPUs, its host memory at
    /// `memory_mib` (swap included) and its processes and threads at
    /// `processes` (a fork bomb in one job ends there, not in the server's
    /// process table). Each limit needs its controller on for carma's
    /// cgroups; the error says which could not be set.
    pub fn limit(
        &self,
        cpus: Option<f64>,
        memory_mib: Option<u64>,
        processes: Option<u64>,
    ) -> Result<(), String> {
        let mut unset = Vec::new();
        if let Some(n) = processes
            && let Err(e) = fs::write(self.dir.join("pids.max"), n.to_string())
        {
            unset.push(format!("queue.max_processes: {n} (pids.max: {e})"));
        }
        if let Some(cpus) = cpus {
            let quota = (cpus * CPU_PERIOD_US as f64).round().max(1000.0) as u64;
            if let Err(e) = fs::write(self.dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"))
            {
                unset.push(format!("cpus: {cpus} (cpu.max: {e})"));
            }
        }
        if let Some(mib) = memory_mib {
            let bytes = mib.saturating_mul(1 << 20).to_string();
            let set = fs::write(self.dir.join("memory.max"), &bytes).and_then(|()| {
                match fs::write(self.dir.join("memory.swap.max"), "0") {
                    // No swap accounting: memory.max alone still holds.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    other => other,
                }
            });
            if let Err(e) = set {
                unset.push(format!("host_memory: {mib} MiB (memory.max: {e})"));
            }
        }
        match unset.is_empty() {
            true => Ok(()),
            false => Err(format!("not enforced: {}", unset.join(", "))),
        }
    }

    /// The descriptor a child writes `0` into to enter the cgroup.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// The cgroup's directory, for `clone3` to start a child in.
    pub fn dir_fd(&self) -> RawFd {
        self.dir_fd.as_raw_fd()
    }

    /// Sends `signal` to every process in the cgroup now: each while it
    /// is still listed there, never to a later holder of its pid.
    pub fn signal(dir: &Path, signal: nix::sys::signal::Signal) {
        crate::procfs::signal_listed(|| pids(dir), signal);
    }

    /// Kills every process in the cgroup (`cgroup.kill`, which also gets
    /// those that fork meanwhile).
    pub fn kill(dir: &Path) {
        if fs::write(dir.join("cgroup.kill"), "1").is_err() {
            Self::signal(dir, nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// Kills what is left, waits (at most `patience`) until the cgroup is
    /// empty, reads what it measured and removes it. False when processes
    /// outlived the wait (stuck in the kernel): the cgroup is left, and so
    /// are they.
    pub fn finish(self, patience: Duration) -> (Usage, bool) {
        Self::kill(&self.dir);
        let deadline = Instant::now() + patience;
        let mut empty = !populated(&self.dir);
        while !empty && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            empty = !populated(&self.dir);
        }
        let usage = usage(&self.dir);
        drop(self.procs);
        drop(self.dir_fd);
        if empty {
            let _ = fs::remove_dir(&self.dir);
        }
        (usage, empty)
    }
}

/// The processes in the cgroup `dir`.
fn pids(dir: &Path) -> Vec<u32> {
    read_generated_text(&dir.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.parse().ok()).collect())
        .unwrap_or_default()
}

/// Whether processes are in the cgroup `dir` (or below it).
fn populated(dir: &Path) -> bool {
    match read_generated_text(&dir.join("cgroup.events")) {
        Ok(events) => events.lines().any(|l| l == "populated 1"),
        Err(_) => !pids(dir).is_empty(),
    }
}

/// Peak memory and CPU time of the cgroup `dir`, where it keeps them.
fn usage(dir: &Path) -> Usage {
    let peak_mib = read_generated_text(&dir.join("memory.peak"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|bytes| bytes.div_ceil(1 << 20));
    let cpu_s = read_generated_text(&dir.join("cpu.stat"))
        .ok()
        .and_then(|stat| {
            stat.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|usec| usec as f64 / 1e6)
        });
    // Processes the kernel's OOM killer ended in the cgroup, its memory
    // at memory.max (`host_memory:`).
    let oom_kills = read_generated_text(&dir.join("memory.events"))
        .ok()
        .and_then(|events| {
            events
                .lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|v| v.trim().parse::<u64>().ok())
        });
    Usage {
        peak_mib,
        cpu_s,
        oom_kills,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_reads_the_cgroups_own_files() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("memory.peak"), "3145729\n").unwrap();
        fs::write(
            dir.path().join("cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\n",
        )
        .unwrap();
        fs::write(
            dir.path().join("memory.events"),
            "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(
            usage(dir.path()),
            Usage {
                peak_mib: Some(4),
                cpu_s: Some(2.5),
                oom_kills: Some(1),
            }
        );
        assert_eq!(usage(&dir.path().join("none")), Usage::default());
    }

    #[test]
    fn limits_are_written_where_the_controllers_are_and_said_where_not() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cgroup.procs"), "").unwrap();
        for file in ["cpu.max", "memory.max", "memory.swap.max", "pids.max"] {
            fs::write(dir.path().join(file), "max").unwrap();
        }
        let cgroup = RunCgroup::create(
            dir.path().parent().unwrap(),
            dir.path().file_name().unwrap().to_str().unwrap(),
        )
        .unwrap();
        cgroup.limit(Some(1.5), Some(2048), Some(512)).unwrap();
        let read = |f: &str| fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("cpu.max"), "150000 100000");
        assert_eq!(read("memory.max"), (2048u64 << 20).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("pids.max"), "512");
        // No controllers: nothing can be set, and the error says what.
        let bare = tempfile::tempdir().unwrap();
        fs::write(bare.path().join("cgroup.procs"), "").unwrap();
        let cgroup = RunCgroup::create(
            bare.path().parent().unwrap(),
            bare.path().file_name().unwrap().to_str().unwrap(),
        )
        .unwrap();
        fs::create_dir(bare.path().join("cpu.max")).unwrap();
        fs::create_dir(bare.path().join("pids.max")).unwrap();
        let err = cgroup.limit(Some(2.0), None, Some(64)).unwrap_err();
        assert!(err.contains("cpus: 2"), "{err}");
        assert!(err.contains("queue.max_processes: 64"), "{err}");
    }
}
