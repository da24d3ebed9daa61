//! The tasks in `done/` and `failed/`, by number, kept by the daemon as
//! they land there: a request or a dependency that names an ended task is
//! answered without listing a directory, so that the cost of a request
//! does not grow with the spool's history (2,000 junk requests once held
//! the loop for 18 s, each listing every state directory).

use std::collections::BTreeMap;

use crate::spool::{State, TaskName};

/// Ended tasks by number.
#[derive(Debug, Default)]
pub struct Ended {
    tasks: BTreeMap<u64, (State, TaskName)>,
    /// How many are failed (the rest are done), kept as they come and go.
    failed: usize,
}

impl Ended {
    /// A task landed in `state`.
    pub fn insert(&mut self, state: State, name: TaskName) {
        self.failed += usize::from(state == State::Failed);
        if let Some((was, _)) = self.tasks.insert(name.seq(), (state, name)) {
            self.failed -= usize::from(was == State::Failed);
        }
    }

    /// A task left `done/` or `failed/` (requeued).
    pub fn remove(&mut self, seq: u64) {
        if let Some((was, _)) = self.tasks.remove(&seq) {
            self.failed -= usize::from(was == State::Failed);
        }
    }

    /// Tasks in `done/` and in `failed/`.
    pub fn counts(&self) -> (usize, usize) {
        (self.tasks.len() - self.failed, self.failed)
    }

    /// The ended task `query` names: its number or its full name, as
    /// requests name tasks.
    pub fn find(&self, query: &str) -> Option<(State, &TaskName)> {
        let seq = seq_of(query)?;
        let (state, name) = self.tasks.get(&seq)?;
        (name.as_str() == query || seq.to_string() == query).then_some((*state, name))
    }

    pub fn get(&self, seq: u64) -> Option<State> {
        self.tasks.get(&seq).map(|(state, _)| *state)
    }

    /// Up to `n` ended tasks numbered above `after`, in order: a pass
    /// over all of them, a few at a time.
    pub fn after(&self, after: u64, n: usize) -> Vec<(State, TaskName)> {
        self.tasks
            .range(after.saturating_add(1)..)
            .take(n)
            .map(|(_, (state, name))| (*state, name.clone()))
            .collect()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (State, &TaskName)> {
        self.tasks.values().map(|(state, name)| (*state, name))
    }
}

/// The task number a request's query gives: the number itself, or the
/// number of a full task name.
pub fn seq_of(query: &str) -> Option<u64> {
    query
        .parse()
        .ok()
        .or_else(|| TaskName::parse(query).map(|n| n.seq()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_found_by_number_or_full_name_only() {
        let mut ended = Ended::default();
        let name = TaskName::new(42, "resnet");
        ended.insert(State::Done, name.clone());
        assert_eq!(ended.find("42"), Some((State::Done, &name)));
        assert_eq!(ended.find("000042-resnet"), Some((State::Done, &name)));
        assert_eq!(ended.find("000042-other"), None);
        assert_eq!(ended.find("resnet"), None);
        ended.insert(State::Failed, TaskName::new(43, "x"));
        ended.insert(State::Failed, name.clone());
        assert_eq!(ended.counts(), (0, 2));
        ended.remove(42);
        assert_eq!(ended.find("42"), None);
        assert_eq!(ended.counts(), (0, 1));
    }
}
