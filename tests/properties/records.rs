//! The JSON records the daemon and the supervisor read back from disk:
//! `task.json`, `launch.json`, `exit.json`, `supervisor.json` (through
//! `spool::record::read_state`) and the daemon's `status.json`.
//!
//! Kept apart from the parsers of `properties.rs` because `src/spool/` and
//! `src/daemon/` are being reworked: these tests only touch their public
//! functions and types, so a merge only has to look here.
//!
//! A record may be truncated by a crash, left behind by an older carma, or
//! replaced by whatever someone with access to the directory wrote; reading
//! it must be an error naming the file, never a panic.

use std::fmt::Debug;
use std::fs;
use std::path::PathBuf;

use carma::gpu::MetricSource;
use carma::procfs::ProcessId;
use carma::sched::Need;
use carma::spool::record::{
    ArrayMember, EstimateNote, Launch, Outcome, RunAs, RunExit, TaskRecord, read_state,
};
use carma::spool::status::{GpuStatus, RunningTask, Status, Verdict, WaitingTask};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{config, edit, mutated};

fn task_record() -> TaskRecord {
    TaskRecord {
        workdir: Some(PathBuf::from("/home/ada/jobs")),
        owner: Some(1000),
        estimate: Some(EstimateNote {
            need: Need::Mib(4096),
            source: "declared".into(),
        }),
        crashes: 1,
        outcome: Some(Outcome {
            state: "failed".into(),
            reason: Some("CUDA out of memory".into()),
            at: 1_700_000_100.25,
        }),
        held: true,
        priority: Some(-3),
        array: Some(ArrayMember {
            job: 42,
            index: 1,
            at_once: Some(2),
            expanded: true,
        }),
        ..TaskRecord::new("000042-resnet50", "resnet50.rad", 1_700_000_000.5)
    }
}

fn launch() -> Launch {
    Launch {
        task: "000042-resnet50".into(),
        run: 2,
        gpus: vec![0, 3],
        limit_mib: Some(6144),
        why: "GPU 0 has the most free memory".into(),
        launched_at: 1_700_000_050.0,
        script: vec!["conda activate tf".into(), "python train.py".into()],
        workdir: PathBuf::from("/home/ada/jobs"),
        umask: Some(0o027),
        run_as: Some(RunAs {
            uid: 1000,
            gid: 1000,
            name: "ada".into(),
            home: PathBuf::from("/home/ada"),
            shell: Some(PathBuf::from("/bin/bash")),
        }),
        groups: Some(vec![1000, 27, 44]),
        env: vec![("CUDA_VISIBLE_DEVICES".into(), "0,3".into())],
        grace_s: 10.0,
        time_limit_s: Some(7200.0),
        time_limit_grace_s: 30.0,
        cgroup: Some("/sys/fs/cgroup/system.slice/carma.service/carma-0123456789ab".into()),
        cpus: Some(2.5),
        host_memory_mib: Some(32768),
        max_processes: Some(16384),
        crashes: Some(1),
        boot: Some("5f0c9a2e-8d1b-4c3e-9a7f-2b6d8e1f4a90".into()),
    }
}

fn run_exit() -> RunExit {
    RunExit {
        started_at: 1_700_000_051.0,
        ended_at: 1_700_000_099.5,
        code: None,
        signal: Some(9),
        cancelled: false,
        timed_out: false,
        peak_mib: Some(5000),
        error: None,
        transient: false,
        as_its_user: true,
        host_peak_mib: Some(2048),
        cpu_s: Some(12.5),
        host_oom_kills: Some(1),
    }
}

fn process_id() -> ProcessId {
    ProcessId {
        pid: 4242,
        start_time: 987_654,
    }
}

