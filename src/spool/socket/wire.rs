//! The submission socket's wire format: a request is [`MAGIC`], a 4-byte
//! little-endian length, a JSON [`Header`] of that length, then each job's
//! `.rad` bytes and its model summary's bytes, of the lengths the header
//! gives; the answer is one JSON [`Reply`]. Reading a request refuses what
//! exceeds the bounds before it reads it, so a stranger cannot make the
//! daemon allocate or wait beyond them.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::rad::{DependencyRef, MAX_FILE_BYTES};

use crate::spool::MAX_SUMMARY_BYTES;

/// What every request starts with: a stranger speaking another protocol
/// is told so at once, and a later version can be told apart.
const MAGIC: &[u8] = b"carma-submit/1\n";

/// Jobs in one request; a `carma submit` of more sends several.
pub const MAX_JOBS: usize = 64;

/// The most a request may carry in all: one job's largest `.rad` and
/// summary, with room to spare. A submitter packs jobs up to it.
pub const MAX_REQUEST_BYTES: u64 = MAX_FILE_BYTES + MAX_SUMMARY_BYTES + (1 << 20);

/// The longest header: every job's names and paths, and the dependencies.
const MAX_HEADER_BYTES: u32 = 256 << 10;

/// One job as it travels.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// The `.rad` file's name (no directory).
    pub rad: String,
    pub rad_bytes: Vec<u8>,
    /// The model summary the `.rad` names, as found beside it: the path
    /// it was found at, relative to the `.rad`, and its bytes.
    pub summary: Option<(String, Vec<u8>)>,
    /// Where the job runs: the `.rad`'s directory.
    pub workdir: Option<PathBuf>,
    /// The submitter's umask, for the job.
    pub umask: Option<u32>,
    /// Who the job runs as: said by carma's own user only (the owner of
    /// the file it submits); anyone else's jobs are their own.
    pub owner: Option<u32>,
}

/// What a request says of itself and its jobs; their bytes follow it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Header {
    /// The submitter's name for the request, recorded with each task: a
    /// submitter that got no answer can still find what became of it.
    pub token: String,
    /// Dependencies given on the command line, for every job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<DependencyRef>,
    pub jobs: Vec<JobHeader>,
}

/// One job in the [`Header`].
#[derive(Debug, Serialize, Deserialize)]
pub struct JobHeader {
    pub rad: String,
    pub rad_len: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default)]
    pub summary_len: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<u32>,
}

/// A request as read off the socket: sized, not yet checked.
#[derive(Debug)]
pub struct Request {
    pub token: String,
    pub after: Vec<DependencyRef>,
    pub jobs: Vec<Job>,
}

/// What became of one job of a request that was taken in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// Its task, when one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Why it will not run: with a name, its task is in `failed/` with the
    /// reason; without one, nothing was made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl Receipt {
    /// A job of which nothing was made, and why.
    pub fn not_taken(why: impl std::fmt::Display) -> Receipt {
        Receipt {
            name: None,
            refused: Some(why.to_string()),
        }
    }
}

/// The daemon's one answer to a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The request was acted on: a receipt per job, in order.
    Taken(Vec<Receipt>),
    /// Nothing was taken, for a reason that is the daemon's (too many
    /// connections, stopping, a failing disk): the jobs may go by the
    /// file path instead.
    Declined(String),
    /// Nothing was taken because the request itself is wrong; no other
    /// path would take it either.
    Refused(String),
}

/// Why a request cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Invalid(String),
    /// A sound request the reader has no room for now.
    #[error("{0}")]
    Busy(String),
}

