//! Job history: the observed peak memory of jobs that ran here, per
//! [`Fingerprint`], so a job that comes back gets a measured answer.
//!
//! One small JSON file per fingerprint in the directory given to
//! [`History::open`] (the daemon will use `<spool>/history/`). Files are
//! written as temp file + fsync + rename + fsync of the directory, so a
//! crash leaves the old record or the new one, never half of one; one
//! file per job keeps writers of different jobs from touching the same
//! file. The record keeps the largest peak seen: a job's peak varies a
//! little from run to run, and the estimate must cover the worst run.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::spool::json::{read_own, read_state, write_json};
use crate::spool::record::Fingerprint;
use crate::spool::{PRIVATE, write_replace};

/// What history knows about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub fingerprint: Fingerprint,
    /// Largest observed peak, MiB.
    pub max_peak_mib: u64,
    /// Peak of the latest run, MiB.
    pub last_peak_mib: u64,
    /// Runs recorded.
    pub runs: u64,
    /// Longest successful run, seconds: how long backfill plans the job
    /// to hold its GPUs when it states no time limit. Absent in records
    /// written before run times were kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_run_s: Option<f64>,
}

/// The larger of two optional run times.
fn longer(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The file of task numbers in `done/` whose runs the history holds.
const ABSORBED: &str = "absorbed";
/// Largest such file read: 20 bytes a task for five million tasks.
const MAX_ABSORBED_BYTES: u64 = 100 << 20;

/// The history store in one directory.
#[derive(Debug, Clone)]
pub struct History {
    dir: PathBuf,
}

impl History {
    /// The store in `dir`; the directory is created on the first record.
    pub fn open(dir: impl Into<PathBuf>) -> History {
        History { dir: dir.into() }
    }

    /// Where this store keeps its files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, fingerprint: &Fingerprint) -> PathBuf {
        self.dir.join(format!("{}.json", fingerprint.key()))
    }

    /// The record of a job, if it ran here before. A record that cannot
    /// be read is an error, not "never ran": the caller logs it and asks
    /// the next estimator.
    pub fn lookup(&self, fingerprint: &Fingerprint) -> io::Result<Option<Record>> {
        let path = self.path(fingerprint);
        // carma's own record, never one someone else could have written.
        let record: Record = match read_state(&path) {
            Ok(record) => record,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // The caller only logs the error: without the path, "stream did
            // not contain valid UTF-8" leaves nobody a file to look at.
            Err(e) if e.to_string().contains(&path.display().to_string()) => return Err(e),
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        // A different fingerprint under the same key would be a SHA-256
        // collision or a hand-edited file: not this job.
        Ok((record.fingerprint == *fingerprint).then_some(record))
    }

    /// The history directory, carma's alone (0700): which jobs ran here is
    /// nobody else's business.
    fn make_dir(&self) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
    }

    /// Records how long a run that failed ran, in the record of its job
    /// if there is one (a failed run's peak says nothing of what the job
    /// needs, and it adds no run): the longest run seen counts every run.
    pub fn record_run_time(&self, fingerprint: &Fingerprint, run_s: f64) -> io::Result<()> {
        let Some(old) = self.lookup(fingerprint)? else {
            return Ok(());
        };
        let longest = longer(
            old.max_run_s,
            Some(run_s).filter(|s| s.is_finite() && *s >= 0.0),
        );
        if longest == old.max_run_s {
            return Ok(());
        }
        write_json(
            &self.path(fingerprint),
            &Record {
                max_run_s: longest,
                ..old
            },
        )
    }

    /// Records a finished run's observed peak and, when known, how long it
    /// ran.
    pub fn record(
        &self,
        fingerprint: &Fingerprint,
        peak_mib: u64,
        run_s: Option<f64>,
    ) -> io::Result<Record> {
        let run_s = run_s.filter(|s| s.is_finite() && *s >= 0.0);
        self.make_dir()?;
        let record = match self.lookup(fingerprint) {
            Ok(Some(old)) => Record {
                fingerprint: old.fingerprint,
                max_peak_mib: old.max_peak_mib.max(peak_mib),
                last_peak_mib: peak_mib,
                runs: old.runs + 1,
                max_run_s: longer(old.max_run_s, run_s),
            },
            // A missing or unreadable old record is replaced: the new
            // measurement is worth more than a file nobody can read.
            Ok(None) | Err(_) => Record {
                fingerprint: fingerprint.clone(),
                max_peak_mib: peak_mib,
                last_peak_mib: peak_mib,
                runs: 1,
                max_run_s: run_s,
            },
        };
        write_json(&self.path(fingerprint), &record)?;
        Ok(record)
    }

    /// The numbers of the tasks in `done/` whose runs this history holds
    /// (or that had nothing to give it): a daemon's start reads only the
    /// others' records, not all of `done/` again. A missing or unreadable
    /// file is an empty set: everything is read, which is only slower.
    pub fn absorbed(&self) -> HashSet<u64> {
        let Ok(bytes) = read_own(&self.dir.join(ABSORBED), MAX_ABSORBED_BYTES) else {
            return HashSet::new();
        };
        // Each number ends its line: whatever follows the last newline
        // is a line a crash cut short (`12` of `123`), and not taken.
        let whole = bytes.iter().rposition(|&b| b == b'\n').unwrap_or(0);
        let mut absorbed = HashSet::new();
        for line in bytes[..whole].split(|&b| b == b'\n') {
            let Ok(line) = std::str::from_utf8(line) else {
                continue;
            };
            // `-N`: task N was requeued since ([`History::note_unabsorbed`]).
            match line.strip_prefix('-') {
                Some(seq) => seq.parse().ok().map(|seq| absorbed.remove(&seq)),
                None => line.parse().ok().map(|seq| absorbed.insert(seq)),
            };
        }
        absorbed
    }

    /// Adds task `seq` to [`History::absorbed`] once its run is recorded.
    /// Not forced to disk: a line a crash loses only has its record read
    /// at the next start.
    pub fn note_absorbed(&self, seq: u64) -> io::Result<()> {
        self.append_absorbed(&format!("{seq}\n"))
    }

    fn append_absorbed(&self, line: &str) -> io::Result<()> {
        self.make_dir()?;
        let mut file = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(PRIVATE)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(self.dir.join(ABSORBED))?;
        file.write_all(line.as_bytes())
    }

    /// Takes task `seq` out of [`History::absorbed`]: requeued, it keeps
    /// its number, and its next run in `done/` is not yet taken in.
    pub fn note_unabsorbed(&self, seq: u64) -> io::Result<()> {
        self.append_absorbed(&format!("-{seq}\n"))
    }

    /// Replaces [`History::absorbed`] with `seqs` (a start's listing of
    /// `done/`, all of it now taken in): tasks pruned since drop out.
    pub fn keep_absorbed(&self, seqs: impl IntoIterator<Item = u64>) -> io::Result<()> {
        self.make_dir()?;
        let text: String = seqs.into_iter().map(|seq| format!("{seq}\n")).collect();
        write_replace(&self.dir.join(ABSORBED), text.as_bytes(), PRIVATE)
    }

    /// Folds in what the records of `runs` finished runs of a job say, the
    /// largest peak among them `peak_mib`, unless the history knows as much
    /// already; true when it learned something. Folding the same runs in
    /// again changes nothing, so a restarted daemon can rebuild history
    /// from `done/` every time.
    pub fn absorb(
        &self,
        fingerprint: &Fingerprint,
        peak_mib: u64,
        runs: u64,
        run_s: Option<f64>,
    ) -> io::Result<bool> {
        let run_s = run_s.filter(|s| s.is_finite() && *s >= 0.0);
        let old = self.lookup(fingerprint).ok().flatten();
        if old.as_ref().is_some_and(|o| {
            o.max_peak_mib >= peak_mib
                && o.runs >= runs
                && longer(o.max_run_s, run_s) == o.max_run_s
        }) {
            return Ok(false);
        }
        self.make_dir()?;
        let record = Record {
            fingerprint: fingerprint.clone(),
            max_peak_mib: old
                .as_ref()
                .map_or(peak_mib, |o| o.max_peak_mib.max(peak_mib)),
            last_peak_mib: old.as_ref().map_or(peak_mib, |o| o.last_peak_mib),
            runs: old.as_ref().map_or(runs, |o| o.runs.max(runs)),
            max_run_s: longer(old.as_ref().and_then(|o| o.max_run_s), run_s),
        };
        write_json(&self.path(fingerprint), &record)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_runs_time_lengthens_its_jobs_longest_run_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("history"));
        let unknown = job(16);
        history.record_run_time(&unknown, 500.0).unwrap();
        assert_eq!(history.lookup(&unknown).unwrap(), None, "no record made");
        let known = job(32);
        history.record(&known, 3000, Some(5.0)).unwrap();
        history.record_run_time(&known, 3600.0).unwrap();
        history.record_run_time(&known, 60.0).unwrap();
        let r = history.lookup(&known).unwrap().unwrap();
        assert_eq!(
            (r.max_peak_mib, r.runs, r.max_run_s),
            (3000, 1, Some(3600.0))
        );
    }

    fn job(batch: u64) -> Fingerprint {
        Fingerprint {
            command: "python train.py".into(),
            summary_digest: Some("abc".into()),
            batch_size: Some(batch),
            user: None,
        }
    }

    #[test]
    fn a_recorded_job_is_found_again_with_its_largest_peak() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("history"));
        assert_eq!(history.lookup(&job(32)).unwrap(), None);
        history.record(&job(32), 5000, Some(60.0)).unwrap();
        history.record(&job(32), 4800, Some(90.0)).unwrap();
        let r = history.lookup(&job(32)).unwrap().unwrap();
        assert_eq!((r.max_peak_mib, r.last_peak_mib, r.runs), (5000, 4800, 2));
        assert_eq!(r.max_run_s, Some(90.0), "the longest run");
        assert_eq!(history.lookup(&job(64)).unwrap(), None, "other batch size");
        let leftovers: Vec<_> = fs::read_dir(history.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn the_tasks_taken_in_are_listed_and_a_line_cut_short_is_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("history"));
        assert!(history.absorbed().is_empty(), "no file yet");
        history.note_absorbed(3).unwrap();
        history.note_absorbed(5).unwrap();
        assert_eq!(history.absorbed(), HashSet::from([3, 5]));
        history.keep_absorbed([5, 7]).unwrap();
        assert_eq!(history.absorbed(), HashSet::from([5, 7]));
        // Requeued, 5 is no longer taken in, until its next run is.
        history.note_unabsorbed(5).unwrap();
        assert_eq!(history.absorbed(), HashSet::from([7]));
        history.note_absorbed(5).unwrap();
        assert_eq!(history.absorbed(), HashSet::from([5, 7]));
        history.keep_absorbed([5, 7]).unwrap();
        let path = history.dir().join(ABSORBED);
        fs::write(&path, "5\n7\n1x\n12").unwrap();
        assert_eq!(
            history.absorbed(),
            HashSet::from([5, 7]),
            "12 may be 123 cut short"
        );
        // Writable by others: not carma's list, so nothing is trusted.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(history.absorbed().is_empty());
    }

    #[test]
    fn absorbing_the_same_runs_again_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path().join("history"));
        assert!(history.absorb(&job(16), 3000, 2, Some(30.0)).unwrap());
        assert!(!history.absorb(&job(16), 3000, 2, Some(30.0)).unwrap());
        assert!(!history.absorb(&job(16), 2500, 1, None).unwrap());
        assert!(history.absorb(&job(16), 3500, 2, None).unwrap());
        assert!(history.absorb(&job(16), 3500, 2, Some(45.0)).unwrap());
        let r = history.lookup(&job(16)).unwrap().unwrap();
        assert_eq!((r.max_peak_mib, r.runs, r.max_run_s), (3500, 2, Some(45.0)));
    }

    #[test]
    fn keys_do_not_collide_by_concatenation() {
        let a = Fingerprint {
            command: "ab".into(),
            summary_digest: Some("c".into()),
            batch_size: None,
            user: None,
        };
        let b = Fingerprint {
            command: "a".into(),
            summary_digest: Some("bc".into()),
            batch_size: None,
            user: None,
        };
        assert_ne!(a.key(), b.key());
        // One user's run is not another's, nor everyone's.
        let alice = Fingerprint {
            user: Some(1001),
            ..a.clone()
        };
        let bob = Fingerprint {
            user: Some(1002),
            ..a.clone()
        };
        assert!(alice.key() != bob.key() && alice.key() != a.key());
    }

    /// Found by `tests/properties.rs`: a record that is not UTF-8 gave an
    /// error without the file's name.
    #[test]
    fn a_record_that_is_not_utf8_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{}.json", job(8).key()));
        fs::write(&path, b"{\x80}").unwrap();
        let err = History::open(dir.path()).lookup(&job(8)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_corrupt_record_is_an_error_and_is_replaced_by_the_next_run() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(dir.path());
        fs::write(dir.path().join(format!("{}.json", job(8).key())), "{oops").unwrap();
        assert!(history.lookup(&job(8)).is_err());
        history.record(&job(8), 1000, None).unwrap();
        assert_eq!(history.lookup(&job(8)).unwrap().unwrap().runs, 1);
    }
}
