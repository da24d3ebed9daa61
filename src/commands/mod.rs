//! One module per `carma` subcommand.

pub mod check;
pub mod simulate;
