//! Fake training jobs on simulated GPUs, as the daemon will meet them: real
//! `carma fake-train` processes claim memory in a spool's simulated GPUs,
//! and `SimGpus::sample()` sees what they hold. Each test works in its own
//! temporary spool.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use carma::gpu::sim::SimGpus;
use carma::gpu::sim::spec::Declared;
use carma::gpu::sim::state::{State, StateDir};
use carma::gpu::{GpuBackend, GpuReading};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

const GIB: u64 = 1024;

/// A spool with simulated GPUs.
struct Sim {
    _spool: TempDir,
    gpus: SimGpus,
}

impl Sim {
    fn new(sizes_mib: &[u64]) -> Sim {
        let spool = tempfile::tempdir().unwrap();
        let declared: Vec<Declared> = sizes_mib.iter().copied().map(Declared::whole).collect();
        let gpus = SimGpus::open(
            spool.path(),
            &declared,
            carma::gpu::power::PowerCurve {
                idle_w: 50.0,
                max_w: 400.0,
                exponent: 1.0,
            },
        )
        .unwrap();
        Sim {
            _spool: spool,
            gpus,
        }
    }

    /// Starts `carma fake-train ARGS` on the GPUs `visible`, as the daemon
    /// would launch it.
    fn start(&self, visible: &str, args: &[&str]) -> Job {
        let mut command = fake_train(args);
        command
            .envs(self.gpus.job_env())
            .env("CUDA_VISIBLE_DEVICES", visible);
        Job::start(command)
    }

