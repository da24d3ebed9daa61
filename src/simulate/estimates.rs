//! Where a simulated task's memory estimate comes from: a column of the
//! trace (a published estimator's answer, or the measured peak), or
//! carma's own estimator chain run on the task's job file, learning from
//! history as the trace's jobs repeat — so the end-to-end effect of carma's
//! estimates is measured, not guessed.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::trace::TraceTask;
use crate::estimate::{Chain, EstimateInput, Settings};
use crate::rad::{self, LegacyRules, MemoryLine};
use crate::sched::Need;

/// A source of estimates for the simulator.
pub trait Estimates {
    /// What the core is told task `n` needs when it arrives.
    fn need(&mut self, n: usize, task: &TraceTask) -> Need;
    /// Task `n` ran to its end; its peak was its measured memory.
    fn finished(&mut self, _n: usize, _task: &TraceTask) {}
}

/// A trace column as every task's estimate.
#[derive(Debug, Clone, Copy)]
pub struct Columns(pub MemoryLine);

impl Estimates for Columns {
    fn need(&mut self, _n: usize, task: &TraceTask) -> Need {
        task.need(self.0)
    }
}

/// carma's estimator chain on each task's job file, with a history of its
/// own that every finished task's measured peak goes into, as the daemon's
/// does. The job files' declared memory is ignored (legacy lines 9-12 are
/// the published estimators the other columns replay; a keyed `memory:`
/// still counts, as it would in the daemon).
#[derive(Debug)]
pub struct Carma {
    chain: Chain,
    /// Each trace row's estimator input; `None` when it has no job file.
    inputs: Vec<Option<EstimateInput>>,
    history_dir: PathBuf,
    quality: Quality,
}

/// How carma's estimates compared with the measured peaks, over the
/// arrivals that had a job file (each arrival counts, repeats included:
/// they are where history pays).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Quality {
    /// Arrivals estimated from their job file.
    pub estimated: usize,
    /// Arrivals without a job file, told "unknown".
    pub without_job_file: usize,
    /// Of the estimated: answered "a whole GPU".
    pub whole_gpu: usize,
    /// Mean of estimate - peak over the estimated arrivals with a figure,
    /// counting underestimates as 0 overestimate, MiB.
    pub mean_overestimate_mib: f64,
    /// Estimated arrivals more than 2 GiB below their peak.
    pub under_by_2gib: usize,
    over_sum: f64,
    with_figure: usize,
}

impl Carma {
    /// Reads the job file of every trace row from `jobs` (its `task`
    /// name), parses it and its model summary; a job file that exists but
    /// is not a valid job is an error naming it. History lives in a fresh
    /// temporary directory, removed when this is dropped.
    pub fn new(trace: &[TraceTask], jobs: &Path, settings: &Settings) -> Result<Carma, String> {
        let legacy = LegacyRules {
            honour_policy_line: false,
            memory_line: MemoryLine::None,
        };
        let mut inputs = Vec::with_capacity(trace.len());
        for task in trace {
            let path = jobs.join(&task.task);
            if !path.is_file() {
                inputs.push(None);
                continue;
            }
            let job = rad::check_file(&path).map_err(|e| e.to_string())?;
            let (input, _) = EstimateInput::from_spec(&job.spec, jobs, &legacy);
            inputs.push(Some(input));
        }
        let template = std::env::temp_dir().join("carma-simulate-history.XXXXXX");
        let history_dir = nix::unistd::mkdtemp(&template)
            .map_err(|e| format!("cannot make a history directory: {e}"))?;
        let settings = Settings {
            history_dir: history_dir.clone(),
            ..settings.clone()
        };
        Ok(Carma {
            chain: Chain::new(&settings),
            inputs,
            history_dir,
            quality: Quality::default(),
        })
    }

    /// How the estimates compared with the peaks so far.
    pub fn quality(&self) -> Quality {
        let mut q = self.quality.clone();
        if q.with_figure > 0 {
            q.mean_overestimate_mib = q.over_sum / q.with_figure as f64;
        }
        q
    }
}

impl Estimates for Carma {
    fn need(&mut self, n: usize, task: &TraceTask) -> Need {
        let Some(input) = self.inputs.get(n).and_then(Option::as_ref) else {
            self.quality.without_job_file += 1;
            return Need::Unknown;
        };
        let need = self.chain.estimate(input).need;
        let q = &mut self.quality;
        q.estimated += 1;
        match need {
            Need::Mib(mib) => {
                let error = mib as f64 - task.memory_mib;
                q.with_figure += 1;
                q.over_sum += error.max(0.0);
                if error < -2048.0 {
                    q.under_by_2gib += 1;
                }
            }
            Need::WholeGpu => q.whole_gpu += 1,
            Need::Unknown => {}
        }
        need
    }

    fn finished(&mut self, n: usize, task: &TraceTask) {
        if let Some(input) = self.inputs.get(n).and_then(Option::as_ref) {
            let peak = task.memory_mib.ceil() as u64;
            let run_s = Some(task.duration_s);
            if let Err(e) = self
                .chain
                .history()
                .record(&input.fingerprint(), peak, run_s)
            {
                log::warn!("simulated history: {e}");
            }
        }
    }
}

impl Drop for Carma {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.history_dir);
    }
}
