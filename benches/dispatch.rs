//! carma beside task-spooler (`tsp`), in one run, on the same machine:
//! `cargo bench --bench dispatch`. task-spooler is the speed a queue
//! without GPUs or durability reaches; carma keeps every submission, claim
//! and state change on disk, so the ratios say what that costs.
//!
//! Both get 4 places to run (carma 4 simulated GPUs, tsp 4 slots), and the
//! same work, taken in turns so that the host's drift (this machine's
//! figures move by half within minutes) falls on both alike:
//! - 30 jobs one at a time, each writing `date +%s.%N` as its first line:
//!   from the start of the submitting process to that stamp, p50 and p99
//!   (the next job is submitted once the previous one has ended); the two
//!   systems take every other job;
//! - 200 trivial jobs submitted one by one as fast as the submitting
//!   command returns, until every one has run: jobs per second, in
//!   [`ROUNDS`] rounds whose first system alternates (and for carma also
//!   all 200 in one `carma submit` in each round, its way to hand over
//!   many); each round's ratio, and their median; and the machine's busy
//!   CPU per job, which bounds a burst's pace on a machine it saturates;
//! - one submitting process, whole: its wall time, p50 of 30 taken in
//!   turns, as an ordinary user (`nobody`, when the benchmark runs as
//!   root; otherwise as the daemon's owner, which takes a shorter path).
//!
//! Without `tsp` on the PATH (Debian: `apt-get install task-spooler`)
//! only carma's figures are printed.

mod common;

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{carma, percentile, stamped, unix_now};

const LATENCY_JOBS: usize = 30;
const BURST_JOBS: usize = 200;
const SUBMITS: usize = 30;
/// Rounds of the burst measures.
const ROUNDS: usize = 3;
/// `nobody`'s uid and gid on Debian, the ordinary user a root run submits
/// as.
const NOBODY: u32 = 65534;

/// One system under test: how a job is handed to it, and how to tell it
/// has ended.
trait Queue {
    fn name(&self) -> &'static str;
    /// The command that hands `body` (a shell script) to the queue as job
    /// `tag`, with what it needs written beforehand. Preparing is not
    /// timed: a user writes a job file before submitting it.
    fn prepare(&self, tag: &str, body: &str) -> Command;
    /// Waits until the last job handed to this queue has ended; `n` counts
    /// every job handed to its system, by any of its users (carma's share
    /// one daemon and count `done/`).
    fn settle(&self, n: usize);
}

struct Carma {
    /// The daemon's directory: its spool and configuration.
    dir: PathBuf,
    /// Where the submitting user writes job files.
    jobs: PathBuf,
    user: Option<u32>,
}

impl Carma {
    fn command(&self) -> Command {
        let mut command = Command::new(carma());
        command
            .env("CARMA_CONFIG", self.dir.join("carma.toml"))
            .args(["submit", "--spool"])
            .arg(self.dir.join("spool"))
            .stdout(Stdio::null());
        if let Some(uid) = self.user {
            command.uid(uid).gid(uid);
        }
        command
    }

    fn job_file(&self, tag: &str, body: &str) -> PathBuf {
        let rad = self.jobs.join(format!("{tag}.rad"));
        fs::write(&rad, format!("memory: 1G\n{body}\n")).unwrap();
        if let Some(uid) = self.user {
            chown(&rad, Some(uid), Some(uid)).unwrap();
        }
        rad
    }
}

