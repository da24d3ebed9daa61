//! crash-storm: a real daemon on simulated GPUs is SIGKILLed hundreds of
//! times at random moments while hundreds of short jobs are submitted (by
//! `carma submit` and as bare `.rad` files copied into `pending/`) and run,
//! a share of them crashing with GPU out-of-memory on purpose so that
//! recovery re-runs them; now and then a supervisor, a job or the nursery
//! that forks supervisors is killed too.
//! Then one daemon is left alone until every task has ended, and the
//! harness checks, from the outside only (the spool's state directories
//! and a ledger the jobs append to themselves):
//!
//! - every submitted task ended exactly once: one directory, in `done/` or
//!   `failed/`, nothing left in `pending/`, `running/`, `recovery/` or
//!   `staging/`, nothing lost;
//! - no task ran twice at the same time;
//! - no task ran again unless its previous run died of OOM;
//! - a task in `failed/` is explained: the storm killed its supervisor or
//!   its job, or it used up its OOM retries.
//!
//! Not in the default test run (it takes minutes):
//!
//! ```sh
//! cargo test --release --test crash_storm -- --ignored --nocapture
//! ```
//!
//! `CARMA_STORM_TASKS` (default 500), `CARMA_STORM_KILLS` (daemon SIGKILLs,
//! default 200), `CARMA_STORM_SEED` (printed; the same seed gives the same
//! jobs and the same kill schedule, though not the same interleaving).
//! The spool, the ledger and the daemon's log are kept when a check fails,
//! or always with `CARMA_STORM_KEEP=1`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{CARMA, Spool};

const DEFAULT_SEED: u64 = 20_251_123;
/// OOM re-runs a bait job may have (written into its `.rad`).
const BAIT_RETRIES: u32 = 2;
/// How long the last daemon gets to finish everything.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// splitmix64: small, seedable, good enough to pick sizes and moments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.range(0.0, 1.0) < p
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

/// One turn of the storm: sleep `gap` seconds (killing a supervisor or a
/// job half-way if drawn), SIGKILL the daemon, wait `pause`, start another.
#[derive(Clone, Copy)]
struct Kill {
    gap: f64,
    pause: f64,
    kill_supervisor: bool,
    kill_nursery: bool,
    kill_job: bool,
}

impl Kill {
    fn draw(rng: &mut Rng) -> Kill {
        let gap = rng.range(0.020, 0.500);
        let pause = if rng.chance(0.5) {
            0.0
        } else {
            rng.range(0.0, 0.300)
        };
        Kill {
            gap,
            pause,
            kill_supervisor: rng.chance(0.05),
            kill_nursery: rng.chance(0.05),
            kill_job: rng.chance(0.05),
        }
    }
}

fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v} is not a valid value")),
        Err(_) => default,
    }
}

/// One job of the storm.
struct Job {
    /// Unique stem (`s0042`): the task's name ends with it, the ledger
    /// carries it.
    token: String,
    text: String,
    /// `carma submit` (else copied into `pending/` as a bare file).
    submit: bool,
    /// Declares far less memory than it allocates: meant to crash with OOM
    /// when collocated.
    bait: bool,
}

/// A job script that appends a start and an end line to `ledger` (under
/// `flock`, one `printf` each): token, task, run, time, pid, and at the
/// end the exit status and whether the job saw its own OOM message. It
/// relies on nothing from the daemon's environment but `CARMA_TASK_ID`,
/// `CARMA_RUN` and what fake-train needs.
fn job_text(token: &str, ledger: &Path, directives: &str, fake_train: &str) -> String {
    let ledger = ledger.display();
    format!(
        "# crash-storm job {token}\n\
         name: {token}\n\
         {directives}\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         L={ledger}\n\
         E=$(mktemp)\n\
         {{ flock 9; printf 'start %s %s %s %s %s\\n' {token} \"$CARMA_TASK_ID\" \"$CARMA_RUN\" \"$EPOCHREALTIME\" \"$$\" >&9; }} 9>>\"$L\"\n\
         {CARMA} fake-train {fake_train} 2>\"$E\"\n\
         rc=$?\n\
         cat \"$E\" >&2\n\
         oom=0; grep -q 'CUDA out of memory' \"$E\" && oom=1\n\
         rm -f \"$E\"\n\
         {{ flock 9; printf 'end %s %s %s %s %s %s %s\\n' {token} \"$CARMA_TASK_ID\" \"$CARMA_RUN\" \"$EPOCHREALTIME\" \"$$\" \"$rc\" \"$oom\" >&9; }} 9>>\"$L\"\n\
         exit $rc\n"
    )
}

