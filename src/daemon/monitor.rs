//! The GPU monitor: a thread that reads the backend every sample interval,
//! so slow or hanging driver calls never stall the event loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

use crate::gpu::GpuBackend;

use super::Msg;

/// Starts sampling `backend` every `interval_ms` (changeable while it
/// runs); stops when the daemon's channel is gone.
pub fn spawn(mut backend: Box<dyn GpuBackend>, interval_ms: Arc<AtomicU64>, tx: Sender<Msg>) {
    std::thread::Builder::new()
        .name("gpu-monitor".into())
        .spawn(move || {
            loop {
                std::thread::sleep(Duration::from_millis(interval_ms.load(Ordering::Relaxed)));
                if tx.send(Msg::Readings(backend.sample())).is_err() {
                    return;
                }
            }
        })
        .map(drop)
        .unwrap_or_else(|e| log::error!("cannot start the GPU monitor thread: {e}"));
}
