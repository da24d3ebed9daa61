//! What a job's owner may hand in and what carma keeps of it: the
//! per-user limits at intake (`queue.user_max_tasks`, `user_max_array`,
//! `user_max_spool_mib`), who a job runs as, and a refused job's way to
//! `failed/` with only what its owner needs to read (root's disk is
//! nobody's quota).

use std::ffi::OsStr;
use std::fs;
use std::sync::Arc;

use nix::unistd::{Uid, User};

use super::Daemon;
use super::intake::NotLoaded;
use crate::lifecycle::{Refusal, Refused};
use crate::spool::record::{JOB, RunAs, TaskRecord, unix_now};
use crate::spool::{State, TaskName};
use crate::supervisor::is_transient;
use crate::supervisor::last_run;

impl Daemon {
    /// Why a user's freshly submitted job (with `elements` tasks, its array
    /// included, and `bytes` of job files each) would take more of the
    /// spool than one user may, if it would. Said at intake, before the
    /// array is made: what one user hands in is root's disk.
    pub(super) fn over_limits(&self, owner: u32, elements: u64, bytes: u64) -> Option<String> {
        let q = &self.config.queue;
        let held = self.life.tasks.holding(owner);
        if q.user_max_array > 0 && elements > q.user_max_array {
            return Some(format!(
                "its array has {elements} tasks; a user's array may have at most {} \
                 (queue.user_max_array)",
                q.user_max_array
            ));
        }
        if q.user_max_tasks > 0 && held.tasks + elements > q.user_max_tasks {
            return Some(format!(
                "its owner has {} tasks waiting or running already and this adds {elements}; \
                 a user may have at most {} (queue.user_max_tasks)",
                held.tasks, q.user_max_tasks
            ));
        }
        let limit = q.user_max_spool_mib.saturating_mul(1 << 20);
        let adds = bytes.saturating_mul(elements);
        if limit > 0 && held.bytes.saturating_add(adds) > limit {
            return Some(format!(
                "its job files take {} MiB in the spool ({} task(s)), beside {} MiB of its \
                 owner's other tasks; a user's waiting and running tasks may take at most \
                 {} MiB (queue.user_max_spool_mib)",
                adds.div_ceil(1 << 20),
                elements,
                held.bytes.div_ceil(1 << 20),
                q.user_max_spool_mib
            ));
        }
        None
    }

    /// Who a job owned by `uid` runs as: itself when the daemon is root
    /// (root's own jobs only when allowed), else the daemon's user.
    pub(super) fn run_as(&mut self, uid: u32) -> Result<(Option<Arc<RunAs>>, Arc<str>), NotLoaded> {
        if let Some(known) = self.accounts.get(&uid) {
            return Ok(known.clone());
        }
        let account = self.look_up_account(uid)?;
        self.accounts.insert(uid, account.clone());
        Ok(account)
    }

    fn look_up_account(&self, uid: u32) -> Result<(Option<Arc<RunAs>>, Arc<str>), NotLoaded> {
        let no_account = || {
            Refusal::Owner
                .because(format!(
                    "its owner (uid {uid}) has no account on this machine"
                ))
                .into()
        };
        let user = match User::from_uid(Uid::from_raw(uid)) {
            Ok(user) => user.ok_or_else(no_account)?,
            Err(e) if is_transient(&e.into()) => {
                return Err(NotLoaded::Later(format!("cannot look up uid {uid}: {e}")));
            }
            Err(_) => return Err(no_account()),
        };
        if !Uid::effective().is_root() {
            return Ok((None, user.name.into()));
        }
        if uid == 0 && !self.config.daemon.allow_root_jobs {
            return Err(Refusal::Owner
                .because(
                    "owned by root: carma does not run jobs as root unless \
                     daemon.allow_root_jobs is set",
                )
                .into());
        }
        let run_as = RunAs {
            uid,
            gid: user.gid.as_raw(),
            name: user.name.clone(),
            home: user.dir,
            shell: Some(user.shell),
        };
        Ok((Some(Arc::new(run_as)), user.name.into()))
    }

    /// Moves a task that never reached the core to `failed/`.
    pub(super) fn reject(&mut self, name: &TaskName, state: State, reason: &Refused) {
        let record = self
            .spool
            .load_record(state, name)
            .unwrap_or_else(|_| TaskRecord::new(name, "", unix_now()));
        let dir = self.spool.task_dir(state, name);
        let run = last_run(&dir);
        // What stays of the job's files counts against its owner's cap
        // (queue.user_max_ended_mib) like an ended task's copies.
        let bytes = crate::spool::tree_bytes(&dir.join(JOB));
        self.with_world(|life, now, world| {
            life.refuse(now, (name, state, run, bytes), record, reason, world)
        });
    }

    /// Removes carma's copies of the files of a fresh submission it just
    /// refused: only intake reads them, and kept they would hold root's
    /// disk for `retention_days`, as often as a user cares to submit what
    /// is refused (a request over the socket carries up to 10 MiB, and a
    /// user at `queue.user_max_tasks` has every one refused). A job over
    /// a limit keeps none (the user has the file); any other keeps its
    /// job file, to be read with its reason, but not its model summary.
    pub(super) fn forget_copies(&mut self, name: &TaskName, state: State, reason: &Refused) {
        let job = self.spool.task_dir(state, name).join(JOB);
        if !fs::symlink_metadata(&job).is_ok_and(|m| m.is_dir()) {
            return;
        }
        let keep = match reason.kind {
            Refusal::OverLimit => None,
            _ => match self.spool.load_record(state, name) {
                Ok(record) => Some(record.rad),
                Err(_) => return,
            },
        };
        let gone: Vec<std::path::PathBuf> = match keep {
            None => vec![job],
            Some(rad) => fs::read_dir(&job)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|entry| entry.file_name() != OsStr::new(&rad))
                .map(|entry| entry.path())
                .collect(),
        };
        for path in gone {
            if let Err(e) = self.spool.discard(&path) {
                log::warn!(
                    "{name}: cannot remove the refused job's copy {}: {e}",
                    path.display()
                );
            }
        }
    }
}
