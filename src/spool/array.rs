//! Array jobs: one submitted task copied into one task per index.
//!
//! Each element is a task of its own (a directory, a number, a state), so
//! that elements wait, run and end independently; a copy gets carma's
//! copies of the job's files and a record naming its array and index.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::durable::{sync_tree, write_new};
use super::record::{self, JOB, RECORD, TaskRecord};
use super::{Spool, SpoolError, State, TASK_DIR_MODE, TaskName, at, make_dir, sync_dir};

/// Prefix of an element being made in `staging/`; a crash leaves it there
/// unplaced, and a starting daemon removes it.
pub(super) const STAGED_ELEMENT: &str = "element-";

impl Spool {
    /// A new task in `pending/` with the job files of task `name` (in
    /// `state`) and `record` (renamed to the new task).
    pub fn copy_task(
        &self,
        state: State,
        name: &TaskName,
        record: &TaskRecord,
    ) -> Result<TaskName, SpoolError> {
        let new = TaskName::new(self.allocate(1)?, name.stem());
        let staged = self.staging().join(format!("{STAGED_ELEMENT}{new}"));
        let mut record = record.clone();
        record.name = new.to_string();
        let from = self.task_dir(state, name).join(JOB);
        let made = make_dir(&staged, TASK_DIR_MODE)
            .and_then(|()| copy_tree(&from, &staged.join(JOB)))
            .and_then(|()| write_new(&staged.join(RECORD), &record::to_json(&record)))
            .and_then(|()| sync_tree(&staged));
        if let Err(e) = made {
            let _ = self.discard(&staged);
            return Err(at(&staged)(e));
        }
        let placed = self.place(&staged, State::Pending, &new, Some(&mut record));
        if placed.is_err() {
            let _ = self.discard(&staged);
        }
        let placed = placed?;
        sync_dir(&self.dir(State::Pending)).map_err(at(&self.dir(State::Pending)))?;
        Ok(placed)
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
