//! `carma daemon`: the event loop that serves one spool.
//!
//! # Theory of operation
//!
//! The daemon is a shell around two pure machines: the scheduling core
//! ([`crate::sched`]) decides where and when tasks run, and the task
//! lifecycle ([`crate::lifecycle`]) around it decides everything else a
//! task goes through (launch failures, OOM recovery, requeues, users'
//! requests, closings retried until they land). Neither reads a clock or
//! touches a file. This module reads the world for them (the spool, the
//! GPUs, the runs' ends), tells them the time, and carries out what they
//! ask through the lifecycle's `World` (`hands`).
//!
//! One thread owns all state and runs the loop; other threads only send it
//! messages ([`Msg`]): the spool watcher (`notify`), the GPU monitor, the
//! signal handler (`signal-hook`), and one reaper per supervisor this
//! daemon started. Each turn of the loop drains every waiting message,
//! turns them into lifecycle inputs (a task taken in, a run ended, a
//! request, a reading), steps the lifecycle once, and carries out its
//! effects as renames in the spool and processes started or signalled.
//! It sleeps only until the next message, the core's next deadline, a
//! retry, or the next status write: placement happens as soon as capacity
//! exists.
//!
//! Jobs do not belong to the daemon: each runs under its own supervisor in
//! its own session, which records the run's end in the spool. So the daemon
//! can stop (SIGTERM: it stops dispatching and exits, jobs keep running),
//! be restarted, or be killed at any moment; a starting daemon rebuilds all
//! state from the spool (`restore`), re-attaches to live supervisors and
//! finishes the runs that ended while it was away.

mod adoptions;
mod array;
mod backstop;
mod depends;
mod environment;
mod hands;
mod intake;
mod listener;
mod loose;
mod monitor;
mod mounts;
mod notify;
mod owners;
mod readings;
mod requests;
mod restore;
mod runs;
mod snapshot;
mod start;
mod submissions;
mod unfinished;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::estimate::Chain;
use crate::gpu::log::RotatingLog;
use crate::gpu::{GpuBackend, GpuInfo, GpuReading};
use crate::http::Feed;
use crate::lifecycle::{Backoff, Backoffs, Ending, Lifecycle, Moment, Task};
use crate::mps::Mps;
use crate::nursery::Supervisors;
use crate::sched::Time;
use crate::spool::record::{RunAs, unix_now};
use crate::spool::{Spool, State};
use hands::Hands;
pub use start::run;
use watch::Change;

/// What the loop's helper threads tell it.
#[derive(Debug)]
pub enum Msg {
    /// A change in the spool's watched directories.
    Spool(Change),
    /// A fresh reading of every GPU.
    Readings(Vec<GpuReading>),
    /// A signal arrived.
    Signal(i32),
    /// The nursery forked the supervisor of a run (task number, run, pid).
    Forked(u64, u32, u32),
    /// A supervisor this daemon started has exited (task number, run).
    Reaped(u64, u32),
    /// The supervisors' nursery with this number is gone: the ends of the
    /// supervisors it forked will not be reported.
    NurseryGone(u64),
    /// A whole request on the submission socket, to be answered.
    Submission(Box<listener::Submission>),
}

/// How the daemon was started.
pub struct Options {
    pub spool: PathBuf,
    pub config: Config,
    /// The file the configuration came from, re-read on SIGHUP.
    pub config_path: Option<PathBuf>,
    pub backend: Box<dyn GpuBackend>,
    /// Where to serve the status page and metrics (`--http`, else
    /// `http.listen`); `None`: nowhere.
    pub http: Option<SocketAddr>,
}

