//! The status page as a person sees it: a real `carma daemon --http` on a
//! simulated GPU serves two users' jobs, and headless Chromium loads the
//! page and a task's page; Prometheus's side reads `/metrics`.
//!
//! Needs Chromium (`apt-get install chromium`; `.ci/run` installs it). As
//! root the jobs are alice's and bob's (made with useradd); otherwise all
//! are the caller's. `CARMA_SCREENSHOT=assets/status-page.png` also saves
//! a picture of the page (the README's).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{CARMA, Spool, TestUser};

/// The status page's address, from the daemon's log.
fn address(spool: &Spool) -> String {
    let said = "status page at http://";
    spool.wait_for("the status page's address", 20.0, || {
        spool.daemon_log().contains(said)
    });
    let log = spool.daemon_log();
    let from = log.find(said).unwrap() + said.len();
    let end = log[from..].find('/').unwrap();
    log[from..from + end].to_owned()
}

/// `GET path` over a plain socket: the status and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// What headless Chromium makes of `url`: the DOM after loading it.
fn browse(spool: &Spool, url: &str) -> String {
    let out = chromium(spool)
        .args(["--dump-dom", url])
        .output()
        .expect("chromium: install it (apt-get install chromium)");
    assert!(out.status.success(), "{}", common::stderr(&out));
    common::stdout(&out)
}

/// Chromium with its profile, caches and settings in the test's own
/// directory (its home too: it writes there beside its profile), so that
/// it leaves nothing behind.
fn chromium(spool: &Spool) -> Command {
    let home = spool.dir.path().join("chromium");
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
    ])
    .arg(format!(
        "--user-data-dir={}",
        home.join("profile").display()
    ))
    .env("HOME", &home)
    .env("XDG_CONFIG_HOME", home.join("config"))
    .env("XDG_CACHE_HOME", home.join("cache"));
    c
}

/// Submits `text` as `file` for `user` (or the caller), returns the task.
fn submit(spool: &Spool, user: Option<&TestUser>, file: &str, text: &str) -> String {
    match user {
        Some(user) => spool.submit_as(user, file, &[(&format!("{file}.rad"), text)]),
        None => spool.submit(&format!("{file}.rad"), text),
    }
}