impl Queue for Carma {
    fn name(&self) -> &'static str {
        "carma"
    }

    fn prepare(&self, tag: &str, body: &str) -> Command {
        let rad = self.job_file(tag, body);
        let mut command = self.command();
        command.arg(rad);
        command
    }

    fn settle(&self, n: usize) {
        let done = self.dir.join("spool/done");
        let deadline = Instant::now() + Duration::from_secs(60);
        while fs::read_dir(&done).map_or(0, Iterator::count) < n {
            assert!(Instant::now() < deadline, "carma: job {n} never ended");
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

struct Tsp {
    dir: PathBuf,
    user: Option<u32>,
}

impl Tsp {
    fn command(&self) -> Command {
        let mut command = Command::new("tsp");
        command
            .env("TS_SOCKET", self.dir.join("tsp.socket"))
            .env("TMPDIR", &self.dir)
            .env("TS_MAXFINISHED", "100000")
            .stdout(Stdio::null());
        if let Some(uid) = self.user {
            command.uid(uid).gid(uid);
        }
        command
    }

    fn start(dir: &Path, user: Option<u32>) -> Tsp {
        let tsp = Tsp {
            dir: dir.to_owned(),
            user,
        };
        let status = tsp.command().args(["-S", "4"]).status().unwrap();
        assert!(status.success(), "tsp -S 4 failed");
        tsp
    }
}

impl Drop for Tsp {
    fn drop(&mut self) {
        let _ = self.command().arg("-K").status();
    }
}

impl Queue for Tsp {
    fn name(&self) -> &'static str {
        "task-spooler"
    }

    fn prepare(&self, tag: &str, body: &str) -> Command {
        let mut command = self.command();
        command.args(["-L", tag, "sh", "-c", body]);
        command
    }

    fn settle(&self, _n: usize) {
        // -w waits for the job added last.
        let status = self.command().arg("-w").status().unwrap();
        assert!(status.success(), "tsp -w failed");
    }
}

/// Runs a prepared submission; returns when the submitting command does.
fn submit(mut command: Command, queue: &dyn Queue) {
    let status = command.status().unwrap();
    assert!(status.success(), "{}: a submit failed", queue.name());
}

/// What the file system under `dir` costs here, printed before the
/// figures: carma's share of them is mostly files made and flushed, and the
/// same device can make a file in 0.015 ms in one directory and 0.16 ms in
/// another (docs/performance.md), so the ratios mean little without it.
fn file_system(dir: &Path) -> String {
    const TIMES: usize = 50;
    let probe = dir.join("probe");
    fs::create_dir(&probe).unwrap();
    let timed = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1e3
    };
    let (mut create, mut flush, mut mkdir) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..TIMES {
        let mut file = None;
        create.push(timed(&mut || {
            file = Some(fs::File::create(probe.join(format!("f{i}"))).unwrap());
        }));
        let mut file = file.unwrap();
        std::io::Write::write_all(&mut file, &[0; 4096]).unwrap();
        flush.push(timed(&mut || file.sync_all().unwrap()));
        mkdir.push(timed(&mut || {
            fs::create_dir(probe.join(format!("d{i}"))).unwrap()
        }));
    }
    fs::remove_dir_all(&probe).unwrap();
    for v in [&mut create, &mut flush, &mut mkdir] {
        v.sort_by(f64::total_cmp);
    }
    format!(
        "   file system: {}: a file made in {:.3} ms, 4 KiB flushed in {:.3} ms, \
         a directory made in {:.3} ms (p50 of {TIMES})",
        dir.display(),
        percentile(&create, 0.5),
        percentile(&flush, 0.5),
        percentile(&mkdir, 0.5),
    )
}

/// Whether task-spooler is installed.
fn has_tsp() -> bool {
    Command::new("tsp")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A directory of the benchmark's, given to `user` where one is named.
fn workdir(root: &Path, name: &str, user: Option<u32>) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(dir.join("jobs")).unwrap();
    fs::create_dir_all(dir.join("marks")).unwrap();
    if let Some(uid) = user {
        for path in [dir.clone(), dir.join("jobs"), dir.join("marks")] {
            chown(&path, Some(uid), Some(uid)).unwrap();
        }
    }
    dir
}

/// Submit → first script line of job `i` on an idle queue, in ms.
fn latency(queue: &dyn Queue, marks: &Path, i: usize) -> f64 {
    let marker = marks.join(format!("first-{i}"));
    let body = format!("date +%s.%N > {}", marker.display());
    let command = queue.prepare(&format!("lat{i}"), &body);
    let before = unix_now();
    submit(command, queue);
    let first = stamped(&marker, &format!("{} job {i}", queue.name()));
    (first - before) * 1e3
}

/// `BURST_JOBS` trivial jobs submitted back to back in round `round`:
/// jobs per second from the first submit until all have run, and the
/// seconds the submits took.
fn burst(queue: &dyn Queue, marks: &Path, round: usize) -> (f64, f64) {
    let dir = marks.join(format!("burst-{round}"));
    fs::create_dir(&dir).unwrap();
    if let Ok(meta) = fs::metadata(marks) {
        fs::set_permissions(&dir, meta.permissions()).unwrap();
        let _ = chown(
            &dir,
            Some(std::os::unix::fs::MetadataExt::uid(&meta)),
            Some(std::os::unix::fs::MetadataExt::gid(&meta)),
        );
    }
    let commands: Vec<Command> = (0..BURST_JOBS)
        .map(|i| {
            let body = format!(": > {}", dir.join(i.to_string()).display());
            queue.prepare(&format!("burst{round}-{i}"), &body)
        })
        .collect();
    let start = Instant::now();
    for command in commands {
        submit(command, queue);
    }
    let submitted = start.elapsed().as_secs_f64();
    all_ran(&dir, queue.name());
    (BURST_JOBS as f64 / start.elapsed().as_secs_f64(), submitted)
}

