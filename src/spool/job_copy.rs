//! carma's copy of a job: its file and the model summary it names, read
//! without following links and refused when others may write them, and
//! written into the task's `job/`. Claims of dropped files
//! ([`super::claim`]) and submissions ([`super::submission`],
//! [`super::handed`]) make the same copy.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path};

use super::durable::write_new;
use super::record::JOB;
use super::{MAX_SUMMARY_BYTES, make_dir};
use crate::safe;

/// Longest model summary path a job may name (Linux's own limit on a
/// whole path is 4,096 bytes; carma's copy sits a few names deeper).
pub(super) const MAX_MODEL_PATH: usize = 1024;

/// The name a job file gives its job (`name:`), which its task is named
/// after; `None` when it gives none or does not parse (then the file's
/// name is used, and the job's check says what is wrong).
pub(super) fn job_name(bytes: &[u8]) -> Option<String> {
    crate::rad::parse_bytes(bytes).ok()?.spec.name
}

/// Reads a dropped entry as a job file, or says why it cannot be one.
pub(super) fn read_job_file(path: &Path) -> Result<Vec<u8>, String> {
    let (bytes, meta) = safe::read_regular(path, crate::rad::MAX_FILE_BYTES).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            return "is a symbolic link; carma runs only regular files".to_string();
        }
        let text = e.to_string();
        // The path is carma's staging copy; the user knows the file by name.
        text.rsplit_once(": ")
            .map_or(text.clone(), |(_, why)| why.to_string())
    })?;
    if meta.nlink() > 1 {
        return Err("has other hard links; a job file must be a file of its own".into());
    }
    refuse_shared_writes(&meta)?;
    Ok(bytes)
}

/// Whether nobody but carma's own user can ever write the file at `path`
/// (a drop, already out of everyone else's reach in a claim directory):
/// carma's user owns it, it has one name, no group or other write bits
/// (with an ACL, those are its mask), and no open file can write to it. A
/// read lease is refused while one can (`fcntl(2)`, `F_SETLEASE`): a
/// descriptor opened for writing before the file changed owner or mode, or
/// a shared writable mapping. Any new one needs write permission on the
/// file itself, which only its owner has. The file comes back open, its
/// lease held until it is closed.
fn only_carma_writes(path: &Path) -> Option<fs::File> {
    let file = safe::open_regular(path).ok()?;
    let meta = file.metadata().ok()?;
    if meta.uid() != nix::unistd::geteuid().as_raw()
        || meta.nlink() != 1
        || refuse_shared_writes(&meta).is_err()
    {
        return None;
    }
    // SAFETY: `fcntl` on a descriptor this function owns, with an integer
    // argument; nothing is passed by pointer.
    let leased = unsafe {
        nix::libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            nix::libc::F_SETLEASE,
            nix::libc::F_RDLCK,
        )
    };
    (leased == 0).then_some(file)
}

/// A job runs as its file's owner, so its content must be the owner's
/// alone: a file others may write could have been written by them (and
/// moved into `pending/` by them, from a directory both may write).
pub(super) fn refuse_shared_writes(meta: &fs::Metadata) -> Result<(), String> {
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by others than its owner (mode {:o}); a job runs as its file's owner, \
             so only the owner may write it (chmod go-w)",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Writes carma's copies of a job into `dir/job/`: the `.rad` as `file`,
/// and the model summary it names, read below `base` (where the user put
/// both) without following links. A summary found only under a name that
/// differs in case is copied under its own name, where the job's check
/// finds it and says so. A summary that cannot be read, or that belongs to
/// someone other than `owner`, is not copied: the job's check then reports
/// it missing.
///
/// `original` is the file `bytes` were read from, when it is carma's to
/// keep: if nobody but carma's own user can ever write it
/// ([`only_carma_writes`]), the job's file is a second name for it rather
/// than a copy, which makes no inode and, once the original's name goes,
/// frees none (a burst of drops on ext4 spends most of its time finding
/// free inodes).
pub(super) fn fill_job(
    dir: &Path,
    file: &str,
    bytes: &[u8],
    original: Option<&Path>,
    base: &Path,
    owner: Option<u32>,
) -> io::Result<()> {
    let job = dir.join(JOB);
    make_dir(&job, 0o700)?;
    let linked = original.is_some_and(|original| {
        only_carma_writes(original).is_some_and(|open| {
            // Private, as carma's copies are, before it has the job's name:
            // either step failing leaves the name free for a copy.
            open.set_permissions(fs::Permissions::from_mode(0o600))
                .is_ok()
                && fs::hard_link(original, job.join(file)).is_ok()
        })
    });
    if !linked {
        write_new(&job.join(file), bytes)?;
    }
    match summary_beneath(file, bytes, base, owner) {
        Some((model, summary)) => write_summary(&job, &model, &summary),
        None => Ok(()),
    }
}

/// The model summary the job file `bytes` names (as `file`), read below
/// `base` as [`fill_job`] copies it: its path as found, and its bytes.
pub(super) fn summary_beneath(
    file: &str,
    bytes: &[u8],
    base: &Path,
    owner: Option<u32>,
) -> Option<(String, Vec<u8>)> {
    let mut model = summary_named(file, bytes)?;
    let mut read = safe::read_beneath(base, &model, MAX_SUMMARY_BYTES);
    if read
        .as_ref()
        .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
    {
        if let Some(found) = crate::rad::case_match(base, &model) {
            read = safe::read_beneath(base, &found, MAX_SUMMARY_BYTES);
            model = found;
        }
    }
    match read {
        Ok((summary, meta)) if Some(meta.uid()) == owner || owner.is_none() => {
            Some((model, summary))
        }
        Ok((_, meta)) => {
            log::warn!(
                "{file}: the model summary {model} belongs to uid {}, not to the job's owner; \
                 not used",
                meta.uid()
            );
            None
        }
        Err(_) => None,
    }
}

/// The model summary path the job file `bytes` names, if it names one
/// carma can copy.
pub(super) fn summary_named(file: &str, bytes: &[u8]) -> Option<String> {
    let model = crate::rad::parse_bytes(bytes).ok()?.spec.model?;
    if model.len() > MAX_MODEL_PATH {
        // Its copy could not be made by path; the job's check says the
        // summary is missing.
        log::warn!(
            "{file}: the model summary's path is {} bytes long; carma takes at most \
             {MAX_MODEL_PATH}",
            model.len()
        );
        return None;
    }
    Some(model)
}

/// Writes a job's model summary at `model` (a plain relative path) below
/// its `job/` directory, making the directories on the way.
pub(super) fn write_summary(job: &Path, model: &str, summary: &[u8]) -> io::Result<()> {
    let target = job.join(model);
    let mut made = job.to_path_buf();
    if let Some(parent) = Path::new(model).parent() {
        for part in parent.components() {
            if let Component::Normal(part) = part {
                made.push(part);
                if !made.is_dir() {
                    make_dir(&made, 0o700)?;
                }
            }
        }
    }
    write_new(&target, summary)
}
