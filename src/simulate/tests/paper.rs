//! The comparison with the published results, and the paper's order.

use super::*;

#[test]
fn the_paper_comparison_fills_every_row_and_keeps_the_calibrated_ones() {
    // The figures the model was fitted to, on the means of 20 replays,
    // stay met: the two trace-time headlines, the 60-task trace's energy,
    // and time-slicing's three results (energy on the 60-task trace, time
    // against exclusive on both traces). Emulating the
    // prototype's loop, which paced the whole server rather than each
    // GPU, brings MAGM's OOM crashes without estimates and with Horus's
    // down to the published counts (10.6 and 2.5 per replay when each
    // GPU took a task every 35 s); its round-robin, which checked
    // nothing, saves the published energy on MPS. The full table is in
    // docs/simulation.md.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/traces");
    let config = crate::config::Config::load(None).unwrap();
    let rows = crate::simulate::paper::compare(
        &dir,
        &config.rules(),
        &config.simulate,
        crate::simulate::paper::Replays::DEFAULT,
        Readings::Live,
    )
    .unwrap();
    assert_eq!(rows.len(), 32, "{rows:?}");
    for row in &rows {
        assert!(
            row.simulated.contains(" ± ") && row.met.is_some(),
            "{row:?}"
        );
    }
    let met = |figure: &str| {
        rows.iter()
            .find(|r| r.figure == figure)
            .is_some_and(|r| r.met == Some(true))
    };
    for figure in [
        "philly_t1_60, MAGM + GPUMemNet vs exclusive: trace time",
        "philly_t1_60, MAGM + GPUMemNet vs exclusive: GPU energy",
        "philly_mix_90, MAGM + oracle vs exclusive: trace time",
        "philly_mix_90, round-robin time-sliced (streams) vs exclusive: trace time, mean wait",
        "philly_t1_60, round-robin time-sliced (streams) vs exclusive: trace time, mean wait",
        "heavier 60-task trace (here philly_t1_60), energy vs exclusive: round-robin on streams",
        "philly_mix_90, OOM crashes without estimates: MAGM",
        "philly_mix_90, OOM crashes, MAGM + Horus",
        "heavier 60-task trace (here philly_t1_60), energy vs exclusive: round-robin on MPS",
    ] {
        assert!(met(figure), "{figure}: {rows:?}");
    }
    let table = crate::simulate::paper::Table(&rows).to_string();
    assert!(table.starts_with("| figure | published | carma simulate | target met |\n"));
}

#[test]
fn the_prototypes_monitor_explains_why_free_memory_did_not_stop_its_crashes() {
    // Read as they are, the GPUs that pass the 80% SMACT cap hold little
    // memory, so asking 2 or 5 GiB free changes nothing (0.85 crashes per
    // replay either way, published 2). Read from the prototype's monitor,
    // a block 1.5 minutes old, a GPU that just took a task still looks
    // calm and empty: the next task lands there too, and the published
    // counts come out.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/traces");
    let config = crate::config::Config::load(None).unwrap();
    let compare = |monitor: Readings| {
        crate::simulate::paper::compare(
            &dir,
            &config.rules(),
            &config.simulate,
            crate::simulate::paper::Replays::DEFAULT,
            monitor,
        )
        .unwrap()
    };
    let met = |rows: &[crate::simulate::paper::Row], figure: &str| {
        rows.iter()
            .find(|r| r.figure == figure)
            .is_some_and(|r| r.met == Some(true))
    };
    let (live, blocks) = (compare(Readings::Live), compare(Readings::PROTOTYPE));
    for figure in [
        "philly_mix_90, OOM crashes without estimates: + ≥ 2 GB free",
        "philly_mix_90, OOM crashes without estimates: + ≥ 5 GB free",
        "philly_mix_90, OOM crashes without estimates: LUG (≤ 80%, ≥ 5 GB)",
    ] {
        assert!(!met(&live, figure), "{figure}: {live:?}");
        assert!(met(&blocks, figure), "{figure}: {blocks:?}");
    }
}

#[test]
fn exact_estimates_do_at_least_as_well_as_any_estimator_on_the_means() {
    // The paper's order, on the means of 20 replays under carma's own
    // rules: MAGM with the measured peaks ends each data trace no later
    // than with any published estimator or none. It did not while the
    // gate judged a GPU by a window of its past alone: exact estimates
    // let a whole backlog onto one GPU at one instant. The model was fitted
    // to the two artifact traces; the two rebuilt from the prototype's
    // submission scripts (data/derived/) check that the order is not an
    // accident of those two.
    let config = crate::config::Config::load(None).unwrap();
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data");
    for name in [
        "carma/traces/philly_mix_90.csv",
        "carma/traces/philly_t1_60.csv",
        "derived/philly_heavy_60.csv",
        "derived/philly_t2_60.csv",
    ] {
        let whole = trace::load(&data.join(name)).unwrap();
        let replays: Vec<Vec<TraceTask>> = (1..=20)
            .map(|seed| trace::jittered(&whole, 60.0, seed))
            .collect();
        let mean = |estimator: MemoryLine| {
            let setup = Setup {
                gpus: vec![Declared::whole(40 * GIB); 4],
                estimator,
                rules: config.rules(),
                model: config.simulate.clone(),
                readings: Readings::Live,
            };
            let total: f64 = replays.iter().map(|t| run(t, &setup).total_time_s).sum();
            total / replays.len() as f64
        };
        let exact = mean(MemoryLine::Oracle);
        for estimator in [
            MemoryLine::Horus,
            MemoryLine::Faketensor,
            MemoryLine::Gpumemnet,
            MemoryLine::None,
        ] {
            let estimated = mean(estimator);
            assert!(
                exact <= estimated,
                "{name}: oracle {exact:.0} s, {estimator:?} {estimated:.0} s"
            );
        }
    }
}
