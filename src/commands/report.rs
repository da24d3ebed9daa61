//! `carma report`: what ran in a spool, in the simulator's figures.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use carma::config::Config;
use carma::{plot, report};

use super::spool_arg::SpoolArg;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// Print one JSON object (the keys of `carma simulate --json`, plus
    /// `reruns`, `refused`, `cancelled` and per-GPU figures in `gpus`).
    #[arg(long)]
    json: bool,
    /// Also write one CSV row per task to this file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also draw the run into this directory: `gpus.svg`/`.png` (SM
    /// activity, memory and power per GPU over time, from the GPU log) and
    /// `tasks.svg`/`.png` (a Gantt chart of task runs per GPU, coloured by
    /// user, OOM crashes outlined in red).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    let (r, rows) = report::build(&spool)?;
    if let Some(path) = &args.csv {
        let mut writer = csv::Writer::from_path(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        for row in &rows {
            writer.serialize(report::TaskRow {
                task: cell(&row.task),
                reason: cell(&row.reason),
                ..row.clone()
            })?;
        }
        writer.flush()?;
    }
    if let Some(dir) = &args.plot {
        plot_into(dir, &[&r.picture])?;
    }
    let m = &r.metrics;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(ExitCode::SUCCESS);
    }
    let done = rows.iter().filter(|r| r.state == "done").count();
    println!(
        "spool {}: {} tasks ({done} done, {} failed)",
        spool.root().display(),
        rows.len(),
        rows.len() - done
    );
    println!("{m}");
    println!("  re-runs           {}", r.reruns);
    println!(
        "  not counted above: {} never ran (refused or unplaceable), {} cancelled",
        r.refused, r.cancelled
    );
    let percent =
        |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{:.1}%", v * 100.0));
    for g in &r.gpus {
        println!(
            "  GPU {}: {:.3} MJ over {:.0} s, SM activity {}, occupancy {}, DRAM {}",
            g.gpu,
            g.energy_j / 1e6,
            g.seconds,
            percent(Some(g.smact)),
            percent(g.occupancy),
            percent(g.dram)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the runs' pictures into `dir`, side by side when there are
/// several, and names them on stderr (stdout stays the report, JSON
/// included).
pub fn plot_into(dir: &Path, runs: &[&plot::Run]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (kind, name) in [(plot::Kind::Timeline, "gpus"), (plot::Kind::Gantt, "tasks")] {
        let files = plot::write(kind, runs, &dir.join(name)).map_err(anyhow::Error::msg)?;
        for f in files {
            eprintln!("wrote {}", f.display());
        }
    }
    Ok(())
}

/// A text cell a spreadsheet shows as text, and a terminal as one line:
/// one that starts as a formula would (`=`, `+`, `-`, `@`) gets a leading
/// `'`, and control characters (an escape sequence, a line break) are
/// written as escapes. A reason quotes what a user named their file.
fn cell(text: &str) -> String {
    let text = carma::journal::one_line(text);
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => format!("'{text}"),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn a_cell_that_would_read_as_a_formula_reads_as_text() {
        assert_eq!(
            cell("=HYPERLINK(\"x\").rad:1:1: bad"),
            "'=HYPERLINK(\"x\").rad:1:1: bad"
        );
        assert_eq!(cell("@cmd"), "'@cmd");
        assert_eq!(
            cell("x\u{1b}]0;pwned\u{7}\n\tok"),
            "x\\u{1b}]0;pwned\\u{7}\\n\\tok"
        );
        assert_eq!(cell("out of GPU memory"), "out of GPU memory");
        assert_eq!(cell(""), "");
    }
}
