//! How tasks that share a GPU go: after any change on a GPU, the rates of
//! the tasks there (and so their finishes), the GPU's SM activity, the
//! energy it drew until then, and the samples the core is fed.

use super::{Happening, Sim};
use crate::plot;
use crate::sched::{GpuSample, TaskId};
use crate::simulate::readings::Readings;

impl Sim<'_> {
    /// Recomputes task rates and SM activity after `gpus` changed, and
    /// marks them for the core's next sample.
    pub(super) fn changed(&mut self, gpus: &[usize]) {
        self.dirty.extend_from_slice(gpus);
        let (mut affected, mut touched) = std::mem::take(&mut self.scratch);
        affected.clear();
        affected.extend(
            gpus.iter()
                .flat_map(|&g| self.gpus[g].tasks.iter().copied()),
        );
        affected.sort_unstable();
        affected.dedup();
        touched.clear();
        touched.extend_from_slice(gpus);
        for &n in &affected {
            self.rerate(n);
            touched.extend(
                self.runs
                    .get(&n)
                    .iter()
                    .flat_map(|r| r.gpus.iter().copied()),
            );
        }
        touched.sort_unstable();
        touched.dedup();
        for &g in &touched {
            self.integrate(g, self.now);
            let busy: f64 = self.gpus[g]
                .tasks
                .iter()
                .filter_map(|&n| {
                    let rate = self.runs.get(&n)?.rate;
                    let (own, others) = self.demands_on(g, n);
                    Some(self.setup.model.busy(own, others, rate))
                })
                .sum();
            self.gpus[g].smact = busy.min(1.0);
            self.note(g);
        }
        self.scratch = (affected, touched);
    }

    /// How fast task `n` runs on GPU `g` beside the tasks there.
    fn speed_on(&self, g: usize, n: usize) -> f64 {
        let (own, others) = self.demands_on(g, n);
        self.setup.model.speed(own, others)
    }

    /// The SM activity task `n` asks of GPU `g`, and the sum its
    /// neighbours there ask.
    fn demands_on(&self, g: usize, n: usize) -> (f64, f64) {
        let others: f64 = self.gpus[g]
            .tasks
            .iter()
            .filter(|&&m| m != n)
            .map(|&m| self.smact_on(g, m))
            .sum();
        (self.smact_on(g, n), others)
    }

    /// Task `n`'s SM activity as GPU `g` sees it: alone on a board it
    /// uses `smact` of it, so on a MIG instance it needs `smact / share`
    /// of the instance (more than all of it slows it down).
    fn smact_on(&self, g: usize, n: usize) -> f64 {
        self.runs.get(&n).map_or(0.0, |r| r.smact) / self.gpus[g].share
    }

    /// Brings a running task's progress up to now under its old rate, sets
    /// its new rate and books its finish.
    fn rerate(&mut self, n: usize) {
        let Some(run) = self.runs.get(&n) else {
            return;
        };
        let rate = run
            .gpus
            .iter()
            .map(|&g| self.speed_on(g, n))
            .fold(1.0, f64::min);
        let now = self.now;
        let Some(run) = self.runs.get_mut(&n) else {
            return;
        };
        run.remaining = (run.remaining - run.rate * (now - run.since)).max(0.0);
        run.since = now;
        if rate == run.rate {
            return;
        }
        run.rate = rate;
        let finish = now + run.remaining / rate;
        self.order += 1;
        run.generation = self.order;
        let generation = run.generation;
        self.schedule(finish, Happening::Finish(n, generation));
    }

    /// Adds GPU `g`'s state now to the picture, if one is drawn.
    pub(super) fn note(&mut self, g: usize) {
        let Some(picture) = self.picture.as_mut() else {
            return;
        };
        let gpu = &self.gpus[g];
        let samples = &mut picture.gpus[g].samples;
        // The state is constant between changes: draw steps, not slopes.
        if let Some(&last) = samples.last().filter(|s| s.t < self.now) {
            samples.push(plot::Sample {
                t: self.now,
                ..last
            });
        }
        samples.push(plot::Sample {
            t: self.now,
            smact: gpu.smact,
            used_mib: gpu.used_mib as f64,
            // Power is the board's: drawn for whole GPUs only.
            power_w: (gpu.share == 1.0).then(|| self.setup.model.power().watts(gpu.smact)),
        });
    }

    /// Accumulates the energy and SMACT-seconds of GPU `g`'s board, and
    /// `g`'s own SM activity over its block of readings, up to `t`.
    pub(super) fn integrate(&mut self, g: usize, t: f64) {
        let power = self.setup.model.power();
        let gpu = &mut self.gpus[g];
        gpu.block.add(gpu.smact, t);
        let board = &mut self.boards[self.gpus[g].board];
        let smact: f64 = board
            .units
            .iter()
            .map(|&u| self.gpus[u].share * self.gpus[u].smact)
            .sum();
        let dt = (t - board.integrated_to).max(0.0);
        board.joules += power.watts(smact) * dt;
        board.smact_seconds += smact * dt;
        board.integrated_to = board.integrated_to.max(t);
    }

    /// Reads `gpus` into the first entries of `sampled`, as the core is
    /// shown them now.
    pub(super) fn sample(&mut self, gpus: &[usize]) {
        while self.sampled.len() < gpus.len() {
            self.sampled.push(GpuSample::idle(0));
        }
        for (s, &g) in self.sampled.iter_mut().zip(gpus) {
            let gpu = &self.gpus[g];
            s.gpu = g;
            s.used_mib = gpu.used_mib;
            s.smact = match self.setup.readings {
                Readings::Live => gpu.smact,
                Readings::Blocks { .. } => gpu.block.mean(gpu.smact),
            };
            s.tasks.clear();
            s.tasks.extend(gpu.tasks.iter().filter_map(|&n| {
                let held = self.runs.get(&n)?.held_mib;
                (held > 0).then_some((TaskId(n as u64), held))
            }));
        }
    }
}
