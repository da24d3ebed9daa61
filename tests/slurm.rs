//! `carma slurm submit` against a real Slurm: munge, slurmctld and slurmd
//! (Debian's 22.05 packages, installed with apt-get when missing) run a
//! one-node cluster in a temporary directory, with two fake GPUs (device
//! nodes, `AutoDetect=off`) of 40 shards each. Needs root; stopped by pid
//! when the test ends. Run alone with `cargo test --test slurm`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CARMA: &str = env!("CARGO_BIN_EXE_carma");

/// The cluster's daemons, stopped (by pid) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
}

impl Cluster {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn conf(&self) -> PathBuf {
        self.path("etc/slurm.conf")
    }

    fn start() -> Cluster {
        install();
        let dir = tempfile::Builder::new()
            .prefix("carma-slurm")
            .tempdir()
            .unwrap();
        // slurmd checks the spool directory's path down from /: tempdir
        // gives 0700, which Slurm's job steps (run as the user) must pass.
        for sub in ["etc", "ctld", "d", "log", "run", "jobs"] {
            fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        run("chmod", &["-R", "a+rx", dir.path().to_str().unwrap()]);
        let cluster = Cluster { dir };
        // slurmd knows its node by the short host name.
        let host = nix::unistd::gethostname().unwrap();
        let host = host.to_string_lossy();
        let host = host.split('.').next().unwrap_or_default();
        let mut devices = Vec::new();
        for i in 0..2 {
            let device = format!("/dev/carma-fakegpu{i}");
            if !Path::new(&device).exists() {
                run("mknod", &[&device, "c", "1", "3"]);
            }
            devices.push(device);
        }
        let p = |name: &str| cluster.path(name).display().to_string();
        let key = cluster.path("run/munge.key");
        fs::write(&key, [7u8; 1024]).unwrap();
        run("chown", &["munge:munge", key.to_str().unwrap()]);
        run("chmod", &["400", key.to_str().unwrap()]);
        let socket = p("run/munge.socket");
        run(
            "munged",
            &[
                "--force",
                &format!("--key-file={}", key.display()),
                &format!("--socket={socket}"),
                &format!("--pid-file={}", p("run/munged.pid")),
                &format!("--log-file={}", p("log/munged.log")),
                &format!("--seed-file={}", p("run/munge.seed")),
            ],
        );
        fs::write(
            cluster.conf(),
            format!(
                "ClusterName=carmatest\nSlurmctldHost={host}\nSlurmUser=root\n\
                 SlurmctldPort=26817\nSlurmdPort=26818\nAuthType=auth/munge\n\
                 AuthInfo=socket={socket}\nStateSaveLocation={}\nSlurmdSpoolDir={}\n\
                 SlurmctldPidFile={}\nSlurmdPidFile={}\nSlurmctldLogFile={}\nSlurmdLogFile={}\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
                 JobAcctGatherType=jobacct_gather/none\nSwitchType=switch/none\nMpiDefault=none\n\
                 SchedulerType=sched/backfill\nSelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_Core\nGresTypes=gpu,shard\nJobSubmitPlugins=lua\n\
                 SlurmdParameters=config_overrides\nReturnToService=2\nMinJobAge=600\n\
                 NodeName={host} CPUs=16 Boards=1 SocketsPerBoard=1 CoresPerSocket=16 \
                 ThreadsPerCore=1 RealMemory=1000 Gres=gpu:2,shard:80 State=UNKNOWN\n\
                 PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                p("ctld"),
                p("d"),
                p("run/slurmctld.pid"),
                p("run/slurmd.pid"),
                p("log/slurmctld.log"),
                p("log/slurmd.log"),
            ),
        )
        .unwrap();
        let mut gres = String::from("AutoDetect=off\n");
        for device in &devices {
            gres += &format!("Name=gpu File={device}\n");
        }
        for device in &devices {
            gres += &format!("Name=shard Count=40 File={device}\n");
        }
        fs::write(cluster.path("etc/gres.conf"), gres).unwrap();
        // The shipped hook, calling this build's carma.
        let hook = include_str!("../examples/slurm/job_submit.lua").replace(
            "local CARMA_PATHS = { \"/usr/local/bin/carma\", \"/usr/bin/carma\" }",
            &format!("local CARMA_PATHS = {{ \"{CARMA}\" }}"),
        );
        assert!(hook.contains(CARMA), "the hook's carma was not replaced");
        fs::write(cluster.path("etc/job_submit.lua"), hook).unwrap();
        cluster.slurm("slurmctld", &["-i"]);
        cluster.slurm("slurmd", &[]);
        cluster.wait("the node to be idle", || {
            let out = cluster.slurm("sinfo", &["-h", "-o", "%t"]);
            String::from_utf8_lossy(&out).trim() == "idle"
        });
        cluster
    }

    /// Runs a Slurm program against this cluster; its stdout.
    fn slurm(&self, program: &str, args: &[&str]) -> Vec<u8> {
        let mut command = Command::new(program);
        command.args(args).env("SLURM_CONF", self.conf());
        stdout_of(&mut command, &self.logs())
    }

    fn logs(&self) -> String {
        ["log/slurmctld.log", "log/slurmd.log"]
            .iter()
            .map(|l| fs::read_to_string(self.path(l)).unwrap_or_default())
            .map(|t| t.lines().rev().take(15).collect::<Vec<_>>().join("\n"))
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    fn wait(&self, what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Writes `jobs/NAME.rad` and submits it; the Slurm job id.
    fn submit(&self, name: &str, rad: &str) -> String {
        let path = self.path(&format!("jobs/{name}.rad"));
        fs::write(&path, rad).unwrap();
        let path = path.to_str().unwrap();
        let stdout = String::from_utf8(self.slurm(CARMA, &["slurm", "submit", path])).unwrap();
        let id = stdout.trim().to_string();
        assert!(id.parse::<u64>().is_ok(), "the job id alone: {stdout:?}");
        id
    }

    fn job(&self, id: &str) -> String {
        String::from_utf8(self.slurm("scontrol", &["show", "job", id])).unwrap()
    }

    fn output(&self, id: &str) -> String {
        fs::read_to_string(self.path(&format!("jobs/slurm-{id}.out"))).unwrap_or_default()
    }

    fn wait_output(&self, id: &str, text: &str) -> String {
        self.wait(&format!("job {id} to print {text:?}"), || {
            self.output(id).contains(text)
        });
        self.output(id)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first: a job step (slurmstepd) outlives slurmd.
        let _ = Command::new("scancel")
            .args(["--partition", "gpu"])
            .env("SLURM_CONF", self.conf())
            .status();
        std::thread::sleep(Duration::from_millis(500));
        for pid in ["run/slurmd.pid", "run/slurmctld.pid", "run/munged.pid"] {
            if let Ok(pid) = fs::read_to_string(self.path(pid)) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        // The daemons hold files in the directory until they are gone.
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn run(program: &str, args: &[&str]) -> Vec<u8> {
    stdout_of(Command::new(program).args(args), "")
}

/// What `command` prints on stdout; a failure panics with its stderr and
/// `context`.
fn stdout_of(command: &mut Command, context: &str) -> Vec<u8> {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}\n{context}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Installs Debian's Slurm and munge when they are missing.
fn install() {
    let have = |p: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ["slurmctld", "slurmd", "sbatch", "munged"]
        .iter()
        .all(|p| have(p))
    {
        return;
    }
    // Services must not start themselves from the package scripts.
    let policy = Path::new("/usr/sbin/policy-rc.d");
    if !policy.exists() {
        fs::write(policy, "#!/bin/sh\nexit 101\n").unwrap();
        run("chmod", &["+x", "/usr/sbin/policy-rc.d"]);
    }
    run("apt-get", &["update", "-qq"]);
    stdout_of(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(["slurmctld", "slurmd", "slurm-client", "munge"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
        "",
    );
}

/// A job that prints its GPU and waits for `go` (so that jobs meant to
/// run together are seen together).
fn waiting_job(memory: &str, go: &Path) -> String {
    format!(
        "memory: {memory}\ntime: 2m\necho CVD=$CUDA_VISIBLE_DEVICES\n\
         for i in $(seq 300); do [ -e {} ] && exit 0; sleep 0.2; done; exit 1\n",
        go.display()
    )
}

fn device(output: &str) -> String {
    output
        .lines()
        .find_map(|l| l.strip_prefix("CVD="))
        .unwrap_or_else(|| panic!("no CVD= line in {output:?}"))
        .to_string()
}

#[test]
#[ignore = "needs root, Slurm's packages (apt-get) and device nodes (mknod): .ci/run runs it"]
fn jobs_share_gpus_by_shards_and_oom_jobs_come_back_with_a_whole_gpu() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the Slurm test installs and starts daemons: run it as root (.ci/run does)"
    );
    let cluster = Cluster::start();
    let go = cluster.path("jobs/go");

    // Two 10 GiB jobs run at once on one GPU; a 40 GiB job gets the other
    // GPU, all of it.
    let a = cluster.submit("ten-a", &waiting_job("10 GiB", &go));
    let b = cluster.submit("ten-b", &waiting_job("10 GiB", &go));
    let (out_a, out_b) = (
        cluster.wait_output(&a, "CVD="),
        cluster.wait_output(&b, "CVD="),
    );
    assert_eq!(device(&out_a), device(&out_b), "one GPU for both");
    for id in [&a, &b] {
        let job = cluster.job(id);
        assert!(job.contains("JobState=RUNNING"), "{job}");
        assert!(
            job.contains("TresPerNode=gres:shard:12"),
            "10 GiB + placement.margin_mib (2 GiB): {job}"
        );
    }
    let whole = cluster.submit("forty", &waiting_job("40 GiB", &go));
    let out_whole = cluster.wait_output(&whole, "CVD=");
    assert!(cluster.job(&whole).contains("TresPerNode=gres:shard:40"));
    assert_ne!(device(&out_whole), device(&out_a), "the other GPU");
    fs::write(&go, "").unwrap();

    // A time limit is Slurm's.
    assert!(
        cluster.job(&a).contains("TimeLimit=00:02:00"),
        "{}",
        cluster.job(&a)
    );

    // An OOM crash on a share is resubmitted with a whole GPU, and the
    // second run (which sees all 40 shards) succeeds.
    let oom = cluster.submit(
        "oom",
        "memory: 10 GiB\n\
         if ! scontrol show job $SLURM_JOB_ID | grep -q gres:shard:40; then \
         echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1; fi\n\
         echo second run\n",
    );
    let first = cluster.wait_output(&oom, "resubmitted with a whole GPU as Slurm job");
    let retry = first
        .split("as Slurm job ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    cluster.wait_output(&retry, "second run");
    let job = cluster.job(&retry);
    assert!(job.contains("TresPerNode=gres:shard:40"), "{job}");
    assert!(
        job.contains(&format!("after Slurm job {oom} ran out of memory")),
        "{job}"
    );
    assert!(cluster.job(&oom).contains("JobState=FAILED"));

    // Plain sbatch with a `#CARMA rad=` line: the shipped job_submit.lua
    // asks carma for the estimate and fills in the shards.
    fs::write(cluster.path("jobs/plain.rad"), "memory: 10 GiB\ntrue\n").unwrap();
    let jobs = cluster.path("jobs");
    let wrap = "#CARMA rad=plain.rad\ntrue";
    let args = [
        "--parsable",
        "--chdir",
        jobs.to_str().unwrap(),
        "--wrap",
        wrap,
    ];
    let id = String::from_utf8(cluster.slurm("sbatch", &args)).unwrap();
    let job = cluster.job(id.trim());
    assert!(job.contains("TresPerNode=gres:shard:12"), "{job}");
}

/// Runs the shipped job_submit.lua's `slurm_job_submit` on a job whose
/// script names `rad`, with carma looked for at `carma`, under lua5.4 and
/// a stand-in for Slurm's `slurm` table; what it set and told the user.
fn run_hook(carma: &str, dir: &Path, rad: &str) -> String {
    run_hook_times(carma, dir, rad, 1)
}

/// [`run_hook`] on `times` jobs one after another, as one slurmctld would.
fn run_hook_times(carma: &str, dir: &Path, rad: &str, times: usize) -> String {
    let me = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    run_hook_as(carma, dir, rad, times, me)
}

/// [`run_hook_times`] for jobs the user `(uid, gid)` submitted.
fn run_hook_as(carma: &str, dir: &Path, rad: &str, times: usize, (uid, gid): (u32, u32)) -> String {
    let hook = include_str!("../examples/slurm/job_submit.lua").replace(
        "local CARMA_PATHS = { \"/usr/local/bin/carma\", \"/usr/bin/carma\" }",
        &format!("local CARMA_PATHS = {{ \"{carma}\" }}"),
    );
    assert!(hook.contains(carma), "the hook's carma was not replaced");
    let file = dir.join("job_submit.lua");
    fs::write(&file, hook).unwrap();
    let driver = format!(
        r##"slurm = {{ SUCCESS = 0,
  log_user = function(...) print("user: " .. string.format(...)) end,
  log_error = function(...) print("error: " .. string.format(...)) end }}
-- One minute throughout, whenever the test runs.
os.time = function() return 0 end
dofile("{file}")
for _ = 1, {times} do
  local job = {{ script = "#!/bin/bash\n#CARMA rad={rad}\ntrue\n", work_dir = "{dir}", group_id = {gid} }}
  assert(slurm_job_submit(job, nil, {uid}) == slurm.SUCCESS)
  print("tres: " .. tostring(job.tres_per_node))
end
"##,
        dir = dir.display(),
        file = file.display(),
        uid = uid,
        gid = gid,
    );
    let out = Command::new("lua5.4")
        .args(["-e", &driver])
        .output()
        .expect("lua5.4 (`.ci/run` installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "needs lua5.4, a system package (.ci/run installs it)"]
fn the_job_submit_hook_sizes_jobs_and_says_why_when_it_cannot() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("plain.rad"), "memory: 10 GiB\ntrue\n").unwrap();
    fs::write(dir.path().join("bad.rad"), "memroy: 10G\ntrue\n").unwrap();
    let said = run_hook(CARMA, dir.path(), "plain.rad");
    assert!(said.contains("tres: gres:shard:12"), "{said}");
    // A .rad carma cannot read, or no carma at all: the job passes as it
    // was, and the submitter and the log are told why.
    let said = run_hook(CARMA, dir.path(), "bad.rad");
    assert!(said.contains("tres: nil"), "{said}");
    assert!(
        said.contains("user: carma: ") && said.contains("failed (run it to see why)"),
        "{said}"
    );
    // Only a .rad: a device's open acts, and slurmctld may run as root.
    let said = run_hook(CARMA, dir.path(), "/dev/watchdog");
    assert!(
        said.contains("tres: nil") && said.contains("expected a path ending in .rad"),
        "{said}"
    );
    // A path's C1 controls and bidirectional overrides reach no log line.
    let said = run_hook(CARMA, dir.path(), "/tmp/x\u{9b}2J\u{202e}dar.y");
    assert!(said.contains("/tmp/x?2J?dar.y"), "{said}");
    // No user holds slurmctld for long: 20 estimates a minute each.
    let said = run_hook_times(CARMA, dir.path(), "plain.rad", 21);
    assert_eq!(said.matches("tres: gres:shard:12").count(), 20, "{said}");
    assert!(
        said.contains("more than 20 estimates asked for within a minute"),
        "{said}"
    );
    // Run as root, the hook estimates as the submitter: what nobody may
    // read is not estimated, what they may is.
    if nix::unistd::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt;
        let nobody = (65534, 65534);
        fs::write(dir.path().join("secret.rad"), "memory: 10 GiB\ntrue\n").unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(
            dir.path().join("secret.rad"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let said = run_hook_as(CARMA, dir.path(), "secret.rad", 1, nobody);
        assert!(
            said.contains("tres: nil") && said.contains("failed"),
            "{said}"
        );
        let said = run_hook_as(CARMA, dir.path(), "plain.rad", 1, nobody);
        assert!(said.contains("tres: gres:shard:12"), "{said}");
    }
    let said = run_hook("/nonexistent/carma", dir.path(), "plain.rad");
    assert!(said.contains("tres: nil"), "{said}");
    assert!(
        said.contains("carma is not installed (looked for /nonexistent/carma)")
            && said.contains("error: carma job_submit: "),
        "{said}"
    );
}
