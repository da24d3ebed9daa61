//! Array jobs (`array: 1-10%2`): the submitted task becomes the first
//! element and the daemon makes one task per other index.
//!
//! Expansion is idempotent, so a crash in the middle is harmless: the
//! first element's record says it is an array (written before any copy)
//! and, once every element exists, that it is expanded; a restarted
//! daemon finds the elements already made (by their records) and makes
//! only the missing ones. Only then is the spool searched for them: an
//! array just submitted has none yet, and a search of every state
//! directory (`done/` over its whole retention) for each array submitted
//! cost the loop as much as the spool holds.

use std::collections::HashSet;

use super::Daemon;
use crate::spool::record::{ArrayMember, RECORD, write_json};
use crate::spool::{Spool, State, TaskName};

impl Daemon {
    /// Makes the missing elements of the array whose first element is
    /// task `seq`; `fresh`: just submitted, so none is made yet.
    pub(super) fn expand_array(&mut self, seq: u64, fresh: bool) {
        let Some(task) = self.life.tasks.get(&seq) else {
            return;
        };
        let (Some(spec), Some(member)) = (task.job.array, task.record.array) else {
            return;
        };
        if member.job != seq || member.expanded {
            return;
        }
        let (name, state, record) = (task.name.clone(), task.state, task.record.clone());
        let dir = self.spool.task_dir(state, &name);
        if let Err(e) = write_json(&dir.join(RECORD), &record) {
            log::error!("{name}: cannot record its array, elements not made: {e}");
            return;
        }
        let made: HashSet<u32> = match fresh {
            true => HashSet::new(),
            false => elements(&self.spool, seq)
                .into_iter()
                .map(|(_, i)| i)
                .collect(),
        };
        let elements: Vec<_> = (spec.first..=spec.last)
            .filter(|i| *i != member.index && !made.contains(i))
            .map(|index| {
                let mut element = record.clone();
                element.requeued();
                element.array = Some(ArrayMember {
                    index,
                    expanded: false,
                    ..member
                });
                element
            })
            .collect();
        let (placed, failed) = self.spool.copy_tasks(state, &name, &elements);
        // Taken in now, not when their arrival is heard: until then the
        // owner's count of tasks held the array as one, and a request of
        // 64 arrays passed `queue.user_max_tasks` 64 times over.
        for element in placed {
            self.take(element, State::Pending);
        }
        if let Some(e) = failed {
            log::error!(
                "{name}: cannot make all its array elements: {e}; the rest are made when the \
                 daemon next starts"
            );
            return;
        }
        if let Some(task) = self.life.tasks.get_mut(&seq) {
            if let Some(a) = task.record.array.as_mut() {
                a.expanded = true;
            }
            if let Err(e) = write_json(&dir.join(RECORD), &task.record) {
                log::warn!("{name}: cannot record its array as made: {e}");
            }
        }
        log::info!(
            "{name}: array {seq} of {} tasks (indices {}-{})",
            spec.last - spec.first + 1,
            spec.first,
            spec.last
        );
    }
}

/// The tasks of array `job` that exist anywhere in the spool, with their
/// indices, as their records say. Only carma's own task directories are
/// read: in `pending/` anyone may make an entry under a task's name.
pub(super) fn elements(spool: &Spool, job: u64) -> Vec<(TaskName, u32)> {
    let mut found = Vec::new();
    for state in State::ALL {
        let Ok(listing) = spool.list(state) else {
            continue;
        };
        let tasks = listing.tasks.into_iter();
        for name in tasks.filter(|n| n.seq() >= job && spool.is_task_dir(state, n)) {
            let record = spool.load_record(state, &name).ok();
            if let Some(a) = record.and_then(|r| r.array).filter(|a| a.job == job) {
                found.push((name, a.index));
            }
        }
    }
    found
}
