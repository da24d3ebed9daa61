//! The GPUMemNet training data (`mlp_data.csv`, `cnn_data.csv`) as
//! [`Example`]s: features built from each row's per-layer list by the same
//! [`FeatureBuilder`] that reads real summaries, and the measured peak.
//!
//! What the columns mean, checked on every row (see the tests): `Total
//! Parameters` is the sum of the per-layer parameters; `Total Activations`
//! is the sum of the per-layer output elements for one sample, activation
//! and dropout layers included; `Depth` is the number of linear layers of
//! an MLP and the number of convolutions of a CNN (its final linear layer
//! is not counted). The batch size is a separate column: activations are
//! per sample. The protocol of the published comparison is kept: all MLP
//! rows; CNN rows without the residual and dense shapes, `OOM_CRASH` rows
//! counted as 42000 MiB, broken rows (no layers, no memory) dropped.

use std::path::Path;

use nom::{
    IResult, Parser,
    bytes::complete::take_while,
    character::complete::{char, digit1, multispace0},
    combinator::{all_consuming, cut, map_res},
    multi::separated_list0,
    sequence::delimited,
};
use serde::Serialize;
use thiserror::Error;

use crate::summary::{Family, FeatureBuilder, LayerKind, ModelFeatures, Totals};

/// The constant part of every peak in the GPUMemNet data, MiB: its
/// smallest networks peak at about 1,400 MiB (the smallest MLP at 1,443),
/// which is what the CUDA context and library workspaces cost on the stack
/// that measured them. Current stacks load CUDA modules lazily and pay far
/// less: the prototype's real CIFAR jobs peak at 590 to 1,074 MiB in all.
/// Answers learned from the data are moved from this constant to the
/// configured `estimate.context_mib` (see [`super::Chain`]).
pub const MEASURED_CONTEXT_MIB: u64 = 1400;

/// Memory an `OOM_CRASH` row counts as: it needed more than the 40 GB GPU.
pub const OOM_CRASH_MIB: u64 = 42_000;

/// CNN shapes left out of the published protocol (their skip connections
/// keep activations alive in ways the features do not describe).
pub const LEFT_OUT_SHAPES: [&str; 2] = ["residual", "dense"];

/// One training row.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub features: ModelFeatures,
    pub batch_size: u64,
    /// Measured peak, MiB (`OOM_CRASH_MIB` for crashed runs).
    pub peak_mib: u64,
}

/// What loading kept and dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LoadReport {
    pub rows_read: usize,
    pub rows_used: usize,
    /// Rows of shapes the protocol leaves out.
    pub left_out_shapes: usize,
    /// Rows with no layers or no measured memory.
    pub broken: usize,
    /// Successful rows counted as `OOM_CRASH_MIB`.
    pub oom_crash: usize,
}

/// A data set that cannot be read.
#[derive(Debug, Error)]
pub enum DatasetError {
    #[error("cannot read {path}: {source} (the GPUMemNet data sits in data/gpumemnet)")]
    Open { path: String, source: csv::Error },
    #[error("{path}, record {record}: {message}")]
    Row {
        path: String,
        record: usize,
        message: String,
    },
}

/// The file name of a family's data set.
pub fn file_name(family: Family) -> Option<&'static str> {
    match family {
        Family::Mlp => Some("mlp_data.csv"),
        Family::Cnn => Some("cnn_data.csv"),
        Family::Transformer | Family::Other => None,
    }
}

