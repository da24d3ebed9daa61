//! Fault injection: the daemon meets a full disk and a file-descriptor
//! limit while it works, and must neither lose nor fail a task because of
//! them. Judged from the outside: the spool's state directories, a ledger
//! the jobs append to themselves, whether the daemon process is still
//! alive, and its log.
//!
//! Both tests need root (to mount a tmpfs, to change another process's
//! limits): they are ignored by a plain `cargo test`, and `.ci/run` runs
//! them as root.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::Spool;

/// A job that appends a start and an end line to `ledger` (under `flock`)
/// and sleeps in between; it needs nothing from the daemon's environment
/// but `CARMA_TASK_ID` and `CARMA_RUN`, and writes nothing into the spool.
fn ledger_job(token: &str, ledger: &Path, memory: &str, secs: f64) -> String {
    let ledger = ledger.display();
    format!(
        "# fault-injection job {token}\n\
         name: {token}\n\
         memory: {memory}\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         L={ledger}\n\
         {{ flock 9; printf 'start %s %s %s %s\\n' {token} \"$CARMA_TASK_ID\" \"$CARMA_RUN\" \"$EPOCHREALTIME\" >&9; }} 9>>\"$L\"\n\
         sleep {secs:.2}\n\
         rc=$?\n\
         {{ flock 9; printf 'end %s %s %s %s %s\\n' {token} \"$CARMA_TASK_ID\" \"$CARMA_RUN\" \"$EPOCHREALTIME\" \"$rc\" >&9; }} 9>>\"$L\"\n\
         exit $rc\n"
    )
}

/// `carma submit` of a job file written beside the test; the task's name,
/// or why it was refused.
fn try_submit(spool: &Spool, token: &str, text: &str) -> Result<String, String> {
    let path = spool.job(&format!("{token}.rad"), text);
    let out = spool.carma().arg("submit").arg(&path).output().unwrap();
    if out.status.success() {
        Ok(common::stdout(&out).trim().to_owned())
    } else {
        Err(common::stderr(&out).trim().to_owned())
    }
}

fn token_of(task: &str) -> &str {
    task.split_once('-').map_or(task, |(_, stem)| stem)
}

/// Waits until every accepted task is in `done/` or `failed/` and nothing
/// waits or runs; false on timeout.
fn wait_all_ended(spool: &Spool, accepted: &BTreeSet<String>, limit: Duration) -> bool {
    let began = Instant::now();
    while began.elapsed() < limit {
        let ended = ["done", "failed"]
            .iter()
            .flat_map(|s| common::visible_entries(&spool.root.join(s)))
            .filter(|n| accepted.contains(token_of(n)))
            .count();
        let busy: usize = ["pending", "running", "recovery"]
            .iter()
            .map(|s| common::visible_entries(&spool.root.join(s)).len())
            .sum();
        if ended >= accepted.len() && busy == 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Every accepted task is in `done/`, in exactly one directory, having run
/// exactly once to a successful end (by the ledger); nothing is left in
/// `pending/`, `running/`, `recovery/` or `staging/`. Returns the problems.
fn check_all_done_once(spool: &Spool, accepted: &BTreeSet<String>, ledger: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut places: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for state in ["pending", "running", "recovery", "done", "failed"] {
        for name in common::visible_entries(&spool.root.join(state)) {
            places
                .entry(token_of(&name).to_owned())
                .or_default()
                .push(format!("{state}/{name}"));
        }
    }
    for token in accepted {
        match places.get(token).map(Vec::as_slice) {
            None | Some([]) => problems.push(format!("{token}: lost (no directory anywhere)")),
            Some([one]) if one.starts_with("done/") => {}
            Some([one]) if one.starts_with("failed/") => {
                let reason =
                    fs::read_to_string(spool.root.join(one).join("reason")).unwrap_or_default();
                problems.push(format!("{one}: failed: {}", reason.trim()));
            }
            Some([one]) => problems.push(format!("{one}: never ended")),
            Some(many) => problems.push(format!("{token}: in several places: {many:?}")),
        }
    }
    for (token, where_) in &places {
        if !accepted.contains(token) {
            problems.push(format!(
                "a task no accepted submission accounts for: {where_:?}"
            ));
        }
    }
    let staging = common::staging_leftovers(&spool.root);
    if !staging.is_empty() {
        problems.push(format!("staging/ is not empty: {staging:?}"));
    }
    let ledger_text = fs::read_to_string(ledger).unwrap_or_default();
    let mut starts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut ends: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in ledger_text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["start", token, ..] => starts.entry(token).or_default().push(line),
            ["end", token, .., rc] => {
                ends.entry(token).or_default().push(line);
                if *rc != "0" {
                    problems.push(format!("{token}: a run ended with status {rc}: {line}"));
                }
            }
            _ => problems.push(format!("a ledger line that is not whole: {line:?}")),
        }
    }
    for token in accepted {
        let s = starts.get(token.as_str()).map_or(0, Vec::len);
        let e = ends.get(token.as_str()).map_or(0, Vec::len);
        if s != 1 || e != 1 {
            let lines: Vec<&str> = starts
                .get(token.as_str())
                .into_iter()
                .chain(ends.get(token.as_str()))
                .flatten()
                .copied()
                .collect();
            problems.push(format!(
                "{token}: started {s} time(s), ended {e} time(s): {lines:?}"
            ));
        }
    }
    problems
}

