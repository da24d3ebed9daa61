//! No user's mount stays where the daemon looks.
//!
//! `pending/` and `cancel/` are open to every user, who may make a
//! directory there and mount a FUSE file system on it (`fusermount`). The
//! daemon looks at each entry it finds (`lstat`, an open); where the host
//! lets users mount with `allow_other` (`/etc/fuse.conf`), such a look
//! reaches the user's file system, and one that never answers would hold
//! the event loop, and with it every user's jobs, for good. The same goes
//! for what a task directory gives its user: the job's `work/`, its runs'
//! `stdout` and `stderr`, the reason and the owner's copy. The daemon
//! reads the end of `stderr` when a run fails, hands `work/` to its user
//! again at a re-run, and renames the others; a user may mount on each,
//! since each is theirs.
//!
//! So a thread of its own watches the mount table (`/proc/self/mountinfo`
//! reports each change to `poll`) and takes away, as soon as it appears,
//! every mount below the two drop directories and every mount in a task
//! directory of the other states but those inside a job's `work/` (a job
//! may mount its data there, and the daemon never looks inside):
//! `umount2` with `MNT_FORCE`, which aborts a FUSE connection (every
//! access waiting on it fails at once, the loop's included), and
//! `MNT_DETACH`. Within the daemon's mount namespace only: the user's own
//! view is theirs.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, umount2};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::procfs::Mount;
use crate::spool::State;
use crate::spool::record::WORK;

/// Where no mount may stay, as the mount table names the directories
/// (absolute, links resolved).
#[derive(Debug, Clone)]
pub(super) struct Guarded {
    /// No mount anywhere below these: the drop directories.
    whole: Vec<PathBuf>,
    /// No mount in the task directories these hold, but inside their
    /// `work/`: the other state directories.
    tasks: Vec<PathBuf>,
}

impl Guarded {
    /// Whether a mount on `point` is taken away.
    fn covers(&self, point: &Path) -> bool {
        self.covering(point).is_some()
    }

    /// The guarded directory a mount on `point` is taken away from, if
    /// any.
    fn covering(&self, point: &Path) -> Option<&Path> {
        let strictly_below = |dir: &&PathBuf| point != *dir && point.starts_with(dir);
        if let Some(dir) = self.whole.iter().find(strictly_below) {
            return Some(dir);
        }
        let in_task = |dir: &&PathBuf| {
            let Ok(inside) = point.strip_prefix(dir) else {
                return false;
            };
            let mut names = inside.components();
            // `TASK/work/...`: the job's own; `TASK` itself is carma's
            // (root's, which no user may mount on).
            match (names.next(), names.next(), names.next()) {
                (Some(_), Some(work), Some(_)) => work.as_os_str() != WORK,
                (Some(_), Some(_), None) => true,
                _ => false,
            }
        };
        self.tasks.iter().find(in_task).map(PathBuf::as_path)
    }
}