/// The loop's state. Fields are documented where they are not obvious.
struct Daemon {
    spool: Spool,
    /// The spool lock's device and inode, named in `status.json`.
    lock_id: Option<(u64, u64)>,
    config: Config,
    config_path: Option<PathBuf>,
    /// The tasks, the scheduling core, and every decision about them.
    life: Lifecycle,
    /// The memory estimators, with the models loaded once.
    chain: Chain,
    /// The core's time zero.
    origin: Instant,
    /// The last ended task looked at for pruning.
    prune_cursor: u64,
    /// Jobs' accounts looked up in this turn of the loop, by uid: a burst
    /// of one user's jobs shares one lookup and one [`RunAs`]. Cleared at
    /// every turn, so an account changed since is seen at the next.
    accounts: HashMap<u32, (Option<Arc<RunAs>>, Arc<str>)>,
    /// The cgroup each run's own cgroup is made under; none where no
    /// cgroup v2 is writable or `daemon.job_cgroups` is false (a job is then
    /// held together by its supervisor, a subreaper).
    job_cgroup: Option<PathBuf>,
    gpus: Vec<GpuInfo>,
    backend_name: String,
    /// Environment every job needs from the GPU backend.
    backend_env: Vec<(String, String)>,
    readings: Vec<GpuReading>,
    /// When `readings` came (Unix seconds).
    readings_at: f64,
    /// The processes in `readings` that belong to tasks: pid to task name.
    process_tasks: HashMap<u32, String>,
    /// The GPU log (`crate::gpu::log`) and the time of the readings last
    /// written to it.
    gpu_log: RotatingLog,
    gpu_logged_at: f64,
    /// The last GPU log write failed (its warning was logged).
    gpu_log_failing: bool,
    /// The program that supervises runs ([`crate::supervisor::program`])
    /// and the supervisors' nursery.
    supervisors: Supervisors,
    tx: Sender<Msg>,
    /// Files created in `pending/` whose writer has not closed them yet.
    unfinished: unfinished::Unfinished,
    /// Files in `pending/` that are not jobs (yet), and jobs waiting for
    /// their model summary.
    loose: loose::Loose,
    /// Entries that appeared in `pending/` during this turn of the loop.
    arrivals: Vec<String>,
    /// `cancel/` holds requests to act on (new, or waiting for their task).
    cancel_due: bool,
    sample_interval_ms: Arc<AtomicU64>,
    /// When the status file is counted as written: a second after it,
    /// the next write is due (set back to make one due sooner).
    status_written: Instant,
    /// When it was last written.
    status_wrote: Instant,
    /// Another user's submission was taken in this turn: the status file
    /// must name its task before its submitter hears of it (by the file,
    /// or by the socket's answer).
    receipt_due: bool,
    /// Answers to the socket that wait for the status file to name their
    /// tasks: sent once it is written ([`Daemon::write_status`]).
    answers: Vec<(listener::Answer, crate::spool::socket::Reply)>,
    /// Claims a crash left in `staging/` that the start could not place
    /// (their entries there): tried again every second until they are.
    stranded: Vec<String>,
    /// How long the last status write took: writes that receipts ask for
    /// are spaced by four times that ([`Daemon::receipt_spacing`]).
    status_took: Duration,
    /// Requests from the submission socket, answered once taken in.
    handed: Vec<listener::Submission>,
    /// The last status write failed (its warning was logged).
    status_failing: bool,
    /// State directories whose flush failed at the end of the last step:
    /// the next step flushes them again (see [`hands`]).
    unflushed: Vec<PathBuf>,
    metrics_written: Instant,
    /// Last look at adopted runs.
    polled: Time,
    /// Log lines users' actions make, held to a rate.
    hush: crate::journal::Hush,
    /// Drops refused in the current minute, per user.
    junk_drops: crate::lifecycle::PerMinute,
    /// Users past `junk_drops`' limit, and until when, for the socket's
    /// readers.
    barred: listener::Barred,
    /// carma's task directories in `pending/` as listed for this turn's
    /// requests ([`Hands::pending`]); emptied at each turn.
    pending_listed: std::cell::OnceCell<Vec<crate::spool::TaskName>>,
    /// Owners of ended tasks, read from their records as dependencies
    /// name them ([`depends`]).
    ended_owners: std::cell::RefCell<HashMap<u64, Option<u32>>>,
    /// Runs whose job the daemon killed as overdue, and cgroups left to
    /// remove.
    backstop: backstop::Backstop,
    /// Notifications running.
    notifications: notify::Notifications,
    /// The per-GPU errors last reported, so each is logged once.
    gpu_errors: BTreeMap<usize, String>,
    /// The MPS control daemon, when jobs run under MPS.
    mps: Option<Mps>,
    /// Listing `pending/` failed for a reason that may pass (too many open
    /// files): the whole directory is looked at again on this schedule.
    intake_retry: Backoff,
    /// Entries of `pending/` whose claim or adoption failed: each is tried
    /// again on its own schedule, never at once (putting a drop back is
    /// itself a file event, which must not start the claim over).
    entry_retry: Backoffs<OsString>,
    /// Recent adoptions of other users' submissions, for `status.json`.
    adopted: adoptions::Adoptions,
    /// Where each status is published for the status page and metrics,
    /// when they are served.
    feed: Option<Feed>,
    /// When this turn of the loop began, and the tasks it took in: those
    /// launched by its end count in the dispatch latency.
    turn_started: Instant,
    fresh: Vec<u64>,
    /// The start is over: requests left while no daemon ran have acted,
    /// so the core may place tasks in the middle of an intake.
    restored: bool,
    /// The watcher's changes not yet handled.
    backlog: Arc<watch::Backlog>,
    /// Events were lost, or named what only a listing shows: `pending/`
    /// is looked at again, at most once per [`rescan_spacing`].
    rescan_due: bool,
    /// When the last rescan listed `pending/`, and how long the listing
    /// took.
    last_rescan: Option<(Instant, Duration)>,
}

