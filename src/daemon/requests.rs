//! Users' requests about their tasks (files in `cancel/`, see
//! [`crate::spool::request`]), read: who left each, whether it is one.
//! What each comes to is the lifecycle's to decide
//! ([`crate::lifecycle::Lifecycle::request`]); every request gets a
//! verdict (done or refused, in words) in the status file, which the
//! command that left it waits for and says.

use std::fs;
use std::os::unix::fs::MetadataExt;

use super::Daemon;
use crate::accounts::accountable;
use crate::lifecycle::Answer;
use crate::spool::record::unix_now;
use crate::spool::request::Request;
use crate::spool::status::Verdict;

impl Daemon {
    /// Acts on the requests in `cancel/`; one that must wait for its task
    /// to be taken in stays for a later turn of the loop. Each request
    /// costs a few lookups, never a listing; at most [`REQUESTS_PER_TURN`]
    /// are handled in one turn (the rest in the next, after the loop's
    /// other work), and a user whose requests keep naming no task is
    /// refused for a while ([`crate::lifecycle::PerMinute`]).
    pub(super) fn cancel_requests(&mut self) {
        let dir = self.spool.cancel_dir();
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for (handled, entry) in entries.flatten().enumerate() {
            if handled >= REQUESTS_PER_TURN {
                self.cancel_due = true;
                return;
            }
            // A hidden name or one that is not UTF-8 is no request, and
            // is removed as any other: passed over, each stayed for good,
            // and every look at `cancel/` read them all.
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).ok();
            // Limits count each of a user's subordinate ids as them, every
            // id without an account as one nobody; a request acts as the
            // very id that made it.
            let owner = meta.as_ref().map(MetadataExt::uid);
            let payer = owner.map(accountable);
            let now = std::time::Instant::now();
            if meta.as_ref().is_some_and(|m| !m.is_file()) {
                // A request is an empty regular file; anything else (a
                // directory squatting a task's request name, a link) only
                // stands in the way of the real one. Put out of the way
                // unopened, however deep a tree it is.
                if let Some(held) = self.hush.allow("odd request", payer, now) {
                    log::warn!(
                        "cancel/{file_name}: not a regular file; removed{}",
                        crate::journal::left_out(held)
                    );
                }
                let _ = self.spool.discard(&path);
                continue;
            }
            if meta.as_ref().is_some_and(|m| m.nlink() > 1) {
                // Its owner is whoever owns the file linked to, not who
                // left the request: a hard link to another user's file
                // would act in that user's name.
                if let Some(held) = self.hush.allow("odd request", payer, now) {
                    log::warn!(
                        "cancel/{file_name}: has other hard links; refused and removed{}",
                        crate::journal::left_out(held)
                    );
                }
                let _ = fs::remove_file(&path);
                continue;
            }
            let (Some(requester), Some(payer)) = (owner, payer) else {
                continue;
            };
            if self.life.junk.refuses(payer, self.now()) {
                let _ = fs::remove_file(&path);
                continue;
            }
            let request = Some(&file_name)
                .filter(|name| !name.starts_with('.'))
                .filter(|_| entry.file_name().to_str().is_some())
                .and_then(|name| Request::parse(name));
            let answer = match request {
                Some(request) => {
                    let queue = self.config.queue.clone();
                    let refusal = move |p: i32| queue.priority_refusal(p);
                    self.with_world(|life, now, world| {
                        life.request(now, &request, requester, refusal, world)
                    })
                }
                None => {
                    log::warn!("cancel/{file_name}: not a request carma knows; removed");
                    self.life.junk.count(payer, self.now());
                    let _ = fs::remove_file(&path);
                    continue;
                }
            };
            let (refused, said) = match answer {
                Answer::Wait => {
                    // Not yet possible: try again next turn of the loop.
                    self.cancel_due = true;
                    continue;
                }
                Answer::Done(said) => (false, said),
                Answer::Refused(why) => (true, format!("refused: {why}")),
            };
            if let Some(held) = self.hush.allow("request", Some(payer), now) {
                let line = format!(
                    "cancel/{file_name} (uid {requester}): {said}{}",
                    crate::journal::left_out(held)
                );
                if refused {
                    log::warn!("{line}");
                } else {
                    log::info!("{line}");
                }
            }
            let _ = fs::remove_file(&path);
            // Every user reads the verdicts in `status.json`.
            self.life.verdicts.add(Verdict {
                request: crate::journal::one_line(&file_name),
                uid: requester,
                at: unix_now(),
                refused,
                said: crate::journal::one_line(&said),
            });
            self.status_due();
        }
    }
}

/// Requests handled in one turn of the loop, at most.
const REQUESTS_PER_TURN: usize = 256;
