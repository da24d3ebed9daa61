//! What each event does to the core's state: a task queued or found
//! running after a restart, a run that ended or could not start, a
//! cancellation, a GPU sample. [`Scheduler::step`] routes events here and
//! dispatches after each.

use super::*;

impl Scheduler {
    pub(super) fn queue(
        &mut self,
        task: TaskId,
        mut demand: Demand,
        crashes: u32,
        actions: &mut Vec<Action>,
    ) {
        // What the core itself knows of a dependency's start adds to what
        // the driver said.
        for d in &mut demand.after {
            d.started |= self
                .tasks
                .get(&d.task)
                .is_some_and(|t| t.running || t.crashes > 0);
            if d.ended.is_none()
                && let Some(&succeeded) = self.ended_now.get(&d.task)
            {
                d.started = true;
                d.ended = Some(succeeded);
            }
        }
        let refused = match self.placeable(&demand) {
            Err(why) => Some(FailReason::Unplaceable(why)),
            Ok(()) => self
                .rules
                .queue
                .refuses(demand.time_limit)
                .map(FailReason::Refused),
        };
        if let Some(reason) = refused {
            self.note_ended(task, false);
            actions.push(Action::Fail { task, reason });
            return;
        }
        for d in &demand.after {
            self.dependents.entry(d.task).or_default().insert(task);
        }
        if demand.after.iter().any(|d| d.met() == Some(false)) {
            self.doomed.push(task);
        }
        let arrival = self.arrive();
        let t = Task {
            priority: demand.priority,
            demand,
            crashes,
            running: false,
            gpus: Vec::new(),
            held: false,
            arrival,
            started: self.now,
        };
        self.waiting.insert(task, &t);
        self.tasks.insert(task, Box::new(t));
    }

    pub(super) fn arrive(&mut self) -> u64 {
        self.arrivals += 1;
        self.arrivals
    }

    /// Whether some GPU set of this server could ever run the demand.
    pub(super) fn placeable(&self, demand: &Demand) -> Result<(), String> {
        let have = self.gpus.len();
        // A task on several GPUs cannot use MIG instances (see `passes`).
        let whole = self.gpus.iter().filter(|g| !g.mig_instance).count();
        match demand.gpus {
            0 => Err("it asks for 0 GPUs".into()),
            n if n as usize > have => Err(format!("it needs {n} GPUs, this server has {have}")),
            n if n > 1 && n as usize > whole => Err(format!(
                "it needs {n} GPUs at once, and this server has {whole} not cut into MIG \
                 instances (a process sees one MIG instance at most)"
            )),
            // Passed over for good otherwise, holding one of its user's
            // places among their tasks.
            n if demand.user.is_some()
                && self.rules.queue.max_gpus_per_user > 0
                && n > self.rules.queue.max_gpus_per_user =>
            {
                Err(format!(
                    "it needs {n} GPUs at once, and a user's jobs may hold at most {} \
                     (queue.max_gpus_per_user)",
                    self.rules.queue.max_gpus_per_user
                ))
            }
            _ => self.large_enough(demand, 0),
        }
    }

