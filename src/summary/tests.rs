//! The six real summaries of the CARMA workloads, with values checked by
//! hand, and broken inputs.
//!
//! How the expected values were checked: layer counts by counting rows
//! (`grep -c`) per class name; activations by summing the products of the
//! output shapes without the batch dimension over the counted rows (for
//! torchsummary tables this is also `Forward/backward pass size (MB)`
//! x 2^20 / 8 / batch minus the block rows, which repeat a child's output);
//! parameters from the footers.

use super::*;

fn workload(name: &str) -> String {
    let path = format!("{}/data/carma/workloads/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("cannot read {path} (the shared data must sit beside the repository): {e}")
    })
}

fn counts(
    linear: u32,
    conv: u32,
    batch_norm: u32,
    layer_norm: u32,
    dropout: u32,
    embedding: u32,
    activation: u32,
) -> LayerCounts {
    LayerCounts {
        linear,
        conv,
        batch_norm,
        layer_norm,
        dropout,
        embedding,
        activation,
    }
}

#[test]
fn mnist_torchsummary() {
    let s = Summary::parse(&workload("mnist_cnn_64.model")).unwrap();
    let f = &s.features;
    assert_eq!(s.format, Format::Torchsummary);
    // ReLU and max-pooling are functional calls in this model: no rows.
    assert_eq!(f.layers, counts(2, 2, 0, 0, 2, 0, 0));
    assert_eq!(f.depth, 4);
    assert_eq!((f.params_total, f.params_trainable), (1_199_882, 1_199_882));
    // 32*26*26 + 64*24*24 + 64*12*12 + 128 + 128 + 10
    assert_eq!(f.activations_per_sample, Some(67_978));
    assert_eq!(f.activations_by_kind.conv, 58_496);
    assert_eq!(f.summary_batch, None, "the table was made with batch -1");
    assert_eq!(f.activation_fn, None);
    assert_eq!(f.family, Family::Cnn);
}

#[test]
fn mobilenet_torchsummary_with_timm_blocks() {
    let s = Summary::parse(&workload("mobilenet_cifar100.model")).unwrap();
    let f = &s.features;
    // BatchNormAct2d is a batch norm (it holds the parameters); its SiLU
    // and Identity children are listed before it.
    assert_eq!(f.layers, counts(1, 81, 49, 0, 0, 0, 65));
    assert_eq!(f.params_total, 4_135_648);
    // 420,732 over conv, norm, activation, pooling and linear rows, plus
    // 1,280 of `SelectAdaptivePool2d`, a timm pooling wrapper that repeats
    // its child's output (counted as pooling: it is named like one).
    assert_eq!(f.activations_per_sample, Some(422_012));
    assert_eq!(f.activation_fn, Some(ActivationFn::Silu));
    assert_eq!(f.family, Family::Cnn);
}

#[test]
fn resnet50_torchsummary_with_batch() {
    let s = Summary::parse(&workload("resnet50_32.model")).unwrap();
    let f = &s.features;
    assert_eq!(f.layers, counts(1, 53, 53, 0, 0, 0, 49));
    assert_eq!(f.params_total, 25_557_032);
    // 9169.87 MB x 2^20 / 8 / 32 = 37.56 M per sample with the 16
    // Bottleneck rows (5,519,360 per sample) that repeat their last ReLU.
    assert_eq!(f.activations_per_sample, Some(32_040_424));
    assert_eq!(f.summary_batch, Some(32));
    assert_eq!(f.activation_fn, Some(ActivationFn::Relu));
    assert_eq!(f.family, Family::Cnn);
}

#[test]
fn dlrm_torchinfo_with_trailing_notes() {
    let s = Summary::parse(&workload("dlrm.model")).unwrap();
    let f = &s.features;
    assert_eq!(s.format, Format::Torchinfo);
    assert_eq!(f.layers, counts(8, 0, 0, 0, 0, 3, 8));
    assert_eq!(f.params_total, 909_313);
    // Bottom MLP 512+256+128+64, top MLP 1024+512+256+1, each twice
    // (linear and activation), and three 64-wide embedding bags. The notes
    // under the footer say 5,768: they also count the 70-wide input of the
    // top MLP, which is not a layer's output.
    assert_eq!(f.activations_per_sample, Some(5_698));
    assert_eq!(f.input_shape, Some(vec![13]));
    assert_eq!(f.summary_batch, Some(32_768));
    assert_eq!(f.family, Family::Mlp);
}