    /// Samples until `done` holds for the readings, for at most 10 s.
    fn sample_until(
        &mut self,
        what: &str,
        done: impl Fn(&[GpuReading]) -> bool,
    ) -> Vec<GpuReading> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let readings = self.gpus.sample();
            if done(&readings) {
                return readings;
            }
            assert!(Instant::now() < deadline, "never saw {what}: {readings:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The state file as it is, without the pruning a sample does.
    fn state(&self) -> State {
        let (_, dir) = &self.gpus.job_env()[0];
        StateDir::existing(Path::new(dir))
            .lock()
            .unwrap()
            .read()
            .unwrap()
    }
}

fn fake_train(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_carma"));
    command
        .arg("fake-train")
        .args(args)
        .env_remove("CARMA_SIMGPU")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn pids(reading: &GpuReading) -> Vec<u32> {
    reading.processes.iter().map(|p| p.pid).collect()
}

/// A running fake job, killed if a test fails before it ends.
struct Job {
    child: Child,
}

/// What a job left when it ended.
struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Job {
    fn start(mut command: Command) -> Job {
        Job {
            child: command.spawn().expect("carma runs"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(i32::try_from(self.pid()).unwrap()), signal).unwrap();
    }

    /// Waits for the end, at most 10 s.
    fn wait(mut self) -> Ended {
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "job {} never ended", self.pid());
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stdout = String::new();
        let mut stderr = String::new();
        if let Some(out) = self.child.stdout.as_mut() {
            out.read_to_string(&mut stdout).unwrap();
        }
        if let Some(err) = self.child.stderr.as_mut() {
            err.read_to_string(&mut stderr).unwrap();
        }
        Ended {
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn two_jobs_share_a_gpu_and_a_third_that_does_not_fit_dies_of_oom() {
    let mut sim = Sim::new(&[40 * GIB]);
    let a = sim.start("0", &["--mem", "10G", "--secs", "30", "--smact", "0.3"]);
    let b = sim.start("0", &["--mem", "10G", "--secs", "30", "--smact", "0.4"]);
    let readings = sim.sample_until("both jobs", |r| r[0].processes.len() == 2);
    let mut seen = pids(&readings[0]);
    seen.sort();
    let mut expected = vec![a.pid(), b.pid()];
    expected.sort();
    assert_eq!(seen, expected);
    assert_eq!(readings[0].used_mib, 20 * GIB);
    assert!((readings[0].smact - 0.7).abs() < 1e-9);

    let c = sim.start("0", &["--mem", "25G", "--secs", "30"]).wait();
    assert_eq!(c.status.code(), Some(1), "{}", c.stderr);
    assert!(
        c.stderr
            .contains("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 25.00 GiB. GPU 0 has a total capacity of 40.00 GiB of which 20.00 GiB is free."),
        "{}",
        c.stderr
    );
    for neighbour in [a.pid(), b.pid()] {
        let line = format!("Process {neighbour} has 10.00 GiB memory in use.");
        assert!(c.stderr.contains(&line), "{}", c.stderr);
    }
    assert_eq!(
        sim.state().gpus[0].claims.len(),
        2,
        "the OOM job claimed nothing"
    );
    assert_eq!(sim.gpus.sample()[0].used_mib, 20 * GIB);
}

#[test]
fn a_multi_gpu_claim_is_all_or_nothing() {
    let mut sim = Sim::new(&[40 * GIB, 40 * GIB]);
    let a = sim.start("1", &["--mem", "30G", "--secs", "30"]);
    sim.sample_until("the first job", |r| r[1].processes.len() == 1);

    let b = sim.start("0,1", &["--mem", "20G", "--secs", "30"]).wait();
    assert_eq!(b.status.code(), Some(1), "{}", b.stderr);
    // GPU 1 of the machine is the job's second visible GPU: CUDA's device 1.
    assert!(
        b.stderr
            .contains("GPU 1 has a total capacity of 40.00 GiB of which 10.00 GiB is free."),
        "{}",
        b.stderr
    );
    let state = sim.state();
    assert!(state.gpus[0].claims.is_empty(), "nothing held on GPU 0");
    assert_eq!(state.gpus[1].claims.len(), 1);

    let c = sim.start("0,1", &["--mem", "5G", "--secs", "30"]);
    let readings = sim.sample_until("the two-GPU job on both GPUs", |r| {
        pids(&r[0]).contains(&c.pid()) && pids(&r[1]).contains(&c.pid())
    });
    assert_eq!(readings[0].used_mib, 5 * GIB);
    assert_eq!(readings[1].used_mib, 35 * GIB);
    assert_eq!(pids(&readings[1]), vec![a.pid(), c.pid()]);
}

#[test]
fn a_finished_job_prints_progress_and_releases_its_memory() {
    let sim = Sim::new(&[40 * GIB]);
    let job = sim.start("0", &["--mem", "1500M", "--secs", "1.2"]).wait();
    assert_eq!(job.status.code(), Some(0), "{}", job.stderr);
    let lines: Vec<&str> = job.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", job.stdout);
    assert!(lines[0].starts_with("epoch 1/2 loss "), "{}", job.stdout);
    assert!(lines[1].starts_with("epoch 2/2 loss "), "{}", job.stdout);
    assert!(job.stderr.is_empty(), "{}", job.stderr);
    assert!(sim.state().gpus[0].claims.is_empty());
}

#[test]
fn memory_is_claimed_only_after_the_warm_up() {
    let mut sim = Sim::new(&[40 * GIB]);
    let started = Instant::now();
    let job = sim.start("0", &["--mem", "2G", "--secs", "30", "--ramp", "1.5"]);
    let readings = sim.sample_until("the job after its warm-up", |r| r[0].used_mib > 0);
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert_eq!(pids(&readings[0]), vec![job.pid()]);
}

#[test]
fn sigterm_and_sigint_release_the_claim() {
    let mut sim = Sim::new(&[40 * GIB]);
    for (signal, code) in [(Signal::SIGTERM, 143), (Signal::SIGINT, 130)] {
        let job = sim.start("0", &["--mem", "4G", "--secs", "30"]);
        sim.sample_until("the job", |r| r[0].used_mib == 4 * GIB);
        job.signal(signal);
        let ended = job.wait();
        assert_eq!(
            ended.status.code(),
            Some(code),
            "{signal}: {}",
            ended.stderr
        );
        // Released by the job itself, not pruned by a sample.
        assert!(sim.state().gpus[0].claims.is_empty(), "{signal}");
    }
}

#[test]
fn a_killed_job_keeps_its_claim_until_the_next_sample() {
    let mut sim = Sim::new(&[40 * GIB]);
    let mut job = sim.start("0", &["--mem", "4G", "--secs", "30"]);
    sim.sample_until("the job", |r| r[0].used_mib == 4 * GIB);
    job.child.kill().unwrap();
    job.child.wait().unwrap();
    assert_eq!(
        sim.state().gpus[0].claims.len(),
        1,
        "SIGKILL releases nothing"
    );
    let readings = sim.gpus.sample();
    assert_eq!(readings[0].used_mib, 0);
    assert!(readings[0].processes.is_empty());
    assert!(
        sim.state().gpus[0].claims.is_empty(),
        "pruned from the file too"
    );
}

#[test]
fn without_visible_gpus_or_simulated_gpus_the_job_exits_2_and_says_why() {
    let sim = Sim::new(&[40 * GIB]);
    let mut command = fake_train(&["--mem", "1G", "--secs", "1"]);
    command.envs(sim.gpus.job_env());
    let ended = Job::start(command).wait();
    assert_eq!(ended.status.code(), Some(2));
    assert!(
        ended
            .stderr
            .contains("no visible GPU: CUDA_VISIBLE_DEVICES is unset or empty"),
        "{}",
        ended.stderr
    );

    let mut command = fake_train(&["--mem", "1G", "--secs", "1"]);
    command.env("CUDA_VISIBLE_DEVICES", "0");
    let ended = Job::start(command).wait();
    assert_eq!(ended.status.code(), Some(2));
    assert!(
        ended.stderr.contains("CARMA_SIMGPU is not set"),
        "{}",
        ended.stderr
    );

    let empty = tempfile::tempdir().unwrap();
    let mut command = fake_train(&["--mem", "1G", "--secs", "1"]);
    command
        .env("CARMA_SIMGPU", empty.path())
        .env("CUDA_VISIBLE_DEVICES", "0");
    let ended = Job::start(command).wait();
    assert_eq!(ended.status.code(), Some(2));
    assert!(
        ended.stderr.contains("no simulated GPUs in"),
        "{}",
        ended.stderr
    );

    let ended = sim.start("1", &["--mem", "1G", "--secs", "1"]).wait();
    assert_eq!(ended.status.code(), Some(2));
    assert!(
        ended
            .stderr
            .contains("CUDA_VISIBLE_DEVICES names GPU 1, but the simulation has 1 GPU(s)"),
        "{}",
        ended.stderr
    );
}
