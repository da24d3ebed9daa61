//! The chain as a job sees it: which estimator answers, and why the others
//! did not.

use std::path::{Path, PathBuf};

use super::*;
use crate::config::Config;
use crate::summary::Family;
use combine::Group;

fn workload(name: &str) -> Summary {
    let path = format!("{}/data/carma/workloads/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {path} (the shared data must sit beside the repository): {e}")
    });
    Summary::parse(&text).unwrap()
}

fn settings(history: &Path) -> Settings {
    let mut s = Config::load(None).unwrap().estimate;
    s.history_dir = history.to_path_buf();
    s
}

fn job(model: &str, batch: u64) -> EstimateInput {
    EstimateInput {
        declared: None,
        declared_by: String::new(),
        command: format!("python train_{model}.py"),
        batch_size: Some(batch),
        summary: Some(workload(model)),
        user: None,
    }
}

#[test]
fn the_built_in_models_load() {
    let models = load_models(Path::new("")).unwrap();
    for scheme in BucketScheme::ALL {
        assert!(models.family(Family::Mlp, scheme).is_some());
        assert!(models.family(Family::Cnn, scheme).is_some());
        assert!(models.family(Family::Transformer, scheme).is_none());
    }
}

#[test]
fn a_declared_need_wins() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let mut input = job("resnet50_32.model", 32);
    input.declared = Some(Need::Mib(3934));
    let e = chain.estimate(&input);
    assert_eq!(
        (e.need, e.source),
        (Need::Mib(3934), Some(EstimatorKind::Declared))
    );
    assert!(e.declined.is_empty());
}

#[test]
fn a_declared_need_below_what_the_job_was_seen_to_use_gives_way_to_history() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let mut input = job("resnet50_32.model", 32);
    chain
        .history()
        .record(&input.fingerprint(), 70 * 1024, None)
        .unwrap();
    input.declared = Some(Need::Mib(1));
    let e = chain.estimate(&input);
    assert_eq!(e.source, Some(EstimatorKind::History));
    assert!(
        matches!(e.need, Need::Mib(mib) if mib > 70 * 1024),
        "{:?}",
        e.need
    );
    let (kind, why) = &e.declined[0];
    assert_eq!(*kind, EstimatorKind::Declared);
    assert!(why.contains("less than it was seen to use"), "{why}");
    // Above what it was seen to use, the job's word stands.
    input.declared = Some(Need::Mib(80 * 1024));
    let e = chain.estimate(&input);
    assert_eq!(
        (e.need, e.source),
        (Need::Mib(80 * 1024), Some(EstimatorKind::Declared))
    );
}

#[test]
fn a_cnn_gets_a_bucket_from_the_ensemble() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let e = chain.estimate(&job("mnist_cnn_64.model", 32));
    assert_eq!(e.source, Some(EstimatorKind::Ensemble), "{e:?}");
    let bucket = e.bucket.as_ref().unwrap();
    assert_eq!(bucket.margin, chain.settings.fine_margin);
    // The bucket's edge with the margin, moved from the context of the
    // data's stack to the configured one.
    let Need::Mib(learned) = Buckets::fine_cnn().need_with_margin(bucket.index, bucket.margin)
    else {
        panic!("{e:?}")
    };
    let moved = learned - dataset::MEASURED_CONTEXT_MIB + chain.settings.context_mib;
    // The built-in models learned on the real jobs that the formula may
    // lower a CNN's answer all the way (floor 0): the need is the smaller.
    let c = e.combined.expect("the formula is below the bucket");
    assert_eq!((c.ensemble_mib, c.floor), (moved, 0.0));
    assert!(c.analytic_mib < moved);
    assert_eq!(e.need, Need::Mib(c.analytic_mib));
    assert!((bucket.shares.iter().sum::<f64>() - 1.0).abs() < 1e-9);
    let reasons: Vec<_> = e.declined.iter().map(|(k, _)| *k).collect();
    assert_eq!(reasons, [EstimatorKind::Declared, EstimatorKind::History]);
}

/// The chain with the built-in models, every family's combining floor
/// set to `floor`.
fn chain_with_floor(history: &Path, floor: f64) -> Chain {
    let mut models = load_models(Path::new("")).unwrap();
    for family in &mut models.families {
        family.analytic_floor = Some(floor);
        family.analytic_floor_batch_norm = Some(floor);
    }
    Chain::with_models(&settings(history), Ok(models))
}

