//! Subcommand arguments that clap builds only for the subcommand given.
//!
//! clap's derive builds every subcommand's arguments (help texts, value
//! parsers, groups) before it parses anything: for `carma submit`, a user's
//! most frequent command, that was a third of its own code's time, spent
//! on `simulate`, `slurm` and `train`. [`Deferred`] hands the building to
//! [`clap::Command::defer`], which runs it when the parser enters that
//! subcommand, or when help, completions or manual pages need every one.

use clap::{ArgMatches, Args, Command, Error, FromArgMatches};

/// `T`'s arguments, built on demand; reads as `T` once parsed.
pub struct Deferred<T>(pub T);

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches_mut(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: Command) -> Command {
        cmd.defer(|cmd| keeping_about(cmd, T::augment_args))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        cmd.defer(|cmd| keeping_about(cmd, T::augment_args_for_update))
    }

    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }
}

/// Adds the arguments, keeping the subcommand's own description: clap sets
/// it from the variant's doc comment once `augment` has run, and an
/// argument struct's (a flattened one's included) would replace it when
/// the arguments come later.
fn keeping_about(cmd: Command, augment: fn(Command) -> Command) -> Command {
    let about = cmd.get_about().cloned();
    let long_about = cmd.get_long_about().cloned();
    let mut cmd = augment(cmd);
    if let Some(about) = about {
        cmd = cmd.about(about);
    }
    if let Some(long_about) = long_about {
        cmd = cmd.long_about(long_about);
    }
    cmd
}