/// The least time between two rescans asked for by events: each lists
/// all of `pending/`, and anyone can make such events by the thousand.
/// Hidden names are listed too and left alone (`carma submit` and
/// editors write there under them), so a user can grow the listing
/// without bound within their quota: a listing that took `took` waits
/// ten times that before the next, and rescans take at most a tenth of
/// the loop's time however large `pending/` grows.
fn rescan_spacing(took: Duration) -> Duration {
    Duration::from_secs(1).max(took.saturating_mul(10))
}

/// Messages handled in one turn of the loop at most: launches, answers
/// and the status file come between turns, however fast messages come.
const MESSAGES_PER_TURN: usize = 8192;

/// Ended tasks looked at for pruning each second.
const PRUNE_PER_TURN: usize = 32;

/// The GPU sampling interval, milliseconds, as the monitor thread reads it.
fn interval_ms(config: &Config) -> u64 {
    (config.daemon.sample_interval_s.get() * 1000.0)
        .round()
        .max(1.0) as u64
}

impl Daemon {
    fn now(&self) -> Time {
        self.origin.elapsed()
    }

    /// Now, as the lifecycle is told it.
    fn moment(&self) -> Moment {
        Moment {
            at: self.now(),
            unix: unix_now(),
        }
    }

    /// Lends the lifecycle the daemon's hands for `f`, then takes in the
    /// tasks it put back in the queue.
    fn with_world<R>(&mut self, f: impl FnOnce(&mut Lifecycle, Moment, &mut Hands) -> R) -> R {
        let now = self.moment();
        let mut hands = Hands {
            spool: &self.spool,
            config: &self.config,
            gpus: &self.gpus,
            backend_env: &self.backend_env,
            mps: self.mps.is_some(),
            job_cgroup: self.job_cgroup.as_deref(),
            notifications: &mut self.notifications,
            supervisors: &mut self.supervisors,
            tx: &self.tx,
            chain: &self.chain,
            take_in: Vec::new(),
            unsynced: self.unflushed.clone(),
            pending: &self.pending_listed,
        };
        let result = f(&mut self.life, now, &mut hands);
        let failed = hands.flush();
        for (dir, e) in &failed {
            // Once per run of failures: every step tries again.
            if !self.unflushed.contains(dir) {
                log::warn!(
                    "cannot flush {}: {e}; tried again after each step",
                    dir.display()
                );
            }
        }
        for dir in &self.unflushed {
            if !failed.iter().any(|(d, _)| d == dir) {
                log::info!("{} flushed at last", dir.display());
            }
        }
        self.unflushed = failed.into_iter().map(|(dir, _)| dir).collect();
        for (name, state, limited) in hands.take_in {
            let _ = self.take_as(name, state, None, limited);
        }
        result
    }