/// Starts the thread that takes away mounts where `guarded` says. A
/// daemon that is not root cannot unmount: it only says what it finds.
pub(super) fn guard(guarded: Guarded) -> io::Result<()> {
    let mut table = File::open("/proc/self/mountinfo")?;
    std::thread::Builder::new()
        .name("mounts".into())
        .spawn(move || {
            // Mounts that could not be taken away: said once, not at each
            // change of the mount table.
            let mut stuck = HashSet::new();
            loop {
                match read_table(&mut table) {
                    Ok(text) => {
                        let found = below(&text, &guarded);
                        stuck.retain(|id| found.iter().any(|m| m.id == *id));
                        for mount in found {
                            if !stuck.contains(&mount.id) && !take_away(&mount, &guarded) {
                                stuck.insert(mount.id);
                            }
                        }
                    }
                    Err(e) => log::warn!("/proc/self/mountinfo: {e}"),
                }
                // Woken by the next change of the mount table.
                let mut fds = [PollFd::new(table.as_fd(), PollFlags::POLLPRI)];
                if poll(&mut fds, PollTimeout::NONE).is_err() {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
        })?;
    Ok(())
}

/// The mount table's bytes: names in it are users' (a directory named
/// `\xff` made read as text fail, and with it every look).
fn read_table(table: &mut File) -> io::Result<Vec<u8>> {
    table.rewind()?;
    let mut text = Vec::new();
    table.read_to_end(&mut text)?;
    Ok(text)
}

/// Unmounts `mount` (forced, detached), saying whose it was; whether it
/// could. Reached from the guarded directory above it one name at a time,
/// never through a link: every name below `pending/` is a user's, and
/// unmounted by its path, a directory on the way that its user swapped
/// for a link (`.d/sub` for a link to `/sys/fs`, with their mount on
/// `.d/sub/cgroup`) made root take away whatever mount the link led to.
fn take_away(mount: &Mount, guarded: &Guarded) -> bool {
    let owner = mount
        .owner
        .map_or_else(String::new, |uid| format!(" of uid {uid}"));
    let flags = MntFlags::MNT_FORCE | MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW;
    let point = crate::journal::shown(&mount.point.to_string_lossy());
    let reached = guarded
        .covering(&mount.point)
        .ok_or_else(|| io::Error::other("not below a guarded directory"))
        .and_then(|base| {
            let relative = mount.point.strip_prefix(base).map_err(io::Error::other)?;
            crate::safe::parent_beneath(base, relative)
        });
    let unmounted = reached.and_then(|(parent, name)| {
        let path = Path::new("/proc/self/fd")
            .join(parent.as_raw_fd().to_string())
            .join(name);
        umount2(&path, flags).map_err(io::Error::from)
    });
    match unmounted {
        Ok(()) => {
            log::warn!(
                "{point}: a {} mount{owner} where the daemon looks in the spool; taken away",
                mount.kind
            );
            true
        }
        Err(e) => {
            log::warn!(
                "{point}: a {} mount{owner} where the daemon looks in the spool; cannot take \
                 it away ({e}): a look at it may wait on its file system",
                mount.kind
            );
            false
        }
    }
}

/// The outermost mounts of the table `text` (`/proc/self/mountinfo`)
/// that `guarded` covers. Only the outermost: taking it away
/// (`MNT_DETACH`) takes every mount below it along, and a path to an
/// inner one would be looked up through the outer one, a file system that
/// may never answer.
pub(super) fn below(text: &[u8], guarded: &Guarded) -> Vec<Mount> {
    let found: Vec<Mount> = crate::procfs::mounts(text)
        .filter(|m| guarded.covers(&m.point))
        .collect();
    let inside_another = |m: &Mount| {
        found
            .iter()
            .any(|outer| outer.point != m.point && m.point.starts_with(&outer.point))
    };
    let outermost: Vec<bool> = found.iter().map(|m| !inside_another(m)).collect();
    found
        .into_iter()
        .zip(outermost)
        .filter_map(|(m, keep)| keep.then_some(m))
        .collect()
}

/// The spool's directories, as the mount table names them (links
/// resolved).
pub(super) fn guarded(spool: &crate::spool::Spool) -> Guarded {
    let real = |d: PathBuf| std::fs::canonicalize(&d).unwrap_or(d);
    Guarded {
        whole: vec![real(spool.dir(State::Pending)), real(spool.cancel_dir())],
        tasks: [State::Running, State::Recovery, State::Done, State::Failed]
            .map(|state| real(spool.dir(state)))
            .to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const TABLE: &[u8] = b"\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /var/spool/carma/pending/x rw,nosuid,nodev shared:20 - fuse.sshfs bob@gone: rw,user_id=1001,group_id=1001
41 40 0:36 / /var/spool/carma/pending/x/y rw - fuse x rw,user_id=1001
42 22 0:37 / /var/spool/carma/cancel/a\\040b rw - tmpfs tmpfs rw
43 22 0:38 / /var/spool/carma/pending rw - tmpfs tmpfs rw
44 22 0:39 / /var/spool/carma/pending-not rw - tmpfs tmpfs rw
45 22 0:40 / /var/spool/carma/running/1/work/d rw - fuse.squashfuse sq rw,user_id=1002
46 22 0:41 / /var/spool/carma/pending/\xff rw - fuse \xfe\xfd rw,user_id=1003
garbled line
";

    fn spool_dirs() -> Guarded {
        let dirs = |names: &[&str]| {
            names
                .iter()
                .map(|n| PathBuf::from(format!("/var/spool/carma/{n}")))
                .collect()
        };
        Guarded {
            whole: dirs(&["pending", "cancel"]),
            tasks: dirs(&["running", "recovery", "done", "failed"]),
        }
    }

    #[test]
    fn in_a_task_directory_only_mounts_inside_the_jobs_work_stay() {
        let g = spool_dirs();
        let at = |p: &str| g.covers(Path::new(&format!("/var/spool/carma/{p}")));
        for taken in [
            "running/000001-a/work",
            "running/000001-a/run-1",
            "running/000001-a/reason",
            "recovery/000001-a/work",
            "failed/000002-b/owner.json",
        ] {
            assert!(at(taken), "{taken}");
        }
        for left in [
            "running/000001-a/work/data",
            "done/000001-a/work/d/e",
            "running",
            "running/000001-a",
            "staging/x/y",
        ] {
            assert!(!at(left), "{left}");
        }
    }

    #[test]
    #[ignore = "needs root: mounts a tmpfs"]
    fn a_link_on_the_way_to_a_users_mount_leads_nowhere() {
        // `pending/.d/sub` swapped for a link to where another mount is,
        // just as the table named `pending/.d/sub/cgroup`: that mount was
        // taken away.
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (pending, victim) = (root.join("pending"), root.join("elsewhere/cgroup"));
        std::fs::create_dir_all(pending.join(".d")).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), pending.join(".d/sub")).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            &victim,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        let guarded = Guarded {
            whole: vec![pending.clone()],
            tasks: Vec::new(),
        };
        let mount = Mount {
            id: 1,
            point: pending.join(".d/sub/cgroup"),
            kind: "fuse".into(),
            owner: Some(65534),
        };
        let taken = take_away(&mount, &guarded);
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let still = table.contains(&format!(" {} ", victim.display()));
        if still {
            umount2(&victim, MntFlags::MNT_DETACH).unwrap();
        }
        assert!(!taken && still, "the mount the link led to was taken away");
    }

    #[test]
    fn only_the_outermost_mounts_strictly_below_the_drop_directories_are_found() {
        use std::os::unix::ffi::OsStrExt;
        let found = below(TABLE, &spool_dirs());
        let points: Vec<&Path> = found.iter().map(|m| m.point.as_path()).collect();
        let odd = std::ffi::OsStr::from_bytes(b"/var/spool/carma/pending/\xff");
        assert_eq!(
            points,
            [
                Path::new("/var/spool/carma/pending/x"),
                Path::new("/var/spool/carma/cancel/a b"),
                Path::new(odd),
            ]
        );
        assert_eq!((found[0].id, found[0].kind.as_str()), (40, "fuse.sshfs"));
        assert_eq!(found[0].owner, Some(1001));
        assert_eq!(found[1].owner, None);
        assert_eq!(
            found[2].owner,
            Some(1003),
            "names that are not UTF-8 read too"
        );
    }
}
