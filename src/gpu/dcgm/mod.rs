//! DCGM's profiling fields through a long-running `dcgmi dmon`, as the
//! research prototype read them.
//!
//! On GPUs before Hopper, NVML has no SM activity: only DCGM's profiling
//! fields (1002 SM active, 1003 SM occupancy, 1005 DRAM active) measure
//! what the placement cap and the interference gate are about. carma runs
//! `dcgmi dmon -e 1002,1003,1005 -d <ms>` rather than loading
//! `libdcgm.so`: the command-line tool's output has been stable across DCGM
//! versions, while the library's structures are versioned C ABI that a
//! mismatch would turn into memory corruption inside the daemon; and a
//! misbehaving child can be killed, a misbehaving library cannot.
//!
//! One thread per daemon runs the child and reads its output (stdout and
//! stderr through one pipe), keeping each GPU's latest values with their
//! time. The monitor asks for [`Dmon::fresh`] values each sample: a value
//! older than [`Dmon::fresh_for`] is not used (the GPU falls back to the
//! next source), and a child that has printed nothing for that long is
//! killed. A child that cannot start, exits, or is killed is started again
//! after a delay that doubles up to a minute, and each kind of trouble is
//! logged once per outage. DCGM numbers GPUs as NVML does (by PCI bus
//! order), so `GPU n` is carma's GPU n.

mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

pub use parse::Fields;
use parse::Line;

/// The first delay before starting `dcgmi` again; it doubles up to
/// [`LONGEST_DELAY`] while the child keeps failing.
const FIRST_DELAY: Duration = Duration::from_secs(1);
const LONGEST_DELAY: Duration = Duration::from_secs(60);

/// Readings older than this many dmon intervals are stale (plus a second
/// of slack, for the monitor's and dmon's clocks not being in step).
const FRESH_INTERVALS: u32 = 3;

/// Distinct problems remembered per outage, so a child printing a new
/// error every line cannot grow the set (or the log) without bound.
const SAID_MAX: usize = 16;

/// Characters of an unexpected line that the log shows.
const LINE_SHOWN: usize = 200;

/// A running `dcgmi dmon` and its latest values.
pub struct Dmon {
    shared: Arc<Mutex<Shared>>,
    fresh_for: Duration,
}

/// What the reader thread and the monitor share.
struct Shared {
    /// Per GPU, the latest values and when they were read.
    latest: BTreeMap<usize, (Instant, Fields)>,
    /// The child while it runs (until its reader takes it to reap it, so a
    /// kill never reaches a reused pid).
    child: Option<Child>,
    /// When the child last printed a line.
    last_output: Instant,
    /// Problems logged during the current outage.
    said: BTreeSet<String>,
}

impl Shared {
    /// Logs `message` at warning level once per outage.
    fn say(&mut self, message: String) {
        if self.said.len() < SAID_MAX && self.said.insert(message.clone()) {
            log::warn!("{message}");
        }
    }

