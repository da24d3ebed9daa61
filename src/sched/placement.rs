//! Placing waiting tasks: the passes over the queue in dispatch order,
//! what each task wants of a GPU (free memory, or an idle GPU and why),
//! whether a GPU passes (health, the interference gate, memory after
//! reservations, one user per GPU under MPS), and the policy's choice.

use super::policy::Best;
use super::*;

impl Scheduler {
    /// Places head tasks until one does not fit.
    pub(super) fn dispatch(&mut self, actions: &mut Vec<Action>) {
        self.ledger.expire(self.now);
        if self.waiting.is_empty() || self.still_stuck() {
            return;
        }
        match self.hold_until {
            Some(hold) if hold > self.now => return,
            Some(_) => self.hold_until = None,
            None => {}
        }
        // Placing a task changes no other task's rank: one order serves a
        // pass. A launch may free a task that waits `after:` it, further
        // back, so passes repeat while they launch, unless a launch pauses
        // the server ([`pace`]).
        loop {
            if self.launch_pause().is_some() {
                return;
            }
            let waiting = std::mem::take(&mut self.waiting);
            let first = actions.len();
            let stopped_at = self.pass(&waiting, actions);
            self.waiting = waiting;
            let mut launched = false;
            for action in &actions[first..] {
                if let Action::Launch { task, .. } = action {
                    self.waiting.remove(*task);
                    launched = true;
                }
            }
            if !launched {
                self.note_stuck(stopped_at);
                return;
            }
            if stopped_at.is_some() {
                return;
            }
        }
    }

    /// One dispatch pass over `waiting` (taken out of the core while it
    /// runs), its launches appended to `actions`: the head it stopped at,
    /// which nothing behind may pass (`None`: another pass might launch
    /// more).
    pub(super) fn pass(&mut self, waiting: &Queue, actions: &mut Vec<Action>) -> Option<TaskId> {
        let cut = QueueCut::of(waiting, &self.rules.queue);
        let usage = self.usage();
        // Once the head cannot be placed: its reservation, which tasks
        // further back must respect (see [`backfill`]), and how many GPUs
        // hold no task, the only ones they may start on.
        let mut reserved = None;
        let mut empty = 0;
        let mut tested = 0;
        let most = match self.rules.queue.backfill_max_tested {
            0 => u32::MAX,
            n => n,
        };
        for task in waiting.ordered(&usage) {
            if reserved.is_some() {
                if tested == most {
                    break;
                }
                tested += 1;
            }
            let Some(t) = self.tasks.get(&task) else {
                continue;
            };
            if self.blocked(task, t, &cut).is_some() {
                continue;
            }
            let action = match &reserved {
                None => match self.place(task, &[]) {
                    Some(action) => action,
                    // With no GPU empty, no one behind could start: the
                    // reservation is not worked out.
                    None if self.rules.queue.backfill && self.empty_gpus() > 0 => {
                        match self.reservation(task) {
                            Some(r) => {
                                reserved = Some(r);
                                empty = self.empty_gpus();
                                continue;
                            }
                            None => return Some(task),
                        }
                    }
                    None => return Some(task),
                },
                Some(r) => {
                    // Once no GPU is empty, no one further back can start,
                    // and the rest of the queue is not looked at.
                    if empty == 0 {
                        break;
                    }
                    if t.demand.gpus as usize > empty {
                        continue;
                    }
                    let Some(off_limits) = self.off_limits(task, r) else {
                        continue;
                    };
                    let Some(action) = self.place(task, &off_limits) else {
                        continue;
                    };
                    self.backfilled.insert(task);
                    empty = self.empty_gpus();
                    action
                }
            };
            self.note_launch(reserved.is_some());
            self.note_started(task);
            actions.push(action);
            if self.launch_pause().is_some() {
                break;
            }
        }
        None
    }

