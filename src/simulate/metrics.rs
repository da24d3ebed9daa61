//! The figures a trace run is judged by, shared by `carma simulate` and
//! (later) `carma report`, and the lower bound they are compared with.

use serde::Serialize;

use super::trace::TraceTask;

/// What happened to one task, in seconds of trace time.
#[derive(Debug, Clone, Default)]
pub struct TaskTimes {
    submit: f64,
    /// Start of the run now under way.
    started: f64,
    /// Time spent running, crashed runs included.
    exec: f64,
    /// When it reached done or failed.
    end: Option<f64>,
    succeeded: bool,
    launches: u32,
    crashes: u32,
}

impl TaskTimes {
    pub fn submitted(at: f64) -> TaskTimes {
        TaskTimes {
            submit: at,
            ..TaskTimes::default()
        }
    }

    /// A run starts; returns which launch of the task it is (1-based).
    pub fn launched(&mut self, at: f64) -> u32 {
        self.started = at;
        self.launches += 1;
        self.launches
    }

    /// A run ends, finished or crashed.
    pub fn stopped(&mut self, at: f64, crashed: bool) {
        self.exec += at - self.started;
        self.crashes += u32::from(crashed);
    }

    pub fn completed(&mut self, at: f64) {
        self.end = Some(at);
        self.succeeded = true;
    }

    pub fn failed(&mut self, at: f64) {
        self.end = Some(at);
    }
}

/// A trace run's figures. The field names are the JSON keys of
/// `carma simulate --json` and `carma report --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    /// Tasks in the trace.
    pub tasks: usize,
    /// First submission to last completion.
    pub total_time_s: f64,
    /// Mean over completed tasks of the time not spent running
    /// (queueing, recovery queueing): JCT - execution.
    pub avg_wait_s: f64,
    /// Mean over completed tasks of the time spent running, crashed runs
    /// included.
    pub avg_exec_s: f64,
    /// Mean over completed tasks of completion - submission.
    pub avg_jct_s: f64,
    /// Runs that died of GPU out-of-memory.
    pub oom_crashes: u32,
    /// Tasks that ended in failed/ (out of OOM retries, stopped at their
    /// time limit, never placeable): the means above leave them out.
    pub failed: usize,
    /// GPU energy over the trace, megajoules.
    pub energy_mj: f64,
    /// Mean GPU SM activity over the trace and all GPUs, 0..1.
    pub mean_utilization: f64,
    /// Time during which the head of the queue could have started but for
    /// tasks backfilled past it, seconds (the simulator's measure; 0 in
    /// `carma report`). Backfill is meant to keep it at 0.
    pub head_delay_s: f64,
    /// A lower bound on `total_time_s` that no policy can beat; `null` in
    /// `carma report`, where the tasks' standalone durations are unknown.
    pub lower_bound_s: Option<f64>,
}

impl Metrics {
    /// Sums up task records and per-GPU (joules, SMACT-seconds) integrals.
    pub fn new(records: &[TaskTimes], gpus: &[(f64, f64)], lower_bound_s: Option<f64>) -> Metrics {
        let start = records
            .iter()
            .map(|r| r.submit)
            .fold(f64::INFINITY, f64::min);
        let end = records
            .iter()
            .filter_map(|r| r.end)
            .fold(f64::NEG_INFINITY, f64::max);
        let total = if end >= start { end - start } else { 0.0 };
        let done: Vec<&TaskTimes> = records.iter().filter(|r| r.succeeded).collect();
        let mean = |f: &dyn Fn(&TaskTimes) -> f64| {
            if done.is_empty() {
                0.0
            } else {
                done.iter().map(|r| f(r)).sum::<f64>() / done.len() as f64
            }
        };
        let jct = |r: &TaskTimes| r.end.unwrap_or(r.submit) - r.submit;
        let smact_seconds: f64 = gpus.iter().map(|g| g.1).sum();
        Metrics {
            tasks: records.len(),
            total_time_s: total,
            avg_wait_s: mean(&|r| jct(r) - r.exec),
            avg_exec_s: mean(&|r| r.exec),
            avg_jct_s: mean(&jct),
            oom_crashes: records.iter().map(|r| r.crashes).sum(),
            failed: records
                .iter()
                .filter(|r| r.end.is_some() && !r.succeeded)
                .count(),
            energy_mj: gpus.iter().map(|g| g.0).sum::<f64>() / 1e6,
            mean_utilization: if total > 0.0 && !gpus.is_empty() {
                smact_seconds / (total * gpus.len() as f64)
            } else {
                0.0
            },
            lower_bound_s: lower_bound_s.map(|b| b - start.min(b)),
            head_delay_s: 0.0,
        }
    }
}

