//! The daemon on NVML, end to end, on a machine without a GPU: a fake
//! `libnvidia-ml.so` (`tests/fake_nvml/fake_nvml.c`, compiled here with
//! `cc`) answers NVML's calls from a file that each test writes, and
//! rewrites while the real daemon reads it. Jobs are real processes under
//! real supervisors; only the driver is pretend.

mod common;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{Spool, executable, stderr, stdout};

/// The fake library, compiled once per test run.
fn fake_library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_nvml/fake_nvml.c");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml");
        fs::create_dir_all(&dir).unwrap();
        let library = dir.join("libnvidia-ml.so");
        // Built under a name of its own and renamed: test runs side by side
        // never load a half-written library.
        let partial = dir.join(format!("libnvidia-ml.so.{}", std::process::id()));
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        let out = Command::new(&cc)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(&partial)
            .arg(&source)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cc:?} to build the fake NVML: {e}"));
        assert!(out.status.success(), "cc failed: {}", stderr(&out));
        fs::rename(&partial, &library).unwrap();
        library
    })
}

/// One GPU as the fake library shows it.
#[derive(Clone)]
struct FakeGpu {
    name: &'static str,
    total_mib: u64,
    used_mib: u64,
    /// What the driver sets aside, reported apart from `used_mib`.
    reserved_mib: u64,
    /// Utilization counter, percent.
    util: u32,
    /// GPM SM utilization, percent; `None`: no GPM on this GPU.
    gpm_sm: Option<f64>,
    /// GPM SM occupancy and DRAM bandwidth use, percent, where measured.
    gpm_occ: Option<f64>,
    gpm_dram: Option<f64>,
    power_w: Option<f64>,
    energy_j: Option<f64>,
    temp_c: Option<u32>,
    sm_clock_mhz: Option<u32>,
    /// Compute processes: pid, MiB.
    procs: Vec<(u32, u64)>,
    mig: bool,
    /// Every call fails with NVML_ERROR_GPU_IS_LOST.
    fail: bool,
}

impl FakeGpu {
    fn a100(used_mib: u64) -> FakeGpu {
        FakeGpu {
            name: "NVIDIA A100-SXM4-40GB",
            total_mib: 40960,
            used_mib,
            reserved_mib: 0,
            util: 0,
            gpm_sm: None,
            gpm_occ: None,
            gpm_dram: None,
            power_w: Some(60.0),
            energy_j: Some(1000.0),
            temp_c: Some(61),
            sm_clock_mhz: Some(1410),
            procs: Vec::new(),
            mig: false,
            fail: false,
        }
    }
}

/// The fake library's data file.
struct FakeNvml {
    path: PathBuf,
    gpus: Vec<FakeGpu>,
}

impl FakeNvml {
    fn new(spool: &Spool, gpus: Vec<FakeGpu>) -> FakeNvml {
        let nvml = FakeNvml {
            path: spool.dir.path().join("fake-nvml.txt"),
            gpus,
        };
        nvml.write();
        nvml
    }

