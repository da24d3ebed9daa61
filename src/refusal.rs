//! Why carma would not run a task, by kind. The reason in words goes to
//! the task's owner and may quote their job file (a parse error shows the
//! line); the kind is what may be said to everyone: it labels the
//! refusals counted for Prometheus and stands for the reason on the status
//! page, which anyone who reaches it may read.

use std::fmt;

/// The kinds of refusal, each a label value of `carma_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The job file, or carma's copy of it, cannot be used: not a regular
    /// file, a link, unreadable, or it does not parse.
    InvalidJob,
    /// Its owner may not run jobs here (root, or no account).
    Owner,
    /// It asks for more than a user may (priority, retries, host limits,
    /// the per-user limits on tasks and spool space).
    OverLimit,
    /// Its dependencies name no task it may wait for.
    Dependency,
    /// carma could not write down what it decided about it.
    Unrecorded,
    /// No set of this server's GPUs could ever run it.
    Unplaceable,
    /// It asks for more than the queue allows anyone (a longer time limit
    /// than the maximum).
    QueueLimit,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::InvalidJob,
        Refusal::Owner,
        Refusal::OverLimit,
        Refusal::Dependency,
        Refusal::Unrecorded,
        Refusal::Unplaceable,
        Refusal::QueueLimit,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::InvalidJob => "invalid_job",
            Refusal::Owner => "owner",
            Refusal::OverLimit => "over_limit",
            Refusal::Dependency => "dependency",
            Refusal::Unrecorded => "unrecorded",
            Refusal::Unplaceable => "unplaceable",
            Refusal::QueueLimit => "queue_limit",
        }
    }

    /// What everyone may read of a refusal of this kind.
    pub fn public(self) -> &'static str {
        match self {
            Refusal::InvalidJob => "refused: not a job carma can run",
            Refusal::Owner => "refused: its owner may not run jobs here",
            Refusal::OverLimit => "refused: over a per-user limit",
            Refusal::Dependency => "refused: its dependencies name no task it may wait for",
            Refusal::Unrecorded => "refused: carma could not record it",
            Refusal::Unplaceable => "refused: no GPU of this server can run it",
            Refusal::QueueLimit => "refused: over a limit of the queue",
        }
    }

    /// A refusal of this kind, with its reason in words.
    pub fn because(self, why: impl Into<String>) -> Refused {
        Refused {
            kind: self,
            why: why.into(),
        }
    }
}

/// A refusal and its reason in words (for the owner and the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub kind: Refusal,
    pub why: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}