#[test]
fn bert_module_print() {
    let s = Summary::parse(&workload("BERT_base.model")).unwrap();
    let f = &s.features;
    assert_eq!(s.format, Format::ModulePrint);
    // 12 blocks x (q, k, v, out, up, down) + head transform + decoder.
    assert_eq!(f.layers, counts(74, 0, 0, 26, 37, 3, 13));
    assert_eq!(
        (f.params_total, f.params_trainable),
        (130_638_728, 130_609_732)
    );
    assert_eq!(f.activations_per_sample, None);
    assert_eq!(f.family, Family::Transformer);
    assert!(s.notes.is_empty());
    let t = f.transformer.as_ref().unwrap();
    assert_eq!((t.hidden, t.blocks, t.intermediate), (768, 12, Some(3072)));
    assert_eq!((t.vocab, t.max_positions), (Some(28_996), Some(512)));
    assert_eq!(t.head_width, 28_996);
    assert!(t.fused_attention, "BertSdpaSelfAttention");
}

#[test]
fn xlnet_module_print_with_a_wrong_footer() {
    let s = Summary::parse(&workload("xlnet_base_cased.model")).unwrap();
    let f = &s.features;
    assert_eq!(f.layers, counts(26, 0, 0, 24, 38, 1, 13));
    // The root's annotation is the sum of its children; the footer's
    // "Total params: 81,874,178" is not. The larger one is kept.
    assert_eq!(f.params_total, 117_310_466);
    assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
    let t = f.transformer.as_ref().unwrap();
    assert_eq!((t.hidden, t.blocks, t.vocab), (768, 12, Some(32_000)));
    assert_eq!(t.max_positions, None, "XLNet has relative positions");
    assert!(!t.fused_attention);
}

#[test]
fn digests_tell_texts_apart() {
    let a = Summary::parse(&workload("mnist_cnn_64.model")).unwrap();
    let b = Summary::parse(&workload("resnet50_32.model")).unwrap();
    assert_eq!(a.digest.len(), 64);
    assert_ne!(a.digest, b.digest);
}

#[test]
fn compact_repeats_count_every_copy() {
    let text = "Net(\n  (blocks): ModuleList(\n    (0-3): 4 x Block(\n      (fc): \
                Linear(in_features=8, out_features=8, bias=True), 72 params\n      (act): ReLU(), 0 params\n    ), 72 params\n  ), 288 params\n), 288 params\n";
    let f = Summary::parse(text).unwrap().features;
    assert_eq!(f.layers.linear, 4);
    assert_eq!(f.params_total, 288);
}

/// A two-block transformer print whose attention class is `attention`.
fn tiny_transformer(attention: &str) -> TransformerShape {
    let text = format!(
        "Lm(\n  (wte): Embedding(1000, 64), 64,000 params\n  (wpe): Embedding(256, 64), \
         16,384 params\n  (h): ModuleList(\n    (0-1): 2 x Block(\n      (attn): {attention}(\n        \
         (qkv): Linear(in_features=64, out_features=192, bias=True), 12,480 params\n      \
         ), 12,480 params\n      (mlp): Linear(in_features=64, out_features=256, bias=True), \
         16,640 params\n    ), 29,120 params\n  ), 58,240 params\n  (head): Linear(in_features=64, \
         out_features=1000, bias=False), 64,000 params\n), 202,624 params\n"
    );
    let f = Summary::parse(&text).unwrap().features;
    assert_eq!(f.family, Family::Transformer, "{attention}");
    f.transformer.unwrap()
}

/// transformers 4.48 and later print `GPT2Attention` and
/// `BertSelfAttention` whatever kernel runs, and the default kernel is
/// SDPA; only relative-position and eager attention keep their scores.
#[test]
fn attention_is_fused_unless_the_print_says_otherwise() {
    for fused in ["GPT2Attention", "GPT2SdpaAttention", "BertSelfAttention"] {
        assert!(tiny_transformer(fused).fused_attention, "{fused}");
    }
    for unfused in [
        "XLNetRelativeAttention",
        "DisentangledSelfAttention",
        "BertEagerAttention",
    ] {
        assert!(!tiny_transformer(unfused).fused_attention, "{unfused}");
    }
    let t = tiny_transformer("GPT2Attention");
    assert_eq!((t.hidden, t.blocks, t.max_positions), (64, 2, Some(256)));
}

