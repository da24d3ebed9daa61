//! Files in `pending/` that are not jobs: model summaries on their way to,
//! or left over from, the jobs that name them.
//!
//! A user who copies `job.rad` and then `job.model` into `pending/` in two
//! steps should not lose the summary to a race. A `.rad` whose summary is
//! not there yet waits for it a little ([`SUMMARY_WAIT`]) before it is
//! claimed anyway (and estimated without it, with a warning). Whatever
//! else stays in `pending/` is dealt with after [`LOOSE_GRACE`]: a summary
//! carma already copied into the tasks that named it is removed (its copy
//! lives on in each task), and a file no job named goes to `failed/` with
//! the reason, like any other drop carma cannot run. Nothing is left lying
//! in `pending/`, and nothing is silently deleted that carma did not keep.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Daemon;
use super::unfinished::Unfinished;
use crate::safe;
use crate::spool::State;

/// How long a dropped `.rad` waits for the model summary it names.
pub(super) const SUMMARY_WAIT: Duration = Duration::from_secs(5);

/// How long a file that is not a job may stay in `pending/`.
pub(super) const LOOSE_GRACE: Duration = Duration::from_secs(10);

/// How long at most it stays while a job file is being written, which
/// may name it.
const LOOSE_GRACE_WRITING: Duration = Duration::from_secs(60);

/// How long a copied summary is remembered: well past the longest it
/// may stay in `pending/` ([`LOOSE_GRACE_WRITING`]).
const COPIED_KEPT: Duration = Duration::from_secs(600);

/// What the daemon remembers about files in `pending/` that are not jobs.
#[derive(Debug, Default)]
pub(super) struct Loose {
    /// `.rad` files waiting for their summary: name, first deferred.
    awaiting: HashMap<String, (String, Instant)>,
    /// Other files: name, first seen.
    seen: HashMap<String, Instant>,
    /// Summaries claims have copied into tasks, with the owner and inode
    /// they had: only that file goes, never one another user put under
    /// its name once its owner removed it. Forgotten after [`COPIED_KEPT`]
    /// (a summary its owner removed first never expires from `seen`).
    copied: HashMap<String, (u32, u64, Instant)>,
}

impl Loose {
    /// Dropped `.rad` files waiting for their model summary.
    pub fn waiting(&self) -> usize {
        self.awaiting.len()
    }

    /// Whether the dropped `rad` should be claimed now: yes unless it
    /// names a summary that is not in `pending/` yet, or still being
    /// written (in `unfinished`), and has not waited [`SUMMARY_WAIT`] for
    /// it.
    pub fn ready(&mut self, pending: &Path, rad: &str, unfinished: &Unfinished) -> bool {
        let Some((model, owner)) = named_summary(pending, rad) else {
            self.awaiting.remove(rad);
            return true;
        };
        let here = match safe::regular_beneath(pending, &model) {
            Some(_) => Some(model.clone()),
            None => crate::rad::case_match(pending, &model),
        }
        .filter(|found| !unfinished.contains(found));
        if let Some(found) = here {
            self.awaiting.remove(rad);
            // Only the owner's own summary is copied, and so may go once
            // copied: naming another user's does not make it carma's to
            // remove. Only a file of `pending/` itself is ever removed
            // (below, once `seen` lets it go): one named deeper, or by a
            // hidden name, is not remembered, so that no spelling of a
            // path (`./m`, `././m`, `.d/m`) grows what is.
            let owned = safe::regular_beneath(pending, &found).filter(|s| s.st_uid == owner);
            if let Some((top, stat)) = top_level(&found).zip(owned) {
                self.copied
                    .insert(top, (stat.st_uid, stat.st_ino, Instant::now()));
            }
            return true;
        }
        let (_, since) = self
            .awaiting
            .entry(rad.to_string())
            .or_insert_with(|| (model, Instant::now()));
        if since.elapsed() < SUMMARY_WAIT {
            return false;
        }
        self.awaiting.remove(rad);
        true
    }

