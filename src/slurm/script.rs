//! The batch script `carma slurm submit` hands to `sbatch`, and the
//! arguments it hands with it. Everything from the user's file reaches
//! `sbatch` as one argument each (never as `#SBATCH` text, where a newline
//! in a name would be a directive of its own) and the shell as quoted
//! words.

use std::path::Path;
use std::time::Duration;

use super::request::{Request, slurm_time};
use crate::shell::quote;

/// The environment variable that tells the batch script it runs as the
/// job, under `carma slurm run`, and not as the wrapper's launcher.
pub const STEP_VAR: &str = "CARMA_SLURM_STEP";

/// One submission of one job file.
#[derive(Debug, Clone)]
pub struct Submission<'a> {
    /// The job file, absolute: a retry reads it again.
    pub rad: &'a Path,
    pub name: &'a str,
    /// Where the job runs: its file's directory.
    pub workdir: &'a Path,
    /// The lines bash runs (as the daemon would write them).
    pub lines: &'a [String],
    pub request: &'a Request,
    pub time: Option<Duration>,
    /// 1 for the first submission.
    pub attempt: u32,
    /// Resubmissions after OOM crashes allowed in all.
    pub retries: u32,
    /// What Slurm shows as the job's comment: the estimate and its source,
    /// or the job a retry replaces.
    pub comment: &'a str,
    /// The carma binary the node runs.
    pub carma: &'a Path,
    /// The configuration the wrapper reads, when not the default.
    pub config: Option<&'a Path>,
}

/// `text` with what Slurm or a terminal could misread replaced: names keep
/// `[A-Za-z0-9._-]`, comments printable ASCII.
fn tame(text: &str, keep: impl Fn(char) -> bool, max: usize) -> String {
    text.chars()
        .map(|c| if keep(c) { c } else { '_' })
        .take(max)
        .collect()
}

impl Submission<'_> {
    /// The batch script.
    pub fn script(&self) -> String {
        let mut wrapper = vec![quote(&self.carma.display().to_string())];
        if let Some(config) = self.config {
            wrapper.extend(["--config".to_string(), quote(&config.display().to_string())]);
        }
        wrapper.extend([
            "slurm".into(),
            "run".into(),
            "--rad".into(),
            quote(&self.rad.display().to_string()),
            "--attempt".into(),
            self.attempt.to_string(),
        ]);
        if let Some(mib) = self.request.granted_mib {
            wrapper.extend(["--granted-mib".into(), mib.to_string()]);
        }
        wrapper.extend(["--".into(), "\"$0\"".into()]);
        let mut text = format!(
            "#!/bin/bash\n\
             # Written by `carma slurm submit` for {rad} (attempt {attempt}, {retries} OOM \
             retries in all).\n\
             # The job's lines below run under `carma slurm run`, which watches their\n\
             # stderr for out-of-memory crashes and resubmits the job with a whole GPU.\n\
             if [ \"${{{STEP_VAR}:-}}\" != job ]; then\n    exec {wrapper}\nfi\n",
            rad = tame(&self.rad.display().to_string(), |c| !c.is_control(), 4096),
            attempt = self.attempt,
            retries = self.retries,
            wrapper = wrapper.join(" "),
        );
        for line in self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// `sbatch`'s arguments (the script goes on its standard input).
    pub fn sbatch_args(&self) -> Vec<String> {
        let mut args = vec![
            "--parsable".to_string(),
            format!(
                "--job-name={}",
                tame(
                    self.name,
                    |c| c.is_ascii_alphanumeric() || "._-".contains(c),
                    64
                )
            ),
            format!("--chdir={}", self.workdir.display()),
            format!("--gres={}", self.request.gres),
            format!(
                "--comment={}",
                tame(self.comment, |c| c.is_ascii_graphic() || c == ' ', 200)
            ),
        ];
        if let Some(limit) = self.time {
            args.push(format!("--time={}", slurm_time(limit)));
        }
        if self.request.exclusive {
            args.push("--exclusive".into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn request() -> Request {
        Request {
            gres: "shard:11".into(),
            exclusive: false,
            granted_mib: Some(11_264),
        }
    }

    fn submission<'a>(request: &'a Request, lines: &'a [String]) -> Submission<'a> {
        Submission {
            rad: Path::new("/home/u/jobs/it's.rad"),
            name: "lenet\n#SBATCH --uid=0",
            workdir: Path::new("/home/u/jobs"),
            lines,
            request,
            time: Some(Duration::from_secs(3600)),
            attempt: 1,
            retries: 2,
            comment: "carma: 10240 MiB from ensemble\n",
            carma: Path::new("/usr/bin/carma"),
            config: None,
        }
    }

    #[test]
    fn hostile_names_and_comments_stay_one_harmless_argument() {
        let r = request();
        let lines = ["python train.py".to_string()];
        let args = submission(&r, &lines).sbatch_args();
        assert_eq!(
            args,
            [
                "--parsable",
                "--job-name=lenet__SBATCH_--uid_0",
                "--chdir=/home/u/jobs",
                "--gres=shard:11",
                "--comment=carma: 10240 MiB from ensemble_",
                "--time=0-01:00:00",
            ]
        );
    }

    /// The script runs the wrapper first; as the job it runs the lines.
    #[test]
    fn the_script_hands_itself_to_the_wrapper_then_runs_the_lines() {
        let r = request();
        let lines = ["echo job ran".to_string()];
        let s = submission(&r, &lines);
        let text = s.script();
        assert!(text.starts_with("#!/bin/bash\n"), "{text}");
        assert!(!text.contains("#SBATCH"), "{text}");
        assert!(
            text.contains(
                "exec /usr/bin/carma slurm run --rad '/home/u/jobs/it'\\''s.rad' --attempt 1 \
                 --granted-mib 11264 -- \"$0\""
            ),
            "{text}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script");
        std::fs::write(&path, &text).unwrap();
        let as_job = Command::new("bash")
            .arg(&path)
            .env(STEP_VAR, "job")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&as_job.stdout), "job ran\n");
        // Not as the job: it execs the wrapper (here a binary that is not
        // there), and never runs the lines itself.
        let launcher = Command::new("bash")
            .arg(&path)
            .env_remove(STEP_VAR)
            .output()
            .unwrap();
        assert!(!launcher.status.success());
        assert!(!String::from_utf8_lossy(&launcher.stdout).contains("job ran"));
    }

    #[test]
    fn multi_gpu_jobs_ask_for_the_node() {
        let r = Request {
            gres: "gpu:2".into(),
            exclusive: true,
            granted_mib: None,
        };
        let lines = [];
        let mut s = submission(&r, &lines);
        s.time = None;
        let args = s.sbatch_args();
        assert!(args.contains(&"--exclusive".to_string()), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--time")));
        assert!(!s.script().contains("--granted-mib"));
    }
}
