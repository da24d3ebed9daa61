//! What the scheduling core reads of the simulated GPUs, and when.
//!
//! carma's daemon reads every GPU each second. The simulator shows the
//! core a GPU whenever the GPU's state changes, which is exactly what
//! one-second samples would show, as the state is constant in between
//! ([`Readings::Live`]).
//!
//! The research prototype read its GPUs in blocks instead (its
//! `src/monitor.py`): a monitoring thread sampled `dcgmi dmon` and
//! `nvidia-smi` about once a second for a minute and a half, then
//! published the block's mean SM activity and its last memory reading,
//! and the scheduler decided on the last block published. A GPU that had
//! just taken a task therefore looked as it was before for up to a block:
//! the same GPU, with the most free memory on paper, could take the next
//! task too, and the SM activity cap judged a GPU by the previous
//! minute and a half. [`Readings::Blocks`] shows the core that, for
//! `carma simulate --compare-paper`, which runs the prototype's rules.

/// How often the core reads the simulated GPUs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Readings {
    /// At every change of a GPU's state (carma's one-second samples).
    Live,
    /// Every `every_s` seconds from the start: SM activity averaged over
    /// the block, memory as at its end (the prototype's monitor).
    Blocks { every_s: f64 },
}

impl Readings {
    /// The research prototype's monitor: blocks of 1.5 minutes
    /// (`monitor_and_log_minute_scale(timestamp=1, window=1.5)`).
    pub const PROTOTYPE: Readings = Readings::Blocks { every_s: 90.0 };
}

/// One GPU's SM activity summed over the block under way.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Block {
    from: f64,
    to: f64,
    smact_seconds: f64,
}

impl Block {
    /// The GPU was at `smact` from the last call until `t`.
    pub fn add(&mut self, smact: f64, t: f64) {
        self.smact_seconds += smact * (t - self.to).max(0.0);
        self.to = self.to.max(t);
    }

    /// The block's mean SM activity so far; `smact` (the GPU's state
    /// now) for a block that has not begun.
    pub fn mean(&self, smact: f64) -> f64 {
        match self.to - self.from {
            // At most 1, as its readings were, whatever the rounding (a
            // cap of 1 must not refuse a GPU that read 1).
            span if span > 0.0 => (self.smact_seconds / span).min(1.0),
            _ => smact,
        }
    }

    /// A new block begins at `t`.
    pub fn restart(&mut self, t: f64) {
        *self = Block {
            from: t,
            to: t,
            smact_seconds: 0.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_reads_its_mean_activity() {
        // 30 s at 0.9 then 60 s at 0.3: 0.5 over the 90 s block.
        let mut b = Block::default();
        b.add(0.0, 0.0);
        b.add(0.9, 30.0);
        b.add(0.3, 90.0);
        assert!((b.mean(0.3) - 0.5).abs() < 1e-12);
        b.restart(90.0);
        assert_eq!(b.mean(0.3), 0.3);
    }
}
