//! The order of waiting tasks, and where each stands in it.
//!
//! Tasks recovering from their first OOM crash go first (their work was
//! lost once already; later re-runs wait in the normal order, so that
//! crashing on purpose is no way to the front), then higher priority, then
//! (with fair share on) the user with less recent GPU use, then earlier
//! arrival.
//!
//! Queues hold tens of thousands of tasks while a dispatch usually looks
//! at one, so the order is kept, not computed: each waiting task sits in
//! a run of its class (recovery, priority) and user, by arrival, and runs
//! are kept in class order. Only fair share changes under the queue (usage
//! grows and decays all the time), and it only reorders users within a
//! class: [`Queue::ordered`] sorts a class's users by their usage when
//! it reaches that class and merges the runs of users with equal usage by
//! arrival, lazily, so walking to the head costs a few steps however long
//! the queue.
//!
//! A task that may not start for reasons of its own (held, waiting for
//! another task, over its user's limits) keeps its place but is passed
//! over; it is never the head, so it blocks nobody.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, btree_map, btree_set};
use std::iter::Peekable;

use rustc_hash::FxHashMap;

use super::{Dependency, Limit, Task, TaskId};

/// Where a waiting task stands, for people (`carma status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Its owner (or root) holds it: it waits for `carma release`.
    Held,
    /// It waits for another task to start or end (`after:`, ...).
    Waiting(Dependency),
    /// Its user (or its array) is at one of the limits, which it names.
    OverLimit(Limit),
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
    /// It recovers from its first OOM crash.
    Recovery,
    /// Its priority is higher.
    Priority,
    /// Its user has used fewer GPU-seconds lately (fair share).
    FairShare,
    /// It arrived earlier.
    Arrival,
}

/// The part of a task's rank that does not change while it waits:
/// tasks after their first OOM crash (`false`) first, then higher
/// priority.
type Class = (bool, Reverse<i32>);

/// Arrival number and id: first come first served, ties impossible.
type Arrival = (u64, TaskId);

/// A run: one user's waiting tasks of one class.
type Run = (Class, Option<u32>);

/// Where a waiting task is filed.
#[derive(Debug, Clone, Copy)]
struct Key {
    class: Class,
    user: Option<u32>,
    arrival: Arrival,
}

impl Key {
    fn of(id: TaskId, t: &Task) -> Key {
        Key {
            class: (!first_recovery(t), Reverse(t.priority)),
            user: t.demand.user,
            arrival: (t.arrival, id),
        }
    }
}

/// The tasks waiting to be launched, filed in dispatch order.
#[derive(Debug, Clone, Default)]
pub(super) struct Queue {
    /// Per class and user, that user's tasks of that class by arrival;
    /// classes in dispatch order.
    runs: BTreeMap<Run, BTreeSet<Arrival>>,
    /// Per user, all their waiting tasks by arrival (the queued-jobs
    /// limit counts these).
    by_user: HashMap<u32, BTreeSet<Arrival>>,
    /// Where each waiting task is filed.
    keys: FxHashMap<TaskId, Key>,
}

impl Queue {
    /// Files task `id` by its rank now (again, if it was filed before: a
    /// changed priority or crash count moves it).
    pub fn insert(&mut self, id: TaskId, t: &Task) {
        self.remove(id);
        let key = Key::of(id, t);
        self.runs
            .entry((key.class, key.user))
            .or_default()
            .insert(key.arrival);
        if let Some(user) = key.user {
            self.by_user.entry(user).or_default().insert(key.arrival);
        }
        self.keys.insert(id, key);
    }

    /// Takes task `id` out; false when it was not waiting.
    pub fn remove(&mut self, id: TaskId) -> bool {
        let Some(key) = self.keys.remove(&id) else {
            return false;
        };
        if let btree_map::Entry::Occupied(mut run) = self.runs.entry((key.class, key.user)) {
            run.get_mut().remove(&key.arrival);
            if run.get().is_empty() {
                run.remove();
            }
        }
        if let Some(user) = key.user
            && let Some(queued) = self.by_user.get_mut(&user)
        {
            queued.remove(&key.arrival);
            if queued.is_empty() {
                self.by_user.remove(&user);
            }
        }
        true
    }

