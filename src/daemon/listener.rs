//! The submission socket's listener ([`crate::spool::socket`]): accepts
//! connections and, on a thread of its own for each, reads the request,
//! checks it against who sent it (as the kernel says) and writes its jobs'
//! claims to disk ([`Spool::stage_handed`]); the loop gets only claims on
//! disk, to place and answer. So no connection's reads or flushes hold up
//! the loop or another connection.
//!
//! The reading threads are kept between connections: starting one for
//! each took a sixth of a millisecond of the submitter's wait. A connection
//! goes to a reader that waits for work or to a new one, never to one that
//! is busy, so no connection waits behind another's slow request.
//!
//! Anyone who may submit may connect, so nothing here trusts the other
//! end: a request is bounded in size ([`Request::read`]) and must arrive
//! within [`REQUEST_TIME`]; at most [`MAX_CONNECTIONS`] are read or wait
//! for the loop at once, and [`MAX_PER_USER`] of one user's, so no user
//! can take every place, or the daemon's memory, with connections that
//! never finish. A connection beyond those bounds is declined at once,
//! and its submitter takes the file path.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use super::Msg;
use crate::journal::{Hush, left_out};
use crate::lifecycle::JUNK_PER_MINUTE;
use crate::spool::socket::{Receipt, Reply, Request, RequestError};
use crate::spool::{Spool, SpoolError, Staged};

/// How long a connection may take to send its whole request.
const REQUEST_TIME: Duration = Duration::from_secs(10);

/// Connections read or waiting for the loop at once, in all and per user.
const MAX_CONNECTIONS: usize = 32;
const MAX_PER_USER: usize = 4;

/// The bytes of jobs held at once, read or waiting for the loop: however
/// many connections carry large summaries, the daemon holds at most this.
const MAX_BYTES_HELD: u64 = 64 << 20;

/// The bytes of one user's jobs held at once: room is taken for a whole
/// request before its jobs are read, so a user who declares large
/// requests and then sends nothing held 40 MiB of the 64 for the request
/// time, and with a second account all of it. One request's most fits.
const MAX_BYTES_PER_USER: u64 = 16 << 20;
const _: () = assert!(crate::spool::socket::MAX_REQUEST_BYTES <= MAX_BYTES_PER_USER);

/// Users whose every job the loop refuses until a moment, past the limit
/// on refused jobs ([`JUNK_PER_MINUTE`]): their requests are answered as
/// they are read, as the loop would answer them. Answered there, each
/// request's jobs (up to 10 MiB) were first written and flushed into the
/// spool by root and then thrown away, as often as the user liked.
#[derive(Debug, Clone, Default)]
pub struct Barred(Arc<Mutex<HashMap<u32, Instant>>>);

impl Barred {
    /// The loop refuses `uid`'s jobs until `until`.
    pub fn bar(&self, uid: u32, until: Instant) {
        let mut barred = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        barred.retain(|_, until| *until > now);
        barred.insert(uid, until);
    }

    /// Whether `uid`'s jobs are refused now.
    fn holds(&self, uid: u32) -> bool {
        let barred = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        barred
            .get(&uid)
            .is_some_and(|&until| until > Instant::now())
    }
}

/// Why a job of a user past the limit on refused jobs is not taken.
pub(super) fn junk_refusal() -> String {
    format!(
        "more than {JUNK_PER_MINUTE} of its owner's jobs were refused within a minute; \
         submit it again once it is over"
    )
}

/// A request's jobs, claimed on disk, on their way to the loop, which
/// places them and answers.
#[derive(Debug)]
pub struct Submission {
    /// Who sent it: the connected process's uid when it connected.
    pub peer: u32,
    /// Each job's claim, or why it has none.
    pub staged: Vec<Result<Staged, SpoolError>>,
    pub answer: Answer,
}

/// Where a request's answer goes: its connection, which holds its place
/// among the connections until answered.
#[derive(Debug)]
pub struct Answer {
    stream: UnixStream,
    _slot: Slot,
}