fn status() -> Status {
    Status {
        updated_at: 1_700_000_060.0,
        daemon_pid: 4000,
        lock: Some((2049, 77)),
        backend: "4 simulated GPUs".into(),
        gpus: vec![GpuStatus {
            index: 0,
            uuid: "GPU-0".into(),
            name: "A100-SXM4-40GB".into(),
            total_mib: 40960,
            mig: false,
            used_mib: 5000,
            reserved_mib: 1024,
            smact: 0.5,
            occupancy: Some(0.3),
            dram: None,
            source: Some(MetricSource::Dcgm),
            power_w: Some(200.0),
            error: None,
            tasks: vec!["000042-resnet50".into()],
        }],
        running: vec![RunningTask {
            name: "000042-resnet50".into(),
            run: 2,
            gpus: vec![0],
            since: 1_700_000_050.0,
            time_limit_s: Some(7200.0),
            array: Some("42_1".into()),
            peak_mib: 5000,
            user: "ada".into(),
        }],
        recovery: vec![],
        pending: vec!["000043-bert".into()],
        verdicts: vec![Verdict {
            request: "hold.000043-bert".into(),
            uid: 1000,
            at: 1_700_000_059.5,
            refused: true,
            said: "refused: 000043-bert belongs to alice; only its owner or root may hold".into(),
        }],
        waiting: vec![WaitingTask {
            name: "000043-bert".into(),
            user: "ada".into(),
            priority: -3,
            held: true,
            array: None,
            why: "held (carma release 000043-bert lets it run)".into(),
            estimate: Some(EstimateNote {
                need: Need::Mib(6144),
                source: "history".into(),
            }),
        }],
        head_waits_for: Some("memory".into()),
        adopted: vec![("submit-1000-1-2".into(), "000043-bert".into())],
        ending: vec![],
    }
}

/// A JSON value of any type, at the edges of every range a record field
/// may have.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(u64::MAX),
            Just(u64::from(u32::MAX) + 1),
            Just(i32::MAX as u64 + 1)
        ]
        .prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just(-1.0),
            Just(1e300),
            Just(-1e300),
            Just(f64::MIN_POSITIVE)
        ]
        .prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
        Just(json!("whole-gpu")),
        Just(json!("\u{0}")),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::from),
            vec(("[a-z_]{1,8}", inner), 0..4)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// A change to a record's JSON that keeps it JSON: most edits of the text
/// stop at the syntax, these reach the types and ranges of the fields.
#[derive(Debug, Clone)]
enum JsonEdit {
    /// Replaces any node (a field, an element, the whole document).
    Replace(Index, Value),
    /// Removes a field of an object.
    Remove(Index),
    /// Adds a field to an object (records may or may not deny unknown
    /// fields).
    Add(Index, String, Value),
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    prop_oneof![
        3 => (any::<Index>(), json_value()).prop_map(|(i, v)| JsonEdit::Replace(i, v)),
        1 => any::<Index>().prop_map(JsonEdit::Remove),
        1 => (any::<Index>(), "[a-z_]{1,10}", json_value())
            .prop_map(|(i, k, v)| JsonEdit::Add(i, k, v)),
    ]
}

/// JSON pointers to every node of `value`, the root first.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        Value::Object(fields) => {
            for (key, field) in fields {
                let key = key.replace('~', "~0").replace('/', "~1");
                pointers(field, format!("{at}/{key}"), out);
            }
        }
        _ => {}
    }
}

