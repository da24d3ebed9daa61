//! Conda in a job: the shell code that finds a conda installation and
//! loads its shell hook, so that `conda activate ENV` works in the job's
//! `bash --noprofile --norc`, where no `.bashrc` ran `conda init`'s lines.
//!
//! Why the hook and not `conda run -n ENV CMD` (the research prototype's
//! way): with the hook the job's lines run as written, in one bash, and an
//! activation lasts for every line after it, as in the user's own terminal
//! (`conda activate tf` then `cd` then `python`, or a venv on top); the
//! job's processes are bash's children, so cancellation and the OOM
//! signatures in stderr reach them directly, with no `conda run` between
//! that buffers output or must forward signals; and no line has to be
//! rewritten.
//!
//! Why the search runs in the job and not in the daemon: the daemon is root,
//! and the places looked at lie in the user's home, where a link could make
//! root look at (and report on) a file the user may not see. In the job,
//! the search runs as the user, after the switch, and sees exactly what the
//! user may see; the daemon only writes the list of places, quoted. The
//! same goes for `$CONDA_EXE`: the daemon never learns the user's shell
//! environment (a file copied into `pending/` has none), so "the owner's
//! `CONDA_EXE`" is the job's own, as its lines before the first `conda`
//! line set it (`export CONDA_EXE=...`, `module load anaconda`): the job
//! starts from a login environment (built by the daemon), never the
//! daemon's.

use std::path::{Path, PathBuf};

use crate::shell::quote;

/// The installation places carma knows in the job owner's home, looked at
/// before the system's: a user who installed their own conda did so to use
/// it, and their environments live in it.
const HOME_PLACES: [&str; 4] = ["miniconda3", "anaconda3", "miniforge3", "mambaforge"];

/// The system-wide installation places, looked at after the user's own.
const SYSTEM_PLACES: [&str; 4] = [
    "/opt/conda",
    "/opt/miniconda3",
    "/opt/anaconda3",
    "/opt/miniforge3",
];

/// Where a job looks for conda, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// `daemon.conda`, when set.
    configured: Option<String>,
    /// Installations in the owner's home: used only when the owner or root
    /// owns them, so nobody else's code runs as the owner.
    home: Vec<PathBuf>,
    /// System-wide installations: the administrator's.
    system: Vec<PathBuf>,
}

impl Search {
    /// The search for a job of the user whose home is `home`, with
    /// `configured` from `daemon.conda` (empty: none).
    pub fn new(configured: &str, home: &Path) -> Search {
        Search {
            configured: (!configured.is_empty()).then(|| configured.to_owned()),
            home: HOME_PLACES.iter().map(|p| home.join(p)).collect(),
            system: SYSTEM_PLACES.iter().map(PathBuf::from).collect(),
        }
    }

    /// Bash that, unless the job already defined a `conda` function (it
    /// initialised conda itself), finds conda as described in the module
    /// documentation and evaluates its `shell.bash hook`; a job that finds
    /// none, or whose hook defines no `conda`, stops there through
    /// `__carma_stop` ([`super`]). It runs as the job's user.
    pub fn hook(&self) -> String {
        let mut tries = Vec::new();
        if let Some(configured) = &self.configured {
            tries.push(format!("__carma_conda_at {}", quote(configured)));
        }
        tries.push("__carma_conda_at \"${CONDA_EXE-}\"".into());
        tries.push("__carma_conda_at \"$(type -P conda)\"".into());
        for place in &self.home {
            tries.push(format!(
                "__carma_conda_at {} owned",
                quote(&place.display().to_string())
            ));
        }
        for place in &self.system {
            tries.push(format!(
                "__carma_conda_at {}",
                quote(&place.display().to_string())
            ));
        }
        tries.push(format!(
            "__carma_stop {}",
            quote(&format!("conda not found (looked in {})", self.looked_in()))
        ));
        format!(
            "{HOOK_HEAD}    {}\n{HOOK_TAIL}",
            tries.join(" ||\n        ")
        )
    }

    /// The places, for the message of a job that found none.
    fn looked_in(&self) -> String {
        let mut places = Vec::new();
        if let Some(configured) = &self.configured {
            places.push(format!("daemon.conda = {configured}"));
        }
        places.push("$CONDA_EXE".into());
        places.push("conda on PATH".into());
        places.extend(
            self.home
                .iter()
                .chain(&self.system)
                .map(|p| p.display().to_string()),
        );
        places.join(", ")
    }
}

/// Whether a script line calls conda: only a script that does gets the
/// hook, so other jobs run exactly as written.
pub fn uses_conda(line: &str) -> bool {
    line.split_whitespace().next() == Some("conda")
}

/// The start of the hook: `__carma_conda_at PLACE [owned]` takes a conda
/// executable or an installation directory and, if it holds an executable
/// conda (owned by the user or root when `owned`, the directory too),
/// names it in `__carma_conda`.
const HOOK_HEAD: &str = r#"# carma: conda's shell hook, so that `conda activate` works (carma's README)
if ! declare -F conda >/dev/null; then
    __carma_conda_at() {
        local exe=$1 path owner
        [ -n "$exe" ] || return 1
        [ -d "$exe" ] && exe=$exe/bin/conda
        [ -f "$exe" ] && [ -x "$exe" ] || return 1
        if [ "${2-}" = owned ]; then
            for path in "$1" "$exe"; do
                owner=$(stat -L -c %u -- "$path" 2>/dev/null) || return 1
                [ "$owner" = 0 ] || [ "$owner" = "$UID" ] || return 1
            done
        fi
        __carma_conda=$exe
    }
