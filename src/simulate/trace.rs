//! Traces: which task arrives when, how long it runs alone, how much memory
//! it really takes, and what the published estimators said about it.
//!
//! The format is the CSV of `data/carma/traces/` (derived from the
//! Microsoft Philly trace by the CARMA authors).

use std::io::Read;
use std::path::Path;

use compact_str::CompactString;
use serde::Deserialize;
use thiserror::Error;

use crate::rad::MemoryLine;
use crate::sched::Need;

/// `40000` in an estimate column means "the whole 40 GB GPU", as in the
/// legacy `.rad` files the traces were made from.
pub const WHOLE_GPU_MARKER_MIB: f64 = 40000.0;

/// One task of a trace.
///
/// Its names are [`CompactString`]s, held inline up to 24 bytes: a
/// streamed trace is parsed on one thread and replayed on another, and
/// three heap strings per row, allocated there and freed here, were a
/// twentieth of the replay's time (a million rows).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TraceTask {
    /// Seconds after the first submission.
    pub submit_s: f64,
    /// The task's `.rad` name.
    pub task: CompactString,
    pub model: CompactString,
    /// light / medium / heavy: the class its SMACT assumption comes from.
    pub class: CompactString,
    pub batch: u32,
    pub gpus: u32,
    /// Measured run time alone (epoch time x epochs), seconds.
    pub duration_s: f64,
    /// Measured peak GPU memory per GPU, MiB: what the task really takes.
    pub memory_mib: f64,
    /// Standalone SM activity, 0..1 (an assumption by class).
    pub smact_assumed: f64,
    pub est_horus_mib: f64,
    pub est_faketensor_mib: f64,
    pub est_gpumemnet_mib: f64,
}

/// `trace` with every submission moved by a seeded uniform draw from
/// [-jitter_s, jitter_s] (not before 0) and sorted again: replaying a
/// trace's near neighbours shows how much of a difference between two
/// runs is the estimates and how much the accident of one arrival order,
/// which moves a 90-task trace's total time by several percent.
pub fn jittered(trace: &[TraceTask], jitter_s: f64, seed: u64) -> Vec<TraceTask> {
    use rand_xoshiro::Xoshiro256PlusPlus;
    use rand_xoshiro::rand_core::{RngCore, SeedableRng};
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut tasks: Vec<TraceTask> = trace
        .iter()
        .map(|t| {
            // 53 random bits as a fraction in [0, 1).
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            TraceTask {
                submit_s: (t.submit_s + jitter_s * (2.0 * u - 1.0)).clamp(0.0, MAX_TRACE_SECONDS),
                ..t.clone()
            }
        })
        .collect();
    tasks.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    tasks
}

impl TraceTask {
    /// The estimate the core sees when the operator picks `column` (the
    /// trace's columns are the legacy file's memory lines).
    pub fn need(&self, column: MemoryLine) -> Need {
        let mib = match column {
            MemoryLine::Oracle => self.memory_mib,
            MemoryLine::Horus => self.est_horus_mib,
            MemoryLine::Faketensor => self.est_faketensor_mib,
            MemoryLine::Gpumemnet => self.est_gpumemnet_mib,
            MemoryLine::None => return Need::Unknown,
        };
        if mib == WHOLE_GPU_MARKER_MIB && column != MemoryLine::Oracle {
            Need::WholeGpu
        } else {
            Need::Mib(mib.ceil() as u64)
        }
    }
}

/// A trace that cannot be used, with the place that is wrong.
#[derive(Debug, Error)]
pub enum TraceError {
    #[error("cannot read trace {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Row {
        path: String,
        line: u64,
        message: String,
    },
    #[error("{path}: the trace has no tasks")]
    Empty { path: String },
    /// Only from [`stream`], which replays rows as they come: [`load`]
    /// takes such a trace and sorts it.
    #[error(
        "{path}:{line}: submitted at {submit_s} s, before the row above it: not in submission order"
    )]
    Unsorted {
        path: String,
        line: u64,
        submit_s: f64,
    },
}

