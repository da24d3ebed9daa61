//! PyTorch module prints annotated with parameter counts, the way Hugging
//! Face models are commonly dumped:
//!
//! ```text
//! BertForMaskedLM(
//!   (bert): BertModel(
//!       (query): Linear(in_features=768, out_features=768, bias=True), 590,592 params
//!       (0-11): 12 x BertLayer(
//!   ), 107,719,680 params
//! ), 130,638,728 params
//! ===========================
//! Total params: 130,638,728
//! ```
//!
//! There are no shapes, so there are no activation counts: the features
//! carry a [`TransformerShape`] instead (widths, blocks, vocabulary) for
//! the analytic estimator. The `, N params` annotations are optional; a
//! plain module print reads too, with parameters from the footer.

use nom::{
    IResult, Parser,
    bytes::complete::{tag, take_until},
    character::complete::{char, space0, space1},
    combinator::{eof, opt},
    sequence::delimited,
};

use super::{
    FeatureBuilder, LayerKind, ModelFeatures, SummaryError, Totals, TransformerShape, count,
    footer_totals, is_rule, numbered, stopped_at, tally, type_name,
};

/// One line of a module print.
#[derive(Debug, PartialEq)]
enum Line<'a> {
    /// `(key): Type(` or, for the root, `Type(`; `times` for the compact
    /// repeat form `(0-11): 12 x BertLayer(`.
    Open {
        key: &'a str,
        name: &'a str,
        times: u64,
    },
    /// `(key): Type(args)[, N params]`.
    Leaf {
        key: &'a str,
        name: &'a str,
        args: &'a str,
        times: u64,
        params: Option<u64>,
    },
    /// `)[, N params]`.
    Close { params: Option<u64> },
}

/// True for the first line of a module print: `Name(` alone.
pub(super) fn is_root_line(line: &str) -> bool {
    matches!(open_root(line.trim()), Ok((_, Line::Open { .. })))
}

fn open_root(input: &str) -> IResult<&str, Line<'_>> {
    let (i, name) = type_name(input)?;
    let (i, _) = (char('('), space0, eof).parse(i)?;
    Ok((
        i,
        Line::Open {
            key: "",
            name,
            times: 1,
        },
    ))
}

fn params_note(input: &str) -> IResult<&str, Option<u64>> {
    let (i, note) = opt(delimited(
        (char(','), space0),
        count,
        (space1, tag("params")),
    ))
    .parse(input)?;
    let (i, _) = (space0, eof).parse(i)?;
    Ok((i, note))
}

/// The arguments of a call up to its matching `)`: `((768,), eps=1e-12)`.
fn balanced_args(input: &str) -> IResult<&str, &str> {
    let mut depth = 0usize;
    for (at, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Ok((&input[at + 1..], &input[..at])),
            ')' => depth -= 1,
            _ => {}
        }
    }
    Err(nom::Err::Error(nom::error::Error::new(
        input,
        nom::error::ErrorKind::Char,
    )))
}

fn line(input: &str) -> IResult<&str, Line<'_>> {
    let (i, _) = space0(input)?;
    if let Some(rest) = i.strip_prefix(')') {
        let (rest, params) = params_note(rest)?;
        return Ok((rest, Line::Close { params }));
    }
    let (i, key) = delimited(char('('), take_until(")"), char(')')).parse(i)?;
    let (i, _) = (char(':'), space0).parse(i)?;
    let (i, times) = opt((count, space1, char('x'), space1)).parse(i)?;
    let times = times.map_or(1, |(n, ..)| n);
    let (i, name) = type_name(i)?;
    let (i, _) = char('(').parse(i)?;
    if let Ok((rest, _)) = (space0::<_, nom::error::Error<&str>>, eof).parse(i) {
        return Ok((rest, Line::Open { key, name, times }));
    }
    let (i, args) = balanced_args(i)?;
    let (i, params) = params_note(i)?;
    Ok((
        i,
        Line::Leaf {
            key,
            name,
            args,
            times,
            params,
        },
    ))
}

/// The integer after `key=` in call arguments, e.g. `out_features=768`.
fn keyword_arg(args: &str, key: &str) -> Option<u64> {
    let at = args.find(key)?;
    let rest = args[at + key.len()..].strip_prefix('=')?;
    count(rest.trim_start()).ok().map(|(_, n)| n)
}

