//! carma's JSON records on disk: written durably and privately, read back
//! bounded and without following links, and carma's own state only from
//! files carma itself wrote ([`read_state`]).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Serialize, de::DeserializeOwned};

use super::atomic::write_durable;

/// Seconds since the Unix epoch: records use wall-clock time so that they
/// mean the same to every process and survive restarts.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Largest record read. Most are a few kilobytes, but a run's
/// `launch.json` holds its job's script: a job file of up to 1 MiB, which
/// JSON's escapes make up to six times as long (`\u0001` for a control
/// byte). At 1 MiB, such a job could never start.
pub const MAX_RECORD_BYTES: u64 = 8 << 20;

/// Reads a JSON record (a regular file, never through a link, at most
/// [`MAX_RECORD_BYTES`]), whoever wrote it: for files that only inform,
/// never for carma's state.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<T> {
    read_json_at_most(path, MAX_RECORD_BYTES)
}

/// [`read_json`] of a file of at most `max_bytes`.
pub fn read_json_at_most<T: DeserializeOwned>(path: &Path, max_bytes: u64) -> io::Result<T> {
    let (bytes, _) = crate::safe::read_regular(path, max_bytes)?;
    parse_json(path, &bytes)
}

/// Reads one of carma's own records: as [`read_json`], but only from a file
/// owned by this process's effective user and writable by nobody else. A
/// record anyone else could have written (planted, or handed in by a
/// user) is refused, so no content a user supplied ever becomes carma's
/// state.
pub fn read_state<T: DeserializeOwned>(path: &Path) -> io::Result<T> {
    parse_json(path, &read_own(path, MAX_RECORD_BYTES)?)
}

/// The bytes of a file of carma's own, at most `max_bytes`: a regular file
/// (never through a link) owned by this process's effective user and
/// writable by nobody else, as [`read_state`] requires of records.
pub fn read_own(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let (bytes, meta) = crate::safe::read_regular(path, max_bytes)?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: not carma's record (owner uid {}, mode {:o}); refused",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(bytes)
}

fn parse_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> io::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// Writes a JSON record durably (temp file, fsync, rename, directory
/// fsync), private to carma's user.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    write_durable(path, &to_json(value))
}

/// A record's bytes as written: pretty JSON and a newline.
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Records are plain structs of strings and numbers: this cannot fail.
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}
