//! The research prototype's published workloads must run unchanged: each of
//! the six real legacy `.rad` files parses to exactly the fields written in
//! it, and no mangling of them (truncation, byte flips, random edits) makes
//! the parser panic.
//!
//! The files are read from the shared data directory, never copied into the
//! repository; without it these tests fail, loudly, rather than skip.

use std::fs;
use std::path::{Path, PathBuf};

use carma::rad::{
    PolicyHint, PublishedEstimates, Syntax, TaskSpec, check_file, parse, parse_bytes,
};
use carma::sched::Need;

fn workloads() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/carma/workloads");
    assert!(
        dir.is_dir(),
        "the published workloads are missing: expected them in {} \
         (see data/README.md); these tests need them and do not skip",
        dir.display()
    );
    dir
}

fn rad_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rad"))
        .collect();
    files.sort();
    files
}

/// A published workload as its file spells it: every one activates the
/// `tf` environment and asks for exclusive GPUs.
#[allow(clippy::too_many_arguments)]
fn legacy(
    name: &str,
    command: &str,
    model: &str,
    dataset: &str,
    batch_size: u32,
    gpus: u32,
    memory: Need,
    [horus, faketensor, gpumemnet]: [Need; 3],
) -> TaskSpec {
    TaskSpec {
        name: Some(name.into()),
        model: Some(model.into()),
        dataset: Some(dataset.into()),
        batch_size: Some(batch_size),
        gpus,
        policy: Some(PolicyHint::Exclusive),
        memory: Some(memory),
        published: PublishedEstimates {
            horus: Some(horus),
            faketensor: Some(faketensor),
            gpumemnet: Some(gpumemnet),
        },
        ..TaskSpec::new(
            Syntax::Legacy,
            vec!["conda activate tf".into(), command.into()],
        )
    }
}

const WHOLE: Need = Need::WholeGpu;

fn mib(mib: u64) -> Need {
    Need::Mib(mib)
}

const WORKLOADS: &str = "/home/ehyo/rad-scheduler/workloads";

#[test]
fn the_six_published_workloads_parse_field_by_field() {
    let dir = workloads();
    let expected = [
        legacy(
            "BERT_base",
            &format!("python {WORKLOADS}/BERT_base_on_wiki.py"),
            "BERT_base.model",
            "wiki",
            32,
            1,
            mib(19828),
            // 17456.9336 rounds up; 40000 is the whole-GPU marker.
            [mib(17457), WHOLE, mib(32000)],
        ),
        legacy(
            "dlrm",
            &format!(
                "python {WORKLOADS}/dlrm/dlrm_s_pytorch.py --data-set terabyte \
                 --raw-data-file /raid/datasets/criteo/data/day --loss-function bce \
                 --round-targets True --learning-rate 0.05   --mini-batch-size 32768   \
                 --nepochs 1   --num-batches 10000   --arch-sparse-feature-size 64   \
                 --arch-mlp-bot 13-512-256-128-64   --arch-mlp-top 1024-512-256-1   \
                 --use-gpu   --memory-map   --dataset-multiprocessing   --print-time   \
                 --print-freq 100 --num-workers 16"
            ),
            "dlrm.model",
            "/raid/dataset/dlrm_days",
            32768,
            1,
            mib(1468),
            [WHOLE, WHOLE, WHOLE],
        ),
        legacy(
            "mnist_train",
            &format!("python {WORKLOADS}/mnist_train.py"),
            "mnist_cnn_64.model",
            "MNIST dataset",
            32,
            1,
            mib(1776),
            [mib(1115), mib(38), mib(8000)],
        ),
        legacy(
            "mobilenet_cifar100_20e_1",
            &format!("python {WORKLOADS}/mobilenet_cifar100.py --batch_size 32 --epochs 20"),
            "mobilenet_cifar100.model",
            "cifar100",
            32,
            1,
            mib(590),
            [mib(1349), mib(16), mib(8000)],
        ),
        legacy(
            "resnet",
            &format!("python {WORKLOADS}/resnet50.py --batch_size 32"),
            "resnet50_32.model",
            "/raid/datasets/imagenet",
            32,
            1,
            mib(3934),
            [mib(7904), mib(2673), mib(16000)],
        ),
        legacy(
            "xlnet_base_cased_2",
            &format!("python {WORKLOADS}/xlnet_base_cased.py"),
            "xlnet_base_cased.model",
            "wiki",
            8,
            2,
            mib(9192),
            [mib(3662), WHOLE, mib(16000)],
        ),
    ];
    let files = rad_files(&dir);
    assert_eq!(files.len(), expected.len(), "{files:?}");
    for (file, expected) in files.iter().zip(expected) {
        let job = check_file(file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(job.spec, expected, "{}", file.display());
        assert_eq!(job.warnings, Vec::<String>::new(), "{}", file.display());
    }
}

#[test]
fn published_workloads_mean_the_same_with_crlf_and_a_bom() {
    for file in rad_files(&workloads()) {
        let text = fs::read_to_string(&file).unwrap();
        let windows = format!("\u{feff}{}", text.replace('\n', "\r\n"));
        assert_eq!(parse(&windows), parse(&text), "{}", file.display());
    }
}

/// Inputs derived from `seed`: every prefix, every byte replaced by bytes
/// that matter to the parser, and random multi-byte edits.
fn mangled(seed: &[u8], mut visit: impl FnMut(&[u8])) {
    for end in 0..=seed.len() {
        visit(&seed[..end]);
    }
    const SPECIAL: &[u8] = b"\x00\xff\xc3\n\r:#0-. /9";
    let mut copy = seed.to_vec();
    for at in 0..seed.len() {
        for &byte in SPECIAL {
            copy[at] = byte;
            visit(&copy);
        }
        copy[at] = seed[at];
    }
    // xorshift64: reproducible without a crate.
    let mut state = 0x9E37_79B9_7F4A_7C15_u64 ^ seed.len() as u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..500 {
        let mut bytes = seed.to_vec();
        for _ in 0..1 + next() % 8 {
            let at = (next() as usize) % (bytes.len() + 1);
            let byte = next() as u8;
            match next() % 3 {
                0 if at < bytes.len() => bytes[at] = byte,
                1 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => bytes.insert(at, byte),
            }
        }
        visit(&bytes);
    }
}

#[test]
fn mangled_workloads_never_panic_and_errors_point_inside_the_file() {
    let dir = workloads();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut inputs = 0;
    for file in rad_files(&dir).into_iter().chain(rad_files(&examples)) {
        let seed = fs::read(&file).unwrap();
        mangled(&seed, |bytes| {
            inputs += 1;
            match parse_bytes(bytes) {
                Ok(parsed) => {
                    assert!(!parsed.spec.script.is_empty());
                    assert!(parsed.spec.gpus >= 1);
                }
                Err(e) => {
                    let lines = bytes.iter().filter(|&&b| b == b'\n').count() + 1;
                    assert!(e.line >= 1 && e.line <= lines, "{e} for {bytes:?}");
                    assert!(e.column >= 1 && e.column <= bytes.len() + 1, "{e}");
                    assert!(!e.message.is_empty());
                }
            }
        });
    }
    assert!(inputs > 10_000, "{inputs}");
}