    pub fn contains(&self, id: TaskId) -> bool {
        self.keys.contains_key(&id)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many wait in the recovery queue.
    pub fn recovering(&self) -> usize {
        self.runs
            .iter()
            .take_while(|(((not_recovering, _), _), _)| !not_recovering)
            .map(|(_, run)| run.len())
            .sum()
    }

    /// How many users (no user counting as one) have tasks waiting.
    pub fn users(&self) -> usize {
        let mut users: Vec<Option<u32>> = self.runs.keys().map(|&(_, user)| user).collect();
        users.sort_unstable();
        users.dedup();
        users.len()
    }

    /// Whether waiting task `a` goes before waiting task `b` where their
    /// users' usage does not decide (one user, or fair share off); `None`
    /// when either is not waiting.
    pub fn comes_before(&self, a: TaskId, b: TaskId) -> Option<bool> {
        let (a, b) = (self.keys.get(&a)?, self.keys.get(&b)?);
        Some((a.class, a.arrival) < (b.class, b.arrival))
    }

    /// Each user's waiting tasks, by arrival.
    pub fn per_user(&self) -> impl Iterator<Item = (u32, &BTreeSet<Arrival>)> {
        self.by_user.iter().map(|(&user, queued)| (user, queued))
    }

    /// The waiting tasks in dispatch order, `usage` giving each user's
    /// recent GPU use (all alike with fair share off), lazily.
    pub fn ordered<'a>(&'a self, usage: &'a dyn Fn(Option<u32>) -> f64) -> Ordered<'a> {
        Ordered {
            classes: self.runs.iter().peekable(),
            usage,
            alone: None,
            groups: Vec::new(),
            merging: Vec::new(),
            heads: BinaryHeap::new(),
        }
    }

    /// Each waiting task's place, in dispatch order; `blocked` says why a
    /// task may not start at all, if it may not.
    pub fn places(
        &self,
        tasks: &FxHashMap<TaskId, Box<Task>>,
        usage: &dyn Fn(Option<u32>) -> f64,
        blocked: impl Fn(TaskId, &Task) -> Option<Place>,
    ) -> Vec<(TaskId, Place)> {
        let mut head: Option<Key> = None;
        self.ordered(usage)
            .filter_map(|id| {
                let t = tasks.get(&id)?;
                let key = *self.keys.get(&id)?;
                let place = match (blocked(id, t), head) {
                    (Some(place), _) => place,
                    (None, None) => {
                        head = Some(key);
                        Place::Head
                    }
                    (None, Some(h)) => Place::Behind {
                        head: h.arrival.1,
                        by: precedence(&h, &key, usage),
                    },
                };
                Some((id, place))
            })
            .collect()
    }
}

/// Whether `t` re-runs after its first OOM crash: the one re-run that
/// goes ahead of the queue.
fn first_recovery(t: &Task) -> bool {
    t.crashes == 1
}

/// What puts `a` ahead of `b` (which it is).
fn precedence(a: &Key, b: &Key, usage: &dyn Fn(Option<u32>) -> f64) -> Precedence {
    if a.class.0 != b.class.0 {
        Precedence::Recovery
    } else if a.class.1 != b.class.1 {
        Precedence::Priority
    } else if usage(a.user).total_cmp(&usage(b.user)) == Ordering::Less {
        Precedence::FairShare
    } else {
        Precedence::Arrival
    }
}

/// The waiting tasks in dispatch order (see [`Queue::ordered`]).
pub(super) struct Ordered<'a> {
    /// The runs of the classes not reached yet.
    classes: Peekable<btree_map::Iter<'a, Run, BTreeSet<Arrival>>>,
    usage: &'a dyn Fn(Option<u32>) -> f64,
    /// The run of a class that only one user's tasks are in, walked as it
    /// is: nothing to sort or merge (every class, with no users, as in a
    /// simulation, or a server with one user at a time), and nothing
    /// allocated for the walk.
    alone: Option<btree_set::Iter<'a, Arrival>>,
    /// The current class's users not reached yet, as groups of equal
    /// usage, the group with the least usage last.
    groups: Vec<Vec<&'a BTreeSet<Arrival>>>,
    /// The runs of the group being merged.
    merging: Vec<btree_set::Iter<'a, Arrival>>,
    /// The next task of each run in `merging`, earliest first.
    heads: BinaryHeap<Reverse<(Arrival, usize)>>,
}

