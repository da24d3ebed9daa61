//! Reading files that users control without being tricked by them.
//!
//! A root daemon reads what users put in the spool. A FIFO would block the
//! daemon forever, a symbolic link could point at `/etc/shadow` or
//! `/dev/zero`, a directory swapped for a link between a check and an open
//! would redirect the read. So files are opened without following links
//! (every path component, not only the last), without blocking, checked on
//! the open descriptor to be regular files, and read up to a size limit.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag};

/// A regular file's content and metadata, read from `path` without
/// following a link in its last component.
pub fn read_regular(path: &Path, max_bytes: u64) -> io::Result<(Vec<u8>, std::fs::Metadata)> {
    let fd = nix::fcntl::open(path, read_flags(), Mode::empty()).map_err(io::Error::from)?;
    read_fd(fd, path, max_bytes)
}

/// A regular file's content, up to `max_bytes`, at a path the caller
/// chose (links followed: a user's own job directory may hold them). Not
/// even opened unless it is a regular file: a device's `open` acts (one
/// of `/dev/watchdog` starts the machine's watchdog, one of a FIFO wakes
/// its writer), and Slurm's hook runs this on any path a user names. So
/// the path is first held with `O_PATH`, which opens nothing, and only a
/// regular file is then opened, through that very descriptor.
pub fn read_file(path: &Path, max_bytes: u64) -> io::Result<(Vec<u8>, std::fs::Metadata)> {
    use std::os::fd::AsRawFd;
    let held = nix::fcntl::open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(io::Error::from)?;
    let stat = nix::sys::stat::fstat(&held).map_err(io::Error::from)?;
    if !is_regular(stat) {
        return Err(refused(path, "not a regular file".into()));
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let reopened = format!("/proc/self/fd/{}", held.as_raw_fd());
    let fd = nix::fcntl::open(reopened.as_str(), flags, Mode::empty()).map_err(io::Error::from)?;
    let again = nix::sys::stat::fstat(&fd).map_err(io::Error::from)?;
    if (again.st_dev, again.st_ino) != (stat.st_dev, stat.st_ino) {
        return Err(refused(path, "changed while it was opened".into()));
    }
    read_fd(fd, path, max_bytes)
}

/// A regular file opened for reading, as [`read_regular`] opens it, with
/// its metadata, for a caller that streams it (a file too large to hold
/// whole) or acts on the open file before it reads it ([`read_open`]).
pub fn open_regular(path: &Path) -> io::Result<(File, std::fs::Metadata)> {
    let fd = nix::fcntl::open(path, read_flags(), Mode::empty()).map_err(io::Error::from)?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(path, "not a regular file".into()));
    }
    Ok((file, meta))
}

/// The content of a file [`open_regular`] opened, up to `max_bytes`
/// (`meta` is its metadata, `path` names it in errors).
pub fn read_open(
    file: &File,
    meta: &std::fs::Metadata,
    path: &Path,
    max_bytes: u64,
) -> io::Result<Vec<u8>> {
    let too_large = || refused(path, format!("larger than {max_bytes} bytes"));
    if meta.len() > max_bytes {
        return Err(too_large());
    }
    // Room for the whole file and the read that finds its end: without
    // it, reading through `take` (which hides the file's size from
    // `read_to_end`) starts at 32 bytes and doubles, eight reads for a
    // `launch.json`.
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

fn refused(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {why}", path.display()),
    )
}

/// A regular file at `relative` below the directory `dir`, no component of
/// which may be a symbolic link, `..` or absolute.
pub fn read_beneath(
    dir: &Path,
    relative: &str,
    max_bytes: u64,
) -> io::Result<(Vec<u8>, std::fs::Metadata)> {
    read_fd(open_beneath(dir, relative)?, &dir.join(relative), max_bytes)
}

/// The last `bytes` of a regular file at `relative` below `dir`, opened as
/// [`read_beneath`] opens it: where a job's output says why it ended,
/// however long that output grew.
pub fn read_tail_beneath(dir: &Path, relative: &str, bytes: u64) -> io::Result<Vec<u8>> {
    let path = dir.join(relative);
    let mut file = File::from(open_beneath(dir, relative)?);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a regular file", path.display()),
        ));
    }
    file.seek(SeekFrom::Start(meta.len().saturating_sub(bytes)))?;
    let mut tail = Vec::new();
    file.take(bytes).read_to_end(&mut tail)?;
    Ok(tail)
}

