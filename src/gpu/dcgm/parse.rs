//! `dcgmi dmon` output, line by line.
//!
//! `dcgmi dmon -e 1002,1003,1005` prints a header, then one line per
//! entity per interval, the fields in the order asked for:
//!
//! ```text
//! #Entity   SMACT        SMOCC        DRAMA
//! ID
//! GPU 0     0.812        0.456        0.123
//! GPU 1     N/A          N/A          N/A
//! ```
//!
//! The header repeats now and then; entities other than whole GPUs (`GPU-I`
//! MIG instances, switches) are of no use to carma; a field the GPU cannot
//! measure reads `N/A`. Anything else (`Error: ...`, a changed format) is
//! reported to the caller, never a panic: this is another program's output.

/// One GPU's profiling fields from one line; `None` where DCGM printed
/// `N/A`. Fractions in 0..=1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fields {
    /// Field 1002, SM active.
    pub smact: Option<f64>,
    /// Field 1003, SM occupancy.
    pub occupancy: Option<f64>,
    /// Field 1005, DRAM active.
    pub dram: Option<f64>,
}

/// What one line of output is.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A GPU's values.
    Gpu { gpu: usize, fields: Fields },
    /// Blank, a header, or another kind of entity.
    Ignored,
    /// Not dmon's data: an error message or a format carma does not know.
    Unexpected,
}

/// The field ids carma asks `dcgmi dmon` for, in the order it prints them.
pub const FIELDS: &str = "1002,1003,1005";

/// Reads one line of `dcgmi dmon -e 1002,1003,1005` output.
pub fn line(text: &str) -> Line {
    let mut words = text.split_whitespace();
    let Some(entity) = words.next() else {
        return Line::Ignored;
    };
    if entity.starts_with('#') || entity == "ID" {
        return Line::Ignored;
    }
    if entity != "GPU" {
        // `GPU-I 3`, `GPU-CI 1`, `Switch 0` ... follow the same layout: an
        // entity word then an id. Words that do not look like one are not
        // dmon's.
        let is_entity = entity.chars().all(|c| c.is_ascii_alphabetic() || c == '-')
            && words.next().is_some_and(|id| id.parse::<u64>().is_ok());
        return if is_entity {
            Line::Ignored
        } else {
            Line::Unexpected
        };
    }
    let Some(gpu) = words.next().and_then(|id| id.parse::<usize>().ok()) else {
        return Line::Unexpected;
    };
    let values: Vec<&str> = words.collect();
    let [smact, occupancy, dram] = values[..] else {
        return Line::Unexpected;
    };
    match (value(smact), value(occupancy), value(dram)) {
        (Some(smact), Some(occupancy), Some(dram)) => Line::Gpu {
            gpu,
            fields: Fields {
                smact,
                occupancy,
                dram,
            },
        },
        _ => Line::Unexpected,
    }
}

/// A field: `Some(None)` for `N/A`, `Some(Some(fraction))` for a number
/// (clamped to 0..=1: ratios of counters can stray past 1), `None` for
/// anything else. A number that is not finite is taken as `N/A`.
fn value(word: &str) -> Option<Option<f64>> {
    if word == "N/A" {
        return Some(None);
    }
    let number: f64 = word.parse().ok()?;
    Some(number.is_finite().then(|| number.clamp(0.0, 1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(gpu: usize, smact: Option<f64>, occupancy: Option<f64>, dram: Option<f64>) -> Line {
        Line::Gpu {
            gpu,
            fields: Fields {
                smact,
                occupancy,
                dram,
            },
        }
    }

    #[test]
    fn gpu_lines_give_their_fields() {
        assert_eq!(
            line("GPU 0     0.812        0.456        0.123"),
            gpu(0, Some(0.812), Some(0.456), Some(0.123))
        );
        assert_eq!(
            line("GPU 3\t1.02\t0\t-0.0\n"),
            gpu(3, Some(1.0), Some(0.0), Some(0.0))
        );
        assert_eq!(
            line("GPU 1     N/A          0.2          N/A"),
            gpu(1, None, Some(0.2), None)
        );
        assert_eq!(
            line("GPU 2 NaN 0.1 0.1"),
            gpu(2, None, Some(0.1), Some(0.1))
        );
    }

    #[test]
    fn headers_blanks_and_other_entities_are_ignored() {
        for text in [
            "",
            "   ",
            "#Entity   SMACT        SMOCC        DRAMA",
            "ID",
            "GPU-I 7   0.1 0.2 0.3",
            "Switch 0  N/A",
        ] {
            assert_eq!(line(text), Line::Ignored, "{text:?}");
        }
    }

    #[test]
    fn anything_else_is_unexpected() {
        for text in [
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.",
            "GPU x 0.1 0.2 0.3",
            "GPU 0 0.1 0.2",
            "GPU 0 0.1 0.2 0.3 0.4",
            "GPU 0 0.1 busy 0.3",
            "GPU -1 0.1 0.2 0.3",
            "\u{feff}\u{0}garbage",
        ] {
            assert_eq!(line(text), Line::Unexpected, "{text:?}");
        }
    }
}
