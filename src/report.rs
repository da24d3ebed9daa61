//! `carma report`: the figures of what really ran in a spool, computed from
//! the task records in `done/` and `failed/` and the daemon's GPU log
//! ([`crate::gpu::log`], rotated files and an old `gpu-samples.csv`
//! included), with the same keys as `carma simulate` so a replayed trace
//! can be compared with its simulation, plus each GPU's figures.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::gpu::log::Row;
use crate::plot;
use crate::simulate::{Metrics, TaskTimes};
use crate::spool::archive::Archived;
use crate::spool::record::{Launch, OwnerRun, RunExit, read_owner_copy};
use crate::spool::{Spool, SpoolError, State};
use crate::supervisor::runs_of;

/// The report: the simulator's figures plus the re-runs OOM crashes caused.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Runs beyond each task's first.
    pub reruns: u32,
    /// Tasks that never ran (refused input, an unplaceable demand), and
    /// tasks cancelled by a user: listed in the rows, kept out of the
    /// figures above, whose waits and completion times they would distort.
    pub refused: u32,
    pub cancelled: u32,
    /// Each GPU over the trace (first submission to last end).
    pub gpus: Vec<GpuSummary>,
    /// The run as `carma report --plot` draws it.
    #[serde(skip)]
    pub picture: plot::Run,
}

/// One GPU over the trace, from the GPU log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSummary {
    pub gpu: usize,
    /// Time covered by the log's rows.
    pub seconds: f64,
    pub energy_j: f64,
    /// Time-weighted mean SM activity, 0..1.
    pub smact: f64,
    /// Time-weighted mean SM occupancy and DRAM activity, 0..1, over the
    /// time their source measured them; `null` when it never did.
    pub occupancy: Option<f64>,
    pub dram: Option<f64>,
}

/// One task in the per-task CSV.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRow {
    pub task: String,
    pub state: String,
    /// Unix seconds.
    pub submitted_at: f64,
    pub first_launch_at: Option<f64>,
    pub ended_at: Option<f64>,
    pub wait_s: Option<f64>,
    pub exec_s: f64,
    pub jct_s: Option<f64>,
    pub runs: u32,
    pub oom_crashes: u32,
    pub peak_mib: Option<u64>,
    pub gpus: String,
    pub reason: String,
}

