//! Leaving a request in `cancel/` and hearing the daemon's verdict, for
//! `carma cancel`, `hold`, `release`, `priority` and `requeue`.
//!
//! What can be checked without the daemon (that the caller owns the task,
//! that a user's priority is within the configured range) is checked
//! before the request is written, so that a refusal is said at once and
//! also when no daemon runs. The daemon says what it made of the request
//! in its status file ([`Verdict`]); the command waits briefly for it and
//! says it in words.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use anyhow::{Context, Result};

use carma::config::Config;
use carma::spool::record::unix_now;
use carma::spool::request::{Request, Verb};
use carma::spool::status::{self, Status, Verdict};
use carma::spool::{Spool, State, TaskName};
use carma::task_view;

/// How long to wait for the daemon's verdict.
const WAIT: Duration = Duration::from_secs(10);

/// What became of a request.
pub enum Answer {
    /// Refused before it was written, or by the daemon: why.
    Refused(String),
    /// Done, in the daemon's words.
    Done(String),
    /// Written, but no daemon serves the spool: it takes effect when one
    /// starts.
    NoDaemon,
    /// Written, but the daemon said nothing within [`WAIT`].
    Silent,
}

/// Checks what can be checked here, leaves the request `verb` on task
/// `name` (in `state`), and waits for the daemon's verdict.
pub fn ask(
    spool: &Spool,
    config: &Config,
    state: State,
    name: &TaskName,
    verb: Verb,
) -> Result<Answer> {
    if let Some(why) = refusal(spool, config, state, name, verb) {
        return Ok(Answer::Refused(why));
    }
    let request = Request {
        verb,
        task: name.to_string(),
    };
    let left_at = unix_now();
    spool
        .leave_request(&request)
        .with_context(|| format!("cannot leave the request cancel/{request}"))?;
    if !spool.daemon_running() {
        return Ok(Answer::NoDaemon);
    }
    let me = nix::unistd::geteuid().as_raw();
    let file_name = request.to_string();
    let verdict = status::wait_for(spool, WAIT, |status| {
        status?
            .verdicts
            .iter()
            .find(|v| v.request == file_name && v.uid == me && v.at >= left_at)
            .cloned()
    });
    Ok(match verdict {
        Some(Verdict {
            refused: true,
            said,
            ..
        }) => Answer::Refused(said.trim_start_matches("refused: ").to_owned()),
        Some(Verdict { said, .. }) => Answer::Done(said),
        None => Answer::Silent,
    })
}

/// Why the caller may not make this request, where that needs no daemon:
/// the task is someone else's, or the priority is out of a user's range.
fn refusal(
    spool: &Spool,
    config: &Config,
    state: State,
    name: &TaskName,
    verb: Verb,
) -> Option<String> {
    let me = nix::unistd::geteuid().as_raw();
    let carmas = std::fs::metadata(spool.root()).map(|m| m.uid()).ok();
    if me == 0 || Some(me) == carmas {
        return None;
    }
    let status = Status::read(&spool.status_file()).ok();
    if let Some(owner) = owner(spool, state, name, status.as_ref())
        && owner != me
    {
        let who = nix::unistd::User::from_uid(owner.into())
            .ok()
            .flatten()
            .map_or_else(|| format!("uid {owner}"), |u| u.name);
        return Some(format!(
            "{name} belongs to {who}; only its owner or root may {}",
            verb.describe()
        ));
    }
    match verb {
        Verb::Priority(p) => config.queue.priority_refusal(p),
        _ => None,
    }
}

/// Who owns task `name`, as far as the caller can tell: its record or
/// files, else the user the status file names for it.
fn owner(spool: &Spool, state: State, name: &TaskName, status: Option<&Status>) -> Option<u32> {
    task_view::owner_uid(spool, state, name).or_else(|| {
        let status = status?;
        let waiting = status.waiting.iter().find(|w| w.name == name.as_str());
        let running = status.running.iter().find(|t| t.name == name.as_str());
        let user = waiting.map(|w| &w.user).or(running.map(|t| &t.user))?;
        Some(nix::unistd::User::from_name(user).ok()??.uid.as_raw())
    })
}

/// Says an answer that is not `Done` (which each command says its own
/// way) and gives the exit code; `None` for `Done`.
pub fn said(name: &TaskName, verb: Verb, answer: &Answer) -> Option<std::process::ExitCode> {
    use std::process::ExitCode;
    match answer {
        Answer::Done(_) => None,
        Answer::Refused(why) => {
            let refused = format!("carma: {name}: {} refused: {why}", verb.describe());
            eprintln!("{}", carma::journal::one_line(&refused));
            Some(ExitCode::FAILURE)
        }
        Answer::NoDaemon => {
            println!(
                "{name}: {} requested; no daemon runs now, it takes effect when one starts",
                verb.describe()
            );
            Some(ExitCode::SUCCESS)
        }
        Answer::Silent => {
            eprintln!(
                "carma: {name}: the daemon has not answered the {} request within {WAIT:?}; \
                 it stays in cancel/ until the daemon takes it",
                verb.describe()
            );
            Some(ExitCode::FAILURE)
        }
    }
}
