//! The tasks that ended lately, as anyone may know them: name, state,
//! owner, when, and why a failure failed in words that quote nothing of
//! the job (a job's failure says "the job failed", not its stderr). The
//! status page lists the failures among them and looks tasks up here, so
//! it never reads a task's directory to answer a request.
//!
//! Shared by pointer with whoever reads it (the HTTP thread's snapshot):
//! a change copies the list only while a reader still holds the old one,
//! at most once per snapshot.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::sched::FailReason;
use crate::spool::{State, TaskName};

/// Endings kept: the last this many tasks that ended.
pub const KEPT: usize = 1000;

/// One task that ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub name: TaskName,
    /// `done` or `failed`.
    pub state: State,
    /// Its owner's name, where the daemon knew it.
    pub user: Option<String>,
    /// When it ended (Unix seconds), where known.
    pub at: Option<f64>,
    /// Why it failed, in words anyone may read.
    pub why: Option<String>,
}

/// The last [`KEPT`] endings, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Endings {
    list: Arc<VecDeque<Ending>>,
}

impl Endings {
    pub fn push(&mut self, ending: Ending) {
        let list = Arc::make_mut(&mut self.list);
        list.retain(|e| e.name != ending.name);
        if list.len() >= KEPT {
            list.pop_front();
        }
        list.push_back(ending);
    }

    /// The list as it is now, for a reader on another thread.
    pub fn shared(&self) -> Arc<VecDeque<Ending>> {
        Arc::clone(&self.list)
    }
}

/// Why a task failed, in words anyone may read: carma's own, never the
/// job's (a failed job's reason ends with its last line of stderr).
pub fn public_reason(reason: &FailReason) -> String {
    match reason {
        FailReason::Exit(_) => "the job failed (its owner sees how: carma show)".to_string(),
        FailReason::OomRetriesExhausted { .. }
        | FailReason::Cancelled
        | FailReason::Unplaceable(_)
        | FailReason::Refused(_)
        | FailReason::TimeLimit(_)
        | FailReason::Dependency(_) => reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(seq: u64) -> Ending {
        Ending {
            name: TaskName::new(seq, "x"),
            state: State::Done,
            user: None,
            at: None,
            why: None,
        }
    }

    #[test]
    fn the_last_endings_are_kept_once_each() {
        let mut endings = Endings::default();
        for seq in 0..KEPT as u64 + 5 {
            endings.push(ending(seq));
        }
        endings.push(ending(KEPT as u64 + 4));
        let list = endings.shared();
        assert_eq!(list.len(), KEPT);
        assert_eq!(list.front().map(|e| e.name.seq()), Some(5));
        assert_eq!(list.back().map(|e| e.name.seq()), Some(KEPT as u64 + 4));
    }

    #[test]
    fn a_jobs_own_words_are_never_public() {
        let said = public_reason(&FailReason::Exit("exit status 1: secret=hunter2".into()));
        assert!(!said.contains("hunter2"), "{said}");
        assert_eq!(public_reason(&FailReason::Cancelled), "cancelled");
    }
}
