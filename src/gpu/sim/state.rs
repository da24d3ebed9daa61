//! The simulated GPUs' shared state: one small JSON file that the backend
//! and every fake job read and change under one lock.
//!
//! Layout of the state directory (`<spool>/simgpu/`):
//!
//! - `lock`: empty; holding an exclusive `flock` on it is the right to read
//!   and change the state. A separate file, because the state file itself
//!   is replaced on every write and a lock on a replaced file guards nothing.
//! - `state.0.json` and `state.1.json`: per GPU (per unit: a whole GPU or a
//!   MIG instance) its name in `CUDA_VISIBLE_DEVICES`, its memory and the
//!   claims on it, with the write's generation. Writes alternate between
//!   the two and a read takes the newest whole one: a fake job killed while
//!   it writes (a cancellation's `cgroup.kill`) leaves a torn file, and the
//!   state as it was before that write stays in the other.
//!
//! The state is not durable (a lost file only loses claims of fake jobs), so
//! writes skip fsync; every reader and writer holds the lock, so no reader
//! sees a write under way.
//!
//! The directory is world-writable on purpose: the daemon may run as root
//! and launch jobs as their owners, and every owner's fake job must be able
//! to claim memory. Simulated GPUs are for tests and demos, not for machines
//! whose users must be kept apart.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fs2::FileExt;
use serde::{Deserialize, Serialize};

use super::SimError;
use crate::gpu::GpuInfo;
use crate::procfs::ProcessId;

/// The largest state file read: a few hundred bytes a claim.
const MAX_STATE_BYTES: u64 = 16 << 20;

/// Every GPU of the simulation and what is claimed on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// In index order.
    pub gpus: Vec<SimGpu>,
}

/// One simulated GPU (or MIG instance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimGpu {
    /// How `CUDA_VISIBLE_DEVICES` names it (see [`crate::gpu::GpuInfo`]);
    /// empty in a state written before MIG, which then no longer matches
    /// and is replaced.
    #[serde(default)]
    pub device: String,
    /// Memory, MiB.
    pub total_mib: u64,
    /// What the processes on this GPU hold, oldest first.
    pub claims: Vec<Claim>,
}

/// Memory and SM activity that one process holds on one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// The holder; a claim whose holder is gone is dropped at the next read.
    #[serde(flatten)]
    pub process: ProcessId,
    pub mib: u64,
    /// The holder's share of SM activity, 0..1.
    pub smact: f64,
}

/// Why a claim was refused; nothing was claimed anywhere.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// A GPU index beyond the simulation.
    NoSuchGpu { index: usize, count: usize },
    /// The GPU at position `position` of the requested list has too little
    /// free memory; `gpu` is how it stood.
    OutOfMemory { position: usize, gpu: SimGpu },
}

impl State {
    /// The units `inventory` with nothing claimed.
    pub fn new(inventory: &[GpuInfo]) -> State {
        State {
            gpus: inventory
                .iter()
                .map(|gpu| SimGpu {
                    device: gpu.device.clone(),
                    total_mib: gpu.total_mib,
                    claims: Vec::new(),
                })
                .collect(),
        }
    }

    /// Whole GPUs with these sizes (MiB), numbered from 0.
    #[cfg(test)]
    pub fn whole(sizes_mib: &[u64]) -> State {
        State {
            gpus: sizes_mib
                .iter()
                .enumerate()
                .map(|(index, &total_mib)| SimGpu {
                    device: index.to_string(),
                    total_mib,
                    claims: Vec::new(),
                })
                .collect(),
        }
    }

    /// Each unit's name and memory (MiB), in index order.
    pub fn layout(&self) -> Vec<(&str, u64)> {
        self.gpus
            .iter()
            .map(|gpu| (gpu.device.as_str(), gpu.total_mib))
            .collect()
    }

