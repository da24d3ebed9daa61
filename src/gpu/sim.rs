//! Simulated GPUs: memory and SM activity come from the `carma fake-train`
//! jobs that run on them. (To be implemented.)
