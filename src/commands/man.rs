//! `carma man [DIR]`: manual pages generated from the clap definition that
//! parses the command line, so they cannot fall behind it.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Write carma.1 and a carma-COMMAND.1 for every command into this
    /// directory (`make install` does) instead of printing carma(1).
    dir: Option<PathBuf>,
}

pub fn run(cli: clap::Command, args: Args) -> Result<ExitCode> {
    match args.dir {
        Some(dir) => clap_mangen::generate_to(cli, &dir)
            .with_context(|| format!("cannot write the manual pages into {}", dir.display()))?,
        None => {
            let mut page = Vec::new();
            // As generate_to does: `help` has no page of its own.
            clap_mangen::Man::new(cli.disable_help_subcommand(true)).render(&mut page)?;
            io::stdout()
                .write_all(&page)
                .context("cannot write the manual page")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