#[test]
fn the_learned_floor_lets_the_formula_lower_the_ensemble() {
    let dir = tempfile::tempdir().unwrap();
    let input = job("mnist_cnn_64.model", 32);
    let alone = chain_with_floor(dir.path(), 1.0).estimate(&input);
    let Need::Mib(ensemble) = alone.need else {
        panic!("{alone:?}")
    };
    let chain = chain_with_floor(dir.path(), 0.0);
    let analytic = chain.estimate_with(&[EstimatorKind::Analytic], &input);
    let Need::Mib(formula) = analytic.need else {
        panic!("{analytic:?}")
    };
    assert!(formula < ensemble, "{formula} vs {ensemble}");
    let e = chain.estimate(&input);
    assert_eq!(e.need, Need::Mib(formula));
    assert_eq!(e.source_text(), "ensemble+analytic");
    let c = e.combined.unwrap();
    assert_eq!(
        (c.ensemble_mib, c.analytic_mib, c.floor),
        (ensemble, formula, 0.0)
    );
    assert!(e.describe().contains("lowered from"), "{}", e.describe());
    // A floor between the two bounds the lowering, in the data's frame.
    let shift = dataset::MEASURED_CONTEXT_MIB - chain.settings.context_mib;
    let half = chain_with_floor(dir.path(), 0.8).estimate(&input).need;
    let bound = ((ensemble + shift) as f64 * 0.8).ceil() as u64 - shift;
    assert!(bound > formula, "{bound} vs {formula}");
    assert_eq!(half, Need::Mib(bound));
    // Asked alone, the ensemble answers alone.
    let only = chain.estimate_with(&[EstimatorKind::Ensemble], &input);
    assert_eq!((only.need, only.combined), (Need::Mib(ensemble), None));
}

#[test]
fn a_transformer_goes_to_the_analytic_formula() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let e = chain.estimate(&job("BERT_base.model", 32));
    assert_eq!(e.source, Some(EstimatorKind::Analytic));
    assert_eq!(e.formula, Some(Formula::Transformer));
    let (_, why) = &e.declined[2];
    assert!(why.contains("transformer"), "{why}");
}

#[test]
fn a_batch_beyond_the_training_data_is_declined() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let e = chain.estimate(&job("dlrm.model", 32_768));
    assert_eq!(e.source, Some(EstimatorKind::Analytic));
    assert_eq!(e.formula, Some(Formula::Training));
    let (_, why) = &e.declined[2];
    assert!(why.contains("batch_size = 32768"), "{why}");
}

#[test]
fn history_answers_a_job_that_ran_before() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let chain = Chain::new(&s);
    let input = job("resnet50_32.model", 32);
    chain
        .history()
        .record(&input.fingerprint(), 3934, None)
        .unwrap();
    let e = chain.estimate(&input);
    assert_eq!(e.source, Some(EstimatorKind::History));
    // 5% of 3934 is 197, below the 256 MiB floor.
    assert_eq!(e.need, Need::Mib(3934 + 256));
    // Another batch size is another job.
    let e = chain.estimate(&job("resnet50_32.model", 64));
    assert_eq!(e.source, Some(EstimatorKind::Ensemble));
}

#[test]
fn broken_models_make_the_chain_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path());
    let models = dir.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::write(
        models.join(ensemble::MODEL_FILE),
        "{\"format\": 1, \"trees\": [",
    )
    .unwrap();
    s.models_dir = models;
    let e = Chain::new(&s).estimate(&job("mnist_cnn_64.model", 32));
    assert_eq!(e.source, Some(EstimatorKind::Analytic));
    let (_, why) = &e.declined[2];
    assert!(
        why.contains("memory-ensemble.json") && why.contains("not a carma model file"),
        "{why}"
    );
    s.models_dir = PathBuf::from("/nonexistent");
    let e = Chain::new(&s).estimate(&job("mnist_cnn_64.model", 32));
    assert!(
        e.declined[2].1.contains("cannot read model file"),
        "{:?}",
        e.declined
    );
}