    /// The loop. Returns when asked to stop.
    fn serve(&mut self, rx: &Receiver<Msg>) {
        loop {
            let first = match rx.recv_timeout(self.sleep_for()) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            self.turn_started = Instant::now();
            let mut stop = false;
            for msg in first
                .into_iter()
                .chain(rx.try_iter())
                .take(MESSAGES_PER_TURN)
            {
                stop |= self.handle(msg);
            }
            if stop {
                self.write_status();
                let running = self
                    .life
                    .tasks
                    .values()
                    .filter(|t| t.state == State::Running)
                    .count();
                log::info!("stopping; {running} jobs keep running under their supervisors");
                if let Some(mps) = &self.mps {
                    if running == 0 {
                        mps.stop();
                    } else {
                        log::info!("leaving the MPS control daemon running for those jobs");
                    }
                }
                return;
            }
            self.accounts.clear();
            self.pending_listed.take();
            crate::rad::forget_listings();
            self.take_arrivals();
            let answers = self.take_handed();
            self.answers.extend(answers);
            // Before this turn's launches, not after them: the receipt is
            // all the submitter waits for. Written again after them, for
            // those who look for the new tasks among the waiting ones.
            // Each write lists every waiting task: with thousands waiting,
            // a user submitting in a loop had it written at every turn.
            if self.receipt_due {
                let due = self.status_wrote + self.receipt_spacing();
                match Instant::now() >= due {
                    true => {
                        self.write_status();
                        self.status_due_at(Instant::now() + self.receipt_spacing());
                    }
                    false => self.status_due_at(due),
                }
            } else {
                self.send_answers();
            }
            if std::mem::take(&mut self.cancel_due) {
                self.cancel_requests();
            }
            self.poll_adopted();
            self.claim_stale_unfinished();
            self.tidy_pending();
            self.retry_due();
            self.step();
            self.note_dispatches();
            self.housekeeping();
            // The supervisors' nursery, (re)started while nothing waits.
            self.supervisors.refill();
        }
    }

    /// How long the loop may sleep: until the core's deadline, the next
    /// status refresh, or a poll of adopted runs, whichever is first.
    fn sleep_for(&self) -> Duration {
        let mut sleep = Duration::from_secs(1).saturating_sub(self.status_written.elapsed());
        let deadlines = self
            .life
            .core
            .next_deadline()
            .into_iter()
            .chain(self.life.next_retry())
            .chain(self.intake_retry.next())
            .chain(self.entry_retry.next());
        if let Some(next) = deadlines.min() {
            sleep = sleep.min(next.saturating_sub(self.now()));
        }
        if self.rescan_due {
            sleep = sleep.min(self.rescan_wait());
        }
        sleep.max(Duration::from_millis(1))
    }