/// Reads a family's data set from `dir` under the published protocol.
pub fn load(dir: &Path, family: Family) -> Result<(Vec<Example>, LoadReport), DatasetError> {
    let name = file_name(family).ok_or_else(|| DatasetError::Row {
        path: dir.display().to_string(),
        record: 0,
        message: format!("there is no training data for the {family} family"),
    })?;
    let path = dir.join(name);
    let shown = path.display().to_string();
    let mut reader = csv::Reader::from_path(&path).map_err(|source| DatasetError::Open {
        path: shown.clone(),
        source,
    })?;
    let header = reader
        .headers()
        .map_err(|source| DatasetError::Open {
            path: shown.clone(),
            source,
        })?
        .clone();
    let column = |title: &str| {
        header
            .iter()
            .position(|h| h == title)
            .ok_or_else(|| DatasetError::Row {
                path: shown.clone(),
                record: 0,
                message: format!("no `{title}` column"),
            })
    };
    let file_col = column("Filename")?;
    let layers_col = column("Activations-Params")?;
    let batch_col = column("Batch Size")?;
    let mem_col = column("Max GPU Memory (MiB)")?;
    let status_col = column("Status").ok();

    let mut examples = Vec::new();
    let mut report = LoadReport::default();
    for (k, record) in reader.records().enumerate() {
        let record_no = k + 1;
        let row_error = |message: String| DatasetError::Row {
            path: shown.clone(),
            record: record_no,
            message,
        };
        let record = record.map_err(|e| row_error(e.to_string()))?;
        report.rows_read += 1;
        let field = |c: usize| record.get(c).unwrap_or("");
        if family == Family::Cnn && LEFT_OUT_SHAPES.contains(&shape_of(field(file_col))) {
            report.left_out_shapes += 1;
            continue;
        }
        let layers = parse_layer_list(field(layers_col)).map_err(|column| {
            row_error(format!(
                "`Activations-Params`, character {column}: expected a list of (kind, activations, params)"
            ))
        })?;
        let batch_size: u64 = field(batch_col)
            .parse()
            .map_err(|_| row_error(format!("bad batch size `{}`", field(batch_col))))?;
        let measured: i64 = field(mem_col)
            .parse()
            .map_err(|_| row_error(format!("bad memory `{}`", field(mem_col))))?;
        let crashed = status_col.is_some_and(|c| field(c) == "OOM_CRASH");
        let peak_mib = if crashed {
            report.oom_crash += 1;
            OOM_CRASH_MIB
        } else if layers.is_empty() || measured <= 0 {
            report.broken += 1;
            continue;
        } else {
            measured.unsigned_abs()
        };
        examples.push(Example {
            features: features_of(&layers),
            batch_size,
            peak_mib,
        });
    }
    report.rows_used = examples.len();
    Ok((examples, report))
}

/// The network shape in a GPUMemNet file name (`..._arch:pyramid_...`).
fn shape_of(file_name: &str) -> &str {
    file_name
        .split('_')
        .find_map(|part| part.strip_prefix("arch:"))
        .unwrap_or("")
}

/// Features of a row, by the code path real summaries take.
pub fn features_of(layers: &[(&str, u64, u64)]) -> ModelFeatures {
    let mut builder = FeatureBuilder::default();
    for &(kind, activations, params) in layers {
        builder.add(LayerKind::classify(kind), Some(activations), params);
    }
    builder.finish(Totals::default())
}

