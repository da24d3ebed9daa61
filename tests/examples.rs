//! The README's recipes, run as written: a recipe that stops working is a
//! failing test, not a confused newcomer.

mod common;

use std::process::Command;

use common::{CARMA, stderr, stdout};

#[test]
fn the_oom_recipe_crashes_once_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/oom.sh"))
        .env("CARMA", CARMA)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(text.contains("to recovery/ after OOM crash 1"), "{text}");
    assert!(text.contains("(2 done, 0 failed)"), "{text}");
    assert!(text.contains("OOM crashes       1"), "{text}");
    assert!(text.contains("re-runs           1"), "{text}");
}