    /// Whether the server has as many GPUs as `demand` asks for that could
    /// each ever hold it after `crashes` OOM crashes: on GPUs of several
    /// sizes, a need larger than the smaller ones fits only the largest,
    /// and a task of two GPUs at 50 GiB on one of 40 and one of 80 waited
    /// at the head of the queue for good, and every task behind it with
    /// it. One GPU always could: the largest, idle.
    pub(super) fn large_enough(&self, demand: &Demand, crashes: u32) -> Result<(), String> {
        let want = self.want(demand, crashes);
        let could = (0..self.gpus.len())
            .filter(|&g| match self.on_gpu(want, g) {
                Want::Idle(_) => true,
                Want::Free { free_mib, .. } => free_mib <= self.gpus[g].total_mib,
            })
            .count();
        match (demand.gpus as usize > could, want) {
            (true, Want::Free { free_mib, .. }) => Err(format!(
                "it needs {} GPUs with {} free each, and this server has {could} that large",
                demand.gpus,
                format_mib(free_mib)
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn adopt(&mut self, task: TaskId, demand: Demand, gpus: Vec<usize>, crashes: u32) {
        let want = self.want(&demand, crashes);
        let placed: Vec<(usize, bool)> = gpus
            .into_iter()
            .filter(|&g| g < self.gpus.len())
            .map(|g| (g, self.on_gpu(want, g).is_sole()))
            .collect();
        self.occupy(task, demand.user, placed.iter().copied(), want);
        self.note_started(task);
        let arrival = self.arrive();
        let t = Task {
            priority: demand.priority,
            demand,
            crashes,
            running: true,
            gpus: placed.iter().map(|&(g, _)| g).collect(),
            held: false,
            arrival,
            started: self.now,
        };
        self.loads.launched(&t);
        self.tasks.insert(task, Box::new(t));
    }

    /// Takes a running task off its GPUs and out of the ledger; false
    /// when it is not running (a stale or duplicate report).
    pub(super) fn stop_running(&mut self, task: TaskId) -> bool {
        let Some(t) = self.tasks.get_mut(&task).filter(|t| t.running) else {
            return false;
        };
        t.running = false;
        self.loads.stopped(t);
        self.backfilled.remove(&task);
        for &g in &t.gpus {
            let gpu = &mut self.gpus[g];
            gpu.occupants.retain(|o| o.task != task);
            gpu.activity
                .task_left(self.now, task, gpu.occupants.is_empty());
        }
        self.ledger.release(task, &t.gpus);
        t.gpus.clear();
        true
    }

    pub(super) fn exited(&mut self, task: TaskId, exit: Exit, actions: &mut Vec<Action>) {
        if !self.stop_running(task) {
            return;
        }
        // A re-run after an OOM crash asks for more (`recovery.mode =
        // "looser"`), which may no longer fit enough of the GPUs.
        let too_large = match (&exit, self.tasks.get(&task)) {
            (Exit::Oom, Some(t)) => self.large_enough(&t.demand, t.crashes + 1).err(),
            _ => None,
        };
        let Some(t) = self.tasks.get_mut(&task) else {
            return;
        };
        let max_retries = t
            .demand
            .max_retries
            .unwrap_or(self.rules.recovery.max_retries);
        let outcome = match exit {
            Exit::Success => Action::Complete { task },
            Exit::Oom if t.crashes < max_retries && too_large.is_some() => Action::Fail {
                task,
                reason: FailReason::Unplaceable(format!(
                    "after an OOM crash, {}",
                    too_large.unwrap_or_default()
                )),
            },
            Exit::Oom if t.crashes < max_retries => {
                t.crashes += 1;
                if let Some(user) = t.demand.user {
                    self.shares
                        .charge(user, self.rules.recovery.oom_charge_s.get());
                }
                self.waiting.insert(task, t);
                let crashes = t.crashes;
                let need = looser_need(&self.rules, &t.demand, crashes);
                let why = match self.rules.recovery.mode {
                    RecoveryMode::Exclusive => "waits for an idle GPU".to_string(),
                    RecoveryMode::Looser => {
                        format!("waits for a GPU with {} free", format_mib(need))
                    }
                };
                actions.push(Action::Recover { task, crashes, why });
                return;
            }
            Exit::Oom => Action::Fail {
                task,
                reason: FailReason::OomRetriesExhausted {
                    crashes: t.crashes + 1,
                },
            },
            Exit::Failed(how) => Action::Fail {
                task,
                reason: FailReason::Exit(how),
            },
            Exit::Cancelled => Action::Fail {
                task,
                reason: FailReason::Cancelled,
            },
            Exit::TimeLimit => Action::Fail {
                task,
                reason: FailReason::TimeLimit(
                    self.rules
                        .queue
                        .time_limit(t.demand.time_limit)
                        .unwrap_or_default(),
                ),
            },
        };
        self.forget(task);
        self.note_ended(task, matches!(outcome, Action::Complete { .. }));
        actions.push(outcome);
    }

    pub(super) fn not_started(&mut self, task: TaskId, retry_at: Time) {
        if !self.stop_running(task) {
            return;
        }
        // Back to its place: its rank has not changed.
        if let Some(t) = self.tasks.get(&task) {
            self.waiting.insert(task, t);
        }
        self.hold_until = Some(self.hold_until.map_or(retry_at, |h| h.max(retry_at)));
    }

    pub(super) fn cancel(&mut self, task: TaskId, actions: &mut Vec<Action>) {
        if self.waiting.contains(task) {
            self.forget(task);
            self.note_ended(task, false);
            actions.push(Action::Fail {
                task,
                reason: FailReason::Cancelled,
            });
        }
    }

    pub(super) fn sample(&mut self, samples: &[GpuSample]) {
        for s in samples {
            self.apply_sample(s);
        }
    }
}