    /// The index of the unit `CUDA_VISIBLE_DEVICES` calls `device`.
    pub fn find(&self, device: &str) -> Option<usize> {
        self.gpus.iter().position(|gpu| gpu.device == device)
    }

    /// Drops the claims of processes that are gone (exited, killed, or
    /// their pid reused by another process). Returns whether any was.
    pub fn prune(&mut self) -> bool {
        let mut pruned = false;
        for gpu in &mut self.gpus {
            let before = gpu.claims.len();
            gpu.claims.retain(|claim| claim.process.is_alive());
            pruned |= gpu.claims.len() != before;
        }
        pruned
    }

    /// Claims `mib` and `smact` for `process` on every GPU in `gpus`, or on
    /// none of them: a multi-GPU job that gets only some of its GPUs is
    /// as dead as one that gets none, and must not hold the others.
    pub fn claim(
        &mut self,
        gpus: &[usize],
        process: ProcessId,
        mib: u64,
        smact: f64,
    ) -> Result<(), Refusal> {
        let count = self.gpus.len();
        for (position, &index) in gpus.iter().enumerate() {
            let gpu = self
                .gpus
                .get(index)
                .ok_or(Refusal::NoSuchGpu { index, count })?;
            if gpu.free_mib() < mib {
                return Err(Refusal::OutOfMemory {
                    position,
                    gpu: gpu.clone(),
                });
            }
        }
        for &index in gpus {
            self.gpus[index].claims.push(Claim {
                process,
                mib,
                smact,
            });
        }
        Ok(())
    }

    /// Drops every claim of `process`.
    pub fn release(&mut self, process: ProcessId) {
        for gpu in &mut self.gpus {
            gpu.claims.retain(|claim| claim.process != process);
        }
    }
}

impl SimGpu {
    /// Memory claimed, MiB.
    pub fn used_mib(&self) -> u64 {
        self.claims.iter().map(|claim| claim.mib).sum()
    }

    /// Memory not claimed, MiB.
    pub fn free_mib(&self) -> u64 {
        self.total_mib.saturating_sub(self.used_mib())
    }

    /// SM activity of all claims together; a GPU is at most fully busy.
    pub fn smact(&self) -> f64 {
        // A fold from +0.0: an empty f64 sum is -0.0, which prints as such.
        self.claims
            .iter()
            .fold(0.0, |sum, claim| sum + claim.smact)
            .min(1.0)
    }

    /// SM occupancy: the GPU's SM activity times [`OCCUPANCY_PER_SMACT`].
    pub fn occupancy(&self) -> f64 {
        (self.smact() * OCCUPANCY_PER_SMACT).min(1.0)
    }

    /// DRAM activity: the GPU's SM activity times [`DRAM_PER_SMACT`].
    pub fn dram(&self) -> f64 {
        (self.smact() * DRAM_PER_SMACT).min(1.0)
    }

    /// Temperature, °C: an A100's idle 30 °C, rising linearly to 75 °C at
    /// full SM activity (the simulation has no thermal inertia).
    pub fn temperature_c(&self) -> u32 {
        (30.0 + 45.0 * self.smact()).round() as u32
    }

    /// SM clock, MHz: an A100's idle clock without work, its boost clock
    /// with any.
    pub fn sm_clock_mhz(&self) -> u32 {
        if self.claims.is_empty() { 210 } else { 1410 }
    }
}

/// The simulation's SM occupancy per unit of SM activity. Training jobs
/// keep roughly half their warp slots filled while their SMs are active
/// (the prototype's DCGM logs: SMOCC about 0.3-0.6 at SMACT 0.6-1.0), so a
/// GPU that the SMACT cap (0.80) calls busy is also past the prototype's
/// occupancy threshold (0.45) at full activity, and the interference gate
/// has something to decide in simulation.
pub const OCCUPANCY_PER_SMACT: f64 = 0.55;

