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

/// The name a job file gives its job (`name:`), which its task is named
/// after; `None` when it gives none or does not parse (then the file's
/// name is used, and the job's check says what is wrong).
pub(super) fn job_name(bytes: &[u8]) -> Option<String> {
    crate::rad::parse_bytes(bytes).ok()?.spec.name
}

/// A dropped job file as a claim read it.
#[derive(Debug)]
pub(super) struct JobRead {
    pub bytes: Vec<u8>,
    /// The file, open and leased, when nobody but carma's own user can
    /// ever write it ([`only_carma_writes`]): the job's file may then be
    /// a second name for it rather than a copy ([`fill_job`]).
    pub leased: Option<fs::File>,
}

/// Reads a dropped entry as a job file, or says why it cannot be one.
/// A file carma may keep is leased before it is read, so that what was
/// read is what it holds while the lease is.
pub(super) fn read_job_file(path: &Path) -> Result<JobRead, String> {
    let reason = |e: io::Error| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            return "is a symbolic link; carma runs only regular files".to_string();
        }
        let text = e.to_string();
        // The path is carma's staging copy; the user knows the file by name.
        text.rsplit_once(": ")
            .map_or(text.clone(), |(_, why)| why.to_string())
    };
    let (file, meta) = safe::open_regular(path).map_err(reason)?;
    if meta.nlink() > 1 {
        return Err("has other hard links; a job file must be a file of its own".into());
    }
    refuse_shared_writes(&meta)?;
    let leased = only_carma_writes(&file, &meta);
    let bytes = safe::read_open(&file, &meta, path, crate::rad::MAX_FILE_BYTES).map_err(reason)?;
    Ok(JobRead {
        bytes,
        leased: leased.then_some(file),
    })
}

/// Whether nobody but carma's own user can ever write `file` (a drop,
/// already out of everyone else's reach in a claim directory, with one
/// name and no group or other write bits, as [`read_job_file`] checked):
/// carma's user owns it, and no open file can write to it. A read lease
/// is refused while one can (`fcntl(2)`, `F_SETLEASE`): a descriptor
/// opened for writing before the file changed owner or mode, or a shared
/// writable mapping. Any new one needs write permission on the file
/// itself, which only its owner has. The lease is held until the file is
/// closed.
///
/// The lease makes carma the file's owner for `SIGIO`, which the kernel
/// sends when someone (carma's own user, the only one who may) opens it
/// for writing, and whose default action ends the process: the owner is
/// set to nobody at once, so such an open waits for the close instead.
fn only_carma_writes(file: &fs::File, meta: &fs::Metadata) -> bool {
    use std::os::fd::AsRawFd;
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return false;
    }
    let fd = file.as_raw_fd();
    // SAFETY: `fcntl` on a descriptor the caller holds open, with integer
    // arguments; nothing is passed by pointer.
    unsafe {
        nix::libc::fcntl(fd, nix::libc::F_SETLEASE, nix::libc::F_RDLCK) == 0
            && nix::libc::fcntl(fd, nix::libc::F_SETOWN, 0) == 0
    }
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
/// `original` is the file `bytes` were read from at its path, when it is
/// carma's to keep (leased by [`read_job_file`]): the job's file is then
/// a second name for it rather than a copy, which makes no inode and,
/// once the original's name goes, frees none (a burst of drops on ext4
/// spends most of its time finding free inodes).
///
/// Returns the bytes the copies hold, which count against the owner's
/// share of the spool.
pub(super) fn fill_job(
    dir: &Path,
    file: &str,
    bytes: &[u8],
    original: Option<(&Path, &fs::File)>,
    base: &Path,
    owner: Option<u32>,
) -> io::Result<u64> {
    let job = dir.join(JOB);
    make_dir(&job, 0o700)?;
    let linked = original.is_some_and(|(path, open)| {
        // Private, as carma's copies are, before it has the job's name:
        // either step failing leaves the name free for a copy.
        open.set_permissions(fs::Permissions::from_mode(0o600))
            .is_ok()
            && fs::hard_link(path, job.join(file)).is_ok()
    });
    if !linked {
        write_new(&job.join(file), bytes)?;
    }
    let summary = summary_beneath(file, bytes, base, owner);
    let copied = bytes.len() + summary.as_ref().map_or(0, |(_, s)| s.len());
    if let Some((model, summary)) = summary {
        match write_summary(&job, &model, &summary) {
            // Its path runs into the job file's own (`model: job.rad`,
            // `job.rad/m`): no copy, and the job's check says what is
            // wrong. An error, it would put the claim back to be tried
            // again for ever.
            Err(e)
                if e.kind() == io::ErrorKind::AlreadyExists
                    || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
            {
                log::warn!("{file}: its model summary {model} runs into the job file; not copied");
            }
            written => written?,
        }
    }
    Ok(copied as u64)
}

/// The model summary the job file `bytes` names (as `file`), read below
/// `base` as [`fill_job`] copies it: its path as found, and its bytes.
pub(super) fn summary_beneath(
    file: &str,
    bytes: &[u8],
    base: &Path,
    owner: Option<u32>,
) -> Option<(String, Vec<u8>)> {
    let mut model = summary_named(bytes)?;
    let mut read = safe::read_beneath(base, &model, MAX_SUMMARY_BYTES);
    if read
        .as_ref()
        .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
        && let Some(found) = crate::rad::case_match(base, &model)
    {
        read = safe::read_beneath(base, &found, MAX_SUMMARY_BYTES);
        model = found;
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
/// (no longer than [`crate::rad::MAX_MODEL_PATH`]: the parser refuses
/// more).
pub(super) fn summary_named(bytes: &[u8]) -> Option<String> {
    crate::rad::parse_bytes(bytes).ok()?.spec.model
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::OpenOptionsExt;

    use super::*;

    #[test]
    fn a_leased_drop_is_read_whole_and_an_open_for_writing_does_not_end_carma() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.rad");
        fs::write(&path, "memory: 1G\ntrue\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let read = read_job_file(&path).unwrap();
        assert_eq!(read.bytes, b"memory: 1G\ntrue\n");
        assert!(read.leased.is_some(), "the file is this process's own");
        // The owner opening it for writing breaks the lease: the kernel
        // would send this process SIGIO, whose default action ends it.
        let open = fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&path);
        assert_eq!(
            open.unwrap_err().raw_os_error(),
            Some(nix::libc::EWOULDBLOCK)
        );
        drop(read);
        assert!(fs::OpenOptions::new().write(true).open(&path).is_ok());
    }

    #[test]
    fn a_drop_others_may_write_or_with_other_names_is_not_leased_or_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.rad");
        fs::write(&path, "true\n").unwrap();
        let writer = fs::OpenOptions::new().append(true).open(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let read = read_job_file(&path).unwrap();
        assert!(read.leased.is_none(), "a writer holds it open");
        drop((read, writer));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o664)).unwrap();
        assert!(
            read_job_file(&path)
                .unwrap_err()
                .contains("writable by others")
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        fs::hard_link(&path, dir.path().join("other")).unwrap();
        assert!(
            read_job_file(&path)
                .unwrap_err()
                .contains("other hard links")
        );
    }
}
