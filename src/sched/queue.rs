//! The order of waiting tasks, and where each stands in it.
//!
//! Tasks recovering from an OOM crash go first (their work was lost once
//! already), then higher priority, then earlier arrival. The order is
//! computed when it is needed rather than kept sorted: priorities and
//! holds change under the queue, waiting queues are hundreds of tasks at
//! most, and one sort per dispatch costs microseconds.
//!
//! A held task, or one waiting for another task (`afterok:` ...), keeps
//! its place but is passed over; it is never the head, so it blocks
//! nobody.

use std::collections::HashMap;

use super::{Dependency, Task, TaskId};

/// Where a waiting task stands, for people (`carma status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Its owner (or root) holds it: it waits for `carma release`.
    Held,
    /// It waits for another task to start or end (`after:`, ...).
    Waiting(Dependency),
    /// It is next; [`super::Scheduler::head_waits_for`] says what it
    /// needs.
    Head,
    /// It waits behind `head` (first come first served keeps large jobs
    /// from starving); `by_priority` when the head is there by a higher
    /// priority, not by arriving earlier or recovering.
    Behind { head: TaskId, by_priority: bool },
}

/// What orders a waiting task: smaller comes first.
fn rank(id: TaskId, t: &Task) -> (bool, std::cmp::Reverse<i32>, u64, TaskId) {
    (t.crashes == 0, std::cmp::Reverse(t.priority), t.arrival, id)
}

/// `waiting` in dispatch order, held tasks included.
pub(super) fn ordered(waiting: &[TaskId], tasks: &HashMap<TaskId, Task>) -> Vec<TaskId> {
    let mut order: Vec<(_, TaskId)> = waiting
        .iter()
        .filter_map(|&id| Some((rank(id, tasks.get(&id)?), id)))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, id)| id).collect()
}

/// Each waiting task's place, in dispatch order.
pub(super) fn places(waiting: &[TaskId], tasks: &HashMap<TaskId, Task>) -> Vec<(TaskId, Place)> {
    let mut head: Option<(TaskId, &Task)> = None;
    ordered(waiting, tasks)
        .into_iter()
        .filter_map(|id| {
            let t = tasks.get(&id)?;
            let place = match head {
                _ if t.held => Place::Held,
                _ if t.waits_for().is_some() => Place::Waiting(*t.waits_for()?),
                None => {
                    head = Some((id, t));
                    Place::Head
                }
                Some((h, ht)) => Place::Behind {
                    head: h,
                    by_priority: (ht.crashes == 0) == (t.crashes == 0) && ht.priority > t.priority,
                },
            };
            Some((id, place))
        })
        .collect()
}
