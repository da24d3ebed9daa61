//! Jobs handed over the submission socket ([`super::socket`]) become tasks:
//! each request is checked as a submitted directory would be, its jobs are
//! written as claims in `staging/` and put on disk by one flush (a group
//! commit) before any is named, so that a receipt always names a task a
//! power loss keeps, and the daemon's loop then places them in `pending/`.

use std::path::PathBuf;

use super::durable::{make_durable, write_new};
use super::job_copy::{job_name, summary_named, write_summary};
use super::record::{self, JOB, RECORD, TaskRecord, unix_now};
use super::socket::{Job, Request, check_rad_name, check_summary_path, job_bytes};
use super::submission::checked_dependencies;
use super::{Claimed, JobCopy, Spool, SpoolError, State, TASK_DIR_MODE, TaskName, at, make_dir};
use crate::rad::DependencyRef;

/// The longest request token taken (the submitter's own name for it).
const MAX_TOKEN: usize = 128;

/// A job handed over the socket and checked: whose it is, and what it asks.
#[derive(Debug)]
pub struct Handed {
    /// Who the job runs as.
    pub owner: u32,
    /// The request's token, recorded as what the task was submitted as.
    pub token: String,
    pub job: Job,
    pub after: Vec<DependencyRef>,
}

impl Request {
    /// Checks a request from a process running as `peer` (the kernel's
    /// word), to a daemon running as `me`. Only `me` may say whom a job
    /// runs as; anyone else's jobs are their own. The error is why none of
    /// the request is taken.
    pub fn check(self, peer: u32, me: u32) -> Result<Vec<Handed>, String> {
        if me != 0 && peer != me {
            // Such a daemon can run jobs only as itself.
            return Err(format!(
                "this daemon runs as uid {me} and takes only that user's jobs"
            ));
        }
        let token_ok = !self.token.is_empty()
            && self.token.len() <= MAX_TOKEN
            && self
                .token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !token_ok {
            return Err(format!(
                "the request's token `{}` is not 1 to {MAX_TOKEN} letters, digits, `-`, `_` \
                 or `.`",
                crate::rad::clip(&self.token)
            ));
        }
        // A token names the submission in its tasks' records and, after a
        // crash, decides what became of it: one user's must never be taken
        // for another's, or for a name a user dropped into pending/.
        let own = format!("submit-{peer}-");
        if !self.token.starts_with(&own) {
            return Err(format!(
                "the request's token `{}` does not start with `{own}` (the sender's uid)",
                crate::rad::clip(&self.token)
            ));
        }
        let after = checked_dependencies("the request", self.after)?;
        let mut handed = Vec::with_capacity(self.jobs.len());
        for mut job in self.jobs {
            check_rad_name(&job.rad)?;
            let owner = match job.owner {
                None => peer,
                Some(owner) if owner == peer || peer == me => owner,
                Some(owner) => {
                    return Err(format!(
                        "{}: only carma's own user may submit jobs to run as another \
                         (uid {owner}; the request came from uid {peer})",
                        job.rad
                    ));
                }
            };
            if job.workdir.as_ref().is_some_and(|dir| !dir.is_absolute()) {
                return Err(format!(
                    "{}: the working directory is not an absolute path",
                    job.rad
                ));
            }
            if let Some((found, _)) = &job.summary {
                match summary_named(&job.rad_bytes) {
                    Some(named) => check_summary_path(found, &named)
                        .map_err(|why| format!("{}: {why}", job.rad))?,
                    // A job file that names no summary (or does not
                    // parse, which its check will say) keeps none.
                    None => job.summary = None,
                }
            }
            handed.push(Handed {
                owner,
                token: self.token.clone(),
                job,
                after: after.clone(),
            });
        }
        Ok(handed)
    }
}

/// A handed job's claim, on disk in `staging/`, waiting to be placed.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    pub claimed: Claimed,
}