fn make_jobs(count: usize, ledger: &Path, rng: &mut Rng) -> Vec<Job> {
    (0..count)
        .map(|i| {
            let token = format!("s{i:04}");
            let bait = rng.chance(0.2);
            let (directives, fake_train) = if bait {
                // Says 1 GiB, takes 30-36 of a 40 GiB GPU: fits on paper
                // beside almost anything, crashes beside more than a few GiB.
                let mem = rng.pick(&[30, 32, 34, 36]);
                (
                    format!("memory: 1G\nretries: {BAIT_RETRIES}\n"),
                    format!(
                        "--mem {mem}G --secs {:.2} --smact {:.2}",
                        rng.range(0.3, 1.5),
                        rng.range(0.05, 0.3)
                    ),
                )
            } else {
                let mem = rng.pick(&[1, 2, 3, 4, 6, 8, 12]);
                (
                    format!("memory: {mem}G\n"),
                    format!(
                        "--mem {mem}G --secs {:.2} --smact {:.2}",
                        rng.range(0.1, 2.0),
                        rng.range(0.05, 0.35)
                    ),
                )
            };
            Job {
                text: job_text(&token, ledger, &directives, &fake_train),
                token,
                submit: rng.chance(0.5),
                bait,
            }
        })
        .collect()
}

/// What the submitting thread did.
struct Submitted {
    /// Tokens whose submission was accepted.
    accepted: Vec<String>,
    refused: Vec<String>,
    /// Of the accepted, those `nobody` submitted over the daemon's socket.
    by_nobody: usize,
}

/// `nobody`'s uid and gid on Debian: as root, half the storm's `carma
/// submit`s run as this ordinary user, whose submissions go over the
/// daemon's socket (carma's own user's never do).
const NOBODY: u32 = 65534;

/// Where the submitting thread hands its jobs: the spool, its
/// configuration, the directory the job files are written in, and whether
/// half the `carma submit`s run as `nobody`.
struct Target {
    root: PathBuf,
    config: PathBuf,
    jobs_dir: PathBuf,
    as_nobody: bool,
}

/// Submits every job at random moments, spread over about `span`.
fn submit_all(
    jobs: Vec<(String, String, bool)>,
    to: Target,
    span: Duration,
    seed: u64,
    progress: Arc<AtomicUsize>,
) -> Submitted {
    let Target {
        root,
        config,
        jobs_dir,
        as_nobody,
    } = to;
    let mut rng = Rng(seed);
    let mut by_nobody = 0;
    let gap = span.as_secs_f64() / jobs.len().max(1) as f64;
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    let mut burst = 0;
    for (token, text, submit) in jobs {
        if burst > 0 {
            burst -= 1;
        } else {
            std::thread::sleep(Duration::from_secs_f64(rng.range(0.0, 2.0 * gap)));
            if rng.chance(0.05) {
                // Now and then several at once, as a script would.
                burst = 2 + (rng.next() % 6) as usize;
            }
        }
        let file = jobs_dir.join(format!("{token}.rad"));
        fs::write(&file, &text).unwrap();
        if submit {
            let mut command = Command::new(CARMA);
            command
                .env("CARMA_SPOOL", &root)
                .env("CARMA_CONFIG", &config)
                .arg("submit")
                .arg(&file);
            let nobody = as_nobody && rng.chance(0.5);
            if nobody {
                use std::os::unix::process::CommandExt;
                command.uid(NOBODY).gid(NOBODY);
            }
            let out = command.output().unwrap();
            if out.status.success() {
                by_nobody += usize::from(nobody);
                accepted.push(token);
            } else {
                eprintln!(
                    "storm: carma submit {token} failed: {}",
                    common::stderr(&out)
                );
                refused.push(token);
            }
        } else {
            // As `cp` does: create, write, close.
            fs::copy(&file, root.join("pending").join(format!("{token}.rad"))).unwrap();
            accepted.push(token);
        }
        progress.fetch_add(1, Ordering::Relaxed);
    }
    Submitted {
        accepted,
        refused,
        by_nobody,
    }
}