/// The n-th positional integer argument: `Embedding(28996, 768, ...)`.
fn positional_arg(args: &str, n: usize) -> Option<u64> {
    let part = args.split(',').nth(n)?.trim();
    count(part)
        .ok()
        .filter(|(rest, _)| rest.is_empty())
        .map(|(_, v)| v)
}

/// A module that is open while reading its children.
struct Frame<'a> {
    name: &'a str,
    times: u64,
    /// How many times each module directly inside counts: the product of
    /// `times` here and in every frame around (kept, not recomputed per
    /// line: a print nested a million deep would cost a million squared).
    repeat: u64,
    /// Whether this is a `ModuleList` or inside one.
    in_list: bool,
    children: u64,
    /// The widest linear output anywhere inside.
    widest: u64,
    /// The run of containers of one class closed one after another
    /// directly inside (twelve `EncoderBlock`s in torchvision's ViT
    /// `Sequential`): its class, its length with repeats, and the widest
    /// linear output in its members.
    run: Option<(&'a str, u64, u64)>,
    number: usize,
}

/// What the transformer shape is gathered from.
#[derive(Default)]
struct ShapeEvidence {
    /// (input width, layers seen with it).
    linear_inputs: Vec<(u64, u64)>,
    widest_block_linear: Option<u64>,
    widest_linear: u64,
    largest_embedding: Option<u64>,
    /// Width of the largest embedding: the residual stream's, for models
    /// whose projections print no widths (GPT-2's `Conv1D()`).
    embedding_width: Option<u64>,
    position_rows: Option<u64>,
    longest_list: u64,
    /// A class name says attention materializes its scores: relative
    /// position attention, or an explicitly eager implementation.
    unfused_attention: bool,
}

/// Deepest nesting of modules read: real models nest a few dozen deep.
const MAX_DEPTH: usize = 1000;

