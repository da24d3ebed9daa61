//! How a server reads the research prototype's job files: the operator's
//! choices, not the file's.
//!
//! The prototype let its configuration decide two things its job files
//! seem to say themselves. Line 7 (`exclusive` / `collocation`) was never
//! read: the server's policy placed every job, so its published workloads,
//! which all say `exclusive`, shared GPUs. And of the four memory figures on
//! lines 9-12 the operator picked the one the scheduler used, or none. carma
//! keeps both decisions with the operator (`[legacy]` in the
//! configuration), defaulting to what the prototype did.

use std::fmt;

use serde::Deserialize;

use super::spec::{PolicyHint, Syntax, TaskSpec};
use crate::sched::Need;

/// Which published memory figure stands for a legacy job's declared
/// memory: one per estimator the prototype compared, or none at all. The
/// simulator uses the same names for the matching trace columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum MemoryLine {
    /// The measured peak (legacy line 9, trace `memory_mib`): a perfect
    /// estimator.
    Oracle,
    /// The Horus formula's answer (line 10, `est_horus_mib`).
    Horus,
    /// PyTorch FakeTensor's answer (line 11, `est_faketensor_mib`).
    Faketensor,
    /// GPUMemNet's answer, an upper bucket edge (line 12,
    /// `est_gpumemnet_mib`).
    Gpumemnet,
    /// None of them: a legacy job is estimated by carma's own chain, a
    /// trace task has no estimate.
    None,
}

impl MemoryLine {
    /// The name used in the configuration and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MemoryLine::Oracle => "oracle",
            MemoryLine::Horus => "horus",
            MemoryLine::Faketensor => "faketensor",
            MemoryLine::Gpumemnet => "gpumemnet",
            MemoryLine::None => "none",
        }
    }

    /// The 1-based legacy line holding this figure.
    pub fn line(self) -> Option<usize> {
        match self {
            MemoryLine::Oracle => Some(9),
            MemoryLine::Horus => Some(10),
            MemoryLine::Faketensor => Some(11),
            MemoryLine::Gpumemnet => Some(12),
            MemoryLine::None => None,
        }
    }
}

impl fmt::Display for MemoryLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `[legacy]` in the configuration: see the commented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyRules {
    pub honour_policy_line: bool,
    pub memory_line: MemoryLine,
}

/// A job's declared memory and where it came from, for logs and
/// `carma estimate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// The figure, when the file gives the one the rules ask for.
    pub need: Option<Need>,
    /// Where it was (or would have been) read: "`memory:`", "legacy line
    /// 10, horus".
    pub by: String,
}

impl LegacyRules {
    /// Whether `spec` asks to run alone. The keyed `policy: exclusive` is
    /// always a request; legacy line 7 only when the operator says so.
    pub fn exclusive(&self, spec: &TaskSpec) -> bool {
        let honoured = spec.syntax == Syntax::Keyed || self.honour_policy_line;
        honoured && spec.policy == Some(PolicyHint::Exclusive)
    }

    /// The memory `spec` declares under these rules: the keyed `memory:`,
    /// or the legacy line the operator chose.
    pub fn declared(&self, spec: &TaskSpec) -> Declared {
        if spec.syntax == Syntax::Keyed {
            return Declared {
                need: spec.memory,
                by: "`memory:`".into(),
            };
        }
        let published = &spec.published;
        let need = match self.memory_line {
            MemoryLine::Oracle => spec.memory,
            MemoryLine::Horus => published.horus,
            MemoryLine::Faketensor => published.faketensor,
            MemoryLine::Gpumemnet => published.gpumemnet,
            MemoryLine::None => None,
        };
        let by = match self.memory_line.line() {
            Some(line) => format!("legacy line {line}, {}", self.memory_line),
            None => "legacy.memory_line = none: no line is read".into(),
        };
        Declared { need, by }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rad::parse;

    const LEGACY: &str = "# c\nconda activate tf\npython t.py\nm.model\nwiki\n32\nexclusive\n1\n19828\n17456.9\n40000\n32000\n";

    fn rules(honour: bool, line: MemoryLine) -> LegacyRules {
        LegacyRules {
            honour_policy_line: honour,
            memory_line: line,
        }
    }

    #[test]
    fn line_7_is_a_request_only_when_honoured() {
        let spec = parse(LEGACY).unwrap().spec;
        assert!(!rules(false, MemoryLine::Oracle).exclusive(&spec));
        assert!(rules(true, MemoryLine::Oracle).exclusive(&spec));
        let keyed = parse("policy: exclusive\npython t.py\n").unwrap().spec;
        assert!(rules(false, MemoryLine::Oracle).exclusive(&keyed));
    }

    #[test]
    fn the_operator_picks_the_memory_line() {
        let spec = parse(LEGACY).unwrap().spec;
        let pick = |line| rules(false, line).declared(&spec);
        assert_eq!(pick(MemoryLine::Oracle).need, Some(Need::Mib(19828)));
        assert_eq!(pick(MemoryLine::Horus).need, Some(Need::Mib(17457)));
        assert_eq!(pick(MemoryLine::Faketensor).need, Some(Need::WholeGpu));
        assert_eq!(pick(MemoryLine::Gpumemnet).need, Some(Need::Mib(32000)));
        assert_eq!(pick(MemoryLine::None).need, None);
        assert_eq!(pick(MemoryLine::Horus).by, "legacy line 10, horus");
    }

    #[test]
    fn keyed_memory_is_declared_whatever_the_line() {
        let keyed = parse("memory: 3 GiB\npython t.py\n").unwrap().spec;
        let declared = rules(false, MemoryLine::None).declared(&keyed);
        assert_eq!(declared.need, Some(Need::Mib(3072)));
        assert_eq!(declared.by, "`memory:`");
    }
}
