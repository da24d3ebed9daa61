//! Starting the daemon: the spool and its lock, the GPUs, MPS, the state
//! rebuilt from the spool, and the threads that feed the loop (the spool's
//! watch, the GPU monitor, signals, the trash, the submission socket, the
//! status page).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{Daemon, Msg, Options, adoptions, interval_ms, listener, loose, monitor, watch};
use crate::config::Config;
use crate::estimate::Chain;
use crate::gpu::log::RotatingLog;
use crate::lifecycle::{Backoff, Backoffs, Lifecycle};
use crate::mps::Mps;
use crate::nursery::{Report, Supervisors};
use crate::sched::Scheduler;
use crate::spool::{Spool, State};
use crate::supervisor::program::Program;

/// Runs the daemon until SIGTERM or SIGINT.
pub fn run(options: Options) -> Result<()> {
    let spool = Spool::new(&options.spool);
    spool.create()?;
    let http = options.http;
    let lock = spool.lock()?;
    // Before anything in pending/ or cancel/ is looked at.
    super::mounts::guard(super::mounts::guarded(&spool)).context("cannot watch the mount table")?;
    let mut backend = options.backend;
    let gpus = backend.inventory().to_vec();
    let backend_name = backend.describe();
    let backend_env = backend.job_env();
    let readings = backend.sample();
    for gpu in &gpus {
        log::info!("{gpu}");
    }
    let (tx, rx) = mpsc::channel();
    let backlog = Arc::new(watch::Backlog::default());
    let _watcher = watch::watch(
        &spool.dir(State::Pending),
        &spool.cancel_dir(),
        tx.clone(),
        Arc::clone(&backlog),
    )
    .context("cannot watch the spool")?;
    let mut config = options.config;
    let interval_ms = Arc::new(AtomicU64::new(interval_ms(&config)));
    let sizes: Vec<u64> = gpus.iter().map(|g| g.total_mib).collect();
    let chain = Chain::new(&config.estimate.for_spool(spool.root()));
    let mps = match config.mps.enabled {
        true => {
            // MIG instances are not MPS's here: see `Daemon::mps_env`.
            let uuids: Vec<String> = gpus
                .iter()
                .filter(|g| g.mig.is_none())
                .map(|g| g.uuid.clone())
                .collect();
            let saved = spool.root().join(crate::mps::SAVED_MODES);
            match Mps::start(&config.mps, &saved, &uuids) {
                Ok(mps) => Some(mps),
                // Simulated GPUs run fine without MPS: a configuration
                // made for the real server must not stop a try-out.
                Err(e) if backend.simulated() => {
                    log::warn!(
                        "cannot start NVIDIA MPS ({e}); simulated GPUs run without it, \
                         as if mps.enabled = false"
                    );
                    config.mps.enabled = false;
                    None
                }
                Err(e) => return Err(anyhow::Error::new(e).context("cannot start NVIDIA MPS")),
            }
        }
        false => None,
    };
    let mut core = Scheduler::new(config.rules(), &sizes);
    for gpu in gpus.iter().filter(|g| g.mig.is_some()) {
        core.set_mig_instance(gpu.index);
    }
    let gpu_log = RotatingLog::new(
        spool.root(),
        config.daemon.gpu_log_max_mib * 1024 * 1024,
        config.daemon.gpu_log_keep,
    );
    let spool_root = spool.root().to_owned();
    let job_cgroup = job_cgroup(&config, &spool_root);
    let mut daemon = Daemon {
        lock_id: lock.id(),
        life: Lifecycle::new(core, nix::unistd::geteuid().as_raw()),
        chain,
        spool,
        config,
        config_path: options.config_path,
        origin: Instant::now(),
        prune_cursor: 0,
        accounts: HashMap::new(),
        job_cgroup,
        gpus,
        backend_name,
        backend_env,
        readings: Vec::new(),
        readings_at: 0.0,
        process_tasks: HashMap::new(),
        gpu_log,
        gpu_logged_at: 0.0,
        gpu_log_failing: false,
        supervisors: Supervisors::new(supervisor_program()?, {
            let tx = tx.clone();
            move |report| {
                let _ = tx.send(match report {
                    Report::Forked { seq, run, pid } => Msg::Forked(seq, run, pid),
                    Report::Ended { seq, run } => Msg::Reaped(seq, run),
                    Report::Gone { nursery } => Msg::NurseryGone(nursery),
                });
            }
        }),
        tx: tx.clone(),
        unfinished: Default::default(),
        loose: loose::Loose::default(),
        arrivals: Vec::new(),
        cancel_due: false,
        sample_interval_ms: Arc::clone(&interval_ms),
        status_written: Instant::now(),
        status_wrote: Instant::now(),
        receipt_due: false,
        answers: Vec::new(),
        stranded: Vec::new(),
        status_took: Duration::ZERO,
        handed: Vec::new(),
        status_failing: false,
        unflushed: Vec::new(),
        metrics_written: Instant::now(),
        polled: Duration::ZERO,
        hush: Default::default(),
        junk_drops: crate::lifecycle::PerMinute::new(
            crate::lifecycle::JUNK_PER_MINUTE,
            "drops refused",
            "their drops wait in pending/",
        ),
        barred: Default::default(),
        pending_listed: Default::default(),
        ended_owners: Default::default(),
        backstop: Default::default(),
        notifications: Default::default(),
        gpu_errors: BTreeMap::new(),
        mps,
        intake_retry: Backoff::default(),
        entry_retry: Backoffs::default(),
        adopted: adoptions::Adoptions::default(),
        feed: None,
        turn_started: Instant::now(),
        fresh: Vec::new(),
        restored: false,
        backlog,
        rescan_due: false,
        last_rescan: None,
    };
    daemon.life.kept.cap = daemon
        .config
        .queue
        .user_max_ended_mib
        .saturating_mul(1 << 20);
    daemon.on_readings(readings);
    daemon.restore()?;
    // Listened on only once the spool is restored: a submission's number
    // comes after every number a crash left in staging/.
    let socket = daemon.spool.socket_path();
    if let Err(e) = listener::listen(daemon.spool.clone(), tx.clone(), daemon.barred.clone()) {
        log::warn!(
            "cannot listen on {} ({e}); submissions come by pending/ alone",
            socket.display()
        );
    }
    // Requests left while no daemon ran act before anything is placed: a
    // hold left for a waiting task holds it. All of them, not the first
    // 256 the loop takes a turn: a user who left thousands of junk names
    // in cancel/ pushed another's hold past the first placement. Within
    // a bound of time, as junk by the million would hold the start.
    let draining = Instant::now();
    daemon.cancel_requests();
    while daemon.cancel_due && draining.elapsed() < START_REQUESTS_TIME {
        daemon.cancel_due = false;
        daemon.cancel_requests();
    }
    signals(tx.clone())?;
    empty_trash(daemon.spool.clone())?;
    if let Some(addr) = http {
        daemon.serve_http(addr);
    }
    // Tasks taken in by the restore waited for this daemon: not its
    // dispatch latency.
    daemon.fresh.clear();
    daemon.restored = true;
    monitor::spawn(backend, interval_ms, tx);
    log::info!(
        "serving {} with {} ({} tasks waiting, {} running)",
        daemon.spool.root().display(),
        daemon.backend_name,
        daemon.life.core.queued().0 + daemon.life.core.queued().1,
        daemon
            .life
            .tasks
            .values()
            .filter(|t| t.state == State::Running)
            .count()
    );
    daemon.step();
    // Said at once, not a second later: a submitter whose daemon died
    // before it answered learns from this status what became of its jobs.
    daemon.write_status();
    daemon.serve(&rx);
    // New submitters find no socket and take the file path; those already
    // connected are told nothing was taken.
    let _ = std::fs::remove_file(&socket);
    daemon.place_handed(&rx);
    if let Some(dir) = &daemon.job_cgroup {
        // Gone only when no job is left in it.
        crate::cgroup::remove_parent(dir);
    }
    drop(lock);
    Ok(())
}