fn error_of(text: &str) -> SummaryError {
    Summary::parse(text).unwrap_err()
}

#[test]
fn unknown_format_is_an_error_at_its_first_line() {
    let e = error_of("\n\n  hello world\n");
    assert_eq!((e.line, e.column), (3, 3));
    assert!(e.message.contains("unknown summary format"), "{e}");
    assert_eq!(error_of("").line, 1);
}

#[test]
fn broken_torchsummary_row_points_at_the_bad_cell() {
    let text = "---\n        Layer (type)               Output Shape         Param #\n====\n            Conv2d-1           [-1, 32, 26, 26]             320\n            Linear-2           [-1, x]             10\n====\n";
    let e = error_of(text);
    assert_eq!(e.line, 5);
    // Reading stops after `[-1`: the list cannot go on with `, x`.
    assert_eq!(e.column, 35, "{e}");
}

#[test]
fn torchinfo_rows_need_the_header_columns() {
    let text = "Layer (type:depth-idx)   Input Shape   Output Shape   Param #\n====\nNet   [1, 3]   [1, 2]   --\n├─Linear: 1-1   [1, 3]   8\n====\n";
    let e = error_of(text);
    assert_eq!(e.line, 4);
    assert!(e.message.contains("expected 3 columns"), "{e}");
}

#[test]
fn a_torchinfo_header_starting_with_a_known_title_is_refused() {
    let e = error_of("Layer (type:depth-idx)\n====\n");
    assert!(e.message.contains("Output Shape"), "{e}");
    let e =
        error_of("Output Shape   Layer (type:depth-idx)   Param #\n====\nNet   [1]   --\n====\n");
    assert_eq!(e.line, 1, "{e}");
}

#[test]
fn unclosed_module_print_says_what_is_open() {
    let e = error_of(
        "Net(\n  (body): Sequential(\n    (fc): Linear(in_features=2, out_features=2, bias=True), 6 params\n",
    );
    assert_eq!(e.line, 3);
    assert!(e.message.contains("`Sequential` opened on line 2"), "{e}");
    let e = error_of("Net(\n  (fc) Linear(in_features=2)\n)\n");
    assert_eq!((e.line, e.column), (2, 7), "{e}");
}

#[test]
fn a_print_nested_too_deep_is_refused_where_it_goes_too_deep() {
    // A million levels (about 8 MiB) took hours when each line looked at
    // every module around it; refused where it passes the limit.
    let mut text = String::from("Net(\n");
    for _ in 0..1_000_000 {
        text.push_str("(a): ModuleList(\n");
    }
    let e = error_of(&text);
    assert_eq!(e.line, 1001, "{e}");
    assert!(e.message.contains("at most 1000 deep"), "{e}");
    // Up to the limit, every level counts.
    let mut text = String::from("Net(\n");
    for _ in 0..999 {
        text.push_str("(a): 2 x ModuleList(\n");
    }
    text.push_str("(fc): Linear(in_features=2, out_features=2, bias=True), 6 params\n");
    text.push_str(&")\n".repeat(1000));
    let summary = Summary::parse(&text).unwrap();
    assert_eq!(summary.features.params_total, u64::MAX);
}

#[test]
fn huge_numbers_are_errors_not_panics() {
    let text = "Layer (type)   Output Shape   Param #\n====\nLinear-1   [-1, 99999999999999999999999]   1\n====\n";
    assert_eq!(error_of(text).line, 3);
}

#[test]
fn no_input_panics() {
    // Every prefix of every real summary either parses or is an error.
    // So does every text with one character replaced by something odd.
    for name in ["mnist_cnn_64.model", "dlrm.model", "xlnet_base_cased.model"] {
        let text = workload(name);
        for cut in (0..text.len()).step_by(97) {
            if text.is_char_boundary(cut) {
                let _ = Summary::parse(&text[..cut]);
            }
        }
        let chars: Vec<char> = text.chars().collect();
        for (k, at) in (0..chars.len()).step_by(31).enumerate() {
            let mut mutated = chars.clone();
            mutated[at] = ['(', ')', '[', ']', ',', '-', '9', '\n', 'é', ':'][k % 10];
            let _ = Summary::parse(&mutated.iter().collect::<String>());
        }
    }
}