/// carma's own way to hand over many jobs: one `carma submit` of all
/// `BURST_JOBS` files, whose durability they share, in round `round`; jobs
/// per second from its start until all have run, and the seconds the
/// submit took.
fn burst_in_one_submit(carma: &Carma, marks: &Path, round: usize) -> (f64, f64) {
    let dir = marks.join(format!("burst-at-once-{round}"));
    fs::create_dir(&dir).unwrap();
    let rads: Vec<PathBuf> = (0..BURST_JOBS)
        .map(|i| {
            carma.job_file(
                &format!("all{round}-{i}"),
                &format!(": > {}", dir.join(i.to_string()).display()),
            )
        })
        .collect();
    let start = Instant::now();
    let status = carma.command().args(&rads).status().unwrap();
    assert!(
        status.success(),
        "carma submit of {BURST_JOBS} files failed"
    );
    let submitted = start.elapsed().as_secs_f64();
    all_ran(&dir, "carma");
    (BURST_JOBS as f64 / start.elapsed().as_secs_f64(), submitted)
}

/// The whole machine's busy CPU so far, in seconds: `/proc/stat`'s user,
/// nice, system, irq and softirq time over every CPU. A burst keeps every
/// core busy, so its jobs per second are the cores over the busy CPU per
/// job, whoever spends it.
fn busy_cpu_s() -> f64 {
    let stat = fs::read_to_string("/proc/stat").unwrap();
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().unwrap())
        .collect();
    // SAFETY: sysconf reads a constant.
    let per_s = unsafe { nix::libc::sysconf(nix::libc::_SC_CLK_TCK) } as f64;
    [0, 1, 2, 5, 6].iter().map(|&i| ticks[i]).sum::<f64>() / per_s
}

/// One round of a burst.
struct Burst {
    jobs_per_s: f64,
    /// The seconds the submitting took.
    submits_s: f64,
    /// The machine's busy CPU per job, from the first submit until every
    /// job had ended.
    cpu_ms: f64,
}

impl Burst {
    /// A burst measured by `run` (jobs per second, seconds of submits),
    /// with its CPU counted until `settle` returns.
    fn measured(run: impl FnOnce() -> (f64, f64), settle: impl FnOnce()) -> Burst {
        let cpu = busy_cpu_s();
        let (jobs_per_s, submits_s) = run();
        settle();
        Burst {
            jobs_per_s,
            submits_s,
            cpu_ms: (busy_cpu_s() - cpu) * 1e3 / BURST_JOBS as f64,
        }
    }

    /// The rounds' figures, one field each, joined for printing.
    fn list(rounds: &[Burst], field: fn(&Burst) -> f64, decimals: usize) -> String {
        let figures: Vec<String> = rounds
            .iter()
            .map(|b| format!("{:.*}", decimals, field(b)))
            .collect();
        figures.join(", ")
    }
}

/// Waits until each of the burst's jobs has left its mark in `dir`.
fn all_ran(dir: &Path, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while fs::read_dir(dir).unwrap().count() < BURST_JOBS {
        assert!(Instant::now() < deadline, "{who}: the burst never ran");
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// One submitting process, whole: its wall time in ms.
fn submit_process(queue: &dyn Queue, i: usize) -> f64 {
    let command = queue.prepare(&format!("one{i}"), "true");
    let start = Instant::now();
    submit(command, queue);
    start.elapsed().as_secs_f64() * 1e3
}

/// One system under test, with what it measured.
struct System<'a> {
    queue: &'a dyn Queue,
    /// Its ordinary user's way in.
    submitter: &'a dyn Queue,
    marks: PathBuf,
    /// The jobs handed to it so far.
    jobs: usize,
    latency_ms: Vec<f64>,
    /// The bursts of one submit per job, a round each.
    bursts: Vec<Burst>,
    submit_ms: Vec<f64>,
}

impl<'a> System<'a> {
    fn new(queue: &'a dyn Queue, submitter: &'a dyn Queue, marks: PathBuf) -> System<'a> {
        System {
            queue,
            submitter,
            marks,
            jobs: 0,
            latency_ms: Vec::new(),
            bursts: Vec::new(),
            submit_ms: Vec::new(),
        }
    }

    /// Counts `jobs` more handed over, the last of them by `by`, and waits
    /// until all have ended, untimed: neither system's measure meets the
    /// other's jobs still running.
    fn settle(&mut self, jobs: usize, by: &dyn Queue) {
        self.jobs += jobs;
        by.settle(self.jobs);
    }

    fn print(&mut self, user: &str) {
        self.latency_ms.sort_by(f64::total_cmp);
        self.submit_ms.sort_by(f64::total_cmp);
        println!(
            "{:>13}: submit -> first line p50 {:.1} ms, p99 {:.1} ms; {BURST_JOBS} trivial jobs \
             {} jobs/s by round (submits took {} s; busy CPU {} ms per job); one submit {user}, \
             whole process, p50 {:.1} ms",
            self.queue.name(),
            percentile(&self.latency_ms, 0.5),
            percentile(&self.latency_ms, 0.99),
            Burst::list(&self.bursts, |b| b.jobs_per_s, 0),
            Burst::list(&self.bursts, |b| b.submits_s, 2),
            Burst::list(&self.bursts, |b| b.cpu_ms, 2),
            percentile(&self.submit_ms, 0.5),
        );
    }
}

