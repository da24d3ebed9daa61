//! The core's explanations for people: why the head of the queue waits
//! (`carma status`, `carma show`, SIGUSR1) and which rule placed a task
//! (the daemon's log). Nothing here decides anything.

use std::fmt;

use super::policy::{Candidate, Policy};
use super::{Scheduler, TaskId, Want};
use crate::size::format_mib;

/// Why the head of the queues waits (see [`Scheduler::head_waits_for`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// The task at the head.
    pub task: TaskId,
    /// A phrase that follows the task's name: `needs 8GiB free on a GPU;
    /// GPU 0: 3GiB free < 8GiB; GPUs 1-3: SMACT 0.95 > 0.80`. The
    /// driver names the task its own way (the core knows only its id).
    pub why: String,
}

impl Scheduler {
    /// Why the task at the head of the queues cannot start now, for people
    /// (`carma status`, SIGUSR1): what it needs and, per GPU, what is
    /// missing, GPUs with the same reason named together. `None` when
    /// nothing waits.
    pub fn head_waits_for(&self) -> Option<Waiting> {
        let task = self.head()?;
        let t = self.tasks.get(&task)?;
        if let Some(hold) = self.hold_until.filter(|&h| h > self.now) {
            let why = format!(
                "waits: launches paused for {:.1} s after a launch that could not start",
                (hold - self.now).as_secs_f64()
            );
            return Some(Waiting { task, why });
        }
        if let Some(until) = self.launch_pause() {
            let why = format!(
                "waits: launches paused for {:.0} s more after the last one (placement.launch_gap_s)",
                (until - self.now).as_secs_f64()
            );
            return Some(Waiting { task, why });
        }
        let want = self.want(&t.demand, t.crashes);
        let p = &self.rules.placement;
        let mut reasons = Vec::new();
        for (g, gpu) in self.gpus.iter().enumerate() {
            let here = self.on_gpu(want, g);
            // This GPU asks more than the task does elsewhere: say why.
            let whole = match (want, here) {
                (Want::Free { .. }, Want::Idle(why)) => format!(" ({why})"),
                _ => String::new(),
            };
            let why = match here {
                _ if !gpu.healthy => "cannot be read".to_string(),
                _ if gpu.mig_instance && t.demand.gpus > 1 => {
                    "a MIG instance: single-GPU tasks only".to_string()
                }
                _ if gpu.settles_at > self.now => format!(
                    "took a task {:.0} s ago; takes none for {:.0} s more (placement.settle_s)",
                    p.settle_s.get() - (gpu.settles_at - self.now).as_secs_f64(),
                    (gpu.settles_at - self.now).as_secs_f64()
                ),
                Want::Free { .. } if !self.is_idle(g) && self.sharing_pause().is_some() => format!(
                    "runs tasks; none joins them for {:.0} s more after the last launch (placement.shared_launch_gap_s)",
                    self.sharing_pause()
                        .map_or(0.0, |t| (t - self.now).as_secs_f64())
                ),
                Want::Free { .. } if gpu.activity.awaits(self.now).is_some() => format!(
                    "took a task whose activity its readings do not show yet; takes none for at most {:.0} s more (placement.await_activity_s)",
                    gpu.activity
                        .awaits(self.now)
                        .map_or(0.0, |t| (t - self.now).as_secs_f64())
                ),
                Want::Idle(_) if !gpu.occupants.is_empty() => {
                    format!("not idle: carma tasks run there{whole}")
                }
                // Memory no task of carma's holds: a process started
                // outside carma, or one of a job's held in the kernel past
                // its end. It waits as long as that memory stays.
                Want::Idle(_) => format!(
                    "not idle: {} in use by no task of carma's (over placement.idle_used_mib){whole}",
                    format_mib(gpu.used_mib)
                ),
                Want::Free { free_mib: need, .. } => {
                    let free = gpu
                        .total_mib
                        .saturating_sub(gpu.used_mib)
                        .saturating_sub(self.ledger.outstanding(g, self.now));
                    if let Some(busy) = p.refusal(&gpu.activity.load(self.now, p)) {
                        busy
                    } else if free < need {
                        format!("{} free < {}", format_mib(free), format_mib(need))
                    } else if gpu.occupants.iter().any(|o| o.sole) {
                        "taken whole by a task".to_string()
                    } else if p.one_user_per_gpu
                        && gpu.occupants.iter().any(|o| o.user != t.demand.user)
                    {
                        "another user's tasks run there (MPS serves one user per GPU)".to_string()
                    } else {
                        "fits".to_string()
                    }
                }
            };
            reasons.push((g, why));
        }
        let n = t.demand.gpus;
        let needs = match (want, n) {
            (Want::Idle(why), 1) => format!("an idle GPU ({why})"),
            (Want::Idle(why), n) => format!("{n} idle GPUs ({why})"),
            (Want::Free { free_mib, .. }, 1) => format!("{} free on a GPU", format_mib(free_mib)),
            (Want::Free { free_mib, .. }, n) => {
                format!("{} free on each of {n} GPUs", format_mib(free_mib))
            }
        };
        let why = format!("needs {needs}; {}", grouped(reasons).join("; "));
        Some(Waiting { task, why })
    }
}

