//! One module per `carma` subcommand.

pub mod check;
pub mod fake_train;
pub mod simulate;
