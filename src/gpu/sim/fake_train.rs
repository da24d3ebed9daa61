//! A fake training job for the simulated GPUs (`carma fake-train`).
//!
//! It behaves as the daemon sees a real one: it starts, allocates its
//! memory after a warm-up (`ramp`), prints a progress line a second, runs
//! for a wall-clock time and exits 0; or it finds too little memory and
//! dies with PyTorch's OOM traceback and exit status 1. Its memory is a
//! claim in the simulated GPUs' state, held under its pid and start time,
//! so it counts until the job releases it or the backend sees the job gone.
//!
//! Signal handling stays with the caller (handlers are process-wide): it
//! passes an atomic that a handler sets to the signal's number, and the job
//! releases its claim and reports the signal.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;

use super::state::{Refusal, StateDir};
use super::{STATE_DIR_VAR, SimError, oom};
use crate::procfs::ProcessId;

/// What to pretend to train.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeTrain {
    /// Memory to claim on every visible GPU, MiB.
    pub mem_mib: u64,
    /// Total wall-clock run time, warm-up included, seconds.
    pub secs: f64,
    /// SM activity to claim on every visible GPU, 0..1.
    pub smact: f64,
    /// Seconds after the start at which the memory is claimed: a real job
    /// allocates only after loading its data and model.
    pub ramp_secs: f64,
}

/// Where the job runs, as its environment says.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The simulated GPUs' state directory (`CARMA_SIMGPU`).
    pub state_dir: PathBuf,
    /// The GPUs the job sees (`CUDA_VISIBLE_DEVICES`: indices of whole
    /// GPUs, UUIDs of MIG instances), in the order CUDA numbers them.
    pub visible: Vec<String>,
}

/// How a job that started ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Ran its time and released its memory.
    Finished,
    /// Found too little memory, printed the OOM traceback and holds nothing.
    OutOfMemory,
    /// Stopped by this signal number; holds nothing.
    Stopped(usize),
}

/// Why a job could not start or go on: its setup, not its memory.
#[derive(Debug, Error)]
pub enum FakeTrainError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error("cannot write progress: {0}")]
    Output(std::io::Error),
}

impl Outcome {
    /// The exit status a shell would report: 0, 1 for a Python exception,
    /// 128 + the signal number for a job stopped by a signal.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Finished => 0,
            Outcome::OutOfMemory => 1,
            Outcome::Stopped(signal) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        }
    }
}

impl Placement {
    /// Reads the placement from the values of `CARMA_SIMGPU` and
    /// `CUDA_VISIBLE_DEVICES` (comma-separated GPU indices or MIG UUIDs).
    pub fn from_env(
        state_dir: Option<OsString>,
        visible_devices: Option<&str>,
    ) -> Result<Placement, FakeTrainError> {
        let state_dir = state_dir
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| {
                FakeTrainError::Usage(format!(
                    "{STATE_DIR_VAR} is not set: fake jobs run on simulated GPUs, \
                     under `carma daemon --simulate-gpus`"
                ))
            })?;
        let visible_devices = visible_devices.map(str::trim).unwrap_or("");
        if visible_devices.is_empty() {
            return Err(FakeTrainError::Usage(
                "no visible GPU: CUDA_VISIBLE_DEVICES is unset or empty".into(),
            ));
        }
        let mut visible = Vec::new();
        for part in visible_devices.split(',') {
            let device = part.trim();
            if device.is_empty() {
                return Err(FakeTrainError::Usage(format!(
                    "CUDA_VISIBLE_DEVICES={visible_devices}: an empty entry is not a GPU"
                )));
            }
            if visible.iter().any(|seen| seen == device) {
                return Err(FakeTrainError::Usage(format!(
                    "CUDA_VISIBLE_DEVICES={visible_devices} names GPU {device} twice"
                )));
            }
            visible.push(device.to_owned());
        }
        Ok(Placement { state_dir, visible })
    }
}

impl FakeTrain {
    fn validate(&self) -> Result<(), FakeTrainError> {
        let usage = |message: &str| Err(FakeTrainError::Usage(message.to_owned()));
        if !(self.secs.is_finite() && self.secs >= 0.0) {
            return usage("--secs must be a number of seconds, 0 or more");
        }
        if !(0.0..=1.0).contains(&self.smact) {
            return usage("--smact must be between 0 and 1");
        }
        if !(self.ramp_secs.is_finite() && (0.0..=self.secs).contains(&self.ramp_secs)) {
            return usage("--ramp must be between 0 and --secs");
        }
        Ok(())
    }