    /// Tries to place one task on GPUs not in `off_limits`; returns its
    /// launch if it fits now.
    pub(super) fn place(&mut self, task: TaskId, off_limits: &[usize]) -> Option<Action> {
        let t = self.tasks.get(&task)?;
        let want = self.want(&t.demand, t.crashes);
        let policy = if want.is_sole() {
            Policy::Exclusive
        } else {
            self.rules.placement.policy
        };
        let idle_first = self.rules.placement.idle_first && !want.is_sole();
        let candidates = self.choose(&t.demand, want, policy, idle_first, off_limits)?;
        let user = t.demand.user;
        let time_limit = self.rules.queue.time_limit(t.demand.time_limit);
        if policy == Policy::RoundRobin {
            self.cursor = candidates.last().map_or(0, |c| c.gpu + 1) % self.gpus.len();
        }
        let placed = candidates.iter().map(|c| (c.gpu, c.alone.is_some()));
        self.occupy(task, user, placed, want);
        let gpus: Vec<usize> = candidates.iter().map(|c| c.gpu).collect();
        let settle = self.rules.placement.settle_s.duration();
        let awaited = self.now + self.rules.placement.await_activity_s.duration();
        for &g in &gpus {
            self.gpus[g].settles_at = self.now + settle;
            if awaited > self.now {
                self.gpus[g].activity.task_joined(task, awaited);
            }
        }
        if let Some(t) = self.tasks.get_mut(&task) {
            t.running = true;
            t.gpus = gpus.clone();
            t.started = self.now;
            self.loads.launched(t);
        }
        let limit_mib = match want {
            Want::Free { free_mib, .. } if candidates.iter().all(|c| c.alone.is_none()) => {
                Some(free_mib)
            }
            _ => None,
        };
        Some(Action::Launch {
            task,
            time_limit,
            why: Placed {
                policy,
                idle_first,
                want,
                chosen: candidates,
            },
            limit_mib,
            gpus,
        })
    }

    /// The GPUs not in `off_limits` that a task asking `want` of each gets
    /// under `policy` (idle ones first if `idle_first`), best first; `None`
    /// when fewer pass than it needs.
    ///
    /// Idle GPUs are looked at first: they are all that a task holding its
    /// GPUs alone can take, and with idle first they rank before every busy
    /// GPU, so once enough of them pass no busy one is looked at. That is
    /// most arrivals on a server that is not full, which otherwise checked
    /// all of its GPUs each. The policy's order is total, so the best do
    /// not depend on the order the GPUs are offered in: the choice is the
    /// plain scan's (the proptest `skipping_busy_gpus_changes_no_choice`).
    pub(super) fn choose(
        &self,
        demand: &Demand,
        want: Want,
        policy: Policy,
        idle_first: bool,
        off_limits: &[usize],
    ) -> Option<Vec<Candidate>> {
        let n = demand.gpus as usize;
        let mut best = Best::new(policy.order(idle_first, self.cursor, self.gpus.len()), n);
        for idle in [true, false] {
            if !idle && (want.is_sole() || idle_first && best.offered() >= n) {
                break;
            }
            for g in 0..self.gpus.len() {
                if self.is_idle(g) != idle || off_limits.contains(&g) {
                    continue;
                }
                if let Some(c) = self.passes(g, demand, self.on_gpu(want, g)) {
                    best.offer(c);
                }
            }
        }
        best.chosen()
    }

    /// Marks the GPUs (index, held alone) as running `task` and books its
    /// memory.
    pub(super) fn occupy(
        &mut self,
        task: TaskId,
        user: Option<u32>,
        placed: impl Iterator<Item = (usize, bool)> + Clone,
        want: Want,
    ) {
        for (g, sole) in placed.clone() {
            self.gpus[g].occupants.push(Occupant { task, user, sole });
        }
        if let Want::Free { book_mib, .. } = want {
            let ramp = self.rules.placement.reservation_ramp_s.duration();
            let gpus = placed.map(|(g, _)| g);
            self.ledger.book(task, gpus, book_mib, self.now + ramp);
        }
    }

