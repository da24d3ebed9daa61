//! `torchinfo` trees:
//!
//! ```text
//! Layer (type:depth-idx)                   Input Shape     Output Shape    Param #
//! ===================================================================================
//! DLRM_Net                                 [32768, 13]     [32768, 1]      --
//! ├─Sequential: 1-1                        [32768, 13]     [32768, 64]     --
//! │    └─Linear: 2-1                       [32768, 13]     [32768, 512]    7,168
//! ```
//!
//! The columns are named by the header (torchinfo can show more or fewer),
//! and a row is a leaf layer when the next row is not deeper: only leaves
//! are counted, so a container's output never counts twice.
//!
//! torchinfo shows three levels by default, so a deeper model's tree stops
//! at containers (`_DenseLayer`, `EncoderBlock`) whose layers are hidden.
//! Its footer still counts every layer: `Forward/backward pass size` is
//! twice the output bytes of all layers with parameters, at any depth. When
//! that says more than 1.2 times what the rows do, the rows' activations
//! are scaled up to it. Measured on an H200 (docs/measured-h200.md),
//! DenseNet-121's rows showed a fifth of what its footer counts and
//! MobileNetV3's an eighth.

use nom::{
    IResult, Parser,
    branch::alt,
    bytes::complete::{tag, take_while},
    character::complete::{char, space1},
    combinator::{eof, map, opt},
    sequence::delimited,
};

use super::{
    FeatureBuilder, ModelFeatures, SummaryError, body_rows, count, depth_idx, footer_totals,
    numbered, per_sample, rule_below_header, shapes, tally, type_name,
};

/// One cell of a row after the layer name.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Shapes(Vec<Vec<i64>>),
    Count(u64),
    /// `--`: nothing to show.
    Empty,
    /// `(recursive)`: a module used again; its parameters are counted at
    /// its first use.
    Recursive,
}

struct Row<'a> {
    name: &'a str,
    depth: u64,
    cells: Vec<Cell>,
}

fn cell(input: &str) -> IResult<&str, Cell> {
    alt((
        map(shapes, Cell::Shapes),
        map(tag("--"), |_| Cell::Empty),
        map(tag("(recursive)"), |_| Cell::Recursive),
        // `(9,408)`: parameters that are frozen (`requires_grad=False`), as
        // torchinfo prints a fine-tuned model's backbone. They take memory
        // all the same; the footer's `Trainable params` says how many learn.
        map(delimited(char('('), count, char(')')), Cell::Count),
        map(count, Cell::Count),
    ))
    .parse(input)
}

fn row(input: &str) -> IResult<&str, Row<'_>> {
    // Tree drawing: box characters in unicode mode, `|`, `+` and `-` in
    // ASCII mode.
    let (i, _) = take_while(|c: char| " │├└─|+`-".contains(c)).parse(input)?;
    let (i, name) = type_name(i)?;
    let (i, depth) = opt(depth_idx).parse(i)?;
    let mut cells = Vec::new();
    let mut i = i;
    loop {
        let (j, _) = take_while(|c: char| c == ' ' || c == '\t').parse(i)?;
        if eof::<_, nom::error::Error<&str>>(j).is_ok() {
            i = j;
            break;
        }
        let (j, _) = space1(i)?;
        let (j, c) = cell(j)?;
        cells.push(c);
        i = j;
    }
    Ok((
        i,
        Row {
            name,
            depth: depth.unwrap_or(0),
            cells,
        },
    ))
}