/// Log lines (of the daemon's stderr) that mention `task`.
fn log_about(log: &str, task: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(task))
        .map(str::to_owned)
        .collect()
}

/// Prints the problems with the daemon's log lines about the tasks they
/// name, and fails.
fn fail_with(what: &str, problems: &[String], log: &str) -> ! {
    println!("{what}: {} problem(s):", problems.len());
    for p in problems {
        println!("  {p}");
        if let Some(task) = p
            .split([':', ' ', '/'])
            .find(|w| w.len() > 7 && w.as_bytes()[..6].iter().all(u8::is_ascii_digit))
        {
            for l in log_about(log, task).iter().rev().take(8).rev() {
                println!("      log: {l}");
            }
        }
    }
    panic!("{what}: {} problem(s); see above", problems.len());
}

// ---------------------------------------------------------------- ENOSPC

/// A small tmpfs, unmounted when dropped (also when the test fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(common::stderr(&out).trim().to_owned());
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Processes killed a moment ago may still hold files there.
        for _ in 0..50 {
            let done = Command::new("umount")
                .arg(self.dir.path())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if done {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the file system of `path` until writes fail with ENOSPC, and
/// keeps taking back every page freed meanwhile until told to stop; then
/// deletes its file. `full` is set once the disk was first found full.
struct Filler {
    stop: Arc<AtomicBool>,
    full: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
    path: PathBuf,
}

impl Filler {
    fn start(path: PathBuf) -> Filler {
        let stop = Arc::new(AtomicBool::new(false));
        let full = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, full, path) = (Arc::clone(&stop), Arc::clone(&full), path.clone());
            std::thread::spawn(move || {
                let mut file = fs::File::create(&path).unwrap();
                let block = vec![0x5au8; 4096];
                let mut written = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    match file.write(&block) {
                        Ok(n) => written += n as u64,
                        Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => {
                            full.store(true, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        Err(e) => panic!("filler: {e}"),
                    }
                }
                written
            })
        };
        Filler {
            stop,
            full,
            thread: Some(thread),
            path,
        }
    }

    fn wait_full(&self) {
        let began = Instant::now();
        while !self.full.load(Ordering::SeqCst) {
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "the filler never filled the disk"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stops filling and deletes the filler; returns the bytes it held.
    fn remove(mut self) -> u64 {
        self.finish()
    }

    fn finish(&mut self) -> u64 {
        self.stop.store(true, Ordering::SeqCst);
        let written = self
            .thread
            .take()
            .map_or(0, |t| t.join().unwrap_or_default());
        let _ = fs::remove_file(&self.path);
        written
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.finish();
    }
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn a_full_disk_loses_no_task_and_everything_finishes_when_space_returns() {
    // Dropped last: unmounted after the spool's daemon and jobs are gone.
    let tmpfs = match Tmpfs::mount("4m") {
        Ok(t) => t,
        Err(e) => panic!("cannot mount a tmpfs: {e}"),
    };
    let mut spool = Spool::new("4x40GiB");
    // The spool on the small tmpfs; the configuration, the daemon's log,
    // the job files and the ledger stay on the real disk.
    spool.root = tmpfs.path().join("spool");
    let ledger = spool.dir.path().join("ledger");
    spool.spawn_daemon();
    spool.wait_daemon_ready(20.0);

    // 30 short tasks, 100 ms apart; 20 GiB each, so one per GPU at a time
    // and the rest wait in pending/ (and are launched while the disk is
    // full). The disk fills after the 12th and stays full for 3 s.
    let total = 30;
    let fill_after = 12;
    let full_for = Duration::from_secs(3);
    let mut accepted = BTreeSet::new();
    let mut refused: Vec<(String, String, String)> = Vec::new();
    let mut filler = None;
    let mut full_since = None;
    for i in 0..total {
        let token = format!("d{i:02}");
        let text = ledger_job(&token, &ledger, "20G", 0.3 + 0.05 * (i % 10) as f64);
        match try_submit(&spool, &token, &text) {
            Ok(_) => {
                accepted.insert(token);
            }
            Err(e) => refused.push((token, text, e)),
        }
        if i + 1 == fill_after {
            let f = Filler::start(tmpfs.path().join("filler"));
            f.wait_full();
            full_since = Some(Instant::now());
            filler = Some(f);
        }
        if full_since.is_some_and(|t| t.elapsed() >= full_for) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The disk stays full for its 3 s even if the submissions ran out.
    while full_since.is_some_and(|t| t.elapsed() < full_for) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = filler.take().map_or(0, Filler::remove);
    let during_full = refused.len();
    println!(
        "enospc: disk full for {:.1} s (filler held {} KiB); {} of {} submissions refused meanwhile",
        full_since.map_or(0.0, |t| t.elapsed().as_secs_f64()),
        held / 1024,
        during_full,
        accepted.len() + during_full
    );
    // Space is back: the refused submissions again, then the rest.
    let submitted_so_far = accepted.len() + refused.len();
    for (token, text, first_error) in std::mem::take(&mut refused) {
        match try_submit(&spool, &token, &text) {
            Ok(_) => {
                accepted.insert(token);
            }
            Err(e) => {
                panic!("{token}: refused again after the disk cleared: {e} (first: {first_error})")
            }
        }
    }
    for i in submitted_so_far..total {
        let token = format!("d{i:02}");
        let text = ledger_job(&token, &ledger, "20G", 0.3);
        if try_submit(&spool, &token, &text).is_ok() {
            accepted.insert(token);
        }
    }
    let ended = wait_all_ended(&spool, &accepted, Duration::from_secs(20));
    let survived = spool.daemon_exited();
    let log = spool.daemon_log();
    let mut problems = Vec::new();
    if !ended {
        problems.push("not every task ended within 20 s after the disk cleared".to_owned());
    }
    if let Some(status) = survived {
        problems.push(format!("the daemon exited: {status}"));
    }
    problems.extend(check_all_done_once(&spool, &accepted, &ledger));
    let disk_lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains(" WARN ")
                || l.contains(" ERROR ")
                || l.starts_with("<3>")
                || l.starts_with("<4>")
        })
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("no space left")
                || l.contains("enospc")
                || (l.contains("disk") && l.contains("full"))
        })
        .collect();
    println!(
        "enospc: {} tasks accepted, {} in done/, {} in failed/; {} warning/error lines about the disk",
        accepted.len(),
        common::visible_entries(&spool.root.join("done")).len(),
        common::visible_entries(&spool.root.join("failed")).len(),
        disk_lines.len()
    );
    for l in disk_lines.iter().take(5) {
        println!("  log: {l}");
    }
    if disk_lines.is_empty() {
        problems.push("the daemon's log has no warning about the full disk".to_owned());
    }
    if !problems.is_empty() {
        // The tmpfs goes away with the test: keep a copy for a post-mortem.
        let copy = spool.dir.path().join("spool-at-failure");
        let copied = Command::new("cp")
            .arg("-a")
            .arg(&spool.root)
            .arg(&copy)
            .status()
            .is_ok_and(|s| s.success());
        if copied {
            spool.dir.disable_cleanup(true);
            println!(
                "enospc: the spool as it was, the daemon's log and the ledger are in {}",
                spool.dir.path().display()
            );
        }
        fail_with("enospc", &problems, &log);
    }
}

// ---------------------------------------------------------------- EMFILE

/// The daemon's open descriptor numbers, at the look that saw the fewest
/// of a few (the GPU monitor opens two for a moment every sample).
fn open_fds(pid: u32) -> Vec<u32> {
    (0..8)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(15));
            fs::read_dir(format!("/proc/{pid}/fd")).map_or(Vec::new(), |d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
        })
        .filter(|fds| !fds.is_empty())
        .min_by_key(Vec::len)
        .unwrap()
}

