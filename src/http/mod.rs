//! `carma daemon --http ADDR`: a read-only status page a person can leave
//! open, the same as JSON, and Prometheus metrics.
//!
//! # Theory of operation
//!
//! The daemon's loop must never wait on a browser. It does not serve
//! anything itself: each time it writes `status.json` it hands this module
//! an immutable snapshot ([`Published`]) through a [`Feed`], which swaps
//! one pointer under a lock held for nothing else; counters and histograms
//! it bumps as events happen ([`crate::metrics`]) are atomic adds. Every
//! request is answered from the latest snapshot by threads of this module
//! (`server`): a fixed few workers, each connection bounded in size
//! (its request head), time (a deadline for reading it and one for writing
//! the answer) and number (a full queue is answered "busy" without being
//! read). A slow or hostile client can only hold a worker until its
//! deadline, never the loop, and never more threads or memory than these
//! bounds.
//!
//! What it shows is what `carma status` shows every user of the machine,
//! nothing of any job's text, output, environment or files: it reads no
//! file at all, and a URL names a task only after it passed the spool's
//! name grammar ([`crate::spool::TaskName::parse`]), to be looked up in
//! the snapshot. Every string from a user (task, job and user names,
//! reasons) is escaped where it enters the page (`page`).
//!
//! It answers GET and HEAD only: `/` (the page), `/task/NAME`,
//! `/api/status` and `/metrics`.

mod chart;
mod config;
mod page;
mod peer;
mod routes;
mod server;
mod view;

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, PoisonError};

pub use chart::History;
pub use config::HttpConfig;
pub use view::RECENT_FAILURES;

use crate::lifecycle::Ending;
use crate::metrics::Metrics;
use crate::spool::status::Status;

/// What the daemon knew at one status write: everything a request is
/// answered from. Never changed once published.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// The status as written to `status.json`.
    pub status: Status,
    /// Tasks that ended lately (see [`crate::lifecycle::Endings`]).
    pub endings: Arc<VecDeque<Ending>>,
    /// GPU memory and SM activity over the last hour.
    pub history: Arc<History>,
    /// Tasks in `done/` and `failed/`.
    pub done: usize,
    pub failed: usize,
    /// The latest failures, newest first, whether or not they ended
    /// while this daemon ran (those are in `endings`, with their reasons).
    pub latest_failed: Vec<crate::spool::TaskName>,
    /// Entries in `pending/` seen but not yet taken in.
    pub backlog: usize,
    /// Counts publications: the page is drawn once per snapshot.
    pub generation: u64,
}

/// Where the daemon leaves its snapshots and the server takes them.
#[derive(Debug)]
pub struct Board {
    latest: Mutex<Arc<Published>>,
    metrics: Arc<Metrics>,
    /// The status page as last drawn, for the snapshot it was drawn from:
    /// a flood of requests costs the drawing once a second, not once each.
    page: Mutex<Option<routes::Drawn>>,
    /// `/api/status` as last written, and the snapshot's generation.
    json: Mutex<Option<(u64, Arc<str>)>>,
}

impl Board {
    pub fn new(metrics: Arc<Metrics>) -> Board {
        Board {
            latest: Mutex::new(Arc::default()),
            metrics,
            page: Mutex::new(None),
            json: Mutex::new(None),
        }
    }

    /// Replaces the snapshot. The lock is held for the swap alone, and the
    /// old snapshot is let go after it.
    fn publish(&self, published: Published) {
        let new = Arc::new(published);
        let old = {
            let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *latest, new)
        };
        drop(old);
    }

    /// The latest snapshot.
    fn latest(&self) -> Arc<Published> {
        Arc::clone(&self.latest.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The daemon's side: what it publishes through, and the GPU history it
/// keeps between snapshots.
#[derive(Debug)]
pub struct Feed {
    board: Arc<Board>,
    history: Arc<History>,
    generation: u64,
}

impl Feed {
    /// Publishes `published` (its history and generation are the feed's).
    pub fn publish(&mut self, mut published: Published) {
        if self.history.due(published.status.updated_at) {
            Arc::make_mut(&mut self.history).record(&published.status);
        }
        self.generation += 1;
        published.history = Arc::clone(&self.history);
        published.generation = self.generation;
        self.board.publish(published);
    }
}

/// Starts serving on `addr` with `metrics`, for requests naming an IP
/// address, `localhost`, this machine or one of `hosts`; returns the feed
/// to publish through and the address bound (port 0 picks a free port).
/// Serving continues for as long as the process runs.
pub fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    hosts: Vec<String>,
) -> std::io::Result<(Feed, SocketAddr)> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    let board = Arc::new(Board::new(metrics));
    server::spawn(listener, Arc::clone(&board), hosts.into())?;
    let feed = Feed {
        board,
        history: Arc::default(),
        generation: 0,
    };
    Ok((feed, bound))
}
