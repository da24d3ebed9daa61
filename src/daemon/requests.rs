//! Users' requests about their tasks: cancel, hold, release, priority
//! (files in `cancel/`, see [`crate::spool::request`]).
//!
//! Each acts only on the requester's own tasks, unless the requester is
//! root or the daemon's own user. Every request gets a verdict (done or
//! refused, in words) in the status file, which the command that left it
//! waits for and says. A hold or a priority is written into the
//! task's record (carma's own file, written atomically) before the core
//! hears of it, so that what a user was told took effect survives the
//! daemon's death; a restarted daemon reads it back with the task.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use nix::unistd::Uid;

use super::Daemon;
use crate::sched::Event;
use crate::spool::record::{REASON, RECORD, TaskRecord, unix_now, write_json};
use crate::spool::request::{Request, Verb};
use crate::spool::status::Verdict;
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
            let answer = match Request::parse(&file_name) {
                Some(request) => self.request(&request, requester),
                None => {
                    log::warn!("cancel/{file_name}: not a request carma knows; removed");
                    self.junk.count(requester);
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
            let line = format!("cancel/{file_name} (uid {requester}): {said}");
            if refused {
                log::warn!("{line}");
            } else {
                log::info!("{line}");
            }
            let _ = fs::remove_file(&path);
            self.verdicts.add(Verdict {
                request: file_name,
                uid: requester,
                at: unix_now(),
                refused,
                said,
            });
            self.status_due();
        }
    }

    /// Carries out one request.
    fn request(&mut self, request: &Request, requester: u32) -> Answer {
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
                return Answer::Wait;
            }
            return Answer::Refused(format!("{} already ended", c.name));
        }
        let Some(task) = seq
            .and_then(|s| self.tasks.get(&s))
            .filter(|t| named(&t.name))
        else {
            if let Some((state, name)) = self.ended.find(query) {
                let name = name.clone();
                return match verb {
                    Verb::Requeue => self.requeue_ended(state, &name, requester),
                    _ => Answer::Refused(format!("{name} already ended (it is in {state}/)")),
                };
            }
            // A task submitted in the same instant, not taken in yet.
            let arriving = TaskName::parse(query).is_some_and(|name| {
                [State::Pending, State::Running, State::Recovery]
                    .into_iter()
                    .any(|state| self.spool.is_task_dir(state, &name))
            });
            if arriving {
                log::debug!("{query}: {} waits until the task is taken", verb.describe());
                return Answer::Wait;
            }
            self.junk.count(requester);
            return Answer::Refused(format!("no task {query}"));
        };
        let name = task.name.clone();
        if !(privileged(requester) || Some(requester) == task.demand.user) {
            return Answer::Refused(format!(
                "{name} belongs to {}; only its owner or root may {}",
                task.user,
                verb.describe()
            ));
        }
        match verb {
            Verb::Cancel => self.cancel(&name),
            Verb::CancelArray => self.cancel_array(&name, requester),
            Verb::Hold | Verb::Release => self.set_hold(&name, verb == Verb::Hold),
            Verb::Requeue => self.requeue_running(&name),
            Verb::Priority(priority) => {
                let refused = (!privileged(requester))
                    .then(|| self.config.queue.priority_refusal(priority))
                    .flatten();
                match refused {
                    Some(why) => Answer::Refused(why),
                    None => self.set_priority(&name, priority),
                }
            }
        }
    }

    /// A waiting task is failed as cancelled, a running one's supervisor
    /// is asked to stop its job (it waits while that supervisor cannot be
    /// signalled yet).
    fn cancel(&mut self, name: &TaskName) -> Answer {
        let Some(task) = self.tasks.get(&name.seq()) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        if task.state != State::Running {
            self.events.push(Event::Cancel { task: name.id() });
            return Answer::Done(format!("{name}: cancelled while waiting"));
        }
        let run_dir = self
            .spool
            .task_dir(State::Running, name)
            .join(format!("run-{}", task.run));
        match crate::supervisor::cancel(&run_dir) {
            Ok(true) => Answer::Done(format!("{name}: cancelling: its job was asked to stop")),
            // Started but not yet identified: soon.
            Ok(false) if crate::supervisor::is_running(&run_dir) => Answer::Wait,
            Ok(false) => Answer::Done(format!("{name}: its run already ended")),
            Err(e) => Answer::Refused(format!("cannot signal {name}'s supervisor: {e}")),
        }
    }

    /// Cancels every task of the array `name` belongs to (the requester's
    /// own, unless privileged); it waits while some are still being made
    /// or taken in.
    fn cancel_array(&mut self, name: &TaskName, requester: u32) -> Answer {
        let Some(member) = self.tasks.get(&name.seq()).and_then(|t| t.record.array) else {
            return Answer::Refused(format!("{name} is not an element of an array"));
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
            return Answer::Wait;
        }
        let (mut waits, mut cancelled) = (false, 0);
        for (element, _) in elements {
            let owned = self
                .tasks
                .get(&element.seq())
                .is_some_and(|t| privileged(requester) || t.demand.user == Some(requester));
            if owned {
                match self.cancel(&element) {
                    Answer::Wait => waits = true,
                    Answer::Done(_) => cancelled += 1,
                    Answer::Refused(why) => log::warn!("{element}: cancel array: {why}"),
                }
            }
        }
        match waits {
            true => Answer::Wait,
            false => Answer::Done(format!(
                "array {}: {cancelled} unfinished tasks cancelled",
                member.job
            )),
        }
    }

    /// Holds or releases a waiting task. A running task is not held: a
    /// hold that silently waited for the job's end would surprise; `carma
    /// cancel` stops a job.
    fn set_hold(&mut self, name: &TaskName, held: bool) -> Answer {
        let done = if held { "held" } else { "released" };
        let Some(task) = self.tasks.get_mut(&name.seq()) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        if task.state == State::Running {
            return Answer::Refused(format!("{name} runs already (carma cancel stops it)"));
        }
        if task.record.held == held {
            return Answer::Done(format!("{name}: {done} already"));
        }
        if let Err(why) = self.save_record(name, |r| r.held = held) {
            return Answer::Refused(why);
        }
        self.events.push(Event::Hold {
            task: name.id(),
            held,
        });
        Answer::Done(format!("{name}: {done}"))
    }

    fn set_priority(&mut self, name: &TaskName, priority: i32) -> Answer {
        let Some(before) = self.tasks.get(&name.seq()).map(|t| t.demand.priority) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        if let Err(why) = self.save_record(name, |r| r.priority = Some(priority)) {
            return Answer::Refused(why);
        }
        if let Some(task) = self.tasks.get_mut(&name.seq()) {
            task.demand.priority = priority;
        }
        self.events.push(Event::Prioritize {
            task: name.id(),
            priority,
        });
        Answer::Done(format!("{name}: priority {before} -> {priority}"))
    }

    /// Stops a running task's job to put the task back in the queue: the
    /// wish is recorded first, so the run's end requeues it even if the
    /// daemon dies in between ([`Daemon::finish`] reads it). A waiting
    /// task already is in the queue.
    fn requeue_running(&mut self, name: &TaskName) -> Answer {
        let running = self
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.state == State::Running);
        if !running {
            return Answer::Refused(format!("{name} waits in the queue already"));
        }
        let recorded = self
            .tasks
            .get(&name.seq())
            .is_some_and(|t| t.record.requeue);
        if !recorded {
            if let Err(why) = self.save_record(name, |r| r.requeue = true) {
                return Answer::Refused(why);
            }
        }
        match self.cancel(name) {
            Answer::Done(_) => Answer::Done(format!(
                "{name}: its job is being stopped; then it waits again"
            )),
            other => other,
        }
    }

    /// Puts a task that ended back in the queue: its record is reset
    /// first (a crash in between leaves an ended task without outcome,
    /// which a second `carma requeue` takes), then it moves to `pending/`.
    fn requeue_ended(&mut self, state: State, name: &TaskName, requester: u32) -> Answer {
        let mut record = match self.spool.load_record(state, name) {
            Ok(record) => record,
            Err(e) => return Answer::Refused(format!("cannot read {name}'s record: {e}")),
        };
        if !(privileged(requester) || record.owner == Some(requester)) {
            return Answer::Refused(format!(
                "{name} is not yours; only its owner or root may requeue it"
            ));
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
                self.take(name.clone(), State::Pending);
                Answer::Done(format!(
                    "{name}: requeued from {state}/; it waits in pending/"
                ))
            }
            Err(e) => Answer::Refused(format!("cannot move {name} back to pending/: {e}")),
        }
    }

    /// Changes a task's record on disk first, in memory once written: what
    /// the daemon acts on is always what a restart would find. The error
    /// says why the change was not made.
    fn save_record(
        &mut self,
        name: &TaskName,
        change: impl FnOnce(&mut TaskRecord),
    ) -> Result<(), String> {
        let Some(task) = self.tasks.get_mut(&name.seq()) else {
            return Err(format!("{name} is no longer known"));
        };
        let mut record = task.record.clone();
        change(&mut record);
        let path = self.spool.task_dir(task.state, name).join(RECORD);
        match write_json(&path, &record) {
            Ok(()) => {
                task.record = record;
                Ok(())
            }
            Err(e) => {
                log::error!("{name}: cannot write its record, change not made: {e}");
                Err(format!("cannot write {name}'s record: {e}"))
            }
        }
    }
}