#[test]
fn nothing_known_means_a_whole_gpu_or_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let e = chain.estimate(&EstimateInput::default());
    assert_eq!(
        (e.need, e.source),
        (Need::WholeGpu, Some(EstimatorKind::WholeGpu))
    );
    assert_eq!(e.declined.len(), 4);
    let e = chain.estimate_with(&[EstimatorKind::Ensemble], &EstimateInput::default());
    assert_eq!((e.need, e.source), (Need::Unknown, None));
}

#[test]
fn estimator_names_parse() {
    assert_eq!(
        "whole-gpu".parse::<EstimatorKind>(),
        Ok(EstimatorKind::WholeGpu)
    );
    let err = "oracle".parse::<EstimatorKind>().unwrap_err();
    assert!(err.contains("declared, history"), "{err}");
}

/// Training twice on a small subset gives the same bytes: the shipped
/// models are reproducible (`carma train` uses the same code on all rows).
#[test]
fn training_is_deterministic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gpumemnet");
    let (examples, _) = dataset::load(&dir, Family::Cnn).unwrap();
    let subset: Vec<_> = examples.iter().step_by(8).cloned().collect();
    let params = TrainParams {
        trees: 8,
        ..TrainParams::default()
    };
    let train = || {
        let model =
            FamilyEnsemble::train(Family::Cnn, BucketScheme::Fine, &subset, &params).unwrap();
        Ensemble {
            format: ensemble::MODEL_FORMAT,
            params,
            families: vec![model],
        }
        .to_json()
        .unwrap()
    };
    let first = train();
    assert_eq!(first, train());
    let loaded = Ensemble::from_json(&first).unwrap();
    assert_eq!(loaded.to_json().unwrap(), first, "the file round-trips");
}

/// The built-in models' CNN floors come from the real jobs: on the three
/// real CNNs the formula is never more than 2 GiB under, so it may lower
/// the ensemble all the way; a peak the formula misses by far keeps the
/// ensemble's answer. Rows are in the data's frame.
#[test]
fn real_jobs_decide_the_floors_they_cover() {
    use calibration::{RealJob, learn_real_floors, real_rows};
    let dir = tempfile::tempdir().unwrap();
    let chain = Chain::new(&settings(dir.path()));
    let real = |name: &str, model, batch, peak_mib| RealJob {
        name: name.into(),
        input: job(model, batch),
        peak_mib,
    };
    let mut jobs = vec![
        real("mnist_train.rad", "mnist_cnn_64.model", 32, 1776),
        real("resnet.rad", "resnet50_32.model", 32, 3934),
        real("mobilenet.rad", "mobilenet_cifar100.model", 32, 590),
        real("bert.rad", "BERT_base.model", 32, 19_828),
    ];
    let rows = real_rows(&chain, &jobs);
    let names: Vec<_> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["mnist_train.rad", "resnet.rad", "mobilenet.rad"],
        "no ensemble for BERT"
    );
    let shift = dataset::MEASURED_CONTEXT_MIB - chain.settings.context_mib;
    assert_eq!(rows[1].row.peak_mib, 3934 + shift);
    assert_eq!(rows[1].row.group, Group::BatchNorm);
    assert_eq!(rows[0].row.group, Group::Plain);
    let floors = learn_real_floors(&rows, Family::Cnn);
    assert_eq!(
        (floors.plain, floors.batch_norm, floors.rows),
        (Some(0.0), Some(0.0), 3)
    );
    assert_eq!(learn_real_floors(&rows, Family::Mlp).plain, None);
    // ResNet-50 measured far above the formula: the batch-norm floor rises
    // to what keeps it within 2 GiB; mnist's plain floor stays.
    jobs[1].peak_mib = 12_000;
    let rows = real_rows(&chain, &jobs);
    let floors = learn_real_floors(&rows, Family::Cnn);
    assert_eq!(floors.plain, Some(0.0));
    let lifted = floors.batch_norm.unwrap();
    assert!(lifted > 0.5, "{floors:?}");
    let r = rows[1].row;
    let (need, _) = combine::combine(r.ensemble_mib, r.analytic_mib, lifted);
    assert!(need + 2048 >= r.peak_mib, "{need} vs {}", r.peak_mib);
}
