//! The tasks in `done/` and `failed/`, by number, kept by the daemon as
//! they land there: a request or a dependency that names an ended task is
//! answered without listing a directory, so that the cost of a request
//! does not grow with the spool's history (2,000 junk requests once held
//! the loop for 18 s, each listing every state directory).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::spool::{State, TaskName};

/// Ended tasks by number.
#[derive(Debug, Default)]
pub struct Ended {
    tasks: BTreeMap<u64, (State, TaskName)>,
    /// How many are failed (the rest are done), kept as they come and go.
    failed: usize,
    /// Their numbers by job name: a dependency by name looks at the
    /// tasks of that name, not at every task the spool's history holds.
    named: HashMap<Box<str>, BTreeSet<u64>>,
}

impl Ended {
    /// A task landed in `state`.
    pub fn insert(&mut self, state: State, name: TaskName) {
        self.failed += usize::from(state == State::Failed);
        self.named
            .entry(name.stem().into())
            .or_default()
            .insert(name.seq());
        if let Some((was, old)) = self.tasks.insert(name.seq(), (state, name)) {
            self.failed -= usize::from(was == State::Failed);
            self.unname(&old);
        }
    }

    /// A task left `done/` or `failed/` (requeued).
    pub fn remove(&mut self, seq: u64) {
        if let Some((was, old)) = self.tasks.remove(&seq) {
            self.failed -= usize::from(was == State::Failed);
            self.unname(&old);
        }
    }

    /// Drops `old` from the index by name, unless the task that now holds
    /// its number has the same name.
    fn unname(&mut self, old: &TaskName) {
        if self
            .tasks
            .get(&old.seq())
            .is_some_and(|(_, n)| n.stem() == old.stem())
        {
            return;
        }
        if let Some(seqs) = self.named.get_mut(old.stem()) {
            seqs.remove(&old.seq());
            if seqs.is_empty() {
                self.named.remove(old.stem());
            }
        }
    }

    /// The ended tasks of job name `stem`, oldest first.
    pub fn named(&self, stem: &str) -> impl DoubleEndedIterator<Item = (State, &TaskName)> {
        self.named
            .get(stem)
            .into_iter()
            .flatten()
            .filter_map(|seq| self.tasks.get(seq).map(|(state, name)| (*state, name)))
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

    #[test]
    fn tasks_are_found_by_job_name_as_they_come_and_go() {
        let mut ended = Ended::default();
        for (seq, stem) in [(1, "prep"), (2, "train"), (3, "prep")] {
            ended.insert(State::Done, TaskName::new(seq, stem));
        }
        let seqs =
            |ended: &Ended, stem| ended.named(stem).map(|(_, n)| n.seq()).collect::<Vec<_>>();
        assert_eq!(seqs(&ended, "prep"), [1, 3]);
        ended.insert(State::Failed, TaskName::new(3, "prep"));
        assert_eq!(seqs(&ended, "prep"), [1, 3], "the same task, failed now");
        ended.remove(1);
        assert_eq!(seqs(&ended, "prep"), [3]);
        ended.remove(3);
        assert!(seqs(&ended, "prep").is_empty());
        assert!(
            !ended.named.contains_key("prep"),
            "no name is kept for nothing"
        );
        assert_eq!(seqs(&ended, "train"), [2]);
    }
}
