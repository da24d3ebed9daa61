//! Ended tasks pruned from `done/` and `failed/`: after
//! `daemon.retention_days` a task's directory goes (its output with it),
//! and one line in `archive.jsonl` keeps what the report and the history
//! need of it: its record and how each run went. Without pruning, `done/`
//! would grow without end on root's disk, and every start would list it.

use std::fs::OpenOptions;
use std::io::{self, BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use super::record::{Launch, RunExit, TaskRecord};
use super::{PRIVATE, Spool, SpoolError, State, TaskName, at};

/// The archive's file in the spool.
pub const ARCHIVE: &str = "archive.jsonl";

/// One pruned task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Archived {
    /// `done` or `failed`.
    pub state: String,
    pub name: String,
    pub record: TaskRecord,
    /// Each run's launch and, when it ended normally, its exit.
    pub runs: Vec<(Launch, Option<RunExit>)>,
}

impl Archived {
    pub fn state(&self) -> State {
        match self.state.as_str() {
            "done" => State::Done,
            _ => State::Failed,
        }
    }
}

impl Spool {
    /// Appends the ended task `name` (with its `runs`, without their
    /// scripts and environments: the report needs neither, and a user's
    /// script may be a megabyte) to the archive, durably, then discards
    /// its directory.
    pub fn archive(
        &self,
        state: State,
        name: &TaskName,
        runs: Vec<(Launch, Option<RunExit>)>,
    ) -> Result<(), SpoolError> {
        let record = self.load_record(state, name)?;
        let runs = runs
            .into_iter()
            .map(|(launch, exit)| (launch.without_script(), exit))
            .collect();
        let line = serde_json::to_string(&Archived {
            state: state.dir_name().to_owned(),
            name: name.to_string(),
            record,
            runs,
        })
        .map_err(|e| at(self.root())(io::Error::other(e)))?;
        let path = self.root().join(ARCHIVE);
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(PRIVATE)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(at(&path))?;
        writeln!(file, "{line}")
            .and_then(|()| file.sync_data())
            .map_err(at(&path))?;
        self.discard(&self.task_dir(state, name))
            .map_err(at(&self.task_dir(state, name)))
    }

    /// Every archived task (none when nothing was pruned yet). A line that
    /// does not read (cut short by a crash) is skipped and said.
    pub fn archived(&self) -> Result<Vec<Archived>, SpoolError> {
        let path = self.root().join(ARCHIVE);
        let file = match crate::safe::open_regular(&path) {
            Ok((file, _)) => io::BufReader::new(file),
            // Nothing pruned yet; or a user, who reads no one's records.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
                ) =>
            {
                return Ok(Vec::new());
            }
            Err(e) => return Err(at(&path)(e)),
        };
        let mut tasks = Vec::new();
        for (i, line) in file.lines().enumerate() {
            let line = line.map_err(at(&path))?;
            match serde_json::from_str(&line) {
                Ok(task) => tasks.push(task),
                Err(e) => log::warn!("{}:{}: skipped: {e}", path.display(), i + 1),
            }
        }
        Ok(tasks)
    }
}
