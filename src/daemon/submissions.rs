//! Answering the submission socket: each request's claims (on disk
//! already, [`super::listener`]) are placed in `pending/`, taken in as
//! tasks, and answered with their names before the turn's launches. An
//! answer to anyone but carma's own user waits for the status file that
//! names the new tasks: other users find waiting tasks only there (they
//! may not list `pending/`), and once `carma submit` returns, `carma show`
//! or `hold` of the task must find it.

use std::sync::mpsc::Receiver;
use std::time::Instant;

use super::listener::{Answer, Submission, junk_refusal};
use super::{Daemon, Msg};
use crate::accounts::accountable;
use crate::spool::socket::{Receipt, Reply};

impl Daemon {
    /// Takes in every request that came this turn; returns the answers
    /// to send once the status names the tasks (see the module
    /// documentation).
    pub(super) fn take_handed(&mut self) -> Vec<(Answer, Reply)> {
        let me = nix::unistd::geteuid().as_raw();
        let submissions = std::mem::take(&mut self.handed);
        let mut answers = Vec::with_capacity(submissions.len());
        for Submission {
            peer,
            staged,
            answer,
        } in submissions
        {
            // Jobs refused count as refused drops do: past the limit, none
            // of the user's jobs becomes a task (a record and a reason in
            // failed/, on root's disk); each is answered as not taken.
            let payer = accountable(peer);
            let limited = !self.life.privileged(peer);
            if limited && self.junk_drops.refuses(payer, self.now()) {
                // Their next requests until then are answered as they are
                // read, before their jobs are written.
                let until = Instant::now() + self.junk_drops.over_in(self.now());
                self.barred.bar(payer, until);
                let why = junk_refusal();
                let receipts = staged
                    .into_iter()
                    .map(|s| {
                        if let Ok(s) = s {
                            self.spool.unstage(s);
                        }
                        Receipt::not_taken(&why)
                    })
                    .collect();
                answers.push((answer, Reply::Taken(receipts)));
                continue;
            }
            let mut receipts = Vec::with_capacity(staged.len());
            for staged in staged {
                let placed = staged.and_then(|s| self.spool.place_staged(s));
                receipts.push(match placed {
                    Ok(claimed) => {
                        log::info!(
                            "{}: received {} from uid {peer}",
                            claimed.name,
                            claimed.file
                        );
                        self.receipt_due |= peer != me;
                        let name = claimed.name.to_string();
                        self.remember_adoption(claimed.drop.to_string_lossy().into_owned(), &name);
                        let refused = self.take_fresh(claimed);
                        if refused.is_some() && limited {
                            self.junk_drops.count(payer, self.now());
                        }
                        Receipt {
                            name: Some(name),
                            refused,
                        }
                    }
                    Err(e) => {
                        log::error!("a job from uid {peer} not taken in: {e}");
                        Receipt::not_taken(e)
                    }
                });
            }
            answers.push((answer, Reply::Taken(receipts)));
        }
        answers
    }

    /// Stopping: requests whose claims are on disk but not yet placed are
    /// placed, for the next daemon to take in, and answered with their
    /// names.
    pub(super) fn place_handed(&mut self, rx: &Receiver<Msg>) {
        let arrived = rx.try_iter().filter_map(|msg| match msg {
            Msg::Submission(submission) => Some(*submission),
            _ => None,
        });
        let mut all = std::mem::take(&mut self.handed);
        all.extend(arrived);
        for submission in all {
            submission.place(&self.spool);
        }
    }
}
