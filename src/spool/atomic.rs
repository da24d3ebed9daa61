//! Writing files so that a crash leaves either the old or the new content,
//! never a torn one.
//!
//! Everything carma writes is private (mode 0600) unless the caller says
//! otherwise: task records hold jobs' environments, and a root daemon's
//! files must not become readable by whoever can list the spool.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` durably: a temporary file in the same
/// directory, fsync, rename over `path`, fsync of the directory. After it
/// returns, the new content survives a power loss.
pub fn write_durable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_durable_as(path, bytes, PRIVATE, None)
}

/// [`write_durable`] of a file that belongs to `owner` (uid, gid) with
/// `mode`: handed over on the open file before it gets its name, so no
/// path is ever followed to change an owner.
pub fn write_durable_as(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    let temp = write_temp(path, |file| file.write_all(bytes), true, mode, owner)?;
    renamed(&temp, path)?;
    sync_dir(parent(path))
}

/// [`write_durable`] without the directory's fsync: the content is on disk
/// before it gets its name, so a crash leaves the old file or the new one,
/// whole, though which is the kernel's to say. For a record brought up to
/// date whose old content is still true enough to read (a launched task's
/// record: its run's `launch.json` says the rest), where one flush less
/// per job counts.
pub fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = write_temp(path, |file| file.write_all(bytes), true, PRIVATE, None)?;
    renamed(&temp, path)
}

/// Writes `bytes` to `path` atomically but without forcing it to disk, with
/// the given permission bits: for files that are caches of other state (the
/// status file, a run's peak memory), where only a torn read would hurt.
pub fn write_replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_replace_with(path, mode, |out| out.write_all(bytes))
}

/// [`write_replace`] of content written as it is made (`fill` writes into
/// a buffered file): a large cache (the status of 10,000 queued tasks is
/// megabytes of JSON) is never held whole in memory.
pub fn write_replace_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let fill = |file: &mut File| {
        // The status file of a few hundred tasks in one write, not eight.
        let mut out = io::BufWriter::with_capacity(64 << 10, file);
        fill(&mut out)?;
        out.flush()
    };
    let temp = write_temp(path, fill, false, mode, None)?;
    renamed(&temp, path)
}

/// Renames a temporary into place, or removes it: a failed write leaves
/// nothing behind.
fn renamed(temp: &Path, path: &Path) -> io::Result<()> {
    fs::rename(temp, path).inspect_err(|_| {
        let _ = fs::remove_file(temp);
    })
}

/// Read and write for carma's own user only.
pub const PRIVATE: u32 = 0o600;
/// Readable by everyone (the status file: names, states and GPUs, no
/// contents).
pub const PUBLIC: u32 = 0o644;

/// Forces a directory's entries (creations, renames) to disk.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn write_temp(
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
    sync: bool,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let temp = parent(path).join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    // Never through a link someone planted under the temporary's name:
    // the file is created anew, and a leftover in the way (a crash's, or a
    // link) is removed, the link itself and not its target, first.
    let create = || {
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&temp)
    };
    let mut file = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(&temp)?;
            create()?
        }
        opened => opened?,
    };
    let written = (|| {
        if let Some((uid, gid)) = owner {
            nix::unistd::fchown(
                &file,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
            )?;
        }
        // The umask may have taken bits away, never added them; set exactly.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        fill(&mut file)?;
        if sync {
            file.sync_all()?;
        }
        Ok(())
    })();
    match written {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}

fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_replace_whole_files_and_leave_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        write_durable(&path, b"first").unwrap();
        write_durable(&path, b"second").unwrap();
        write_replace(&path, b"third", PUBLIC).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"third");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        write_durable(&path, b"fourth").unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_link_planted_at_the_temporary_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("task.json");
        let temp = dir
            .path()
            .join(format!(".task.json.tmp{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        write_durable(&path, b"record").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert_eq!(fs::read(&path).unwrap(), b"record");
    }
}
