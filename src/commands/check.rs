//! `carma check`: validate `.rad` files without submitting them.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;

use carma::journal::shown;
use carma::rad::{self, JobFile, TaskSpec};

/// One valid file in `carma check --json` output.
#[derive(Serialize)]
struct Checked<'a> {
    /// The path as given on the command line.
    file: String,
    #[serde(flatten)]
    spec: &'a TaskSpec,
    /// What the file gets away with, `FILE:LINE:COL: warning: ...`.
    warnings: &'a [String],
}

/// Checks every file, reporting each bad one and going on: a user fixing a
/// directory of jobs wants all the errors at once.
pub fn run(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    // Written with `writeln!` so that a closed pipe (`| head`) ends the
    // command with an error instead of a panic.
    let mut out = std::io::stdout().lock();
    let mut all_valid = true;
    for file in files {
        match rad::check_file(file) {
            Ok(JobFile { spec, warnings }) if json => {
                let checked = Checked {
                    file: file.display().to_string(),
                    spec: &spec,
                    warnings: &warnings,
                };
                writeln!(out, "{}", serde_json::to_string(&checked)?)?;
            }
            Ok(JobFile { spec, warnings }) => {
                for warning in &warnings {
                    eprintln!("{}", shown(&warning.to_string()));
                }
                let checked = format!("{}: ok\n{spec}", file.display());
                writeln!(out, "{}", shown(&checked))?;
            }
            Err(e) => {
                eprintln!("{}", shown(&e.to_string()));
                all_valid = false;
            }
        }
    }
    Ok(if all_valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