impl Submission {
    /// Places the claims in `pending/` without taking them in (the daemon
    /// is stopping: the next one does) and answers with their names.
    pub fn place(self, spool: &Spool) {
        let receipts = self
            .staged
            .into_iter()
            .map(|staged| match staged.and_then(|s| spool.place_staged(s)) {
                Ok(claimed) => Receipt {
                    name: Some(claimed.name.to_string()),
                    refused: None,
                },
                Err(e) => Receipt::not_taken(e),
            })
            .collect();
        self.answer.send(&Reply::Taken(receipts));
    }
}

impl Answer {
    /// Answers, and closes the connection.
    pub fn send(mut self, reply: &Reply) {
        reply.send(&mut self.stream);
    }
}

/// Connections now held, in all and per user, and their jobs' bytes; and
/// the refusals logged, held to a rate (a user who sends junk in a loop
/// would fill the journal's quota for the unit).
#[derive(Debug, Default)]
struct Held {
    all: usize,
    /// Each user's connections and bytes.
    by_user: HashMap<u32, (usize, u64)>,
    bytes: u64,
    hush: Hush,
}

/// One connection's place in [`Held`] (and the bytes it holds), given back
/// when dropped.
#[derive(Debug)]
struct Slot {
    held: Arc<Mutex<Held>>,
    uid: u32,
    bytes: u64,
}

impl Slot {
    /// A place for a connection of `uid`'s, if the bounds leave one.
    fn take(held: &Arc<Mutex<Held>>, uid: u32) -> Option<Slot> {
        let mut h = held.lock().unwrap_or_else(|e| e.into_inner());
        if h.all >= MAX_CONNECTIONS {
            return None;
        }
        let mine = h.by_user.entry(uid).or_default();
        if mine.0 >= MAX_PER_USER {
            return None;
        }
        mine.0 += 1;
        h.all += 1;
        Some(Slot {
            held: Arc::clone(held),
            uid,
            bytes: 0,
        })
    }

    /// Room for a request's `bytes`, if the bound leaves it.
    fn hold(&mut self, bytes: u64) -> Result<(), String> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if h.bytes + bytes > MAX_BYTES_HELD {
            return Err("the daemon holds too many submitted bytes now".into());
        }
        let mine = h.by_user.entry(self.uid).or_default();
        if mine.1 + bytes > MAX_BYTES_PER_USER {
            return Err(format!(
                "the daemon holds {} MiB of this user's submissions already; at most {} MiB \
                 at once",
                mine.1.div_ceil(1 << 20),
                MAX_BYTES_PER_USER >> 20
            ));
        }
        mine.1 += bytes;
        h.bytes += bytes;
        self.bytes += bytes;
        Ok(())
    }

    /// Whether a refusal of this connection's request may be logged now:
    /// `Some` with how many were left out before it ([`Hush`]).
    fn may_log_refusal(&self) -> Option<u64> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        h.hush
            .allow("refused submission", Some(self.uid), Instant::now())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        h.all -= 1;
        h.bytes -= self.bytes;
        if let Some(mine) = h.by_user.get_mut(&self.uid) {
            mine.0 -= 1;
            mine.1 -= self.bytes;
            if mine.0 == 0 {
                h.by_user.remove(&self.uid);
            }
        }
    }
}

/// Listens on `spool`'s socket (replacing what a daemon that died left
/// there) and sends the loop each request's claims. Anyone may connect to
/// a root daemon, as anyone may submit to it; only its own user to any
/// other.
pub fn listen(spool: Spool, tx: Sender<Msg>, barred: Barred) -> io::Result<()> {
    let path = &spool.socket_path();
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} is there and is not a socket", path.display()),
            ));
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path)?;
    let mode = match nix::unistd::geteuid().is_root() {
        true => 0o666,
        false => 0o600,
    };
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    let held = Arc::new(Mutex::new(Held::default()));
    let mut readers = Readers::new(spool, tx, barred);
    std::thread::Builder::new()
        .name("submissions".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(stream) => accept(stream, &held, &mut readers),
                    Err(e) => {
                        log::warn!("the submission socket: {e}");
                        // Out of descriptors, say: a moment for some to close.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
        })?;
    Ok(())
}

/// A connection to read: its stream, who sent it, and its place.
type Connection = (UnixStream, u32, Slot);

