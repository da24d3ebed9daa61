//! Users' requests about their tasks: cancel, hold, release, priority,
//! requeue (files in `cancel/`, see [`crate::spool::request`]), decided.
//!
//! Each acts only on the requester's own tasks, unless the requester is
//! root or the daemon's own user. Every request gets an [`Answer`] in
//! words. A hold or a priority is written into the task's record (carma's
//! own file, written atomically) before the core hears of it, so that what
//! a user was told took effect survives the daemon's death; a restarted
//! daemon reads it back with the task.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use super::{Lifecycle, Moment, Stop, World};
use crate::sched::{Event, Time};
use crate::spool::State;
use crate::spool::TaskName;
use crate::spool::record::TaskRecord;
use crate::spool::request::{Request, Verb};
use crate::spool::status::Verdict;

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Not possible yet (the task is being taken in, its supervisor has not
    /// said who it is): the request stays for a later turn.
    Wait,
    /// Done; what happened, for people.
    Done(String),
    /// Refused or impossible; why.
    Refused(String),
}

impl Lifecycle {
    /// Decides and carries out one request by user `requester`. The
    /// priorities users may give themselves are `priority_refusal`'s to
    /// judge (the queue's configuration).
    ///
    /// A user (not root, not carma's own) past `ASKED_PER_MINUTE` (600)
    /// answered requests in the current minute is refused: each answer may write a record and the status
    /// file, and log a line, so a user toggling a hold in a loop would
    /// otherwise keep root's disk and the journal busy for everyone.
    pub fn request(
        &mut self,
        now: Moment,
        request: &Request,
        requester: u32,
        priority_refusal: impl Fn(i32) -> Option<String>,
        world: &mut impl World,
    ) -> Answer {
        let limited = !self.privileged(requester);
        // Limits are the person's: a subordinate id's count as its owner's.
        let payer = world.answers_for(requester);
        if limited && self.asked.refuses(payer, now.at) {
            return Answer::Refused(format!(
                "more than {ASKED_PER_MINUTE} requests within a minute; ask again once it is over"
            ));
        }
        let verb = request.verb;
        let answer = match self.target(now, request, requester, world) {
            Err(answer) => answer,
            Ok(name) => match verb {
                Verb::Cancel => self.cancel(&name, now, world),
                Verb::CancelArray => self.cancel_array(&name, requester, now, world),
                Verb::Hold | Verb::Release => self.set_hold(&name, verb == Verb::Hold, world),
                Verb::Requeue => self.requeue_running(&name, now, world),
                Verb::Priority(priority) => {
                    let refused = (!self.privileged(requester))
                        .then(|| priority_refusal(priority))
                        .flatten();
                    match refused {
                        Some(why) => Answer::Refused(why),
                        None => self.set_priority(&name, priority, world),
                    }
                }
            },
        };
        if limited && answer != Answer::Wait {
            self.asked.count(payer, now.at);
        }
        answer
    }

    /// The task `request` names, if `requester` may act on it; else the
    /// final answer (no such task, already ended, not theirs, or wait).
    fn target(
        &mut self,
        now: Moment,
        request: &Request,
        requester: u32,
        world: &mut impl World,
    ) -> Result<TaskName, Answer> {
        let query = request.task.as_str();
        let named = |name: &TaskName| name.as_str() == query || name.seq().to_string() == query;
        let verb = request.verb;
        let seq = super::seq_of(query);
        if let Some(c) = seq
            .and_then(|s| self.closing.get(&s))
            .filter(|c| named(&c.name))
        {
            if verb == Verb::Requeue {
                // Once it has landed in done/ or failed/.
                return Err(Answer::Wait);
            }
            return Err(Answer::Refused(format!("{} already ended", c.name)));
        }
        let Some(task) = seq
            .and_then(|s| self.tasks.get(&s))
            .filter(|t| named(&t.name))
        else {
            if let Some((state, name)) = self.ended.find(query) {
                let name = name.clone();
                return Err(match verb {
                    Verb::Requeue => self.requeue_ended(state, &name, requester, world),
                    _ => Answer::Refused(format!("{name} already ended (it is in {state}/)")),
                });
            }
            // A task submitted in the same instant, not taken in yet.
            let arriving = TaskName::parse(query).is_some_and(|name| {
                [State::Pending, State::Running, State::Recovery]
                    .into_iter()
                    .any(|state| world.holds(state, &name))
            });
            if arriving {
                log::debug!("{query}: {} waits until the task is taken", verb.describe());
                return Err(Answer::Wait);
            }
            self.junk.count(world.answers_for(requester), now.at);
            return Err(Answer::Refused(format!("no task {query}")));
        };
        let name = task.name.clone();
        if !(self.privileged(requester) || Some(requester) == task.owner) {
            return Err(Answer::Refused(format!(
                "{name} belongs to {}; only its owner or root may {}",
                task.user,
                verb.describe()
            )));
        }
        Ok(name)
    }

