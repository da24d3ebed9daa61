//! Memory sizes as users write them (`12G`, `12GiB`, `1500M`, `4096`).
//!
//! carma counts GPU memory in MiB everywhere because that is what NVML and
//! `nvidia-smi` report and what the measured data sets use. Users write sizes
//! with units; a plain number is MiB. Units are binary whatever their
//! spelling (`G`, `GB` and `GiB` all mean 1024 MiB): GPU memory is sold and
//! reported in binary units, and a silent 7% difference between `GB` and
//! `GiB` would only produce surprising placements.

use nom::{
    IResult, Parser,
    branch::alt,
    bytes::complete::tag_no_case,
    character::complete::{char, digit1, space0},
    combinator::{all_consuming, map, opt, recognize, value},
    sequence::pair,
};
use thiserror::Error;

/// A size that could not be read, with the column (1-based, in characters)
/// where reading stopped so callers can point at it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct SizeError {
    /// 1-based character column inside the text handed to [`parse_mib`].
    pub column: usize,
    /// What was wrong, phrased as what was expected.
    pub message: String,
}

const UNITS_HINT: &str = "a size such as 4G, 4GiB, 1500M or 4096 (MiB)";

/// Reads a size and returns it in MiB (rounded up: an estimate must never
/// shrink by being converted).
pub fn parse_mib(text: &str) -> Result<u64, SizeError> {
    let trimmed = text.trim_end();
    let lead = trimmed.len() - trimmed.trim_start().len();
    let body = trimmed.trim_start();
    let col_at = |rest: &str| lead + body[..body.len() - rest.len()].chars().count() + 1;
    let Ok((rest, digits)) = recognize_number(body) else {
        return Err(SizeError {
            column: lead + 1,
            message: format!("expected {UNITS_HINT}"),
        });
    };
    let amount: f64 = digits.parse().map_err(|_| SizeError {
        column: lead + 1,
        message: format!("expected {UNITS_HINT}"),
    })?;
    let (_, factor) = match all_consuming(unit).parse(rest) {
        Ok(ok) => ok,
        Err(_) => {
            return Err(SizeError {
                column: col_at(rest.trim_start()),
                message: format!(
                    "unknown unit `{}`: expected M, MiB, MB, G, GiB, GB, T, TiB or TB",
                    rest.trim()
                ),
            });
        }
    };
    let mib = (amount * factor).ceil();
    if !mib.is_finite() || mib > u64::MAX as f64 / 2.0 {
        return Err(SizeError {
            column: lead + 1,
            message: "size is too large".into(),
        });
    }
    Ok(mib as u64)
}

fn recognize_number(input: &str) -> IResult<&str, &str> {
    recognize(pair(digit1, opt(pair(char('.'), digit1)))).parse(input)
}

/// A unit suffix and its factor to MiB; empty means MiB.
fn unit(input: &str) -> IResult<&str, f64> {
    let (input, _) = space0(input)?;
    let (input, factor) = alt((
        value(
            1024.0 * 1024.0,
            alt((tag_no_case("TiB"), tag_no_case("TB"), tag_no_case("T"))),
        ),
        value(
            1024.0,
            alt((tag_no_case("GiB"), tag_no_case("GB"), tag_no_case("G"))),
        ),
        value(
            1.0,
            alt((tag_no_case("MiB"), tag_no_case("MB"), tag_no_case("M"))),
        ),
        map(nom::combinator::eof, |_| 1.0),
    ))
    .parse(input)?;
    Ok((input, factor))
}