    /// Kills the child's process group (it runs in its own), if it runs.
    fn kill(&mut self) {
        if let Some(child) = &self.child {
            let group = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
            // Already gone is fine: the reader reaps it.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

impl Dmon {
    /// Starts `program dmon` reading every `interval`, on a thread of its
    /// own. Never fails: a missing `dcgmi` is logged and tried again.
    pub fn start(program: &Path, interval: Duration) -> Dmon {
        let shared = Arc::new(Mutex::new(Shared {
            latest: BTreeMap::new(),
            child: None,
            last_output: Instant::now(),
            said: BTreeSet::new(),
        }));
        let interval_ms = interval.as_millis().clamp(100, u128::from(u32::MAX)) as u64;
        let run = Runner {
            shared: Arc::clone(&shared),
            program: program.to_owned(),
            interval_ms,
        };
        if let Err(e) = std::thread::Builder::new()
            .name("dcgmi".into())
            .spawn(move || run.serve())
        {
            log::error!("cannot start the DCGM reader thread: {e}; DCGM is not used");
        }
        Dmon {
            shared,
            fresh_for: Duration::from_millis(interval_ms) * FRESH_INTERVALS
                + Duration::from_secs(1),
        }
    }

    /// How old a value may be and still be used.
    pub fn fresh_for(&self) -> Duration {
        self.fresh_for
    }

    /// The values of every GPU read within [`Dmon::fresh_for`] of `now`.
    /// Kills a child that has printed nothing for that long: a hung
    /// `dcgmi` is started again rather than waited for.
    pub fn fresh(&self, now: Instant) -> BTreeMap<usize, Fields> {
        let mut shared = lock(&self.shared);
        let silent = now.saturating_duration_since(shared.last_output);
        if shared.child.is_some() && silent > self.fresh_for {
            shared.say(format!(
                "dcgmi dmon has printed nothing for {:.1} s; killed, to be started again",
                silent.as_secs_f64()
            ));
            shared.kill();
        }
        shared
            .latest
            .iter()
            .filter(|(_, (at, _))| now.saturating_duration_since(*at) <= self.fresh_for)
            .map(|(&gpu, &(_, fields))| (gpu, fields))
            .collect()
    }
}

impl Drop for Dmon {
    /// Stops the child; its reader thread then sees that nobody listens and
    /// ends.
    fn drop(&mut self) {
        lock(&self.shared).kill();
    }
}

/// The shared state, even if a thread panicked while holding it (nothing
/// here leaves it half-changed).
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The reader thread's side.
struct Runner {
    shared: Arc<Mutex<Shared>>,
    program: PathBuf,
    interval_ms: u64,
}

impl Runner {
    /// Runs the child again and again, until the [`Dmon`] is dropped.
    fn serve(self) {
        let mut delay = FIRST_DELAY;
        while Arc::strong_count(&self.shared) > 1 {
            match self.spawn() {
                Ok(output) => {
                    if self.read(output) {
                        delay = FIRST_DELAY;
                    }
                    self.reap();
                }
                Err(e) => lock(&self.shared).say(format!(
                    "cannot run {} dmon: {e}; SM metrics come from NVML until it runs \
                     (tried again with backoff)",
                    self.program.display()
                )),
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(LONGEST_DELAY);
        }
    }

    /// Starts the child in a process group of its own (so a kill reaches
    /// whatever it started), its stdout and stderr on one pipe, which is
    /// returned.
    fn spawn(&self) -> std::io::Result<OwnedFd> {
        let (read, write) = nix::unistd::pipe()?;
        let child = Command::new(&self.program)
            .args(["dmon", "-e", parse::FIELDS, "-d"])
            .arg(self.interval_ms.to_string())
            .stdin(Stdio::null())
            .stdout(write.try_clone()?)
            .stderr(write)
            .process_group(0)
            .spawn()?;
        let mut shared = lock(&self.shared);
        shared.child = Some(child);
        shared.last_output = Instant::now();
        Ok(read)
    }

    /// Reads the child's output until it closes it; true if any GPU's
    /// values came (the child worked, whatever happens next).
    fn read(&self, output: OwnedFd) -> bool {
        let mut worked = false;
        for bytes in BufReader::new(std::fs::File::from(output)).split(b'\n') {
            let Ok(bytes) = bytes else { break };
            let text = String::from_utf8_lossy(&bytes);
            let now = Instant::now();
            let mut shared = lock(&self.shared);
            shared.last_output = now;
            match parse::line(&text) {
                Line::Gpu { gpu, fields } => {
                    if !worked && !shared.said.is_empty() {
                        log::info!("dcgmi dmon: reading again");
                        shared.said.clear();
                    }
                    worked = true;
                    shared.latest.insert(gpu, (now, fields));
                }
                Line::Ignored => {}
                Line::Unexpected => shared.say(format!(
                    "dcgmi dmon printed {:?}; its lines without GPU values are ignored",
                    text.trim().chars().take(LINE_SHOWN).collect::<String>()
                )),
            }
        }
        worked
    }

    /// Kills (if it still runs) and waits for the child, saying how it
    /// ended.
    fn reap(&self) {
        let mut shared = lock(&self.shared);
        shared.kill();
        let Some(mut child) = shared.child.take() else {
            return;
        };
        drop(shared);
        let how = match child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => format!("cannot be waited for: {e}"),
        };
        if Arc::strong_count(&self.shared) > 1 {
            lock(&self.shared).say(format!(
                "dcgmi dmon ended ({how}); started again with backoff"
            ));
        }
    }
}

#[cfg(test)]
mod tests;
