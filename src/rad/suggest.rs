//! "Did you mean ...?": the closest known word to a misspelt one.
//!
//! Misspelt keys (`batchsize`), policies (`colocate`) and file names whose
//! case differs from the disk (`bert_base.model`) are the commonest
//! mistakes in hand-written job files; naming the intended word turns a
//! refusal into a one-keystroke fix. Distances are optimal string alignment
//! (Levenshtein plus adjacent swaps), compared case-insensitively; the words
//! are short, so a plain dynamic programme is enough.

/// Words longer than this get no suggestion: it bounds the quadratic
/// distance computation whatever a user typed.
const MAX_WORD_CHARS: usize = 64;

/// The candidate closest to `word`, if it is close enough to be a likely
/// misspelling: an exact case-insensitive match wins, otherwise at most
/// about one edit per four characters of the candidate.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word: Vec<char> = word.to_lowercase().chars().collect();
    if word.is_empty() || word.len() > MAX_WORD_CHARS {
        return None;
    }
    candidates
        .into_iter()
        .filter_map(|candidate| {
            let lower: Vec<char> = candidate.to_lowercase().chars().collect();
            if lower.len() > MAX_WORD_CHARS {
                return None;
            }
            let distance = distance(&word, &lower);
            (distance <= 1 + lower.len() / 4).then_some((distance, candidate))
        })
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance between two words.
fn distance(a: &[char], b: &[char]) -> usize {
    // rows[i][j]: distance between a[..i] and b[..j]; three rolling rows.
    let width = b.len() + 1;
    let mut before: Vec<usize> = vec![0; width];
    let mut previous: Vec<usize> = (0..width).collect();
    let mut current: Vec<usize> = vec![0; width];
    for i in 1..=a.len() {
        current[0] = i;
        for j in 1..width {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(a: &str, b: &str) -> usize {
        let a: Vec<char> = a.chars().collect();
        let b: Vec<char> = b.chars().collect();
        distance(&a, &b)
    }

    #[test]
    fn distances() {
        assert_eq!(d("", ""), 0);
        assert_eq!(d("gpus", ""), 4);
        assert_eq!(d("", "gpus"), 4);
        assert_eq!(d("batchsize", "batch_size"), 1);
        assert_eq!(d("nmae", "name"), 1);
        assert_eq!(d("kitten", "sitting"), 3);
    }

    #[test]
    fn suggestions() {
        let keys = ["name", "gpus", "batch_size", "memory"];
        assert_eq!(closest("batchsize", keys), Some("batch_size"));
        assert_eq!(closest("GPU", keys), Some("gpus"));
        assert_eq!(closest("nmae", keys), Some("name"));
        assert_eq!(closest("mem", keys), None);
        assert_eq!(closest("", keys), None);
        assert_eq!(closest(&"x".repeat(10_000), keys), None);
        assert_eq!(
            closest("bert_base.model", ["BERT_base.rad", "BERT_base.model"]),
            Some("BERT_base.model")
        );
    }
}