impl Ordered<'_> {
    /// Sorts the next class's runs into groups of equal usage; false when
    /// no class is left.
    fn next_class(&mut self) -> bool {
        let Some((&(class, user), run)) = self.classes.next() else {
            return false;
        };
        if self.classes.peek().is_none_or(|((c, _), _)| *c != class) {
            self.alone = Some(run.iter());
            return true;
        }
        let mut users = vec![((self.usage)(user), run)];
        while let Some(((_, user), run)) = self.classes.next_if(|((c, _), _)| *c == class) {
            users.push(((self.usage)(*user), run));
        }
        // Most usage first: groups are taken from the end.
        users.sort_by(|a, b| b.0.total_cmp(&a.0));
        self.groups.clear();
        let mut last = None;
        for (usage, run) in users {
            match self.groups.last_mut() {
                Some(group) if last == Some(usage) => group.push(run),
                _ => self.groups.push(vec![run]),
            }
            last = Some(usage);
        }
        true
    }
}

impl Iterator for Ordered<'_> {
    type Item = TaskId;

    fn next(&mut self) -> Option<TaskId> {
        loop {
            if let Some(Reverse((arrival, run))) = self.heads.pop() {
                if let Some(&next) = self.merging[run].next() {
                    self.heads.push(Reverse((next, run)));
                }
                return Some(arrival.1);
            }
            if let Some(run) = &mut self.alone {
                match run.next() {
                    Some(&(_, task)) => return Some(task),
                    None => self.alone = None,
                }
            }
            if let Some(group) = self.groups.pop() {
                self.merging.clear();
                for (i, run) in group.into_iter().enumerate() {
                    let mut tasks = run.iter();
                    if let Some(&first) = tasks.next() {
                        self.heads.push(Reverse((first, i)));
                    }
                    self.merging.push(tasks);
                }
                continue;
            }
            if !self.next_class() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::sched::{Demand, Need, Time};

    fn task(arrival: u64, crashes: u32, priority: i32, user: Option<u32>) -> Task {
        Task {
            demand: Demand {
                user,
                ..Demand::new(Need::Mib(1))
            },
            crashes,
            running: false,
            gpus: Vec::new(),
            priority,
            held: false,
            arrival,
            started: Time::ZERO,
        }
    }

    /// The order the queue promises, by sorting everything.
    fn sorted(
        tasks: &FxHashMap<TaskId, Box<Task>>,
        usage: &dyn Fn(Option<u32>) -> f64,
    ) -> Vec<TaskId> {
        let mut ids: Vec<TaskId> = tasks.keys().copied().collect();
        ids.sort_by(|a, b| {
            let (ta, tb) = (&tasks[a], &tasks[b]);
            (ta.crashes != 1)
                .cmp(&(tb.crashes != 1))
                .then(tb.priority.cmp(&ta.priority))
                .then(usage(ta.demand.user).total_cmp(&usage(tb.demand.user)))
                .then((ta.arrival, a).cmp(&(tb.arrival, b)))
        });
        ids
    }

    proptest! {
        /// Whatever is filed, moved and taken out, the lazy walk gives
        /// the order a full sort would, ties in usage included.
        #[test]
        fn the_walk_matches_a_full_sort(
            filed in prop::collection::vec((0u32..2, -1i32..2, prop::option::of(0u32..4)), 0..60),
            moves in prop::collection::vec((0usize..60, -1i32..2), 0..10),
            removals in prop::collection::vec(0usize..60, 0..20),
            usages in prop::collection::vec(0u8..3, 4),
        ) {
            let mut queue = Queue::default();
            let mut tasks = FxHashMap::default();
            for (n, &(crashes, priority, user)) in filed.iter().enumerate() {
                let id = TaskId(n as u64);
                // Arrival numbers need not follow ids.
                let t = task(1000 - n as u64 % 7, crashes, priority, user);
                queue.insert(id, &t);
                tasks.insert(id, Box::new(t));
            }
            for &(n, priority) in &moves {
                if let Some(t) = tasks.get_mut(&TaskId(n as u64)) {
                    t.priority = priority;
                    queue.insert(TaskId(n as u64), t);
                }
            }
            for &n in &removals {
                let id = TaskId(n as u64);
                prop_assert_eq!(queue.remove(id), tasks.remove(&id).is_some());
            }
            let usage = |user: Option<u32>| user.map_or(0.0, |u| f64::from(usages[u as usize]));
            prop_assert_eq!(queue.ordered(&usage).collect::<Vec<_>>(), sorted(&tasks, &usage));
            prop_assert_eq!(queue.len(), tasks.len());
            prop_assert_eq!(
                queue.recovering(),
                tasks.values().filter(|t| t.crashes > 0).count()
            );
            let queued: usize = queue.per_user().map(|(_, q)| q.len()).sum();
            prop_assert_eq!(queued, tasks.values().filter(|t| t.demand.user.is_some()).count());
        }
    }
}