impl Request {
    /// Reads one request, refusing what exceeds the bounds before reading
    /// it: its header names every length, so nothing is allocated beyond
    /// what the request may carry, and `admit` is asked for those bytes
    /// before any is read (a reader's budget for all its requests). Time
    /// is the caller's (a read timeout on the stream).
    pub fn read(
        from: &mut impl Read,
        admit: impl FnOnce(u64) -> Result<(), String>,
    ) -> Result<Request, RequestError> {
        let invalid = |why: String| RequestError::Invalid(why);
        let mut magic = [0u8; MAGIC.len()];
        from.read_exact(&mut magic)?;
        if magic != MAGIC {
            return Err(invalid("not a carma-submit/1 request".into()));
        }
        let mut len = [0u8; 4];
        from.read_exact(&mut len)?;
        let len = u32::from_le_bytes(len);
        if len > MAX_HEADER_BYTES {
            return Err(invalid(format!(
                "a header of {len} bytes; at most {MAX_HEADER_BYTES} are taken"
            )));
        }
        let header: Header = serde_json::from_slice(&read_exactly(from, u64::from(len))?)
            .map_err(|e| invalid(format!("the request's header: {e}")))?;
        if header.jobs.is_empty() || header.jobs.len() > MAX_JOBS {
            return Err(invalid(format!(
                "{} jobs in one request; 1 to {MAX_JOBS} are taken",
                header.jobs.len()
            )));
        }
        let mut total: u64 = 0;
        for job in &header.jobs {
            if job.rad_len > MAX_FILE_BYTES || job.summary_len > MAX_SUMMARY_BYTES {
                return Err(invalid(format!(
                    "{}: a .rad of {} bytes or a summary of {}; at most {MAX_FILE_BYTES} and \
                     {MAX_SUMMARY_BYTES}",
                    crate::rad::clip(&job.rad),
                    job.rad_len,
                    job.summary_len
                )));
            }
            if job.summary.is_none() && job.summary_len > 0 {
                return Err(invalid("summary bytes for no summary path".into()));
            }
            total = total.saturating_add(job.rad_len + job.summary_len);
        }
        if total > MAX_REQUEST_BYTES {
            return Err(invalid(format!(
                "{total} bytes of jobs in one request; at most {MAX_REQUEST_BYTES} are taken"
            )));
        }
        admit(total).map_err(RequestError::Busy)?;
        let mut jobs = Vec::with_capacity(header.jobs.len());
        for job in header.jobs {
            let rad_bytes = read_exactly(from, job.rad_len)?;
            let summary = match job.summary {
                Some(path) => Some((path, read_exactly(from, job.summary_len)?)),
                None => None,
            };
            jobs.push(Job {
                rad: job.rad,
                rad_bytes,
                summary,
                workdir: job.workdir,
                umask: job.umask,
                owner: job.owner,
            });
        }
        Ok(Request {
            token: header.token,
            after: header.after,
            jobs,
        })
    }

    /// The request as one buffer: written with one call.
    pub fn encode(&self) -> Vec<u8> {
        let header = Header {
            token: self.token.clone(),
            after: self.after.clone(),
            jobs: self
                .jobs
                .iter()
                .map(|job| JobHeader {
                    rad: job.rad.clone(),
                    rad_len: job.rad_bytes.len() as u64,
                    summary: job.summary.as_ref().map(|(path, _)| path.clone()),
                    summary_len: job.summary.as_ref().map_or(0, |(_, b)| b.len() as u64),
                    workdir: job.workdir.clone(),
                    umask: job.umask,
                    owner: job.owner,
                })
                .collect(),
        };
        let header = serde_json::to_vec(&header).unwrap_or_default();
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + self.bytes() as usize);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(&header);
        for job in &self.jobs {
            out.extend_from_slice(&job.rad_bytes);
            if let Some((_, summary)) = &job.summary {
                out.extend_from_slice(summary);
            }
        }
        out
    }

    /// The bytes of its jobs.
    pub(super) fn bytes(&self) -> u64 {
        self.jobs.iter().map(job_bytes).sum()
    }
}

