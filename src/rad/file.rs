//! What needs the file system: reading a `.rad` safely, naming the job
//! after its file, and finding its model summary next to it.
//!
//! Kept apart from the pure parser, like ripgrep's split between validating
//! what the user wrote and building what needs the system: the parser can
//! be fed anything in a unit test, while these checks answer the questions
//! only a directory can (does `BERT_base.model` exist here, or only
//! `bert_base.model`?). The model summary must resolve inside the `.rad`'s
//! own directory, symbolic links included: jobs run as their owner, and
//! carma must not be talked into reading other users' files.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::error::{RadError, clip};
use super::spec::TaskSpec;
use super::suggest::closest;
use super::{Parsed, parse_bytes};

/// Largest `.rad` read. Real ones are a few hundred bytes; the bound keeps
/// a stray multi-gigabyte file from being loaded into memory at all, and
/// limits what carma's (root-owned, quota-free) copy of a job can cost.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// A `.rad` file that is not a usable job, with its path.
#[derive(Debug, Error)]
pub enum FileError {
    /// The file (or its metadata) could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    /// Not something carma reads as a job file at all.
    #[error("{}: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
    /// The file's content is not a valid job; prints `FILE:LINE:COL: message`.
    #[error("{}:{error}", path.display())]
    Invalid { path: PathBuf, error: RadError },
}

/// A `.rad` that carma can run, and what it had to overlook to run it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFile {
    /// The job, its model summary resolved against the directory.
    pub spec: TaskSpec,
    /// `FILE:LINE:COL: warning: message` for each thing the user should fix: a
    /// summary found only under another case, or not at all, a malformed
    /// line the job does not depend on.
    pub warnings: Vec<String>,
}

/// Reads, parses and checks the `.rad` at `path`: the job's name defaults to
/// the file's stem, and the model summary it names is looked for inside the
/// file's directory. A summary that is not there is a warning, never an
/// error: the estimators do without it, as the research prototype did. One
/// whose name differs from a file on disk only in case (published
/// workloads name `efficientNet_32.model` for `efficientnet_32.model`) is
/// that file, when no other file matches as well.
pub fn check_file(path: &Path) -> Result<JobFile, FileError> {
    check_bytes(path, &read(path)?)
}

/// [`check_file`] on the file's content, already read (carma's own copy of
/// a job it has just written): `path` still names it and locates its
/// model summary.
pub fn check_bytes(path: &Path, bytes: &[u8]) -> Result<JobFile, FileError> {
    let Parsed {
        mut spec,
        model_at,
        warnings: overlooked,
    } = parse_bytes(bytes).map_err(|error| FileError::Invalid {
        path: path.to_owned(),
        error,
    })?;
    let warning = |w: RadError| {
        format!(
            "{}:{}:{}: warning: {}",
            path.display(),
            w.line,
            w.column,
            w.message
        )
    };
    let mut warnings: Vec<String> = overlooked.into_iter().map(warning).collect();
    if spec.name.is_none() {
        spec.name = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned());
    }
    if let (Some(model), Some(at)) = (spec.model.clone(), model_at) {
        let mut warn = |message: String| warnings.push(warning(RadError::new(at, message)));
        let dir = job_dir(path);
        match find_model(dir, &model) {
            Ok(()) => {}
            Err(missing) => match case_match(dir, &model).filter(|m| find_model(dir, m).is_ok()) {
                Some(found) => {
                    warn(format!(
                        "model summary `{}` not found; using `{}`, which differs only in case",
                        clip(&model),
                        clip(&found)
                    ));
                    spec.model = Some(found);
                }
                None => {
                    warn(format!("{missing}; estimating without it"));
                    spec.model = None;
                }
            },
        }
    }
    Ok(JobFile { spec, warnings })
}

/// The one file in `relative`'s directory below `dir` whose name equals
/// `relative`'s file name ignoring case, as a path relative to `dir`; `None`
/// when no file or more than one does (then carma cannot know which was
/// meant). Names are only listed, never followed: callers still open the
/// result safely. Not searched in a directory of more than
/// 4,096 names (`CASE_SEARCH_LIMIT`).
pub fn case_match(dir: &Path, relative: &str) -> Option<String> {
    let (subdir, file_name) = match relative.rsplit_once('/') {
        Some((subdir, file_name)) => (Some(subdir), file_name),
        None => (None, relative),
    };
    let wanted = file_name.to_lowercase();
    let name = LISTED.with_borrow_mut(|listed| {
        let key = (dir.to_owned(), subdir.unwrap_or("").to_owned());
        let names = match listed.get(&key) {
            Some(names) => names,
            None => {
                let names = crate::safe::names_beneath(dir, &key.1, CASE_SEARCH_LIMIT).ok();
                if listed.len() >= LISTINGS_KEPT {
                    listed.clear();
                }
                listed.entry(key).or_insert(names)
            }
        };
        let mut matches = names
            .iter()
            .flatten()
            .filter(|name| name.to_lowercase() == wanted);
        match (matches.next(), matches.next()) {
            (Some(name), None) => Some(name.clone()),
            _ => None,
        }
    })?;
    Some(match subdir {
        Some(subdir) => format!("{subdir}/{name}"),
        None => name,
    })
}