/// A live process and the task it belongs to.
type Victim = (i32, String);

/// The daemon's nursery: its child started as `carma-supervise
/// --nursery` (the supervisors it forks are that one's children).
fn nursery_of(daemon: u32) -> Option<i32> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
        let parent = stat.rsplit(')').next()?.split_whitespace().nth(1)?;
        let cmdline = fs::read(entry.path().join("cmdline")).ok()?;
        (parent == daemon.to_string() && cmdline.split(|&b| b == 0).any(|a| a == b"--nursery"))
            .then_some(pid)
    })
}

/// Live processes of this spool: its supervisors (`carma-supervise`, or
/// `carma supervise`, holding `<spool>/running/<task>/run-N/supervisor.lock`
/// open; one the nursery forked says `--nursery`, not its run, on its
/// command line) and its fake-train jobs (by `CARMA_SIMGPU`, with
/// `CARMA_TASK_ID`).
fn processes_of(root: &Path) -> (Vec<Victim>, Vec<Victim>) {
    let root_text = root.display().to_string();
    let running = fs::canonicalize(root.join("running")).unwrap_or_else(|_| root.join("running"));
    let simgpu = format!("CARMA_SIMGPU={root_text}");
    let mut supervisors = Vec::new();
    let mut jobs = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return (supervisors, jobs);
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let supervises = args.first().is_some_and(|a| a.ends_with("carma-supervise"))
            || args.get(1).is_some_and(|a| a == "supervise");
        if supervises {
            let task = fs::read_dir(entry.path().join("fd"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|fd| fs::read_link(fd.path()).ok())
                .find_map(|open| {
                    let rest = open.strip_prefix(&running).ok()?;
                    let mut parts = rest.components();
                    let task = parts.next()?.as_os_str().to_str()?.to_owned();
                    let _run = parts.next()?;
                    let lock = parts.next()?;
                    (lock.as_os_str() == "supervisor.lock").then_some(task)
                });
            if let Some(task) = task {
                supervisors.push((pid, task));
            }
        } else if args.iter().any(|a| a == "fake-train") {
            let Ok(environ) = fs::read(entry.path().join("environ")) else {
                continue;
            };
            let vars: Vec<String> = environ
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if vars.iter().any(|v| v.starts_with(&simgpu)) {
                let task = vars
                    .iter()
                    .find_map(|v| v.strip_prefix("CARMA_TASK_ID="))
                    .unwrap_or("?")
                    .to_owned();
                jobs.push((pid, task));
            }
        }
    }
    (supervisors, jobs)
}

/// The token a task name ends with (`000123-s0042` -> `s0042`).
fn token_of(task: &str) -> &str {
    task.split_once('-').map_or(task, |(_, stem)| stem)
}

/// One ledger line.
#[derive(Debug, Clone)]
struct Line {
    start: bool,
    token: String,
    task: String,
    run: u32,
    time: f64,
    pid: u32,
    /// End lines: exit status and whether the job printed an OOM.
    rc: i32,
    oom: bool,
    text: String,
}

fn parse_ledger(text: &str, bad: &mut Vec<String>) -> Vec<Line> {
    let mut lines = Vec::new();
    for raw in text.lines() {
        let f: Vec<&str> = raw.split(' ').collect();
        let parsed = (|| {
            let start = match *f.first()? {
                "start" if f.len() == 6 => true,
                "end" if f.len() == 8 => false,
                _ => return None,
            };
            Some(Line {
                start,
                token: f[1].to_owned(),
                task: f[2].to_owned(),
                run: f[3].parse().ok()?,
                time: f[4].replace(',', ".").parse().ok()?,
                pid: f[5].parse().ok()?,
                rc: if start { 0 } else { f[6].parse().ok()? },
                oom: !start && f[7] == "1",
                text: raw.to_owned(),
            })
        })();
        match parsed {
            Some(line) => lines.push(line),
            None => bad.push(raw.to_owned()),
        }
    }
    lines
}

