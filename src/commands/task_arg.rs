//! Finding the task a command names (`carma cancel 42`, `carma show
//! resnet50`), as any user can: the state directories they may list, and
//! for `pending/` and `recovery/` of a shared spool (which users cannot
//! list) the names the daemon's status file publishes; and the
//! `submit-…` name `carma submit` prints for a submission the daemon had
//! not numbered yet, through the daemon's word on which task it became.

use std::time::Duration;

use anyhow::{Result, bail};

use carma::spool::status::{self, Status};
use carma::spool::{Spool, State, TaskName};

/// How long a command waits to learn which task a submission became: the
/// daemon numbers it on its next turn, later on a loaded machine.
const RECEIPT_PATIENCE: Duration = Duration::from_secs(10);

/// The task `query` names: its full name, its number, a unique prefix, its
/// job name (see [`Spool::find_among`]) or the submission it was made from.
pub fn find(spool: &Spool, query: &str) -> Result<(State, TaskName)> {
    let status = Status::read(&spool.status_file()).ok();
    find_with(spool, query, status.as_ref())
}

/// [`find`] with the status file already read.
pub fn find_with(spool: &Spool, query: &str, status: Option<&Status>) -> Result<(State, TaskName)> {
    if query.starts_with("submit-") {
        let Some(name) = status
            .and_then(|s| became(s, query))
            .or_else(|| receipt(spool, query))
        else {
            bail!(
                "{query} has not been taken in yet: it waits in pending/ until {} numbers it \
                 (`carma status` shows it then)",
                if spool.daemon_running() {
                    "the daemon"
                } else {
                    "a daemon starts and"
                }
            );
        };
        let status = Status::read(&spool.status_file()).ok();
        return among(spool, name.as_str(), status.as_ref());
    }
    among(spool, query, status)
}

/// The task a submission made by someone other than the spool's owner
/// became: the daemon numbers it when it takes it in and says so in its
/// status file for a while. `None` without a daemon (or a slow one).
pub fn receipt(spool: &Spool, entry: &str) -> Option<TaskName> {
    status::wait_for(spool, RECEIPT_PATIENCE, |status| {
        match status.and_then(|s| became(s, entry)) {
            Some(name) => Some(Some(name)),
            None => (!spool.daemon_running()).then_some(None),
        }
    })
    .flatten()
}

/// What the status file says submission `entry` became.
fn became(status: &Status, entry: &str) -> Option<TaskName> {
    status
        .adopted
        .iter()
        .find_map(|(submitted, name)| (submitted == entry).then_some(name))
        .and_then(|name| TaskName::parse(name))
}

/// Finds `query` among the tasks this user may see and those `status`
/// names as waiting.
fn among(spool: &Spool, query: &str, status: Option<&Status>) -> Result<(State, TaskName)> {
    let mut tasks = spool.visible_tasks()?;
    if let Some(status) = status {
        let waiting = [
            (State::Pending, &status.pending),
            (State::Recovery, &status.recovery),
        ];
        for (state, names) in waiting {
            for name in names.iter().filter_map(|n| TaskName::parse(n)) {
                if !tasks.iter().any(|(_, t)| *t == name) {
                    tasks.push((state, name));
                }
            }
        }
    }
    Ok(spool.find_among(query, tasks)?)
}