/// Deletes what the loop discards (users' trees among it, which may be
/// large or deep) on a thread of its own, so the loop never waits on it.
fn empty_trash(spool: Spool) -> Result<()> {
    std::thread::Builder::new()
        .name("trash".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                match spool.empty_trash(None) {
                    Ok(_) => failing = false,
                    Err(e) if !failing => {
                        log::warn!("cannot empty staging/'s trash: {e}");
                        failing = true;
                    }
                    Err(_) => {}
                }
                std::thread::sleep(TRASH_INTERVAL);
            }
        })?;
    Ok(())
}

/// How often the trash is emptied.
const TRASH_INTERVAL: Duration = Duration::from_secs(1);

/// How long a start may spend on the requests left in `cancel/` before it
/// places anything (about 100,000 names, most of them junk, removed).
const START_REQUESTS_TIME: Duration = Duration::from_secs(2);

/// Forwards SIGTERM, SIGINT, SIGHUP and SIGUSR1 to the loop.
fn signals(tx: Sender<Msg>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if tx.send(Msg::Signal(signal)).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}

/// The cgroup the spool's runs are made under, where `daemon.job_cgroups`
/// allows one and cgroup v2 is writable; says at start which it is.
fn job_cgroup(config: &Config, spool_root: &std::path::Path) -> Option<PathBuf> {
    let parent = match config.daemon.job_cgroups {
        true => crate::cgroup::jobs_parent(spool_root),
        false => Err("daemon.job_cgroups is false".to_string()),
    };
    match parent {
        Ok(dir) => {
            log::info!("jobs run in cgroups under {}", dir.display());
            let missing = crate::cgroup::missing_controllers(&dir);
            if !missing.is_empty() {
                log::warn!(
                    "no {} controller for carma's cgroups: `cpus:` and `host_memory:` are \
                     measured, not enforced, nor is queue.max_processes (run the daemon under \
                     systemd with Delegate=yes)",
                    missing.join(" or ")
                );
            }
            Some(dir)
        }
        Err(why) => {
            log::warn!(
                "jobs run without cgroups: {why}; a job's processes end with it, but one \
                 that outlives a killed supervisor may be missed, and cpus: and \
                 host_memory: are measured, not enforced, nor is queue.max_processes"
            );
            None
        }
    }
}

/// The program that supervises runs ([`Program::find`]), said in the log.
fn supervisor_program() -> Result<Program> {
    let carma = std::env::current_exe().context("cannot find the carma binary")?;
    let (program, passed_over) = Program::find(&carma);
    match passed_over {
        None => log::info!("runs are supervised by {}", program.exe().display()),
        Some(why) => log::info!(
            "runs are supervised by {} supervise ({why})",
            program.exe().display()
        ),
    }
    Ok(program)
}
