//! `carma completions SHELL`: the shell's completion script, generated
//! from the same clap definition that parses the command line, so it
//! knows every subcommand and option of this build.

use std::io;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap_complete::Shell;

#[derive(clap::Args)]
pub struct Args {
    /// The shell to complete for.
    shell: Shell,
}

pub fn run(mut cli: clap::Command, args: Args) -> Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cli, "carma", &mut script);
    io::Write::write_all(&mut io::stdout(), &script)
        .context("cannot write the completion script")?;
    Ok(ExitCode::SUCCESS)
}
