//! `carma simulate`: the scheduling core driven through a trace in virtual
//! time, against a model of GPUs, memory and interference. Answers "what
//! would policy P do on trace X" in milliseconds, with no GPU.

mod engine;
mod estimates;
mod metrics;
mod model;
pub mod paper;
mod readings;
pub mod trace;

pub use engine::{Setup, run, run_pictured, run_streamed, run_with};
pub use estimates::{Carma, Columns, Estimates, Quality};
pub use metrics::{Metrics, TaskTimes, lower_bound};
pub use model::{Model, Sharing};
pub use readings::Readings;

#[cfg(test)]
mod tests;
