use crate::gpu::power::PowerCurve;
use std::fs;
use std::process::Command;
use std::time::Duration;

/// Power linear in SM activity, so expected watts are easy to state.
const LINEAR: PowerCurve = PowerCurve {
    idle_w: 50.0,
    max_w: 400.0,
    exponent: 1.0,
};

use super::*;
use crate::procfs::ProcessId;

const GIB: u64 = 1024;

fn me() -> ProcessId {
    ProcessId::current().unwrap()
}

fn whole(sizes: &[u64]) -> Vec<Declared> {
    sizes.iter().copied().map(Declared::whole).collect()
}

fn open(spool: &Path, sizes: &[u64]) -> SimGpus {
    SimGpus::open(spool, &whole(sizes), LINEAR).unwrap()
}

/// Changes the state file as a fake job would.
fn change(spool: &Path, f: impl FnOnce(&mut State)) {
    let dir = StateDir::existing(&spool.join(STATE_DIR));
    let locked = dir.lock().unwrap();
    let mut state = locked.read().unwrap();
    f(&mut state);
    locked.write(&state).unwrap();
}

fn claims(spool: &Path) -> usize {
    let dir = StateDir::existing(&spool.join(STATE_DIR));
    let state = dir.lock().unwrap().read().unwrap();
    state.gpus.iter().map(|gpu| gpu.claims.len()).sum()
}

#[test]
fn fresh_gpus_are_idle_and_named() {
    let spool = tempfile::tempdir().unwrap();
    let mut gpus = open(spool.path(), &[40 * GIB, 80 * GIB]);
    let inventory = gpus.inventory();
    assert_eq!(inventory.len(), 2);
    assert_eq!(inventory[1].uuid, "SIM-1");
    assert_eq!(inventory[1].name, "Simulated GPU");
    assert_eq!(inventory[1].total_mib, 80 * GIB);
    let readings = gpus.sample();
    assert_eq!(readings.len(), 2);
    for reading in &readings {
        assert_eq!(reading.error, None);
        assert_eq!(reading.used_mib, 0);
        assert_eq!(reading.smact, 0.0);
        assert_eq!((reading.occupancy, reading.dram), (Some(0.0), Some(0.0)));
        assert_eq!(reading.source, Some(crate::gpu::MetricSource::Simulated));
        assert_eq!(
            (reading.temperature_c, reading.sm_clock_mhz),
            (Some(30), Some(210))
        );
        assert_eq!(reading.power_w, Some(50.0));
        assert!(reading.processes.is_empty());
    }
    assert!(
        gpus.describe()
            .contains("2 simulated GPU(s) (40GiB, 80GiB)")
    );
}

#[test]
fn job_env_points_at_an_absolute_state_dir() {
    let spool = tempfile::tempdir().unwrap();
    let gpus = open(spool.path(), &[40 * GIB]);
    let env = gpus.job_env();
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].0, STATE_DIR_VAR);
    let dir = PathBuf::from(&env[0].1);
    assert!(dir.is_absolute());
    assert!(state::STATE_FILES.iter().any(|f| dir.join(f).is_file()));
}

#[test]
fn claims_sum_up_per_gpu_and_smact_caps_at_one() {
    let spool = tempfile::tempdir().unwrap();
    let mut gpus = open(spool.path(), &[40 * GIB, 40 * GIB]);
    change(spool.path(), |state| {
        state.claim(&[0], me(), 10 * GIB, 0.7).unwrap();
        state.claim(&[0], me(), 5 * GIB, 0.6).unwrap();
        state.claim(&[1], me(), 2 * GIB, 0.25).unwrap();
    });
    let readings = gpus.sample();
    assert_eq!(readings[0].used_mib, 15 * GIB);
    assert_eq!(readings[0].smact, 1.0);
    // Busy enough for the interference gate: occupancy >= 0.45, DRAM >= 0.40.
    assert_eq!(readings[0].occupancy, Some(0.55));
    assert_eq!(readings[0].dram, Some(0.45));
    assert_eq!(readings[0].total_mib, 40 * GIB);
    assert_eq!(
        (readings[0].temperature_c, readings[0].sm_clock_mhz),
        (Some(75), Some(1410))
    );
    assert_eq!(readings[0].power_w, Some(400.0));
    assert_eq!(
        readings[0].processes,
        vec![
            ProcessMemory {
                pid: std::process::id(),
                used_mib: 10 * GIB
            },
            ProcessMemory {
                pid: std::process::id(),
                used_mib: 5 * GIB
            },
        ]
    );
    assert_eq!(readings[1].used_mib, 2 * GIB);
    assert_eq!(readings[1].smact, 0.25);
    assert_eq!(readings[1].occupancy, Some(0.25 * 0.55));
    assert_eq!(readings[1].power_w, Some(50.0 + 350.0 * 0.25));
}

