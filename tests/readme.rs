//! The README stays a newcomer's page: short, with every job-file key as
//! the parser documents it, no stale names, and links that lead somewhere.

use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn readme() -> String {
    read(&Path::new(ROOT).join("README.md"))
}

/// README.md and every page in docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The targets of the inline links `[text](target)` in `text`, outside
/// code spans and fenced code blocks.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans, whose brackets are not links.
        let prose: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            targets.push(target.to_owned());
            rest = &after[end..];
        }
    }
    targets
}

#[test]
fn the_readme_has_at_most_400_lines() {
    let lines = readme().lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines; move detail into docs/"
    );
}

#[test]
fn the_readme_tables_every_job_file_key_as_the_parser_documents_it() {
    let readme = readme();
    for key in carma::rad::reference() {
        let cell = format!("| `{}:` |", key.key);
        let row = readme
            .lines()
            .find(|line| line.starts_with(&cell))
            .unwrap_or_else(|| panic!("README.md has no row starting with {cell}"));
        assert!(
            row.contains(key.value),
            "README.md's row for {cell} does not give its value as carma-rad(5) does: {:?}",
            key.value
        );
        assert!(
            row.contains(key.meaning),
            "README.md's row for {cell} does not say what it does as carma-rad(5) does: {:?}",
            key.meaning
        );
    }
}

#[test]
fn every_relative_link_in_the_readme_and_docs_leads_to_a_file() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let dir = page.parent().unwrap();
        for target in link_targets(&read(&page)) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
                || target.starts_with('#')
            {
                continue;
            }
            let path = target.split('#').next().unwrap_or_default();
            checked += 1;
            if !dir.join(path).exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(
        checked > 10,
        "only {checked} links found: is the parser right?"
    );
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_readme_names_nothing_stale() {
    let readme = readme();
    // The workplace's shared directory beside the checkout, which a clone
    // lacks: spelt in parts so that this file does not name it either.
    let beside = ["..", "shared"].join("/");
    for stale in ["DESIGN.md", "src/mps.rs", beside.as_str()] {
        assert!(!readme.contains(stale), "README.md still names {stale}");
    }
}

#[test]
fn links_are_found_outside_code_only() {
    let text = "see [a](docs/a.md#x) and `[b](nowhere)`\n```\n[c](nowhere)\n```\n[d](#anchor)";
    assert_eq!(link_targets(text), ["docs/a.md#x", "#anchor"]);
}
