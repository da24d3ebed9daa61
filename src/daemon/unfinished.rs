//! Entries of `pending/` still being written: a file is taken when its
//! writer closes it, a directory made in place once it has been left
//! alone, and neither is waited for without bounds. Each waiting entry is
//! looked at on every turn of the loop, and a hard link makes a create
//! event and no close: links to a file its user keeps touching would be
//! waited for, and looked at, for ever.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long an entry may stay open for writing before it is taken anyway
/// (a writer that crashed never closes it).
pub(super) const GRACE: Duration = Duration::from_secs(5);

/// How long an entry is waited for however recently it changed: a job
/// file is at most 1 MiB and a summary 8, and one kept busy on purpose
/// (touched every few seconds) must not be waited for for ever.
const LIMIT: Duration = Duration::from_secs(60);

/// Entries waited for at once, and of one owner's: past them, a new one
/// is taken at once (a file still being written is then refused, kept
/// with its reason). Files are written one or a few at a time; one user's
/// thousands must not make another's copy be taken half-written.
const MAX: usize = 4096;
const PER_OWNER: usize = 1024;

/// The entries waited for, when each was first seen, and whose each is.
#[derive(Debug, Default)]
pub(super) struct Unfinished {
    entries: HashMap<String, (Instant, u32)>,
    owners: HashMap<u32, usize>,
}

impl Unfinished {
    /// Waits for `name`, `owner`'s; false when there is no room for it
    /// (it is to be taken now).
    pub(super) fn wait(&mut self, name: String, owner: u32) -> bool {
        if self.entries.contains_key(&name) {
            return true;
        }
        let owned = self.owners.get(&owner).copied().unwrap_or(0);
        if self.entries.len() >= MAX || owned >= PER_OWNER {
            return false;
        }
        self.entries.insert(name, (Instant::now(), owner));
        *self.owners.entry(owner).or_default() += 1;
        true
    }

    /// `name` is complete (or gone).
    pub(super) fn remove(&mut self, name: &str) {
        if let Some((_, owner)) = self.entries.remove(name) {
            match self.owners.get_mut(&owner) {
                Some(n) if *n > 1 => *n -= 1,
                _ => {
                    self.owners.remove(&owner);
                }
            }
        }
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether a job file is among them (it may name any summary).
    pub(super) fn writing_job(&self) -> bool {
        self.entries.keys().any(|name| name.ends_with(".rad"))
    }

    /// The entries to take now, no longer waited for: waited for
    /// [`LIMIT`], or for [`GRACE`] and `quiet` (unchanged for as long).
    pub(super) fn take_stale(&mut self, quiet: impl Fn(&str) -> bool) -> Vec<String> {
        let stale: Vec<String> = self
            .entries
            .iter()
            .filter(|&(name, (since, _))| {
                let waited = since.elapsed();
                waited >= LIMIT || (waited >= GRACE && quiet(name))
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in &stale {
            self.remove(name);
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_owner_fills_only_their_own_share_and_a_removal_gives_it_back() {
        let mut unfinished = Unfinished::default();
        for i in 0..PER_OWNER {
            assert!(unfinished.wait(format!("a{i}"), 7));
        }
        assert!(!unfinished.wait("one-more".into(), 7), "7's share is full");
        assert!(unfinished.wait("a0".into(), 7), "one already waited for");
        assert!(unfinished.wait("b.rad".into(), 8), "8 has room");
        assert!(unfinished.writing_job());
        unfinished.remove("a0");
        assert!(unfinished.wait("one-more".into(), 7));
        assert_eq!(unfinished.len(), PER_OWNER + 1);
        // None is stale yet; quiet ones are after the grace (not tested
        // here: it counts real time).
        assert!(unfinished.take_stale(|_| true).is_empty());
    }
}