#[test]
fn energy_integrates_power_between_samples() {
    let spool = tempfile::tempdir().unwrap();
    let mut gpus = open(spool.path(), &[40 * GIB]);
    let t0 = Instant::now();
    assert_eq!(gpus.sample_at(t0)[0].energy_j, Some(0.0));
    // Idle for 10 s: 50 W.
    assert_eq!(
        gpus.sample_at(t0 + Duration::from_secs(10))[0].energy_j,
        Some(500.0)
    );
    change(spool.path(), |state| {
        state.claim(&[0], me(), GIB, 1.0).unwrap();
    });
    // The job started somewhere in the next 2 s: the mean of 50 W and 400 W.
    assert_eq!(
        gpus.sample_at(t0 + Duration::from_secs(12))[0].energy_j,
        Some(500.0 + 2.0 * 225.0)
    );
    // Busy for 1 s: 400 W.
    assert_eq!(
        gpus.sample_at(t0 + Duration::from_secs(13))[0].energy_j,
        Some(500.0 + 450.0 + 400.0)
    );
}

#[test]
fn other_sizes_replace_the_state() {
    let spool = tempfile::tempdir().unwrap();
    open(spool.path(), &[40 * GIB]);
    change(spool.path(), |state| {
        state.claim(&[0], me(), GIB, 0.5).unwrap();
    });
    let mut gpus = open(spool.path(), &[40 * GIB, 40 * GIB]);
    assert_eq!(claims(spool.path()), 0);
    let readings = gpus.sample();
    assert_eq!(readings.len(), 2);
    assert!(
        readings
            .iter()
            .all(|r| r.used_mib == 0 && r.error.is_none())
    );
}

#[test]
fn same_sizes_keep_the_claims_of_running_jobs() {
    let spool = tempfile::tempdir().unwrap();
    open(spool.path(), &[40 * GIB, 80 * GIB]);
    change(spool.path(), |state| {
        state.claim(&[1], me(), 3 * GIB, 0.5).unwrap();
    });
    // The daemon restarts.
    let mut gpus = open(spool.path(), &[40 * GIB, 80 * GIB]);
    let readings = gpus.sample();
    assert_eq!(readings[1].used_mib, 3 * GIB);
    assert_eq!(readings[1].processes[0].pid, std::process::id());
}

#[test]
fn a_dead_claim_is_pruned_from_the_reading_and_the_file() {
    let spool = tempfile::tempdir().unwrap();
    let mut gpus = open(spool.path(), &[40 * GIB]);
    let mut child = Command::new("true").spawn().unwrap();
    let gone = ProcessId::of(child.id()).unwrap();
    child.wait().unwrap();
    change(spool.path(), |state| {
        state.claim(&[0], gone, 8 * GIB, 0.5).unwrap();
        state.claim(&[0], me(), GIB, 0.5).unwrap();
    });
    let readings = gpus.sample();
    assert_eq!(readings[0].used_mib, GIB);
    assert_eq!(readings[0].processes.len(), 1);
    assert_eq!(claims(spool.path()), 1);
}

