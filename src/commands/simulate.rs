//! `carma simulate`: replay a trace through the scheduling core in virtual
//! time.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;

use carma::config::Config;
use carma::rad::MemoryLine;
use carma::sched::Policy;
use carma::simulate::trace::{TraceError, TraceTask};
use carma::simulate::{self, Metrics, Quality, Sharing};

/// One simulation's figures, estimate quality and picture.
type Outcome = (Metrics, Option<Quality>, Option<carma::plot::Run>);

#[derive(clap::Args)]
pub struct Args {
    /// Trace CSV (the format of data/carma/traces).
    #[arg(long, required_unless_present = "compare_paper")]
    trace: Option<PathBuf>,
    /// Instead of one run: the published CARMA results beside the
    /// simulator's, as a Markdown table, from the traces in DIR (the
    /// data's `carma/traces/`): means and spreads over --replicas replays
    /// [default: 20], submissions moved by up to --jitter-s.
    #[arg(long, value_name = "DIR", conflicts_with = "trace")]
    compare_paper: Option<PathBuf>,
    /// With --compare-paper: the emulated prototype reads the GPUs as its
    /// monitor published them, once every 1.5 minutes (the block's mean
    /// SM activity, its last memory reading), not as they are.
    #[arg(long, requires = "compare_paper")]
    prototype_monitor: bool,
    /// GPUs and their memory, e.g. 4x40GiB or 2x40GiB,2x80GiB; a GPU
    /// cut into MIG instances as `1x40GiB:mig=3g.20gb+2g.10gb+1g.5gb`
    /// (each instance a GPU of its own, for single-GPU tasks).
    #[arg(long, default_value = "4x40GiB")]
    gpus: String,
    /// Placement policy [default: placement.policy of the configuration].
    #[arg(long)]
    policy: Option<Policy>,
    /// Where each task's estimate comes from: a trace column (`oracle`,
    /// `horus`, `faketensor`, `gpumemnet`, `none`), or `carma`: carma's
    /// estimator chain on the task's job file (found in --jobs), its
    /// declared memory lines ignored, learning from history as jobs repeat.
    #[arg(long, default_value = "oracle", value_parser = parse_estimator)]
    estimator: EstimatorArg,
    /// Where `--estimator carma` finds the job files the trace's `task`
    /// column names, and their model summaries [default: the trace's
    /// directory].
    #[arg(long, value_name = "DIR")]
    jobs: Option<PathBuf>,
    /// How collocated tasks share a GPU [default: simulate.sharing].
    #[arg(long, value_enum)]
    sharing: Option<SharingArg>,
    /// Start tasks from behind a blocked head when they cannot delay it
    /// [default: queue.backfill].
    #[arg(long)]
    backfill: Option<bool>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also draw the run into DIR: `gpus.svg`/`.png` (SM activity, memory
    /// and power per GPU over time) and `tasks.svg`/`.png` (which task ran
    /// where, coloured by class, OOM crashes outlined).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// With --plot: run the trace under this policy too and draw it on
    /// the left, the run asked for on the right (e.g. `--versus
    /// exclusive`).
    #[arg(long, value_name = "POLICY", requires = "plot")]
    versus: Option<Policy>,
    /// Instead of one run: this many runs of the trace with every
    /// submission moved by up to --jitter-s (seeded 1..=N), and their
    /// total times' mean and spread. One arrival order's total time moves
    /// by several percent when a single estimate changes by 5%, so
    /// estimators are compared on the mean.
    #[arg(long, value_name = "N", conflicts_with = "plot")]
    replicas: Option<u64>,
    /// How far --replicas (or --compare-paper) moves each submission,
    /// seconds, either way [default: 60].
    #[arg(long, value_name = "S")]
    jitter_s: Option<f64>,
}

/// How far replays move each submission: checked once, for --replicas
/// and --compare-paper alike, and refused where nothing is replayed (one
/// run takes the trace as written, and a flag it ignored would mislead).
fn replay_jitter(args: &Args) -> Result<f64> {
    let replayed = args.replicas.is_some() || args.compare_paper.is_some();
    if args.jitter_s.is_some() && !replayed {
        anyhow::bail!(
            "--jitter-s moves the submissions of --replicas or --compare-paper; \
             one run replays the trace as it is written"
        );
    }
    let jitter_s = args
        .jitter_s
        .unwrap_or(simulate::paper::Replays::DEFAULT.jitter_s);
    let most = simulate::trace::MAX_TRACE_SECONDS;
    if !(jitter_s.is_finite() && (0.0..=most).contains(&jitter_s)) {
        anyhow::bail!("--jitter-s: expected seconds from 0 to {most}, found {jitter_s}");
    }
    if args.replicas == Some(0) {
        anyhow::bail!("--replicas needs N >= 1");
    }
    Ok(jitter_s)
}

/// A trace column, or carma's own chain.
#[derive(Clone, Copy, Debug)]
pub enum EstimatorArg {
    Column(MemoryLine),
    Carma,
}

fn parse_estimator(text: &str) -> Result<EstimatorArg, String> {
    use clap::ValueEnum;
    match text {
        "carma" => Ok(EstimatorArg::Carma),
        _ => MemoryLine::from_str(text, false)
            .map(EstimatorArg::Column)
            .map_err(|_| {
                "expected oracle, horus, faketensor, gpumemnet, none or carma".to_string()
            }),
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum SharingArg {
    Mps,
    Streams,
}

pub fn run(config: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config)?;
    let jitter_s = replay_jitter(&args)?;
    if let Some(dir) = &args.compare_paper {
        let replays = simulate::paper::Replays {
            count: args
                .replicas
                .unwrap_or(simulate::paper::Replays::DEFAULT.count),
            jitter_s,
        };
        let monitor = match args.prototype_monitor {
            true => simulate::Readings::PROTOTYPE,
            false => simulate::Readings::Live,
        };
        let rows =
            simulate::paper::compare(dir, &config.rules(), &config.simulate, replays, monitor)
                .map_err(anyhow::Error::msg)?;
        print!("{}", simulate::paper::Table(&rows));
        return Ok(ExitCode::SUCCESS);
    }
    let Some(trace_path) = args.trace.clone() else {
        anyhow::bail!("--trace FILE is needed (or --compare-paper DIR)");
    };
    let gpus = carma::gpu::sim::spec::parse(&args.gpus)
        .map_err(|e| anyhow::anyhow!("--gpus {}: column {}: {}", args.gpus, e.column, e.message))?;
    let mut rules = config.rules();
    if let Some(policy) = args.policy {
        rules.placement.policy = policy;
    }
    if let Some(backfill) = args.backfill {
        rules.queue.backfill = backfill;
    }
    let mut model = config.simulate.clone();
    if let Some(sharing) = args.sharing {
        model.sharing = match sharing {
            SharingArg::Mps => Sharing::Mps,
            SharingArg::Streams => Sharing::Streams,
        };
    }
    let policy = rules.placement.policy;
    let mut setup = simulate::Setup {
        gpus,
        estimator: MemoryLine::None,
        rules,
        model,
        readings: simulate::Readings::Live,
    };
    let jobs = args.jobs.clone().unwrap_or_else(|| {
        trace_path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_owned()
    });
    // One run of the trace with the estimator asked for: its figures, the
    // estimates' quality (carma's chain only) and its picture (--plot).
    let simulate = |setup: &mut simulate::Setup, trace: &[TraceTask]| -> Result<Outcome> {
        let pictured = args.plot.is_some();
        let go = |setup: &simulate::Setup, estimates: &mut dyn simulate::Estimates| {
            if pictured {
                let (m, picture) = simulate::run_pictured(trace, setup, estimates);
                (m, Some(picture))
            } else {
                (simulate::run_with(trace, setup, estimates), None)
            }
        };
        Ok(match args.estimator {
            EstimatorArg::Column(column) => {
                setup.estimator = column;
                let (m, picture) = go(setup, &mut simulate::Columns(column));
                (m, None, picture)
            }
            EstimatorArg::Carma => {
                let mut carma = simulate::Carma::new(trace, &jobs, &config.estimate)
                    .map_err(anyhow::Error::msg)?;
                let (m, mut picture) = go(setup, &mut carma);
                if let Some(p) = picture.as_mut() {
                    p.title = format!("{policy}, carma");
                }
                (m, Some(carma.quality()), picture)
            }
        })
    };
    let label = match args.estimator {
        EstimatorArg::Column(column) => column.to_string(),
        EstimatorArg::Carma => "carma".to_string(),
    };
    let print = |m: &Metrics, quality: Option<&Quality>| {
        print_run(&args, &trace_path, policy, &label, m, quality)
    };
    // One run of a trace column needs no more of the trace than what is
    // under way: read as it goes, unless it is out of order.
    if let (EstimatorArg::Column(column), None, None) = (args.estimator, &args.plot, args.replicas)
    {
        setup.estimator = column;
        let rows = simulate::trace::stream(&trace_path)?;
        match simulate::run_streamed(rows, &setup, &mut simulate::Columns(column)) {
            Ok(m) => return print(&m, None).map(|()| ExitCode::SUCCESS),
            Err(TraceError::Unsorted { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let trace = simulate::trace::load(&trace_path)?;
    if let Some(n) = args.replicas {
        let mut runs = Vec::new();
        for seed in 1..=n {
            let moved = simulate::trace::jittered(&trace, jitter_s, seed);
            let (m, _, _) = simulate(&mut setup, &moved)?;
            runs.push((m.total_time_s, m.oom_crashes));
        }
        let times: Vec<f64> = runs.iter().map(|r| r.0).collect();
        let mean = times.iter().sum::<f64>() / n as f64;
        let sd = (times.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        let crashes = runs.iter().map(|r| f64::from(r.1)).sum::<f64>() / n as f64;
        if args.json {
            let json = serde_json::json!({
                "replicas": n, "jitter_s": jitter_s, "total_time_s": times,
                "mean_total_time_s": mean, "sd_total_time_s": sd, "mean_oom_crashes": crashes,
            });
            println!("{json}");
        } else {
            println!(
                "trace {} on {} with {policy}, estimator {label}, {n} replicas with submissions moved by up to {} s:\n  \
                 total time        mean {mean:.1} s, sd {sd:.1} s, min {:.1} s, max {:.1} s\n  \
                 OOM crashes       mean {crashes:.2}",
                trace_path.display(),
                args.gpus,
                jitter_s,
                times.iter().copied().fold(f64::INFINITY, f64::min),
                times.iter().copied().fold(0.0, f64::max),
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (m, quality, picture) = simulate(&mut setup, &trace)?;
    if let (Some(dir), Some(picture)) = (&args.plot, &picture) {
        let mut runs = Vec::new();
        if let Some(other) = args.versus {
            let mut versus = setup.clone();
            versus.rules.placement.policy = other;
            runs.push(simulate(&mut versus, &trace)?.2.unwrap_or_default());
        }
        runs.push(picture.clone());
        // One time axis for both, so the panels compare at a glance.
        let span = runs.iter().map(|r| r.span).fold(0.0, f64::max);
        for run in &mut runs {
            run.span = span;
        }
        super::report::plot_into(dir, &runs.iter().collect::<Vec<_>>())?;
    }
    print(&m, quality.as_ref())?;
    Ok(ExitCode::SUCCESS)
}

/// The figures of one run, as JSON or for people.
fn print_run(
    args: &Args,
    trace_path: &Path,
    policy: Policy,
    label: &str,
    m: &Metrics,
    quality: Option<&Quality>,
) -> Result<()> {
    if args.json {
        let mut json = serde_json::to_value(m)?;
        if let (Some(q), Some(map)) = (quality, json.as_object_mut()) {
            map.insert("estimates".into(), serde_json::to_value(q)?);
        }
        println!("{json}");
    } else {
        println!(
            "trace {} on {} with {policy}, estimator {label}:",
            trace_path.display(),
            args.gpus,
        );
        println!("{m}");
        if let Some(q) = quality {
            println!(
                "  estimates         {} from job files ({} whole GPU), {} without a job file (unknown)\n  \
                 vs measured peak  mean overestimate {:.0} MiB, {} more than 2 GiB under",
                q.estimated,
                q.whole_gpu,
                q.without_job_file,
                q.mean_overestimate_mib,
                q.under_by_2gib
            );
        }
    }
    Ok(())
}