/// A Python list literal of `(kind, activations, params)` tuples, as the
/// data sets store it: `[('linear', 1173, 2753031), ('ReLU', 1173, 0)]`.
/// On failure, gives the 1-based character where reading stopped.
pub fn parse_layer_list(text: &str) -> Result<Vec<(&str, u64, u64)>, usize> {
    fn number(i: &str) -> IResult<&str, u64> {
        map_res(digit1, str::parse::<u64>).parse(i)
    }
    fn entry(i: &str) -> IResult<&str, (&str, u64, u64)> {
        let (i, _) = (char('('), multispace0).parse(i)?;
        // Past `(` this is an entry: a failure is reported where it is,
        // not backtracked to the start of the list.
        cut(entry_body).parse(i)
    }
    fn entry_body(i: &str) -> IResult<&str, (&str, u64, u64)> {
        let comma = || (multispace0, char(','), multispace0);
        let (i, kind) = delimited(char('\''), take_while(|c| c != '\''), char('\'')).parse(i)?;
        let (i, _) = comma().parse(i)?;
        let (i, activations) = number(i)?;
        let (i, _) = comma().parse(i)?;
        let (i, params) = number(i)?;
        let (i, _) = (multispace0, char(')')).parse(i)?;
        Ok((i, (kind, activations, params)))
    }
    let list = delimited(
        (multispace0, char('['), multispace0),
        separated_list0((multispace0, char(','), multispace0), entry),
        (multispace0, char(']'), multispace0),
    );
    all_consuming(list)
        .parse(text)
        .map(|(_, v)| v)
        .map_err(|e| match e {
            nom::Err::Error(e) | nom::Err::Failure(e) => {
                text[..text.len() - e.input.len()].chars().count() + 1
            }
            nom::Err::Incomplete(_) => text.chars().count() + 1,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_lists() {
        assert_eq!(
            parse_layer_list("[('linear', 1173, 2753031), ('ReLU', 1173, 0)]"),
            Ok(vec![("linear", 1173, 2_753_031), ("ReLU", 1173, 0)])
        );
        assert_eq!(parse_layer_list("[]"), Ok(vec![]));
        assert_eq!(parse_layer_list("[('linear', 11, x)]"), Err(17));
        assert_eq!(parse_layer_list("[('linear', 1, 2)"), Err(18));
    }

    #[test]
    fn shapes_from_file_names() {
        assert_eq!(
            shape_of("input_channels:3_num_classes:453_depth:22_arch:uniform_base_filters:98.out"),
            "uniform"
        );
        assert_eq!(shape_of("nothing"), "");
    }

    fn data_dir() -> std::path::PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gpumemnet");
        assert!(
            dir.is_dir(),
            "{} is missing: the GPUMemNet data must sit in data",
            dir.display()
        );
        dir
    }

    /// The columns mean what the module says: checked on every row against
    /// the features computed from the per-layer lists.
    fn check_columns(name: &str, depth_of: impl Fn(&ModelFeatures) -> u32) {
        let path = data_dir().join(name);
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let header = reader.headers().unwrap().clone();
        let col = |t: &str| header.iter().position(|h| h == t).unwrap();
        let (layers, depth, acts, params) = (
            col("Activations-Params"),
            col("Depth"),
            col("Total Activations"),
            col("Total Parameters"),
        );
        let mut checked = 0;
        for record in reader.records() {
            let record = record.unwrap();
            let list = parse_layer_list(&record[layers]).unwrap();
            if list.is_empty() {
                continue;
            }
            let f = features_of(&list);
            assert_eq!(f.params_total.to_string(), &record[params]);
            assert_eq!(depth_of(&f).to_string(), &record[depth]);
            // Identity layers are not counted (they allocate nothing); the
            // data counts them.
            let identity: u64 = list
                .iter()
                .filter(|(k, ..)| *k == "Identity")
                .map(|(_, a, _)| a)
                .sum();
            let total = f.activations_per_sample.unwrap() + identity;
            assert_eq!(total.to_string(), &record[acts]);
            checked += 1;
        }
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn mlp_columns_are_understood() {
        check_columns("mlp_data.csv", |f| f.layers.linear);
    }

    #[test]
    fn cnn_columns_are_understood() {
        check_columns("cnn_data.csv", |f| f.layers.conv);
    }

    #[test]
    fn the_protocol_keeps_the_published_rows() {
        let (mlp, report) = load(&data_dir(), Family::Mlp).unwrap();
        assert_eq!((report.rows_read, report.rows_used), (3000, 3000));
        assert!(mlp.iter().all(|e| e.features.family == Family::Mlp));
        let (cnn, report) = load(&data_dir(), Family::Cnn).unwrap();
        assert_eq!(report.rows_read, 2061);
        assert_eq!(report.left_out_shapes, 281 + 272);
        assert_eq!(report.broken, 40);
        assert_eq!(report.oom_crash, 384);
        assert_eq!(report.rows_used, 1468);
        assert!(cnn.iter().all(|e| e.features.family == Family::Cnn));
    }

    #[test]
    fn a_missing_data_set_is_a_clear_error() {
        let err = load(Path::new("/nonexistent"), Family::Mlp).unwrap_err();
        assert!(err.to_string().contains("data/gpumemnet"), "{err}");
    }
}