/// The threads that read requests, kept between connections. At most as
/// many are started as connections are held at once ([`MAX_CONNECTIONS`]).
struct Readers {
    spool: Spool,
    tx: Sender<Msg>,
    barred: Barred,
    /// Readers waiting for a connection that none has claimed yet, less
    /// the connections queued for readers on their way to wait. A
    /// connection claims one (and is queued for whichever reader takes it
    /// first), or starts a new reader: the readers waiting, and those on
    /// their way, always number at least the connections queued.
    idle: Arc<AtomicIsize>,
    /// Readers started, never more than [`MAX_CONNECTIONS`].
    started: usize,
    queue: Sender<Connection>,
    waiting: Arc<Mutex<Receiver<Connection>>>,
}

impl Readers {
    fn new(spool: Spool, tx: Sender<Msg>, barred: Barred) -> Readers {
        let (queue, waiting) = std::sync::mpsc::channel();
        Readers {
            spool,
            tx,
            barred,
            idle: Arc::new(AtomicIsize::new(0)),
            started: 0,
            queue,
            waiting: Arc::new(Mutex::new(waiting)),
        }
    }

    /// Has `connection` read by a waiting reader, or by a new one.
    fn read(&mut self, connection: Connection) {
        let claimed = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n - 1)
            })
            .is_ok();
        if !claimed && self.started >= MAX_CONNECTIONS {
            // Every reader started and none waiting, yet this connection
            // got a place: one reader has given its place back and is on
            // its way to wait (places are as many as readers). It takes
            // this connection; the count owes it until it arrives.
            self.idle.fetch_sub(1, Ordering::AcqRel);
        }
        if claimed || self.started >= MAX_CONNECTIONS {
            // The readers hold the other end until the daemon ends.
            let _ = self.queue.send(connection);
            return;
        }
        let (spool, tx, barred) = (self.spool.clone(), self.tx.clone(), self.barred.clone());
        let (idle, waiting) = (Arc::clone(&self.idle), Arc::clone(&self.waiting));
        let spawned = std::thread::Builder::new()
            .name("submission".into())
            .spawn(move || {
                let mut next = Some(connection);
                while let Some((stream, peer, slot)) = next {
                    take(stream, peer, slot, &spool, &tx, &barred);
                    idle.fetch_add(1, Ordering::AcqRel);
                    // The lock is held only to wait, which cannot panic and
                    // poison it.
                    let waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
                    next = waiting.recv().ok();
                }
            });
        match spawned {
            Ok(_) => self.started += 1,
            Err(e) => log::warn!("the submission socket: cannot start a thread ({e})"),
        }
    }
}

/// Gives a connection its place and a reader, or declines it.
fn accept(mut stream: UnixStream, held: &Arc<Mutex<Held>>, readers: &mut Readers) {
    let peer = match getsockopt(&stream, PeerCredentials) {
        Ok(creds) => creds.uid(),
        Err(e) => {
            log::warn!("the submission socket: cannot tell who connected ({e})");
            return;
        }
    };
    // Places are a person's: their subordinate ids are theirs.
    let Some(slot) = Slot::take(held, crate::accounts::accountable(peer)) else {
        log::debug!("uid {peer}'s submission declined: too many connections");
        Reply::Declined("the daemon has too many submissions in hand".into()).send(&mut stream);
        return;
    };
    readers.read((stream, peer, slot));
}

