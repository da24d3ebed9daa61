//! `carma simulate --compare-paper`: the published CARMA results beside
//! what the simulator makes of the same setups, so anyone can see how
//! close the model is and where it is not.
//!
//! The published figures come from the research prototype on 4 × A100
//! 40 GB under MPS. The prototype is emulated by its rules, not carma's:
//! an idle GPU first, its SMACT gate, a GPU left alone until its new task
//! has been on it for 30 s (no reservation ledger), 2 GiB free beyond an
//! estimate. Rows of the heavier 60-task trace, which is not in the data,
//! run `philly_t1_60` instead and say so.

use std::fmt;
use std::path::Path;

use super::trace::{self, TraceTask};
use super::{Metrics, Model, Setup, Sharing, run};
use crate::gpu::sim::spec::Declared;
use crate::rad::MemoryLine;
use crate::sched::{Gate, Policy, Rules};
use crate::wall_time::Seconds;

const GIB: u64 = 1024;

/// One published figure and the simulator's.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// What is compared, with the trace the simulator ran.
    pub figure: String,
    pub published: String,
    pub simulated: String,
    /// Whether the target is met; `None`: no target.
    pub met: Option<bool>,
}

/// How the prototype decided, for one row.
#[derive(Debug, Clone, Copy)]
struct Emulated {
    policy: Policy,
    estimator: MemoryLine,
    sharing: Sharing,
    /// The SMACT cap; 1: none.
    smact_cap: f64,
    /// Free memory asked beyond an estimate, or of a task without one.
    free_gib: u64,
}

impl Emulated {
    fn new(policy: Policy, estimator: MemoryLine) -> Emulated {
        Emulated {
            policy,
            estimator,
            sharing: Sharing::Mps,
            smact_cap: 0.8,
            free_gib: 2,
        }
    }

    fn streams(self) -> Emulated {
        Emulated {
            sharing: Sharing::Streams,
            ..self
        }
    }

    /// Without the prototype's preconditions: no SMACT cap, no free
    /// memory asked.
    fn bare(self) -> Emulated {
        self.gated(1.0, 0)
    }

    fn gated(self, smact_cap: f64, free_gib: u64) -> Emulated {
        Emulated {
            smact_cap,
            free_gib,
            ..self
        }
    }
}

/// The two traces of the data, loaded once.
struct Traces {
    mix_90: Vec<TraceTask>,
    t1_60: Vec<TraceTask>,
}

