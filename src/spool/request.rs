//! Requests users leave in `cancel/` for the daemon: cancel, hold,
//! release, change priority, requeue.
//!
//! A request is an empty file; its owner (as the file system says) is the
//! requester, and its name says what to do to which task. The plain task
//! name is a cancellation (the original form, kept so that older `carma
//! cancel`s still work); the others put a verb in front: `hold.TASK`,
//! `release.TASK`, `priority.N.TASK`, `requeue.TASK`, `cancel-array.TASK`
//! (every task of the array TASK belongs to). Task names begin with a digit, so no
//! task name is mistaken for a verb, and the name carries the whole
//! request: nothing is read from a file a user wrote.

use std::fmt;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use super::Spool;

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Cancel,
    Hold,
    Release,
    Priority(i32),
    Requeue,
    CancelArray,
}

/// A request, as its file name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub verb: Verb,
    /// The task as the requester named it (a full name or a number).
    pub task: String,
}

impl Request {
    /// Reads a request's file name; `None` for a name no `carma` writes.
    pub fn parse(file_name: &str) -> Option<Request> {
        let request = |verb, task: &str| {
            (!task.is_empty()).then(|| Request {
                verb,
                task: task.to_owned(),
            })
        };
        if let Some(task) = file_name.strip_prefix("hold.") {
            return request(Verb::Hold, task);
        }
        if let Some(task) = file_name.strip_prefix("release.") {
            return request(Verb::Release, task);
        }
        if let Some(task) = file_name.strip_prefix("requeue.") {
            return request(Verb::Requeue, task);
        }
        if let Some(task) = file_name.strip_prefix("cancel-array.") {
            return request(Verb::CancelArray, task);
        }
        if let Some(rest) = file_name.strip_prefix("priority.") {
            let (n, task) = rest.split_once('.')?;
            return request(Verb::Priority(n.parse().ok()?), task);
        }
        request(Verb::Cancel, file_name)
    }
}

impl Spool {
    /// Leaves `request` for the daemon; returns the request's path, which
    /// the daemon removes once it has acted.
    pub fn leave_request(&self, request: &Request) -> io::Result<PathBuf> {
        let path = self.cancel_dir().join(request.to_string());
        // Never through a link someone planted under the request's name.
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)?;
        Ok(path)
    }
}

impl Verb {
    /// What it asks, in words (`cancel`, `requeue`).
    pub fn describe(self) -> &'static str {
        match self {
            Verb::Cancel => "cancel",
            Verb::Hold => "hold",
            Verb::Release => "release",
            Verb::Priority(_) => "priority",
            Verb::Requeue => "requeue",
            Verb::CancelArray => "cancel array",
        }
    }
}

/// The request's file name.
impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.verb {
            Verb::Cancel => write!(f, "{}", self.task),
            Verb::Hold => write!(f, "hold.{}", self.task),
            Verb::Release => write!(f, "release.{}", self.task),
            Verb::Priority(n) => write!(f, "priority.{n}.{}", self.task),
            Verb::Requeue => write!(f, "requeue.{}", self.task),
            Verb::CancelArray => write!(f, "cancel-array.{}", self.task),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_plain_names_cancel() {
        for verb in [
            Verb::Cancel,
            Verb::Hold,
            Verb::Release,
            Verb::Priority(-5),
            Verb::Requeue,
            Verb::CancelArray,
        ] {
            let r = Request {
                verb,
                task: "000042-resnet.v2".into(),
            };
            assert_eq!(Request::parse(&r.to_string()), Some(r));
        }
        assert_eq!(Request::parse("42").map(|r| r.verb), Some(Verb::Cancel));
        assert_eq!(Request::parse("priority.x.42"), None);
        assert_eq!(Request::parse("priority.5"), None);
        assert_eq!(Request::parse("hold."), None);
    }
}
