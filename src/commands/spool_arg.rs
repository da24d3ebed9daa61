//! The `--spool` option shared by every command that works on a spool.

use std::path::PathBuf;

use carma::config::Config;
use carma::spool::Spool;

/// Which spool to use.
#[derive(clap::Args, Debug)]
pub struct SpoolArg {
    /// Spool directory [default: $CARMA_SPOOL, else daemon.spool of the
    /// configuration, /var/spool/carma].
    #[arg(long, env = "CARMA_SPOOL")]
    pub spool: Option<PathBuf>,
}

impl SpoolArg {
    /// The spool named on the command line, in the environment, or in the
    /// configuration.
    pub fn resolve(&self, config: &Config) -> Spool {
        Spool::new(
            self.spool
                .clone()
                .unwrap_or_else(|| config.daemon.spool.clone()),
        )
    }
}
