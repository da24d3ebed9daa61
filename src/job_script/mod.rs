//! The job's script as bash runs it: the lines of the `.rad`, made
//! dependable where they set up the job's environment. One place for the
//! daemon's runs and for `carma slurm submit`'s batch scripts.
//!
//! Two additions, each only where it is needed (a script that neither
//! calls conda nor activates anything runs exactly as written):
//!
//! - conda's shell hook ([`conda`]) just before the first line that
//!   calls `conda`, so that lines before it may set `CONDA_EXE` or load a
//!   module that provides conda;
//! - an activation line (`conda activate ENV`, `mamba activate ENV`,
//!   `source .../bin/activate`, `module load X`) that fails stops the job.
//!   Bash alone would go on and run `python` in the wrong environment, and
//!   the task would fail later with a confusing error, or worse, succeed
//!   with the wrong libraries. The job prints `carma: WHY` as its last
//!   stderr line and exits with [`SETUP_FAILED`]; the daemon
//!   ([`setup_failure`]) makes `WHY` the task's reason.
//!
//! A line is changed only where bash surely reads it as a line of commands:
//! from the first line that may open a here-document, a quoted string, a
//! substitution or a continuation onwards, nothing is touched (and a hook
//! still needed goes before the first line instead).

pub mod conda;

use std::io;
use std::path::Path;

use crate::shell::quote;
use crate::supervisor;
use conda::{Search, uses_conda};

/// The exit status of a job stopped at a failing activation line:
/// sysexits' `EX_CONFIG` ("configuration error"), which no shell, conda
/// or Python uses for anything of its own.
pub const SETUP_FAILED: i32 = 78;

/// What starts the job's last stderr line when it stopped there.
const MARK: &str = "carma: ";

/// Longest reason taken from a job's stderr.
const MAX_REASON_CHARS: usize = 400;

/// The script bash runs for the `.rad`'s `lines`, with `conda` telling
/// where a job that calls conda finds it.
pub fn build(lines: &[impl AsRef<str>], conda: &Search) -> Vec<String> {
    let mut script = Vec::with_capacity(lines.len() + 2);
    let mut plain = true;
    let mut hooked = false;
    let mut guarded = false;
    for line in lines {
        let line = line.as_ref();
        if plain && !hooked && uses_conda(line) {
            script.push(conda.hook());
            hooked = true;
        }
        match guard(line).filter(|_| plain) {
            Some(line) => {
                script.push(line);
                guarded = true;
            }
            None => script.push(line.to_owned()),
        }
        plain = plain && ends_plain(line);
    }
    if !hooked && lines.iter().any(|line| uses_conda(line.as_ref())) {
        script.insert(0, conda.hook());
        hooked = true;
    }
    if hooked || guarded {
        script.insert(0, prelude());
    }
    script
}

/// The reason a run gave for stopping at an activation line: the `WHY`
/// of its last stderr line `carma: WHY`, when it exited with
/// [`SETUP_FAILED`]. Control characters are dropped and the text is
/// capped: it comes from the job and goes to the journal and `reason`.
pub fn setup_failure(code: Option<i32>, run_dir: &Path) -> io::Result<Option<String>> {
    if code != Some(SETUP_FAILED) {
        return Ok(None);
    }
    let tail = supervisor::tail(&run_dir.join(supervisor::STDERR), 4096)?;
    let why = tail
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .and_then(|line| line.strip_prefix(MARK));
    Ok(why.map(|why| {
        why.chars()
            .filter(|c| !c.is_control())
            .take(MAX_REASON_CHARS)
            .collect()
    }))
}

