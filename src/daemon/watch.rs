//! Spool changes from the file system (`notify`): hints, never the truth.
//!
//! The daemon acts on what a change points at only after looking at the
//! directory itself, and rescans whole directories at start and whenever
//! the kernel's event queue overflowed, so a lost or misleading event can
//! delay a task but never lose it.

use std::path::{Path, PathBuf};
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

/// Watches `pending/` and `cancel/`; changes arrive as [`Msg::Spool`].
pub fn watch(pending: &Path, cancel: &Path, tx: Sender<Msg>) -> notify::Result<RecommendedWatcher> {
    let (pending_dir, cancel_dir) = (pending.to_owned(), cancel.to_owned());
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<Event>| {
        let changes = match result {
            Ok(event) => classify(&event, &pending_dir, &cancel_dir),
            Err(e) => {
                log::warn!("spool watcher: {e}; rescanning");
                vec![Change::Rescan]
            }
        };
        for change in changes {
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