#[test]
fn a_job_killed_with_its_memory_claimed_leaves_the_next_one_room() {
    // Killed without releasing its claim (its supervisor killed, say); no
    // sample has pruned it yet when the next job on its GPU allocates.
    let spool = tempfile::tempdir().unwrap();
    open(spool.path(), &[40 * GIB]);
    let mut child = Command::new("true").spawn().unwrap();
    let gone = ProcessId::of(child.id()).unwrap();
    child.wait().unwrap();
    change(spool.path(), |state| {
        state.claim(&[0], gone, 34 * GIB, 0.5).unwrap();
    });
    let job = fake_train::FakeTrain {
        mem_mib: 8 * GIB,
        secs: 0.0,
        smact: 0.5,
        ramp_secs: 0.0,
    };
    let placement = fake_train::Placement {
        state_dir: spool.path().join(STATE_DIR),
        visible: vec!["0".into()],
    };
    let stop = std::sync::atomic::AtomicUsize::new(0);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let outcome = job.run(&placement, &stop, &mut out, &mut err).unwrap();
    assert_eq!(
        outcome,
        fake_train::Outcome::Finished,
        "{}",
        String::from_utf8_lossy(&err)
    );
}

#[test]
fn a_corrupt_state_gives_error_readings_then_recovers() {
    let spool = tempfile::tempdir().unwrap();
    let mut gpus = open(spool.path(), &[40 * GIB, 40 * GIB]);
    let t0 = Instant::now();
    let good = gpus.sample_at(t0);
    let files = state::STATE_FILES.map(|f| spool.path().join(STATE_DIR).join(f));
    let saved = files.each_ref().map(|f| fs::read(f).ok());
    for file in &files {
        fs::write(file, b"{\"generation\": 9, \"gpus\": [{\"total_mib\": 40").unwrap();
    }
    let bad = gpus.sample_at(t0 + Duration::from_secs(1));
    assert_eq!(bad.len(), 2);
    for (bad, good) in bad.iter().zip(&good) {
        let error = bad.error.as_deref().unwrap();
        assert!(error.contains("not a simulated-GPU state"), "{error}");
        assert_eq!(bad.energy_j, good.energy_j, "last known values");
    }
    for (file, saved) in files.iter().zip(saved) {
        match saved {
            Some(saved) => fs::write(file, saved).unwrap(),
            None => fs::remove_file(file).unwrap(),
        }
    }
    let again = gpus.sample_at(t0 + Duration::from_secs(4));
    assert_eq!(again[0].error, None);
    assert_eq!(
        again[0].energy_j,
        Some(4.0 * 50.0),
        "integrated over the gap"
    );
}

#[test]
fn a_vanished_state_gives_error_readings() {
    let spool = tempfile::tempdir().unwrap();
    let mut gpus = open(spool.path(), &[40 * GIB]);
    fs::remove_dir_all(spool.path().join(STATE_DIR)).unwrap();
    let readings = gpus.sample();
    assert_eq!(readings[0].used_mib, 0);
    assert!(
        readings[0]
            .error
            .as_deref()
            .unwrap()
            .contains("no simulated GPUs")
    );
}

#[test]
fn a_corrupt_state_is_replaced_on_open() {
    let spool = tempfile::tempdir().unwrap();
    fs::create_dir_all(spool.path().join(STATE_DIR)).unwrap();
    for file in state::STATE_FILES {
        fs::write(spool.path().join(STATE_DIR).join(file), "garbage").unwrap();
    }
    let mut gpus = open(spool.path(), &[40 * GIB]);
    assert_eq!(gpus.sample()[0].error, None);
}

#[test]
fn nonsense_gpus_and_power_are_refused() {
    let spool = tempfile::tempdir().unwrap();
    for (sizes, idle_w, max_w) in [
        (&[][..], 50.0, 400.0),
        (&[0][..], 50.0, 400.0),
        (&[GIB][..], 400.0, 50.0),
        (&[GIB][..], -1.0, 50.0),
        (&[GIB][..], 50.0, f64::NAN),
    ] {
        let power = PowerCurve {
            idle_w,
            max_w,
            ..LINEAR
        };
        let err = SimGpus::open(spool.path(), &whole(sizes), power)
            .err()
            .unwrap();
        assert!(matches!(err, SimError::Invalid(_)), "{err}");
    }
}
