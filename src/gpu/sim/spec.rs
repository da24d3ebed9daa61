//! `carma daemon --simulate-gpus SPEC`: which GPUs to simulate, partitioned
//! ones included.
//!
//! ```text
//! SPEC      = GROUP ("," GROUP)*
//! GROUP     = [COUNT "x"] SIZE [":mig=" [PROFILE ("+" PROFILE)*]]
//! PROFILE   = SLICES "g." GB "gb"          e.g. 3g.20gb
//! ```
//!
//! `4x40GiB` is four whole GPUs; `1x40GiB:mig=3g.20gb+2g.10gb+1g.5gb` one
//! GPU in MIG mode with three instances of 20, 10 and 5 GiB (NVIDIA's
//! profile names round memory; the simulation takes them at their word);
//! `1x40GiB:mig=` one in MIG mode with no instances, which carma cannot use.
//! A GPU's instances may not use more than its 7 compute slices or its
//! memory.

use crate::size::{SizeError, parse_gpu_set};

/// Compute slices of the largest MIG-capable GPUs (A100, H100): no more
/// instances fit.
pub const MIG_SLICES: u32 = 7;

/// One simulated GPU as declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub total_mib: u64,
    /// `Some` for a GPU in MIG mode: its instances' profiles.
    pub mig: Option<Vec<Profile>>,
}

/// A MIG instance's profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// As written, e.g. `3g.20gb`.
    pub name: String,
    pub slices: u32,
    pub total_mib: u64,
}

impl Declared {
    /// A GPU used whole.
    pub fn whole(total_mib: u64) -> Declared {
        Declared {
            total_mib,
            mig: None,
        }
    }
}

/// Reads `spec`; errors name the 1-based character column and what was
/// expected there.
pub fn parse(spec: &str) -> Result<Vec<Declared>, SizeError> {
    let mut gpus = Vec::new();
    let mut offset = 0;
    for group in spec.split(',') {
        let (sizes, mig) = match group.split_once(':') {
            Some((sizes, mig)) => {
                let column = offset + sizes.chars().count() + 2;
                (sizes, Some(parse_mig(mig, column)?))
            }
            None => (group, None),
        };
        let sizes = parse_gpu_set(sizes).map_err(|e| SizeError {
            column: e.column + offset,
            message: e.message,
        })?;
        for total_mib in sizes {
            if let Some(profiles) = &mig {
                check_fits(profiles, total_mib, offset + 1)?;
            }
            gpus.push(Declared {
                total_mib,
                mig: mig.clone(),
            });
        }
        offset += group.chars().count() + 1;
    }
    Ok(gpus)
}

/// `mig=PROFILE+...` starting at 1-based `column`.
fn parse_mig(text: &str, column: usize) -> Result<Vec<Profile>, SizeError> {
    let Some(list) = text.strip_prefix("mig=") else {
        return Err(SizeError {
            column,
            message: format!("expected `mig=` after `:`, found `{text}`"),
        });
    };
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let mut column = column + "mig=".len();
    let mut profiles = Vec::new();
    for name in list.split('+') {
        profiles.push(parse_profile(name).ok_or_else(|| SizeError {
            column,
            message: format!(
                "expected a MIG profile such as 3g.20gb (compute slices 1-7, memory in GB), \
                 found `{name}`"
            ),
        })?);
        column += name.chars().count() + 1;
    }
    Ok(profiles)
}

/// `3g.20gb`: 3 compute slices, 20 GiB.
fn parse_profile(name: &str) -> Option<Profile> {
    let (slices, gb) = name.split_once("g.")?;
    let gb = gb.strip_suffix("gb")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(slices) || !digits(gb) {
        return None;
    }
    let slices: u32 = slices.parse().ok()?;
    let gb: u64 = gb.parse().ok()?;
    let total_mib = gb.checked_mul(1024)?;
    ((1..=MIG_SLICES).contains(&slices) && gb > 0).then(|| Profile {
        name: name.to_owned(),
        slices,
        total_mib,
    })
}

/// The instances fit a GPU of `total_mib`, in slices and memory.
fn check_fits(profiles: &[Profile], total_mib: u64, column: usize) -> Result<(), SizeError> {
    let slices: u32 = profiles.iter().map(|p| p.slices).sum();
    let mib: u64 = profiles.iter().map(|p| p.total_mib).sum();
    if slices > MIG_SLICES {
        return Err(SizeError {
            column,
            message: format!(
                "its MIG instances use {slices} compute slices; a GPU has {MIG_SLICES}"
            ),
        });
    }
    if mib > total_mib {
        return Err(SizeError {
            column,
            message: format!(
                "its MIG instances use {} of memory; the GPU has {}",
                crate::size::format_mib(mib),
                crate::size::format_mib(total_mib)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024;

    fn err(spec: &str) -> (usize, String) {
        let e = parse(spec).unwrap_err();
        (e.column, e.message)
    }

    #[test]
    fn whole_gpus_read_as_before() {
        assert_eq!(
            parse("2x40GiB,80GiB").unwrap(),
            [
                Declared::whole(40 * GIB),
                Declared::whole(40 * GIB),
                Declared::whole(80 * GIB)
            ]
        );
    }

    #[test]
    fn partitioned_gpus_list_their_instances() {
        let gpus = parse("1x40GiB,2x40GiB:mig=3g.20gb+1g.5gb").unwrap();
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[0].mig, None);
        for gpu in &gpus[1..] {
            let profiles = gpu.mig.as_ref().unwrap();
            let summary: Vec<(&str, u32, u64)> = profiles
                .iter()
                .map(|p| (p.name.as_str(), p.slices, p.total_mib))
                .collect();
            assert_eq!(summary, [("3g.20gb", 3, 20 * GIB), ("1g.5gb", 1, 5 * GIB)]);
        }
        assert_eq!(parse("40GiB:mig=").unwrap()[0].mig, Some(Vec::new()));
    }

    #[test]
    fn errors_say_where_and_what_was_expected() {
        // `40GiB:mog=`: the 7th character is where `mig=` was expected.
        let (column, message) = err("40GiB:mog=1g.5gb");
        assert_eq!(column, 7);
        assert!(message.contains("expected `mig=`"), "{message}");
        // The second profile starts at column 20 of the second group.
        let (column, message) = err("1x40GiB,40GiB:mig=1g.5gb+9g.5gb");
        assert_eq!(column, 26);
        assert!(message.contains("found `9g.5gb`"), "{message}");
        for bad in [
            "3g20gb", "3g.20", "g.20gb", "3g.gb", "0g.5gb", "3g.0gb", "3g.-5gb",
        ] {
            let (column, message) = err(&format!("40GiB:mig={bad}"));
            assert_eq!(column, 11, "{bad}");
            assert!(
                message.contains("expected a MIG profile"),
                "{bad}: {message}"
            );
        }
        let (column, message) = err("1x40GiB,1x40GiB:mig=4g.20gb+4g.20gb");
        assert_eq!(column, 9);
        assert!(message.contains("8 compute slices"), "{message}");
        let (_, message) = err("1x10GiB:mig=3g.20gb");
        assert!(message.contains("20GiB of memory"), "{message}");
        // Sizes keep their own errors, at their own columns.
        assert_eq!(err("1x40GiB,40:mig=").0, 10);
    }
}
