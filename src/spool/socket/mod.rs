//! The submission socket: a running daemon takes jobs in one round trip.
//!
//! A user's `carma submit` that finds the daemon listening on
//! `submit.sock` in the spool hands its checked jobs over it instead of
//! writing them into `pending/` (carma's own user makes whole tasks there
//! by itself, without waiting for the daemon). The daemon writes the only copy (a claim in `staging/`,
//! made durable as every claim is) and answers with the tasks' names,
//! which are the submitter's receipt: the submitter writes and flushes
//! nothing, and no directory event or status file stands between a
//! submission and its receipt. Where no daemon listens, or one declines
//! (too busy, stopping, its disk failing), the submission takes the file
//! path (`super::submission`), which works with no daemon at all.
//!
//! The socket is the daemon's: a submitter hands jobs only to a peer that
//! runs as the spool's owner. The daemon trusts nothing it reads: a job's
//! user is the connected process's uid as the kernel tells it
//! (`SO_PEERCRED`), except that carma's own user submits other users'
//! files as their owners, as it does through the spool; names, paths and
//! dependencies are held to the rules of a submitted directory's
//! ([`Request::check`]); a request is bounded in size here and in time and number
//! by the daemon's listener.
//!
//! What travels, and how a request is read within its bounds, is in
//! the `wire` module; the daemon answers once and closes the connection. This
//! module is the submitter's side: hand jobs over, and find out what a
//! request that got no answer became.

mod wire;