    /// Runs the job on `placement`: progress lines go to `out`, the OOM
    /// traceback to `err`. `stop` is the number of a signal that asks the
    /// job to end, 0 while none has come; it is checked every few
    /// milliseconds.
    ///
    /// A failure to release the claim at the end is reported on `err` but
    /// does not change the outcome: the backend drops the claim of an
    /// exited job at its next sample anyway.
    pub fn run(
        &self,
        placement: &Placement,
        stop: &AtomicUsize,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Outcome, FakeTrainError> {
        self.validate()?;
        let me = ProcessId::current().ok_or_else(|| {
            FakeTrainError::Usage("cannot read /proc/self/stat: is /proc mounted?".into())
        })?;
        let state = StateDir::existing(&placement.state_dir);
        // Fail before the warm-up, not after it, when the GPUs are not there.
        let units = {
            let current = state.lock()?.read()?;
            placement
                .visible
                .iter()
                .map(|device| {
                    current
                        .find(device)
                        .ok_or_else(|| no_such_gpu(device, current.gpus.len()))
                })
                .collect::<Result<Vec<usize>, _>>()?
        };

        let start = Instant::now();
        let epochs = (self.secs.ceil() as u64).max(1);
        let mut printed = 0;
        let mut claimed = false;
        // Every way out of the loop, errors included, passes the release.
        let mut train = || -> Result<Outcome, FakeTrainError> {
            loop {
                let signal = stop.load(Ordering::SeqCst);
                if signal != 0 {
                    return Ok(Outcome::Stopped(signal));
                }
                let elapsed = start.elapsed().as_secs_f64();
                if !claimed && elapsed >= self.ramp_secs {
                    if let Some(outcome) = self.claim(&state, &units, me, err)? {
                        return Ok(outcome);
                    }
                    claimed = true;
                }
                let due = if elapsed >= self.secs {
                    epochs
                } else {
                    (elapsed as u64).min(epochs)
                };
                while printed < due {
                    printed += 1;
                    writeln!(out, "epoch {printed}/{epochs} loss {:.3}", loss(printed))
                        .and_then(|()| out.flush())
                        .map_err(FakeTrainError::Output)?;
                }
                if elapsed >= self.secs {
                    return Ok(Outcome::Finished);
                }
                let next = [self.ramp_secs, (printed + 1) as f64, self.secs]
                    .into_iter()
                    .filter(|&t| t > elapsed)
                    .fold(f64::INFINITY, f64::min);
                std::thread::sleep(Duration::from_secs_f64((next - elapsed).clamp(0.0, 0.02)));
            }
        };
        let outcome = train();
        if claimed
            && let Err(e) = state.lock().and_then(|locked| {
                let mut current = locked.read()?;
                current.release(me);
                locked.write(&current)
            })
        {
            // Best effort, see above; a broken stderr leaves nothing to tell.
            let _ = writeln!(err, "carma fake-train: cannot release GPU memory: {e}");
        }
        outcome
    }

    /// Claims the memory on every visible GPU, or prints the OOM traceback
    /// and returns the outcome when it does not fit.
    fn claim(
        &self,
        state: &StateDir,
        units: &[usize],
        me: ProcessId,
        err: &mut dyn Write,
    ) -> Result<Option<Outcome>, FakeTrainError> {
        let locked = state.lock()?;
        let mut current = locked.read()?;
        // A real driver frees a process's memory as it dies; here the claims
        // of the dead are dropped when someone looks. A job killed with its
        // supervisor must not make the next one on its GPU crash.
        current.prune();
        match current.claim(units, me, self.mem_mib, self.smact) {
            Ok(()) => {
                locked.write(&current)?;
                Ok(None)
            }
            Err(Refusal::OutOfMemory { position, gpu }) => {
                drop(locked);
                err.write_all(oom::traceback(self.mem_mib, position, &gpu).as_bytes())
                    .and_then(|()| err.flush())
                    .map_err(FakeTrainError::Output)?;
                Ok(Some(Outcome::OutOfMemory))
            }
            Err(Refusal::NoSuchGpu { index, count }) => Err(no_such_gpu(&index.to_string(), count)),
        }
    }
}

fn no_such_gpu(device: &str, count: usize) -> FakeTrainError {
    FakeTrainError::Usage(format!(
        "CUDA_VISIBLE_DEVICES names GPU {device}, but the simulation has {count} GPU(s)"
    ))
}

/// A plausible falling loss curve, so logs look like training.
fn loss(epoch: u64) -> f64 {
    0.1 + 2.2 * 0.8_f64.powf(epoch as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::sim::state::State;

    const GIB: u64 = 1024;

    fn gpus(sizes: &[u64]) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::create(&tmp.path().join("simgpu")).unwrap();
        dir.lock().unwrap().write(&State::whole(sizes)).unwrap();
        let path = dir.path().to_owned();
        (tmp, path)
    }

    fn job(mem_mib: u64, secs: f64) -> FakeTrain {
        FakeTrain {
            mem_mib,
            secs,
            smact: 0.5,
            ramp_secs: 0.0,
        }
    }

    fn read(dir: &std::path::Path) -> State {
        StateDir::existing(dir).lock().unwrap().read().unwrap()
    }

    fn placement(dir: &std::path::Path, visible: &str) -> Placement {
        Placement::from_env(Some(dir.into()), Some(visible)).unwrap()
    }

    #[test]
    fn visible_devices_are_read_in_cuda_order() {
        let p = Placement::from_env(Some("/x".into()), Some(" 2, 0 ")).unwrap();
        assert_eq!(p.visible, ["2", "0"]);
        for bad in [None, Some(""), Some(" "), Some("1,1"), Some("0,")] {
            let err = Placement::from_env(Some("/x".into()), bad).unwrap_err();
            assert!(err.to_string().contains("CUDA_VISIBLE_DEVICES"), "{err}");
        }
        let err = Placement::from_env(None, Some("0")).unwrap_err();
        assert!(err.to_string().contains("CARMA_SIMGPU is not set"), "{err}");
    }

    #[test]
    fn a_short_job_prints_epochs_and_leaves_nothing_behind() {
        let (_tmp, dir) = gpus(&[40 * GIB]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let stop = AtomicUsize::new(0);
        let outcome = job(GIB, 0.05)
            .run(&placement(&dir, "0"), &stop, &mut out, &mut err)
            .unwrap();
        assert_eq!(outcome, Outcome::Finished);
        assert_eq!(String::from_utf8(out).unwrap(), "epoch 1/1 loss 1.860\n");
        assert!(err.is_empty());
        assert!(read(&dir).gpus[0].claims.is_empty());
    }

    /// stdout whose reader is gone, as when a daemon's log pipe breaks.
    struct BrokenPipe;

    impl Write for BrokenPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_job_that_cannot_print_still_releases_its_memory() {
        let (_tmp, dir) = gpus(&[40 * GIB]);
        let err = job(GIB, 0.05)
            .run(
                &placement(&dir, "0"),
                &AtomicUsize::new(0),
                &mut BrokenPipe,
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(matches!(err, FakeTrainError::Output(_)), "{err}");
        assert!(read(&dir).gpus[0].claims.is_empty());
    }

    #[test]
    fn a_stop_signal_ends_the_job_at_once() {
        let (_tmp, dir) = gpus(&[40 * GIB]);
        let stop = AtomicUsize::new(15);
        let started = Instant::now();
        let outcome = job(GIB, 30.0)
            .run(
                &placement(&dir, "0"),
                &stop,
                &mut Vec::new(),
                &mut Vec::new(),
            )
            .unwrap();
        assert_eq!(outcome, Outcome::Stopped(15));
        assert_eq!(outcome.exit_code(), 143);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn too_little_memory_prints_the_traceback_and_claims_nothing() {
        let (_tmp, dir) = gpus(&[40 * GIB, 8 * GIB]);
        let mut err = Vec::new();
        let outcome = job(10 * GIB, 5.0)
            .run(
                &placement(&dir, "0,1"),
                &AtomicUsize::new(0),
                &mut Vec::new(),
                &mut err,
            )
            .unwrap();
        assert_eq!(outcome, Outcome::OutOfMemory);
        assert_eq!(outcome.exit_code(), 1);
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.contains("Tried to allocate 10.00 GiB. GPU 1 has a total capacity of 8.00 GiB"),
            "{err}"
        );
        assert!(read(&dir).gpus.iter().all(|gpu| gpu.claims.is_empty()));
    }

    #[test]
    fn a_gpu_beyond_the_simulation_is_a_setup_error() {
        let (_tmp, dir) = gpus(&[40 * GIB]);
        let err = job(GIB, 1.0)
            .run(
                &placement(&dir, "3"),
                &AtomicUsize::new(0),
                &mut Vec::new(),
                &mut Vec::new(),
            )
            .unwrap_err();
        assert!(err.to_string().contains("names GPU 3"), "{err}");
    }

    #[test]
    fn nonsense_options_are_refused_before_anything_runs() {
        let (_tmp, dir) = gpus(&[40 * GIB]);
        for bad in [
            FakeTrain {
                secs: -1.0,
                ..job(1, 1.0)
            },
            FakeTrain {
                smact: 1.5,
                ..job(1, 1.0)
            },
            FakeTrain {
                ramp_secs: 2.0,
                ..job(1, 1.0)
            },
        ] {
            let err = bad
                .run(
                    &placement(&dir, "0"),
                    &AtomicUsize::new(0),
                    &mut Vec::new(),
                    &mut Vec::new(),
                )
                .unwrap_err();
            assert!(matches!(err, FakeTrainError::Usage(_)), "{err}");
        }
    }
}
