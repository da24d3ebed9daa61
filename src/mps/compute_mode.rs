//! GPUs in EXCLUSIVE_PROCESS compute mode while carma's MPS runs.
//!
//! NVIDIA's MPS guide recommends it: in that mode only one process — the
//! MPS server — may hold a context on the GPU, so every CUDA program goes
//! through MPS (and its per-client limits) instead of beside it. Compute
//! modes are the machine's, not carma's: the modes found are saved in the
//! spool before anything changes and put back when carma stops MPS, also
//! after a crash (a restarted daemon restores what the first one saved,
//! not the EXCLUSIVE_PROCESS it finds). Modes are read and set with
//! `nvidia-smi`, as an administrator would; a GPU whose mode cannot be set
//! is logged and used as it is, since MPS works without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::spool::record::read_state;
use crate::spool::write_durable;

/// The mode MPS wants, as `nvidia-smi -c` spells it.
const EXCLUSIVE_PROCESS: &str = "EXCLUSIVE_PROCESS";

/// The GPUs carma switched, and the mode each had before.
#[derive(Debug)]
pub struct ComputeModes {
    smi: PathBuf,
    /// Where the original modes are kept until restored.
    saved: PathBuf,
    /// GPU UUID -> original mode, as `nvidia-smi -c` takes it.
    original: BTreeMap<String, String>,
}

impl ComputeModes {
    /// Switches the GPUs `uuids` to EXCLUSIVE_PROCESS with `smi`, first
    /// saving their modes in `saved` (unless an earlier run's file is
    /// there: its modes are the machine's real ones).
    pub fn take(smi: &Path, saved: &Path, uuids: &[String]) -> ComputeModes {
        let mut original: BTreeMap<String, String> = match read_state(saved) {
            Ok(modes) => {
                log::info!(
                    "compute modes saved by an earlier run found in {}; they will be restored",
                    saved.display()
                );
                modes
            }
            Err(_) => match query(smi) {
                Ok(found) => found
                    .into_iter()
                    .filter(|(uuid, _)| uuids.contains(uuid))
                    .collect(),
                Err(e) => {
                    log::warn!("cannot read compute modes: {e}; GPUs stay in the modes they have");
                    BTreeMap::new()
                }
            },
        };
        let modes = ComputeModes {
            smi: smi.to_owned(),
            saved: saved.to_owned(),
            original: BTreeMap::new(),
        };
        let json = serde_json::to_vec(&original).unwrap_or_default();
        if let Err(e) = write_durable(saved, &json) {
            log::warn!(
                "cannot save compute modes in {}: {e}; GPUs stay in the modes they have",
                saved.display()
            );
            return modes;
        }
        original.retain(|uuid, mode| {
            if mode == EXCLUSIVE_PROCESS {
                return true;
            }
            match modes.set(uuid, EXCLUSIVE_PROCESS) {
                Ok(()) => {
                    log::info!("{uuid}: compute mode {mode} -> {EXCLUSIVE_PROCESS} for MPS");
                    true
                }
                Err(e) => {
                    log::warn!("{uuid}: cannot set {EXCLUSIVE_PROCESS} ({e}); left {mode}");
                    false
                }
            }
        });
        ComputeModes { original, ..modes }
    }

    /// Puts every GPU back in its original mode and forgets the saved
    /// modes once all are back.
    pub fn restore(&self) {
        let mut all = true;
        for (uuid, mode) in &self.original {
            if mode == EXCLUSIVE_PROCESS {
                continue;
            }
            match self.set(uuid, mode) {
                Ok(()) => log::info!("{uuid}: compute mode back to {mode}"),
                Err(e) => {
                    log::warn!("{uuid}: cannot restore compute mode {mode}: {e}");
                    all = false;
                }
            }
        }
        if all {
            let _ = std::fs::remove_file(&self.saved);
        }
    }

    fn set(&self, uuid: &str, mode: &str) -> Result<(), String> {
        run(Command::new(&self.smi).args(["-i", uuid, "-c", mode])).map(drop)
    }
}

/// Every GPU's compute mode: `nvidia-smi --query-gpu=uuid,compute_mode`.
fn query(smi: &Path) -> Result<BTreeMap<String, String>, String> {
    let out =
        run(Command::new(smi).args(["--query-gpu=uuid,compute_mode", "--format=csv,noheader"]))?;
    parse_modes(&out)
}

/// `GPU-1234, Default` lines; modes as `nvidia-smi -c` takes them.
fn parse_modes(text: &str) -> Result<BTreeMap<String, String>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (uuid, mode) = line
                .split_once(',')
                .ok_or_else(|| format!("unexpected nvidia-smi line {line:?}"))?;
            let mode = mode.trim().to_ascii_uppercase().replace(' ', "_");
            match mode.as_str() {
                "DEFAULT" | "EXCLUSIVE_PROCESS" | "PROHIBITED" => {
                    Ok((uuid.trim().to_owned(), mode))
                }
                _ => Err(format!("unknown compute mode in {line:?}")),
            }
        })
        .collect()
}

/// Runs a command to its end; its stdout, or why it failed.
fn run(command: &mut Command) -> Result<String, String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} failed ({}): {}",
            command.get_program(),
            out.status,
            crate::journal::one_line(String::from_utf8_lossy(&out.stderr).trim())
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_read_as_nvidia_smi_writes_them() {
        let modes =
            parse_modes("GPU-a, Default\nGPU-b, Exclusive_Process\n\nGPU-c, Prohibited\n").unwrap();
        assert_eq!(modes["GPU-a"], "DEFAULT");
        assert_eq!(modes["GPU-b"], "EXCLUSIVE_PROCESS");
        assert_eq!(modes["GPU-c"], "PROHIBITED");
        assert!(parse_modes("GPU-a, [N/A]\n").is_err());
        assert!(parse_modes("nonsense\n").is_err());
    }
}
