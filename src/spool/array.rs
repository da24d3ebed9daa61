//! Array jobs: one submitted task copied into one task per index.
//!
//! Each element is a task of its own (a directory, a number, a state), so
//! that elements wait, run and end independently; a copy gets carma's
//! copies of the job's files and a record naming its array and index.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::durable::{make_trees_durable, write_new};
use super::record::{self, JOB, RECORD, TaskRecord};
use super::{Spool, SpoolError, State, TASK_DIR_MODE, TaskName, at, make_dir, sync_dir};

/// Prefix of an element being made in `staging/`; a crash leaves it there
/// unplaced, and a starting daemon removes it.
pub(super) const STAGED_ELEMENT: &str = "element-";

impl Spool {
    /// New tasks in `pending/`, one per record of `records`, each with
    /// the job files of task `name` (in `state`) and its record (renamed
    /// to the new task): an array's elements. Made in `staging/` and put
    /// on disk together (one `syncfs` for many, unless much else waits to
    /// be written), then placed, and `pending/` flushed once: a thousand
    /// elements cost a few flushes, not five each. The tasks placed, and
    /// the error that stopped the rest, if one did.
    pub fn copy_tasks(
        &self,
        state: State,
        name: &TaskName,
        records: &[TaskRecord],
    ) -> (Vec<TaskName>, Option<SpoolError>) {
        if records.is_empty() {
            return (Vec::new(), None);
        }
        let first = match self.allocate(records.len() as u64) {
            Ok(first) => first,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let from = self.task_dir(state, name).join(JOB);
        let mut staged = Vec::with_capacity(records.len());
        let mut failed = None;
        for (seq, record) in (first..).zip(records) {
            let new = TaskName::new(seq, name.stem());
            let dir = self.staging().join(format!("{STAGED_ELEMENT}{new}"));
            let mut record = record.clone();
            record.name = new.to_string();
            let made = make_dir(&dir, TASK_DIR_MODE)
                .and_then(|()| copy_tree(&from, &dir.join(JOB)))
                .and_then(|()| write_new(&dir.join(RECORD), &record::to_json(&record)));
            if let Err(e) = made {
                let _ = self.discard(&dir);
                failed = Some(at(&dir)(e));
                break;
            }
            staged.push((dir, new, record));
        }
        let dirs: Vec<&Path> = staged.iter().map(|(dir, _, _)| dir.as_path()).collect();
        if let Err(e) = make_trees_durable(&dirs) {
            for (dir, _, _) in &staged {
                let _ = self.discard(dir);
            }
            return (Vec::new(), Some(at(&self.staging())(e)));
        }
        let mut placed = Vec::with_capacity(staged.len());
        for (dir, new, mut record) in staged {
            match self.place(&dir, State::Pending, &new, Some(&mut record)) {
                Ok(name) => placed.push(name),
                Err(e) => {
                    let _ = self.discard(&dir);
                    failed.get_or_insert(e);
                }
            }
        }
        if !placed.is_empty()
            && let Err(e) = sync_dir(&self.dir(State::Pending))
        {
            failed.get_or_insert(at(&self.dir(State::Pending))(e));
        }
        (placed, failed)
    }
}

/// Copies carma's own job files: directories and regular files only, each
/// with its owner and mode (anything else there was refused on the way
/// in, and is not copied now either).
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(from)?;
    make_dir(to, meta.mode() & 0o7777)?;
    std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid()))?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let meta = fs::symlink_metadata(&source)?;
        if meta.is_dir() {
            copy_tree(&source, &target)?;
        } else if meta.is_file() {
            fs::copy(&source, &target)?;
            std::os::unix::fs::lchown(&target, Some(meta.uid()), Some(meta.gid()))?;
            fs::set_permissions(&target, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
    }
    Ok(())
}
