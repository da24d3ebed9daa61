//! What recent submissions became, said in `status.json` for their
//! submitters: a `carma submit` that handed jobs over looks for its
//! token there to learn the task's name, also after the daemon that took
//! them died before answering. The list is bounded, and shared fairly: a
//! user who floods it evicts their own oldest entries first, never another
//! user's while theirs are more.

use std::collections::VecDeque;

use serde::{Serialize, Serializer};

/// Entries kept in all.
const KEPT: usize = 256;

/// (submission token or `pending/` entry, task name), oldest first.
#[derive(Debug, Default)]
pub(super) struct Adoptions(VecDeque<(String, String)>);

impl Adoptions {
    /// The submission `entry` became task `name`.
    pub(super) fn remember(&mut self, entry: String, name: String) {
        self.0.push_back((entry, name));
        if self.0.len() > KEPT {
            let evicted = evictee(&self.0);
            self.0.remove(evicted);
        }
    }

    pub(super) fn entries(&self) -> Vec<(String, String)> {
        self.0.iter().cloned().collect()
    }
}

/// As the list [`Adoptions::entries`] gives, read in place.
impl Serialize for Adoptions {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Whose entry `entry` is: `carma submit` names its submissions
/// `submit-UID-...` (and the daemon takes no token over its socket that
/// does not start with the sender's uid); anything else is nobody's.
pub(super) fn submitter(entry: &str) -> Option<u32> {
    entry
        .strip_prefix("submit-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The entry to drop: the oldest of whoever has the most.
fn evictee(entries: &VecDeque<(String, String)>) -> usize {
    let mut counts: Vec<(Option<u32>, usize)> = Vec::new();
    for (entry, _) in entries {
        let who = submitter(entry);
        match counts.iter_mut().find(|(w, _)| *w == who) {
            Some((_, n)) => *n += 1,
            None => counts.push((who, 1)),
        }
    }
    let most = counts
        .iter()
        .max_by_key(|(_, n)| *n)
        .map(|(who, _)| *who)
        .unwrap_or(None);
    entries
        .iter()
        .position(|(entry, _)| submitter(entry) == most)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_evicts_the_flooders_own_entries() {
        let mut adoptions = Adoptions::default();
        adoptions.remember("submit-1001-7-1".into(), "000001-a".into());
        for i in 0..1000 {
            adoptions.remember(format!("submit-1002-9-{i}"), format!("{:06}-b", i + 2));
        }
        let entries = adoptions.entries();
        assert_eq!(entries.len(), KEPT);
        assert_eq!(entries[0].0, "submit-1001-7-1", "alice's is kept");
        assert_eq!(
            entries[KEPT - 1].0,
            "submit-1002-9-999",
            "bob's newest is kept"
        );
        // Two users past the bound share it.
        for i in 0..300 {
            adoptions.remember(format!("submit-1001-8-{i}"), format!("{i}-a"));
        }
        let alice = adoptions
            .entries()
            .iter()
            .filter(|(e, _)| submitter(e) == Some(1001))
            .count();
        assert!((127..=129).contains(&alice), "{alice}");
    }

    #[test]
    fn the_submitter_is_read_from_the_token() {
        assert_eq!(submitter("submit-1001-22-333"), Some(1001));
        assert_eq!(submitter("submit-x-1"), None);
        assert_eq!(submitter("train.rad"), None);
    }
}