    /// Writes the file whole and renames it into place, so the library
    /// never reads half of it.
    fn write(&self) {
        let mut text = format!("gpus {}\ndriver 550.54.15\n", self.gpus.len());
        for (i, gpu) in self.gpus.iter().enumerate() {
            let procs: Vec<String> = gpu
                .procs
                .iter()
                .map(|(pid, mib)| format!("{pid}:{mib}"))
                .collect();
            writeln!(text, "{i}.name {}", gpu.name).unwrap();
            writeln!(text, "{i}.uuid GPU-{i:08}-fake").unwrap();
            writeln!(text, "{i}.total_mib {}", gpu.total_mib).unwrap();
            writeln!(text, "{i}.used_mib {}", gpu.used_mib).unwrap();
            writeln!(text, "{i}.reserved_mib {}", gpu.reserved_mib).unwrap();
            writeln!(text, "{i}.util {}", gpu.util).unwrap();
            writeln!(text, "{i}.procs {}", procs.join(",")).unwrap();
            writeln!(text, "{i}.mig {}", u8::from(gpu.mig)).unwrap();
            writeln!(text, "{i}.fail {}", u8::from(gpu.fail)).unwrap();
            for (key, value) in [
                ("gpm_sm", gpu.gpm_sm),
                ("gpm_occ", gpu.gpm_occ),
                ("gpm_dram", gpu.gpm_dram),
            ] {
                if let Some(value) = value {
                    writeln!(text, "{i}.{key} {value}").unwrap();
                }
            }
            if let Some(w) = gpu.power_w {
                writeln!(text, "{i}.power_w {w}").unwrap();
            }
            if let Some(j) = gpu.energy_j {
                writeln!(text, "{i}.energy_j {j}").unwrap();
            }
            if let Some(c) = gpu.temp_c {
                writeln!(text, "{i}.temp_c {c}").unwrap();
            }
            if let Some(mhz) = gpu.sm_clock_mhz {
                writeln!(text, "{i}.sm_clock_mhz {mhz}").unwrap();
            }
        }
        let partial = self.path.with_extension("partial");
        fs::write(&partial, text).unwrap();
        fs::rename(&partial, &self.path).unwrap();
    }

    /// Changes the GPUs and writes them out.
    fn change(&mut self, f: impl FnOnce(&mut [FakeGpu])) {
        f(&mut self.gpus);
        self.write();
    }
}

/// A daemon on `gpus` behind the fake NVML.
fn start(extra_config: &str, gpus: Vec<FakeGpu>) -> (Spool, FakeNvml) {
    let mut spool = Spool::with_config("", extra_config);
    let nvml = FakeNvml::new(&spool, gpus);
    spool.start_daemon_with(
        &[],
        &[
            ("CARMA_NVML_LIB", fake_library()),
            ("CARMA_FAKE_NVML", &nvml.path),
        ],
    );
    (spool, nvml)
}

