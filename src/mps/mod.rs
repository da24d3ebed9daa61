//! NVIDIA MPS: starting and stopping the control daemon, and what each job
//! needs to be its client.
//!
//! Without MPS, CUDA time-slices the processes sharing a GPU; with it their
//! kernels run side by side, which is what makes collocation pay. carma
//! owns the control daemon's lifetime (one per machine, started with the
//! configured pipe and log directories) so that the jobs it launches and
//! the daemon agree on where it is. A per-job memory cap turns an
//! estimation error into an OOM of the job that was misestimated, which
//! carma then recovers, instead of an OOM of its neighbours.

mod compute_mode;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use thiserror::Error;

/// The file in the spool that keeps the GPUs' compute modes from before
/// carma switched them, until they are restored.
pub const SAVED_MODES: &str = "mps-compute-modes.json";

/// `[mps]` in the configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MpsConfig {
    pub enabled: bool,
    pub control: PathBuf,
    pub pipe_dir: PathBuf,
    pub log_dir: PathBuf,
    pub limit_memory: bool,
    pub active_thread_percentage: u32,
    pub exclusive_process: bool,
    pub smi: PathBuf,
}

impl MpsConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.active_thread_percentage > 100 {
            return Err(format!(
                "mps.active_thread_percentage = {}: expected 0 (unset) to 100",
                self.active_thread_percentage
            ));
        }
        Ok(())
    }

    /// What a job placed on `gpus` GPUs with `limit_mib` granted per GPU
    /// needs in its environment to be an MPS client.
    pub fn job_env(&self, gpus: usize, limit_mib: Option<u64>) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                self.pipe_dir.display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_string(),
                self.log_dir.display().to_string(),
            ),
        ];
        if let (true, Some(mib)) = (self.limit_memory, limit_mib) {
            // Ordinals as the job sees its devices: 0..n in
            // CUDA_VISIBLE_DEVICES order.
            let limits: Vec<String> = (0..gpus).map(|i| format!("{i}={mib}M")).collect();
            env.push((
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                limits.join(","),
            ));
        }
        if self.active_thread_percentage > 0 {
            env.push((
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".to_string(),
                self.active_thread_percentage.to_string(),
            ));
        }
        env
    }
}

