//! Finding the task a command names (`carma cancel 42`, `carma show
//! resnet50`), as any user can: the state directories they may list, and
//! for `pending/` and `recovery/` of a shared spool (which users cannot
//! list) the names the daemon's status file publishes.

use carma::spool::record::read_json;
use carma::spool::status::Status;
use carma::spool::{Spool, SpoolError, State, TaskName};

/// The task `query` names: its full name, its number, a unique prefix or
/// its job name (see [`Spool::find_among`]).
pub fn find(spool: &Spool, query: &str) -> Result<(State, TaskName), SpoolError> {
    let status = read_json::<Status>(&spool.status_file()).ok();
    find_with(spool, query, status.as_ref())
}

/// [`find`] with the status file already read.
pub fn find_with(
    spool: &Spool,
    query: &str,
    status: Option<&Status>,
) -> Result<(State, TaskName), SpoolError> {
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
    spool.find_among(query, tasks)
}
