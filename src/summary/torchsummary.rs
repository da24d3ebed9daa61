//! `torchsummary` tables:
//!
//! ```text
//!         Layer (type)               Output Shape         Param #
//! ================================================================
//!             Conv2d-1           [-1, 32, 26, 26]             320
//! ================================================================
//! Total params: 1,199,882
//! ```
//!
//! The table is flat: block modules (`Bottleneck`, `InvertedResidual`)
//! appear after their children with the output of their last child. A row
//! whose kind is unknown and which holds no parameters is taken for such a
//! block and not counted, so activations are not counted twice.

use nom::{
    IResult, Parser,
    character::complete::{char, digit1, space0, space1},
    combinator::eof,
};

use super::{
    FeatureBuilder, LayerKind, ModelFeatures, SummaryError, body_rows, count, footer_totals,
    numbered, per_sample, rule_below_header, shapes, type_name,
};

struct Row<'a> {
    name: &'a str,
    shapes: Vec<Vec<i64>>,
    params: u64,
}

fn row(input: &str) -> IResult<&str, Row<'_>> {
    let (i, _) = space0(input)?;
    let (i, name) = type_name(i)?;
    let (i, _) = (char('-'), digit1, space1).parse(i)?;
    let (i, shapes) = shapes(i)?;
    let (i, _) = space1(i)?;
    let (i, params) = count(i)?;
    let (i, _) = (space0, eof).parse(i)?;
    Ok((
        i,
        Row {
            name,
            shapes,
            params,
        },
    ))
}

/// Reads a torchsummary table.
pub(super) fn parse(text: &str) -> Result<ModelFeatures, SummaryError> {
    let mut lines = numbered(text).skip_while(|(_, l)| !l.trim_start().starts_with("Layer (type)"));
    let Some((header_no, header)) = lines.next() else {
        return Err(SummaryError {
            line: 1,
            column: 1,
            message: "expected a `Layer (type)` header".into(),
        });
    };
    for column in ["Output Shape", "Param #"] {
        if !header.contains(column) {
            return Err(SummaryError::at(
                header_no,
                header,
                "",
                format!("expected a `{column}` column in the header"),
            ));
        }
    }
    rule_below_header(&mut lines, header_no, header, "table")?;
    let mut builder = FeatureBuilder::default();
    let mut batch = None;
    let mut rows = 0;
    for item in body_rows(&mut lines, row, "expected a row `Name-N  [shape]  params`") {
        let (_, _, r) = item?;
        if rows == 0 {
            batch = r
                .shapes
                .first()
                .and_then(|s| s.first())
                .and_then(|b| u64::try_from(*b).ok());
        }
        rows += 1;
        let kind = LayerKind::classify(r.name);
        if matches!(kind, LayerKind::Other | LayerKind::Container) && r.params == 0 {
            continue;
        }
        builder.add_named(r.name, "", Some(per_sample(&r.shapes)), r.params, 1);
    }
    if rows == 0 {
        return Err(SummaryError {
            line: header_no,
            column: 1,
            message: "the table lists no layers".into(),
        });
    }
    let mut totals = footer_totals(lines)?;
    totals.summary_batch = batch;
    Ok(builder.finish(totals))
}
