//! The daemon's waiting and running tasks, and what each user holds among
//! them: the per-user limits at intake (`queue.user_max_tasks`,
//! `queue.user_max_spool_mib`) ask on every submission, so the totals are
//! kept as tasks come and go, never counted.

use std::collections::HashMap;
use std::ops::Deref;

use super::Task;

/// What one user's waiting and running tasks hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Holding {
    pub tasks: u64,
    /// Bytes of the job files carma copied into the spool for them.
    pub bytes: u64,
}

/// Tasks by number, with each user's [`Holding`]. Each task is boxed: a
/// `Task` is over a kilobyte, and a table of them inline would be copied
/// whole, old and new side by side, each time it grows (29 MB at once for
/// 10,000 queued tasks, where the boxes' addresses take 160 KB).
#[derive(Default)]
pub struct Tasks {
    by_seq: HashMap<u64, Box<Task>>,
    users: HashMap<u32, Holding>,
}

impl Deref for Tasks {
    type Target = HashMap<u64, Box<Task>>;

    fn deref(&self) -> &Self::Target {
        &self.by_seq
    }
}

impl Tasks {
    pub fn insert(&mut self, seq: u64, task: Task) {
        if let Some(user) = task.owner {
            let h = self.users.entry(user).or_default();
            h.tasks += 1;
            h.bytes += task.bytes;
        }
        if let Some(old) = self.by_seq.insert(seq, Box::new(task)) {
            self.forget(&old);
        }
    }

    pub fn remove(&mut self, seq: &u64) -> Option<Task> {
        let task = self.by_seq.remove(seq)?;
        self.forget(&task);
        Some(*task)
    }

    /// A task, to change (its user and size stay as they were).
    pub fn get_mut(&mut self, seq: &u64) -> Option<&mut Task> {
        self.by_seq.get_mut(seq).map(|task| &mut **task)
    }

    /// The running tasks, to change (their users and sizes stay as they
    /// were).
    pub fn running_mut(&mut self) -> impl Iterator<Item = &mut Task> {
        self.by_seq
            .values_mut()
            .map(|task| &mut **task)
            .filter(|task| task.state == crate::spool::State::Running)
    }

    pub fn holding(&self, user: u32) -> Holding {
        self.users.get(&user).copied().unwrap_or_default()
    }

    fn forget(&mut self, task: &Task) {
        if let Some(h) = task.owner.and_then(|u| self.users.get_mut(&u)) {
            h.tasks = h.tasks.saturating_sub(1);
            h.bytes = h.bytes.saturating_sub(task.bytes);
        }
    }
}