/// Reads a trace file; tasks come back in submission order (stable for
/// equal times, so file order breaks ties).
pub fn load(path: &Path) -> Result<Vec<TraceTask>, TraceError> {
    sorted(stream_unsorted(path)?)
}

/// Reads a trace from CSV text; `name` labels errors.
pub fn parse(name: &str, text: &str) -> Result<Vec<TraceTask>, TraceError> {
    sorted(Rows::new(name, text.as_bytes(), false)?)
}

/// The trace file's tasks one by one, in file order, which must be
/// submission order ([`TraceError::Unsorted`] where it is not): a replay
/// that never holds the whole trace, whatever its length. The rows are
/// read ahead on a thread of their own ([`ReadAhead`]).
pub fn stream(path: &Path) -> Result<ReadAhead, TraceError> {
    Ok(ReadAhead::start(Rows::open(path, true)?))
}

/// Rows read this many at a time by [`ReadAhead`]'s thread: one hand-over
/// per batch keeps the channel's cost out of the per-row figures.
const READ_AHEAD_BATCH: usize = 1024;

/// A trace's rows parsed on a thread beside the replay. Parsing is about
/// a fifth of a long replay's work; beside it, on a second core, it costs
/// no wall time. At most a few batches wait, so the memory stays small
/// however long the trace; the thread ends after the last row or the
/// first error (then it sends an empty batch: the end), or when the
/// replay drops this and its next send fails. A thread that ends without
/// saying so is an error, never a trace cut short.
pub struct ReadAhead {
    name: String,
    source: Source,
    batch: std::vec::IntoIter<Result<TraceTask, TraceError>>,
}

enum Source {
    Thread(std::sync::mpsc::Receiver<Vec<Result<TraceTask, TraceError>>>),
    /// No thread could be started: the rows are read as they are asked for.
    Inline(Box<Rows<std::io::BufReader<std::fs::File>>>),
    /// The stream is over: the thread sent its end, or stopped without
    /// it, which was said.
    Ended,
}

impl ReadAhead {
    fn start(rows: Rows<std::io::BufReader<std::fs::File>>) -> Self {
        let name = rows.name.clone();
        // Shared only so that the rows come back if no thread starts.
        let shared = std::sync::Arc::new(std::sync::Mutex::new(Some(rows)));
        let theirs = std::sync::Arc::clone(&shared);
        let (send, receive) = std::sync::mpsc::sync_channel(4);
        let spawned = std::thread::Builder::new()
            .name("trace reader".into())
            .spawn(move || {
                let taken = theirs.lock().ok().and_then(|mut rows| rows.take());
                let Some(mut rows) = taken else {
                    return;
                };
                loop {
                    let batch: Vec<_> = rows.by_ref().take(READ_AHEAD_BATCH).collect();
                    let end = batch.is_empty();
                    if send.send(batch).is_err() || end {
                        return;
                    }
                }
            });
        let left = match spawned {
            Ok(_) => None,
            Err(_) => shared.lock().ok().and_then(|mut rows| rows.take()),
        };
        ReadAhead {
            name,
            source: match left {
                Some(rows) => Source::Inline(Box::new(rows)),
                None => Source::Thread(receive),
            },
            batch: Vec::new().into_iter(),
        }
    }
}

impl Iterator for ReadAhead {
    type Item = Result<TraceTask, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.source {
            Source::Inline(rows) => rows.next(),
            Source::Thread(batches) => loop {
                if let Some(row) = self.batch.next() {
                    return Some(row);
                }
                match batches.recv() {
                    Ok(batch) if !batch.is_empty() => self.batch = batch.into_iter(),
                    Ok(_) => {
                        self.source = Source::Ended;
                        return None;
                    }
                    Err(_) => {
                        self.source = Source::Ended;
                        return Some(Err(TraceError::Read {
                            path: self.name.clone(),
                            source: std::io::Error::other("the thread reading it stopped"),
                        }));
                    }
                }
            },
            Source::Ended => None,
        }
    }
}

