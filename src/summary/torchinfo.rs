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

use nom::{
    IResult, Parser,
    branch::alt,
    bytes::complete::{tag, take_while},
    character::complete::space1,
    combinator::{eof, map, opt},
};

use super::{
    FeatureBuilder, ModelFeatures, SummaryError, body_rows, count, depth_idx, footer_totals,
    numbered, per_sample, rule_below_header, shapes, type_name,
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

/// Reads a torchinfo tree.
pub(super) fn parse(text: &str) -> Result<ModelFeatures, SummaryError> {
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
        builder.add_named(r.name, "", outputs, params, 1);
    }
    let mut totals = footer_totals(lines)?;
    if let Some(dims) = root_input {
        totals.summary_batch = dims.first().and_then(|b| u64::try_from(*b).ok());
        totals.input_shape = Some(dims.iter().skip(1).map(|d| d.unsigned_abs()).collect());
    }
    Ok(builder.finish(totals))
}