/// Reads one request whole, within [`REQUEST_TIME`], checks it, writes
/// its claims and hands them to the loop; a request that cannot be read,
/// passes no check or finds the disk failing is answered here.
fn take(
    mut stream: UnixStream,
    peer: u32,
    mut slot: Slot,
    spool: &Spool,
    tx: &Sender<Msg>,
    barred: &Barred,
) {
    // Buffered: a request comes in a few reads, not one per field (each
    // read also sets the socket's timeout).
    let mut timed = io::BufReader::with_capacity(
        16 << 10,
        Timed {
            stream: &stream,
            until: Instant::now() + REQUEST_TIME,
        },
    );
    let me = nix::unistd::geteuid().as_raw();
    let handed = Request::read(&mut timed, |bytes| slot.hold(bytes))
        .and_then(|request| request.check(peer, me).map_err(RequestError::Invalid));
    // The place is the user's: a subordinate id is barred with them.
    if let Ok(handed) = &handed
        && barred.holds(slot.uid)
    {
        let why = junk_refusal();
        Reply::Taken(vec![Receipt::not_taken(&why); handed.len()]).send(&mut stream);
        return;
    }
    let staged = handed.and_then(|handed| {
        spool.stage_handed(handed).map_err(|e| {
            log::error!("cannot take in uid {peer}'s submitted jobs: {e}");
            RequestError::Busy(format!("the daemon cannot take jobs in now: {e}"))
        })
    });
    match staged {
        Ok(staged) => {
            let submission = Submission {
                peer,
                staged,
                answer: Answer {
                    stream,
                    _slot: slot,
                },
            };
            // The loop is gone once the daemon stops: the claims are placed
            // here, for the next daemon to take in.
            if let Err(unsent) = tx.send(Msg::Submission(Box::new(submission)))
                && let Msg::Submission(submission) = unsent.0
            {
                submission.place(spool);
            }
        }
        Err(RequestError::Invalid(why)) => {
            if let Some(held) = slot.may_log_refusal() {
                log::warn!(
                    "a submission from uid {peer} refused: {why}{}",
                    left_out(held)
                );
            }
            Reply::Refused(why).send(&mut stream);
        }
        Err(RequestError::Busy(why)) => {
            log::debug!("uid {peer}'s submission declined: {why}");
            Reply::Declined(why).send(&mut stream);
        }
        Err(RequestError::Io(e)) => log::debug!("a submission from uid {peer} not read: {e}"),
    }
}

/// A stream whose reads all end by one deadline: a sender that trickles
/// its request a byte at a time still has only [`REQUEST_TIME`] in all.
struct Timed<'a> {
    stream: &'a UnixStream,
    until: Instant,
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the request took too long",
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_per_user_and_in_all_and_given_back() {
        let held = Arc::new(Mutex::new(Held::default()));
        let mine: Vec<Slot> = (0..MAX_PER_USER)
            .map(|_| Slot::take(&held, 1000).unwrap())
            .collect();
        assert!(Slot::take(&held, 1000).is_none(), "a fifth of one user's");
        let others: Vec<Slot> = (0..MAX_CONNECTIONS - MAX_PER_USER)
            .map(|i| Slot::take(&held, 2000 + i as u32).unwrap())
            .collect();
        assert!(Slot::take(&held, 9999).is_none(), "beyond all places");
        drop(mine);
        assert!(Slot::take(&held, 1000).is_some());
        drop(others);
        let h = held.lock().unwrap();
        assert_eq!((h.all, h.by_user.len()), (0, 0));
    }

    #[test]
    fn a_user_is_barred_until_the_moment_given_and_no_longer() {
        let barred = Barred::default();
        barred.bar(7, Instant::now() + Duration::from_secs(60));
        barred.bar(8, Instant::now());
        assert!(barred.holds(7));
        assert!(!barred.holds(8) && !barred.holds(9));
        barred.bar(9, Instant::now() + Duration::from_secs(60));
        assert_eq!(
            barred.0.lock().unwrap().len(),
            2,
            "8's bar is over, and gone"
        );
    }

    #[test]
    fn the_bytes_held_are_bounded_per_user_and_in_all_and_given_back() {
        const MIB: u64 = 1 << 20;
        let held = Arc::new(Mutex::new(Held::default()));
        let mut first = Slot::take(&held, 1).unwrap();
        let mut second = Slot::take(&held, 1).unwrap();
        first.hold(10 * MIB).unwrap();
        let why = second.hold(10 * MIB).unwrap_err();
        assert!(why.contains("10 MiB of this user's"), "{why}");
        second.hold(MAX_BYTES_PER_USER - 10 * MIB).unwrap();
        let mut others: Vec<Slot> = (2..5).map(|uid| Slot::take(&held, uid).unwrap()).collect();
        for slot in &mut others {
            slot.hold(MAX_BYTES_PER_USER).unwrap();
        }
        let mut last = Slot::take(&held, 5).unwrap();
        let why = last.hold(1).unwrap_err();
        assert!(why.contains("too many submitted bytes"), "{why}");
        drop(first);
        last.hold(10 * MIB).unwrap();
        drop((second, others, last));
        let h = held.lock().unwrap();
        assert_eq!((h.bytes, h.by_user.len()), (0, 0));
    }
}
