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

#[test]
fn the_grafana_dashboard_asks_only_for_metrics_carma_serves() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/grafana-dashboard.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // Every family at least once: a GPU with every reading, one event each.
    let status: carma::spool::status::Status = serde_json::from_str(
        r#"{"updated_at": 1, "daemon_pid": 1, "backend": "b",
            "running": [{"name": "000001-t", "run": 1, "gpus": [0], "since": 0,
                         "peak_mib": 0, "user": "u"}],
            "recovery": [], "pending": [], "head_waits_for": null,
            "gpus": [{"index": 0, "uuid": "u", "name": "n", "total_mib": 1,
                      "used_mib": 0, "smact": 0, "occupancy": 0, "dram": 0,
                      "power_w": 1, "error": null, "tasks": []}]}"#,
    )
    .unwrap();
    let metrics = carma::metrics::Metrics::default();
    metrics.ended(carma::spool::State::Done, "u");
    metrics.estimated("history", 1, 1);
    let served = metrics.text(Some(&status), 0).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut asked = 0;
    for target in panels
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
    {
        let expr = target["expr"].as_str().unwrap();
        for (at, _) in expr.match_indices("carma_") {
            let name: String = expr[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            asked += 1;
            assert!(
                served.lines().any(|l| l
                    .strip_prefix(&name)
                    .is_some_and(|r| r.starts_with(['{', ' ']))),
                "the dashboard asks for {name}, which carma does not serve"
            );
        }
    }
    assert!(
        asked > 15,
        "only {asked} metrics found: is the dashboard read right?"
    );
}