/// One run of a task as its ledger lines tell it.
#[derive(Debug)]
struct Run {
    run: u32,
    pid: u32,
    task: String,
    start: f64,
    end: Option<Line>,
}

fn log_lines_about(log: &str, task: &str, max: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(task)).collect();
    let skip = lines.len().saturating_sub(max);
    let mut out = String::new();
    if skip > 0 {
        out.push_str(&format!("      ... {skip} earlier log lines\n"));
    }
    for l in &lines[skip..] {
        out.push_str(&format!("      log: {l}\n"));
    }
    out
}

#[test]
#[ignore = "minutes long: cargo test --release --test crash_storm -- --ignored --nocapture"]
fn a_storm_of_daemon_kills_loses_no_task_and_runs_none_twice() {
    let tasks: usize = env_or("CARMA_STORM_TASKS", 500);
    let kills: usize = env_or("CARMA_STORM_KILLS", 200);
    let seed: u64 = env_or("CARMA_STORM_SEED", DEFAULT_SEED);
    println!(
        "crash-storm: CARMA_STORM_TASKS={tasks} CARMA_STORM_KILLS={kills} CARMA_STORM_SEED={seed}"
    );
    let began = Instant::now();

    let mut spool = Spool::new("4x40GiB");
    let ledger = spool.dir.path().join("ledger");
    let jobs_dir = spool.dir.path().join("jobs");
    fs::create_dir_all(&jobs_dir).unwrap();
    let as_nobody = nix::unistd::geteuid().is_root();
    if as_nobody {
        // nobody reads the configuration and its job files, enters their
        // directory (where its jobs run) and appends to the ledger.
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path, mode| {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        };
        mode(spool.dir.path(), 0o755);
        mode(&spool.config, 0o644);
        fs::write(&ledger, "").unwrap();
        mode(&ledger, 0o666);
    }
    println!("crash-storm: spool {}", spool.root.display());
    let mut rng = Rng(seed);
    let jobs = make_jobs(tasks, &ledger, &mut rng);
    let baits: BTreeSet<String> = jobs
        .iter()
        .filter(|j| j.bait)
        .map(|j| j.token.clone())
        .collect();

    // The kill schedule, drawn up front so a seed replays it (and drawn on
    // when a daemon that died by itself used up a turn).
    let mut schedule: Vec<Kill> = (0..kills).map(|_| Kill::draw(&mut rng)).collect();
    let storm_span: f64 = schedule.iter().map(|k| k.gap + k.pause).sum();

    spool.spawn_daemon();
    let progress = Arc::new(AtomicUsize::new(0));
    let submitter = {
        let jobs: Vec<(String, String, bool)> = jobs
            .iter()
            .map(|j| (j.token.clone(), j.text.clone(), j.submit))
            .collect();
        let (root, config, jobs_dir) = (spool.root.clone(), spool.config.clone(), jobs_dir);
        let progress = Arc::clone(&progress);
        let span = Duration::from_secs_f64(storm_span);
        std::thread::spawn(move || {
            let to = Target {
                root,
                config,
                jobs_dir,
                as_nobody,
            };
            submit_all(jobs, to, span, seed ^ 0xabcd, progress)
        })
    };

    // The storm.
    let mut daemon_kills = 0;
    let mut supervisor_kills = Vec::new();
    let mut nursery_kills = 0;
    let mut job_kills = Vec::new();
    let mut died_alone = Vec::new();
    let mut victim_rng = Rng(seed ^ 0x1234);
    let mut turn = 0;
    while daemon_kills < kills {
        if turn == schedule.len() {
            schedule.push(Kill::draw(&mut rng));
        }
        let Kill {
            gap,
            pause,
            kill_supervisor,
            kill_nursery,
            kill_job,
        } = schedule[turn];
        turn += 1;
        std::thread::sleep(Duration::from_secs_f64(gap / 2.0));
        if kill_nursery {
            // No task may fail for it: its supervisors live on.
            let nursery = spool.daemon_pid().and_then(nursery_of);
            if nursery.is_some_and(|pid| kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok()) {
                nursery_kills += 1;
            }
        }
        if kill_supervisor || kill_job {
            let (supervisors, running_jobs) = processes_of(&spool.root);
            if kill_supervisor && !supervisors.is_empty() {
                let (pid, task) = victim_rng.pick(&supervisors).clone();
                if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                    supervisor_kills.push(task);
                }
            }
            if kill_job && !running_jobs.is_empty() {
                let (pid, task) = victim_rng.pick(&running_jobs).clone();
                if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                    job_kills.push(task);
                }
            }
        }
        std::thread::sleep(Duration::from_secs_f64(gap / 2.0));
        // A daemon that ended before the kill came (an exit status, not
        // SIGKILL) died by itself.
        let status = spool.stop_daemon("KILL");
        if status.signal() == Some(Signal::SIGKILL as i32) {
            daemon_kills += 1;
        } else {
            died_alone.push(format!("before daemon kill {}: {status}", daemon_kills + 1));
        }
        if pause > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(pause));
        }
        spool.spawn_daemon();
    }
    let storm_secs = began.elapsed().as_secs_f64();
    println!(
        "crash-storm: storm over after {storm_secs:.1} s ({daemon_kills} daemon kills, {} of {tasks} submissions made)",
        progress.load(Ordering::Relaxed)
    );
    let submitted = submitter.join().unwrap();
    let accepted: BTreeSet<String> = submitted.accepted.iter().cloned().collect();

    // One daemon, left alone until everything has ended.
    let drain_began = Instant::now();
    let mut drained = false;
    while drain_began.elapsed() < DRAIN_LIMIT {
        if let Some(status) = spool.daemon_exited() {
            died_alone.push(format!("during the drain: {status}"));
            let _ = spool.stop_daemon("KILL");
            spool.spawn_daemon();
        }
        let ended: usize = ["done", "failed"]
            .iter()
            .map(|s| {
                common::visible_entries(&spool.root.join(s))
                    .iter()
                    .filter(|n| accepted.contains(token_of(n)))
                    .count()
            })
            .sum();
        let busy: usize = ["pending", "running", "recovery"]
            .iter()
            .map(|s| common::visible_entries(&spool.root.join(s)).len())
            .sum();
        if ended >= accepted.len() && busy == 0 {
            drained = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let drain_secs = drain_began.elapsed().as_secs_f64();
    if spool.daemon_exited().is_none() {
        spool.stop_daemon("TERM");
    }
    // Jobs whose supervisor the storm killed may still be finishing.
    let quiet_began = Instant::now();
    while quiet_began.elapsed() < Duration::from_secs(15) {
        let (supervisors, running_jobs) = processes_of(&spool.root);
        if supervisors.is_empty() && running_jobs.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // Judge.
    let log = spool.daemon_log();
    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    if !drained {
        problems.push(format!(
            "not every task ended within {} s of the storm's end",
            DRAIN_LIMIT.as_secs()
        ));
    }
    for d in &died_alone {
        problems.push(format!("a daemon exited by itself {d}"));
    }
    // What daemons said on their way out (lines not in the log format).
    let levels = [" TRACE ", " DEBUG ", " INFO  ", " WARN  ", " ERROR "];
    for line in log
        .lines()
        .filter(|l| !levels.iter().any(|lv| l.contains(lv)))
    {
        problems.push(format!("the daemon's stderr: {line}"));
    }

    // Where every task directory is.
    let states = ["pending", "running", "recovery", "done", "failed"];
    let mut dirs: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for state in states {
        for name in common::visible_entries(&spool.root.join(state)) {
            dirs.entry(token_of(&name).to_owned())
                .or_default()
                .push((state.to_owned(), name));
        }
    }
    let staging = common::staging_leftovers(&spool.root);
    if !staging.is_empty() {
        problems.push(format!("staging/ is not empty: {staging:?}"));
    }
    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    let mut unfinished = Vec::new();
    let mut done = BTreeSet::new();
    let mut failed = BTreeMap::new();
    for token in &accepted {
        match dirs.get(token).map(Vec::as_slice) {
            None | Some([]) => lost.push(token.clone()),
            Some([(state, name)]) => match state.as_str() {
                "done" => {
                    done.insert(token.clone());
                }
                "failed" => {
                    let reason =
                        fs::read_to_string(spool.root.join("failed").join(name).join("reason"))
                            .unwrap_or_else(|e| format!("(no reason file: {e})"));
                    failed.insert(token.clone(), (name.clone(), reason.trim().to_owned()));
                }
                _ => unfinished.push(format!("{state}/{name}")),
            },
            Some(many) => duplicated.push(format!("{token}: {many:?}")),
        }
    }
    for (token, places) in &dirs {
        if !accepted.contains(token) {
            problems.push(format!(
                "a task directory no submission accounts for: {places:?}"
            ));
        }
    }
    for token in &submitted.refused {
        notes.push(format!("carma submit refused {token} (not counted)"));
    }

    // The ledger.
    let ledger_text = fs::read_to_string(&ledger).unwrap_or_default();
    let mut torn = Vec::new();
    let lines = parse_ledger(&ledger_text, &mut torn);
    for t in &torn {
        problems.push(format!("ledger line that is not whole: {t:?}"));
    }
    let mut by_token: BTreeMap<String, Vec<Line>> = BTreeMap::new();
    for line in lines {
        by_token.entry(line.token.clone()).or_default().push(line);
    }
    let mut overlaps = Vec::new();
    let mut rerun_without_oom = Vec::new();
    let mut twice_launched = Vec::new();
    let mut oom_crashes = 0;
    let mut reruns = 0;
    let mut runs_total = 0;
    let mut evidence_tokens = BTreeSet::new();
    for (token, lines) in &by_token {
        let mut runs: Vec<Run> = lines
            .iter()
            .filter(|l| l.start)
            .map(|l| Run {
                run: l.run,
                pid: l.pid,
                task: l.task.clone(),
                start: l.time,
                end: None,
            })
            .collect();
        for end in lines.iter().filter(|l| !l.start) {
            match runs
                .iter_mut()
                .find(|r| r.pid == end.pid && r.run == end.run && r.end.is_none())
            {
                Some(run) => run.end = Some(end.clone()),
                None => problems.push(format!(
                    "{token}: an end line without its start: {}",
                    end.text
                )),
            }
        }
        runs.sort_by(|a, b| a.start.total_cmp(&b.start));
        runs_total += runs.len();
        reruns += runs.len().saturating_sub(1);
        oom_crashes += runs
            .iter()
            .filter(|r| r.end.as_ref().is_some_and(|e| e.oom))
            .count();
        let names: BTreeSet<&str> = runs.iter().map(|r| r.task.as_str()).collect();
        if names.len() > 1 {
            problems.push(format!("{token} ran as several tasks: {names:?}"));
            evidence_tokens.insert(token.clone());
        }
        let mut numbers: BTreeMap<u32, usize> = BTreeMap::new();
        for r in &runs {
            *numbers.entry(r.run).or_default() += 1;
        }
        for (run, count) in numbers.iter().filter(|(_, c)| **c > 1) {
            twice_launched.push(format!("{token}: run {run} started {count} times"));
            evidence_tokens.insert(token.clone());
        }
        for (i, later) in runs.iter().enumerate().skip(1) {
            for earlier in &runs[..i] {
                if let Some(end) = &earlier.end
                    && end.time > later.start
                {
                    overlaps.push(format!(
                        "{token}: run {} (pid {}, {:.6}-{:.6}) overlaps run {} (pid {}, started {:.6})",
                        earlier.run, earlier.pid, earlier.start, end.time, later.run, later.pid, later.start
                    ));
                    evidence_tokens.insert(token.clone());
                }
            }
            let previous = &runs[i - 1];
            match &previous.end {
                Some(end) if end.oom => {}
                Some(end) => {
                    rerun_without_oom.push(format!(
                        "{token}: run {} started at {:.6} after run {} ended with status {} and no OOM",
                        later.run, later.start, previous.run, end.rc
                    ));
                    evidence_tokens.insert(token.clone());
                }
                None => {
                    rerun_without_oom.push(format!(
                        "{token}: run {} started at {:.6} after run {} (pid {}) that never recorded its end (still running, or killed)",
                        later.run, later.start, previous.run, previous.pid
                    ));
                    evidence_tokens.insert(token.clone());
                }
            }
        }
        if done.contains(token) {
            match runs.last() {
                None => problems.push(format!("{token} is in done/ but its job never started")),
                Some(last) => match &last.end {
                    Some(end) if end.rc == 0 => {}
                    Some(end) => problems.push(format!(
                        "{token} is in done/ but its last run ended with status {}",
                        end.rc
                    )),
                    None => problems.push(format!(
                        "{token} is in done/ but its last run never recorded its end"
                    )),
                },
            }
        }
    }
    for token in &done {
        if !by_token.contains_key(token) {
            problems.push(format!(
                "{token} is in done/ but its job never wrote to the ledger"
            ));
            evidence_tokens.insert(token.clone());
        }
    }

    // Every task in failed/ needs a cause.
    let touched: BTreeSet<String> = supervisor_kills
        .iter()
        .chain(&job_kills)
        .map(|t| token_of(t).to_owned())
        .collect();
    let mut failed_by_storm = Vec::new();
    let mut failed_retries = Vec::new();
    let mut failed_unexplained = Vec::new();
    for (token, (name, reason)) in &failed {
        let runs: Vec<&Line> = by_token
            .get(token)
            .map(|l| l.iter().filter(|l| !l.start).collect())
            .unwrap_or_default();
        let all_oom = !runs.is_empty() && runs.iter().all(|l| l.oom);
        if touched.contains(token) {
            failed_by_storm.push(format!("{name} ({reason})"));
        } else if baits.contains(token) && all_oom && runs.len() as u32 > BAIT_RETRIES {
            failed_retries.push(name.clone());
        } else {
            failed_unexplained.push(format!("{name}: {reason}"));
            evidence_tokens.insert(token.clone());
        }
    }
    // Informative: jobs still running when their task was declared ended
    // (the task's own record says when). A supervisor killed under a live
    // daemon leaves its job running.
    let mut outlived = Vec::new();
    for (state, token, name) in failed.iter().map(|(t, (n, _))| ("failed", t, n)).chain(
        done.iter()
            .filter_map(|t| Some(("done", t, &dirs.get(t)?[0].1))),
    ) {
        let record: serde_json::Value =
            fs::read(spool.root.join(state).join(name).join("task.json"))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
        let Some(at) = record["outcome"]["at"].as_f64() else {
            continue;
        };
        let last_end = by_token
            .get(token)
            .into_iter()
            .flatten()
            .filter(|l| !l.start)
            .map(|l| l.time)
            .fold(f64::NEG_INFINITY, f64::max);
        if last_end > at {
            outlived.push(format!(
                "{name}: its job ended {:.3} s after the task went to {state}/",
                last_end - at
            ));
        }
    }
    for o in &outlived {
        notes.push(o.clone());
    }
    if oom_crashes == 0 {
        problems.push("no job crashed with OOM: recovery was never exercised".into());
    }

    // Report.
    let wall = began.elapsed().as_secs_f64();
    println!("crash-storm: ---- summary (seed {seed}) ----");
    println!(
        "  tasks submitted:        {} ({} by carma submit, {} of them by nobody over the socket; \
         {} dropped into pending/; {} refused)",
        accepted.len(),
        jobs.iter()
            .filter(|j| j.submit && accepted.contains(&j.token))
            .count(),
        submitted.by_nobody,
        jobs.iter()
            .filter(|j| !j.submit && accepted.contains(&j.token))
            .count(),
        submitted.refused.len()
    );
    println!(
        "  of them OOM bait:       {}",
        baits.intersection(&accepted).count()
    );
    println!("  daemon SIGKILLs:        {daemon_kills}");
    println!("  supervisor SIGKILLs:    {}", supervisor_kills.len());
    println!("  nursery SIGKILLs:       {nursery_kills}");
    println!("  job SIGKILLs:           {}", job_kills.len());
    println!("  runs started (ledger):  {runs_total}");
    println!("  OOM crashes seen:       {oom_crashes}");
    println!("  re-runs:                {reruns}");
    println!("  done:                   {}", done.len());
    println!(
        "  failed:                 {} ({} storm-killed, {} OOM retries used up, {} unexplained)",
        failed.len(),
        failed_by_storm.len(),
        failed_retries.len(),
        failed_unexplained.len()
    );
    println!("  lost:                   {}", lost.len());
    println!("  ended twice:            {}", duplicated.len());
    println!("  still unfinished:       {}", unfinished.len());
    println!("  ran twice at once:      {}", overlaps.len());
    println!("  run launched twice:     {}", twice_launched.len());
    println!("  re-ran without OOM:     {}", rerun_without_oom.len());
    println!(
        "  wall time:              {wall:.1} s (storm {storm_secs:.1} s, drain {drain_secs:.1} s)"
    );
    // How far the daemons got, and which recovery paths the storm reached
    // (from the log; informative only, the judgement above does not use it).
    println!("  daemon log, lines that mention:");
    for needle in [
        "serving ",
        "re-attached to run",
        "ended while the daemon was away",
        "lost its supervisor",
        "back to pending/",
        "back to recovery/",
        "finished a claim interrupted by a crash",
        "to recovery/ after OOM crash",
        "vanished",
        " ERROR ",
        " WARN ",
    ] {
        println!(
            "    {:>6}  {needle:?}",
            log.lines().filter(|l| l.contains(needle)).count()
        );
    }
    for f in &failed_by_storm {
        println!("  failed, legitimately (the storm killed its supervisor or job): {f}");
    }
    for n in &notes {
        println!("  note: {n}");
    }

    let mut sections: Vec<(&str, &Vec<String>)> = vec![
        ("lost (no directory anywhere)", &lost),
        ("ended more than once", &duplicated),
        ("not ended", &unfinished),
        ("ran twice at once", &overlaps),
        ("run launched twice", &twice_launched),
        ("re-ran without OOM", &rerun_without_oom),
        ("failed without a cause", &failed_unexplained),
    ];
    sections.push(("other problems", &problems));
    let mut failures = 0;
    for (title, items) in &sections {
        if items.is_empty() {
            continue;
        }
        failures += items.len();
        println!("crash-storm: FAILED: {title}: {}", items.len());
        for item in items.iter().take(25) {
            println!("    {item}");
        }
        if items.len() > 25 {
            println!("    ... {} more", items.len() - 25);
        }
    }
    // Evidence for the first few offenders: their ledger lines and what
    // the daemon logged about them.
    for token in lost.iter().chain(&evidence_tokens).take(12) {
        println!("crash-storm: evidence for {token}:");
        if let Some(places) = dirs.get(token) {
            println!("      directories: {places:?}");
        }
        for l in by_token.get(token).into_iter().flatten() {
            println!("      ledger: {}", l.text);
        }
        let names: BTreeSet<String> = by_token
            .get(token)
            .into_iter()
            .flatten()
            .map(|l| l.task.clone())
            .chain(
                dirs.get(token)
                    .into_iter()
                    .flatten()
                    .map(|(_, n)| n.clone()),
            )
            .collect();
        if names.is_empty() {
            print!("{}", log_lines_about(&log, token, 15));
        }
        for name in names {
            print!("{}", log_lines_about(&log, &name, 15));
        }
    }
    if failures > 0 || std::env::var_os("CARMA_STORM_KEEP").is_some() {
        spool.dir.disable_cleanup(true);
        println!(
            "crash-storm: spool, ledger and daemon log kept in {}",
            spool.dir.path().display()
        );
    }
    assert_eq!(
        failures, 0,
        "crash-storm found {failures} problem(s); see above"
    );
}