thread_local! {
    /// The directories [`case_match`] listed since [`forget_listings`]:
    /// the daemon takes in every drop of `pending/` in one turn, and each
    /// that named a missing summary listed `pending/` again, up to 4,096
    /// names each time (100,000 such drops held a start for minutes).
    static LISTED: RefCell<HashMap<Listed, Option<Vec<String>>>> = RefCell::new(HashMap::new());
}

/// A directory [`case_match`] listed: the one it was given, and the
/// subdirectory below it that it searched.
type Listed = (PathBuf, String);

/// Directories [`LISTED`] keeps at most (each at most
/// [`CASE_SEARCH_LIMIT`] names).
const LISTINGS_KEPT: usize = 64;

/// Forgets the listings [`case_match`] made: the daemon calls it at each
/// turn of its loop, so that a summary that arrived since is found.
pub fn forget_listings() {
    LISTED.with_borrow_mut(HashMap::clear);
}

/// Names a directory may hold for [`case_match`] to search it: the
/// daemon searches `pending/` and users' directories, for every job that
/// names a summary it does not find, on its loop.
const CASE_SEARCH_LIMIT: usize = 4096;

/// The file's bytes, refusing directories, FIFOs, devices (reading those
/// blocks or never ends) and files over [`MAX_FILE_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, FileError> {
    let read_error = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let refused = |reason: String| FileError::Refused {
        path: path.to_owned(),
        reason,
    };
    let too_large = || {
        refused(format!(
            "larger than {MAX_FILE_BYTES} bytes: not a job file"
        ))
    };
    let metadata = fs::metadata(path).map_err(read_error)?;
    if !metadata.is_file() {
        return Err(refused("not a regular file".to_owned()));
    }
    if metadata.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    // Opened without blocking and checked again on the open file: what
    // was a file a moment ago may be a FIFO now.
    let (bytes, _) = crate::safe::read_file(path, MAX_FILE_BYTES).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput if e.to_string().contains("larger than") => too_large(),
        std::io::ErrorKind::InvalidInput => refused("not a regular file".to_owned()),
        _ => read_error(e),
    })?;
    Ok(bytes)
}

/// The directory a `.rad`'s relative paths start from.
fn job_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Checks that `path` names a regular file inside `dir`; the error says
/// what is wrong and, when the name is close to one on disk, what was
/// probably meant.
fn find_model(dir: &Path, path: &str) -> Result<(), String> {
    let model = clip(path);
    let real = match fs::canonicalize(dir.join(path)) {
        Ok(real) => real,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing(dir, path)),
        Err(e) => return Err(format!("cannot read the model summary `{model}`: {e}")),
    };
    let root = fs::canonicalize(dir)
        .map_err(|e| format!("cannot read the job's directory {}: {e}", dir.display()))?;
    if !real.starts_with(&root) {
        return Err(format!(
            "the model summary `{model}` leads outside the job's directory \
             (through a symbolic link): a job may only use files in its own directory"
        ));
    }
    if !real.is_file() {
        return Err(format!("the model summary `{model}` is not a regular file"));
    }
    Ok(())
}

/// "not found", with the closest name in the directory the path points to.
fn missing(dir: &Path, model: &str) -> String {
    let (subdir, file_name) = match model.rsplit_once(['/', '\\']) {
        Some((subdir, file_name)) => (Some(subdir), file_name),
        None => (None, model),
    };
    let search = subdir.map_or_else(|| dir.to_owned(), |subdir| dir.join(subdir));
    let names: Vec<String> = fs::read_dir(search)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    let mut message = format!(
        "model summary `{}` not found (paths are relative to the .rad's directory)",
        clip(model)
    );
    if let Some(name) = closest(file_name, names.iter().map(String::as_str)) {
        let suggestion = match subdir {
            Some(subdir) => format!("{subdir}/{name}"),
            None => name.to_owned(),
        };
        message.push_str(&format!(": did you mean `{suggestion}`?"));
    }
    message
}