fn status(spool: &Spool) -> serde_json::Value {
    let out = spool.carma().args(["status", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A job that writes its shell's pid to `<name>.pid` in the test
/// directory, then waits (at most 20 s) for `<name>.go` there.
fn waiting_job(spool: &Spool, name: &str, memory: &str) -> String {
    let dir = spool.dir.path().display();
    format!(
        "name: {name}\nmemory: {memory}\n\
         echo $$ > {dir}/{name}.pid\n\
         for i in $(seq 400); do [ -e {dir}/{name}.go ] && break; sleep 0.05; done\n"
    )
}

fn job_pid(spool: &Spool, name: &str) -> u32 {
    let path = spool.dir.path().join(format!("{name}.pid"));
    spool.wait_for(&format!("{name} to start"), 20.0, || {
        fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
    });
    fs::read_to_string(&path).unwrap().trim().parse().unwrap()
}

fn release(spool: &Spool, name: &str) {
    fs::write(spool.dir.path().join(format!("{name}.go")), "").unwrap();
}

fn run_file(spool: &Spool, name: &str, file: &str) -> serde_json::Value {
    let (_, dir) = spool.find(name).unwrap();
    let text = fs::read_to_string(dir.join("run-1").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The GPUs of a task's first run.
fn gpus_of(spool: &Spool, name: &str) -> serde_json::Value {
    run_file(spool, name, "launch.json")["gpus"].clone()
}

fn wait_running(spool: &Spool, name: &str) {
    spool.wait_for(&format!("{name} to run"), 20.0, || {
        spool
            .find(name)
            .is_some_and(|(state, _)| state == "running")
    });
}

#[test]
fn memory_the_driver_reserves_counts_as_used() {
    // What an idle H200 with driver 580 showed (docs/measured-h200.md):
    // NVML's v2 memory information said 0 MiB used and 616 MiB reserved,
    // and nvidia-smi's memory.used said 0. Placement must not count on the
    // reserved MiB, so carma's used memory is total minus free.
    let mut h200 = FakeGpu::a100(0);
    h200.name = "NVIDIA H200";
    h200.total_mib = 143_771;
    h200.reserved_mib = 616;
    let (spool, _nvml) = start("", vec![h200]);
    spool.wait_for("the reserved memory as used", 10.0, || {
        status(&spool)["gpus"][0]["used_mib"] == 616
    });
}

#[test]
fn status_shows_the_gpus_nvml_finds_and_where_smact_comes_from() {
    let mut hopper = FakeGpu::a100(2048);
    hopper.name = "NVIDIA H100 80GB HBM3";
    hopper.total_mib = 81920;
    hopper.gpm_sm = Some(42.5);
    hopper.gpm_occ = Some(30.0);
    hopper.util = 90;
    let mut older = FakeGpu::a100(0);
    older.util = 30;
    // A board without power readings: left out, said once.
    older.power_w = None;
    older.energy_j = None;
    let (spool, _nvml) = start("", vec![hopper, older]);
    spool.wait_for("readings in the status", 10.0, || {
        status(&spool)["gpus"][1]["smact"] == 0.3
    });
    let status = status(&spool);
    let gpus = &status["gpus"];
    assert_eq!(gpus[0]["name"], "NVIDIA H100 80GB HBM3");
    assert_eq!(gpus[0]["uuid"], "GPU-00000000-fake");
    assert_eq!(gpus[0]["total_mib"], 81920);
    assert_eq!(gpus[0]["used_mib"], 2048);
    assert_eq!(gpus[0]["smact"], 0.425, "GPM, not the counter's 90%");
    assert_eq!(gpus[0]["occupancy"], 0.3);
    assert_eq!(gpus[0]["dram"], serde_json::Value::Null, "not measured");
    assert_eq!(gpus[0]["source"], "gpm");
    assert_eq!(gpus[1]["source"], "utilization");
    assert_eq!(gpus[1]["occupancy"], serde_json::Value::Null);
    assert_eq!(gpus[0]["power_w"], 60.0);
    assert_eq!(gpus[1]["uuid"], "GPU-00000001-fake");
    assert_eq!(gpus[1]["power_w"], serde_json::Value::Null);
    let backend = status["backend"].as_str().unwrap();
    assert!(
        backend.starts_with("NVML 550.54.15")
            && backend.contains("SM metrics from DCGM, else GPM, else the utilization counter"),
        "{backend}"
    );
    let text = stdout(&spool.carma().arg("status").output().unwrap());
    let row = |gpu: &str| {
        text.lines()
            .find(|l| l.starts_with(gpu))
            .unwrap_or_default()
    };
    assert!(row("0 ").contains("0.42   0.30  -     GPM"), "{text}");
    assert!(row("1 ").contains("utilization counter"), "{text}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let log = spool.daemon_log();
    assert_eq!(
        log.matches("GPU 1: NVML cannot read its power").count(),
        1,
        "{log}"
    );
    assert!(log.contains("GPU 0 NVIDIA H100 80GB HBM3 (80GiB, GPU-00000000-fake)"));
}

/// A fake `dcgmi` in `dir`: it prints dmon's header, then
/// every 0.1 s what `dir/dcgmi.txt` says after its first line, which says what
/// to do: `values`, `hang` (print nothing), or `exit N` (after an error
/// message). It ends when the daemon does.
fn fake_dcgmi(dir: &Path, first: &str) -> PathBuf {
    let script = dir.join("dcgmi");
    let control = dir.join("dcgmi.txt");
    fs::write(&control, first).unwrap();
    executable(
        &script,
        &format!(
            "#!/bin/bash\n\
             echo \"$*\" > {dir}/dcgmi.args\n\
             echo '#Entity   SMACT        SMOCC        DRAMA'\n\
             echo 'ID'\n\
             while kill -0 $PPID 2>/dev/null; do\n\
               mode=$(head -n 1 {control})\n\
               case \"$mode\" in\n\
                 exit*) echo 'Error: Host engine connection invalid/disconnected.'; exit ${{mode#exit }};;\n\
                 hang) ;;\n\
                 *) tail -n +2 {control};;\n\
               esac\n\
               sleep 0.1\n\
             done\n",
            dir = dir.display(),
            control = control.display(),
        ),
    );
    script
}

#[test]
fn dcgm_is_used_while_it_answers_and_nvml_fills_in_when_it_hangs_or_exits() {
    let values = "values\nGPU 0   0.300   0.500   0.250\nGPU 1   N/A   N/A   N/A\n";
    let scripts = tempfile::tempdir().unwrap();
    let script = fake_dcgmi(scripts.path(), values);
    let mut hopper = FakeGpu::a100(0);
    hopper.gpm_sm = Some(42.5);
    let mut older = FakeGpu::a100(0);
    older.util = 90;
    let (spool, _nvml) = start(
        &format!("[gpu]\ndcgmi = \"{}\"\n", script.display()),
        vec![older, hopper],
    );
    let control = scripts.path().join("dcgmi.txt");
    let gpu = |i: usize| status(&spool)["gpus"][i].clone();
    spool.wait_for("DCGM's values", 10.0, || {
        let g = gpu(0);
        g["source"] == "dcgm" && g["smact"] == 0.3
    });
    assert_eq!(
        (gpu(0)["occupancy"].clone(), gpu(0)["dram"].clone()),
        (0.5.into(), 0.25.into())
    );
    // DCGM has no SM activity for GPU 1 (N/A): GPM answers.
    assert_eq!(gpu(1)["source"], "gpm");
    assert_eq!(gpu(1)["smact"], 0.425);
    assert_eq!(
        fs::read_to_string(scripts.path().join("dcgmi.args")).unwrap(),
        "dmon -e 1002,1003,1005 -d 100\n"
    );
    let text = stdout(&spool.carma().arg("status").output().unwrap());
    assert!(text.contains("0.30   0.50  0.25  DCGM"), "{text}");
    // A hung dcgmi: after 1.3 s (3 intervals and a second) GPU 0 reads
    // the counter; the child is killed and started again.
    fs::write(&control, "hang\n").unwrap();
    spool.wait_for("the counter", 10.0, || {
        let g = gpu(0);
        g["source"] == "utilization" && g["smact"] == 0.9 && g["occupancy"].is_null()
    });
    spool.wait_for("the kill", 10.0, || {
        spool
            .daemon_log()
            .contains("dcgmi dmon has printed nothing for")
    });
    fs::write(&control, values).unwrap();
    spool.wait_for("DCGM again", 10.0, || gpu(0)["source"] == "dcgm");
    // An exiting dcgmi: its error is logged once, however often it
    // restarts, and NVML fills in meanwhile.
    fs::write(&control, "exit 3\n").unwrap();
    spool.wait_for("the counter again", 10.0, || {
        gpu(0)["source"] == "utilization"
    });
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let log = spool.daemon_log();
    assert_eq!(
        log.matches("dcgmi dmon printed \"Error: Host engine connection")
            .count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches("dcgmi dmon ended (exit status: 3)").count(),
        1,
        "{log}"
    );
    assert_eq!(
        log.matches(
            "GPU 0: DCGM has no fresh SM activity for it; SM metrics from the utilization counter"
        )
        .count(),
        2,
        "once per outage:\n{log}"
    );
    assert_eq!(
        log.matches("GPU 0: SM metrics from DCGM").count(),
        2,
        "{log}"
    );
    assert!(!log.contains("GPU 1: SM metrics from DCGM"), "{log}");
}

#[test]
fn a_job_waits_until_nvml_shows_room_for_it() {
    // 40 GiB, 38 GiB of it used by someone else: a 4 GiB job (+2 GiB
    // margin) waits. Its GPU then gets busy (SMACT over the 0.80 cap), then
    // frees its memory: the job still waits, for the SM activity to drop.
    let (spool, mut nvml) = start("", vec![FakeGpu::a100(38 * 1024)]);
    spool.submit("j.rad", &waiting_job(&spool, "j", "4G"));
    let waits_for = |what: &str| {
        spool.wait_for(&format!("the job to wait for {what}"), 10.0, || {
            status(&spool)["head_waits_for"]
                .as_str()
                .is_some_and(|why| why.contains(what))
        });
    };
    waits_for("GPU 0: 2GiB free < 6GiB");
    nvml.change(|gpus| gpus[0].util = 95);
    waits_for("GPU 0: SMACT 0.9");
    nvml.change(|gpus| gpus[0].used_mib = 1024);
    spool.wait_for("the freed memory in the status", 10.0, || {
        status(&spool)["gpus"][0]["used_mib"] == 1024
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(spool.tasks("running").is_empty(), "SMACT holds it back");
    waits_for("GPU 0: SMACT 0.9");
    nvml.change(|gpus| gpus[0].util = 10);
    wait_running(&spool, "-j");
    release(&spool, "j");
    spool.wait_count("done", 1, 20.0);
}

#[test]
fn magm_places_a_job_on_the_gpu_with_the_most_free_memory() {
    let (spool, mut nvml) = start(
        "[placement]\npolicy = \"magm\"\n",
        vec![
            FakeGpu::a100(30_000),
            FakeGpu::a100(5_000),
            FakeGpu::a100(20_000),
        ],
    );
    spool.submit("a.rad", "name: a\nmemory: 1G\ntrue\n");
    spool.wait_count("done", 1, 20.0);
    assert_eq!(gpus_of(&spool, "-a"), serde_json::json!([1]));
    nvml.change(|gpus| gpus[2].used_mib = 1_000);
    spool.wait_for("the new reading", 10.0, || {
        status(&spool)["gpus"][2]["used_mib"] == 1000
    });
    spool.submit("b.rad", "name: b\nmemory: 1G\ntrue\n");
    spool.wait_count("done", 2, 20.0);
    assert_eq!(gpus_of(&spool, "-b"), serde_json::json!([2]));
}

#[test]
fn per_process_memory_is_attributed_to_the_job_that_owns_it() {
    // Two jobs share one GPU. NVML lists each job's process and one
    // stranger (pid 1, in no job's session): each job's peak is its own
    // process's memory, and history learns it. The fake shows no process
    // until told: the GPU takes the second job without waiting to see the
    // first (placement.await_activity_s = 0).
    let (spool, mut nvml) = start(
        "[placement]\nawait_activity_s = 0\n",
        vec![FakeGpu::a100(0)],
    );
    spool.submit("small.rad", &waiting_job(&spool, "small", "1G"));
    spool.submit("large.rad", &waiting_job(&spool, "large", "1G"));
    let small = job_pid(&spool, "small");
    let large = job_pid(&spool, "large");
    nvml.change(|gpus| {
        gpus[0].procs = vec![(small, 3000), (large, 5000), (1, 7000)];
        gpus[0].used_mib = 15_000;
    });
    spool.wait_for("both peaks in the status", 10.0, || {
        let status = status(&spool);
        let peaks: Vec<(String, u64)> = status["running"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_owned(),
                    t["peak_mib"].as_u64().unwrap(),
                )
            })
            .collect();
        peaks.len() == 2
            && peaks
                .iter()
                .all(|(name, peak)| *peak == if name.ends_with("-small") { 3000 } else { 5000 })
    });
    // The GPU log has each process with its task, and the stranger alone.
    let log = spool.root.join("gpu-log.csv");
    let task = |stem: &str| {
        let (_, dir) = spool.find(stem).unwrap();
        dir.file_name().unwrap().to_str().unwrap().to_owned()
    };
    // NVML's processes in pid order.
    let mut listed = vec![
        (small, format!("{small}:3000:{}", task("-small"))),
        (large, format!("{large}:5000:{}", task("-large"))),
        (1, "1:7000".to_owned()),
    ];
    listed.sort();
    let processes: Vec<String> = listed.into_iter().map(|(_, p)| p).collect();
    let processes = processes.join(" ");
    spool.wait_for("the processes in the GPU log", 10.0, || {
        fs::read_to_string(&log).is_ok_and(|text| {
            text.lines().any(|row| {
                row.contains(",utilization,0.0000,,,15000,40960,60.0,1000.0,61,1410,")
                    && row.ends_with(&processes)
            })
        })
    });
    release(&spool, "small");
    release(&spool, "large");
    spool.wait_count("done", 2, 20.0);
    assert_eq!(run_file(&spool, "-small", "exit.json")["peak_mib"], 3000);
    assert_eq!(run_file(&spool, "-large", "exit.json")["peak_mib"], 5000);
    // The same command again, without a declaration: history estimates
    // it from the peak NVML showed (3000 MiB + 256 MiB margin).
    let text = waiting_job(&spool, "small", "1G").replace("memory: 1G\n", "");
    let again = spool.submit("again.rad", &text);
    spool.wait_count("done", 3, 20.0);
    let (_, dir) = spool.find(&again).unwrap();
    let record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("task.json")).unwrap()).unwrap();
    assert_eq!(record["estimate"]["source"], "history", "{record}");
    assert_eq!(record["estimate"]["need"], 3000 + 256, "{record}");
}

#[test]
fn a_failing_gpu_is_reported_once_skipped_and_used_again_when_it_recovers() {
    let (spool, mut nvml) = start("", vec![FakeGpu::a100(0), FakeGpu::a100(10_000)]);
    nvml.change(|gpus| gpus[0].fail = true);
    spool.wait_for("the error in the status", 10.0, || {
        status(&spool)["gpus"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("fell off the bus"))
    });
    // GPU 0 has the most free memory, but cannot be read.
    spool.submit("a.rad", "name: a\nmemory: 1G\ntrue\n");
    spool.wait_count("done", 1, 20.0);
    assert_eq!(gpus_of(&spool, "-a"), serde_json::json!([1]));
    let log = spool.daemon_log();
    assert_eq!(
        log.matches("GPU 0: NVML cannot read its memory: device fell off the bus")
            .count(),
        1,
        "once, however many readings fail:\n{log}"
    );
    let text = stdout(&spool.carma().arg("status").output().unwrap());
    assert!(
        text.contains("ERROR: NVML cannot read its memory"),
        "{text}"
    );
    nvml.change(|gpus| gpus[0].fail = false);
    spool.wait_for("the recovery", 10.0, || {
        status(&spool)["gpus"][0]["error"].is_null()
    });
    assert!(spool.daemon_log().contains("GPU 0: reads again"));
    spool.submit("b.rad", "name: b\nmemory: 1G\ntrue\n");
    spool.wait_count("done", 2, 20.0);
    assert_eq!(gpus_of(&spool, "-b"), serde_json::json!([0]));
}

#[test]
fn a_gpu_unreadable_at_start_keeps_its_index_and_is_never_used() {
    // Jobs name GPUs by NVML index: GPU 1 stays GPU 1 although GPU 0
    // cannot even say its name.
    let mut lost = FakeGpu::a100(0);
    lost.fail = true;
    let (spool, _nvml) = start("", vec![lost, FakeGpu::a100(10_000)]);
    spool.submit("a.rad", "name: a\nmemory: 1G\ntrue\n");
    spool.wait_count("done", 1, 20.0);
    assert_eq!(gpus_of(&spool, "-a"), serde_json::json!([1]));
    let status = status(&spool);
    assert_eq!(status["gpus"][1]["uuid"], "GPU-00000001-fake");
    let error = status["gpus"][0]["error"].as_str().unwrap();
    assert!(error.contains("restart"), "{error}");
    assert!(
        spool
            .daemon_log()
            .contains("GPU 0: NVML cannot read its UUID"),
        "{}",
        spool.daemon_log()
    );
}

#[test]
fn a_mig_gpu_without_instances_is_not_placed_on() {
    // NVML GPU 0 is in MIG mode with no instances: carma has nothing to
    // place on there, says so, and numbers NVML GPU 1 its GPU 0, which
    // CUDA still knows as device 1.
    let mut mig = FakeGpu::a100(0);
    mig.mig = true;
    let (spool, _nvml) = start("", vec![mig, FakeGpu::a100(10_000)]);
    spool.wait_for("one GPU in the status", 10.0, || {
        status(&spool)["gpus"].as_array().map(Vec::len) == Some(1)
    });
    assert_eq!(status(&spool)["gpus"][0]["uuid"], "GPU-00000001-fake");
    spool.submit("a.rad", &waiting_job(&spool, "a", "1G"));
    wait_running(&spool, "-a");
    assert_eq!(gpus_of(&spool, "-a"), serde_json::json!([0]));
    let env = run_file(&spool, "-a", "launch.json")["env"].clone();
    let visible = env
        .as_array()
        .unwrap()
        .iter()
        .find(|pair| pair[0] == "CUDA_VISIBLE_DEVICES")
        .map(|pair| pair[1].clone());
    assert_eq!(visible, Some(serde_json::json!("1")), "{env}");
    release(&spool, "a");
    spool.wait_count("done", 1, 20.0);
    assert!(
        spool
            .daemon_log()
            .contains("MIG mode is on but it has no MIG instances"),
        "{}",
        spool.daemon_log()
    );
}

#[test]
fn the_report_takes_energy_from_the_counter_across_a_reset() {
    // Power reads 0 W, so every joule in the report comes from the
    // counter: +2000 J, then a driver reload (the counter restarts near
    // 0, which must not subtract), then +500 J.
    let mut gpu = FakeGpu::a100(0);
    gpu.power_w = Some(0.0);
    gpu.energy_j = Some(5000.0);
    let (spool, mut nvml) = start("", vec![gpu]);
    let samples = spool.root.join("gpu-log.csv");
    // Waits for a row with `joules` written after the call.
    let logged = |joules: &str| {
        let rows = |s: &str| s.lines().count();
        let before = fs::read_to_string(&samples).map_or(0, |s| rows(&s));
        let row_end = format!(",0.0,{joules},61,1410,\n");
        spool.wait_for(&format!("a sample with {joules} J"), 10.0, || {
            fs::read_to_string(&samples).is_ok_and(|s| rows(&s) > before && s.ends_with(&row_end))
        });
    };
    spool.submit("e.rad", &waiting_job(&spool, "e", "1G"));
    wait_running(&spool, "-e");
    logged("5000.0");
    for joules in [7000.0, 100.0, 600.0] {
        nvml.change(|gpus| gpus[0].energy_j = Some(joules));
        logged(&format!("{joules:.1}"));
    }
    release(&spool, "e");
    spool.wait_count("done", 1, 20.0);
    let out = spool.carma().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let energy_mj = report["energy_mj"].as_f64().unwrap();
    assert!(
        (energy_mj - 0.0025).abs() < 1e-9,
        "{report}\n{}\n{}",
        fs::read_to_string(&samples).unwrap(),
        fs::read_to_string(spool.find("-e").unwrap().1.join("task.json")).unwrap()
    );
}

#[test]
fn without_a_usable_nvml_the_daemon_exits_and_says_what_to_do() {
    let spool = Spool::new("");
    let missing = spool.dir.path().join("no/libnvidia-ml.so");
    let out = spool
        .carma()
        .arg("daemon")
        .env("CARMA_NVML_LIB", &missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "EX_CONFIG: not restarted");
    let err = stderr(&out);
    assert!(
        err.contains(&format!("cannot load NVML from {}", missing.display()))
            && err.contains("--simulate-gpus"),
        "{err}"
    );
    // The configuration names the library when the environment does not.
    fs::write(
        &spool.config,
        format!("[gpu]\nnvml_library = \"{}\"\n", missing.display()),
    )
    .unwrap();
    let out = spool
        .carma()
        .arg("daemon")
        .env_remove("CARMA_NVML_LIB")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    assert!(stderr(&out).contains(&missing.display().to_string()));
    // A library but no driver.
    let data = spool.dir.path().join("fake-nvml.txt");
    fs::write(&data, "driver_not_loaded 1\n").unwrap();
    let out = spool
        .carma()
        .arg("daemon")
        .env("CARMA_NVML_LIB", fake_library())
        .env("CARMA_FAKE_NVML", &data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let err = stderr(&out);
    assert!(
        err.contains("NVIDIA driver is not loaded") && err.contains("--simulate-gpus"),
        "{err}"
    );
}