/// What became of one request.
enum Answer {
    /// Not possible yet (the task is being taken in, its supervisor has not
    /// said who it is): the request stays for a later turn.
    Wait,
    /// Done; what happened, for people.
    Done(String),
    /// Refused or impossible; why.
    Refused(String),
}

/// Verdicts kept for the status file: the newest few of each user's, for
/// a minute (long enough for the command that waits for one).
#[derive(Debug, Default)]
pub(super) struct Verdicts {
    recent: VecDeque<Verdict>,
}

/// A user's verdicts kept at most: one user's burst of requests cannot push
/// out another user's verdict.
const VERDICTS_PER_USER: usize = 32;

impl Verdicts {
    fn add(&mut self, verdict: Verdict) {
        let now = verdict.at;
        self.recent.retain(|v| now - v.at < 60.0);
        let uid = verdict.uid;
        if self.recent.iter().filter(|v| v.uid == uid).count() >= VERDICTS_PER_USER {
            if let Some(oldest) = self.recent.iter().position(|v| v.uid == uid) {
                self.recent.remove(oldest);
            }
        }
        self.recent.push_back(verdict);
    }

    /// The verdicts of the last minute, oldest first.
    pub(super) fn recent(&self) -> Vec<Verdict> {
        self.recent.iter().cloned().collect()
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
