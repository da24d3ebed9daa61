//! Users' requests about their tasks: cancel, hold, release, priority
//! (files in `cancel/`, see [`crate::spool::request`]).
//!
//! Each acts only on the requester's own tasks, unless the requester is
//! root or the daemon's own user. A hold or a priority is written into the
//! task's record (carma's own file, written atomically) before the core
//! hears of it, so that what a user was told took effect survives the
//! daemon's death; a restarted daemon reads it back with the task.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use nix::unistd::Uid;

use super::Daemon;
use crate::sched::Event;
use crate::spool::record::{REASON, RECORD, TaskRecord, write_json};
use crate::spool::request::{Request, Verb};
use crate::spool::{State, TaskName};

/// Whether `uid` may act on every task: root and the daemon's own user.
pub(super) fn privileged(uid: u32) -> bool {
    uid == 0 || uid == Uid::effective().as_raw()
}

impl Daemon {
    /// Acts on the requests in `cancel/`; one that must wait for its task
    /// to be taken in stays for a later turn of the loop. Each request
    /// costs a few lookups, never a listing; at most [`REQUESTS_PER_TURN`]
    /// are handled in one turn (the rest in the next, after the loop's
    /// other work), and a user whose requests keep naming no task is
    /// refused for a while ([`Junk`]).
    pub(super) fn cancel_requests(&mut self) {
        let dir = self.spool.cancel_dir();
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        let mut handled = 0;
        for entry in entries.flatten() {
            if handled >= REQUESTS_PER_TURN {
                self.cancel_due = true;
                return;
            }
            let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if file_name.starts_with('.') {
                continue;
            }
            handled += 1;
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).ok();
            if meta.as_ref().is_some_and(|m| !m.is_file()) {
                // A request is an empty regular file; anything else (a
                // directory squatting a task's request name, a link) only
                // stands in the way of the real one. Put out of the way
                // unopened, however deep a tree it is.
                log::warn!("cancel/{file_name}: not a regular file; removed");
                let _ = self.spool.discard(&path);
                continue;
            }
            if meta.as_ref().is_some_and(|m| m.nlink() > 1) {
                // Its owner is whoever owns the file linked to, not who
                // left the request: a hard link to another user's file
                // would act in that user's name.
                log::warn!("cancel/{file_name}: has other hard links; refused and removed");
                let _ = fs::remove_file(&path);
                continue;
            }
            let Some(requester) = meta.map(|m| m.uid()) else {
                continue;
            };
            if self.junk.refuses(requester) {
                let _ = fs::remove_file(&path);
                continue;
            }
            let done = match Request::parse(&file_name) {
                Some(request) => self.request(&request, requester),
                None => {
                    log::warn!("cancel/{file_name}: not a request carma knows; removed");
                    self.junk.count(requester);
                    true
                }
            };
            if done {
                let _ = fs::remove_file(&path);
            } else {
                // Not yet possible: try again next turn of the loop.
                self.cancel_due = true;
            }
        }
    }

    /// Carries out one request; false when it must wait (the task is not
    /// loaded yet, or its supervisor has not said who it is yet).
    fn request(&mut self, request: &Request, requester: u32) -> bool {
        let query = request.task.as_str();
        let named = |name: &TaskName| name.as_str() == query || name.seq().to_string() == query;
        let verb = request.verb;
        let seq = super::ended::seq_of(query);
        if let Some(c) = seq
            .and_then(|s| self.closing.get(&s))
            .filter(|c| named(&c.name))
        {
            if verb == Verb::Requeue {
                // Once it has landed in done/ or failed/.
                return false;
            }
            log::info!("{}: {}: it already ended", c.name, describe(verb));
            return true;
        }
        let Some(task) = seq
            .and_then(|s| self.tasks.get(&s))
            .filter(|t| named(&t.name))
        else {
            if let Some((state, name)) = self.ended.find(query) {
                let name = name.clone();
                match verb {
                    Verb::Requeue => self.requeue_ended(state, &name, requester),
                    _ => log::info!("{name}: {}: it already ended", describe(verb)),
                }
                return true;
            }
            // A task submitted in the same instant, not taken in yet.
            let arriving = TaskName::parse(query).is_some_and(|name| {
                [State::Pending, State::Running, State::Recovery]
                    .into_iter()
                    .any(|state| self.spool.is_task_dir(state, &name))
            });
            if arriving {
                log::debug!("{query}: {} waits until the task is taken", describe(verb));
                return false;
            }
            log::warn!("{} {query}: no such task", describe(verb));
            self.junk.count(requester);
            return true;
        };
        let name = task.name.clone();
        if !(privileged(requester) || Some(requester) == task.demand.user) {
            log::warn!(
                "{name}: {} refused: requested by uid {requester} who does not own it",
                describe(verb)
            );
            return true;
        }
        match verb {
            Verb::Cancel => self.cancel(&name),
            Verb::CancelArray => self.cancel_array(&name, requester),
            Verb::Hold | Verb::Release => {
                self.set_hold(&name, verb == Verb::Hold);
                true
            }
            Verb::Requeue => self.requeue_running(&name),
            Verb::Priority(priority) => {
                let refused = (!privileged(requester))
                    .then(|| self.config.queue.priority_refusal(priority))
                    .flatten();
                match refused {
                    Some(why) => log::warn!("{name}: priority refused: {why}"),
                    None => self.set_priority(&name, priority),
                }
                true
            }
        }
    }

    /// A waiting task is failed as cancelled, a running one's supervisor
    /// is asked to stop its job; false while that supervisor cannot be
    /// signalled yet.
    fn cancel(&mut self, name: &TaskName) -> bool {
        let Some(task) = self.tasks.get(&name.seq()) else {
            return true;
        };
        if task.state != State::Running {
            log::info!("{name}: cancelled while waiting");
            self.events.push(Event::Cancel { task: name.id() });
            return true;
        }
        let run_dir = self
            .spool
            .task_dir(State::Running, name)
            .join(format!("run-{}", task.run));
        match crate::supervisor::cancel(&run_dir) {
            Ok(true) => {
                log::info!("{name}: cancelling: job asked to stop");
                true
            }
            // Started but not yet identified: soon.
            Ok(false) if crate::supervisor::is_running(&run_dir) => false,
            Ok(false) => {
                log::info!("{name}: cancel: its run already ended");
                true
            }
            Err(e) => {
                log::error!("{name}: cancel: cannot signal its supervisor: {e}");
                true
            }
        }
    }

    /// Cancels every task of the array `name` belongs to (the requester's
    /// own, unless privileged); false while some are still being made or
    /// taken in.
    fn cancel_array(&mut self, name: &TaskName, requester: u32) -> bool {
        let Some(member) = self.tasks.get(&name.seq()).and_then(|t| t.record.array) else {
            log::warn!("{name}: cancel array: it is not an element of an array");
            return true;
        };
        let expanding = self
            .tasks
            .get(&member.job)
            .and_then(|t| t.record.array)
            .is_some_and(|a| !a.expanded);
        let elements = self.array_elements(member.job);
        let untaken = elements.iter().any(|(n, _)| {
            !self.tasks.contains_key(&n.seq()) && self.spool.is_task_dir(State::Pending, n)
        });
        if expanding || untaken {
            return false;
        }
        let mut done = true;
        for (element, _) in elements {
            let owned = self
                .tasks
                .get(&element.seq())
                .is_some_and(|t| privileged(requester) || t.demand.user == Some(requester));
            if owned {
                done &= self.cancel(&element);
            }
        }
        done
    }

    /// Holds or releases a waiting task. A running task is not held: a
    /// hold that silently waited for the job's end would surprise; `carma
    /// cancel` stops a job.
    fn set_hold(&mut self, name: &TaskName, held: bool) {
        let verb = if held { "hold" } else { "release" };
        let Some(task) = self.tasks.get_mut(&name.seq()) else {
            return;
        };
        if task.state == State::Running {
            log::warn!("{name}: {verb} refused: it runs already (carma cancel stops it)");
            return;
        }
        if task.record.held == held {
            log::info!("{name}: {verb}: it already is");
            return;
        }
        if self.save_record(name, |r| r.held = held) {
            log::info!("{name}: {}", if held { "held" } else { "released" });
            self.events.push(Event::Hold {
                task: name.id(),
                held,
            });
        }
    }

    fn set_priority(&mut self, name: &TaskName, priority: i32) {
        let Some(before) = self.tasks.get(&name.seq()).map(|t| t.demand.priority) else {
            return;
        };
        if self.save_record(name, |r| r.priority = Some(priority)) {
            if let Some(task) = self.tasks.get_mut(&name.seq()) {
                task.demand.priority = priority;
            }
            log::info!("{name}: priority {before} -> {priority}");
            self.events.push(Event::Prioritize {
                task: name.id(),
                priority,
            });
        }
    }

    /// Stops a running task's job to put the task back in the queue: the
    /// wish is recorded first, so the run's end requeues it even if the
    /// daemon dies in between ([`Daemon::finish`] reads it). A waiting
    /// task already is in the queue.
    fn requeue_running(&mut self, name: &TaskName) -> bool {
        let running = self
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.state == State::Running);
        if !running {
            log::info!("{name}: requeue: it waits already");
            return true;
        }
        let recorded = self
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.record.requeue);
        if !recorded && !self.save_record(name, |r| r.requeue = true) {
            return true;
        }
        log::info!("{name}: requeue: its job is stopped, then it waits again");
        self.cancel(name)
    }

    /// Puts a task that ended back in the queue: its record is reset
    /// first (a crash in between leaves an ended task without outcome,
    /// which a second `carma requeue` takes), then it moves to `pending/`.
    fn requeue_ended(&mut self, state: State, name: &TaskName, requester: u32) {
        let mut record = match self.spool.load_record(state, name) {
            Ok(record) => record,
            Err(e) => {
                log::warn!("{name}: requeue: cannot read its record: {e}");
                return;
            }
        };
        if !(privileged(requester) || record.owner == Some(requester)) {
            log::warn!("{name}: requeue refused: requested by uid {requester} who does not own it");
            return;
        }
        record.requeued();
        let dir = self.spool.task_dir(state, name);
        let moved = write_json(&dir.join(RECORD), &record)
            .and_then(|()| match fs::remove_file(dir.join(REASON)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            })
            .and_then(|()| self.spool.move_task(name, state, State::Pending));
        match moved {
            Ok(()) => {
                self.ended.remove(name.seq());
                log::info!("{name}: requeued from {state}/");
                self.take(name.clone(), State::Pending);
            }
            Err(e) => log::error!("{name}: requeue: cannot move it back to pending/: {e}"),
        }
    }

    /// Changes a task's record on disk first, in memory once written: what
    /// the daemon acts on is always what a restart would find. False (and
    /// logged) when the record cannot be written.
    fn save_record(&mut self, name: &TaskName, change: impl FnOnce(&mut TaskRecord)) -> bool {
        let Some(task) = self.tasks.get_mut(&name.seq()) else {
            return false;
        };
        let mut record = task.record.clone();
        change(&mut record);
        let path = self.spool.task_dir(task.state, name).join(RECORD);
        match write_json(&path, &record) {
            Ok(()) => {
                task.record = record;
                true
            }
            Err(e) => {
                log::error!("{name}: cannot write its record, change not made: {e}");
                false
            }
        }
    }
}

