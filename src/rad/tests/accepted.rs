//! Job files read as written, in both syntaxes, and how they are shown.

use super::*;

// Keyed syntax, accepted.

#[test]
fn the_design_example_reads_field_by_field() {
    let spec = spec(RESNET);
    assert_eq!(
        spec,
        TaskSpec {
            syntax: Syntax::Keyed,
            name: None,
            script: vec![
                "conda activate tf".into(),
                "python resnet50.py --batch_size 32".into()
            ],
            model: Some("resnet50_32.model".into()),
            dataset: None,
            batch_size: Some(32),
            gpus: 1,
            policy: Some(PolicyHint::Collocate),
            memory: Some(Need::Mib(4096)),
            published: PublishedEstimates::default(),
            retries: None,
            time: None,
            priority: None,
            after: Vec::new(),
            notify: None,
            array: None,
            host: Default::default(),
        }
    );
}

#[test]
fn every_key_is_read() {
    let spec = spec(
        "name: bert-run-2\ndataset: /raid/wiki # where it lives\nretries: 0\n\
         policy: Exclusive\ngpus: 4\nmemory: whole\npython x.py\n",
    );
    assert_eq!(spec.name.as_deref(), Some("bert-run-2"));
    assert_eq!(spec.dataset.as_deref(), Some("/raid/wiki"));
    assert_eq!(spec.retries, Some(0));
    assert_eq!(spec.policy, Some(PolicyHint::Exclusive));
    assert_eq!(spec.gpus, 4);
    assert_eq!(spec.memory, Some(Need::WholeGpu));
    assert_eq!(spec.model, None);
}

#[test]
fn script_lines_keep_their_order_and_text() {
    let spec = spec(
        "# setup\nconda activate tf\n  # indented comment\n\nexport URL=http://x/y # bash comment\n\
         http://example.com/data\nC:\\data\\run.bat\nfor i in 1 2; do\n  gpus: echo $i\ndone\n\
         gpus: 2\npython train.py --epochs 3  \n",
    );
    assert_eq!(
        spec.script,
        [
            "conda activate tf",
            "export URL=http://x/y # bash comment",
            "http://example.com/data",
            "C:\\data\\run.bat",
            "for i in 1 2; do",
            "  gpus: echo $i",
            "done",
            "python train.py --epochs 3  ",
        ]
    );
    assert_eq!(spec.gpus, 2);
}

#[test]
fn directives_may_come_anywhere_and_hash_inside_a_word_is_not_a_comment() {
    let spec = spec("python a.py\ndataset: set#2   # the second one\nname : run#1\n");
    assert_eq!(spec.dataset.as_deref(), Some("set#2"));
    assert_eq!(spec.name.as_deref(), Some("run#1"));
    assert_eq!(spec.script, ["python a.py"]);
}

#[test]
fn sizes_take_units() {
    for (text, mib) in [
        ("12G", 12 * 1024),
        ("12GiB", 12 * 1024),
        ("1500M", 1500),
        ("1500", 1500),
        ("1.5 GB", 1536),
    ] {
        let spec = spec(&format!("memory: {text}\npython a.py\n"));
        assert_eq!(spec.memory, Some(Need::Mib(mib)), "{text}");
    }
    assert_eq!(
        spec("memory: Whole-GPU\nrun\n").memory,
        Some(Need::WholeGpu)
    );
}

#[test]
fn crlf_and_a_byte_order_mark_change_nothing() {
    for text in [RESNET, LEGACY] {
        let crlf = text.replace('\n', "\r\n");
        assert_eq!(parse(&crlf), parse(text));
        assert_eq!(parse(&format!("\u{feff}{text}")), parse(text));
        let mut bytes = vec![0xEF, 0xBB, 0xBF];
        bytes.extend_from_slice(crlf.as_bytes());
        assert_eq!(parse_bytes(&bytes), parse(text));
    }
    // Errors point at the same places too; the BOM takes no column.
    refused("\u{feff}gpus: x\r\npython a.py\r\n", 1, 7, &["GPUs"]);
}

#[test]
fn model_position_is_reported() {
    let parsed = parse(RESNET).unwrap();
    assert_eq!(parsed.model_at, Some(Position { line: 2, column: 8 }));
    let parsed = parse(LEGACY).unwrap();
    assert_eq!(parsed.model_at, Some(Position { line: 4, column: 1 }));
}

// Legacy syntax, accepted.

