//! What the daemon counts, for Prometheus: events as they happen (tasks
//! ended, OOM crashes and re-runs, refusals, time-limit kills, queue
//! waits, run times, estimate errors, dispatch latency), and at each
//! scrape the GPUs and queues of the latest status. [`crate::http`] serves
//! it at `/metrics` in the text format, named by Prometheus's conventions:
//! the `carma_` prefix, base units (bytes, seconds, ratios, watts), and
//! `_total` on counters.
//!
//! Events are counted where the lifecycle decides them: an atomic add or a
//! short lock inside the client library, cheap on the daemon's loop. The
//! figures that describe a moment (memory, activity, tasks per state) are
//! not kept here: a scrape builds them from the latest status the daemon
//! published, on the HTTP thread, so a GPU or user that is gone is gone
//! from the next scrape too.

use std::fmt;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::refusal::Refusal;
use crate::spool::State;
use crate::spool::status::Status;

/// The content type of [`Metrics::text`]: OpenMetrics' text format,
/// which Prometheus reads natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const MIB: f64 = 1024.0 * 1024.0;

/// Queue waits and run times, seconds: a second to three days.
const WAIT_BUCKETS: [f64; 12] = [
    1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14_400.0, 43_200.0, 86_400.0, 259_200.0,
];
const RUN_BUCKETS: [f64; 12] = [
    10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14_400.0, 28_800.0, 43_200.0, 86_400.0,
    259_200.0,
];
/// Claim to launch, seconds: the daemon's own latency.
const DISPATCH_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Estimate minus peak, GiB either side of exact (negative: an
/// underestimate, the costly error).
const ERROR_GIB: [f64; 7] = [0.25, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateUserLabels {
    state: &'static str,
    user: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EstimatorLabels {
    estimator: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    gpu: String,
    uuid: String,
    name: String,
}

type ErrorHistograms = Family<EstimatorLabels, Histogram, fn() -> Histogram>;

/// The daemon's counters and histograms.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    oom_crashes: Counter,
    reruns: Counter,
    time_limit_kills: Counter,
    refusals: Family<ReasonLabels, Counter>,
    ended: Family<StateUserLabels, Counter>,
    queue_wait: Histogram,
    run_time: Histogram,
    dispatch_latency: Histogram,
    estimate_error: ErrorHistograms,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("carma");
        let oom_crashes = Counter::default();
        registry.register(
            "oom_crashes",
            "Runs that died of GPU out-of-memory",
            oom_crashes.clone(),
        );
        let reruns = Counter::default();
        registry.register(
            "oom_reruns",
            "Runs launched again after an OOM crash",
            reruns.clone(),
        );
        let time_limit_kills = Counter::default();
        registry.register(
            "time_limit_kills",
            "Jobs stopped at their wall-time limit",
            time_limit_kills.clone(),
        );
        let refusals = Family::<ReasonLabels, Counter>::default();
        // Every reason is there from the start, at 0: a rate needs the zero.
        for kind in Refusal::ALL {
            drop(refusals.get_or_create(&ReasonLabels {
                reason: kind.label(),
            }));
        }
        registry.register(
            "refusals",
            "Tasks carma would not run, by kind of reason",
            refusals.clone(),
        );
        let ended = Family::<StateUserLabels, Counter>::default();
        registry.register(
            "tasks_ended",
            "Queued tasks that ended in done/ or failed/, by owner (refusals are counted apart)",
            ended.clone(),
        );
        let queue_wait = Histogram::new(WAIT_BUCKETS);
        registry.register_with_unit(
            "queue_wait",
            "From submission to the launch of a task's first run",
            Unit::Seconds,
            queue_wait.clone(),
        );
        let run_time = Histogram::new(RUN_BUCKETS);
        registry.register_with_unit(
            "run_time",
            "How long each run ran, however it ended",
            Unit::Seconds,
            run_time.clone(),
        );
        let dispatch_latency = Histogram::new(DISPATCH_BUCKETS);
        registry.register_with_unit(
            "dispatch_latency",
            "From the loop's turn that claimed a task to its launch, for tasks that found room at once",
            Unit::Seconds,
            dispatch_latency.clone(),
        );
        let estimate_error: ErrorHistograms = Family::new_with_constructor(|| {
            let below = ERROR_GIB.iter().rev().map(|g| -g * 1024.0 * MIB);
            let above = ERROR_GIB.iter().map(|g| g * 1024.0 * MIB);
            Histogram::new(below.chain([0.0]).chain(above))
        });
        registry.register_with_unit(
            "estimate_error",
            "Estimate minus measured peak of each task that succeeded, by estimator (negative: underestimated)",
            Unit::Bytes,
            estimate_error.clone(),
        );
        Metrics {
            registry,
            oom_crashes,
            reruns,
            time_limit_kills,
            refusals,
            ended,
            queue_wait,
            run_time,
            dispatch_latency,
            estimate_error,
        }
    }
}

impl Metrics {
    pub fn oom_crash(&self) {
        self.oom_crashes.inc();
    }

    pub fn rerun(&self) {
        self.reruns.inc();
    }

    pub fn time_limit_kill(&self) {
        self.time_limit_kills.inc();
    }

    pub fn refused(&self, kind: Refusal) {
        self.refusals
            .get_or_create(&ReasonLabels {
                reason: kind.label(),
            })
            .inc();
    }

    /// A queued task ended in `state` (done or failed).
    pub fn ended(&self, state: State, user: &str) {
        self.ended
            .get_or_create(&StateUserLabels {
                state: state.dir_name(),
                user: user.to_owned(),
            })
            .inc();
    }

    pub fn waited(&self, seconds: f64) {
        self.queue_wait.observe(seconds.max(0.0));
    }

    pub fn ran(&self, seconds: f64) {
        self.run_time.observe(seconds.max(0.0));
    }

    pub fn dispatched(&self, seconds: f64) {
        self.dispatch_latency.observe(seconds.max(0.0));
    }

    /// A task that succeeded was estimated at `estimate_mib` by the
    /// estimator `source` names (an estimate's source as recorded:
    /// `history`, `declared: memory:`, `ensemble+analytic`) and peaked at
    /// `peak_mib`.
    pub fn estimated(&self, source: &str, estimate_mib: u64, peak_mib: u64) {
        let error = (estimate_mib as f64 - peak_mib as f64) * MIB;
        self.estimate_error
            .get_or_create(&EstimatorLabels {
                estimator: estimator_label(source),
            })
            .observe(error);
    }

    /// Everything, in the text format: the counters, then what `status`
    /// says of this moment, with `backlog` entries of `pending/` not yet
    /// taken in.
    pub fn text(&self, status: Option<&Status>, backlog: usize) -> Result<String, fmt::Error> {
        let mut out = String::new();
        encode_registry(&mut out, &self.registry)?;
        if let Some(status) = status {
            encode_registry(&mut out, &moment(status, backlog))?;
        }
        encode_eof(&mut out)?;
        Ok(out)
    }
}

/// The estimator an estimate's recorded source names, from a fixed set:
/// a label value must not come from a file.
fn estimator_label(source: &str) -> &'static str {
    const KNOWN: [&str; 7] = [
        "declared",
        "history",
        "ensemble",
        "ensemble+analytic",
        "analytic",
        "whole-gpu",
        "none",
    ];
    let head = source.split(':').next().unwrap_or_default().trim();
    KNOWN.into_iter().find(|k| *k == head).unwrap_or("other")
}