/// Runs every row's simulations on the traces in `dir` (the data's
/// `carma/traces/`), with carma's `rules` and `model` as the base.
pub fn compare(dir: &Path, rules: &Rules, model: &Model) -> Result<Vec<Row>, String> {
    let load = |name: &str| {
        let path = dir.join(name);
        trace::load(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let traces = Traces {
        mix_90: load("philly_mix_90.csv")?,
        t1_60: load("philly_t1_60.csv")?,
    };
    let sim = |trace: &[TraceTask], how: Emulated| -> Metrics {
        let mut rules = rules.clone();
        let p = &mut rules.placement;
        p.policy = how.policy;
        p.idle_first = true;
        p.gate = Gate::Smact;
        p.smact_cap = how.smact_cap;
        p.margin_mib = how.free_gib * GIB;
        p.unknown_margin_mib = how.free_gib * GIB;
        p.reservation_ramp_s = Seconds::ZERO;
        p.settle_s = Seconds::of(35.0);
        let mut model = model.clone();
        model.sharing = how.sharing;
        run(
            trace,
            &Setup {
                gpus: vec![Declared::whole(40 * GIB); 4],
                estimator: how.estimator,
                rules,
                model,
            },
        )
    };
    let mut rows = Vec::new();
    headline(&traces, &sim, &mut rows);
    energy_table(&traces, &sim, &mut rows);
    oom_tables(&traces, &sim, &mut rows);
    streams(&traces, &sim, &mut rows);
    Ok(rows)
}

type Sim<'a> = dyn Fn(&[TraceTask], Emulated) -> Metrics + 'a;

/// Relative change from `base` to `x`, percent.
fn change(base: f64, x: f64) -> f64 {
    (x / base - 1.0) * 100.0
}

/// A percentage row, met when within `points` of the published one.
fn percent_row(figure: String, published: f64, simulated: f64, points: f64) -> Row {
    Row {
        figure,
        published: format!("{published:+.1}%"),
        simulated: format!("{simulated:+.1}%"),
        met: Some((simulated - published).abs() <= points),
    }
}

/// An OOM-count row, met within a factor of two (and at zero where the
/// paper has zero).
fn oom_row(figure: String, published: u32, simulated: u32) -> Row {
    let met = match published {
        0 => simulated == 0,
        p => simulated * 2 >= p && simulated <= p * 2,
    };
    Row {
        figure,
        published: published.to_string(),
        simulated: simulated.to_string(),
        met: Some(met),
    }
}

fn headline(traces: &Traces, sim: &Sim<'_>, rows: &mut Vec<Row>) {
    let t1 = &traces.t1_60;
    let exclusive = sim(t1, Emulated::new(Policy::Exclusive, MemoryLine::Gpumemnet));
    let magm = sim(t1, Emulated::new(Policy::Magm, MemoryLine::Gpumemnet));
    let what = "philly_t1_60, MAGM + GPUMemNet vs exclusive:";
    for (figure, published, of) in [
        (
            "trace time",
            -26.7,
            (|m: &Metrics| m.total_time_s) as fn(&Metrics) -> f64,
        ),
        ("mean SM activity", 39.3, |m| m.mean_utilization),
        ("GPU energy", -14.2, |m| m.energy_mj),
    ] {
        rows.push(percent_row(
            format!("{what} {figure}"),
            published,
            change(of(&exclusive), of(&magm)),
            3.0,
        ));
    }
    let mix = &traces.mix_90;
    let exclusive = sim(mix, Emulated::new(Policy::Exclusive, MemoryLine::Oracle));
    let magm = sim(mix, Emulated::new(Policy::Magm, MemoryLine::Oracle));
    rows.push(percent_row(
        "philly_mix_90, MAGM + oracle vs exclusive: trace time".into(),
        -30.13,
        change(exclusive.total_time_s, magm.total_time_s),
        3.0,
    ));
}

fn energy_table(traces: &Traces, sim: &Sim<'_>, rows: &mut Vec<Row>) {
    let t1 = &traces.t1_60;
    let none = MemoryLine::None;
    let exclusive = sim(t1, Emulated::new(Policy::Exclusive, none)).energy_mj;
    let published_exclusive = 33.2;
    for (name, how, published) in [
        (
            "round-robin on streams",
            Emulated::new(Policy::RoundRobin, none).streams(),
            34.7,
        ),
        (
            "round-robin on MPS",
            Emulated::new(Policy::RoundRobin, none),
            29.6,
        ),
        ("MAGM on MPS", Emulated::new(Policy::Magm, none), 28.8),
        (
            "MAGM + Horus",
            Emulated::new(Policy::Magm, MemoryLine::Horus),
            29.0,
        ),
        (
            "MAGM + FakeTensor",
            Emulated::new(Policy::Magm, MemoryLine::Faketensor),
            30.3,
        ),
        (
            "MAGM + GPUMemNet",
            Emulated::new(Policy::Magm, MemoryLine::Gpumemnet),
            28.5,
        ),
    ] {
        let energy = sim(t1, how).energy_mj;
        rows.push(percent_row(
            format!("heavier 60-task trace (here philly_t1_60), energy vs exclusive: {name}"),
            change(published_exclusive, published),
            change(exclusive, energy),
            3.0,
        ));
    }
}

fn oom_tables(traces: &Traces, sim: &Sim<'_>, rows: &mut Vec<Row>) {
    let mix = &traces.mix_90;
    let none = MemoryLine::None;
    let no_estimate = [
        ("RR", Emulated::new(Policy::RoundRobin, none).bare(), 8),
        ("MAGM", Emulated::new(Policy::Magm, none).bare(), 5),
        (
            "MAGM + SMACT ≤ 80%",
            Emulated::new(Policy::Magm, none).gated(0.8, 0),
            4,
        ),
        (
            "+ ≥ 2 GB free",
            Emulated::new(Policy::Magm, none).gated(0.8, 2),
            2,
        ),
        (
            "+ ≥ 5 GB free",
            Emulated::new(Policy::Magm, none).gated(0.8, 5),
            2,
        ),
        (
            "LUG (≤ 80%, ≥ 5 GB)",
            Emulated::new(Policy::Lug, none).gated(0.8, 5),
            2,
        ),
        (
            "MAGM (≤ 75%, ≥ 5 GB)",
            Emulated::new(Policy::Magm, none).gated(0.75, 5),
            1,
        ),
    ];
    for (name, how, published) in no_estimate {
        rows.push(oom_row(
            format!("philly_mix_90, OOM crashes without estimates: {name}"),
            published,
            sim(mix, how).oom_crashes,
        ));
    }
    let estimators = [
        ("Horus", MemoryLine::Horus, 1, 0),
        ("FakeTensor", MemoryLine::Faketensor, 0, 0),
        ("GPUMemNet", MemoryLine::Gpumemnet, 1, 0),
    ];
    for (name, estimator, bare, capped) in estimators {
        let how = Emulated::new(Policy::Magm, estimator);
        rows.push(oom_row(
            format!("philly_mix_90, OOM crashes, MAGM + {name}"),
            bare,
            sim(mix, how.gated(1.0, 2)).oom_crashes,
        ));
        rows.push(oom_row(
            format!("philly_mix_90, OOM crashes, MAGM + {name}, SMACT ≤ 80%"),
            capped,
            sim(mix, how).oom_crashes,
        ));
    }
    let t1 = &traces.t1_60;
    let heavier = [
        (
            "RR on streams",
            Emulated::new(Policy::RoundRobin, none).streams().bare(),
            9,
        ),
        (
            "RR on MPS",
            Emulated::new(Policy::RoundRobin, none).bare(),
            6,
        ),
        ("MAGM (≥ 2 GB, ≤ 80%)", Emulated::new(Policy::Magm, none), 4),
        ("LUG", Emulated::new(Policy::Lug, none), 4),
        (
            "MAGM + Horus",
            Emulated::new(Policy::Magm, MemoryLine::Horus),
            2,
        ),
        (
            "MAGM + FakeTensor",
            Emulated::new(Policy::Magm, MemoryLine::Faketensor),
            3,
        ),
        (
            "MAGM + GPUMemNet",
            Emulated::new(Policy::Magm, MemoryLine::Gpumemnet),
            1,
        ),
    ];
    for (name, how, published) in heavier {
        rows.push(oom_row(
            format!("heavier 60-task trace (here philly_t1_60), OOM crashes: {name}"),
            published,
            sim(t1, how).oom_crashes,
        ));
    }
}

fn streams(traces: &Traces, sim: &Sim<'_>, rows: &mut Vec<Row>) {
    for (name, trace) in [
        ("philly_mix_90", &traces.mix_90),
        ("philly_t1_60", &traces.t1_60),
    ] {
        let none = MemoryLine::None;
        let exclusive = sim(trace, Emulated::new(Policy::Exclusive, none));
        let sliced = sim(trace, Emulated::new(Policy::RoundRobin, none).streams());
        let time = change(exclusive.total_time_s, sliced.total_time_s);
        let wait = change(exclusive.avg_wait_s, sliced.avg_wait_s);
        rows.push(Row {
            figure: format!(
                "{name}, round-robin time-sliced (streams) vs exclusive: trace time, mean wait"
            ),
            published: "marginal gain; better wait".into(),
            simulated: format!("{time:+.1}%, {wait:+.1}%"),
            met: Some(time.abs() <= 5.0 && wait < 0.0),
        });
    }
}

/// The rows as a Markdown table.
pub struct Table<'a>(pub &'a [Row]);

impl fmt::Display for Table<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| figure | published | carma simulate | target met |")?;
        writeln!(f, "|---|---|---|---|")?;
        for row in self.0 {
            let met = match row.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "",
            };
            writeln!(
                f,
                "| {} | {} | {} | {met} |",
                row.figure, row.published, row.simulated
            )?;
        }
        Ok(())
    }
}
