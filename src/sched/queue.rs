//! The order of waiting tasks, and where each stands in it.
//!
//! Tasks recovering from an OOM crash go first (their work was lost once
//! already), then higher priority, then (with fair share on) the user
//! with less recent GPU use, then earlier arrival. The order is computed
//! when it is needed rather than kept sorted: priorities, holds and usage
//! change under the queue, waiting queues are hundreds of tasks at most,
//! and one sort per dispatch costs microseconds.
//!
//! A task that may not start for reasons of its own (held, waiting for
//! another task, over its user's limits) keeps its place but is passed
//! over; it is never the head, so it blocks nobody.

use std::cmp::{Ordering, Reverse};
use std::collections::HashMap;

use super::{Dependency, Task, TaskId};

/// Where a waiting task stands, for people (`carma status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Its owner (or root) holds it: it waits for `carma release`.
    Held,
    /// It waits for another task to start or end (`after:`, ...).
    Waiting(Dependency),
    /// Its user is at one of the per-user limits; the text says which.
    OverLimit(String),
    /// It is next; [`super::Scheduler::head_waits_for`] says what it
    /// needs.
    Head,
    /// It waits behind `head` (first come first served keeps large jobs
    /// from starving), which is ahead of it `by` this.
    Behind { head: TaskId, by: Precedence },
}

/// Why one task goes before another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precedence {
    /// It recovers from an OOM crash.
    Recovery,
    /// Its priority is higher.
    Priority,
    /// Its user has used fewer GPU-seconds lately (fair share).
    FairShare,
    /// It arrived earlier.
    Arrival,
}

/// What orders waiting tasks, with each user's usage when fair share is
/// on (`None`: off).
pub(super) struct Order<'a> {
    pub tasks: &'a HashMap<TaskId, Task>,
    pub usage: Option<&'a dyn Fn(Option<u32>) -> f64>,
}

impl Order<'_> {
    fn usage(&self, t: &Task) -> f64 {
        self.usage.map_or(0.0, |u| u(t.demand.user))
    }

    /// Which of `a` and `b` goes first, and by what.
    fn compare(&self, a: (TaskId, &Task), b: (TaskId, &Task)) -> (Ordering, Precedence) {
        let (ta, tb) = (a.1, b.1);
        let by = [
            (
                (ta.crashes == 0).cmp(&(tb.crashes == 0)),
                Precedence::Recovery,
            ),
            (
                Reverse(ta.priority).cmp(&Reverse(tb.priority)),
                Precedence::Priority,
            ),
            (
                self.usage(ta).total_cmp(&self.usage(tb)),
                Precedence::FairShare,
            ),
            (
                (ta.arrival, a.0).cmp(&(tb.arrival, b.0)),
                Precedence::Arrival,
            ),
        ];
        by.into_iter()
            .find(|(o, _)| o.is_ne())
            .unwrap_or((Ordering::Equal, Precedence::Arrival))
    }

    /// `waiting` in dispatch order, tasks that may not start included.
    pub fn ordered(&self, waiting: &[TaskId]) -> Vec<TaskId> {
        let mut order: Vec<(TaskId, &Task)> = waiting
            .iter()
            .filter_map(|&id| Some((id, self.tasks.get(&id)?)))
            .collect();
        order.sort_by(|&a, &b| self.compare(a, b).0);
        order.into_iter().map(|(id, _)| id).collect()
    }

    /// Each waiting task's place, in dispatch order; `blocked` says why a
    /// task may not start at all, if it may not.
    pub fn places(
        &self,
        waiting: &[TaskId],
        blocked: impl Fn(TaskId, &Task) -> Option<Place>,
    ) -> Vec<(TaskId, Place)> {
        let mut head: Option<(TaskId, &Task)> = None;
        self.ordered(waiting)
            .into_iter()
            .filter_map(|id| {
                let t = self.tasks.get(&id)?;
                let place = match (blocked(id, t), head) {
                    (Some(place), _) => place,
                    (None, None) => {
                        head = Some((id, t));
                        Place::Head
                    }
                    (None, Some(h)) => Place::Behind {
                        head: h.0,
                        by: self.compare(h, (id, t)).1,
                    },
                };
                Some((id, place))
            })
            .collect()
    }
}