/// The simulation's DRAM activity per unit of SM activity, chosen like
/// [`OCCUPANCY_PER_SMACT`] (DRAMA about 0.2-0.5 in the same logs): a fully
/// active GPU is past the gate's DRAM threshold (0.40).
pub const DRAM_PER_SMACT: f64 = 0.45;

/// How long a reader waits for the lock before giving up. A holder keeps it
/// for microseconds; one that keeps it for seconds is stopped (SIGSTOP) or
/// stuck, and the daemon's monitor must not hang on it.
const LOCK_PATIENCE: Duration = Duration::from_secs(5);
const LOCK_FILE: &str = "lock";
/// The two files writes alternate between, by generation.
pub(super) const STATE_FILES: [&str; 2] = ["state.0.json", "state.1.json"];

/// A state file's content: the state and the write it came from.
#[derive(Deserialize)]
struct Stamped {
    generation: u64,
    #[serde(flatten)]
    state: State,
}

/// [`Stamped`], as written.
#[derive(Serialize)]
struct StampedRef<'a> {
    generation: u64,
    #[serde(flatten)]
    state: &'a State,
}

/// A state directory, created or found.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

/// The lock on a state directory; reading and writing need it. Dropping it
/// closes the lock file, which releases the lock.
pub struct Locked<'a> {
    dir: &'a StateDir,
    _lock: File,
}