/// Reads an annotated module print; also returns notes on inconsistencies.
pub(super) fn parse(text: &str) -> Result<(ModelFeatures, Vec<String>), SummaryError> {
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut builder = FeatureBuilder::default();
    let mut evidence = ShapeEvidence::default();
    let mut root_params = None;
    let mut lines = numbered(text).skip_while(|(_, l)| l.trim().is_empty());
    let mut last_number = 1;
    for (number, text_line) in lines.by_ref() {
        last_number = number;
        if stack.is_empty() && root_params.is_some() {
            if is_rule(text_line) || text_line.trim().is_empty() {
                break;
            }
            return Err(SummaryError::at(
                number,
                text_line,
                text_line.trim_start(),
                "expected the end of the module print (a `====` rule)",
            ));
        }
        if text_line.trim().is_empty() {
            continue;
        }
        let parsed = if stack.is_empty() {
            open_root(text_line.trim_start())
        } else {
            line(text_line)
        };
        let (_, parsed) = parsed.map_err(|e| {
            let expected = if stack.is_empty() {
                "expected the model's class name and `(`"
            } else {
                "expected `(name): Type(`, `(name): Type(args), N params` or `), N params`"
            };
            SummaryError::at(number, text_line, stopped_at(&e, text_line), expected)
        })?;
        let (repeat, in_list) = stack.last().map_or((1, false), |f| (f.repeat, f.in_list));
        match parsed {
            Line::Open { name, times, .. } => {
                if stack.len() >= MAX_DEPTH {
                    return Err(SummaryError::at(
                        number,
                        text_line,
                        text_line.trim_start(),
                        format!("expected modules nested at most {MAX_DEPTH} deep"),
                    ));
                }
                if let Some(parent) = stack.last_mut() {
                    parent.children = parent.children.saturating_add(times);
                }
                note_names(&mut builder, &mut evidence, name);
                stack.push(Frame {
                    name,
                    times,
                    repeat: repeat.saturating_mul(times),
                    in_list: in_list || name == "ModuleList",
                    children: 0,
                    widest: 0,
                    run: None,
                    number,
                });
            }
            Line::Leaf {
                key,
                name,
                args,
                times,
                params,
            } => {
                if let Some(parent) = stack.last_mut() {
                    parent.children = parent.children.saturating_add(times);
                }
                note_names(&mut builder, &mut evidence, name);
                let in_block = in_list;
                let kind = builder.add_named(
                    name,
                    args,
                    None,
                    params.unwrap_or(0),
                    repeat.saturating_mul(times),
                );
                let out = note_shape(&mut evidence, kind, key, args, in_block);
                if let Some(parent) = stack.last_mut() {
                    parent.widest = parent.widest.max(out);
                }
            }
            Line::Close { params } => {
                let Some(frame) = stack.pop() else {
                    return Err(SummaryError::at(number, text_line, "", "unmatched `)`"));
                };
                if frame.name == "ModuleList" {
                    evidence.longest_list = evidence.longest_list.max(frame.children);
                }
                if let Some(parent) = stack.last_mut() {
                    parent.widest = parent.widest.max(frame.widest);
                    note_run(&mut evidence, parent, &frame);
                }
                if stack.is_empty() {
                    root_params = Some(params);
                }
            }
        }
    }
    if let Some(open) = stack.last() {
        return Err(SummaryError {
            line: last_number,
            column: 1,
            message: format!(
                "the text ends inside `{}` opened on line {}: expected `)`",
                open.name, open.number
            ),
        });
    }
    let footer = footer_totals(lines)?;
    let mut notes = Vec::new();
    let tree_total = root_params.flatten().unwrap_or(builder.params_in_layers());
    let totals = match footer.params_total {
        Some(stated) if stated != tree_total => {
            let larger = stated.max(tree_total);
            // A plain print (no `, N params` anywhere) adds up to nothing:
            // its footer is all there is, not a disagreement.
            if tree_total > 0 {
                notes.push(format!(
                    "the footer says {stated} parameters but the modules add up to \
                     {tree_total}; using the larger, {larger}"
                ));
            }
            let frozen = stated.saturating_sub(footer.params_trainable.unwrap_or(stated));
            Totals {
                params_total: Some(larger),
                params_trainable: Some(larger - frozen),
                ..Totals::default()
            }
        }
        Some(_) => footer,
        None => Totals {
            params_total: Some(tree_total),
            ..Totals::default()
        },
    };
    let mut features = builder.finish(totals);
    if features.family == super::Family::Transformer {
        features.transformer = shape_from(&evidence);
    }
    Ok((features, notes))
}

/// Class-name marks of attention that keeps the sequence x sequence
/// scores for backward. Since PyTorch 2.0 and transformers 4.36,
/// attention runs through `scaled_dot_product_attention` (fused; the class
/// prints as `BertSdpaSelfAttention` in transformers 4.36-4.47 and as plain
/// `BertSelfAttention`, `GPT2Attention` from 4.48 on, the implementation
/// being chosen at run time), so a name without `Sdpa` says nothing.
/// Relative-position attention (XLNet, Transformer-XL, DeBERTa's
/// disentangled attention) adds position terms to the scores and has no
/// fused path; `Eager` names the unfused implementation itself.
const UNFUSED_ATTENTION: [&str; 3] = ["relative", "disentangled", "eager"];

fn note_names(builder: &mut FeatureBuilder, evidence: &mut ShapeEvidence, name: &str) {
    let lower = name.to_ascii_lowercase();
    if lower.contains("attention") || lower.contains("attn") {
        builder.saw_attention();
    }
    if UNFUSED_ATTENTION.iter().any(|mark| lower.contains(mark)) {
        evidence.unfused_attention = true;
    }
}

/// Blocks of one class closed one after another, whatever holds them
/// (`ModuleList` in Hugging Face models, `Sequential` in torchvision's ViT
/// and Swin): two or more are a transformer's blocks, and the widest linear
/// output in them its feed-forward width. Only the run just before is kept,
/// so a container of many classes costs nothing more.
fn note_run<'a>(evidence: &mut ShapeEvidence, parent: &mut Frame<'a>, closed: &Frame<'a>) {
    let run = match parent.run {
        Some((class, length, widest)) if class == closed.name => (
            class,
            length.saturating_add(closed.times),
            widest.max(closed.widest),
        ),
        _ => (closed.name, closed.times, closed.widest),
    };
    parent.run = Some(run);
    let (_, length, widest) = run;
    if length >= 2 {
        evidence.longest_list = evidence.longest_list.max(length);
        if widest > 0 {
            evidence.widest_block_linear =
                Some(evidence.widest_block_linear.unwrap_or(0).max(widest));
        }
    }
}