/// The soft limit that leaves exactly `free` descriptor numbers unused
/// below it: a limit bounds the numbers, and a descriptor some library
/// opened high (above the limit) takes none of them.
fn limit_leaving(held: &[u32], free: usize) -> usize {
    (0..)
        .find(|&limit| limit - held.iter().filter(|&&fd| (fd as usize) < limit).count() == free)
        .unwrap()
}

fn set_nofile(pid: u32, soft: usize, hard: usize) {
    let out = Command::new("prlimit")
        .arg("--pid")
        .arg(pid.to_string())
        .arg(format!("--nofile={soft}:{hard}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "prlimit: {}", common::stderr(&out));
}

#[test]
#[ignore = "needs root: other users, root-owned files or mounts (.ci/run runs it)"]
fn running_out_of_file_descriptors_fails_no_launch_and_everything_runs_once_the_limit_rises() {
    assert!(
        Command::new("prlimit").arg("--version").output().is_ok(),
        "prlimit is missing: install util-linux (.ci/run does)"
    );
    let mut spool = Spool::new("4x40GiB");
    let ledger = spool.dir.path().join("ledger");
    // Started under a low limit (its jobs inherit it), raised to 4096 later.
    spool.spawn_daemon_wrapped(&["prlimit", "--nofile=64:4096", "--"]);
    spool.wait_daemon_ready(20.0);
    let pid = spool.daemon_pid().unwrap();
    let ran = |token: &str| {
        fs::read_to_string(&ledger)
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with(&format!("start {token} ")))
    };

    // Three jobs that run on while the limit is low, and end under it.
    let mut accepted = BTreeSet::new();
    for i in 0..3 {
        let token = format!("long{i}");
        try_submit(&spool, &token, &ledger_job(&token, &ledger, "1G", 2.5)).unwrap();
        accepted.insert(token);
    }
    spool.wait_for("the three long jobs to run", 20.0, || {
        accepted.iter().all(|t| ran(t))
    });
    // Squeeze: room for one more descriptor, fewer than any launch needs
    // at once (the supervisor's lock and log, handed to the supervisors'
    // nursery; a supervisor started for the run also needs
    // /dev/null for stdout), enough for a status write. A GPU sample (a
    // lock and the state file) fails too, from the next one on; the
    // submissions come before it, so the launches meet the limit first.
    let fds = open_fds(pid);
    let held = fds.len();
    let low = limit_leaving(&fds, 1);
    set_nofile(pid, low, 4096);
    let squeezed = Instant::now();
    let mut short = Vec::new();
    for i in 0..6 {
        let token = format!("short{i}");
        try_submit(&spool, &token, &ledger_job(&token, &ledger, "1G", 0.3)).unwrap();
        short.push(token.clone());
        accepted.insert(token);
        std::thread::sleep(Duration::from_millis(100));
    }
    // The long jobs end while the limit is low.
    std::thread::sleep(Duration::from_secs(3).saturating_sub(squeezed.elapsed()));
    let started_while_low: Vec<&String> = short.iter().filter(|t| ran(t)).collect();
    set_nofile(pid, 4096, 4096);
    println!(
        "emfile: daemon held {held} descriptors; soft limit {low} for {:.1} s; {} of {} short jobs started meanwhile",
        squeezed.elapsed().as_secs_f64(),
        started_while_low.len(),
        short.len()
    );

    let ended = wait_all_ended(&spool, &accepted, Duration::from_secs(20));
    let log = spool.daemon_log();
    let mut problems = Vec::new();
    if !ended {
        problems.push("not every task ended within 20 s after the limit rose".to_owned());
    }
    if let Some(status) = spool.daemon_exited() {
        problems.push(format!("the daemon exited: {status}"));
    }
    problems.extend(check_all_done_once(&spool, &accepted, &ledger));
    let emfile: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Too many open files") || l.contains("EMFILE"))
        .collect();
    let retried: Vec<&&str> = emfile
        .iter()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("retr") || l.contains("again") || l.contains("backoff")
        })
        .collect();
    println!(
        "emfile: {} tasks, {} in done/, {} in failed/; {} log lines about EMFILE, {} of them about a retry",
        accepted.len(),
        common::visible_entries(&spool.root.join("done")).len(),
        common::visible_entries(&spool.root.join("failed")).len(),
        emfile.len(),
        retried.len()
    );
    for l in emfile.iter().take(5) {
        println!("  log: {l}");
    }
    if emfile.is_empty() && !started_while_low.is_empty() {
        problems.push(format!(
            "EMFILE was not provoked: {started_while_low:?} started under a soft limit of {low}; \
             the daemon now needs fewer descriptors to launch, lower the squeeze"
        ));
    } else if retried.is_empty() {
        problems.push("the daemon's log does not mention retrying after EMFILE".to_owned());
    }
    if !problems.is_empty() {
        fail_with("emfile", &problems, &log);
    }
}
