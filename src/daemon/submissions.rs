//! Answering the submission socket: the requests of one turn of the loop
//! are checked, written and flushed together
//! ([`crate::spool::Spool::receive`]), taken in as tasks, and answered
//! with their names before the turn's launches. An answer to anyone but
//! carma's own user waits for the status file that names the new tasks:
//! other users find waiting tasks only there (they may not list
//! `pending/`), and once `carma submit` returns, `carma show` or `hold`
//! of the task must find it.

use std::sync::mpsc::Receiver;

use super::listener::{Answer, Submission};
use super::{Daemon, Msg};
use crate::spool::State;
use crate::spool::socket::{Receipt, Reply};

impl Daemon {
    /// Takes in every request that came this turn; returns the answers
    /// to send once the status names the tasks (see the module
    /// documentation).
    pub(super) fn take_handed(&mut self) -> Vec<(Answer, Reply)> {
        let submissions = std::mem::take(&mut self.handed);
        if submissions.is_empty() {
            return Vec::new();
        }
        let me = nix::unistd::geteuid().as_raw();
        // The checked jobs of every request, in one list; a request that
        // fails its check is answered at once and has none there.
        let mut waiting: Vec<(u32, Answer, usize)> = Vec::with_capacity(submissions.len());
        let mut jobs = Vec::new();
        for Submission {
            peer,
            request,
            answer,
        } in submissions
        {
            match request.check(peer, me) {
                Ok(mut handed) => {
                    waiting.push((peer, answer, handed.len()));
                    jobs.append(&mut handed);
                }
                Err(why) => {
                    log::warn!("a submission from uid {peer} refused: {why}");
                    answer.send(&Reply::Refused(why));
                }
            }
        }
        let mut results = match self.spool.receive(jobs) {
            Ok(results) => results.into_iter(),
            Err(e) => {
                log::error!("cannot take in submitted jobs: {e}");
                let reply = Reply::Declined(format!("the daemon cannot take jobs in now: {e}"));
                return waiting
                    .into_iter()
                    .map(|(_, answer, _)| (answer, reply.clone()))
                    .collect();
            }
        };
        let mut answers = Vec::with_capacity(waiting.len());
        for (peer, answer, count) in waiting {
            let mut receipts = Vec::with_capacity(count);
            for result in results.by_ref().take(count) {
                receipts.push(match result {
                    Ok(claimed) => {
                        log::info!(
                            "{}: received {} from uid {peer}",
                            claimed.name,
                            claimed.file
                        );
                        self.receipt_due |= peer != me;
                        let name = claimed.name.to_string();
                        self.remember_adoption(claimed.drop.to_string_lossy().into_owned(), &name);
                        let refused =
                            self.take_with(claimed.name, State::Pending, Some(claimed.record));
                        Receipt {
                            name: Some(name),
                            refused,
                        }
                    }
                    Err(e) => {
                        log::error!("a job from uid {peer} not taken in: {e}");
                        Receipt {
                            name: None,
                            refused: Some(e.to_string()),
                        }
                    }
                });
            }
            answers.push((answer, Reply::Taken(receipts)));
        }
        answers
    }

    /// Stopping: requests not taken in are told so, and their submitters
    /// take the file path (nothing of them was taken).
    pub(super) fn decline_handed(&mut self, rx: &Receiver<Msg>) {
        let arrived = rx.try_iter().filter_map(|msg| match msg {
            Msg::Submission(submission) => Some(*submission),
            _ => None,
        });
        let mut all = std::mem::take(&mut self.handed);
        all.extend(arrived);
        let reply = Reply::Declined("the daemon is stopping".into());
        for submission in all {
            submission.answer.send(&reply);
        }
    }
}
