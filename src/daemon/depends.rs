//! Resolving a job's dependencies (`afterok: prep`) to tasks, and saying
//! what is known of each.
//!
//! A job names a task by number or by job name, in its file or on `carma
//! submit`'s command line (`--afterok prep`); a name means the one task
//! of that name among its owner's (ended ones included), so a user can
//! chain `prep` and `train` without learning numbers, and never picks up
//! another user's task by a common name. The resolution is written into
//! the task's record once, so a restarted daemon waits for the same tasks
//! even if a second `prep` was submitted since.

use std::collections::HashMap;

use super::Daemon;
use crate::rad::{TaskRef, TaskSpec};
use crate::sched::{Dependency, TaskId};
use crate::spool::record::{ResolvedDependency, TaskRecord};
use crate::spool::{State, TaskName};

impl Daemon {
    /// The record's resolved dependencies, resolving the spec's first if
    /// that was not done yet (then the record says so from now on).
    pub(super) fn dependencies(
        &self,
        name: &TaskName,
        owner: u32,
        spec: &TaskSpec,
        record: &mut TaskRecord,
    ) -> Result<Vec<Dependency>, String> {
        if record.after.is_none() {
            // Each task named once, however often the job names it (a
            // job may name 64 on a line, and a request carry 64 jobs).
            let mut known = HashMap::new();
            let resolved = spec
                .after
                .iter()
                .chain(&record.submitted_after)
                .map(|d| {
                    let task = known
                        .entry(&d.task)
                        .or_insert_with(|| self.resolve(name, owner, &d.task))
                        .clone()
                        .map_err(|why| format!("{}: {}: {why}", d.kind.key(), d.task))?;
                    Ok(ResolvedDependency { kind: d.kind, task })
                })
                .collect::<Result<Vec<ResolvedDependency>, String>>()?;
            // Each task once per kind: a job naming one 320 times (64
            // names on each of its lines and on the command line) waits
            // for it once.
            let mut seen = std::collections::HashSet::new();
            let resolved = resolved
                .into_iter()
                .filter(|d| seen.insert((d.kind, d.task)))
                .collect();
            record.after = Some(resolved);
        }
        Ok(record
            .after
            .iter()
            .flatten()
            .map(|d| {
                let (started, ended) = self.progress(d.task);
                Dependency {
                    kind: d.kind,
                    task: TaskId(d.task),
                    started,
                    ended,
                }
            })
            .collect())
    }

    /// The number of the task `task` names for a job of `owner`'s: by
    /// number any task, by job name the newest of the owner's tasks of
    /// that name that waits or runs, else the newest that ended (so a job
    /// resubmitted under the same name is the one meant). Nothing is
    /// listed or copied: a number is looked up, a name compared with the
    /// names the daemon holds, and an ended task's owner read from its
    /// record once for the daemon's life ([`Daemon::ended_owner`]), so
    /// that another user's thousands of tasks of the same name cost a
    /// dependency no reads.
    fn resolve(&self, me: &TaskName, owner: u32, task: &TaskRef) -> Result<u64, String> {
        match task {
            TaskRef::Id(id) if *id == me.seq() => Err("a task cannot wait for itself".into()),
            TaskRef::Id(id) => {
                let known = self.life.tasks.contains_key(id)
                    || self.life.closing.contains_key(id)
                    || self.life.ended.get(*id).is_some();
                known.then_some(*id).ok_or_else(|| "no such task".into())
            }
            TaskRef::Name(job) => {
                let named = |n: &TaskName| n.stem() == job && n.seq() != me.seq();
                let live = self
                    .life
                    .tasks
                    .values()
                    .filter(|t| named(&t.name) && t.owner == Some(owner))
                    .map(|t| t.name.seq())
                    .chain(
                        self.life
                            .closing
                            .values()
                            .filter(|c| named(&c.name) && c.record.owner == Some(owner))
                            .map(|c| c.name.seq()),
                    )
                    .max();
                live.or_else(|| {
                    self.life
                        .ended
                        .named(job)
                        .rev()
                        .filter(|(_, n)| n.seq() != me.seq())
                        .find(|(state, n)| self.ended_owner(*state, n) == Some(owner))
                        .map(|(_, n)| n.seq())
                })
                .ok_or_else(|| "no task of yours has this job name".into())
            }
        }
    }

    /// The owner of an ended task, from its record, read once it could be
    /// read (a read that failed, out of descriptors say, is tried again).
    fn ended_owner(&self, state: State, name: &TaskName) -> Option<u32> {
        if let Some(owner) = self.ended_owners.borrow().get(&name.seq()) {
            return *owner;
        }
        let owner = self.spool.load_record(state, name).ok()?.owner;
        self.ended_owners.borrow_mut().insert(name.seq(), owner);
        owner
    }

    /// Whether task `seq` has started, and how it ended if it has.
    fn progress(&self, seq: u64) -> (bool, Option<bool>) {
        if let Some(t) = self.life.tasks.get(&seq) {
            return (t.run > 0 || t.state == State::Running, None);
        }
        if let Some(c) = self.life.closing.get(&seq) {
            return (true, Some(c.to == State::Done));
        }
        match self.life.ended.get(seq) {
            Some(State::Done) => (true, Some(true)),
            // Failed, or gone from the spool (removed by hand, pruned): it
            // can no longer end in any way a dependency waits for.
            _ => (true, Some(false)),
        }
    }
}
