//! NVML errors sorted by consequence.
//!
//! A quantity a GPU cannot give (not supported by the board, an entry point
//! the installed driver lacks, not permitted to this user) will not appear
//! later: it is left out of the readings and said once. Anything else (GPU
//! lost, reset required, an unknown driver error) means the GPU cannot be
//! trusted now: its reading carries the error, placement skips it, and the
//! daemon logs it once and again when the GPU reads again.

use std::collections::BTreeSet;
use std::fmt;

use nvml_wrapper::error::NvmlError;

/// What an error means for the reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The quantity is not to be had on this GPU; leave it out.
    Unavailable,
    /// The GPU is not usable now; the text says why, in words that stay
    /// the same from one reading to the next (the daemon logs changes).
    Broken(String),
}

/// A quantity read from each GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Quantity {
    Memory,
    Utilization,
    Gpm,
    Power,
    Energy,
    Temperature,
    SmClock,
    Processes,
    MpsProcesses,
    MigMode,
}

impl Quantity {
    /// What carma does without it.
    fn consequence(self) -> &'static str {
        match self {
            Quantity::Memory => "the GPU cannot be used",
            Quantity::Utilization => {
                "its SMACT reads 0, so the SM-activity cap cannot protect its jobs"
            }
            Quantity::Gpm => "its SMACT comes from the utilization counter instead",
            Quantity::Power => "no power is shown for it",
            Quantity::Energy => "the report integrates its power over time instead",
            Quantity::Temperature => "its GPU log rows have no temperature",
            Quantity::SmClock => "its GPU log rows have no SM clock",
            Quantity::Processes => "its jobs' memory is not attributed to them",
            Quantity::MpsProcesses => "its MPS clients' memory is not attributed to their jobs",
            Quantity::MigMode => "it is taken to have no MIG",
        }
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quantity::Memory => "memory",
            Quantity::Utilization => "utilization counter",
            Quantity::Gpm => "GPM SM utilization",
            Quantity::Power => "power",
            Quantity::Energy => "total-energy counter",
            Quantity::Temperature => "temperature",
            Quantity::SmClock => "SM clock",
            Quantity::Processes => "compute processes",
            Quantity::MpsProcesses => "MPS client processes",
            Quantity::MigMode => "MIG mode",
        })
    }
}

/// What `error`, met while reading `quantity`, means.
pub fn classify(quantity: Quantity, error: &NvmlError) -> Failure {
    match error {
        NvmlError::NotSupported
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::FunctionNotFound
        | NvmlError::NoPermission => Failure::Unavailable,
        other => Failure::Broken(format!("NVML cannot read its {quantity}: {other}")),
    }
}

/// The unavailable quantities already reported, so each is said once per
/// GPU however many readings lack it.
#[derive(Debug, Default)]
pub struct Said(BTreeSet<(usize, Quantity)>);

impl Said {
    /// Logs, the first time for this GPU and quantity, that it is missing.
    pub fn unavailable(&mut self, gpu: usize, quantity: Quantity, error: &NvmlError) {
        if self.0.insert((gpu, quantity)) {
            log::warn!(
                "GPU {gpu}: NVML cannot read its {quantity} ({error}); {}",
                quantity.consequence()
            );
        }
    }
}

/// `result` as an optional value: `None` (said once) when the GPU cannot
/// give it, an error when the GPU is broken.
pub fn optional<T>(
    said: &mut Said,
    gpu: usize,
    quantity: Quantity,
    result: Result<T, NvmlError>,
) -> Result<Option<T>, String> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) => match classify(quantity, &e) {
            Failure::Unavailable => {
                said.unavailable(gpu, quantity, &e);
                Ok(None)
            }
            Failure::Broken(why) => Err(why),
        },
    }
}

/// `result` as a value the reading cannot do without: any error breaks.
pub fn required<T>(quantity: Quantity, result: Result<T, NvmlError>) -> Result<T, String> {
    result.map_err(|e| match classify(quantity, &e) {
        Failure::Unavailable => format!("NVML cannot read its {quantity}: {e}"),
        Failure::Broken(why) => why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_calls_are_left_out_and_lost_gpus_break() {
        for e in [
            NvmlError::NotSupported,
            NvmlError::FunctionNotFound,
            NvmlError::NoPermission,
            NvmlError::FailedToLoadSymbol("nvmlGpmSampleGet".into()),
        ] {
            assert_eq!(classify(Quantity::Power, &e), Failure::Unavailable, "{e}");
        }
        assert_eq!(
            classify(Quantity::Memory, &NvmlError::GpuLost),
            Failure::Broken(
                "NVML cannot read its memory: device fell off the bus or has otherwise \
                 become inacessible"
                    .into()
            )
        );
        assert!(matches!(
            classify(Quantity::Energy, &NvmlError::Unknown),
            Failure::Broken(_)
        ));
    }

    #[test]
    fn optional_values_are_none_when_unavailable_and_errors_when_broken() {
        let mut said = Said::default();
        assert_eq!(
            optional(&mut said, 0, Quantity::Power, Ok::<u32, _>(5)),
            Ok(Some(5))
        );
        for _ in 0..3 {
            let missing: Result<u32, _> = Err(NvmlError::NotSupported);
            assert_eq!(optional(&mut said, 0, Quantity::Power, missing), Ok(None));
        }
        assert_eq!(said.0.len(), 1, "said once");
        let lost: Result<u32, _> = Err(NvmlError::GpuLost);
        assert!(optional(&mut said, 0, Quantity::Power, lost).is_err());
    }

    #[test]
    fn required_values_break_even_when_unsupported() {
        let missing: Result<u32, _> = Err(NvmlError::NotSupported);
        let why = required(Quantity::Memory, missing).unwrap_err();
        assert!(why.starts_with("NVML cannot read its memory"), "{why}");
    }
}
