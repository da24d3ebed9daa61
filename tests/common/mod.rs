//! What the daemon tests share: a temporary spool, a real `carma daemon` on
//! simulated GPUs, and ways to wait for what a user would look for.
#![allow(dead_code)] // Each test file uses its own part of this module.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub mod silent_fuse;

pub const CARMA: &str = env!("CARGO_BIN_EXE_carma");

/// Settings that make the daemon react quickly in tests.
pub const FAST_CONFIG: &str = "\
[placement]
smact_window_s = 1
reservation_ramp_s = 10

[daemon]
sample_interval_s = 0.1
metrics_interval_s = 0.5
cancel_grace_s = 1
# Tests (and CI) often run as root; their jobs are root's.
allow_root_jobs = true
";

/// A spool in a temporary directory, with at most one daemon at a time.
pub struct Spool {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub config: PathBuf,
    daemon: Option<Child>,
    gpus: String,
    /// Environment only the daemon gets.
    pub daemon_env: Vec<(String, String)>,
}

impl Spool {
    pub fn new(gpus: &str) -> Spool {
        Spool::with_config(gpus, "")
    }

    /// A spool whose daemon also gets `extra` configuration.
    pub fn with_config(gpus: &str, extra: &str) -> Spool {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("spool");
        let config = dir.path().join("carma.toml");
        fs::write(&config, merge_config(FAST_CONFIG, extra)).unwrap();
        Spool {
            dir,
            root,
            config,
            daemon: None,
            gpus: gpus.to_owned(),
            daemon_env: Vec::new(),
        }
    }

    pub fn carma(&self) -> Command {
        let mut c = Command::new(CARMA);
        c.env("CARMA_SPOOL", &self.root)
            .env("CARMA_CONFIG", &self.config)
            .env("RUST_LOG", "debug");
        c
    }

    /// The file the daemon's stderr goes to.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }

    /// Starts `carma daemon` on the spool's simulated GPUs and waits until
    /// it has written its status.
    pub fn start_daemon(&mut self) {
        let gpus = self.gpus.clone();
        self.start_daemon_with(&["--simulate-gpus", &gpus], &[]);
    }

    /// Starts `carma daemon` with `args` and extra environment (e.g. a fake
    /// NVML) and waits until it has written its status.
    pub fn start_daemon_with(&mut self, args: &[&str], env: &[(&str, &Path)]) {
        self.spawn(&[], args, env);
        self.wait_daemon_ready(20.0);
    }

    /// Starts `carma daemon` on the spool's simulated GPUs without waiting
    /// for its status: a daemon may be killed while it is still starting.
    pub fn spawn_daemon(&mut self) {
        self.spawn_daemon_wrapped(&[]);
    }

    /// Starts `carma daemon` on the spool's simulated GPUs through
    /// `wrapper`, a command that execs its arguments in its own process
    /// (e.g. `prlimit --nofile=40:4096 --`), so the child is the daemon.
    /// Does not wait for the daemon's status ([`Spool::wait_daemon_ready`]).
    pub fn spawn_daemon_wrapped(&mut self, wrapper: &[&str]) {
        let gpus = self.gpus.clone();
        self.spawn(wrapper, &["--simulate-gpus", &gpus], &[]);
    }