/// What a job's files take: its `.rad` and its model summary.
pub(in crate::spool) fn job_bytes(job: &Job) -> u64 {
    (job.rad_bytes.len() + job.summary.as_ref().map_or(0, |(_, b)| b.len())) as u64
}

/// Exactly `len` bytes, read as they come (never allocated ahead: a
/// length is only what the sender claims).
fn read_exactly(from: &mut impl Read, len: u64) -> io::Result<Vec<u8>> {
    // Room for all of it at once, which the caller bounded (the header's
    // length, the bytes admitted): grown as it came, a buffer held up to
    // twice what was admitted.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    from.take(len).read_to_end(&mut bytes)?;
    match bytes.len() as u64 == len {
        true => Ok(bytes),
        false => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the request ended early",
        )),
    }
}

impl Reply {
    /// Sends the answer and ends the conversation, without ever waiting:
    /// an answer fits in the socket's buffer, and a submitter that reads
    /// nothing must not hold up whoever answers. A submitter that has gone
    /// is no error of the daemon's.
    pub fn send(&self, to: &mut UnixStream) {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        if let Err(e) = to.set_nonblocking(true).and_then(|()| to.write_all(&line)) {
            log::debug!("a submitter's answer was not delivered: {e}");
        }
    }
}

/// A job's `.rad` name as a submitted directory may hold it: a plain file
/// name ending in `.rad`.
pub fn check_rad_name(rad: &str) -> Result<(), String> {
    if rad.contains('/') || rad.starts_with('.') || !rad.ends_with(".rad") || rad.len() > 255 {
        return Err(format!(
            "`{}` is not the name of a .rad file",
            crate::rad::clip(rad)
        ));
    }
    Ok(())
}

