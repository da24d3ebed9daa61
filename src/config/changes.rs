//! What differs between two configurations, key by key, in the words of
//! the TOML files: a reload logs `placement.policy: "magm" -> "best-fit"`,
//! which an operator can compare with the file they edited, instead of
//! Rust's debug dump of whole sections.

use std::fmt;

use toml::{Table, Value};

/// One key whose value differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The dotted key, `placement.policy`.
    pub key: String,
    /// Its value before and after; `None` where one side lacks the key.
    pub old: Option<Value>,
    pub new: Option<Value>,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |v: &Option<Value>| {
            v.as_ref()
                .map_or_else(|| "(unset)".into(), Value::to_string)
        };
        write!(
            f,
            "{}: {} -> {}",
            self.key,
            side(&self.old),
            side(&self.new)
        )
    }
}

/// The keys whose values differ between `old` and `new`, in key order.
/// Tables are compared key by key down to their leaves; arrays and other
/// values as wholes.
pub fn changes(old: &Table, new: &Table) -> Vec<Change> {
    let mut found = Vec::new();
    compare("", old, new, &mut found);
    found
}

fn compare(prefix: &str, old: &Table, new: &Table, found: &mut Vec<Change>) {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (old.get(key), new.get(key)) {
            (Some(Value::Table(a)), Some(Value::Table(b))) => compare(&path, a, b, found),
            (a, b) if a != b => found.push(Change {
                key: path,
                old: a.cloned(),
                new: b.cloned(),
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn only_changed_keys_are_named_in_the_files_words() {
        let old = Config::load(None).unwrap();
        let new = Config::from_override(
            "t.toml",
            "[placement]\npolicy = \"best-fit\"\n[recovery]\nmax_retries = 5\n",
        )
        .unwrap();
        let lines: Vec<String> = changes(&old.values(), &new.values())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "placement.policy: \"magm\" -> \"best-fit\"",
                "recovery.max_retries: 2 -> 5"
            ]
        );
        assert!(changes(&old.values(), &old.values()).is_empty());
    }

    #[test]
    fn a_key_on_one_side_only_is_unset_on_the_other() {
        let old: Table = "[a]\nx = 1\n".parse().unwrap();
        let new: Table = "[a]\ny = [1, 2]\n".parse().unwrap();
        let lines: Vec<String> = changes(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(lines, ["a.x: 1 -> (unset)", "a.y: (unset) -> [1, 2]"]);
    }
}