/// The status of the regular file at `relative` below `dir`, if it is
/// one, looked at as [`read_beneath`] opens it (no link followed at any
/// component) and without opening it: a user's name for a file they may
/// not have put there yet, whose links must not send a root daemon's
/// lookups through their mounts.
pub fn regular_beneath(dir: &Path, relative: &str) -> Option<FileStat> {
    parent_beneath(dir, Path::new(relative))
        .and_then(|(parent, file)| stat_at(parent.as_fd(), file))
        .ok()
        .filter(|stat| is_regular(*stat))
}

/// Opens `relative` below `dir` without following a link at any
/// component, refusing `..` and absolute paths.
fn open_beneath(dir: &Path, relative: &str) -> io::Result<OwnedFd> {
    let (parent, file) = parent_beneath(dir, Path::new(relative))?;
    openat(&parent, file, read_flags(), Mode::empty()).map_err(io::Error::from)
}

/// The directory holding `relative` below `dir`, opened as a path without
/// following a link at any component, and the last component's name.
pub(crate) fn parent_beneath<'a>(
    dir: &Path,
    relative: &'a Path,
) -> io::Result<(OwnedFd, &'a OsStr)> {
    let invalid = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {why}", relative.display()),
        )
    };
    let mut components = Vec::new();
    for c in relative.components() {
        match c {
            Component::Normal(name) => components.push(name),
            Component::CurDir => {}
            _ => return Err(invalid("must be a plain relative path")),
        }
    }
    let Some((file, dirs)) = components.split_last() else {
        return Err(invalid("names no file"));
    };
    // O_PATH: a directory its owner keeps unlistable (a task's, 0711) is
    // still passed through, as a path lookup would.
    let directory = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut fd: OwnedFd =
        nix::fcntl::open(dir, directory, Mode::empty()).map_err(io::Error::from)?;
    for name in dirs {
        fd = openat(&fd, *name, directory, Mode::empty()).map_err(io::Error::from)?;
    }
    Ok((fd, file))
}

/// Opens the directory `name` in `at` without following a link and
/// without blocking (a FIFO swapped in for it is refused, not waited on).
pub(crate) fn open_dir<Fd: AsFd>(at: Fd, name: &OsStr) -> io::Result<OwnedFd> {
    openat(
        at,
        name,
        OFlag::O_RDONLY
            | OFlag::O_DIRECTORY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// The entry `name` of the directory `dir`, itself (a link is not followed).
/// A fresh listing of the directory open at `dir` (entries acted on since
/// an earlier listing are gone from it).
pub(crate) fn listing(dir: &OwnedFd) -> io::Result<nix::dir::Dir> {
    nix::dir::Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

pub(crate) fn stat_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<FileStat> {
    nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io::Error::from)
}

pub(crate) fn is_dir(stat: FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
}

pub(crate) fn is_regular(stat: FileStat) -> bool {
    SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
}

/// The names in the directory `relative` below `dir` (`""` for `dir`
/// itself), reached without following a link at any component and
/// without blocking: where a root daemon looks for a file under a name
/// that differs in case. At most `limit` of them: a directory with more
/// is an error, never listed to its end (a user's directory of millions
/// of names would cost the daemon that much for each job naming it).
pub fn names_beneath(dir: &Path, relative: &str, limit: usize) -> io::Result<Vec<String>> {
    // `dir` is the caller's to choose, and may be reached through a link.
    let mut fd = nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    for c in Path::new(relative).components() {
        match c {
            Component::Normal(name) => fd = open_dir(&fd, name)?,
            Component::CurDir => {}
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{relative}: must be a plain relative path"),
                ));
            }
        }
    }
    let mut listing = nix::dir::Dir::from_fd(fd)?;
    let mut names = Vec::new();
    // Every entry counts toward the limit, names that are not UTF-8 (and
    // are not returned) included.
    for (seen, entry) in listing.iter().enumerate() {
        if seen == limit + 2 {
            return Err(io::Error::other(format!(
                "{}/{relative}: more than {limit} names",
                dir.display()
            )));
        }
        if let Ok(name) = entry?.file_name().to_str()
            && name != "."
            && name != ".."
        {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

fn read_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC
}

fn read_fd(fd: OwnedFd, path: &Path, max_bytes: u64) -> io::Result<(Vec<u8>, std::fs::Metadata)> {
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(path, "not a regular file".into()));
    }
    let bytes = read_open(&file, &meta, path, max_bytes)?;
    Ok((bytes, meta))
}

