//! The subcommands' bodies, kept out of `main.rs` so that it stays a list
//! of commands.

pub mod estimate;
pub mod train;