impl Spool {
    /// Makes claims of jobs handed over the socket: numbered, written in
    /// `staging/` and put on disk together, on the connection's own thread
    /// (so one connection's flushes hold up neither the daemon's loop nor
    /// another connection). A job file that does not parse still becomes a
    /// task, to be refused with its reason when the daemon takes it in. A
    /// claim a crash leaves here is placed by the next start
    /// ([`Spool::finish_claims`]). The outer error (numbers or the flush
    /// failed) means none was made; an inner one, that this job's was not.
    #[allow(clippy::type_complexity)]
    pub fn stage_handed(
        &self,
        jobs: Vec<Handed>,
    ) -> Result<Vec<Result<Staged, SpoolError>>, SpoolError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.allocate(jobs.len() as u64)?;
        let now = unix_now();
        let made: Vec<Result<Staged, SpoolError>> = (first..)
            .zip(jobs)
            .map(|(seq, handed)| self.write_claim(seq, handed, now))
            .collect();
        let dirs: Vec<&std::path::Path> = made
            .iter()
            .filter_map(|m| m.as_ref().ok().map(|staged| staged.dir.as_path()))
            .collect();
        if let Err(e) = make_durable(&self.staging(), &dirs) {
            for staged in made.iter().flatten() {
                let _ = self.discard(&staged.dir);
            }
            return Err(at(&self.staging())(e));
        }
        Ok(made)
    }

    /// Puts a staged claim in the trash: declined before it became a task.
    pub fn unstage(&self, staged: Staged) {
        let _ = self.discard(&staged.dir);
    }

    /// Moves a staged claim into `pending/`: a task from now on.
    pub fn place_staged(&self, staged: Staged) -> Result<Claimed, SpoolError> {
        let Staged { dir, mut claimed } = staged;
        match self.place(
            &dir,
            State::Pending,
            &claimed.name,
            Some(&mut claimed.record),
        ) {
            Ok(name) => {
                claimed.name = name;
                Ok(claimed)
            }
            Err(e) => {
                let _ = self.discard(&dir);
                Err(e)
            }
        }
    }

    /// One handed job's claim, `staging/claim-NAME`, not yet flushed.
    fn write_claim(&self, seq: u64, handed: Handed, now: f64) -> Result<Staged, SpoolError> {
        let Handed {
            owner,
            token,
            job,
            after,
        } = handed;
        let stem = job_name(&job.rad_bytes)
            .unwrap_or_else(|| job.rad.trim_end_matches(".rad").to_string());
        let name = TaskName::new(seq, &stem);
        let dir = self.staging().join(format!("claim-{name}"));
        let copied = job_bytes(&job);
        let record = TaskRecord {
            owner: Some(owner),
            submitted_as: Some(token.clone()),
            workdir: job.workdir,
            umask: job.umask.map(|m| m & 0o777),
            submitted_after: after,
            ..TaskRecord::new(&name, job.rad.clone(), now)
        };
        let files = dir.join(JOB);
        make_dir(&dir, TASK_DIR_MODE).map_err(at(&dir))?;
        let written = make_dir(&files, 0o700)
            .and_then(|()| write_new(&files.join(&job.rad), &job.rad_bytes))
            .and_then(|()| match &job.summary {
                Some((path, bytes)) => write_summary(&files, path, bytes),
                None => Ok(()),
            })
            .and_then(|()| write_new(&dir.join(RECORD), &record::to_json(&record)));
        if let Err(e) = written {
            let _ = self.discard(&dir);
            return Err(at(&dir)(e));
        }
        Ok(Staged {
            dir,
            claimed: Claimed {
                name,
                file: job.rad,
                drop: token.into(),
                record,
                refused: None,
                copy: Some(JobCopy {
                    rad: job.rad_bytes,
                    bytes: copied,
                }),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::socket::tests::{job, request};
    use crate::spool::tests::spool;
    use std::fs;
    use std::os::unix::fs::MetadataExt;

    const ROOT: u32 = 0;
    const ALICE: u32 = 1000;

    fn refused(request: Request, peer: u32, me: u32) -> String {
        request.check(peer, me).unwrap_err()
    }

    /// A request of `jobs` as `peer`'s `carma submit` makes it.
    fn sent(peer: u32, jobs: Vec<Job>) -> Request {
        let mut request = request(jobs);
        request.token = format!("submit-{peer}-2-3");
        request
    }

    #[test]
    fn a_job_runs_as_whoever_sent_it_unless_carmas_own_user_says_otherwise() {
        let handed = sent(ALICE, vec![job("a.rad", "true\n")])
            .check(ALICE, ROOT)
            .unwrap();
        assert_eq!(handed[0].owner, ALICE);
        let mut for_bob = job("a.rad", "true\n");
        for_bob.owner = Some(1001);
        let why = refused(sent(ALICE, vec![for_bob]), ALICE, ROOT);
        assert!(why.contains("only carma's own user"), "{why}");
        let mut as_root = job("a.rad", "true\n");
        as_root.owner = Some(ROOT);
        assert!(refused(sent(ALICE, vec![as_root]), ALICE, ROOT).contains("only carma's own user"));
        let mut alices = job("a.rad", "true\n");
        alices.owner = Some(ALICE);
        let handed = sent(ROOT, vec![alices]).check(ROOT, ROOT).unwrap();
        assert_eq!(handed[0].owner, ALICE);
    }

    #[test]
    fn a_daemon_not_run_by_root_takes_only_its_own_users_jobs() {
        let why = refused(sent(1001, vec![job("a.rad", "true\n")]), 1001, ALICE);
        assert!(why.contains("takes only that user's jobs"), "{why}");
        sent(ALICE, vec![job("a.rad", "true\n")])
            .check(ALICE, ALICE)
            .unwrap();
    }

    #[test]
    fn names_paths_and_tokens_are_held_to_the_file_paths_rules() {
        let why = refused(sent(ALICE, vec![job("../x.rad", "true\n")]), ALICE, ROOT);
        assert!(why.contains("not the name of a .rad file"), "{why}");
        let mut relative = job("a.rad", "true\n");
        relative.workdir = Some("home/u".into());
        assert!(refused(sent(ALICE, vec![relative]), ALICE, ROOT).contains("absolute"));
        // A path out of the task's directory is no model summary to the
        // job file's parser: nothing of it is kept.
        let mut escaping = job("a.rad", "model: ../../etc/x.model\ntrue\n");
        escaping.summary = Some(("../../etc/x.model".into(), b"x".to_vec()));
        let handed = sent(ALICE, vec![escaping]).check(ALICE, ROOT).unwrap();
        assert_eq!(handed[0].job.summary, None);
        let mut other = job("a.rad", "model: a.model\ntrue\n");
        other.summary = Some(("b.model".into(), b"x".to_vec()));
        assert!(refused(sent(ALICE, vec![other]), ALICE, ROOT).contains("summary"));
        let mut bad_token = sent(ALICE, vec![job("a.rad", "true\n")]);
        bad_token.token = "../../x".into();
        assert!(refused(bad_token, ALICE, ROOT).contains("token"));
        // Another user's token, which would decide what became of their
        // submission after a crash.
        let other = sent(1001, vec![job("a.rad", "true\n")]);
        assert!(refused(other, ALICE, ROOT).contains("the sender's uid"));
        let mut no_model = job("a.rad", "true\n");
        no_model.summary = Some(("a.model".into(), b"x".to_vec()));
        let handed = sent(ALICE, vec![no_model]).check(ALICE, ROOT).unwrap();
        assert_eq!(
            handed[0].job.summary, None,
            "a summary no job names is dropped"
        );
    }

    #[test]
    fn received_jobs_become_pending_tasks_with_carmas_record_and_copies() {
        let (_d, spool) = spool();
        let me = nix::unistd::geteuid().as_raw();
        let mut with_summary = job("b.rad", "name: bee\nmodel: m/B.model\nmemory: 1G\ntrue\n");
        with_summary.summary = Some(("m/b.model".into(), b"summary".to_vec()));
        let handed = sent(me, vec![job("a.rad", "not a job file"), with_summary])
            .check(me, me)
            .unwrap();
        let staged = spool.stage_handed(handed).unwrap();
        let names: Vec<String> = staged
            .into_iter()
            .map(|s| spool.place_staged(s.unwrap()).unwrap().name.to_string())
            .collect();
        assert_eq!(names, ["000001-a", "000002-bee"]);
        let bee = spool.task_dir(State::Pending, &TaskName::parse("000002-bee").unwrap());
        assert_eq!(
            fs::read(bee.join("job/m/b.model")).unwrap(),
            b"summary".to_vec()
        );
        let record = spool
            .load_record(State::Pending, &TaskName::parse("000002-bee").unwrap())
            .unwrap();
        assert_eq!(record.owner, Some(me));
        assert_eq!(record.submitted_as, Some(format!("submit-{me}-2-3")));
        assert_eq!(record.workdir, Some("/home/u".into()));
        assert_eq!(record.umask, Some(0o027), "the submitter's");
        assert_eq!(fs::metadata(bee.join(RECORD)).unwrap().uid(), me);
        let left: Vec<_> = fs::read_dir(spool.staging())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("claim-"))
            .collect();
        assert!(left.is_empty(), "no claim left behind: {left:?}");
    }
}
