//! `carma simulate`: the scheduling core driven through a trace in virtual
//! time, against a model of GPUs, memory and interference.

mod model;

pub use model::{Model, Sharing};