/// Requests handled in one turn of the loop, at most.
const REQUESTS_PER_TURN: usize = 256;

/// Requests naming no task that one user may leave in a minute before
/// their requests are refused for the rest of it.
const JUNK_PER_MINUTE: u32 = 100;

/// Requests that named no task (or were no request), per user, in the
/// current minute: a user who floods `cancel/` with them is refused, said
/// once, and everyone else's requests go on.
#[derive(Debug)]
pub(super) struct Junk {
    since: Instant,
    counts: HashMap<u32, u32>,
}

impl Default for Junk {
    fn default() -> Junk {
        Junk {
            since: Instant::now(),
            counts: HashMap::new(),
        }
    }
}

impl Junk {
    fn count(&mut self, uid: u32) {
        self.roll();
        let count = self.counts.entry(uid).or_default();
        *count += 1;
        if *count == JUNK_PER_MINUTE {
            log::warn!(
                "uid {uid}: {JUNK_PER_MINUTE} requests naming no task within a minute; \
                 their requests are refused until it is over"
            );
        }
    }

    fn refuses(&mut self, uid: u32) -> bool {
        self.roll();
        self.counts.get(&uid).is_some_and(|&n| n >= JUNK_PER_MINUTE)
    }

    fn roll(&mut self) {
        if self.since.elapsed() >= Duration::from_secs(60) {
            *self = Junk::default();
        }
    }
}

/// A request's verb, for log lines.
fn describe(verb: Verb) -> &'static str {
    match verb {
        Verb::Cancel => "cancel",
        Verb::Hold => "hold",
        Verb::Release => "release",
        Verb::Priority(_) => "priority",
        Verb::Requeue => "requeue",
        Verb::CancelArray => "cancel array",
    }
}