    /// Handles one message; true when the daemon should stop.
    fn handle(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Spool(change) => {
                self.backlog.handled();
                self.on_change(change);
            }
            Msg::Readings(readings) => self.on_readings(readings),
            Msg::Forked(seq, run, pid) => self.on_forked(seq, run, pid),
            Msg::Reaped(seq, run) => self.on_reaped(seq, run),
            Msg::NurseryGone(nursery) => self.on_nursery_gone(nursery),
            Msg::Submission(submission) => self.handed.push(*submission),
            Msg::Signal(signal) => match signal {
                signal_hook::consts::SIGTERM | signal_hook::consts::SIGINT => return true,
                signal_hook::consts::SIGHUP => self.reload(),
                signal_hook::consts::SIGUSR1 => self.log_state(),
                _ => {}
            },
        }
        false
    }

    /// Steps the lifecycle: the core hears what happened and its actions
    /// are carried out.
    pub(super) fn step(&mut self) {
        self.with_world(|life, now, world| life.step(now, Vec::new(), world));
    }

    /// Starts serving the status page and metrics on `addr`. A server
    /// that cannot start is logged and left out: the spool is served
    /// without it.
    fn serve_http(&mut self, addr: SocketAddr) {
        let hosts = self.config.http.hosts.clone();
        match crate::http::serve(addr, std::sync::Arc::clone(&self.life.metrics), hosts) {
            Ok((feed, bound)) => {
                log::info!("status page at http://{bound}/ (metrics at /metrics)");
                if !bound.ip().is_loopback() {
                    log::warn!(
                        "the status page and metrics at {bound} are open to anyone who can \
                         reach it: the queue, task and user names, without a login; bind \
                         127.0.0.1 and put a proxy that asks for one in front"
                    );
                }
                // What ended before this daemon started can be looked up too.
                let before: Vec<Ending> = self
                    .life
                    .ended
                    .iter()
                    .rev()
                    .take(crate::lifecycle::ENDINGS_KEPT)
                    .map(|(state, name)| Ending {
                        name: name.clone(),
                        state,
                        user: None,
                        at: None,
                        why: None,
                    })
                    .collect();
                for ending in before.into_iter().rev() {
                    self.life.endings.push(ending);
                }
                self.feed = Some(feed);
            }
            Err(e) => log::error!(
                "cannot serve the status page at {addr}: {e}; the daemon goes on without it"
            ),
        }
    }

    /// Tasks taken in this turn that were launched by its end: the
    /// daemon's latency from claim to launch.
    fn note_dispatches(&mut self) {
        let took = self.turn_started.elapsed().as_secs_f64();
        for seq in self.fresh.drain(..) {
            let running = self
                .life
                .tasks
                .get(&seq)
                .is_some_and(|t| t.state == State::Running);
            if running {
                self.life.metrics.dispatched(took);
            }
        }
    }

    /// How long an asked-for rescan must still wait.
    fn rescan_wait(&self) -> Duration {
        self.last_rescan.map_or(Duration::ZERO, |(at, took)| {
            rescan_spacing(took).saturating_sub(at.elapsed())
        })
    }

    /// Closings and intake whose retry is due, and a rescan asked for
    /// once its spacing has passed.
    fn retry_due(&mut self) {
        if self.rescan_due && self.rescan_wait().is_zero() {
            self.rescan();
        }
        self.with_world(|life, now, world| life.retry_due(now, world));
        let now = self.now();
        if !self.intake_retry.due(now) {
            // The entries due, by name: not a rescan, which lists all of
            // `pending/` (a user whose drops wait on their junk limit has
            // one due every few milliseconds).
            let (names, odd): (Vec<_>, Vec<_>) = self
                .entry_retry
                .due_keys(now)
                .into_iter()
                .map(OsString::into_string)
                .partition(Result::is_ok);
            if !names.is_empty() || !odd.is_empty() {
                self.take_entries(
                    names.into_iter().flatten().collect(),
                    odd.into_iter().filter_map(Result::err).collect(),
                );
                // What was taken failed again (a later retry) or went;
                // what was set aside waits by another clock. Still due, it
                // would be retried at every turn.
                self.entry_retry.forget_due(now);
            }
        }
        if self.intake_retry.due(now) {
            self.rescan();
            // A failure during the rescan has set a new, later retry; a
            // retry still due means nothing failed this time.
            if self.intake_retry.due(now) && self.intake_retry.succeeded() {
                log::info!("pending/ is taken in again");
            }
        }
    }

    /// SIGHUP: re-reads the configuration file and applies what changed.
    fn reload(&mut self) {
        let config = match Config::load(self.config_path.as_deref()) {
            Ok(config) => config,
            Err(e) => {
                log::error!("reload failed, keeping the running configuration: {e}");
                return;
            }
        };
        let changed: Vec<String> = crate::config::changes(&self.config.values(), &config.values())
            .iter()
            .map(|change| {
                let section = change.key.split('.').next().unwrap_or_default();
                match section {
                    "gpu" | "http" => format!("{change} (applies when the daemon next starts)"),
                    "simulate" => format!("{change} (not used by the daemon)"),
                    _ => change.to_string(),
                }
            })
            .collect();
        if self.config.estimate != config.estimate {
            self.chain = Chain::new(&config.estimate.for_spool(self.spool.root()));
        }
        if config.daemon.spool != self.config.daemon.spool {
            log::warn!("reload: daemon.spool changed; a running daemon keeps its spool");
        }
        if config.daemon.job_cgroups != self.config.daemon.job_cgroups {
            log::warn!("reload: daemon.job_cgroups changed; it takes effect at the next start");
        }
        self.life.core.set_rules(config.rules());
        self.life.kept.cap = config.queue.user_max_ended_mib.saturating_mul(1 << 20);
        self.sample_interval_ms
            .store(interval_ms(&config), Ordering::Relaxed);
        self.gpu_log.set_limits(
            config.daemon.gpu_log_max_mib * 1024 * 1024,
            config.daemon.gpu_log_keep,
        );
        self.config = config;
        if changed.is_empty() {
            log::info!("configuration reloaded: nothing changed");
        } else {
            log::info!("configuration reloaded: {}", changed.join("; "));
        }
    }

    /// The status file every second; the GPU log's rows every metrics
    /// interval (once per reading: a slow monitor gives fewer rows, never
    /// the same reading twice).
    fn housekeeping(&mut self) {
        if self.status_written.elapsed() >= Duration::from_secs(1) {
            self.write_status();
            self.prune_ended();
            self.place_stranded();
        }
        let every = self.config.daemon.metrics_interval_s.duration();
        if self.metrics_written.elapsed() >= every && self.readings_at > self.gpu_logged_at {
            self.metrics_written = Instant::now();
            self.gpu_logged_at = self.readings_at;
            self.log_gpus();
        }
    }

    /// Places the claims the start could not (see [`Daemon::stranded`]).
    fn place_stranded(&mut self) {
        let stranded = std::mem::take(&mut self.stranded);
        for entry in stranded {
            match self.spool.finish_claim(&entry) {
                Ok(Some((name, state))) => {
                    log::info!("{name}: finished a claim interrupted by a crash, at last");
                    match state {
                        State::Pending => self.take(name, state),
                        _ => self.life.ended.insert(state, name),
                    }
                }
                Ok(None) => {}
                Err(_) => self.stranded.push(entry),
            }
        }
    }

    /// Archives a few tasks that ended more than `daemon.retention_days`
    /// ago (see [`crate::spool::archive`]): a pass over `done/` and
    /// `failed/` a few tasks a second, so the loop never waits on it.
    fn prune_ended(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let days = self.config.daemon.retention_days;
        if days <= 0.0 {
            return;
        }
        let cutoff = unix_now() - days * 86_400.0;
        let batch = self.life.ended.after(self.prune_cursor, PRUNE_PER_TURN);
        if batch.len() < PRUNE_PER_TURN {
            self.prune_cursor = 0;
        }
        for (state, name) in batch {
            self.prune_cursor = self.prune_cursor.max(name.seq());
            let dir = self.spool.task_dir(state, &name);
            // The move into done/ or failed/ set the directory's ctime: a
            // task that changed since is younger than that.
            let landed = std::fs::symlink_metadata(&dir).map_or(f64::MAX, |m| m.ctime() as f64);
            if landed >= cutoff {
                continue;
            }
            let ended_at = self
                .spool
                .load_record(state, &name)
                .ok()
                .and_then(|r| r.outcome.map(|o| o.at));
            if ended_at.is_some_and(|at| at >= cutoff) {
                continue;
            }
            let runs = crate::supervisor::runs_of(&dir);
            match self.spool.archive(state, &name, runs) {
                Ok(()) => {
                    log::info!("{name}: archived from {state}/ after {days} days");
                    self.life.ended.remove(name.seq());
                    self.life.kept.forget(name.seq());
                    self.ended_owners.borrow_mut().remove(&name.seq());
                }
                Err(e) => log::warn!("{name}: cannot archive it: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rescans_take_at_most_a_tenth_of_the_loop_however_long_a_listing_takes() {
        assert_eq!(rescan_spacing(Duration::ZERO), Duration::from_secs(1));
        for took in [0.05, 0.3, 2.0, 40.0] {
            let took = Duration::from_secs_f64(took);
            let spacing = rescan_spacing(took);
            assert!(spacing >= Duration::from_secs(1) && took <= spacing / 10);
        }
    }
}