fn stream_unsorted(path: &Path) -> Result<Rows<impl Read>, TraceError> {
    Rows::open(path, false)
}

fn sorted(
    rows: impl Iterator<Item = Result<TraceTask, TraceError>>,
) -> Result<Vec<TraceTask>, TraceError> {
    let mut tasks = rows.collect::<Result<Vec<_>, _>>()?;
    if !tasks.is_sorted_by(|a, b| a.submit_s <= b.submit_s) {
        tasks.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    }
    Ok(tasks)
}

/// A trace's rows as tasks, each checked; ends with [`TraceError::Empty`]
/// when there were none.
pub struct Rows<R> {
    name: String,
    reader: csv::Reader<R>,
    headers: csv::StringRecord,
    record: csv::StringRecord,
    /// Whether a row submitted before the one above it is an error.
    in_order: bool,
    last_submit_s: f64,
    count: usize,
    done: bool,
}

impl Rows<std::io::BufReader<std::fs::File>> {
    fn open(path: &Path, in_order: bool) -> Result<Self, TraceError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TraceError::Read {
            path: name.clone(),
            source,
        })?;
        Rows::new(&name, std::io::BufReader::new(file), in_order)
    }
}

impl<R: Read> Rows<R> {
    fn new(name: &str, input: R, in_order: bool) -> Result<Self, TraceError> {
        let mut reader = csv::Reader::from_reader(input);
        let headers = reader
            .headers()
            .map_err(|e| row_error(name, 1, e.to_string()))?
            .clone();
        Ok(Rows {
            name: name.to_owned(),
            reader,
            headers,
            record: csv::StringRecord::new(),
            in_order,
            last_submit_s: 0.0,
            count: 0,
            done: false,
        })
    }

    fn row(&mut self) -> Result<Option<TraceTask>, TraceError> {
        match self.reader.read_record(&mut self.record) {
            Ok(true) => {}
            Ok(false) if self.count == 0 => {
                return Err(TraceError::Empty {
                    path: self.name.clone(),
                });
            }
            Ok(false) => return Ok(None),
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line());
                return Err(row_error(&self.name, line, e.to_string()));
            }
        }
        let line = self.record.position().map_or(0, |p| p.line());
        let task: TraceTask = self
            .record
            .deserialize(Some(&self.headers))
            .map_err(|e| row_error(&self.name, line, csv_message(&e)))?;
        check(&task).map_err(|m| row_error(&self.name, line, m))?;
        if self.in_order && task.submit_s < self.last_submit_s {
            return Err(TraceError::Unsorted {
                path: self.name.clone(),
                line,
                submit_s: task.submit_s,
            });
        }
        self.last_submit_s = task.submit_s;
        self.count += 1;
        Ok(Some(task))
    }
}

impl<R: Read> Iterator for Rows<R> {
    type Item = Result<TraceTask, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let row = self.row().transpose();
        // After the last row or the first error, nothing more.
        self.done = !matches!(row, Some(Ok(_)));
        row
    }
}

fn row_error(path: &str, line: u64, message: String) -> TraceError {
    TraceError::Row {
        path: path.to_owned(),
        line,
        message,
    }
}

fn csv_message(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => match err.field() {
            Some(field) => format!("column {}: {}", field + 1, err.kind()),
            None => err.kind().to_string(),
        },
        _ => e.to_string(),
    }
}

/// Longest time a trace may give, about 300 years: far beyond any trace,
/// and far from where a time plus a run time overflows (a `Duration` from
/// 2^64 seconds up panics).
pub const MAX_TRACE_SECONDS: f64 = 1e10;