/// MPS could not be set up.
#[derive(Debug, Error)]
pub enum MpsError {
    #[error("cannot create {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{why}: the MPS pipes and logs must be in directories only root can change \
         (set [mps] pipe_dir and log_dir, e.g. /run/carma/mps)"
    )]
    Open { why: String },
    #[error("cannot run {}: {source}", control.display())]
    Run {
        control: PathBuf,
        source: std::io::Error,
    },
    #[error("{} -d failed ({status}): {stderr}", control.display())]
    Failed {
        control: PathBuf,
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// The MPS control daemon carma started (or found running).
#[derive(Debug)]
pub struct Mps {
    config: MpsConfig,
    /// The GPUs carma put in EXCLUSIVE_PROCESS mode, to be put back.
    modes: Option<compute_mode::ComputeModes>,
}

impl Mps {
    /// Starts the control daemon (`control -d`) with the configured
    /// directories, first putting the GPUs `uuids` in EXCLUSIVE_PROCESS
    /// mode when configured (their modes saved in `saved_modes`). A
    /// control daemon that already runs on these directories is used as it
    /// is.
    pub fn start(
        config: &MpsConfig,
        saved_modes: &Path,
        uuids: &[String],
    ) -> Result<Mps, MpsError> {
        for dir in [&config.pipe_dir, &config.log_dir] {
            std::fs::create_dir_all(dir).map_err(|source| MpsError::Dir {
                path: dir.clone(),
                source,
            })?;
            // A directory a user made first (CUDA's default is in /tmp)
            // would hand them the control pipe, its pid file and root's
            // log writes.
            crate::safe::private_dir(dir).map_err(|why| MpsError::Open { why })?;
        }
        let modes = config
            .exclusive_process
            .then(|| compute_mode::ComputeModes::take(&config.smi, saved_modes, uuids));
        let mps = Mps {
            config: config.clone(),
            modes,
        };
        if mps.running() {
            log::info!(
                "MPS control daemon already running on {}",
                config.pipe_dir.display()
            );
            return Ok(mps);
        }
        let out = mps
            .command()
            .arg("-d")
            .stdin(Stdio::null())
            .output()
            .map_err(|source| MpsError::Run {
                control: config.control.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(MpsError::Failed {
                control: config.control.clone(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        log::info!(
            "MPS control daemon started (pipes in {}, logs in {})",
            config.pipe_dir.display(),
            config.log_dir.display()
        );
        Ok(mps)
    }

    /// Asks the control daemon to quit (`echo quit | control`): it stops
    /// its servers once their clients are gone. Then the GPUs get their
    /// compute modes back.
    pub fn stop(&self) {
        self.quit();
        if let Some(modes) = &self.modes {
            modes.restore();
        }
    }

    fn quit(&self) {
        let sent = self
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .and_then(|mut child| {
                if let Some(mut stdin) = child.stdin.take() {
                    stdin.write_all(b"quit\n")?;
                }
                child.wait()
            });
        match sent {
            Ok(status) if status.success() => log::info!("MPS control daemon asked to quit"),
            Ok(status) => log::warn!(
                "MPS quit: {} exited with {status}",
                self.config.control.display()
            ),
            Err(e) => log::warn!(
                "MPS quit: cannot run {}: {e}",
                self.config.control.display()
            ),
        }
    }

    /// Whether a control daemon serves the configured pipe directory: its
    /// pid file names a live process of this daemon's user that runs the
    /// control program. After an unclean end the pid may be anyone's: a
    /// user who took it would otherwise keep carma from starting MPS, and
    /// so would any process of root's (an `sshd` child a user's connection
    /// makes), and jobs would be pointed at a pipe nobody serves.
    fn running(&self) -> bool {
        let me = nix::unistd::geteuid().as_raw();
        let Some(pid) =
            std::fs::read_to_string(self.config.pipe_dir.join("nvidia-cuda-mps-control.pid"))
                .ok()
                .and_then(|pid| pid.trim().parse::<u32>().ok())
        else {
            return false;
        };
        // The kernel keeps a program's first 15 bytes of name.
        let program = self
            .config
            .control
            .file_name()
            .map(std::os::unix::ffi::OsStrExt::as_bytes);
        let runs_it = std::fs::read(format!("/proc/{pid}/comm")).is_ok_and(|comm| {
            program.is_some_and(|p| comm.strip_suffix(b"\n") == Some(&p[..p.len().min(15)]))
        });
        runs_it && crate::procfs::real_uid(pid) == Some(me)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.config.control);
        c.env("CUDA_MPS_PIPE_DIRECTORY", &self.config.pipe_dir)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.config.log_dir);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_file_naming_another_program_or_another_users_is_no_control_daemon() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let mut config = config();
        config.pipe_dir = dir.path().to_owned();
        let mps = Mps {
            config,
            modes: None,
        };
        let pid_file = dir.path().join("nvidia-cuda-mps-control.pid");
        assert!(!mps.running());
        // A program named as the control daemon is (`sleep` by that name).
        let control = dir.path().join("nvidia-cuda-mps-control");
        std::os::unix::fs::symlink("/bin/sleep", &control).unwrap();
        let start = |user: Option<u32>| {
            let mut command = std::process::Command::new(&control);
            command.arg("30");
            if let Some(uid) = user {
                command.uid(uid).gid(uid);
            }
            command.spawn().unwrap()
        };
        let mut mine = start(None);
        std::fs::write(&pid_file, format!("{}\n", mine.id())).unwrap();
        assert!(mps.running());
        // The old pid, now another program's of the same user (this test).
        std::fs::write(&pid_file, format!("{}\n", std::process::id())).unwrap();
        assert!(!mps.running());
        let _ = mine.kill();
        let _ = mine.wait();
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        // The old pid, now a user's process.
        let mut theirs = start(Some(65534));
        std::fs::write(&pid_file, format!("{}\n", theirs.id())).unwrap();
        assert!(!mps.running());
        let _ = theirs.kill();
        let _ = theirs.wait();
    }

    fn config() -> MpsConfig {
        crate::config::Config::load(None).unwrap().mps
    }

    #[test]
    fn jobs_get_the_pipes_and_a_memory_cap_per_visible_device() {
        let mut c = config();
        c.active_thread_percentage = 50;
        let env = c.job_env(2, Some(8192));
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("CUDA_MPS_PIPE_DIRECTORY"), Some("/run/carma/mps"));
        assert_eq!(
            get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
            Some("0=8192M,1=8192M")
        );
        assert_eq!(get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), Some("50"));
        // A whole-GPU placement is not capped; nor is anything when capping
        // is off.
        let env = c.job_env(1, None);
        assert!(
            env.iter()
                .all(|(k, _)| k != "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        );
        c.limit_memory = false;
        let env = c.job_env(1, Some(1024));
        assert!(
            env.iter()
                .all(|(k, _)| k != "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        );
    }
}