type GpuGauges = Family<GpuLabels, Gauge<f64, AtomicU64>>;

/// The gauges of one status: GPUs, tasks per state and user, the intake
/// backlog, and when the status was made.
fn moment(status: &Status, backlog: usize) -> Registry {
    let mut registry = Registry::with_prefix("carma");
    let per_gpu =
        |registry: &mut Registry,
         name: &str,
         help: &str,
         unit: Option<Unit>,
         value: &dyn Fn(&crate::spool::status::GpuStatus) -> Option<f64>| {
            let family = GpuGauges::default();
            for g in &status.gpus {
                if let Some(v) = value(g) {
                    let labels = GpuLabels {
                        gpu: g.index.to_string(),
                        uuid: g.uuid.clone(),
                        name: g.name.clone(),
                    };
                    family.get_or_create(&labels).set(v);
                }
            }
            match unit {
                Some(unit) => registry.register_with_unit(name, help, unit, family),
                None => registry.register(name, help, family),
            }
        };
    let bytes = |mib: u64| Some(mib as f64 * MIB);
    let ratio = || Some(Unit::Other("ratio".into()));
    per_gpu(
        &mut registry,
        "gpu_memory_total",
        "GPU memory",
        Some(Unit::Bytes),
        &|g| bytes(g.total_mib),
    );
    per_gpu(
        &mut registry,
        "gpu_memory_used",
        "GPU memory in use, by anyone",
        Some(Unit::Bytes),
        &|g| bytes(g.used_mib),
    );
    per_gpu(
        &mut registry,
        "gpu_memory_reserved",
        "GPU memory carma booked for tasks it launched lately, not yet in use",
        Some(Unit::Bytes),
        &|g| bytes(g.reserved_mib),
    );
    per_gpu(
        &mut registry,
        "gpu_sm_active",
        "SM activity (SMACT), 0 to 1",
        ratio(),
        &|g| Some(g.smact),
    );
    per_gpu(
        &mut registry,
        "gpu_sm_occupancy",
        "SM occupancy, 0 to 1, where the GPU's metric source measures it",
        ratio(),
        &|g| g.occupancy,
    );
    per_gpu(
        &mut registry,
        "gpu_dram_active",
        "DRAM activity, 0 to 1, where the GPU's metric source measures it",
        ratio(),
        &|g| g.dram,
    );
    per_gpu(
        &mut registry,
        "gpu_power",
        "Board power draw",
        Some(Unit::Other("watts".into())),
        &|g| g.power_w,
    );
    per_gpu(
        &mut registry,
        "gpu_tasks",
        "carma tasks running on the GPU",
        None,
        &|g| Some(g.tasks.len() as f64),
    );
    let tasks = Family::<StateUserLabels, Gauge>::default();
    for t in &status.running {
        let labels = StateUserLabels {
            state: State::Running.dir_name(),
            user: t.user.clone(),
        };
        tasks.get_or_create(&labels).inc();
    }
    for w in &status.waiting {
        let state = match status.recovery.contains(&w.name) {
            true => State::Recovery,
            false => State::Pending,
        };
        let labels = StateUserLabels {
            state: state.dir_name(),
            user: w.user.clone(),
        };
        tasks.get_or_create(&labels).inc();
    }
    registry.register(
        "tasks",
        "Waiting and running tasks, by state and owner",
        tasks,
    );
    let gauge = |value: f64| {
        let g = Gauge::<f64, AtomicU64>::default();
        g.set(value);
        g
    };
    registry.register(
        "intake_backlog",
        "Entries in pending/ seen but not yet taken in (being written, waiting for their model summary, or retried)",
        gauge(backlog as f64),
    );
    registry.register_with_unit(
        "status_updated_timestamp",
        "When the daemon last published its status (Unix time)",
        Unit::Seconds,
        gauge(status.updated_at),
    );
    registry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::status::{GpuStatus, RunningTask, WaitingTask};

    fn status() -> Status {
        Status {
            updated_at: 1.7e9,
            gpus: vec![GpuStatus {
                index: 0,
                uuid: "GPU-0000".into(),
                name: "Simulated \"A100\"".into(),
                total_mib: 40_960,
                mig: false,
                used_mib: 1024,
                reserved_mib: 512,
                smact: 0.25,
                occupancy: None,
                dram: Some(0.1),
                source: None,
                power_w: Some(120.0),
                error: None,
                tasks: vec!["000001-a".into()],
            }],
            running: vec![RunningTask {
                name: "000001-a".into(),
                run: 1,
                gpus: vec![0],
                since: 1.7e9,
                time_limit_s: None,
                array: None,
                peak_mib: 900,
                user: "alice".into(),
            }],
            recovery: vec!["000002-b".into()],
            waiting: vec![WaitingTask {
                name: "000002-b".into(),
                user: "bob".into(),
                priority: 0,
                held: false,
                array: None,
                why: "recovering".into(),
                estimate: None,
            }],
            ..Status::default()
        }
    }

    #[test]
    fn the_text_names_every_metric_by_the_conventions() {
        let m = Metrics::default();
        m.oom_crash();
        m.rerun();
        m.time_limit_kill();
        m.refused(Refusal::InvalidJob);
        m.ended(State::Done, "alice");
        m.waited(3.0);
        m.ran(42.0);
        m.dispatched(0.02);
        m.estimated("declared: memory:", 4096, 5120);
        let text = m.text(Some(&status()), 3).unwrap();
        for line in [
            "carma_oom_crashes_total 1",
            "carma_oom_reruns_total 1",
            "carma_time_limit_kills_total 1",
            "carma_refusals_total{reason=\"invalid_job\"} 1",
            "carma_refusals_total{reason=\"owner\"} 0",
            "carma_tasks_ended_total{state=\"done\",user=\"alice\"} 1",
            "carma_queue_wait_seconds_count 1",
            "carma_run_time_seconds_sum 42.0",
            "carma_dispatch_latency_seconds_count 1",
            "carma_estimate_error_bytes_bucket{le=\"0.0\",estimator=\"declared\"} 1",
            "carma_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-0000\",name=\"Simulated \\\"A100\\\"\"} 42949672960.0",
            "carma_gpu_memory_reserved_bytes{gpu=\"0\",uuid=\"GPU-0000\",name=\"Simulated \\\"A100\\\"\"} 536870912.0",
            "carma_gpu_sm_active_ratio{gpu=\"0\",uuid=\"GPU-0000\",name=\"Simulated \\\"A100\\\"\"} 0.25",
            "carma_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0000\",name=\"Simulated \\\"A100\\\"\"} 120.0",
            "carma_gpu_tasks{gpu=\"0\",uuid=\"GPU-0000\",name=\"Simulated \\\"A100\\\"\"} 1.0",
            "carma_tasks{state=\"running\",user=\"alice\"} 1",
            "carma_tasks{state=\"recovery\",user=\"bob\"} 1",
            "carma_intake_backlog 3.0",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(
            !text.contains("carma_gpu_sm_occupancy_ratio{"),
            "no reading, no series"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn estimator_labels_come_from_a_fixed_set() {
        assert_eq!(estimator_label("declared: line 9"), "declared");
        assert_eq!(estimator_label("ensemble+analytic"), "ensemble+analytic");
        assert_eq!(estimator_label("x\"}\n evil"), "other");
    }
}