/// The systems in turn, the first of them changing with `turn`.
fn in_turn<'s, 'a>(systems: &'s mut [System<'a>], turn: usize) -> Vec<&'s mut System<'a>> {
    let mut order: Vec<&mut System> = systems.iter_mut().collect();
    let by = turn % order.len();
    order.rotate_left(by);
    order
}

/// The median of a few numbers.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(&values, 0.5)
}

fn main() {
    let root = tempfile::tempdir().unwrap();
    let is_root = nix::unistd::geteuid().is_root();
    let ordinary = is_root.then_some(NOBODY);
    let user = if is_root {
        "as nobody"
    } else {
        "as the daemon's owner"
    };
    // An ordinary user must reach the spool and its own directories.
    fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();

    println!("{}", file_system(root.path()));
    let carma_dir = workdir(root.path(), "carma", None);
    let _daemon = common::start(&carma_dir, "4x40GiB");
    let carma = Carma {
        dir: carma_dir.clone(),
        jobs: carma_dir.join("jobs"),
        user: None,
    };
    // The ordinary user's jobs go to the same daemon, from their own
    // directory.
    let carma_user = Carma {
        dir: carma_dir.clone(),
        jobs: workdir(root.path(), "carma-user", ordinary).join("jobs"),
        user: ordinary,
    };
    let tsp = has_tsp().then(|| {
        let dir = workdir(root.path(), "tsp", None);
        let user_dir = workdir(root.path(), "tsp-user", ordinary);
        (
            Tsp::start(&dir, None),
            Tsp::start(&user_dir, ordinary),
            dir.join("marks"),
        )
    });
    let mut systems = vec![System::new(&carma, &carma_user, carma_dir.join("marks"))];
    if let Some((tsp, tsp_user, marks)) = &tsp {
        systems.push(System::new(tsp, tsp_user, marks.clone()));
    }

    for i in 0..LATENCY_JOBS {
        for system in in_turn(&mut systems, i) {
            let ms = latency(system.queue, &system.marks, i);
            system.latency_ms.push(ms);
            system.settle(1, system.queue);
        }
    }
    let mut at_once = Vec::new();
    for round in 0..ROUNDS {
        for system in in_turn(&mut systems, round) {
            let (queue, marks) = (system.queue, system.marks.clone());
            let measured = Burst::measured(
                || burst(queue, &marks, round),
                || system.settle(BURST_JOBS, queue),
            );
            system.bursts.push(measured);
            if queue.name() == carma.name() {
                at_once.push(Burst::measured(
                    || burst_in_one_submit(&carma, &marks, round),
                    || system.settle(BURST_JOBS, queue),
                ));
            }
        }
    }
    for i in 0..SUBMITS {
        for system in in_turn(&mut systems, i) {
            let ms = submit_process(system.submitter, i);
            system.submit_ms.push(ms);
            system.settle(1, system.submitter);
        }
    }

    for system in &mut systems {
        system.print(user);
    }
    println!(
        "        carma: {BURST_JOBS} trivial jobs in one `carma submit`: {} jobs/s by round \
         (the submit took {} s; busy CPU {} ms per job)",
        Burst::list(&at_once, |b| b.jobs_per_s, 0),
        Burst::list(&at_once, |b| b.submits_s, 2),
        Burst::list(&at_once, |b| b.cpu_ms, 2),
    );
    let [ours, theirs] = &systems[..] else {
        println!("task-spooler: not installed (apt-get install task-spooler); no ratios");
        return;
    };
    let by_round = |rounds: &[Burst]| {
        median(
            rounds
                .iter()
                .zip(&theirs.bursts)
                .map(|(ours, theirs)| ours.jobs_per_s / theirs.jobs_per_s)
                .collect(),
        )
    };
    println!(
        "carma / task-spooler: first line p50 {:.2}x (goal <= 1.5x); jobs/s {:.2}x one by one, \
         {:.2}x in one submit (medians of the rounds' ratios; goal >= 0.8x); one submit {:.2}x \
         (goal <= 2x)",
        percentile(&ours.latency_ms, 0.5) / percentile(&theirs.latency_ms, 0.5),
        by_round(&ours.bursts),
        by_round(&at_once),
        percentile(&ours.submit_ms, 0.5) / percentile(&theirs.submit_ms, 0.5),
    );
}