/// The figures for people, one per line, indented: what `carma simulate`
/// and `carma report` print.
impl std::fmt::Display for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "  tasks             {}", self.tasks)?;
        write!(f, "  total time        {:.1} s", self.total_time_s)?;
        match self.lower_bound_s {
            Some(bound) => writeln!(f, " (lower bound {bound:.1} s)")?,
            None => writeln!(f)?,
        }
        writeln!(f, "  avg wait          {:.1} s", self.avg_wait_s)?;
        writeln!(f, "  avg execution     {:.1} s", self.avg_exec_s)?;
        writeln!(f, "  avg JCT           {:.1} s", self.avg_jct_s)?;
        writeln!(f, "  OOM crashes       {}", self.oom_crashes)?;
        writeln!(f, "  failed            {}", self.failed)?;
        writeln!(f, "  head delay        {:.1} s", self.head_delay_s)?;
        writeln!(f, "  GPU energy        {:.4} MJ", self.energy_mj)?;
        write!(
            f,
            "  mean utilization  {:.1} %",
            self.mean_utilization * 100.0
        )
    }
}

/// A lower bound on the trace's total time on `gpus` GPUs under `sharing`,
/// for any placement policy.
///
/// Derivation. (1) A task never runs faster than alone (rate <= 1), so it
/// ends no earlier than `submit + duration`. (2) Each GPU has a capacity
/// per second that running tasks use up: a GPU's tasks run at most at
/// `min(1, 1/Σs)` each, so `Σ rate_i * s_i <= 1`, under MPS and
/// time-slicing alike; a task needs `duration * smact` of that per GPU it
/// uses. Work submitted at or after `t0`
/// cannot be done before `t0`, and `gpus` GPUs deliver at most `gpus`
/// units per second, so the trace cannot end before
/// `t0 + (work submitted at or after t0) / gpus`, for every `t0`. OOM
/// crashes and waiting only add to both. The bound is the largest of all
/// these.
pub fn lower_bound(trace: &[TraceTask], gpus: usize) -> f64 {
    let mut bound = LowerBound::default();
    for t in trace {
        bound.add(t);
    }
    bound.bound(gpus)
}

/// [`lower_bound`] gathered as tasks arrive, in a few bytes per task.
#[derive(Debug, Default)]
pub(super) struct LowerBound {
    each_alone: f64,
    /// (submission, SM-seconds of work) per task, in arrival order.
    work: Vec<(f64, f64)>,
}

impl LowerBound {
    pub fn add(&mut self, t: &TraceTask) {
        self.each_alone = self.each_alone.max(t.submit_s + t.duration_s);
        // However GPUs are shared, a GPU does at most one SM-second of
        // work per second.
        let work = t.duration_s * t.smact_assumed * f64::from(t.gpus);
        self.work.push((t.submit_s, work));
    }

    pub fn bound(mut self, gpus: usize) -> f64 {
        let gpus = gpus.max(1) as f64;
        self.work.sort_by(|a, b| b.0.total_cmp(&a.0));
        // Walk from the last submission backwards, accumulating later work.
        let mut later_work = 0.0;
        let mut capacity_bound: f64 = 0.0;
        for (submit_s, work) in self.work {
            later_work += work;
            capacity_bound = capacity_bound.max(submit_s + later_work / gpus);
        }
        self.each_alone.max(capacity_bound)
    }
}