    /// `[wrapper...] carma daemon ARGS` with the spool's environment and
    /// its log appended to [`Spool::log_path`].
    fn spawn(&mut self, wrapper: &[&str], args: &[&str], env: &[(&str, &Path)]) {
        assert!(self.daemon.is_none(), "a daemon is already running");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(CARMA);
                c
            }
            None => Command::new(CARMA),
        };
        let child = command
            .env("CARMA_SPOOL", &self.root)
            .env("CARMA_CONFIG", &self.config)
            .env("RUST_LOG", "debug")
            .arg("daemon")
            .args(args)
            .envs(env.iter().copied())
            .envs(self.daemon_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
    }

    /// Waits until the running daemon has written its status.
    pub fn wait_daemon_ready(&self, seconds: f64) {
        let status = self.root.join("status.json");
        self.wait_for("the daemon's first status", seconds, || status.exists());
    }

    /// The running daemon's pid.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(Child::id)
    }

    /// How the daemon ended, if it has (`None` while it runs).
    pub fn daemon_exited(&mut self) -> Option<std::process::ExitStatus> {
        self.daemon.as_mut()?.try_wait().unwrap()
    }

    /// Sends `signal` to the daemon and waits for it to exit.
    pub fn stop_daemon(&mut self, signal: &str) -> std::process::ExitStatus {
        let mut child = self.daemon.take().expect("no daemon running");
        let pid = child.id().to_string();
        Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .unwrap();
        let status = child.wait().unwrap();
        let _ = fs::remove_file(self.root.join("status.json"));
        status
    }

    pub fn signal_daemon(&self, signal: &str) {
        let pid = self.daemon.as_ref().expect("no daemon").id().to_string();
        Command::new("kill")
            .args(["-s", signal, &pid])
            .status()
            .unwrap();
    }

    pub fn daemon_log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Fails, showing the whole log, unless the daemon logged `text`.
    pub fn assert_logged(&self, text: &str) {
        let log = self.daemon_log();
        assert!(log.contains(text), "{text:?} is not in the log:\n{log}");
    }

    /// Writes a job file into the test directory and returns its path.
    pub fn job(&self, file: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join("jobs").join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        path
    }

    /// `carma submit` of one file; returns the task's name.
    pub fn submit(&self, file: &str, text: &str) -> String {
        let path = self.job(file, text);
        let out = self.carma().arg("submit").arg(&path).output().unwrap();
        assert!(out.status.success(), "submit failed: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    /// Copies a file straight into `pending/`, as a user with `cp` would.
    pub fn drop_file(&self, file: &str, text: &str) {
        let path = self.job(file, text);
        fs::copy(&path, self.root.join("pending").join(file)).unwrap();
    }

    /// Task names in a state directory.
    pub fn tasks(&self, state: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.root.join(state))
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| {
                        !n.starts_with('.') && n.contains('-') && n.as_bytes()[0].is_ascii_digit()
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The task whose name ends with `stem`, in whatever state it is.
    pub fn find(&self, stem: &str) -> Option<(String, PathBuf)> {
        for state in ["pending", "running", "recovery", "done", "failed"] {
            for name in self.tasks(state) {
                if name.ends_with(stem) {
                    return Some((state.to_owned(), self.root.join(state).join(name)));
                }
            }
        }
        None
    }

    pub fn wait_for(&self, what: &str, seconds: f64, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        while Instant::now() < deadline {
            if ready() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "timed out after {seconds} s waiting for {what}\n--- daemon log ---\n{}",
            self.daemon_log()
        );
    }

    /// Waits until `count` tasks are in `state`.
    pub fn wait_count(&self, state: &str, count: usize, seconds: f64) {
        self.wait_for(&format!("{count} tasks in {state}/"), seconds, || {
            self.tasks(state).len() >= count
        });
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_jobs_of(&self.root);
        // A killed daemon leaves its jobs' cgroups.
        carma::cgroup::clear_for(&self.root);
    }
}

/// Kills every process whose environment points at this spool's simulated
/// GPUs, or that works in this test's directory: what a failed test may
/// leave behind.
fn kill_jobs_of(root: &Path) {
    let test_dir = root.parent().unwrap_or(root).to_owned();
    let needle = format!("CARMA_SIMGPU={}", root.display());
    let spool = format!("CARMA_SPOOL={}", root.display());
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let works_here =
            fs::read_link(entry.path().join("cwd")).is_ok_and(|d| d.starts_with(&test_dir));
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        if works_here
            || environ
                .split(|&b| b == 0)
                .any(|v| v.starts_with(needle.as_bytes()) || v == spool.as_bytes())
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

fn merge_config(base: &str, extra: &str) -> String {
    let mut table: toml::Table = base.parse().unwrap();
    let extra: toml::Table = extra.parse().unwrap();
    for (k, v) in extra {
        match (table.get_mut(&k), v) {
            (Some(toml::Value::Table(t)), toml::Value::Table(e)) => t.extend(e),
            (_, v) => {
                table.insert(k, v);
            }
        }
    }
    toml::to_string(&table).unwrap()
}

/// The visible entries of a directory, sorted (none if it is missing).
pub fn visible_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|e| {
            e.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// What `staging/` holds besides the daemon's lock and trash on its way
/// out: half-made tasks, which a finished run must not leave.
pub fn staging_leftovers(spool: &Path) -> Vec<String> {
    let mut left = visible_entries(&spool.join("staging"));
    left.retain(|e| e != "daemon.lock" && !e.starts_with("trash-"));
    left
}

/// Now, in Unix seconds (as `status.json` gives times).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Every path below `dir`, depth first, without following links.
pub fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(entry.path());
            }
            found.push(entry.path());
        }
    }
    found
}

/// Processes whose command line is exactly `sleep SECONDS`.
pub fn sleepers(seconds: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c == format!("sleep\0{seconds}\0").as_bytes())
        })
        .collect()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes an executable script (a fake `nvidia-smi`, MPS control, ...).
pub fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A keyed job that runs `carma fake-train`.
pub fn fake_job(name: &str, extra_directives: &str, mem: &str, secs: f64) -> String {
    format!(
        "name: {name}\n{extra_directives}{CARMA} fake-train --mem {mem} --secs {secs} --smact 0.3\n"
    )
}

