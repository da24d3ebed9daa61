//! What ended tasks keep of their owners' files. carma's copies of a job
//! file and its model summary stay in `done/` and `failed/` until the task
//! is archived (`daemon.retention_days`), on root's disk. The per-user
//! limits at intake count waiting and running tasks only, so a user who
//! submits short jobs with large summaries, one after another, would grow
//! root's disk at the rate tasks end. Past `queue.user_max_ended_mib`, the
//! copies of that user's oldest ended tasks go; their records and output
//! stay. Counted for the tasks that ended since the daemon started: a start
//! does not re-read `done/`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::spool::{State, TaskName};

/// Each user's ended tasks that still keep copies, oldest first.
#[derive(Debug, Default)]
pub struct Kept {
    /// Bytes one user's ended tasks may keep; 0: no cap.
    pub cap: u64,
    users: HashMap<u32, UserKept>,
    /// Each counted task's owner, to forget it by number.
    owners: HashMap<u64, u32>,
    /// Ended tasks whose copies went, so that a requeue can say why.
    dropped: BTreeSet<u64>,
}

#[derive(Debug, Default)]
struct UserKept {
    bytes: u64,
    /// By number: the oldest submission first.
    tasks: BTreeMap<u64, (u64, State, TaskName)>,
}

impl Kept {
    /// A task of `user` whose copies take `bytes` landed in `state`; the
    /// tasks whose copies must go now, oldest first, to bring the user
    /// back under the cap (this one last, should it alone be over).
    pub fn landed(
        &mut self,
        user: u32,
        bytes: u64,
        state: State,
        name: TaskName,
    ) -> Vec<(State, TaskName)> {
        if self.cap == 0 || bytes == 0 {
            return Vec::new();
        }
        let seq = name.seq();
        self.forget(seq);
        self.owners.insert(seq, user);
        let kept = self.users.entry(user).or_default();
        kept.bytes = kept.bytes.saturating_add(bytes);
        kept.tasks.insert(seq, (bytes, state, name));
        let mut gone = Vec::new();
        while kept.bytes > self.cap {
            let Some((seq, (bytes, state, name))) = kept.tasks.pop_first() else {
                break;
            };
            kept.bytes = kept.bytes.saturating_sub(bytes);
            self.owners.remove(&seq);
            self.dropped.insert(seq);
            gone.push((state, name));
        }
        gone
    }

    /// An ended task left `done/` or `failed/` (requeued or archived).
    pub fn forget(&mut self, seq: u64) {
        self.dropped.remove(&seq);
        let Some(user) = self.owners.remove(&seq) else {
            return;
        };
        if let Some(kept) = self.users.get_mut(&user)
            && let Some((bytes, _, _)) = kept.tasks.remove(&seq)
        {
            kept.bytes = kept.bytes.saturating_sub(bytes);
            if kept.tasks.is_empty() {
                self.users.remove(&user);
            }
        }
    }

    /// Whether task `seq`'s copies went to keep its owner under the cap.
    pub fn dropped(&self, seq: u64) -> bool {
        self.dropped.contains(&seq)
    }

    /// Bytes `user`'s ended tasks keep, as counted (for the tests).
    #[cfg(test)]
    fn bytes(&self, user: u32) -> u64 {
        self.users.get(&user).map_or(0, |k| k.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_copies_go_first_and_only_the_users_own() {
        let mut kept = Kept {
            cap: 100,
            ..Kept::default()
        };
        let name = |seq| TaskName::new(seq, "job");
        assert!(kept.landed(7, 40, State::Done, name(1)).is_empty());
        assert!(kept.landed(8, 90, State::Done, name(2)).is_empty());
        assert!(kept.landed(7, 40, State::Failed, name(3)).is_empty());
        assert_eq!(
            kept.landed(7, 40, State::Done, name(4)),
            vec![(State::Done, name(1))]
        );
        assert_eq!((kept.bytes(7), kept.bytes(8)), (80, 90));
        assert!(kept.dropped(1) && !kept.dropped(3));
        // Requeued or archived: no longer counted, nor said to be dropped.
        kept.forget(3);
        kept.forget(1);
        assert_eq!(kept.bytes(7), 40);
        assert!(!kept.dropped(1));
        // A task over the cap alone keeps nothing.
        assert_eq!(
            kept.landed(9, 500, State::Done, name(5)),
            vec![(State::Done, name(5))]
        );
        assert_eq!(kept.bytes(9), 0);
    }

    #[test]
    fn no_cap_counts_nothing() {
        let mut kept = Kept::default();
        assert!(
            kept.landed(7, 1 << 40, State::Done, TaskName::new(1, "a"))
                .is_empty()
        );
        assert_eq!(kept.bytes(7), 0);
    }
}