    /// What `demand` asks of any GPU after `crashes` OOMs.
    pub(super) fn want(&self, demand: &Demand, crashes: u32) -> Want {
        let p = &self.rules.placement;
        if demand.exclusive {
            return Want::Idle("the task asked for exclusive GPUs");
        }
        if p.policy == Policy::Exclusive {
            return Want::Idle("exclusive policy");
        }
        if crashes > 0 {
            if self.rules.recovery.mode == RecoveryMode::Exclusive {
                return Want::Idle("recovery after an OOM crash");
            }
            if demand.need == Need::WholeGpu {
                return Want::Idle("the task needs a whole GPU");
            }
            let need = looser_need(&self.rules, demand, crashes);
            return Want::Free {
                free_mib: need,
                book_mib: need,
            };
        }
        match demand.need {
            Need::WholeGpu => Want::Idle("the task needs a whole GPU"),
            Need::Mib(mib) => Want::Free {
                free_mib: mib.saturating_add(p.margin_mib),
                book_mib: mib,
            },
            Need::Unknown => Want::Free {
                free_mib: p.unknown_margin_mib,
                book_mib: p.unknown_margin_mib,
            },
        }
    }

    /// What `want` asks of GPU `g` in particular: a need that fills the
    /// whole GPU asks for it idle, so no task waits forever for memory no
    /// GPU has.
    pub(super) fn on_gpu(&self, want: Want, g: usize) -> Want {
        let largest = self.largest_mib;
        match want {
            // Only where no GPU is larger: a need that fits a larger GPU
            // (or MIG instance) waits for one.
            Want::Free { free_mib, .. }
                if free_mib >= self.gpus[g].total_mib && self.gpus[g].total_mib == largest =>
            {
                Want::Idle("its need fills a whole GPU")
            }
            w => w,
        }
    }

    /// Whether GPU `index` holds nothing: no carma task and almost no
    /// memory in use.
    pub(super) fn is_idle(&self, index: usize) -> bool {
        let gpu = &self.gpus[index];
        gpu.occupants.is_empty() && gpu.used_mib <= self.rules.placement.idle_used_mib
    }

    /// Whether GPU `index` can take the task now; the ranking data if so.
    pub(super) fn passes(&self, index: usize, demand: &Demand, want: Want) -> Option<Candidate> {
        let p = &self.rules.placement;
        let gpu = &self.gpus[index];
        if !gpu.healthy || gpu.settles_at > self.now || (gpu.mig_instance && demand.gpus > 1) {
            return None;
        }
        let free_mib = gpu
            .total_mib
            .saturating_sub(gpu.used_mib)
            .saturating_sub(self.ledger.outstanding(index, self.now));
        let ok = match want {
            Want::Idle(_) => self.is_idle(index),
            Want::Free { free_mib: need, .. } => {
                free_mib >= need
                    && gpu
                        .occupants
                        .iter()
                        .all(|o| !o.sole && (!p.one_user_per_gpu || o.user == demand.user))
            }
        };
        if !ok {
            return None;
        }
        let sharing = !want.is_sole() && !self.is_idle(index);
        if sharing && self.sharing_pause().is_some() {
            return None;
        }
        // Only now, as most GPUs of a busy server fail on memory.
        let load = gpu.activity.load(self.now, p);
        if !want.is_sole() && (gpu.activity.awaits(self.now).is_some() || p.refuses(&load)) {
            return None;
        }
        Some(Candidate {
            gpu: index,
            free_mib,
            smact: load.smact,
            idle: self.is_idle(index),
            alone: match want {
                Want::Idle(why) => Some(why),
                Want::Free { .. } => None,
            },
        })
    }
}

impl Want {
    /// The task will hold the GPU alone.
    pub(super) fn is_sole(self) -> bool {
        matches!(self, Want::Idle(_))
    }
}

/// Looser recovery: the last need plus a step per crash.
pub(super) fn looser_need(rules: &Rules, demand: &Demand, crashes: u32) -> u64 {
    let base = match demand.need {
        Need::Mib(mib) => mib,
        Need::Unknown | Need::WholeGpu => rules.placement.unknown_margin_mib,
    };
    base.saturating_add(rules.recovery.looser_step_mib * u64::from(crashes))
}
