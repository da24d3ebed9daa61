//! Closings: a task the core is done with goes to `done/` or `failed/`
//! with its outcome, or back to the queue when its requeue was asked for.
//! A move the disk refuses is retried on its own schedule until it lands:
//! the task is never dropped from the daemon's hands.

use super::{Backoff, Closing, Ending, Lifecycle, Moment, World, public_reason};
use crate::sched::{FailReason, Need, TaskId};
use crate::spool::State;
use crate::spool::record::Outcome;

impl Lifecycle {
    /// The core is done with a task: it goes to `done/` or `failed/` with
    /// its outcome, its peak and fingerprint recorded (history is rebuilt
    /// from `done/`, so a crash between the move and the history write
    /// loses nothing). A task whose requeue was asked for goes back to
    /// the queue instead.
    pub(super) fn finish(
        &mut self,
        now: Moment,
        id: TaskId,
        to: State,
        reason: Option<&FailReason>,
        world: &mut impl World,
    ) {
        if self.tasks.get(&id.0).is_some_and(|t| t.record.requeue) {
            return self.requeue_stopped(id.0, world);
        }
        let Some(task) = self.tasks.remove(&id.0) else {
            return;
        };
        let mut record = task.record;
        record.peak_mib = (task.peak_mib > 0).then_some(task.peak_mib);
        record.run_s = task.run_s;
        record.fingerprint = Some(Box::new(task.fingerprint));
        self.metrics.ended(to, &task.user);
        if let (Some(Need::Mib(need)), true) = (
            record.estimate.as_ref().map(|e| e.need),
            to == State::Done && task.peak_mib > 0,
        ) {
            let source = record.estimate.as_ref().map_or("", |e| e.source.as_str());
            self.metrics.estimated(source, need, task.peak_mib);
        }
        self.endings.push(Ending {
            name: task.name.clone(),
            state: to,
            user: Some(task.user.to_string()),
            at: Some(now.unix),
            why: reason.map(public_reason),
        });
        record.outcome = Some(match reason {
            Some(reason) => Outcome::failed_at(&reason.to_string(), now.unix),
            None => Outcome {
                state: to.to_string(),
                reason: None,
                at: now.unix,
            },
        });
        self.close(
            now,
            Closing {
                name: task.name,
                record,
                from: task.state,
                to,
                run: task.run,
                retry: Backoff::default(),
                bytes: task.bytes,
                notify: task.job.notify,
                run_as: task.run_as,
            },
            world,
        );
    }

    /// A task whose job `carma requeue` stopped: back to `pending/` and
    /// the queue, as if just submitted. Should the move fail, the task
    /// stays in `running/`, from where the next launch starts it just as
    /// well.
    fn requeue_stopped(&mut self, seq: u64, world: &mut impl World) {
        let Some(task) = self.tasks.remove(&seq) else {
            return;
        };
        let name = task.name.clone();
        let mut record = task.record.clone();
        record.requeued();
        let moved = world
            .write_record(task.state, &name, &record)
            .and_then(|()| world.move_task(&name, task.state, State::Pending));
        let state = match moved {
            Ok(()) => State::Pending,
            Err(e) => {
                log::warn!(
                    "{name}: requeued, but stays in {}/ for now: {e}",
                    task.state
                );
                task.state
            }
        };
        log::info!("{name}: requeued after run {}", task.run);
        world.take_in(&name, state);
    }

    /// Takes an ended task to its final directory now, or keeps it for a
    /// retry if the disk refuses.
    pub fn close(&mut self, now: Moment, closing: Closing, world: &mut impl World) {
        let seq = closing.name.seq();
        self.closing.insert(seq, closing);
        self.try_close(now, seq, world);
    }

    /// Closings whose retry is due.
    pub fn retry_due(&mut self, now: Moment, world: &mut impl World) {
        let due: Vec<u64> = self
            .closing
            .iter()
            .filter(|(_, c)| c.retry.due(now.at))
            .map(|(&seq, _)| seq)
            .collect();
        for seq in due {
            self.try_close(now, seq, world);
        }
    }

    fn try_close(&mut self, now: Moment, seq: u64, world: &mut impl World) {
        let Some(c) = self.closing.get(&seq) else {
            return;
        };
        let (name, from, to) = (c.name.clone(), c.from, c.to);
        // A move that renamed but failed after (a directory sync) left the
        // task in `to`: carma's own directory there, not a user's entry.
        let at = match world.holds(from, &name) {
            true => from,
            false if world.holds(to, &name) => to,
            false => {
                log::error!("{name}: its directory left {from}/; it cannot be moved to {to}/");
                self.closing.remove(&seq);
                return;
            }
        };
        let written = world
            .write_record(at, &name, &c.record)
            .and_then(|()| world.write_ending(at, &name, &c.record))
            .and_then(|()| match at {
                at if at == to => Ok(()),
                at => world.move_task(&name, at, to),
            });
        if let Err(e) = written {
            if let Some(c) = self.closing.get_mut(&seq) {
                let (delay, first) = c.retry.failed(now.at);
                if first {
                    log::warn!(
                        "{name}: cannot move to {to}/: {e}; kept, and tried again in {delay:.1?} and later"
                    );
                }
            }
            return;
        }
        let Some(c) = self.closing.remove(&seq) else {
            return;
        };
        self.ended.insert(to, name.clone());
        if let Some(user) = c.record.owner.filter(|&u| !self.privileged(u)) {
            let user = world.answers_for(user);
            for (state, old) in self.kept.landed(user, c.bytes, to, name.clone()) {
                match world.drop_copies(state, &old) {
                    Ok(()) => log::info!(
                        "{old}: its copies of the job's files removed: its owner's ended \
                         tasks keep more than queue.user_max_ended_mib"
                    ),
                    Err(e) => log::warn!("{old}: cannot remove its copies: {e}"),
                }
            }
        }
        if c.retry.next().is_some() {
            log::info!("{name}: moved to {to}/ at last");
        }
        let peak = c.record.peak_mib.unwrap_or(0);
        if to == State::Done && peak > 0 {
            world.remember_peak(&name, &c.record);
        } else if to == State::Failed && c.record.run_s.is_some() {
            world.remember_run_time(&name, &c.record);
        }
        match c.record.outcome.as_ref().and_then(|o| o.reason.as_ref()) {
            None => log::info!("{name}: done after {} run(s); peak {peak} MiB", c.run),
            Some(reason) => log::error!("{name}: failed: {reason}"),
        }
        world.notify(&c);
    }
}
