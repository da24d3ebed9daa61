//! Turns the documented default configuration (`src/config/default.toml`)
//! into JSON for the binary to carry. Every carma process starts from
//! these defaults; parsing the TOML took a sixth of a `carma submit`'s
//! own time, and JSON's parser reads the same table in a fifth of that.
//! The TOML stays the one place each default is written and documented.

use std::path::PathBuf;

const DEFAULTS: &str = "src/config/default.toml";

fn main() {
    println!("cargo::rerun-if-changed={DEFAULTS}");
    let text = std::fs::read_to_string(DEFAULTS).expect("src/config/default.toml is readable");
    let table: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{DEFAULTS} is not valid TOML: {e}"));
    let json = serde_json::to_string(&table).expect("the defaults hold no value JSON lacks");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("default-config.json"), json).expect("OUT_DIR is writable");
}