use std::io::{self, BufRead, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use crate::rad::DependencyRef;

use super::Spool;

pub(in crate::spool) use wire::job_bytes;
pub use wire::{
    Header, Job, JobHeader, MAX_JOBS, MAX_REQUEST_BYTES, Receipt, Reply, Request, RequestError,
    check_rad_name, check_summary_path,
};

/// The socket's name in the spool's root.
pub const SOCKET: &str = "submit.sock";

/// The longest answer a submitter reads.
const MAX_REPLY_BYTES: u64 = 1 << 20;

/// How long a submitter waits for its answer once its request is out: the
/// daemon may be taking in a burst of thousands first. A request is acted
/// on whole or not at all, so one not answered by then may have been
/// taken, and is never sent again by another path.
const PATIENCE: Duration = Duration::from_secs(60);

/// How a hand-over ended, for the submitter: a receipt for each job
/// the daemon answered for, in order, and why the others (if any) were
/// not.
#[derive(Debug, Default)]
pub struct HandOver {
    pub receipts: Vec<Receipt>,
    pub rest: Option<Unsent>,
}

/// Why the jobs after the receipts went without one.
#[derive(Debug)]
pub enum Unsent {
    /// Nothing of them was taken (no daemon listens, or it declined): they
    /// are the submitter's to hand in by the file path.
    NotServed(String),
    /// Their request went out and no answer came: the daemon may have
    /// taken them ([`Spool::settle`] finds out).
    Unanswered(Unanswered),
}

/// A request that got no answer: its token, the pid of the daemon it
/// went to, when its connection ended, and how many jobs it carried.
#[derive(Debug, Clone)]
pub struct Unanswered {
    pub token: String,
    pub daemon: u32,
    pub ended_at: f64,
    pub jobs: usize,
}

/// What a request that got no answer became.
#[derive(Debug, PartialEq)]
pub enum Settled {
    /// Taken in: its tasks, in order.
    Taken(Vec<String>),
    /// Not taken: its jobs may be submitted again.
    NotTaken,
    /// No daemon has said yet (none runs): they may have been taken.
    Unknown,
}

impl Spool {
    /// The daemon's submission socket.
    pub fn socket_path(&self) -> PathBuf {
        self.root().join(SOCKET)
    }

    /// Hands `jobs` to the daemon over its socket (see the module
    /// documentation); in requests of at most [`MAX_JOBS`] jobs and
    /// [`MAX_REQUEST_BYTES`], each answered before the next goes. A job
    /// that does not fit in a request on its own goes by the file path,
    /// with the rest after it. `token` names the submission
    /// (`submit-UID-...`, UID the sender's: the daemon takes no other); its requests
    /// are told apart by a suffix.
    pub fn hand_over(&self, jobs: Vec<Job>, after: &[DependencyRef], token: &str) -> HandOver {
        let mut done = HandOver::default();
        let mut jobs = jobs.into_iter().peekable();
        let mut part = 0;
        while jobs.peek().is_some() {
            let mut request = Request {
                token: match part {
                    0 => token.to_string(),
                    n => format!("{token}.{n}"),
                },
                after: after.to_vec(),
                jobs: Vec::new(),
            };
            while let Some(job) = jobs.next_if(|job| {
                request.jobs.len() < MAX_JOBS
                    && request.bytes() + job_bytes(job) <= MAX_REQUEST_BYTES
            }) {
                request.jobs.push(job);
            }
            let answer = match request.jobs.is_empty() {
                true => Err(Unsent::NotServed("a job too large for one request".into())),
                false => self.send(&request),
            };
            match answer {
                Ok(mut receipts) => done.receipts.append(&mut receipts),
                Err(rest) => {
                    done.rest = Some(rest);
                    break;
                }
            }
            part += 1;
        }
        done
    }

    /// One request, one answer: a receipt per job, or why there is none.
    fn send(&self, request: &Request) -> Result<Vec<Receipt>, Unsent> {
        let path = self.socket_path();
        let mut stream = UnixStream::connect(&path)
            .map_err(|e| Unsent::NotServed(format!("{}: {e}", path.display())))?;
        let daemon = self.check_peer(&stream).map_err(Unsent::NotServed)?;
        let _ = stream.set_write_timeout(Some(PATIENCE));
        let _ = stream.set_read_timeout(Some(PATIENCE));
        let sent = stream.write_all(&request.encode());
        // The answer is one line, read to its end rather than to the
        // connection's, which the daemon closes a moment later.
        let mut answer = Vec::with_capacity(4096);
        let read =
            io::BufReader::new((&mut stream).take(MAX_REPLY_BYTES)).read_until(b'\n', &mut answer);
        match serde_json::from_slice::<Reply>(&answer) {
            Ok(Reply::Taken(receipts)) if receipts.len() == request.jobs.len() => Ok(receipts),
            Ok(Reply::Declined(why)) => Err(Unsent::NotServed(why)),
            Ok(Reply::Refused(why)) => Ok(request
                .jobs
                .iter()
                .map(|_| Receipt::not_taken(&why))
                .collect()),
            // A request cut short is never acted on: the daemon reads it
            // whole before it takes any of it.
            _ if sent.is_err() => Err(Unsent::NotServed(format!(
                "the daemon closed the connection ({})",
                sent.err().map_or_else(String::new, |e| e.to_string())
            ))),
            _ => {
                if let Err(e) = read {
                    log::debug!("no answer from the daemon: {e}");
                }
                Err(Unsent::Unanswered(Unanswered {
                    token: request.token.clone(),
                    daemon,
                    ended_at: super::record::unix_now(),
                    jobs: request.jobs.len(),
                }))
            }
        }
    }

    /// Only the daemon may be handed jobs: whoever listens must run as the
    /// spool's owner (the owner of `staging/`, which no one else can make).
    /// Its pid.
    fn check_peer(&self, stream: &UnixStream) -> Result<u32, String> {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(self.staging())
            .map_err(|e| format!("{}: {e}", self.staging().display()))?
            .uid();
        let peer = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
            .map_err(|e| format!("cannot tell who listens on the socket: {e}"))?;
        match peer.uid() == owner {
            true => Ok(peer.pid() as u32),
            false => Err(format!(
                "{} is served by uid {}, not by the spool's owner (uid {owner}); not used",
                self.socket_path().display(),
                peer.uid()
            )),
        }
    }
}

impl Spool {
    /// Finds out what a request that got no answer became, from a status
    /// written after its connection ended. Only a daemon that stops can
    /// take a request and not answer it (it reads a request whole before
    /// taking any of it, a stopping daemon places and answers what it
    /// took, and an answer fits in the socket's buffer): while the daemon
    /// it went to still serves, it was not taken. Once another daemon
    /// serves, it names in its status what the recent submissions a crash
    /// left became (the request's token is in each task's record): the
    /// tasks named under the token, else nothing was taken. `Unknown` if
    /// no daemon says within `patience`.
    pub fn settle(&self, unanswered: &Unanswered, patience: Duration) -> Settled {
        let named = |status: &super::status::Status| -> Vec<String> {
            let mut names: Vec<String> = status
                .adopted
                .iter()
                .filter(|(token, _)| *token == unanswered.token)
                .map(|(_, name)| name.clone())
                .collect();
            names.sort();
            names
        };
        super::status::wait_for(self, patience, |status| {
            let status = status?;
            if status.updated_at <= unanswered.ended_at {
                return None;
            }
            let names = named(status);
            if !names.is_empty() {
                return Some(Settled::Taken(names));
            }
            // The same daemon, alive after the request, took none of it;
            // another names what it was left.
            (status.daemon_pid != unanswered.daemon || self.daemon_running())
                .then_some(Settled::NotTaken)
        })
        .unwrap_or(Settled::Unknown)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::spool) use super::wire::tests::{job, request};

    fn with_status(spool: &Spool, pid: u32, at: f64, adopted: &[(&str, &str)]) {
        let status: crate::spool::status::Status = crate::spool::status::Status {
            updated_at: at,
            daemon_pid: pid,
            adopted: adopted
                .iter()
                .map(|(t, n)| (t.to_string(), n.to_string()))
                .collect(),
            ..Default::default()
        };
        let text = serde_json::to_vec(&status).unwrap();
        crate::spool::write_replace(&spool.status_file(), &text, crate::spool::PUBLIC).unwrap();
    }

    #[test]
    fn an_unanswered_request_is_settled_by_what_a_daemon_says_after_it() {
        let (_d, spool) = crate::spool::tests::spool();
        let asked = Unanswered {
            token: "submit-1-2-3".into(),
            daemon: 41,
            ended_at: 1000.0,
            jobs: 2,
        };
        let quick = Duration::from_millis(50);
        // Written before the request: says nothing of it.
        with_status(&spool, 42, 999.0, &[]);
        assert_eq!(spool.settle(&asked, quick), Settled::Unknown);
        // The daemon it went to, no longer serving: nothing to tell yet.
        with_status(&spool, 41, 1001.0, &[]);
        assert_eq!(spool.settle(&asked, quick), Settled::Unknown);
        // The next daemon names what the request became, in order ...
        let named = [
            ("submit-1-2-3", "000008-b"),
            ("other", "000009-x"),
            ("submit-1-2-3", "000007-a"),
        ];
        with_status(&spool, 42, 1001.0, &named);
        assert_eq!(
            spool.settle(&asked, quick),
            Settled::Taken(vec!["000007-a".into(), "000008-b".into()])
        );
        // ... or nothing of it: it was not taken.
        with_status(&spool, 42, 1001.0, &[("other", "000009-x")]);
        assert_eq!(spool.settle(&asked, quick), Settled::NotTaken);
    }
}
