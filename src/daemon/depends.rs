//! Resolving a job's dependencies (`afterok: prep`) to tasks, and saying
//! what is known of each.
//!
//! A job names a task by number or by job name; a name means the one task
//! of that name among its owner's (ended ones included), so a user can
//! chain `prep` and `train` without learning numbers, and never picks up
//! another user's task by a common name. The resolution is written into
//! the task's record once, so a restarted daemon waits for the same tasks
//! even if a second `prep` was submitted since.

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
            let resolved = spec
                .after
                .iter()
                .map(|d| {
                    let task = self
                        .resolve(name, owner, &d.task)
                        .map_err(|why| format!("{}: {}: {why}", d.kind.key(), d.task))?;
                    Ok(ResolvedDependency { kind: d.kind, task })
                })
                .collect::<Result<Vec<_>, String>>()?;
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

    /// The number of the task `task` names for a job of `owner`'s.
    fn resolve(&self, me: &TaskName, owner: u32, task: &TaskRef) -> Result<u64, String> {
        let known = self.known_tasks();
        match task {
            TaskRef::Id(id) if *id == me.seq() => Err("a task cannot wait for itself".into()),
            TaskRef::Id(id) => known
                .iter()
                .any(|(_, n)| n.seq() == *id)
                .then_some(*id)
                .ok_or_else(|| "no such task".into()),
            TaskRef::Name(job) => {
                let mine: Vec<u64> = known
                    .iter()
                    .filter(|(_, n)| n.stem() == job && n.seq() != me.seq())
                    .filter(|(state, n)| self.owner_of(*state, n) == Some(owner))
                    .map(|(_, n)| n.seq())
                    .collect();
                match mine.as_slice() {
                    [id] => Ok(*id),
                    [] => Err("no task of yours has this job name".into()),
                    ids => Err(format!(
                        "{} tasks of yours have this job name; name one by number ({})",
                        ids.len(),
                        ids.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
            }
        }
    }

    /// Every task of the spool with where it is: the daemon's own, those
    /// ending, and those in the state directories.
    fn known_tasks(&self) -> Vec<(State, TaskName)> {
        let mut tasks: Vec<(State, TaskName)> = self
            .tasks
            .values()
            .map(|t| (t.state, t.name.clone()))
            .chain(self.closing.values().map(|c| (c.from, c.name.clone())))
            .collect();
        for state in State::ALL {
            if let Ok(listing) = self.spool.list(state) {
                tasks.extend(listing.tasks.into_iter().map(|n| (state, n)));
            }
        }
        tasks.sort_by_key(|(_, n)| n.seq());
        tasks.dedup_by_key(|(_, n)| n.seq());
        tasks
    }

    fn owner_of(&self, state: State, name: &TaskName) -> Option<u32> {
        if let Some(t) = self.tasks.get(&name.seq()) {
            return t.demand.user;
        }
        if let Some(c) = self.closing.get(&name.seq()) {
            return c.owner;
        }
        self.spool.load_record(state, name).ok()?.owner
    }

    /// Whether task `seq` has started, and how it ended if it has.
    fn progress(&self, seq: u64) -> (bool, Option<bool>) {
        if let Some(t) = self.tasks.get(&seq) {
            return (t.run > 0 || t.state == State::Running, None);
        }
        if let Some(c) = self.closing.get(&seq) {
            return (true, Some(c.to == State::Done));
        }
        let query = seq.to_string();
        match self.spool.find(&query) {
            Ok((State::Done, _)) => (true, Some(true)),
            Ok((State::Failed, _)) => (true, Some(false)),
            Ok((State::Running | State::Recovery, _)) => (true, None),
            Ok((State::Pending, _)) => (false, None),
            // Gone from the spool (removed by hand): it can no longer end
            // in any way a dependency waits for.
            Err(_) => (true, Some(false)),
        }
    }
}
