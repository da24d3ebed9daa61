//! `carma daemon`: serve a spool.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};

use carma::config::Config;
use carma::daemon::{self, Options};
use carma::gpu::GpuBackend;
use carma::gpu::nvml::{NvmlGpus, OpenError};
use carma::gpu::sim::SimGpus;

use super::spool_arg::SpoolArg;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    spool: SpoolArg,
    /// Run on simulated GPUs instead of NVML, e.g. 4x40GiB: memory and SM
    /// activity then come from `carma fake-train` jobs. A GPU partitioned
    /// into MIG instances: 1x40GiB:mig=3g.20gb+2g.10gb+1g.5gb (`mig=`
    /// alone: MIG on, no instances).
    #[arg(long, value_name = "SPEC")]
    simulate_gpus: Option<String>,
    /// The NVML library to read real GPUs through [default: gpu.nvml_library
    /// of the configuration, else the driver's libnvidia-ml.so.1].
    #[arg(long, value_name = "PATH", env = "CARMA_NVML_LIB")]
    nvml_lib: Option<PathBuf>,
    /// Serve a read-only status page (/), each task's public view
    /// (/task/NAME), the same as JSON (/api/status) and Prometheus metrics
    /// (/metrics) at this IP address and port, e.g. 127.0.0.1:9184 (port 0
    /// picks a free one, which the log names) [default: http.listen of the
    /// configuration, else none]. Anyone who reaches it sees the queue.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
}

/// The exit status of a daemon that has no GPUs to serve: sysexits.h's
/// `EX_CONFIG`. A missing library, an unloaded driver or a server without
/// GPUs is the machine's configuration, which no restart repairs, so the
/// unit names this status in `RestartPreventExitStatus=` and systemd does
/// not start the daemon again every few seconds.
pub const EXIT_NO_GPUS: u8 = 78;

/// What `carma daemon --help` and carma-daemon(1) say about exit statuses.
pub const EXIT_STATUS: &str = "Exit status: 0 when stopped by SIGTERM or SIGINT (running jobs \
    go on); 78 (EX_CONFIG) when there are no GPUs to serve: NVML cannot be loaded, the driver \
    is not loaded or finds no GPUs (systemd does not restart it); 1 on any other error.";

/// NVML could not be started and no simulated GPUs were asked for.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0}; on a machine without NVIDIA GPUs, run \
     `carma daemon --simulate-gpus 4x40GiB` to use simulated GPUs"
)]
pub struct NoNvml(OpenError);

pub fn run(config_path: Option<&Path>, args: Args) -> Result<ExitCode> {
    let config = Config::load(config_path)?;
    let spool = args.spool.resolve(&config);
    spool.create()?;
    let http = match args.http {
        Some(addr) => Some(addr),
        None => config.http.address().map_err(anyhow::Error::msg)?,
    };
    let backend: Box<dyn GpuBackend> = match &args.simulate_gpus {
        Some(spec) => {
            let declared = carma::gpu::sim::spec::parse(spec).map_err(|e| {
                anyhow::anyhow!("--simulate-gpus {spec}: column {}: {}", e.column, e.message)
            })?;
            Box::new(
                SimGpus::open(spool.root(), &declared, config.simulate.power())
                    .context("cannot set up the simulated GPUs")?,
            )
        }
        None => {
            let library = config.gpu.nvml_library(args.nvml_lib);
            let interval = config.daemon.sample_interval_s.duration();
            Box::new(NvmlGpus::open(library.as_deref(), &config.gpu, interval).map_err(NoNvml)?)
        }
    };
    daemon::run(Options {
        spool: PathBuf::from(spool.root()),
        config,
        config_path: config_path.map(Path::to_owned),
        backend,
        http,
    })?;
    Ok(ExitCode::SUCCESS)
}