/// The header's column titles, split at runs of two or more spaces.
fn columns(header: &str) -> Vec<&str> {
    header
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// Reads a torchinfo tree, with a note where its footer corrected it.
pub(super) fn parse(text: &str) -> Result<(ModelFeatures, Vec<String>), SummaryError> {
    let mut lines =
        numbered(text).skip_while(|(_, l)| !l.trim_start().starts_with("Layer (type:depth-idx)"));
    let Some((header_no, header)) = lines.next() else {
        return Err(SummaryError {
            line: 1,
            column: 1,
            message: "expected a `Layer (type:depth-idx)` header".into(),
        });
    };
    let titles = columns(header);
    let position = |title: &str| {
        titles
            .iter()
            .position(|t| *t == title)
            // Cells are counted after the name column; a header whose
            // first column bears the title is malformed.
            .and_then(|p| p.checked_sub(1))
            .ok_or_else(|| {
                SummaryError::at(
                    header_no,
                    header,
                    "",
                    format!("expected a `{title}` column in the header"),
                )
            })
    };
    let output_col = position("Output Shape")?;
    let param_col = position("Param #")?;
    let input_col = position("Input Shape").ok();
    rule_below_header(&mut lines, header_no, header, "tree")?;
    let mut rows = Vec::new();
    let expected = "expected a row `Name: depth-idx  [shape] ...  params`";
    for item in body_rows(&mut lines, row, expected) {
        let (number, line, r) = item?;
        if r.cells.len() != titles.len() - 1 {
            return Err(SummaryError::at(
                number,
                line,
                "",
                format!(
                    "expected {} columns after the layer name, as in the header, found {}",
                    titles.len() - 1,
                    r.cells.len()
                ),
            ));
        }
        rows.push(r);
    }
    let Some(root) = rows.first() else {
        return Err(SummaryError {
            line: header_no,
            column: 1,
            message: "the tree lists no layers".into(),
        });
    };
    let root_input = input_col.and_then(|c| match &root.cells[c] {
        Cell::Shapes(s) => s.first().cloned(),
        _ => None,
    });
    let mut builder = FeatureBuilder::default();
    // Per-sample outputs of the shown leaves that hold parameters (a
    // `(recursive)` row is a module with parameters called again): what
    // the footer's forward/backward size counts, had nothing been hidden.
    let mut param_outputs = 0u64;
    // The leading dimension of the leaves' outputs, by how often it leads:
    // the batch that `per_sample` takes off, and the footer's divisor.
    let mut leading: Vec<(i64, u64)> = Vec::new();
    for (k, r) in rows.iter().enumerate() {
        let is_leaf = rows.get(k + 1).is_none_or(|next| next.depth <= r.depth);
        if !is_leaf {
            continue;
        }
        let outputs = match &r.cells[output_col] {
            Cell::Shapes(s) => Some(per_sample(s)),
            _ => None,
        };
        let params = match r.cells[param_col] {
            Cell::Count(n) => n,
            _ => 0,
        };
        if params > 0 || r.cells[param_col] == Cell::Recursive {
            param_outputs = param_outputs.saturating_add(outputs.unwrap_or(0));
        }
        if let Cell::Shapes(s) = &r.cells[output_col] {
            for first in s.iter().filter_map(|dims| dims.first()) {
                tally(&mut leading, *first, MAX_LEADING);
            }
        }
        builder.add_named(r.name, "", outputs, params, 1);
    }
    let footer: Vec<(usize, &str)> = lines.collect();
    let mut totals = footer_totals(footer.iter().copied())?;
    if let Some(dims) = root_input {
        totals.summary_batch = dims.first().and_then(|b| u64::try_from(*b).ok());
        totals.input_shape = Some(dims.iter().skip(1).map(|d| d.unsigned_abs()).collect());
    }
    // torchinfo's default columns have no input shape: the leaves' most
    // common leading dimension is then the batch the footer counts.
    let footer_batch = totals.summary_batch.or_else(|| {
        leading
            .iter()
            .max_by_key(|(_, n)| *n)
            .and_then(|(d, _)| u64::try_from(*d).ok())
    });
    let mut features = builder.finish(totals);
    let mut notes = Vec::new();
    let pass_mb = footer.iter().find_map(|(_, line)| pass_size_mb(line));
    if let (Some(mb), Some(batch)) = (pass_mb, footer_batch.filter(|b| *b > 0)) {
        let element_bytes = if super::mentions_half_precision(text) {
            2.0
        } else {
            4.0
        };
        // Twice (gradients) the output bytes of every layer with
        // parameters, in units of 10^6 bytes, for the whole batch.
        let hidden = mb * 1e6 / 2.0 / element_bytes / batch as f64;
        if hidden.is_finite() && hidden > HIDDEN_LAYERS_RATIO * param_outputs as f64 {
            scale_to_footer(&mut features, hidden, param_outputs);
            notes.push(format!(
                "the tree hides layers: its footer's forward/backward pass size ({mb} MB) \
                 counts {hidden:.0} outputs per sample in layers with parameters where its \
                 rows show {param_outputs}; activations scaled to match"
            ));
        }
    }
    Ok((features, notes))
}

/// The footer's `Forward/backward pass size (MB): 180.54` in MB (10^6
/// bytes). torchinfo 1.8 prints MB; later versions may print other units
/// and thousands separators (`(GB): 1,234.56`), read alike.
fn pass_size_mb(line: &str) -> Option<f64> {
    let rest = line
        .trim_start()
        .strip_prefix("Forward/backward pass size (")?;
    let (unit, value) = rest.split_once("):")?;
    let scale = match unit {
        "KB" => 1e-3,
        "MB" => 1.0,
        "GB" => 1e3,
        "TB" => 1e6,
        _ => return None,
    };
    let mb = value.trim().replace(',', "").parse::<f64>().ok()? * scale;
    (mb.is_finite() && mb > 0.0).then_some(mb)
}

/// Distinct leading dimensions kept while looking for the batch: a real
/// tree has one or two, and a hostile one must not make the search slow.
const MAX_LEADING: usize = 8;

/// How much more the footer must count than the rows show before the tree
/// is taken to hide layers: the footer's MB are rounded, and a model whose
/// every layer is shown agrees with its rows to well under this.
const HIDDEN_LAYERS_RATIO: f64 = 1.2;

/// Scales every kind of activation by what the footer counts in layers with
/// parameters (`hidden`) over what the rows show (`shown`); with none
/// shown, the footer's count is all there is and goes to `other`.
fn scale_to_footer(features: &mut ModelFeatures, hidden: f64, shown: u64) {
    let a = &mut features.activations_by_kind;
    if shown == 0 {
        a.other = a.other.saturating_add(hidden as u64);
    } else {
        let factor = hidden / shown as f64;
        for kind in [
            &mut a.conv,
            &mut a.linear,
            &mut a.batch_norm,
            &mut a.activation,
            &mut a.dropout,
            &mut a.other,
        ] {
            // Float to integer casts saturate.
            *kind = (*kind as f64 * factor) as u64;
        }
    }
    features.activations_per_sample = Some(a.total());
}