/// Builds the report of a spool.
pub fn build(spool: &Spool) -> Result<(Report, Vec<TaskRow>), SpoolError> {
    let mut records = Vec::new();
    let mut rows = Vec::new();
    let mut reruns = 0;
    let (mut refused, mut cancelled) = (0, 0);
    let mut bars = Vec::new();
    // Tasks pruned from done/ and failed/ first: they ended earlier.
    let mut ended: Vec<Archived> = spool.archived()?;
    for state in [State::Done, State::Failed] {
        for name in spool.list(state)?.tasks {
            let dir = spool.task_dir(state, &name);
            // A user reads the copies carma gave them of their own tasks'
            // records, and nothing of anyone else's.
            let (record, runs) = match spool.load_record(state, &name) {
                Ok(record) => (record, runs_of(&dir)),
                Err(SpoolError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::PermissionDenied =>
                {
                    match read_owner_copy(&dir) {
                        Some(copy) => (copy.record, copied_runs(copy.runs)),
                        None => continue,
                    }
                }
                Err(e) => return Err(e),
            };
            ended.push(Archived {
                state: state.dir_name().to_owned(),
                name: name.to_string(),
                record,
                runs,
            });
        }
    }
    for task in ended {
        let state = task.state();
        let Archived {
            name, record, runs, ..
        } = task;
        let end = record.outcome.as_ref().map(|o| o.at);
        let mut metrics = TaskTimes::submitted(record.submitted_at);
        let mut first_launch = None;
        let mut exec = 0.0;
        let mut peak = None;
        let mut gpus = String::new();
        let mut crashes = 0;
        for (i, (launch, exit)) in runs.iter().enumerate() {
            metrics.launched(launch.launched_at);
            first_launch.get_or_insert(launch.launched_at);
            let stopped = exit
                .as_ref()
                .map(|e| e.ended_at)
                .or(end)
                .unwrap_or(launch.launched_at);
            exec += stopped - launch.launched_at;
            let crashed = crashed(i, &runs);
            crashes += u32::from(crashed);
            metrics.stopped(stopped, crashed);
            peak = peak.max(exit.as_ref().and_then(|e| e.peak_mib));
            let owner = owner_name(record.owner);
            bars.extend(launch.gpus.iter().map(|&gpu| plot::Bar {
                gpu,
                start: launch.launched_at,
                end: stopped,
                task: name.to_string(),
                group: owner.clone(),
                crashed,
            }));
            gpus = launch
                .gpus
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ");
        }
        reruns += runs.len().saturating_sub(1) as u32;
        match (state, end) {
            (State::Done, Some(at)) => metrics.completed(at),
            (_, Some(at)) => metrics.failed(at),
            (_, None) => {}
        }
        let reason = record.outcome.as_ref().and_then(|o| o.reason.as_deref());
        if reason == Some(crate::sched::FailReason::Cancelled.to_string().as_str()) {
            cancelled += 1;
        } else if runs.is_empty() {
            refused += 1;
        } else {
            records.push(metrics);
        }
        let jct = end.map(|e| e - record.submitted_at);
        rows.push(TaskRow {
            task: name.to_string(),
            state: state.to_string(),
            submitted_at: record.submitted_at,
            first_launch_at: first_launch,
            ended_at: end,
            wait_s: jct.map(|j| j - exec),
            exec_s: exec,
            jct_s: jct,
            runs: runs.len() as u32,
            oom_crashes: crashes,
            peak_mib: peak,
            gpus,
            reason: record.outcome.and_then(|o| o.reason).unwrap_or_default(),
        });
    }
    let start = rows
        .iter()
        .map(|r| r.submitted_at)
        .fold(f64::INFINITY, f64::min);
    let end = rows
        .iter()
        .filter_map(|r| r.ended_at)
        .fold(f64::NEG_INFINITY, f64::max);
    let log = crate::gpu::log::read(spool.root());
    let picture = picture(spool, &log, bars, start, end);
    let gpus = gpu_summaries(log, start, end);
    let integrals: Vec<(f64, f64)> = gpus
        .iter()
        .map(|g| (g.energy_j, g.smact * g.seconds))
        .collect();
    let metrics = Metrics::new(&records, &integrals, None);
    Ok((
        Report {
            metrics,
            reruns,
            refused,
            cancelled,
            gpus,
            picture,
        },
        rows,
    ))
}

/// Whether run `i` of `runs` was an OOM crash: the daemon counted one
/// more crash when it launched the next run. Launches written before they
/// carried the count are judged by the shape of the runs instead: a run
/// another followed that neither succeeded nor was stopped (which also
/// takes a failed run that `carma requeue` sent back for a crash).
fn crashed(i: usize, runs: &[(Launch, Option<RunExit>)]) -> bool {
    let Some((next, _)) = runs.get(i + 1) else {
        return false;
    };
    let (launch, exit) = &runs[i];
    match (launch.crashes, next.crashes) {
        (Some(before), Some(after)) => after > before,
        _ => !exit
            .as_ref()
            .is_some_and(|e| e.succeeded() || e.cancelled || e.timed_out),
    }
}

/// The runs of an owner's copy that ran, as [`runs_of`] gives them.
fn copied_runs(runs: Vec<OwnerRun>) -> Vec<(Launch, Option<RunExit>)> {
    runs.into_iter()
        .filter(|r| !r.exit.as_ref().is_some_and(|e| e.transient))
        .filter_map(|r| Some((r.launch?, r.exit)))
        .collect()
}

/// The user a task ran as, for colouring: the name where the system knows
/// the uid, else the uid.
fn owner_name(uid: Option<u32>) -> String {
    match uid {
        Some(uid) => nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {uid}"), |u| u.name),
        None => "unknown".to_string(),
    }
}

/// The run as pictures show it: the GPU log and the task runs over
/// `[start, end]`, in seconds from `start`.
fn picture(
    spool: &Spool,
    log: &[Row],
    mut bars: Vec<plot::Bar>,
    start: f64,
    end: f64,
) -> plot::Run {
    if !(start.is_finite() && end.is_finite()) {
        return plot::Run::default();
    }
    for bar in &mut bars {
        bar.start -= start;
        bar.end -= start;
    }
    let mut gpus: BTreeMap<usize, Vec<plot::Sample>> = BTreeMap::new();
    for row in log.iter().filter(|r| r.time >= start && r.time <= end) {
        gpus.entry(row.gpu).or_default().push(plot::Sample {
            t: row.time - start,
            smact: row.smact,
            used_mib: row.used_mib as f64,
            power_w: row.power_w,
        });
    }
    plot::Run {
        title: spool.root().display().to_string(),
        gpu_count: gpus.keys().map(|g| g + 1).max().unwrap_or(0),
        gpus: gpus
            .into_iter()
            .map(|(gpu, samples)| plot::GpuSeries { gpu, samples })
            .collect(),
        bars,
        span: end - start,
    }
}

/// Each GPU's figures over `[start, end]` from the log's rows. Energy is
/// summed interval by interval: the energy counter's difference where both
/// ends have one and it grew, power x time otherwise. A counter that went
/// backwards was reset (a driver reload restarts NVML's, a daemon restart
/// the simulated one): subtracting across the reset would lose or invert
/// the energy of the whole trace before it. Each interval takes the SM
/// metrics of its first row.
fn gpu_summaries(rows: Vec<Row>, start: f64, end: f64) -> Vec<GpuSummary> {
    let mut by_gpu: BTreeMap<usize, Vec<Row>> = BTreeMap::new();
    for row in rows {
        if row.time >= start && row.time <= end {
            by_gpu.entry(row.gpu).or_default().push(row);
        }
    }
    by_gpu
        .into_iter()
        .map(|(gpu, mut rows)| {
            rows.sort_by(|a, b| a.time.total_cmp(&b.time));
            let mut seconds = 0.0;
            let mut energy_j = 0.0;
            let mut smact = 0.0;
            let mut occupancy = Mean::default();
            let mut dram = Mean::default();
            for pair in rows.windows(2) {
                let dt = pair[1].time - pair[0].time;
                seconds += dt;
                smact += pair[0].smact * dt;
                occupancy.add(pair[0].occupancy, dt);
                dram.add(pair[0].dram, dt);
                energy_j += match (pair[0].energy_j, pair[1].energy_j) {
                    (Some(before), Some(after)) if after >= before => after - before,
                    _ => pair[0].power_w.unwrap_or(0.0) * dt,
                };
            }
            GpuSummary {
                gpu,
                seconds,
                energy_j,
                smact: if seconds > 0.0 { smact / seconds } else { 0.0 },
                occupancy: occupancy.value(),
                dram: dram.value(),
            }
        })
        .collect()
}

/// A time-weighted mean over the intervals that have a value.
#[derive(Default)]
struct Mean {
    sum: f64,
    seconds: f64,
}

impl Mean {
    fn add(&mut self, value: Option<f64>, dt: f64) {
        if let Some(value) = value {
            self.sum += value * dt;
            self.seconds += dt;
        }
    }

    fn value(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.sum / self.seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::log::{CURRENT, HEADER, LEGACY, read};
    use std::fs;

    fn summary(gpu: usize, seconds: f64, energy_j: f64, smact: f64) -> GpuSummary {
        GpuSummary {
            gpu,
            seconds,
            energy_j,
            smact,
            occupancy: None,
            dram: None,
        }
    }

    /// A run as `launch.json` and `exit.json` keep it: `crashes` counted
    /// before it (absent in older launches), its exit code.
    fn run(crashes: Option<u32>, code: i32) -> (Launch, Option<RunExit>) {
        let mut launch = serde_json::json!({
            "task": "000001-t", "run": 1, "gpus": [0], "why": "", "launched_at": 0.0,
            "script": [], "workdir": "/", "env": [], "grace_s": 1.0,
        });
        if let Some(n) = crashes {
            launch["crashes"] = n.into();
        }
        let exit = serde_json::json!({ "started_at": 0.0, "ended_at": 1.0, "code": code });
        (
            serde_json::from_value(launch).unwrap(),
            Some(serde_json::from_value(exit).unwrap()),
        )
    }

    #[test]
    fn a_run_is_an_oom_crash_when_the_daemon_counted_one_before_the_next() {
        // An OOM crash, then a failure that `carma requeue` sent back: one
        // crash, not two.
        let runs = [run(Some(0), 1), run(Some(1), 1), run(Some(0), 0)];
        let judged: Vec<bool> = (0..runs.len()).map(|i| crashed(i, &runs)).collect();
        assert_eq!(judged, [true, false, false]);
        // Launches from before the count: the shape of the runs.
        let old = [run(None, 1), run(None, 1), run(None, 0)];
        let judged: Vec<bool> = (0..old.len()).map(|i| crashed(i, &old)).collect();
        assert_eq!(judged, [true, true, false]);
    }

    #[test]
    fn energy_prefers_the_counter_and_falls_back_to_power_in_old_samples() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(LEGACY),
            "time,gpu,used_mib,smact,power_w,energy_j\n\
             0,0,100,0.5,200,1000\n0,1,0,0.0,50,\n\
             10,0,100,0.5,200,3100\n10,1,0,0.0,50,\n\
             20,0,100,1.0,400,5000\n20,1,0,0.0,50,\n\
             99,0,100,1.0,400,9999\n",
        )
        .unwrap();
        // GPU 0: counter 5000 - 1000; SMACT 0.5 over 20 s. GPU 1: 50 W x 20 s.
        assert_eq!(
            gpu_summaries(read(dir.path()), 0.0, 20.0),
            [summary(0, 20.0, 4000.0, 0.5), summary(1, 20.0, 1000.0, 0.0)]
        );
        assert!(gpu_summaries(read(&dir.path().join("missing")), 0.0, 1.0).is_empty());
    }

    #[test]
    fn a_reset_energy_counter_never_subtracts() {
        // The daemon restarts at 15 s: the counter starts again from 0.
        // 0-10 s and 20-30 s come from the counter, 10-20 s from power.
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(CURRENT),
            format!(
                "{HEADER}\n\
                 0,0,gpm,0.0,,,0,40960,100,5000,,,\n\
                 10,0,gpm,0.0,,,0,40960,100,6000,,,\n\
                 20,0,gpm,0.0,,,0,40960,100,300,,,\n\
                 30,0,gpm,0.0,,,0,40960,100,1300,,,\n"
            ),
        )
        .unwrap();
        assert_eq!(
            gpu_summaries(read(dir.path()), 0.0, 30.0),
            [summary(0, 30.0, 3000.0, 0.0)]
        );
    }

    #[test]
    fn occupancy_and_dram_average_over_the_time_they_were_measured() {
        // DCGM answers for 10 s, then the counter for 30 s.
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(CURRENT),
            format!(
                "{HEADER}\n\
                 0,0,dcgm,0.8,0.5,0.2,0,40960,,,,,\n\
                 10,0,utilization,1.0,,,0,40960,,,,,\n\
                 40,0,utilization,1.0,,,0,40960,,,,,\n"
            ),
        )
        .unwrap();
        let gpus = gpu_summaries(read(dir.path()), 0.0, 40.0);
        assert_eq!(gpus[0].smact, (0.8 * 10.0 + 30.0) / 40.0);
        assert_eq!((gpus[0].occupancy, gpus[0].dram), (Some(0.5), Some(0.2)));
    }
}