fn check(t: &TraceTask) -> Result<(), String> {
    let finite_nonneg = |what: &str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(())
        } else {
            Err(format!("{what} = {v}: expected a number >= 0"))
        }
    };
    finite_nonneg("submit_s", t.submit_s)?;
    for (what, v) in [("submit_s", t.submit_s), ("duration_s", t.duration_s)] {
        if v > MAX_TRACE_SECONDS {
            return Err(format!(
                "{what} = {v}: expected at most {MAX_TRACE_SECONDS} seconds"
            ));
        }
    }
    finite_nonneg("memory_mib", t.memory_mib)?;
    finite_nonneg("est_horus_mib", t.est_horus_mib)?;
    finite_nonneg("est_faketensor_mib", t.est_faketensor_mib)?;
    finite_nonneg("est_gpumemnet_mib", t.est_gpumemnet_mib)?;
    if !(t.duration_s.is_finite() && t.duration_s > 0.0) {
        return Err(format!(
            "duration_s = {}: expected seconds > 0",
            t.duration_s
        ));
    }
    if !(0.0..=1.0).contains(&t.smact_assumed) {
        return Err(format!(
            "smact_assumed = {}: expected a fraction in [0, 1]",
            t.smact_assumed
        ));
    }
    if t.gpus == 0 {
        return Err("gpus = 0: expected at least 1".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "submit_s,task,model,class,batch,gpus,duration_s,memory_mib,smact_assumed,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib\n";

    #[test]
    fn jitter_moves_submissions_within_bounds_and_keeps_them_sorted() {
        let text = "submit_s,task,model,class,batch,gpus,duration_s,memory_mib,smact_assumed,est_horus_mib,est_faketensor_mib,est_gpumemnet_mib\n\
                    0,a.rad,a,light,8,1,10,100,0.3,1,1,1\n\
                    100,b.rad,b,light,8,1,10,100,0.3,1,1,1\n\
                    200,c.rad,c,light,8,1,10,100,0.3,1,1,1\n";
        let trace = parse("t.csv", text).unwrap();
        let moved = jittered(&trace, 30.0, 7);
        assert_eq!(moved, jittered(&trace, 30.0, 7), "seeded");
        assert_ne!(moved, jittered(&trace, 30.0, 8));
        assert!(moved.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
        for t in &moved {
            let original = trace.iter().find(|o| o.task == t.task).unwrap();
            assert!((t.submit_s - original.submit_s).abs() <= 30.0 && t.submit_s >= 0.0);
        }
        assert_eq!(jittered(&trace, 0.0, 7), trace);
    }

    #[test]
    fn rows_are_sorted_by_submission() {
        let text = format!(
            "{HEADER}5,b.rad,m,light,32,1,10,100,0.3,1,2,40000\n0,a.rad,m,heavy,8,2,20,200.5,0.85,3,4,5\n"
        );
        let tasks = parse("t.csv", &text).unwrap();
        assert_eq!(tasks[0].task, "a.rad");
        assert_eq!(tasks[0].need(MemoryLine::Oracle), Need::Mib(201));
        assert_eq!(tasks[1].need(MemoryLine::Gpumemnet), Need::WholeGpu);
        assert_eq!(tasks[1].need(MemoryLine::None), Need::Unknown);
    }

    #[test]
    fn a_stream_refuses_rows_out_of_order_where_a_load_sorts_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let rows = "5,b.rad,m,light,32,1,10,100,0.3,1,2,3\n0,a.rad,m,heavy,8,2,20,200,0.85,3,4,5\n";
        std::fs::write(&path, format!("{HEADER}{rows}")).unwrap();
        let mut rows = stream(&path).unwrap();
        assert_eq!(rows.next().unwrap().unwrap().task, "b.rad");
        let err = rows.next().unwrap().unwrap_err();
        assert!(matches!(err, TraceError::Unsorted { line: 3, .. }), "{err}");
        assert!(rows.next().is_none(), "nothing after an error");
        assert_eq!(load(&path).unwrap()[0].task, "a.rad");
        std::fs::write(&path, HEADER).unwrap();
        assert!(matches!(
            stream(&path).unwrap().next(),
            Some(Err(TraceError::Empty { .. }))
        ));
    }

    #[test]
    fn a_stream_read_ahead_keeps_every_row_and_its_order_across_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        let rows = 2 * READ_AHEAD_BATCH + 100;
        let bad = READ_AHEAD_BATCH + 50;
        let mut text = HEADER.to_owned();
        for i in 0..rows {
            let at = if i == bad { 0 } else { i };
            text.push_str(&format!("{at},t{i}.rad,m,light,32,1,10,100,0.3,1,2,3\n"));
        }
        std::fs::write(&path, &text).unwrap();
        let read: Vec<_> = stream(&path).unwrap().collect();
        assert_eq!(
            read.len(),
            bad + 1,
            "the rows before the bad one, then its error"
        );
        for (i, row) in read[..bad].iter().enumerate() {
            assert_eq!(row.as_ref().unwrap().task, format!("t{i}.rad"));
        }
        let line = bad as u64 + 2;
        assert!(
            matches!(read[bad], Err(TraceError::Unsorted { line: l, .. }) if l == line),
            "{:?}",
            read[bad]
        );
        let mut whole = stream(&path).unwrap();
        assert_eq!(whole.by_ref().count(), bad + 1);
        assert!(whole.next().is_none(), "and nothing after its end");
        let mut early = stream(&path).unwrap();
        assert_eq!(early.next().unwrap().unwrap().task, "t0.rad");
        drop(early); // its thread ends at its next send
    }

    #[test]
    fn a_reader_that_stops_without_its_end_is_an_error_not_a_short_trace() {
        let (send, receive) = std::sync::mpsc::sync_channel(1);
        send.send(
            parse(
                "t.csv",
                &format!("{HEADER}0,a.rad,m,light,32,1,10,100,0.3,1,2,3\n"),
            )
            .unwrap()
            .into_iter()
            .map(Ok)
            .collect(),
        )
        .unwrap();
        drop(send);
        let mut rows = ReadAhead {
            name: "t.csv".into(),
            source: Source::Thread(receive),
            batch: Vec::new().into_iter(),
        };
        assert_eq!(rows.next().unwrap().unwrap().task, "a.rad");
        let err = rows.next().unwrap().unwrap_err().to_string();
        assert!(err.starts_with("cannot read trace t.csv: "), "{err}");
        assert!(rows.next().is_none());
    }

    #[test]
    fn bad_rows_name_their_line() {
        let text = format!(
            "{HEADER}0,a.rad,m,light,32,1,10,100,0.3,1,2,3\n1,b.rad,m,light,32,one,10,100,0.3,1,2,3\n"
        );
        let err = parse("t.csv", &text).unwrap_err().to_string();
        assert!(err.starts_with("t.csv:3: column 6"), "{err}");

        let text = format!("{HEADER}0,a.rad,m,light,32,1,0,100,0.3,1,2,3\n");
        let err = parse("t.csv", &text).unwrap_err().to_string();
        assert!(err.contains("t.csv:2: duration_s = 0"), "{err}");

        let text = format!("{HEADER}0,a.rad,m,light,32,1,10,100,1.3,1,2,3\n");
        assert!(
            parse("t.csv", &text)
                .unwrap_err()
                .to_string()
                .contains("smact_assumed")
        );
        assert!(matches!(
            parse("t.csv", HEADER),
            Err(TraceError::Empty { .. })
        ));
        // Times that would overflow a clock (the simulator panicked).
        for row in [
            "0,a.rad,m,light,32,1,1e30,100,0.3,1,2,3",
            "1e30,a.rad,m,light,32,1,10,100,0.3,1,2,3",
        ] {
            let err = parse("t.csv", &format!("{HEADER}{row}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("expected at most"), "{err}");
        }
    }
}
