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
                .chain(&record.submitted_after)
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

    /// The number of the task `task` names for a job of `owner`'s: by
    /// number any task, by job name the newest of the owner's tasks of
    /// that name that waits or runs, else the newest that ended (so a job
    /// resubmitted under the same name is the one meant).
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
                let mine = known
                    .iter()
                    .filter(|(_, n)| n.stem() == job && n.seq() != me.seq())
                    .filter(|(state, n)| self.owner_of(*state, n) == Some(owner));
                let (live, ended): (Vec<_>, Vec<_>) = mine
                    .map(|(state, n)| (*state, n.seq()))
                    .partition(|(state, _)| !matches!(state, State::Done | State::Failed));
                let newest = |tasks: &[(State, u64)]| tasks.iter().map(|&(_, seq)| seq).max();
                newest(&live)
                    .or_else(|| newest(&ended))
                    .ok_or_else(|| "no task of yours has this job name".into())
            }
        }
    }

    /// Every task the daemon knows with where it is: its own, those
    /// ending, and those in `done/` and `failed/` (from its index: nothing
    /// is listed, however long the spool's history).
    fn known_tasks(&self) -> Vec<(State, TaskName)> {
        let mut tasks: Vec<(State, TaskName)> = self
            .life
            .tasks
            .values()
            .map(|t| (t.state, t.name.clone()))
            .chain(self.life.closing.values().map(|c| (c.from, c.name.clone())))
            .chain(
                self.life
                    .ended
                    .iter()
                    .map(|(state, name)| (state, name.clone())),
            )
            .collect();
        tasks.sort_by_key(|(_, n)| n.seq());
        tasks.dedup_by_key(|(_, n)| n.seq());
        tasks
    }

    fn owner_of(&self, state: State, name: &TaskName) -> Option<u32> {
        if let Some(t) = self.life.tasks.get(&name.seq()) {
            return t.owner;
        }
        if let Some(c) = self.life.closing.get(&name.seq()) {
            return c.record.owner;
        }
        self.spool.load_record(state, name).ok()?.owner
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