impl StateDir {
    /// Creates `dir` and its lock file where missing, open to every user
    /// (see the module docs).
    pub fn create(dir: &Path) -> Result<StateDir, SimError> {
        let io = |source| SimError::Io {
            path: dir.to_owned(),
            source,
        };
        fs::create_dir_all(dir).map_err(io)?;
        let dir = dir.canonicalize().map_err(io)?;
        // Sticky, like /tmp: every job writes its claims here, nobody
        // removes or replaces another's.
        let mode = fs::metadata(&dir).map_err(io)?.permissions().mode();
        if mode & 0o1777 != 0o1777 {
            fs::set_permissions(&dir, Permissions::from_mode(0o1777)).map_err(io)?;
        }
        let lock = dir.join(LOCK_FILE);
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&lock)
            .map_err(|source| SimError::Io { path: lock, source })?;
        Ok(StateDir { dir })
    }

    /// A state directory someone else created.
    pub fn existing(dir: &Path) -> StateDir {
        StateDir {
            dir: dir.to_owned(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Waits for the lock, at most `LOCK_PATIENCE`.
    pub fn lock(&self) -> Result<Locked<'_>, SimError> {
        let path = self.dir.join(LOCK_FILE);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(SimError::Missing {
                    dir: self.dir.clone(),
                });
            }
            Err(source) => return Err(SimError::Io { path, source }),
        };
        let deadline = Instant::now() + LOCK_PATIENCE;
        loop {
            match file.try_lock_exclusive() {
                Ok(()) => {
                    return Ok(Locked {
                        dir: self,
                        _lock: file,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(SimError::Busy { path });
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(source) => return Err(SimError::Io { path, source }),
            }
        }
    }
}

impl Locked<'_> {
    /// The state as last written whole.
    pub fn read(&self) -> Result<State, SimError> {
        let (newest, corrupt) = self.slots()?;
        match (newest, corrupt) {
            (Some(stamped), _) => Ok(stamped.state),
            (None, Some(corrupt)) => Err(corrupt),
            (None, None) => Err(SimError::Missing {
                dir: self.dir.dir.clone(),
            }),
        }
    }

    /// The newest whole state file, and the error of a file that is not
    /// one (torn, or written by someone else).
    fn slots(&self) -> Result<(Option<Stamped>, Option<SimError>), SimError> {
        let mut newest: Option<Stamped> = None;
        let mut corrupt = None;
        for name in STATE_FILES {
            let path = self.dir.dir.join(name);
            // Any user may write here (the simulated GPUs are shared):
            // a link is not followed, a FIFO not waited on, a sparse file
            // not read past the cap.
            let bytes = match crate::safe::read_regular(&path, MAX_STATE_BYTES) {
                Ok((bytes, _)) => bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                    corrupt = Some(SimError::Corrupt {
                        path,
                        message: e.to_string(),
                    });
                    continue;
                }
                Err(source) => return Err(SimError::Io { path, source }),
            };
            let parsed = serde_json::from_slice::<Stamped>(&bytes)
                .map_err(|e| e.to_string())
                .and_then(|stamped| match stamped.state.gpus.is_empty() {
                    true => Err("no GPUs".to_string()),
                    false => Ok(stamped),
                });
            match parsed {
                Ok(stamped)
                    if newest
                        .as_ref()
                        .is_none_or(|n| stamped.generation > n.generation) =>
                {
                    newest = Some(stamped)
                }
                Ok(_) => {}
                Err(message) => corrupt = Some(SimError::Corrupt { path, message }),
            }
        }
        Ok((newest, corrupt))
    }

    /// Writes the state into the file the newest one is not in, in place.
    /// Readers hold the lock too, so none sees a write under way; a writer
    /// killed midway leaves that file torn, and the newest whole one is the
    /// state before its write. Not a rename over the old file: in this
    /// sticky directory, only the file's owner could rename over it, and
    /// every user's fake jobs write here.
    pub fn write(&self, state: &State) -> Result<(), SimError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let generation = self.slots()?.0.map_or(0, |n| n.generation) + 1;
        let path = self
            .dir
            .dir
            .join(STATE_FILES[(generation % STATE_FILES.len() as u64) as usize]);
        let io = |source| SimError::Io {
            path: path.clone(),
            source,
        };
        let text = serde_json::to_vec_pretty(&StampedRef { generation, state })
            .map_err(|e| io(e.into()))?;
        // Never through a link someone planted at the name in this
        // world-writable directory.
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o666)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        // Writable by every user's fake jobs whatever the creator's umask.
        let meta = file.metadata().map_err(io)?;
        if meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o777 != 0o666 {
            file.set_permissions(Permissions::from_mode(0o666))
                .map_err(io)?;
        }
        file.set_len(0).map_err(io)?;
        file.write_all(&text).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn me() -> ProcessId {
        ProcessId::current().unwrap()
    }

    /// A process that has exited and been reaped.
    fn dead() -> ProcessId {
        let mut child = Command::new("true").spawn().unwrap();
        let id = ProcessId::of(child.id()).unwrap();
        child.wait().unwrap();
        id
    }

    #[test]
    fn claims_sum_up_and_smact_caps_at_one() {
        let mut state = State::whole(&[40960]);
        state.claim(&[0], me(), 10240, 0.7).unwrap();
        state.claim(&[0], me(), 5120, 0.6).unwrap();
        let gpu = &state.gpus[0];
        assert_eq!(gpu.used_mib(), 15360);
        assert_eq!(gpu.free_mib(), 40960 - 15360);
        assert_eq!(gpu.smact(), 1.0);
    }

    #[test]
    fn a_claim_that_does_not_fit_everywhere_is_claimed_nowhere() {
        let mut state = State::whole(&[40960, 40960]);
        state.claim(&[1], me(), 30720, 0.5).unwrap();
        let before = state.clone();
        let refusal = state.claim(&[0, 1], me(), 20480, 0.5).unwrap_err();
        let Refusal::OutOfMemory { position, gpu } = refusal else {
            panic!("{refusal:?}");
        };
        assert_eq!(position, 1);
        assert_eq!(gpu.free_mib(), 10240);
        assert_eq!(state, before);
        assert_eq!(
            state.claim(&[0, 4], me(), 1, 0.1),
            Err(Refusal::NoSuchGpu { index: 4, count: 2 })
        );
        assert_eq!(state, before);
    }

    #[test]
    fn an_exact_fit_is_a_fit() {
        let mut state = State::whole(&[1024]);
        assert_eq!(state.claim(&[0], me(), 1024, 0.5), Ok(()));
        assert_eq!(state.gpus[0].free_mib(), 0);
    }

    #[test]
    fn release_drops_only_the_holders_claims() {
        let mut state = State::whole(&[40960, 40960]);
        let other = dead();
        state.claim(&[0, 1], me(), 1024, 0.5).unwrap();
        state.claim(&[0], other, 2048, 0.5).unwrap();
        state.release(me());
        assert_eq!(state.gpus[0].claims.len(), 1);
        assert_eq!(state.gpus[0].claims[0].process, other);
        assert!(state.gpus[1].claims.is_empty());
    }

    #[test]
    fn dead_claims_are_pruned() {
        let mut state = State::whole(&[40960]);
        state.claim(&[0], me(), 1024, 0.5).unwrap();
        state.claim(&[0], dead(), 2048, 0.5).unwrap();
        assert!(state.prune());
        assert_eq!(state.gpus[0].used_mib(), 1024);
        assert!(!state.prune());
    }

    #[test]
    fn a_state_file_that_is_a_link_or_a_fifo_is_refused_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::create(&tmp.path().join("simgpu")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(STATE_FILES[0])).unwrap();
        nix::unistd::mkfifo(
            &dir.path().join(STATE_FILES[1]),
            nix::sys::stat::Mode::from_bits_truncate(0o666),
        )
        .unwrap();
        let locked = dir.lock().unwrap();
        // Refused at once: neither /dev/zero read nor the FIFO waited on.
        assert!(locked.read().is_err());
    }

    #[test]
    fn state_survives_a_write_and_a_read() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::create(&tmp.path().join("simgpu")).unwrap();
        let mut state = State::whole(&[40960, 81920]);
        state.claim(&[1], me(), 1024, 0.25).unwrap();
        let locked = dir.lock().unwrap();
        locked.write(&state).unwrap();
        assert_eq!(locked.read().unwrap(), state);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "no temporary file left: {names:?}");
    }

    #[test]
    fn a_write_cut_short_leaves_the_state_before_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::create(tmp.path()).unwrap();
        let locked = dir.lock().unwrap();
        let before = State::whole(&[40960]);
        locked.write(&before).unwrap();
        let mut after = before.clone();
        after.claim(&[0], me(), 1024, 0.5).unwrap();
        locked.write(&after).unwrap();
        assert_eq!(locked.read().unwrap(), after);
        // The second write's file, as a writer killed midway leaves it.
        let torn = tmp.path().join(STATE_FILES[0]);
        let text = fs::read(&torn).unwrap();
        fs::write(&torn, &text[..text.len() / 2]).unwrap();
        assert_eq!(locked.read().unwrap(), before);
        // The next write goes where the torn one was, and is read.
        locked.write(&after).unwrap();
        assert_eq!(locked.read().unwrap(), after);
        fs::write(tmp.path().join(STATE_FILES[1]), "garbage").unwrap();
        assert_eq!(locked.read().unwrap(), after);
    }

    #[test]
    fn a_missing_state_is_named_as_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let err = StateDir::existing(tmp.path()).lock().err().unwrap();
        assert!(matches!(err, SimError::Missing { .. }), "{err}");
        let dir = StateDir::create(tmp.path()).unwrap();
        let err = dir.lock().unwrap().read().unwrap_err();
        assert!(matches!(err, SimError::Missing { .. }), "{err}");
    }

    #[test]
    fn the_lock_excludes_a_second_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::create(tmp.path()).unwrap();
        let held = dir.lock().unwrap();
        let other = File::open(tmp.path().join(LOCK_FILE)).unwrap();
        assert!(other.try_lock_exclusive().is_err());
        drop(held);
        assert!(other.try_lock_exclusive().is_ok());
    }
}