/// Whether `path` is a real directory (not a link) that only root or this
/// process's user can change, below directories no one else can replace:
/// where root may keep what others must not swap (the MPS control
/// daemon's pipes and pid file, its logs).
pub fn private_dir(path: &Path) -> Result<(), String> {
    // Relative: its ancestors are those of where it is.
    let path = &std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut meta =
        std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.file_type().is_symlink() {
        // A link of root's (`/var/spool/carma -> /data/carma`): what it
        // leads to is checked below, as the link's ancestors are.
        owned_by_root_or_me(path, &meta)?;
        meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", path.display()));
    }
    // Not even a sticky directory: others could make names in it.
    closed_to_others(path, &meta, false)?;
    // Each name on the way as it is, links not followed: a user's link in
    // a sticky directory (`/tmp/carma` -> a root directory) would pass as
    // its target and could be swapped later. A link is taken only as
    // root's (or this user's), in a directory closed to others (checked
    // as the next ancestor), and where it leads is checked below.
    let lstat =
        |dir: &Path| std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()));
    for dir in path.ancestors().skip(1) {
        let meta = lstat(dir)?;
        if meta.file_type().is_symlink() {
            owned_by_root_or_me(dir, &meta)?;
        } else {
            closed_to_others(dir, &meta, true)?;
        }
    }
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for dir in real.ancestors().skip(1) {
        closed_to_others(dir, &lstat(dir)?, true)?;
    }
    Ok(())
}