    /// Notes a file in `pending/` that is not a job.
    pub fn saw(&mut self, file: String) {
        self.seen.entry(file).or_insert_with(Instant::now);
    }

    /// Jobs whose wait should end now: their summary arrived, or they
    /// waited long enough.
    fn due(&self, pending: &Path, unfinished: &Unfinished) -> Vec<String> {
        self.awaiting
            .iter()
            .filter(|(_, (model, since))| {
                since.elapsed() >= SUMMARY_WAIT
                    || (safe::regular_beneath(pending, model).is_some()
                        && !unfinished.contains(model))
            })
            .map(|(rad, _)| rad.clone())
            .collect()
    }
}

/// `path`'s one name, when it names a visible entry of its directory
/// itself (`m`, `./m`), not one deeper or hidden.
fn top_level(path: &str) -> Option<String> {
    use std::path::Component;
    let mut names = Path::new(path)
        .components()
        .filter(|c| !matches!(c, Component::CurDir));
    match (names.next(), names.next()) {
        (Some(Component::Normal(name)), None) => name
            .to_str()
            .filter(|name| !name.starts_with('.'))
            .map(str::to_owned),
        _ => None,
    }
}

/// The model summary the `.rad` at `pending/rad` names, if it can be read
/// and names one (one that cannot be read is the claim's to refuse), and
/// the `.rad`'s owner.
fn named_summary(pending: &Path, rad: &str) -> Option<(String, u32)> {
    use std::os::unix::fs::MetadataExt;
    let (bytes, meta) = safe::read_regular(&pending.join(rad), crate::rad::MAX_FILE_BYTES).ok()?;
    Some((
        crate::rad::parse_bytes(&bytes).ok()?.spec.model?,
        meta.uid(),
    ))
}

impl Daemon {
    /// Each turn of the loop: claims the jobs that waited long enough for
    /// their summary, and clears out files that stayed in `pending/`
    /// without a job past [`LOOSE_GRACE`].
    pub(super) fn tidy_pending(&mut self) {
        let pending = self.spool.dir(State::Pending);
        let due = self.loose.due(&pending, &self.unfinished);
        if !due.is_empty() {
            self.take_drops(due, Vec::new());
        }
        let wanted: HashSet<&String> = self.loose.awaiting.values().map(|(m, _)| m).collect();
        // A job still being written may name any of them: they wait for
        // it, but not for ever (one kept being written, or one after
        // another, would hold every user's files).
        let writing = self.unfinished.writing_job();
        let expired: Vec<String> = self
            .loose
            .seen
            .iter()
            .filter(|&(file, since)| {
                let waited = since.elapsed();
                waited >= LOOSE_GRACE
                    && !wanted.contains(file)
                    && (!writing || waited >= LOOSE_GRACE_WRITING)
            })
            .map(|(file, _)| file.clone())
            .collect();
        self.loose
            .copied
            .retain(|_, &mut (_, _, at)| at.elapsed() < COPIED_KEPT);
        let mut strays = Vec::new();
        for file in expired {
            self.loose.seen.remove(&file);
            let copied = self.loose.copied.remove(&file);
            let path = pending.join(&file);
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            if copied.is_some_and(|(uid, ino, _)| (meta.uid(), meta.ino()) == (uid, ino)) {
                match fs::remove_file(&path) {
                    Ok(()) => log::info!(
                        "pending/{file}: removed; the tasks that named it keep their own copy"
                    ),
                    Err(e) => log::warn!("pending/{file}: cannot remove: {e}"),
                }
            } else {
                strays.push(file.into());
            }
        }
        if !strays.is_empty() {
            self.claim_drops(strays);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_visible_name_of_pending_itself_is_remembered_as_copied() {
        assert_eq!(top_level("m.txt").as_deref(), Some("m.txt"));
        assert_eq!(top_level("./m.txt").as_deref(), Some("m.txt"));
        assert_eq!(top_level("././m.txt").as_deref(), Some("m.txt"));
        assert_eq!(top_level("d/m.txt"), None);
        assert_eq!(top_level(".d/m.txt"), None);
        assert_eq!(top_level(".m.txt"), None);
    }
}