/// Found by `tests/properties.rs`: a repeat count is the user's number, and
/// each copy used to be added one by one, so this took longer than the
/// age of the universe (and nested repeats overflowed their product).
#[test]
fn huge_repeat_counts_are_counted_at_once() {
    let text = "Net(\n  (a): 18446744073709551615 x Block(\n    (b): 3 x Inner(\n      \
                (fc): 2 x Linear(in_features=8, out_features=8, bias=True), 72 params\n    \
                ), 0 params\n  ), 0 params\n)\n";
    let start = std::time::Instant::now();
    let f = Summary::parse(text).unwrap().features;
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(f.layers.linear, u32::MAX);
    assert_eq!(f.params_total, u64::MAX);
    // A repeat of zero adds nothing.
    let text = "Net(\n  (a): 0 x Linear(in_features=8, out_features=8, bias=True), 72 params\n)\n";
    let f = Summary::parse(text).unwrap().features;
    assert_eq!((f.layers.linear, f.params_total), (0, 0));
}

/// Found by `tests/properties.rs`: parameter and activation sums overflowed
/// (a panic in debug builds, a wrap to a small, under-estimating number in
/// release builds) when rows held counts near `u64::MAX`.
#[test]
fn huge_counts_saturate_instead_of_overflowing() {
    let text = "Layer (type)   Output Shape   Param #\n====\n\
                Linear-1   [-1, 4294967296, 4294967296]   18,446,744,073,709,551,615\n\
                Linear-2   [-1, 4294967296, 4294967296]   18,446,744,073,709,551,615\n====\n";
    let f = Summary::parse(text).unwrap().features;
    assert_eq!(f.params_total, u64::MAX);
    assert_eq!(f.activations_per_sample, Some(u64::MAX));
    let text = "Layer (type:depth-idx)   Output Shape   Param #\n====\n\
                Net   [1, 4294967296, 4294967296]   --\n\
                Conv2d: 1-1   [1, 4294967296, 4294967296]   18446744073709551615\n\
                ReLU: 1-2   [1, 4294967296, 4294967296]   1\n====\n";
    let f = Summary::parse(text).unwrap().features;
    assert_eq!(f.params_total, u64::MAX);
    assert_eq!(f.activations_per_sample, Some(u64::MAX));
}

/// A small torchinfo tree whose two rows hold parameters, with a footer
/// whose forward/backward pass size is `pass_mb`.
fn torchinfo_tree(pass_mb: &str) -> String {
    format!(
        "\
==========================================================================================
Layer (type:depth-idx)                   Output Shape              Param #
==========================================================================================
Net                                      [2, 10]                   --
├─Block: 1-1                             [2, 64, 8, 8]             38,720
├─Linear: 1-2                            [2, 10]                   40,970
==========================================================================================
Total params: 79,690
Trainable params: 79,690
Non-trainable params: 0
Total mult-adds (M): 1.00
==========================================================================================
Input size (MB): 0.02
Forward/backward pass size (MB): {pass_mb}
Params size (MB): 0.32
Estimated Total Size (MB): 1.39
==========================================================================================
"
    )
}

#[test]
fn a_torchinfo_tree_that_hides_layers_is_scaled_to_its_footer() {
    // The rows show 4,106 outputs per sample in layers with parameters;
    // the footer counts 1.05 MB / 2 (gradients) / 4 bytes / batch 2 =
    // 65,625, because `Block` hides its layers (torchinfo's default depth).
    let s = Summary::parse(&torchinfo_tree("1.05")).unwrap();
    assert_eq!(
        s.features.summary_batch, None,
        "the footer's batch is its own"
    );
    let acts = s.features.activations_per_sample.unwrap();
    assert!((65_620..=65_625).contains(&acts), "{acts}");
    assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
    assert!(
        s.notes[0].contains("the tree hides layers"),
        "{:?}",
        s.notes
    );
    // The same size in other units and with a thousands separator.
    for other in ["0.00105 GB", "1,050 KB"] {
        let (value, unit) = other.split_once(' ').unwrap();
        let text = torchinfo_tree(value).replace("(MB): ", &format!("({unit}): "));
        let scaled = Summary::parse(&text).unwrap();
        assert_eq!(
            scaled.features.activations_per_sample,
            Some(acts),
            "{other}"
        );
    }
    // A footer that agrees with the rows (0.07 MB is 4,375 per sample,
    // rounding) changes nothing.
    let whole = Summary::parse(&torchinfo_tree("0.07")).unwrap();
    assert_eq!(whole.features.activations_per_sample, Some(4106));
    assert!(whole.notes.is_empty(), "{:?}", whole.notes);
}