#[test]
fn legacy_fields_round_up_and_40000_means_a_whole_gpu() {
    let spec = spec(LEGACY);
    assert_eq!(spec.syntax, Syntax::Legacy);
    assert_eq!(spec.script, ["conda activate tf", "python train.py"]);
    assert_eq!(spec.model.as_deref(), Some("BERT_base.model"));
    assert_eq!(spec.dataset.as_deref(), Some("wiki"));
    assert_eq!(spec.batch_size, Some(32));
    assert_eq!(spec.policy, Some(PolicyHint::Exclusive));
    assert_eq!(spec.gpus, 1);
    assert_eq!(spec.memory, Some(Need::Mib(19828)));
    assert_eq!(
        spec.published,
        PublishedEstimates {
            horus: Some(Need::Mib(17457)),
            faketensor: Some(Need::WholeGpu),
            gpumemnet: Some(Need::Mib(32000)),
        }
    );
    assert_eq!(spec.name, None);
    assert_eq!(spec.retries, None);
    // Only the marker itself asks for a whole GPU.
    let near = self::spec(&legacy_with(10, "39999.5")).published.horus;
    assert_eq!(near, Some(Need::Mib(40_000)));
    let marker = self::spec(&legacy_with(9, "40000.0")).memory;
    assert_eq!(marker, Some(Need::WholeGpu));
}

#[test]
fn legacy_tolerates_trailing_whitespace_and_blank_tails() {
    let sloppy = LEGACY.replace('\n', "  \t\n") + "   \n\n \n";
    assert_eq!(spec(&sloppy), spec(LEGACY));
}

#[test]
fn legacy_memory_lines_are_optional() {
    let eight: Vec<&str> = LEGACY.lines().take(8).collect();
    let spec8 = spec(&eight.join("\n"));
    assert_eq!(spec8.memory, None);
    assert_eq!(spec8.published, PublishedEstimates::default());
    // A blank line in the middle leaves that one estimate out.
    let spec = spec(&legacy_with(10, "   "));
    assert_eq!(spec.published.horus, None);
    assert_eq!(spec.published.faketensor, Some(Need::WholeGpu));
}

#[test]
fn legacy_collocation_is_spelt_either_way() {
    for word in ["collocation", "collocate", "Collocation"] {
        assert_eq!(
            spec(&legacy_with(7, word)).policy,
            Some(PolicyHint::Collocate)
        );
    }
}

// Output shapes.

#[test]
fn json_uses_plain_numbers_and_words() {
    let json = serde_json::to_value(spec(LEGACY)).unwrap();
    assert_eq!(json["syntax"], "legacy");
    assert_eq!(json["memory"], 19828);
    assert_eq!(json["policy"], "exclusive");
    assert_eq!(json["published"]["faketensor"], "whole-gpu");
    assert_eq!(json["published"]["horus"], 17457);
    assert_eq!(json["retries"], serde_json::Value::Null);
}

#[test]
fn display_shows_every_line_of_the_script() {
    let text = spec(RESNET).to_string();
    assert!(text.contains("  script      conda activate tf\n"), "{text}");
    assert!(
        text.contains("\n              python resnet50.py"),
        "{text}"
    );
    assert!(text.contains("memory      4096 MiB"), "{text}");
}

#[test]
fn long_offending_text_is_quoted_short() {
    let key = "k".repeat(60_000);
    let error = parse(&format!("{key}: 1\nrun\n")).unwrap_err();
    assert_eq!((error.line, error.column), (1, 1));
    // The clipped key and the list of every key there is.
    assert!(error.message.len() < 300, "{}", error.message.len());
    assert!(error.message.contains("unknown key `kkkk"), "{error}");
    let error = parse(&format!("gpus: {key}\nrun\n")).unwrap_err();
    assert!(error.message.len() < 200, "{}", error.message.len());
}

#[test]
fn host_limits_take_cpus_and_a_memory_size() {
    let s = spec("cpus: 2.5\nhost_memory: 32G\ntrue\n");
    assert_eq!(s.host.cpus, Some(2.5));
    assert_eq!(s.host.memory_mib, Some(32 * 1024));
    assert_eq!(
        spec("gpus: 1\ntrue\n").host,
        crate::rad::HostLimits::default()
    );
    refused("cpus: 0\ntrue\n", 1, 7, &["number of CPUs"]);
    refused("cpus: many\ntrue\n", 1, 7, &["number of CPUs"]);
    refused("host_memory: 0\ntrue\n", 1, 14, &["host memory"]);
    refused("host_memory: lots\ntrue\n", 1, 14, &["host memory"]);
}

#[test]
fn a_summary_named_in_another_case_is_found_from_one_listing_until_it_is_forgotten() {
    // The daemon takes in every drop of `pending/` in one turn: each that
    // named a missing summary listed the directory again.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Model.txt"), "").unwrap();
    let found = || crate::rad::case_match(dir.path(), "model.txt");
    assert_eq!(found().as_deref(), Some("Model.txt"));
    std::fs::rename(dir.path().join("Model.txt"), dir.path().join("MODEL.txt")).unwrap();
    assert_eq!(found().as_deref(), Some("Model.txt"), "listed once");
    crate::rad::forget_listings();
    assert_eq!(found().as_deref(), Some("MODEL.txt"));
}