/// Notes what a leaf says of the transformer's shape; returns its output
/// width where it is a linear layer (0 otherwise).
fn note_shape(
    evidence: &mut ShapeEvidence,
    kind: LayerKind,
    key: &str,
    args: &str,
    in_block: bool,
) -> u64 {
    match kind {
        // GPT-2's projections are `Conv1D(nf=3840, nx=1280)`: a linear
        // layer with output width `nf` and input width `nx`.
        LayerKind::Linear | LayerKind::Conv => {
            let (input, output) = if kind == LayerKind::Linear {
                ("in_features", "out_features")
            } else {
                ("nx", "nf")
            };
            if let Some(width) = keyword_arg(args, input) {
                tally(&mut evidence.linear_inputs, width, MAX_WIDTHS);
            }
            let out = keyword_arg(args, output).unwrap_or(0);
            evidence.widest_linear = evidence.widest_linear.max(out);
            if in_block && out > 0 {
                evidence.widest_block_linear =
                    Some(evidence.widest_block_linear.unwrap_or(0).max(out));
            }
            out
        }
        LayerKind::Embedding => {
            if let Some(rows) = positional_arg(args, 0) {
                if rows > evidence.largest_embedding.unwrap_or(0) {
                    evidence.largest_embedding = Some(rows);
                    evidence.embedding_width = positional_arg(args, 1);
                }
                // BERT's `position_embeddings`, GPT-2's `wpe`.
                if key.contains("position") || key == "wpe" {
                    evidence.position_rows = Some(rows);
                }
            }
            0
        }
        _ => 0,
    }
}

/// Distinct linear input widths kept while looking for the residual
/// stream's: a real model has a handful, and a hostile print must not make
/// each linear layer a long search.
const MAX_WIDTHS: usize = 64;

fn shape_from(evidence: &ShapeEvidence) -> Option<TransformerShape> {
    // The most common linear input width is the residual stream's; ties go
    // to the first seen.
    let hidden = evidence
        .linear_inputs
        .iter()
        .fold(None::<(u64, u64)>, |best, &(w, n)| match best {
            Some((_, m)) if m >= n => best,
            _ => Some((w, n)),
        })
        .map(|(w, _)| w)
        .or(evidence.embedding_width)?;
    Some(TransformerShape {
        hidden,
        blocks: evidence.longest_list,
        intermediate: evidence.widest_block_linear,
        vocab: evidence.largest_embedding,
        max_positions: evidence.position_rows,
        head_width: evidence.widest_linear,
        fused_attention: !evidence.unfused_attention,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_each_kind() {
        assert_eq!(
            line("    (bert): BertModel(").unwrap().1,
            Line::Open {
                key: "bert",
                name: "BertModel",
                times: 1
            }
        );
        assert_eq!(
            line("  (0-11): 12 x BertLayer(").unwrap().1,
            Line::Open {
                key: "0-11",
                name: "BertLayer",
                times: 12
            }
        );
        assert_eq!(
            line(
                "(LayerNorm): LayerNorm((768,), eps=1e-12, elementwise_affine=True), 1,536 params"
            )
            .unwrap()
            .1,
            Line::Leaf {
                key: "LayerNorm",
                name: "LayerNorm",
                args: "(768,), eps=1e-12, elementwise_affine=True",
                times: 1,
                params: Some(1536)
            }
        );
        assert_eq!(
            line("  ), 22,665,216 params").unwrap().1,
            Line::Close {
                params: Some(22_665_216)
            }
        );
        assert_eq!(line(")").unwrap().1, Line::Close { params: None });
    }

    #[test]
    fn arguments() {
        let args = "in_features=768, out_features=3072, bias=True";
        assert_eq!(keyword_arg(args, "in_features"), Some(768));
        assert_eq!(keyword_arg(args, "out_features"), Some(3072));
        assert_eq!(positional_arg("28996, 768, padding_idx=0", 0), Some(28996));
        assert_eq!(positional_arg("p=0.1", 0), None);
    }
}