/// torchvision's ViT prints its blocks as `encoder_layer_N` children of a
/// `Sequential`, with attention as one `MultiheadAttention`; on an H200
/// its module print was estimated at a third of its peak while no block
/// was counted (docs/measured-h200.md).
#[test]
fn blocks_side_by_side_in_a_sequential_are_counted() {
    let block = |n: usize| {
        format!(
            "      (encoder_layer_{n}): EncoderBlock(
        (ln_1): LayerNorm((64,), eps=1e-06, elementwise_affine=True)
        (self_attention): MultiheadAttention(
          (out_proj): NonDynamicallyQuantizableLinear(in_features=64, out_features=64, bias=True)
        )
        (mlp): MLPBlock(
          (0): Linear(in_features=64, out_features=256, bias=True)
          (1): GELU(approximate='none')
          (3): Linear(in_features=256, out_features=64, bias=True)
        )
      )
"
        )
    };
    let text = format!(
        "VisionTransformer(
  (conv_proj): Conv2d(3, 64, kernel_size=(16, 16), stride=(16, 16))
  (encoder): Encoder(
    (layers): Sequential(
{}{}{}    )
    (ln): LayerNorm((64,), eps=1e-06, elementwise_affine=True)
  )
  (heads): Sequential(
    (head): Linear(in_features=64, out_features=10, bias=True)
  )
)
",
        block(0),
        block(1),
        block(2)
    );
    let t = Summary::parse(&text).unwrap().features.transformer.unwrap();
    assert_eq!((t.hidden, t.blocks, t.intermediate), (64, 3, Some(256)));
}

/// A module called twice prints as `(recursive)` the second time, and the
/// footer counts both calls: a whole tree with one is not scaled.
#[test]
fn a_recursive_row_counts_as_a_layer_the_footer_sees() {
    let text = "\
==========================================================================================
Layer (type:depth-idx)                   Output Shape              Param #
==========================================================================================
Net                                      [2, 10]                   --
├─Linear: 1-1                            [2, 4096]                 1,052,672
├─Linear: 1-2                            [2, 4096]                 (recursive)
├─Linear: 1-3                            [2, 10]                   40,970
==========================================================================================
Total params: 1,093,642
Trainable params: 1,093,642
Non-trainable params: 0
Total mult-adds (M): 2.19
==========================================================================================
Input size (MB): 0.00
Forward/backward pass size (MB): 0.13
Params size (MB): 4.37
Estimated Total Size (MB): 4.50
==========================================================================================
";
    let s = Summary::parse(text).unwrap();
    assert_eq!(s.features.activations_per_sample, Some(8202));
    assert!(s.notes.is_empty(), "{:?}", s.notes);
}

/// torchinfo prints frozen parameters in parentheses, as a fine-tuned
/// model's backbone shows: they are read, not refused.
#[test]
fn torchinfo_reads_frozen_parameters() {
    let text = torchinfo_tree("1.05").replace("38,720", "(38,720)");
    let s = Summary::parse(&text).unwrap();
    assert_eq!(s.features.params_total, 79_690);
    assert_eq!(s.features.layers.linear, 1);
}

/// `print(model)` and a parameter count, as the H200 runs saved them: no
/// module says its parameters, so the footer's count is all there is.
#[test]
fn a_plain_module_print_takes_its_footer_without_a_note() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/measured-h200/summaries/bert-base.print.txt");
    let s = Summary::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(s.features.params_total, 109_483_778);
    assert!(s.notes.is_empty(), "{:?}", s.notes);
}
