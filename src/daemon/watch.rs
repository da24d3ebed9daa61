//! Spool changes from the file system (`notify`): hints, never the truth.
//!
//! The daemon acts on what a change points at only after looking at the
//! directory itself, and rescans whole directories at start and whenever
//! the kernel's event queue overflowed, so a lost or misleading event can
//! delay a task but never lose it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use super::Msg;

/// What happened to an entry of a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An entry was created in `pending/`: a file may still be written, a
    /// directory still filled.
    Created(String),
    /// A file in `pending/` was closed after writing: it is complete.
    Written(String),
    /// An entry was renamed into `pending/` (complete by construction).
    MovedIn(String),
    /// An entry left `pending/` (renamed away or deleted).
    Gone(String),
    /// Something appeared in `cancel/`.
    CancelRequested,
    /// Events were lost: look at everything again.
    Rescan,
}

/// Changes sent and not yet handled that the watcher stops at: anyone may
/// make and remove names in `pending/` as fast as the kernel lets them.
const MAX_QUEUED: usize = 4096;

/// The watcher's changes the loop has not handled yet, kept bounded: a
/// user making and removing names in a loop must neither grow the
/// daemon's memory without end nor keep its loop draining changes while
/// nothing launches and nobody is answered. Beyond [`MAX_QUEUED`] the
/// watcher drops changes and asks once for a rescan, which finds
/// whatever they pointed at.
#[derive(Debug, Default)]
pub struct Backlog {
    queued: AtomicUsize,
    /// Changes were dropped since the last rescan began.
    overflowed: AtomicBool,
}

impl Backlog {
    /// The watcher's side: `change`, a rescan in its place, or nothing.
    fn admit(&self, change: Change) -> Option<Change> {
        let change = if self.queued.load(Ordering::Acquire) < MAX_QUEUED {
            change
        } else if !self.overflowed.swap(true, Ordering::AcqRel) {
            Change::Rescan
        } else {
            return None;
        };
        self.queued.fetch_add(1, Ordering::AcqRel);
        Some(change)
    }

    /// The loop's side: one change taken off the queue.
    pub fn handled(&self) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }

    /// The loop's side: a rescan begins, and sees whatever the changes
    /// dropped before now pointed at.
    pub fn rescanning(&self) {
        self.overflowed.store(false, Ordering::Release);
    }
}

/// Watches `pending/` and `cancel/`; changes arrive as [`Msg::Spool`],
/// counted in `backlog`.
pub fn watch(
    pending: &Path,
    cancel: &Path,
    tx: Sender<Msg>,
    backlog: Arc<Backlog>,
) -> notify::Result<RecommendedWatcher> {
    let (pending_dir, cancel_dir) = (pending.to_owned(), cancel.to_owned());
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<Event>| {
        let changes = match result {
            Ok(event) => classify(&event, &pending_dir, &cancel_dir),
            Err(e) => {
                log::warn!("spool watcher: {e}; rescanning");
                vec![Change::Rescan]
            }
        };
        for change in changes.into_iter().filter_map(|c| backlog.admit(c)) {
            let _ = tx.send(Msg::Spool(change));
        }
    })?;
    watcher.watch(pending, RecursiveMode::NonRecursive)?;
    watcher.watch(cancel, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

/// Turns one notify event into spool changes.
fn classify(event: &Event, pending: &Path, cancel: &Path) -> Vec<Change> {
    if event.need_rescan() {
        return vec![Change::Rescan];
    }
    let in_dir = |path: &PathBuf, dir: &Path| -> Option<String> {
        (path.parent() == Some(dir))
            .then(|| path.file_name()?.to_str().map(str::to_owned))
            .flatten()
            .filter(|name| !name.starts_with('.'))
    };
    let mut changes = Vec::new();
    for (i, path) in event.paths.iter().enumerate() {
        if path.parent() == Some(cancel) {
            if matches!(
                event.kind,
                EventKind::Create(_)
                    | EventKind::Access(AccessKind::Close(AccessMode::Write))
                    | EventKind::Modify(ModifyKind::Name(_))
            ) {
                changes.push(Change::CancelRequested);
            }
            continue;
        }
        let Some(name) = in_dir(path, pending) else {
            // A name that is not UTF-8 is users' input too: the rescan
            // finds it and claims it, to refuse it with its reason.
            if path.parent() == Some(pending)
                && path.file_name().is_some_and(|n| n.to_str().is_none())
            {
                changes.push(Change::Rescan);
            }
            continue;
        };
        let change = match event.kind {
            EventKind::Create(_) => Change::Created(name),
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => Change::Written(name),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Change::MovedIn(name),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) => Change::Gone(name),
            // Both: paths[0] is the old name, paths[1] the new one.
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if i == 0 => Change::Gone(name),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)) => Change::MovedIn(name),
            EventKind::Remove(_) => Change::Gone(name),
            _ => continue,
        };
        changes.push(change);
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, Flag, RemoveKind};

    fn event(kind: EventKind, paths: &[&str]) -> Event {
        let mut e = Event::new(kind);
        for p in paths {
            e = e.add_path(PathBuf::from(p));
        }
        e
    }

    #[test]
    fn a_full_backlog_drops_changes_for_one_rescan_until_a_rescan_begins() {
        let backlog = Backlog::default();
        let change = || Change::Written("a.rad".into());
        for _ in 0..MAX_QUEUED {
            assert_eq!(backlog.admit(change()), Some(change()));
        }
        assert_eq!(backlog.admit(change()), Some(Change::Rescan));
        assert_eq!(backlog.admit(change()), None);
        backlog.handled();
        backlog.handled();
        // Room again, but the rescan asked for is still to come.
        assert_eq!(backlog.admit(change()), Some(change()));
        assert_eq!(backlog.admit(change()), None);
        backlog.rescanning();
        assert_eq!(backlog.admit(change()), Some(Change::Rescan));
        for _ in 0..MAX_QUEUED {
            backlog.handled();
        }
        assert_eq!(backlog.admit(change()), Some(change()));
    }

    #[test]
    fn events_become_spool_changes() {
        let (p, c) = (Path::new("/s/pending"), Path::new("/s/cancel"));
        let written = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(
            classify(&event(written, &["/s/pending/a.rad"]), p, c),
            [Change::Written("a.rad".into())]
        );
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            classify(&event(both, &["/s/pending/x", "/s/pending/000001-x"]), p, c),
            [Change::Gone("x".into()), Change::MovedIn("000001-x".into())]
        );
        let removed = EventKind::Remove(RemoveKind::Folder);
        assert_eq!(
            classify(&event(removed, &["/s/pending/000001-x"]), p, c),
            [Change::Gone("000001-x".into())]
        );
        // Hidden entries (editor temporaries) and other directories are
        // ignored; anything in cancel/ is a request.
        assert!(classify(&event(written, &["/s/pending/.a.swp"]), p, c).is_empty());
        assert!(classify(&event(written, &["/s/pending/sub/a.rad"]), p, c).is_empty());
        let created = EventKind::Create(CreateKind::File);
        assert_eq!(
            classify(&event(created, &["/s/cancel/000001-x"]), p, c),
            [Change::CancelRequested]
        );
        let overflow = Event::new(EventKind::Other).set_flag(Flag::Rescan);
        assert_eq!(classify(&overflow, p, c), [Change::Rescan]);
    }
}