/// Reads a set of identical or mixed GPUs as written on the command line:
/// `4x40GiB`, `40G`, or `2x40GiB,2x80GiB`. Returns each GPU's memory in MiB,
/// in index order.
pub fn parse_gpu_set(text: &str) -> Result<Vec<u64>, SizeError> {
    let mut gpus = Vec::new();
    let mut offset = 0;
    for part in text.split(',') {
        let shift = |e: SizeError| SizeError {
            column: e.column + offset,
            message: e.message,
        };
        // A GPU's memory without a unit would be MiB, as everywhere else,
        // but `2x40` surely means GiB: better say so than run on 40 MiB.
        if part.trim_end().ends_with(|c: char| c.is_ascii_digit()) {
            return Err(SizeError {
                column: offset + part.trim_end().chars().count(),
                message: format!(
                    "`{}` has no unit: write it with one, e.g. {}GiB",
                    part.trim(),
                    part.trim()
                ),
            });
        }
        let (count, size) = match part.split_once(['x', 'X']) {
            Some((count, size)) => {
                let n: usize = count.trim().parse().map_err(|_| SizeError {
                    column: offset + 1,
                    message: format!("expected a GPU count before `x` in `{part}`"),
                })?;
                let mib = parse_mib(size).map_err(|e| SizeError {
                    column: e.column + count.len() + 1,
                    message: e.message,
                });
                (n, mib.map_err(shift)?)
            }
            None => (1, parse_mib(part).map_err(shift)?),
        };
        if count == 0 || size == 0 {
            return Err(SizeError {
                column: offset + 1,
                message: format!("`{part}` describes no GPU memory: expected e.g. 4x40GiB"),
            });
        }
        gpus.extend(std::iter::repeat_n(size, count));
        offset += part.chars().count() + 1;
    }
    Ok(gpus)
}

/// Formats MiB for people: `40GiB`, `1.5GiB`, `900MiB`.
pub fn format_mib(mib: u64) -> String {
    if mib >= 1024 {
        let gib = mib as f64 / 1024.0;
        if mib.is_multiple_of(1024) {
            format!("{}GiB", mib / 1024)
        } else {
            format!("{gib:.1}GiB")
        }
    } else {
        format!("{mib}MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_are_mib() {
        assert_eq!(parse_mib("1500"), Ok(1500));
        assert_eq!(parse_mib(" 4096 "), Ok(4096));
    }

    #[test]
    fn units_are_binary_and_case_insensitive() {
        assert_eq!(parse_mib("12G"), Ok(12 * 1024));
        assert_eq!(parse_mib("12GiB"), Ok(12 * 1024));
        assert_eq!(parse_mib("12gb"), Ok(12 * 1024));
        assert_eq!(parse_mib("1500M"), Ok(1500));
        assert_eq!(parse_mib("1500 MiB"), Ok(1500));
        assert_eq!(parse_mib("1T"), Ok(1024 * 1024));
    }

    #[test]
    fn fractions_round_up() {
        assert_eq!(parse_mib("1.5G"), Ok(1536));
        assert_eq!(parse_mib("0.1M"), Ok(1));
        assert_eq!(parse_mib("17456.9336"), Ok(17457));
    }

    #[test]
    fn bad_unit_points_at_the_unit() {
        let err = parse_mib("12Q").unwrap_err();
        assert_eq!(err.column, 3);
        assert!(err.message.contains("unknown unit `Q`"), "{}", err.message);
        let err = parse_mib("  12 kB").unwrap_err();
        assert_eq!(err.column, 6);
    }

    #[test]
    fn missing_number_is_reported_at_the_start() {
        let err = parse_mib("  G").unwrap_err();
        assert_eq!(err.column, 3);
        assert!(err.message.contains("expected a size"));
        assert!(parse_mib("").is_err());
        assert!(parse_mib("-5G").is_err());
    }

    #[test]
    fn absurd_sizes_are_refused() {
        assert!(parse_mib("99999999999999999999T").is_err());
    }

    #[test]
    fn gpu_sets() {
        assert_eq!(parse_gpu_set("4x40GiB"), Ok(vec![40960; 4]));
        assert_eq!(parse_gpu_set("40G"), Ok(vec![40960]));
        assert_eq!(
            parse_gpu_set("1x40GiB,2x80G"),
            Ok(vec![40960, 81920, 81920])
        );
        let err = parse_gpu_set("4x40GiB,2x8Q").unwrap_err();
        assert_eq!(err.column, 12, "{err:?}");
        assert!(parse_gpu_set("0x40G").is_err());
        // No unit: refused with a hint, never 40 MiB.
        let err = parse_gpu_set("2x40").unwrap_err();
        assert!(err.message.contains("40GiB"), "{}", err.message);
        assert!(parse_gpu_set("1x40GiB,2x80").is_err());
        assert!(parse_gpu_set("fourx40G").is_err());
    }

    #[test]
    fn formatting_is_readable() {
        assert_eq!(format_mib(40 * 1024), "40GiB");
        assert_eq!(format_mib(1536), "1.5GiB");
        assert_eq!(format_mib(900), "900MiB");
    }
}