/// An unprivileged account the tests act as (created once per machine).
#[derive(Debug, Clone)]
pub struct TestUser {
    pub name: &'static str,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

impl TestUser {
    /// Runs `script` with `sh -c` as this user (no other groups).
    pub fn run(&self, script: &str) -> Output {
        Command::new("setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--clear-groups", "sh", "-c", script])
            .env("HOME", &self.home)
            .output()
            .unwrap()
    }

    /// Runs `carma ARGS` as this user against `spool`.
    pub fn carma(&self, spool: &Spool, args: &str) -> Output {
        self.run(&format!(
            "CARMA_SPOOL={} CARMA_CONFIG={} {CARMA} {args}",
            spool.root.display(),
            spool.config.display()
        ))
    }
}

/// Two unprivileged users, alice and bob, made with `useradd` the first
/// time. Only root can: tests that call this are `#[ignore]`d with that
/// reason, and `.ci/run` runs them as root.
pub fn two_users() -> (TestUser, TestUser) {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test acts as two other users: run it as root (`.ci/run` does)"
    );
    // Test binaries run in parallel: one creates, the others wait.
    let lock = fs::File::create("/tmp/carma-test-users.lock").unwrap();
    fs2::FileExt::lock_exclusive(&lock).unwrap();
    let users = ["carma-alice", "carma-bob"].map(|name| {
        if nix::unistd::User::from_name(name).unwrap().is_none() {
            let status = Command::new("useradd")
                .args(["--system", "--user-group", "--no-create-home"])
                .args(["--home-dir", &format!("/tmp/{name}-home")])
                .args(["--shell", "/bin/sh", name])
                .status()
                .unwrap();
            assert!(status.success(), "useradd {name}");
        }
        let user = nix::unistd::User::from_name(name).unwrap().unwrap();
        TestUser {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            home: user.dir,
        }
    });
    let [alice, bob] = users;
    (alice, bob)
}

impl Spool {
    /// A spool that a root daemon serves and other users submit to: the
    /// test directory can be traversed by them, and each gets a directory
    /// of their own for job files.
    pub fn shared(gpus: &str, extra: &str) -> Spool {
        use std::os::unix::fs::PermissionsExt;
        let spool = Spool::with_config(gpus, extra);
        fs::set_permissions(spool.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&spool.config, fs::Permissions::from_mode(0o644)).unwrap();
        spool
    }

    /// Submits `files` (the first is the `.rad`) as `user` with `carma
    /// submit` from a directory of theirs, `dir`; returns the task's name.
    pub fn submit_as(&self, user: &TestUser, dir: &str, files: &[(&str, &str)]) -> String {
        let home = self.user_dir(user, dir, files);
        let out = user.carma(self, &format!("submit {}", home.join(files[0].0).display()));
        assert!(
            out.status.success(),
            "submit as {}: {}",
            user.name,
            stderr(&out)
        );
        stdout(&out).trim().to_owned()
    }

    /// [`Spool::submit_as`] of a job that a running daemon refuses as it
    /// takes it in: returns the task's name and what the command said.
    pub fn submit_refused_as(
        &self,
        user: &TestUser,
        dir: &str,
        files: &[(&str, &str)],
    ) -> (String, String) {
        let home = self.user_dir(user, dir, files);
        let out = user.carma(self, &format!("submit {}", home.join(files[0].0).display()));
        assert!(!out.status.success(), "submit succeeded: {}", stdout(&out));
        assert!(stderr(&out).contains("will not run"), "{}", stderr(&out));
        (stdout(&out).trim().to_owned(), stderr(&out))
    }

    /// A directory `name` in the test directory owned by `user`, holding
    /// the given files; returns its path.
    pub fn user_dir(&self, user: &TestUser, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.dir.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        for (file, text) in files {
            let path = dir.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
        }
        let status = Command::new("chown")
            .args(["-R", &format!("{}:{}", user.uid, user.gid)])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
        dir
    }
}

/// A copy of the fake conda installation (`tests/fake_conda`: `bin/conda`,
/// `etc/profile.d/conda.sh`, an environment `tf` whose `python` prints
/// its environment) at `prefix`.
pub fn fake_conda(prefix: &Path) {
    fn copy_tree(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for entry in fs::read_dir(from).unwrap().flatten() {
            let target = to.join(entry.file_name());
            match entry.file_type().unwrap().is_dir() {
                true => copy_tree(&entry.path(), &target),
                // fs::copy keeps the executable bits.
                false => drop(fs::copy(entry.path(), &target).unwrap()),
            }
        }
    }
    copy_tree(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_conda")),
        prefix,
    );
}