fn apply_json(document: &mut Value, edit: &JsonEdit) {
    let mut all = Vec::new();
    pointers(document, String::new(), &mut all);
    match edit {
        JsonEdit::Replace(i, value) => {
            if let Some(node) = document.pointer_mut(&all[i.index(all.len())]) {
                *node = value.clone();
            }
        }
        JsonEdit::Remove(i) => {
            let objects: Vec<&String> = all
                .iter()
                .filter(|p| document.pointer(p).is_some_and(Value::is_object))
                .collect();
            if objects.is_empty() {
                return;
            }
            let pointer = objects[i.index(objects.len())].clone();
            if let Some(Value::Object(fields)) = document.pointer_mut(&pointer)
                && !fields.is_empty()
            {
                let key = fields.keys().nth(i.index(fields.len())).cloned();
                if let Some(key) = key {
                    fields.remove(&key);
                }
            }
        }
        JsonEdit::Add(i, key, value) => {
            let objects: Vec<String> = all
                .iter()
                .filter(|p| document.pointer(p).is_some_and(Value::is_object))
                .cloned()
                .collect();
            if objects.is_empty() {
                return;
            }
            let pointer = &objects[i.index(objects.len())];
            if let Some(Value::Object(fields)) = document.pointer_mut(pointer) {
                fields.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Bytes to store as a record whose valid form is `sample`: random bytes,
/// the sample with JSON-level and then byte-level edits, or nesting deep
/// enough to exhaust a recursive parser's stack.
fn record_bytes(sample: Value) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => vec(any::<u8>(), 0..256),
        4 => (vec(json_edit(), 0..4), vec(edit(), 0..3), any::<bool>()).prop_map(
            move |(json_edits, edits, pretty)| {
                let mut document = sample.clone();
                for e in &json_edits {
                    apply_json(&mut document, e);
                }
                let text = if pretty {
                    serde_json::to_vec_pretty(&document).unwrap()
                } else {
                    serde_json::to_vec(&document).unwrap()
                };
                mutated(&text, &edits)
            }
        ),
        1 => (1..5_000usize, any::<bool>()).prop_map(|(depth, arrays)| {
            if arrays {
                format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
            } else {
                format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth)).into_bytes()
            }
        }),
    ]
}

/// Stores `bytes` as a record file and reads it as a `T`: no panic, and a
/// refusal names the file.
fn read_back<T: DeserializeOwned + Debug>(bytes: &[u8]) -> Option<T> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("record.json");
    fs::write(&path, bytes).unwrap();
    // The loader carma reads its state with (the file is this process's,
    // written by nobody else, as carma's records are).
    match read_state::<T>(&path) {
        Ok(record) => Some(record),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&path.display().to_string()),
                "does not name the file: {text}"
            );
            assert!(
                text.len() > path.display().to_string().len() + 2,
                "no reason: {text}"
            );
            None
        }
    }
}

fn sample_json<T: Serialize>(record: &T) -> Value {
    serde_json::to_value(record).unwrap()
}

#[test]
fn records_round_trip_through_their_files() {
    assert_eq!(
        read_back::<TaskRecord>(&serde_json::to_vec(&task_record()).unwrap()),
        Some(task_record())
    );
    assert_eq!(
        read_back::<Launch>(&serde_json::to_vec(&launch()).unwrap()),
        Some(launch())
    );
    assert_eq!(
        read_back::<RunExit>(&serde_json::to_vec(&run_exit()).unwrap()),
        Some(run_exit())
    );
    assert_eq!(
        read_back::<ProcessId>(&serde_json::to_vec(&process_id()).unwrap()),
        Some(process_id())
    );
    assert_eq!(
        read_back::<Status>(&serde_json::to_vec(&status()).unwrap()),
        Some(status())
    );
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn record_task_json_never_panics(bytes in record_bytes(sample_json(&task_record()))) {
        let _ = read_back::<TaskRecord>(&bytes);
    }

    #[test]
    fn record_launch_json_never_panics(bytes in record_bytes(sample_json(&launch()))) {
        let _ = read_back::<Launch>(&bytes);
    }

    #[test]
    fn record_exit_json_never_panics_and_describes_itself(
        bytes in record_bytes(sample_json(&run_exit())),
    ) {
        if let Some(exit) = read_back::<RunExit>(&bytes) {
            // Signals and codes come from the file: any i32 must print.
            prop_assert!(!exit.describe().is_empty());
            let _ = exit.succeeded();
        }
    }

    #[test]
    fn record_supervisor_identity_never_panics(
        bytes in record_bytes(sample_json(&process_id())),
    ) {
        let _ = read_back::<ProcessId>(&bytes);
    }

    #[test]
    fn record_daemon_status_never_panics(bytes in record_bytes(sample_json(&status()))) {
        let _ = read_back::<Status>(&bytes);
    }
}