#[test]
#[ignore = "needs Chromium (apt-get install chromium; .ci/run installs it)"]
fn a_person_sees_the_queue_the_gpus_and_each_task_in_a_browser() {
    let users = nix::unistd::Uid::effective()
        .is_root()
        .then(common::two_users);
    let (alice, bob) = match &users {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let mut spool = Spool::shared("1x40GiB", "");
    spool.start_daemon_with(
        &["--simulate-gpus", "1x40GiB", "--http", "127.0.0.1:0"],
        &[],
    );
    let addr = address(&spool);
    let fake = |mem: &str, secs: u32| {
        format!("{CARMA} fake-train --mem {mem} --secs {secs} --smact 0.3\n")
    };
    // Done, then running, failed, and waiting for the GPU's memory.
    let quick = submit(
        &spool,
        alice,
        "quick",
        &format!("name: quick\nmemory: 2G\n{}", fake("1G", 2)),
    );
    spool.wait_for("quick to be done", 30.0, || {
        spool.tasks("done").contains(&quick)
    });
    let train = submit(
        &spool,
        alice,
        "train",
        &format!("name: train\nmemory: 8G\n{}", fake("6G", 300)),
    );
    let fails = submit(
        &spool,
        bob,
        "fails",
        "name: fails\nmemory: 1G\n# PRIVATE-SCRIPT-LINE\necho SECRET-IN-STDERR >&2\nexit 3\n",
    );
    let big = submit(
        &spool,
        bob,
        "big",
        &format!("name: big\nmemory: 36G\n{}", fake("30G", 10)),
    );
    spool.wait_for("train to run and fails to fail", 30.0, || {
        spool.tasks("running").contains(&train) && spool.tasks("failed").contains(&fails)
    });
    // The page shows the daemon's status of up to a second ago; `fails`
    // may have waited that long for `train` to show on the GPU
    // (placement.await_activity_s).
    spool.wait_for("the status to show it", 10.0, || {
        let (_, page) = get(&addr, "/");
        page.contains("Waiting, in dispatch order (1)") && page.contains("the job failed")
    });

    // The page, as a browser renders it.
    let page = browse(&spool, &format!("http://{addr}/"));
    for seen in [
        &train,
        &big,
        &fails,
        "Simulated GPU",
        "<svg",
        "Waiting, in dispatch order (1)",
    ] {
        assert!(page.contains(seen), "the page lacks {seen}:\n{page}");
    }
    if let (Some(alice), Some(bob)) = (alice, bob) {
        assert!(
            page.contains(alice.name) && page.contains(bob.name),
            "{page}"
        );
    }
    assert!(page.contains("the job failed"), "{page}");
    for private in ["SECRET-IN-STDERR", "PRIVATE-SCRIPT-LINE", "fake-train"] {
        assert!(!page.contains(private), "the page shows {private}");
    }
    // Each task's own page.
    let card = browse(&spool, &format!("http://{addr}/task/{train}"));
    assert!(
        card.contains(&train) && card.contains("run 1 on GPU 0"),
        "{card}"
    );
    assert!(card.contains(">running<"), "{card}");
    let card = browse(&spool, &format!("http://{addr}/task/{big}"));
    assert!(
        card.contains(">pending<") && card.contains("1 in dispatch order"),
        "{card}"
    );
    let card = browse(&spool, &format!("http://{addr}/task/{fails}"));
    assert!(
        card.contains(">failed<") && !card.contains("SECRET"),
        "{card}"
    );
    let (status, _) = get(&addr, "/task/..%2F..%2Fetc%2Fpasswd");
    assert!(status.contains(" 404 "), "{status}");
    if let Ok(path) = std::env::var("CARMA_SCREENSHOT") {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
        let out = chromium(&spool)
            .arg(format!("--screenshot={}", path.display()))
            .args(["--window-size=1200,900", "--hide-scrollbars"])
            .arg(format!("http://{addr}/"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", common::stderr(&out));
    }

    // Prometheus's side.
    let (status, text) = get(&addr, "/metrics");
    assert!(status.contains(" 200 "), "{status}");
    let samples = parse_openmetrics(&text);
    for name in [
        "carma_gpu_memory_total_bytes",
        "carma_gpu_memory_used_bytes",
        "carma_gpu_memory_reserved_bytes",
        "carma_gpu_sm_active_ratio",
        "carma_gpu_power_watts",
        "carma_gpu_tasks",
    ] {
        let labels = samples
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.labels.clone())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        assert_eq!(labels["gpu"], "0", "{name}");
        assert_eq!(labels["uuid"], "SIM-0", "{name}");
        assert_eq!(labels["name"], "Simulated GPU", "{name}");
    }
    let value = |name: &str, with: &[(&str, &str)]| -> f64 {
        samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                with.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    };
    assert_eq!(value("carma_gpu_tasks", &[]), 1.0);
    assert_eq!(value("carma_tasks", &[("state", "running")]), 1.0);
    assert_eq!(value("carma_tasks", &[("state", "pending")]), 1.0);
    assert_eq!(value("carma_tasks_ended_total", &[("state", "done")]), 1.0);
    assert_eq!(
        value("carma_tasks_ended_total", &[("state", "failed")]),
        1.0
    );
    assert_eq!(value("carma_queue_wait_seconds_count", &[]), 3.0);
    assert_eq!(value("carma_run_time_seconds_count", &[]), 2.0);
    assert!(value("carma_dispatch_latency_seconds_count", &[]) >= 1.0);
    assert_eq!(
        value(
            "carma_estimate_error_bytes_count",
            &[("estimator", "declared")]
        ),
        1.0
    );
    for counter in [
        "carma_oom_crashes_total",
        "carma_oom_reruns_total",
        "carma_time_limit_kills_total",
    ] {
        assert_eq!(value(counter, &[]), 0.0, "{counter}");
    }
    assert_eq!(
        value("carma_refusals_total", &[("reason", "invalid_job")]),
        0.0
    );
    assert!(samples.iter().any(|s| s.name == "carma_intake_backlog"));
}

/// One sample of the exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Reads the OpenMetrics text format strictly: every line is a comment
/// (`# HELP`, `# TYPE`, `# UNIT` of a family declared once) or a sample of
/// a declared family with a valid name, well-quoted labels and a number;
/// `# EOF` ends it. Panics on anything else.
fn parse_openmetrics(text: &str) -> Vec<Sample> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut ended = false;
    for line in text.lines() {
        assert!(!ended, "text after # EOF: {line}");
        if line == "# EOF" {
            ended = true;
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let (kind, family) = (parts.next().unwrap(), parts.next().unwrap_or(""));
            assert!(name_ok(family), "bad family name in {line}");
            match kind {
                "TYPE" => {
                    let t = parts.next().unwrap_or("");
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "info",
                            "stateset",
                            "unknown"
                        ]
                        .contains(&t),
                        "{line}"
                    );
                    assert!(
                        families.insert(family.to_owned(), t.to_owned()).is_none(),
                        "{family} declared twice"
                    );
                }
                "HELP" | "UNIT" => {}
                _ => panic!("unknown comment {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => (
                name,
                parse_labels(rest.strip_suffix('}').unwrap_or_else(|| panic!("{line}"))),
            ),
        };
        assert!(name_ok(name), "bad sample name in {line}");
        let family = ["_total", "_bucket", "_count", "_sum", "_created", ""]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                families.get(base).map(|t| (base, t.as_str(), *suffix))
            })
            .unwrap_or_else(|| panic!("{name} belongs to no declared family"));
        match family {
            (_, "counter", "_total" | "_created") => {}
            (_, "histogram", "_bucket" | "_count" | "_sum" | "_created") => {}
            (_, "gauge", "") => {}
            other => panic!("{name} does not fit its family: {other:?}"),
        }
        if name.ends_with("_bucket") {
            assert!(labels.contains_key("le"), "{line}");
        }
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    assert!(ended, "no # EOF");
    let names: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    assert!(names.iter().all(|n| n.starts_with("carma_")), "{names:?}");
    samples
}

/// `a="x",b="y \"q\""` into a map; panics on a malformed set.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once("=\"")
            .unwrap_or_else(|| panic!("labels {text}"));
        assert!(
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "label name {key}"
        );
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    other => panic!("bad escape {other:?} in {text}"),
                },
                Some((i, '"')) => break i,
                Some((_, c)) => value.push(c),
                None => panic!("unterminated label value in {text}"),
            }
        };
        assert!(
            labels.insert(key.to_owned(), value).is_none(),
            "{key} twice in {text}"
        );
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    labels
}