    /// A waiting task is failed as cancelled, a running one's supervisor
    /// is asked to stop its job (it waits while that supervisor cannot be
    /// signalled yet).
    fn cancel(&mut self, name: &TaskName, now: Moment, world: &mut impl World) -> Answer {
        let Some(task) = self.tasks.get(&name.seq()) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        if task.state != State::Running {
            self.events.push(Event::Cancel { task: name.id() });
            return Answer::Done(format!("{name}: cancelled while waiting"));
        }
        match world.stop(name, task.run) {
            Stop::Asked => {
                if let Some(task) = self.tasks.get_mut(&name.seq()) {
                    task.deadlines.stop_asked.get_or_insert(now.at);
                }
                Answer::Done(format!("{name}: cancelling: its job was asked to stop"))
            }
            Stop::NotYet => Answer::Wait,
            Stop::Over => Answer::Done(format!("{name}: its run already ended")),
            Stop::Failed(e) => Answer::Refused(format!("cannot signal {name}'s supervisor: {e}")),
        }
    }

    /// Cancels every task of the array `name` belongs to (the requester's
    /// own, unless privileged); it waits while some are still being made
    /// or taken in.
    fn cancel_array(
        &mut self,
        name: &TaskName,
        requester: u32,
        now: Moment,
        world: &mut impl World,
    ) -> Answer {
        let Some(member) = self.tasks.get(&name.seq()).and_then(|t| t.record.array) else {
            return Answer::Refused(format!("{name} is not an element of an array"));
        };
        let expanding = self
            .tasks
            .get(&member.job)
            .and_then(|t| t.record.array)
            .is_some_and(|a| !a.expanded);
        // Its elements are the daemon's, but for those made and not yet
        // taken in: only `pending/` is listed for them, and only their
        // records are read, so that a request costs nothing of the
        // spool's history (it listed every state and read every newer
        // task's record).
        // Listed once per array: found settled, it stays so (its
        // elements are taken in as they are made), and a user's requests
        // about it never list `pending/` again.
        let in_array = |record: &TaskRecord| record.array.is_some_and(|a| a.job == member.job);
        let untaken = !self.settled_arrays.contains(&member.job)
            && world
                .pending_from(member.job)
                .into_iter()
                .filter(|n| !self.tasks.contains_key(&n.seq()))
                .any(|n| {
                    world
                        .load_record(State::Pending, &n)
                        .is_ok_and(|r| in_array(&r))
                });
        if expanding || untaken {
            return Answer::Wait;
        }
        if self.settled_arrays.len() >= super::SETTLED_ARRAYS {
            self.settled_arrays.clear();
        }
        self.settled_arrays.insert(member.job);
        let mut elements: Vec<TaskName> = self
            .tasks
            .values()
            .filter(|t| in_array(&t.record))
            .map(|t| t.name.clone())
            .collect();
        elements.sort_by_key(TaskName::seq);
        let (mut waits, mut cancelled) = (false, 0);
        for element in elements {
            let owned = self
                .tasks
                .get(&element.seq())
                .is_some_and(|t| self.privileged(requester) || t.owner == Some(requester));
            if owned {
                match self.cancel(&element, now, world) {
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
    fn set_hold(&mut self, name: &TaskName, held: bool, world: &mut impl World) -> Answer {
        let done = if held { "held" } else { "released" };
        let Some(task) = self.tasks.get(&name.seq()) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        if task.state == State::Running {
            return Answer::Refused(format!("{name} runs already (carma cancel stops it)"));
        }
        if task.record.held == held {
            return Answer::Done(format!("{name}: {done} already"));
        }
        if let Err(why) = self.save_record(name, |r| r.held = held, world) {
            return Answer::Refused(why);
        }
        self.events.push(Event::Hold {
            task: name.id(),
            held,
        });
        Answer::Done(format!("{name}: {done}"))
    }

    fn set_priority(&mut self, name: &TaskName, priority: i32, world: &mut impl World) -> Answer {
        let Some(task) = self.tasks.get(&name.seq()) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        let before = task.priority;
        if task.record.priority == Some(priority) {
            // Nothing to write (and to flush: a request a turn would be
            // two fsyncs a turn).
            return Answer::Done(format!("{name}: priority {priority} already"));
        }
        if let Err(why) = self.save_record(name, |r| r.priority = Some(priority), world) {
            return Answer::Refused(why);
        }
        if let Some(task) = self.tasks.get_mut(&name.seq()) {
            task.priority = priority;
        }
        self.events.push(Event::Prioritize {
            task: name.id(),
            priority,
        });
        Answer::Done(format!("{name}: priority {before} -> {priority}"))
    }

    /// Stops a running task's job to put the task back in the queue: the
    /// wish is recorded first, so the run's end requeues it even if the
    /// daemon dies in between (`finish` reads it). A waiting task already
    /// is in the queue.
    fn requeue_running(&mut self, name: &TaskName, now: Moment, world: &mut impl World) -> Answer {
        let Some(task) = self.tasks.get(&name.seq()) else {
            return Answer::Refused(format!("{name} is no longer known"));
        };
        if task.state != State::Running {
            return Answer::Refused(format!("{name} waits in the queue already"));
        }
        if !task.record.requeue
            && let Err(why) = self.save_record(name, |r| r.requeue = true, world)
        {
            return Answer::Refused(why);
        }
        match self.cancel(name, now, world) {
            Answer::Done(_) => Answer::Done(format!(
                "{name}: its job is being stopped; then it waits again"
            )),
            other => other,
        }
    }

    /// Puts a task that ended back in the queue: its record is reset
    /// first (a crash in between leaves an ended task without outcome,
    /// which a second `carma requeue` takes), then it moves to `pending/`.
    fn requeue_ended(
        &mut self,
        state: State,
        name: &TaskName,
        requester: u32,
        world: &mut impl World,
    ) -> Answer {
        let mut record = match world.load_record(state, name) {
            Ok(record) => record,
            Err(e) => return Answer::Refused(format!("cannot read {name}'s record: {e}")),
        };
        if !(self.privileged(requester) || record.owner == Some(requester)) {
            return Answer::Refused(format!(
                "{name} is not yours; only its owner or root may requeue it"
            ));
        }
        if self.kept.dropped(name.seq()) {
            return Answer::Refused(format!(
                "{name}'s job files were not kept (its owner's ended tasks kept more than \
                 queue.user_max_ended_mib): submit it again"
            ));
        }
        let ended = record.clone();
        record.requeued();
        // The record first (a task in pending/ with an outcome would be
        // taken for ended), the reason once it has moved: a move refused
        // (its name taken in pending/, a full disk) leaves the ended task
        // as it was.
        let moved = world
            .write_record(state, name, &record)
            .and_then(|()| world.move_task(name, state, State::Pending));
        if moved.is_err()
            && let Err(e) = world.write_record(state, name, &ended)
        {
            log::error!("{name}: cannot put its record back after a refused requeue: {e}");
        }
        match moved {
            Ok(()) => {
                if let Err(e) = world.remove_reason(State::Pending, name) {
                    log::warn!("{name}: cannot remove the reason it failed with: {e}");
                }
                self.ended.remove(name.seq());
                self.kept.forget(name.seq());
                world.take_in_requeued(name);
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
    pub fn save_record(
        &mut self,
        name: &TaskName,
        change: impl FnOnce(&mut TaskRecord),
        world: &mut impl World,
    ) -> Result<(), String> {
        let Some(task) = self.tasks.get_mut(&name.seq()) else {
            return Err(format!("{name} is no longer known"));
        };
        let mut record = task.record.clone();
        change(&mut record);
        match world.write_record(task.state, name, &record) {
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

/// Verdicts kept for the status file: the newest few of each user's, for
/// a minute (long enough for the command that waits for one).
#[derive(Debug, Default)]
pub struct Verdicts {
    recent: VecDeque<Verdict>,
}

/// A user's verdicts kept at most: one user's burst of requests cannot push
/// out another user's verdict.
const VERDICTS_PER_USER: usize = 32;

impl Verdicts {
    pub fn add(&mut self, verdict: Verdict) {
        let now = verdict.at;
        self.recent.retain(|v| now - v.at < 60.0);
        let uid = verdict.uid;
        if self.recent.iter().filter(|v| v.uid == uid).count() >= VERDICTS_PER_USER
            && let Some(oldest) = self.recent.iter().position(|v| v.uid == uid)
        {
            self.recent.remove(oldest);
        }
        self.recent.push_back(verdict);
    }

    /// The verdicts of the last minute, oldest first.
    pub fn recent(&self) -> Vec<Verdict> {
        self.recent.iter().cloned().collect()
    }
}

/// Requests naming no task that one user may leave in a minute before
/// their requests are refused for the rest of it.
pub const JUNK_PER_MINUTE: u32 = 100;

/// Requests that one user may have answered in a minute (a script
/// cancelling a few hundred tasks one by one stays under it; `carma
/// cancel --array` is one request).
pub const ASKED_PER_MINUTE: u32 = 600;

/// How long a user's count lasts.
const WINDOW: Duration = Duration::from_secs(60);

/// Something users do, counted per user in the current minute: a user
/// past the limit is refused, said once, and everyone else goes on. The
/// lifecycle keeps one for requests that named no task (or were no
/// request) and one for all requests answered; the daemon keeps another
/// for drops it refused.
#[derive(Debug)]
pub struct PerMinute {
    since: Time,
    counts: HashMap<u32, u32>,
    limit: u32,
    /// What is counted, and what befalls a user past the limit, in words.
    what: (&'static str, &'static str),
}

impl PerMinute {
    /// A count of `what` held to `limit` a minute, whose users past it
    /// meet `then`.
    pub fn new(limit: u32, what: &'static str, then: &'static str) -> PerMinute {
        PerMinute {
            since: Time::ZERO,
            counts: HashMap::new(),
            limit,
            what: (what, then),
        }
    }

    /// One more by `uid` at `now`.
    pub fn count(&mut self, uid: u32, now: Time) {
        self.roll(now);
        let count = self.counts.entry(uid).or_default();
        *count += 1;
        if *count == self.limit {
            let (what, then) = self.what;
            let limit = self.limit;
            log::warn!("uid {uid}: {limit} {what} within a minute; {then} until it is over");
        }
    }

    /// Whether `uid` is past the limit at `now`.
    pub fn refuses(&mut self, uid: u32, now: Time) -> bool {
        self.roll(now);
        self.counts.get(&uid).is_some_and(|&n| n >= self.limit)
    }

    /// How long from `now` until the current minute is over, and with it
    /// every refusal.
    pub fn over_in(&self, now: Time) -> Duration {
        WINDOW.saturating_sub(now.saturating_sub(self.since))
    }

    fn roll(&mut self, now: Time) {
        if now.saturating_sub(self.since) >= WINDOW {
            self.since = now;
            self.counts.clear();
        }
    }
}
