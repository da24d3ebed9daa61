//! Task names: `000042-resnet50`, a sequence number and the job's stem.
//!
//! The number gives every task a stable identity and the queue its order
//! (first submitted, first placed, also after a restart rebuilds the queue
//! from the directories); the stem lets people recognise their job in
//! `ls` and `journalctl`.

use std::fmt;

use crate::sched::TaskId;

/// Longest stem kept in a task name.
const MAX_STEM: usize = 48;

/// A task's directory name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskName {
    seq: u64,
    name: String,
}

impl TaskName {
    /// The name for task number `seq` made from a file stem; characters
    /// other than letters, digits, `-`, `_` and `.` become `_`.
    pub fn new(seq: u64, stem: &str) -> TaskName {
        let stem: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .take(MAX_STEM)
            .collect();
        let stem = stem.trim_start_matches('.');
        let stem = if stem.is_empty() { "job" } else { stem };
        TaskName {
            seq,
            name: format!("{seq:06}-{stem}"),
        }
    }

    /// Reads a directory name; `None` if it is not a task name.
    pub fn parse(dir_name: &str) -> Option<TaskName> {
        let (digits, stem) = dir_name.split_once('-')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || stem.is_empty() {
            return None;
        }
        Some(TaskName {
            seq: digits.parse().ok()?,
            name: dir_name.to_owned(),
        })
    }

    /// The part after the number: the job's stem.
    pub fn stem(&self) -> &str {
        self.name.split_once('-').map_or("job", |(_, stem)| stem)
    }

    /// The sequence number, which is also the core's task id.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn id(&self) -> TaskId {
        TaskId(self.seq)
    }

    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sort_by_number() {
        let a = TaskName::new(42, "resnet50");
        assert_eq!(a.as_str(), "000042-resnet50");
        assert_eq!(TaskName::parse("000042-resnet50"), Some(a.clone()));
        let b = TaskName::new(1_000_000, "x");
        assert_eq!(b.as_str(), "1000000-x");
        assert!(a < b);
        assert_eq!(b.id(), TaskId(1_000_000));
    }

    #[test]
    fn odd_stems_are_made_safe() {
        assert_eq!(
            TaskName::new(1, "my job/../x").as_str(),
            "000001-my_job_.._x"
        );
        assert_eq!(TaskName::new(1, "..hidden").as_str(), "000001-hidden");
        assert_eq!(TaskName::new(1, "").as_str(), "000001-job");
        assert_eq!(
            TaskName::new(1, &"a".repeat(200)).as_str().len(),
            7 + MAX_STEM
        );
    }

    #[test]
    fn other_names_are_not_tasks() {
        for name in ["x.rad", "-x", "12x-y", "0001-", ".tmp", "claim-000001-x"] {
            assert_eq!(TaskName::parse(name), None, "{name}");
        }
    }
}
