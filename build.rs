//! Work done once when carma is built, not in every process:
//!
//! - The documented default configuration (`src/config/default.toml`)
//!   becomes JSON for the binary to carry. Every carma process starts from
//!   these defaults; parsing the TOML took a sixth of a `carma submit`'s
//!   own time, and JSON's parser reads the same table in a fifth of that.
//!   The TOML stays the one place each default is written and documented.
//! - A digest of the sources (`CARMA_BUILD_ID`), which `carma` and
//!   `carma-supervise` both carry: the daemon runs the helper only if it
//!   is of the same build (`src/supervisor/program.rs`).

use std::fs;
use std::path::{Path, PathBuf};

const DEFAULTS: &str = "src/config/default.toml";

/// What the build digest covers: the code of both binaries (the Rust and
/// TOML files under `src/`), how it is built, and the dependencies'
/// versions (`Cargo.lock`). Not the data files the code embeds (models,
/// fonts), which the supervisor does not read; not the compiler or its
/// flags, which one `cargo build` gives both binaries alike.
const SOURCES: [&str; 4] = ["src", "build.rs", "Cargo.toml", "Cargo.lock"];

fn main() {
    for source in SOURCES {
        println!("cargo::rerun-if-changed={source}");
    }
    let text = fs::read_to_string(DEFAULTS).expect("src/config/default.toml is readable");
    let table: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{DEFAULTS} is not valid TOML: {e}"));
    let json = serde_json::to_string(&table).expect("the defaults hold no value JSON lacks");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out.join("default-config.json"), json).expect("OUT_DIR is writable");
    let mut digest = Fnv::default();
    for source in SOURCES {
        digest.tree(Path::new(source));
    }
    println!("cargo::rustc-env=CARMA_BUILD_ID={:016x}", digest.0);
}

/// FNV-1a, 64 bits: stable across Rust versions, unlike std's hasher, and
/// enough to tell two builds apart (not a defence: both binaries come
/// from one trusted place).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Every source file under `path` (or `path` itself), by name and
    /// content, in name order; in directories, only Rust and TOML files,
    /// so that an editor's swap file changes nothing.
    fn tree(&mut self, path: &Path) {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = fs::read_dir(path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                .map(|entry| entry.expect("a readable source directory").path())
                .collect();
            entries.sort();
            for entry in entries {
                self.tree(&entry);
            }
            return;
        }
        let named = path.parent() == Some(Path::new(""));
        let source = path.extension().is_some_and(|e| e == "rs" || e == "toml");
        if (named || source)
            && let Ok(content) = fs::read(path)
        {
            self.bytes(path.to_string_lossy().as_bytes());
            self.bytes(&(content.len() as u64).to_le_bytes());
            self.bytes(&content);
        }
    }
}
