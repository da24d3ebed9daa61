//! `carma man [DIR]`: manual pages. carma(1) and one page per command are
//! generated from the clap definition that parses the command line, and
//! carma-rad(5) from the job-file parser's own key table, so neither can
//! fall behind what it documents.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Write carma.1 and a carma-COMMAND.1 for every command (with
    /// `--rad`, carma-rad.5) into this directory (`make install` does)
    /// instead of printing one page.
    dir: Option<PathBuf>,
    /// carma-rad(5), the job file format, instead of the commands' pages.
    #[arg(long)]
    rad: bool,
}

pub fn run(cli: clap::Command, args: Args) -> Result<ExitCode> {
    match (args.dir, args.rad) {
        (Some(dir), false) => clap_mangen::generate_to(cli, &dir)
            .with_context(|| format!("cannot write the manual pages into {}", dir.display()))?,
        (Some(dir), true) => {
            let page = dir.join("carma-rad.5");
            std::fs::write(&page, rad_page())
                .with_context(|| format!("cannot write {}", page.display()))?;
        }
        (None, true) => io::stdout()
            .write_all(rad_page().as_bytes())
            .context("cannot write the manual page")?,
        (None, false) => {
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

/// carma-rad(5): the job file format, one entry per key.
fn rad_page() -> String {
    let mut page = String::from(
        ".TH CARMA-RAD 5 \"\" \"carma\" \"File Formats\"\n\
         .SH NAME\n\
         carma-rad \\- carma job files\n\
         .SH SYNOPSIS\n\
         .nf\n\
         # a comment\n\
         name: train\n\
         model: resnet50_32.model\n\
         batch_size: 32\n\
         time: 2h\n\
         afterok: prep\n\
         python train.py --batch_size 32\n\
         .fi\n\
         .SH DESCRIPTION\n\
         A job file (\\fB.rad\\fR) is a bash script with \\fIkey\\fB:\\fR \\fIvalue\\fR \
         directives among its lines. Directives may come anywhere; every other line \
         is script, run in order by one \\fBbash\\fR as the file's owner, in the \
         file's directory, so the job's status is the script's (add \\fBset -e\\fR to \
         stop at the first failing line). On a directive line, \\fB#\\fR after \
         whitespace starts a comment. Unknown keys, bad values and a file without \
         script lines are refused with the line and column of the fault, and the \
         file is kept in \\fIfailed/\\fR with its reason. Sizes take binary units \
         (\\fB12G\\fR, \\fB12GiB\\fR, \\fB1500M\\fR; plain numbers are MiB).\n\
         .PP\n\
         The research prototype's positional syntax (one field per line) is read \
         as the prototype read it when a file has no directive at all.\n\
         .SH KEYS\n",
    );
    for key in carma::rad::reference() {
        page.push_str(&format!(
            ".TP\n\\fB{}:\\fR \\fI{}\\fR\n{}.",
            key.key,
            roff(key.value),
            roff(key.meaning)
        ));
        if !key.slurm.is_empty() {
            page.push_str(&format!(" Slurm: \\fB{}\\fR.", roff(key.slurm)));
        }
        page.push('\n');
    }
    page.push_str(
        ".SH ENVIRONMENT\n\
         The script runs with \\fBCARMA_TASK_ID\\fR, \\fBCARMA_JOB_NAME\\fR, \
         \\fBCARMA_RUN\\fR (1, then 2 after an out-of-memory crash, ...), \
         \\fBCARMA_GPUS\\fR and \\fBCUDA_VISIBLE_DEVICES\\fR (its GPUs), and for an \
         array element \\fBCARMA_ARRAY_JOB_ID\\fR and \\fBCARMA_ARRAY_INDEX\\fR.\n\
         .SH SEE ALSO\n\
         \\fBcarma\\fR(1), \\fBcarma-submit\\fR(1), \\fBcarma-check\\fR(1)\n",
    );
    page
}

/// `text` with what roff reads as markup escaped; backquoted words bold.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    let mut out = String::new();
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str(&format!("\\fB{part}\\fR"));
        } else {
            out.push_str(part);
        }
    }
    out.replace("\n.", "\n\\&.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rad_page_documents_every_key_the_parser_knows() {
        let page = rad_page();
        for key in carma::rad::reference() {
            assert!(
                page.contains(&format!("\\fB{}:\\fR", key.key)),
                "{}",
                key.key
            );
        }
        assert!(page.starts_with(".TH CARMA-RAD 5"));
    }
}