/// The functions guarded lines call: `__carma_stop WHY` ends the job with
/// its reason; `__carma_setup_failed STATUS LINE [CONDA_ENV]` says why an
/// activation line failed, asking conda (as `conda activate` itself does)
/// whether the environment exists at all, and otherwise quoting the first
/// line of conda's complaint.
fn prelude() -> String {
    format!(
        r#"# carma: a failing activation line stops the job (carma's README)
__carma_stop() {{ printf '{MARK}%s\n' "$1" >&2; exit {SETUP_FAILED}; }}
__carma_setup_failed() {{
    local why=
    if [ $# -ge 3 ] && [ -n "${{CONDA_EXE-}}" ]; then
        why=$("$CONDA_EXE" shell.posix activate "$3" 2>&1 >/dev/null)
        case $why in
        *EnvironmentNameNotFound* | *EnvironmentLocationNotFound*)
            __carma_stop "conda environment \`$3\` not found" ;;
        esac
        why=${{why#"${{why%%[![:space:]]*}}"}}
        why=${{why%%$'\n'*}}
    fi
    __carma_stop "\`$2\` failed (status $1)${{why:+: $why}}"
}}"#
    )
}

/// An activation line that stops the job when it fails, or `None` for
/// any other line. Only a simple command is guarded, so appending
/// `|| ...` cannot change what it means.
fn guard(line: &str) -> Option<String> {
    let command = simple_command(line)?;
    let words: Vec<&str> = command.split_whitespace().collect();
    let conda_env = match words.as_slice() {
        ["conda", "activate", args @ ..] => args.iter().rev().find(|w| !w.starts_with('-')),
        ["mamba" | "micromamba", "activate", ..] | ["module", "load" | "add", _, ..] => None,
        ["source" | ".", file, ..] if file.rsplit('/').next() == Some("activate") => None,
        _ => return None,
    };
    let label = quote(command);
    Some(match conda_env {
        // The word as written: bash expands it as it did on the line.
        Some(env) => format!("{command} || __carma_setup_failed $? {label} {env}"),
        None => format!("{command} || __carma_setup_failed $? {label}"),
    })
}

/// The line without its comment, when bash reads it as one simple
/// command: no quotes, escapes, operators, redirections or
/// substitutions (`$NAME` and `${NAME}` are fine).
fn simple_command(line: &str) -> Option<&str> {
    let comment = line
        .char_indices()
        .find(|&(i, c)| c == '#' && line[..i].chars().last().is_none_or(char::is_whitespace))
        .map_or(line.len(), |(i, _)| i);
    let command = line[..comment].trim();
    let simple = !command.is_empty() && !command.contains(|c| "'\"`\\;&|()<>".contains(c));
    simple.then_some(command)
}

/// Whether bash reads the line after `line` as a new line of commands:
/// not after a possible here-document, an open quote, backquote or
/// parenthesis, or a line that ends in `\`, `|` or `&`.
fn ends_plain(line: &str) -> bool {
    let odd = |c: char| line.matches(c).count() % 2 == 1;
    let end = line.trim_end();
    !line.contains("<<")
        && !odd('\'')
        && !odd('"')
        && !odd('`')
        && line.matches('(').count() == line.matches(')').count()
        && !end.ends_with(['\\', '|', '&'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    fn search() -> Search {
        Search::new("", &PathBuf::from("/home/alice"))
    }

    #[test]
    fn a_script_without_activations_runs_as_written() {
        let script = lines("cd ~/x\npython train.py --lr 0.1\necho done # comment");
        assert_eq!(build(&script, &search()), script);
    }

    #[test]
    fn activation_lines_are_guarded_and_conda_is_hooked_before_its_first_line() {
        let script = build(
            &lines(
                "export CONDA_EXE=/x/bin/conda\n\
                 conda activate tf   # the env\n\
                 source venv/bin/activate\n\
                 module load cuda/12.1\n\
                 python train.py",
            ),
            &search(),
        );
        assert_eq!(script.len(), 7, "{script:#?}");
        assert!(script[0].contains("__carma_stop()"));
        assert_eq!(script[1], "export CONDA_EXE=/x/bin/conda");
        assert_eq!(script[2], search().hook());
        assert_eq!(
            script[3],
            "conda activate tf || __carma_setup_failed $? 'conda activate tf' tf"
        );
        assert_eq!(
            script[4],
            "source venv/bin/activate || __carma_setup_failed $? 'source venv/bin/activate'"
        );
        assert_eq!(
            script[5],
            "module load cuda/12.1 || __carma_setup_failed $? 'module load cuda/12.1'"
        );
        assert_eq!(script[6], "python train.py");
    }

    #[test]
    fn only_simple_activation_lines_are_guarded() {
        for line in [
            "conda activate tf && python x.py",
            "source \"$HOME/my env/bin/activate\"",
            "source venv/bin/activate 2>/dev/null",
            "source ~/.bashrc",
            "python activate",
            "module avail",
            "echo conda activate tf",
        ] {
            assert_eq!(guard(line), None, "{line}");
        }
        assert_eq!(
            guard(". $HOME/venvs/x/bin/activate").as_deref(),
            Some(
                ". $HOME/venvs/x/bin/activate || __carma_setup_failed $? '. $HOME/venvs/x/bin/activate'"
            )
        );
        assert_eq!(
            guard("conda activate --stack $ENV").as_deref(),
            Some(
                "conda activate --stack $ENV || __carma_setup_failed $? 'conda activate --stack $ENV' $ENV"
            )
        );
        assert_eq!(
            guard("conda activate").as_deref(),
            Some("conda activate || __carma_setup_failed $? 'conda activate'")
        );
    }

    #[test]
    fn nothing_is_changed_inside_here_documents_strings_or_continuations() {
        for opener in [
            "cat > env.sh <<EOF",
            "python -c 'import x",
            "echo \"start",
            "python train.py \\",
            "false ||",
            "x=$(",
        ] {
            let script = build(
                &lines(&format!("{opener}\nconda activate tf\nsource a/activate")),
                &search(),
            );
            assert_eq!(script.len(), 5, "{opener}: {script:#?}");
            assert_eq!(script[1], search().hook(), "{opener}");
            assert_eq!(
                script[2..],
                lines(&format!("{opener}\nconda activate tf\nsource a/activate"))
            );
        }
    }

    /// Runs the script built for `text` as the job's bash would, in `dir`:
    /// its status, stdout and stderr.
    fn run(text: &str, dir: &Path) -> (Option<i32>, String, String) {
        let script = build(&lines(text), &search());
        let out = std::process::Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &script.join("\n")])
            .current_dir(dir)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    }

    #[test]
    fn a_failing_activation_line_stops_the_job_with_its_reason() {
        let dir = tempfile::tempdir().unwrap();
        let (code, stdout, stderr) = run(
            "echo before\nsource missing/bin/activate\necho after",
            dir.path(),
        );
        assert_eq!(code, Some(SETUP_FAILED));
        assert_eq!(stdout, "before\n");
        assert!(
            stderr.ends_with(
                "missing/bin/activate: No such file or directory\n\
                 carma: `source missing/bin/activate` failed (status 1)\n"
            ),
            "{stderr}"
        );
    }

    #[test]
    fn a_conda_failure_other_than_a_missing_environment_is_quoted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("conda");
        std::fs::write(
            &exe,
            "#!/bin/sh\nprintf '\\nCondaError: broken install\\nmore\\n' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A job that set conda up itself keeps its own (carma's hook passes)
        // and gets the same check.
        let (code, stdout, stderr) = run(
            &format!(
                "export CONDA_EXE={}\nconda() {{ \"$CONDA_EXE\" \"$@\"; }}\n\
                 conda activate tf\necho after",
                exe.display()
            ),
            dir.path(),
        );
        assert_eq!((code, stdout.as_str()), (Some(SETUP_FAILED), ""));
        assert!(
            stderr.ends_with(
                "carma: `conda activate tf` failed (status 1): CondaError: broken install\n"
            ),
            "{stderr}"
        );
    }

    #[test]
    fn the_reason_is_the_last_stderr_line_of_a_stopped_job() {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join(supervisor::STDERR);
        std::fs::write(
            &stderr,
            "EnvironmentNameNotFound: Could not find conda environment: tf\n\
             carma: conda environment `tf` not found\x1b[31m\n\n",
        )
        .unwrap();
        let why = setup_failure(Some(SETUP_FAILED), dir.path()).unwrap();
        assert_eq!(why.as_deref(), Some("conda environment `tf` not found[31m"));
        assert_eq!(setup_failure(Some(1), dir.path()).unwrap(), None);
        std::fs::write(&stderr, "carma: x\nTraceback ...\n").unwrap();
        assert_eq!(setup_failure(Some(SETUP_FAILED), dir.path()).unwrap(), None);
    }
}