/// Checks a job's model summary path against the path its `.rad` names:
/// the same, or the same but for the case of its file name (the summary
/// found by [`crate::rad::case_match`]), and plain (no `..`, not
/// absolute), so that it stays inside the task's `job/`.
pub fn check_summary_path(found: &str, named: &str) -> Result<(), String> {
    let plain = Path::new(found)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    let (found_dir, found_file) = found.rsplit_once('/').unwrap_or(("", found));
    let (named_dir, named_file) = named.rsplit_once('/').unwrap_or(("", named));
    let same = found == named
        || (found_dir == named_dir && found_file.to_lowercase() == named_file.to_lowercase());
    match plain && same && !found_file.is_empty() && found.len() <= crate::rad::MAX_MODEL_PATH {
        true => Ok(()),
        false => Err(format!(
            "the summary `{}` is not the `model: {}` its job names",
            crate::rad::clip(found),
            crate::rad::clip(named)
        )),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A job as a submitter in `/home/u` hands it over.
    pub(in crate::spool) fn job(rad: &str, text: &str) -> Job {
        Job {
            rad: rad.into(),
            rad_bytes: text.as_bytes().to_vec(),
            summary: None,
            workdir: Some("/home/u".into()),
            umask: Some(0o027),
            owner: None,
        }
    }

    /// A request of `jobs`, as token `submit-1-2-3`.
    pub(in crate::spool) fn request(jobs: Vec<Job>) -> Request {
        Request {
            token: "submit-1-2-3".into(),
            after: Vec::new(),
            jobs,
        }
    }

    fn read(bytes: &[u8]) -> Result<Request, RequestError> {
        Request::read(&mut &bytes[..], |_| Ok(()))
    }

    fn invalid(bytes: &[u8]) -> String {
        match read(bytes) {
            Err(RequestError::Invalid(why)) => why,
            other => panic!("read as {other:?}"),
        }
    }

    /// A request with `header` as its header and `tail` after it.
    fn raw(header: &str, tail: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(tail);
        out
    }

    #[test]
    fn a_request_reads_back_as_it_was_written() {
        let mut with_summary = job("b.rad", "model: m/b.model\ntrue\n");
        with_summary.summary = Some(("m/b.model".into(), b"layers".to_vec()));
        with_summary.owner = Some(1000);
        let sent = request(vec![job("a.rad", "true\n"), with_summary]);
        let back = read(&sent.encode()).unwrap();
        assert_eq!(back.token, sent.token);
        assert_eq!(back.jobs, sent.jobs);
    }

    #[test]
    fn what_exceeds_the_bounds_is_refused_before_it_is_read() {
        assert!(invalid(b"GET / HTTP/1.1\r\n\r\n").contains("not a carma-submit/1"));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(invalid(&huge).contains("header of"));
        let none = r#"{"token":"t","jobs":[]}"#;
        assert!(invalid(&raw(none, b"")).contains("0 jobs"));
        let many = format!(
            r#"{{"token":"t","jobs":[{}]}}"#,
            vec![r#"{"rad":"a.rad","rad_len":1}"#; MAX_JOBS + 1].join(",")
        );
        assert!(invalid(&raw(&many, b"")).contains("jobs in one request"));
        let big = format!(
            r#"{{"token":"t","jobs":[{{"rad":"a.rad","rad_len":{}}}]}}"#,
            MAX_FILE_BYTES + 1
        );
        assert!(invalid(&raw(&big, b"")).contains("at most"));
        let summed = format!(
            r#"{{"token":"t","jobs":[{}]}}"#,
            vec![
                format!(
                    r#"{{"rad":"a.rad","rad_len":1,"summary":"s","summary_len":{MAX_SUMMARY_BYTES}}}"#
                );
                2
            ]
            .join(",")
        );
        assert!(invalid(&raw(&summed, b"")).contains("bytes of jobs"));
        let stray = r#"{"token":"t","jobs":[{"rad":"a.rad","rad_len":1,"summary_len":5}]}"#;
        assert!(invalid(&raw(stray, b"xxxxxx")).contains("no summary path"));
        assert!(invalid(&raw("{nope", b"")).contains("header"));
    }

    #[test]
    fn a_request_the_reader_has_no_room_for_is_busy_before_its_jobs_are_read() {
        let whole = request(vec![job("a.rad", "memory: 1G\ntrue\n")]).encode();
        let header_end = whole.len() - "memory: 1G\ntrue\n".len();
        let mut asked = 0;
        let read = Request::read(&mut &whole[..header_end], |bytes| {
            asked = bytes;
            Err("full".into())
        });
        assert!(matches!(read, Err(RequestError::Busy(why)) if why == "full"));
        assert_eq!(asked, 16);
    }

    #[test]
    fn a_request_cut_short_is_an_error_not_a_shorter_job() {
        let whole = request(vec![job("a.rad", "memory: 1G\ntrue\n")]).encode();
        for cut in [3, MAGIC.len() + 2, whole.len() - 1] {
            assert!(
                matches!(read(&whole[..cut]), Err(RequestError::Io(_))),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_summary_path_must_be_the_one_the_job_names_and_stay_below_it() {
        check_summary_path("m/b.model", "m/b.model").unwrap();
        check_summary_path("m/B.Model", "m/b.model").unwrap();
        check_summary_path("./b.model", "./b.model").unwrap();
        for (found, named) in [
            ("other.model", "b.model"),
            ("x/b.model", "m/b.model"),
            ("../b.model", "../b.model"),
            ("/etc/b.model", "/etc/b.model"),
            ("m/../../b.model", "m/../../b.model"),
            ("m/", "m/"),
        ] {
            assert!(
                check_summary_path(found, named).is_err(),
                "{found} for {named}"
            );
        }
    }

    #[test]
    fn a_rad_name_is_a_plain_file_name() {
        check_rad_name("job.rad").unwrap();
        for bad in ["../job.rad", "a/job.rad", ".job.rad", "job.txt", ""] {
            assert!(check_rad_name(bad).is_err(), "{bad}");
        }
        assert!(check_rad_name(&format!("{}.rad", "x".repeat(300))).is_err());
    }
}