fn owned_by_root_or_me(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "{} is owned by uid {}, not root or uid {me}",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// Whether only root or this process's user can change `path` (or, for a
/// directory, replace what is in it). A sticky directory others may write
/// to is closed enough: there only an entry's owner may rename it away.
/// Root acts on what it checks as root, so it also refuses what the
/// file's group may write; a daemon of another user refuses only what
/// anyone may write, as its own binary's is, under a user's private group.
pub fn closed_to_others(path: &Path, meta: &std::fs::Metadata, dir: bool) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    owned_by_root_or_me(path, meta)?;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.permissions().mode();
    let open = if me == 0 { 0o022 } else { 0o002 };
    if mode & open != 0 && !(dir && mode & 0o1000 != 0) {
        return Err(format!("{} is writable by others", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_private_dir_is_a_real_directory_no_one_else_can_change() {
        use std::os::unix::fs::PermissionsExt;
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("mps");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(private_dir(&dir), Ok(()));
        // Sticky and open to all, as /tmp: others could make names in it.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o1777)).unwrap();
        let e = private_dir(&dir).unwrap_err();
        assert!(e.ends_with("mps is writable by others"), "{e}");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        // A link of this user's (or root's) is followed, and where it
        // leads checked; a link to a file is no directory.
        let link = top.path().join("link");
        symlink(&dir, &link).unwrap();
        assert_eq!(private_dir(&link), Ok(()));
        fs::write(top.path().join("file"), "").unwrap();
        symlink(top.path().join("file"), top.path().join("to-file")).unwrap();
        assert!(
            private_dir(&top.path().join("to-file"))
                .unwrap_err()
                .ends_with("is not a directory")
        );
        // A parent others may write to without the sticky bit.
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&dir).unwrap_err();
        assert!(e.contains("is writable by others"), "{e}");
        fs::set_permissions(top.path(), fs::Permissions::from_mode(0o700)).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
            let e = private_dir(&dir).unwrap_err();
            assert!(e.contains("is owned by uid 65534"), "{e}");
            std::os::unix::fs::chown(&dir, Some(0), Some(0)).unwrap();
            // A user's link to it is theirs to swap.
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
            let e = private_dir(&link).unwrap_err();
            assert!(e.contains("link is owned by uid 65534"), "{e}");
            // A user's link on the way, in a sticky directory, to a
            // directory of root's: it could be swapped once checked.
            let sticky = top.path().join("tmp");
            fs::create_dir(&sticky).unwrap();
            fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
            let theirs = sticky.join("carma");
            symlink(top.path(), &theirs).unwrap();
            std::os::unix::fs::lchown(&theirs, Some(65534), Some(65534)).unwrap();
            assert_eq!(private_dir(&top.path().join("mps")), Ok(()));
            let e = private_dir(&theirs.join("mps")).unwrap_err();
            assert!(e.contains("carma is owned by uid 65534"), "{e}");
            // Root's own link there is followed, and where it leads checked.
            std::os::unix::fs::lchown(&theirs, Some(0), Some(0)).unwrap();
            assert_eq!(private_dir(&theirs.join("mps")), Ok(()));
        }
    }

    #[test]
    fn a_file_beneath_is_seen_only_where_no_link_leads_to_it() {
        let top = tempfile::tempdir().unwrap();
        let (dir, elsewhere) = (top.path().join("pending"), top.path().join("elsewhere"));
        fs::create_dir_all(dir.join("m")).unwrap();
        fs::create_dir(&elsewhere).unwrap();
        fs::write(dir.join("m/s.txt"), "x").unwrap();
        fs::write(elsewhere.join("s.txt"), "x").unwrap();
        symlink(&elsewhere, dir.join("via")).unwrap();
        symlink(elsewhere.join("s.txt"), dir.join("last.txt")).unwrap();
        assert!(regular_beneath(&dir, "m/s.txt").is_some());
        assert!(
            regular_beneath(&dir, "via/s.txt").is_none(),
            "a link on the way"
        );
        assert!(
            regular_beneath(&dir, "last.txt").is_none(),
            "a link at the end"
        );
        assert!(regular_beneath(&dir, "m").is_none(), "a directory");
        assert!(regular_beneath(&dir, "../elsewhere/s.txt").is_none());
        assert!(regular_beneath(&dir, "m/missing").is_none());
    }

    #[test]
    fn regular_files_are_read_and_everything_else_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("ok"), "content").unwrap();
        assert_eq!(read_regular(&d.join("ok"), 100).unwrap().0, b"content");
        assert!(read_regular(&d.join("ok"), 3).is_err(), "too large");
        symlink(d.join("ok"), d.join("link")).unwrap();
        assert!(read_regular(&d.join("link"), 100).is_err());
        nix::unistd::mkfifo(&d.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        // Would block forever if opened the ordinary way.
        assert!(read_regular(&d.join("fifo"), 100).is_err());
        fs::create_dir(d.join("sub")).unwrap();
        assert!(read_regular(&d.join("sub"), 100).is_err());
    }

    #[test]
    fn a_file_named_by_its_path_is_opened_only_if_it_is_regular() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("ok"), "content").unwrap();
        symlink(d.join("ok"), d.join("link")).unwrap();
        assert_eq!(read_file(&d.join("link"), 100).unwrap().0, b"content");
        // A writer waits in its open until a reader opens the FIFO: the
        // refusal must not have opened it (as a device's open would act).
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::OpenOptions::new().write(true).open(fifo).is_ok())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(read_file(&fifo, 100).is_err());
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !writer.is_finished(),
            "the writer was woken: the FIFO was opened"
        );
        // Let it go.
        let _reader = nix::fcntl::open(&fifo, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Mode::empty());
        assert!(writer.join().unwrap());
        assert!(read_file(Path::new("/dev/null"), 100).is_err());
    }

    #[test]
    fn no_component_below_the_directory_may_be_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("job/models")).unwrap();
        fs::write(d.join("job/models/m.model"), "summary").unwrap();
        assert_eq!(
            read_beneath(&d.join("job"), "models/m.model", 100)
                .unwrap()
                .0,
            b"summary"
        );
        assert_eq!(
            read_beneath(&d.join("job"), "./models/m.model", 100)
                .unwrap()
                .0,
            b"summary"
        );
        fs::create_dir(d.join("elsewhere")).unwrap();
        fs::write(d.join("elsewhere/m.model"), "secret").unwrap();
        symlink(d.join("elsewhere"), d.join("job/linked")).unwrap();
        assert!(read_beneath(&d.join("job"), "linked/m.model", 100).is_err());
        assert!(read_beneath(&d.join("job"), "../elsewhere/m.model", 100).is_err());
        assert!(read_beneath(&d.join("job"), "/etc/passwd", 100).is_err());
        assert!(read_tail_beneath(&d.join("job"), "linked/m.model", 100).is_err());
    }

    #[test]
    fn a_tail_is_the_end_of_a_regular_file_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir(d.join("run-1")).unwrap();
        fs::write(d.join("run-1/stderr"), "first\nsecond\nthird\n").unwrap();
        assert_eq!(read_tail_beneath(d, "run-1/stderr", 6).unwrap(), b"third\n");
        assert_eq!(
            read_tail_beneath(d, "run-1/stderr", 1 << 20).unwrap().len(),
            19
        );
        nix::unistd::mkfifo(&d.join("run-1/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        assert!(read_tail_beneath(d, "run-1/fifo", 100).is_err());
        symlink(d.join("run-1/stderr"), d.join("run-1/link")).unwrap();
        assert!(read_tail_beneath(d, "run-1/link", 100).is_err());
    }
}