"#;

/// The end of the hook: evaluate what the conda found prints.
const HOOK_TAIL: &str = r#"    eval "$("$__carma_conda" shell.bash hook)"
    declare -F conda >/dev/null ||
        __carma_stop "conda's shell hook failed ($__carma_conda shell.bash hook)"
fi"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    /// A conda whose hook only says which it is.
    fn fake_conda(prefix: &Path) {
        let bin = prefix.join("bin");
        fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("conda");
        fs::write(
            &exe,
            format!(
                "#!/bin/sh\necho 'conda() {{ :; }}; echo hooked {}'\n",
                prefix.display()
            ),
        )
        .unwrap();
        fs::set_permissions(&exe, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Runs `before`, then the hook of `search`, in the job's bash with a
    /// PATH that holds no conda.
    fn run(search: &Search, before: &str) -> (String, String) {
        let script = format!(
            "__carma_stop() {{ echo \"stop: $1\"; exit 78; }}\n{before}\n{}\n",
            search.hook()
        );
        let out = Command::new("bash")
            .args(["--noprofile", "--norc", "-c", &script])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A search over a fake home and fake system places in `dir`.
    fn search_in(dir: &Path, configured: &str) -> Search {
        let mut search = Search::new(configured, &dir.join("home"));
        search.system = SYSTEM_PLACES
            .iter()
            .map(|p| dir.join(p.trim_start_matches('/')))
            .collect();
        search
    }

    #[test]
    fn the_search_goes_configured_conda_exe_home_then_system() {
        let dir = tempfile::tempdir().unwrap();
        let at = |p: &str| dir.path().join(p);
        let search = search_in(dir.path(), "");
        let (out, _) = run(&search, "");
        assert!(out.starts_with("stop: conda not found (looked in $CONDA_EXE, conda on PATH, "));
        assert!(out.contains("home/miniconda3, "), "{out}");
        assert!(out.ends_with("opt/miniforge3)"), "{out}");
        // Each place, found in turn as the ones before it appear.
        let order = [
            "opt/miniforge3",
            "opt/anaconda3",
            "opt/miniconda3",
            "opt/conda",
            "home/mambaforge",
            "home/miniforge3",
            "home/anaconda3",
            "home/miniconda3",
        ];
        for place in order {
            fake_conda(&at(place));
            let (out, err) = run(&search, "");
            assert_eq!(out, format!("hooked {}", at(place).display()), "{err}");
        }
        // The job's own CONDA_EXE beats every place; the configuration
        // beats it, as an executable or as an installation directory.
        fake_conda(&at("mine"));
        let exported = format!("export CONDA_EXE={}", at("mine/bin/conda").display());
        let (out, _) = run(&search, &exported);
        assert_eq!(out, format!("hooked {}", at("mine").display()));
        fake_conda(&at("site"));
        for configured in [at("site"), at("site/bin/conda")] {
            let search = search_in(dir.path(), &configured.display().to_string());
            let (out, _) = run(&search, &exported);
            assert_eq!(out, format!("hooked {}", at("site").display()));
        }
        // A job that set conda up itself keeps its own.
        let (out, _) = run(&search, "conda() { :; }");
        assert_eq!(out, "");
    }

    #[test]
    fn a_home_installation_of_someone_else_is_passed_over() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("skipped: needs root to give files to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let search = search_in(dir.path(), "");
        let theirs = dir.path().join("home/miniconda3");
        fake_conda(&theirs);
        fake_conda(&dir.path().join("home/anaconda3"));
        let chown = |path: &Path, uid: u32| {
            std::os::unix::fs::chown(path, Some(uid), None).unwrap();
        };
        // Another user's directory, or another user's executable in it.
        chown(&theirs, 4242);
        let (out, _) = run(&search, "");
        assert!(out.ends_with("home/anaconda3"), "{out}");
        chown(&theirs, 0);
        chown(&theirs.join("bin/conda"), 4242);
        let (out, _) = run(&search, "");
        assert!(out.ends_with("home/anaconda3"), "{out}");
        chown(&theirs.join("bin/conda"), 0);
        let (out, _) = run(&search, "");
        assert!(out.ends_with("home/miniconda3"), "{out}");
    }

    #[test]
    fn places_reach_the_shell_quoted() {
        let search = Search::new("/opt/my conda's/$(id)", Path::new("/home/a b"));
        let hook = search.hook();
        assert!(hook.contains("__carma_conda_at '/opt/my conda'\\''s/$(id)' ||\n"));
        assert!(hook.contains("__carma_conda_at '/home/a b/miniconda3' owned"));
    }

    #[test]
    fn only_lines_that_call_conda_use_it() {
        assert!(uses_conda("conda activate tf"));
        assert!(uses_conda("  conda run -n tf python x.py"));
        assert!(!uses_conda("condarc"));
        assert!(!uses_conda("python conda.py"));
        assert!(!uses_conda("source venv/bin/activate"));
    }
}