/// Which rule chose which GPUs for a launch, and from what: the daemon's
/// log line. Kept as data and written out only when read, since the
/// simulator launches millions of tasks and reads none of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub(super) policy: Policy,
    pub(super) idle_first: bool,
    pub(super) want: Want,
    pub(super) chosen: Vec<Candidate>,
}

impl fmt::Display for Placed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let want = match self.chosen.first().and_then(|c| c.alone) {
            Some(why) => Want::Idle(why),
            None => self.want,
        };
        let gpus: Vec<String> = self
            .chosen
            .iter()
            .map(|c| {
                format!(
                    "GPU {} ({} free, SMACT {:.2})",
                    c.gpu,
                    format_mib(c.free_mib),
                    c.smact
                )
            })
            .collect();
        match want {
            Want::Idle(reason) => write!(f, "idle {} ({reason})", gpus.join(", ")),
            Want::Free { free_mib, .. } => {
                let policy = self.policy;
                let rule = match self.idle_first && self.chosen.iter().all(|c| c.idle) {
                    true => format!("{policy}, idle first"),
                    false => policy.to_string(),
                };
                write!(
                    f,
                    "{rule}: {} (needs {} free)",
                    gpus.join(", "),
                    format_mib(free_mib)
                )
            }
        }
    }
}

/// `GPU n: why` lines, GPUs with the same reason together (`GPUs 0-3,
/// 6: carma tasks run there`), in the order of each reason's first GPU:
/// a server of eight GPUs says one thing once, not eight times.
fn grouped(reasons: Vec<(usize, String)>) -> Vec<String> {
    let mut groups: Vec<(Vec<usize>, String)> = Vec::new();
    for (g, why) in reasons {
        match groups.iter_mut().find(|(_, w)| *w == why) {
            Some((gpus, _)) => gpus.push(g),
            None => groups.push((vec![g], why)),
        }
    }
    groups
        .into_iter()
        .map(|(gpus, why)| match gpus.as_slice() {
            [g] => format!("GPU {g}: {why}"),
            _ => format!("GPUs {}: {why}", ranges(&gpus)),
        })
        .collect()
}

/// Ascending indices as ranges: `0-3, 6`.
pub(super) fn ranges(indices: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j] + 1 {
            j += 1;
        }
        parts.push(match j - i {
            0 => indices[i].to_string(),
            1 => format!("{}, {}", indices[i], indices[j]),
            _ => format!("{}-{}", indices[i], indices[j]),
        });
        i = j + 1;
    }
    parts.join(", ")
}
