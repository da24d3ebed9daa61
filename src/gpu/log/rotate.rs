//! The GPU log's files: appended to, rotated by size, bounded in number,
//! and opened so that nothing a user planted is written through.
//!
//! The spool's root is not writable by users, but the daemon runs as root
//! and a root daemon that appends to a path must not be turned into a
//! writer of `/etc/shadow` by a link placed there some other way: the file
//! is opened with `O_NOFOLLOW` (a link is refused, not followed) and
//! `O_NONBLOCK` (a FIFO fails instead of blocking the loop), and kept only
//! if the open descriptor shows a regular file with one link, owned by the
//! daemon. It is made mode 0644: carma's own state, readable by all (the
//! report runs as any user). Rotation only renames within the root, which
//! moves a link, never what it points at.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{CURRENT, HEADER, rotated};

/// The log file's mode.
const MODE: u32 = 0o644;

/// The GPU log of one spool, as the daemon writes it.
pub struct RotatingLog {
    dir: PathBuf,
    /// A file reaching this size is rotated before the next append.
    max_bytes: u64,
    /// Old files kept.
    keep: usize,
    /// The current file and its size, while open.
    file: Option<(File, u64)>,
}

impl RotatingLog {
    /// The log in the directory `dir`; nothing is opened until the first
    /// append.
    pub fn new(dir: &Path, max_bytes: u64, keep: usize) -> RotatingLog {
        RotatingLog {
            dir: dir.to_owned(),
            max_bytes,
            keep,
            file: None,
        }
    }

    /// New limits (a reload); they apply from the next append.
    pub fn set_limits(&mut self, max_bytes: u64, keep: usize) {
        self.max_bytes = max_bytes;
        self.keep = keep;
    }

    /// Appends `rows` (whole lines) with one write, rotating first when
    /// the current file would pass the size limit. After an error the file
    /// is opened again at the next append.
    pub fn append(&mut self, rows: &str) -> io::Result<()> {
        let result = self.try_append(rows);
        if result.is_err() {
            self.file = None;
        }
        result
    }

    fn try_append(&mut self, rows: &str) -> io::Result<()> {
        let rows = rows.as_bytes();
        if let Some((_, size)) = &self.file
            && *size > 0
            && *size + rows.len() as u64 > self.max_bytes
        {
            self.file = None;
            self.rotate()?;
        }
        let (file, size) = match &mut self.file {
            Some(open) => open,
            None => self.file.insert(open(&self.dir.join(CURRENT))?),
        };
        let mut text = Vec::with_capacity(HEADER.len() + 1 + rows.len());
        if *size == 0 {
            text.extend_from_slice(HEADER.as_bytes());
            text.push(b'\n');
        }
        text.extend_from_slice(rows);
        file.write_all(&text)?;
        *size += text.len() as u64;
        Ok(())
    }

    /// `gpu-log.csv` becomes `gpu-log.1.csv`, each old file moves one up,
    /// and those beyond `keep` (more than one after a reload lowered it)
    /// are dropped.
    fn rotate(&self) -> io::Result<()> {
        let path = |n: usize| match n {
            0 => self.dir.join(CURRENT),
            n => self.dir.join(rotated(n)),
        };
        // Old files are numbered without gaps, so the first missing one
        // ends those to drop.
        let mut beyond = self.keep.max(1);
        loop {
            match std::fs::remove_file(path(beyond)) {
                Ok(()) => beyond += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) => return Err(e),
            }
        }
        for n in (0..self.keep).rev() {
            ignore_missing(std::fs::rename(path(n), path(n + 1)))?;
        }
        if self.keep == 0 {
            ignore_missing(std::fs::remove_file(path(0)))?;
        }
        Ok(())
    }
}

fn ignore_missing(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Opens (creating) the log file at `path` for appending, and its size;
/// refuses anything but the daemon's own regular file.
fn open(path: &Path) -> io::Result<(File, u64)> {
    let flags = OFlag::O_WRONLY
        | OFlag::O_APPEND
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(path, flags, Mode::from_bits_truncate(MODE))?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    let refuse = |why: String| io::Error::other(format!("{}: {why}", path.display()));
    if !meta.file_type().is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(refuse(format!(
            "owned by uid {}, not the daemon's",
            meta.uid()
        )));
    }
    if meta.nlink() != 1 {
        return Err(refuse(format!("has {} links", meta.nlink())));
    }
    if meta.mode() & 0o7777 != MODE {
        file.set_permissions(std::fs::Permissions::from_mode(MODE))?;
    }
    Ok((file, meta.len()))
}
