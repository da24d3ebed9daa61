//! The sockets: one thread accepts, a fixed few answer, and every
//! connection is bounded in size, time and number.
//!
//! - Number: at most [`WORKERS`] connections are answered at once and
//!   [`QUEUED`] more wait, at most [`PER_PEER`] of them one peer's (a
//!   local user, known by the socket's owner as the kernel tells it, or a
//!   remote address: [`super::peer`]); past that a connection is told
//!   "busy" (503) with one write that cannot block, and closed unread. So
//!   one user who opens connections and sends nothing holds two workers,
//!   not the page.
//! - Size: a request head (request line and headers) larger than
//!   [`HEAD_BYTES`] is answered 431 and closed; a body is never read.
//! - Time: the head must arrive within [`READ_TIME`] of the connection's
//!   acceptance (408 otherwise), the answer must be taken within
//!   [`WRITE_TIME`]; each read and write waits at most what is left of its
//!   deadline, so a client sending or reading a byte at a time is cut off
//!   at the deadline.
//!
//! One request per connection (`Connection: close`): keeping connections
//! alive would let a few idle clients hold every worker.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::Board;
use super::peer::{Peer, peer_of};
use super::routes::{self, Response};

/// Threads answering requests.
const WORKERS: usize = 8;
/// Connections accepted and waiting for a worker.
const QUEUED: usize = 16;
/// Connections of one peer answered or waiting at once.
const PER_PEER: usize = 2;
/// Largest request head, bytes.
const HEAD_BYTES: usize = 8 * 1024;
/// Most headers in a request.
const HEADERS: usize = 64;
/// Time for a client to send its request head, and to take the answer.
const READ_TIME: Duration = Duration::from_secs(3);
const WRITE_TIME: Duration = Duration::from_secs(10);
/// Bytes of an unread request body drained after the answer (so closing
/// does not reset the connection before the client reads the answer), and
/// the time given to it.
const DRAIN_BYTES: usize = 64 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(1);
/// Pause after `accept` fails (no file descriptors left): the failure is
/// not spun on.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Connections in flight per peer.
type InFlight = Arc<Mutex<HashMap<Peer, usize>>>;

/// An accepted connection, on its way to a worker.
struct Accepted {
    stream: TcpStream,
    at: Instant,
    peer: Peer,
}

/// Starts the accepting thread and the workers on `listener`.
pub fn spawn(listener: TcpListener, board: Arc<Board>, hosts: Arc<[String]>) -> io::Result<()> {
    let (tx, rx) = mpsc::sync_channel::<Accepted>(QUEUED);
    let rx = Arc::new(Mutex::new(rx));
    let in_flight = InFlight::default();
    for i in 0..WORKERS {
        let rx = Arc::clone(&rx);
        let board = Arc::clone(&board);
        let in_flight = Arc::clone(&in_flight);
        let hosts = Arc::clone(&hosts);
        std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || work(&rx, &board, &in_flight, &hosts))?;
    }
    std::thread::Builder::new()
        .name("http-accept".into())
        .spawn(move || accept(&listener, &tx, &in_flight))?;
    Ok(())
}

fn accept(listener: &TcpListener, tx: &SyncSender<Accepted>, in_flight: &InFlight) {
    let mut failing = false;
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                failing = false;
                let peer = peer_of(&stream);
                let taken = {
                    let mut counts = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
                    let count = counts.entry(peer).or_default();
                    *count += 1;
                    *count <= PER_PEER
                };
                if !taken {
                    release(in_flight, peer);
                    busy(stream);
                    continue;
                }
                let accepted = Accepted {
                    stream,
                    at: Instant::now(),
                    peer,
                };
                match tx.try_send(accepted) {
                    Ok(()) => {}
                    Err(TrySendError::Full(accepted)) => {
                        release(in_flight, peer);
                        busy(accepted.stream);
                    }
                    Err(TrySendError::Disconnected(_)) => return,
                }
            }
            Err(e) => {
                if !failing {
                    log::warn!("http: cannot accept a connection: {e}");
                    failing = true;
                }
                std::thread::sleep(ACCEPT_PAUSE);
            }
        }
    }
}

fn release(in_flight: &InFlight, peer: Peer) {
    let mut counts = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(count) = counts.get_mut(&peer) {
        *count -= 1;
        if *count == 0 {
            counts.remove(&peer);
        }
    }
}

/// Tells a connection there is no room, without waiting on it.
fn busy(mut stream: TcpStream) {
    if stream.set_nonblocking(true).is_ok() {
        let answer = Response::error(503, "Too many connections; try again shortly.");
        let _ = stream.write(&wire(&answer, false));
    }
}

fn work(rx: &Mutex<Receiver<Accepted>>, board: &Board, in_flight: &InFlight, hosts: &[String]) {
    loop {
        let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match next {
            Ok(accepted) => {
                let peer = accepted.peer;
                answer(accepted, board, hosts);
                release(in_flight, peer);
            }
            Err(_) => return,
        }
    }
}

/// Reads one request from `stream`, answers it and closes the connection.
fn answer(accepted: Accepted, board: &Board, hosts: &[String]) {
    let mut stream = accepted.stream;
    let _ = stream.set_nodelay(true);
    let read_by = accepted.at + READ_TIME;
    let (response, head_only) = match read_head(&mut stream, read_by) {
        Ok(Some(request))
            if !request
                .host
                .as_deref()
                .is_none_or(|host| host_allowed(host, hosts)) =>
        {
            (
                Response::error(
                    421,
                    "This server answers requests for its IP address, localhost, its host name \
                     or the names in http.hosts.",
                ),
                false,
            )
        }
        Ok(Some(request)) => (
            routes::respond(&request.method, &request.target, board),
            request.method == "HEAD",
        ),
        Ok(None) => return,
        Err(status) => (
            Response::error(status, routes::reason_phrase(status)),
            false,
        ),
    };
    let bytes = wire(&response, head_only);
    let write_by = Instant::now() + WRITE_TIME;
    if write_within(&mut stream, &bytes, write_by).is_ok() {
        let _ = stream.shutdown(Shutdown::Write);
        drain(&mut stream, write_by.min(Instant::now() + DRAIN_TIME));
    }
}

/// A request's method, target and `Host`.
#[derive(Debug, PartialEq)]
struct Request {
    method: String,
    target: String,
    host: Option<String>,
}

/// Whether a request for `host` (its `Host` header) is answered: an IP
/// address, `localhost`, or this machine's name, with any port. A web page
/// whose own name an attacker points at 127.0.0.1 (DNS rebinding) would
/// otherwise read the status through an administrator's browser and SSH
/// tunnel; its requests carry that name. Proxies send the upstream's
/// address by default (nginx's `$proxy_host`); other names a proxy
/// forwards are listed in `http.hosts`.
fn host_allowed(host: &str, hosts: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]:9184`
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok()
        || hosts
            .iter()
            .any(|h| h.trim_end_matches('.').eq_ignore_ascii_case(&name))
        || name == "localhost"
        || name.ends_with(".localhost")
        || nix::unistd::gethostname()
            .ok()
            .and_then(|own| own.into_string().ok())
            .is_some_and(|own| {
                // Its short name or a longer one (`gpu01`, `gpu01.example.org`),
                // whichever the machine calls itself.
                let own = own.to_ascii_lowercase();
                name.split('.').next() == own.split('.').next()
            })
}

/// Reads a request head by `deadline`: `None` when the client left
/// before sending one, the status to answer when it is refused.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Option<Request>, u16> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(408u16)?;
        stream.set_read_timeout(Some(left)).map_err(|_| 500u16)?;
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(408);
            }
            Err(_) => return Ok(None),
        };
        buf.extend_from_slice(&chunk[..n]);
        match parse_head(&buf) {
            Parsed::Complete(request) => return Ok(Some(request)),
            Parsed::Partial if buf.len() >= HEAD_BYTES => return Err(431),
            Parsed::Partial => {}
            Parsed::Refused(status) => return Err(status),
        }
    }
}

/// What the bytes of a request head so far come to.
#[derive(Debug, PartialEq)]
enum Parsed {
    Complete(Request),
    Partial,
    Refused(u16),
}

fn parse_head(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(_)) => match (request.method, request.path) {
            (Some(method), Some(target)) => Parsed::Complete(Request {
                method: method.to_owned(),
                target: target.to_owned(),
                host: request
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case("host"))
                    .map(|h| String::from_utf8_lossy(h.value).trim().to_owned()),
            }),
            _ => Parsed::Refused(400),
        },
        Ok(httparse::Status::Partial) if buf.len() > HEAD_BYTES => Parsed::Refused(431),
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => Parsed::Refused(431),
        Err(_) => Parsed::Refused(400),
    }
}

/// `response` as sent: its status line, headers and (unless `head_only`)
/// its body.
fn wire(response: &Response, head_only: bool) -> Vec<u8> {
    let length = response.body.len();
    let allow = match response.status {
        405 => "Allow: GET, HEAD\r\n",
        _ => "",
    };
    let mut bytes = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {length}\r\n{allow}\
         Connection: close\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
         Referrer-Policy: no-referrer\r\nContent-Security-Policy: default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'\r\n\r\n",
        response.status,
        routes::reason_phrase(response.status),
        response.content_type,
    )
    .into_bytes();
    if !head_only {
        bytes.extend_from_slice(response.body.as_bytes());
    }
    bytes
}

/// Writes all of `bytes` by `deadline`, or gives up.
fn write_within(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads and discards what the client still sends (a body nobody asked
/// for), a bounded amount by `deadline`, so that closing the connection
/// does not reset it under the answer.
fn drain(stream: &mut TcpStream, deadline: Instant) {
    let mut chunk = [0u8; 4096];
    let mut read = 0;
    while read < DRAIN_BYTES {
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return;
        };
        if stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use std::os::unix::process::CommandExt;

    /// A server on a free loopback port; its address.
    fn server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let board = Arc::new(Board::new(Arc::new(Metrics::default())));
        spawn(listener, board, Arc::from([])).unwrap();
        addr
    }

    /// Sends `request` and returns the whole answer.
    fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        // The server may answer (and close) before all of a refused
        // request is sent.
        let _ = stream.write_all(request);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[test]
    fn get_is_answered_and_post_is_refused_with_405() {
        let addr = server();
        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Connection: close") && ok.ends_with("# EOF\n"));
        let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"));
        let post = exchange(addr, b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        assert!(post.contains("Allow: GET, HEAD\r\n"));
        let missing = exchange(addr, b"GET /nothing HTTP/1.0\r\n\r\n");
        assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
    }

    #[test]
    fn a_request_head_past_the_bound_is_refused_unread() {
        let addr = server();
        let mut huge = b"GET / HTTP/1.1\r\nX-Junk: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 4 * HEAD_BYTES));
        let answer = exchange(addr, &huge);
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        let long_url = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(2 * HEAD_BYTES));
        let answer = exchange(addr, long_url.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        let garbage = exchange(addr, b"\x16\x03\x01 hello\r\n\r\n");
        assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");
    }

    #[test]
    fn a_user_whose_clients_send_nothing_holds_two_connections_not_the_page() {
        let addr = server();
        // Clients that say nothing, one after another, until one is told
        // at once that there is no room: one user holds at most
        // [`PER_PEER`] (fewer where a worker let one go meanwhile).
        let mut held = Vec::new();
        loop {
            let mut client = TcpStream::connect(addr).unwrap();
            client
                .set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut answer = [0u8; 64];
            match client.read(&mut answer) {
                Ok(n) if n > 0 => {
                    let answer = String::from_utf8_lossy(&answer[..n]);
                    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
                    break;
                }
                _ => held.push(client),
            }
            assert!(held.len() <= PER_PEER, "{} held", held.len());
        }
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        // Another user is answered meanwhile (bash's /dev/tcp, as nobody).
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{}; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; \
                 head -c 15 <&3",
                addr.port()
            ))
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "HTTP/1.1 200 OK");
        drop(held);
    }

    #[test]
    fn only_requests_for_an_address_localhost_or_this_machine_are_answered() {
        for host in [
            "127.0.0.1:9184",
            "[::1]:9184",
            "localhost:9184",
            "LOCALHOST",
            "10.0.0.7",
        ] {
            assert!(host_allowed(host, &[]), "{host}");
        }
        let own = nix::unistd::gethostname().unwrap().into_string().unwrap();
        assert!(host_allowed(&format!("{own}:9184"), &[]));
        let short = own.split('.').next().unwrap();
        assert!(host_allowed(&format!("{short}.example.org:9184"), &[]));
        let listed = ["status.example.org".to_string()];
        assert!(host_allowed("Status.Example.org:443", &listed));
        assert!(!host_allowed("status.example.org", &[]));
        for host in [
            "evil.example",
            "evil.example:9184",
            "localhost.evil.example",
        ] {
            assert!(!host_allowed(host, &[]), "{host}");
        }
        let addr = server();
        let rebound = exchange(
            addr,
            b"GET /api/status HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        );
        assert!(rebound.starts_with("HTTP/1.1 421 "), "{rebound}");
        let bare = exchange(addr, b"GET /metrics HTTP/1.0\r\n\r\n");
        assert!(bare.starts_with("HTTP/1.1 200 "), "{bare}");
    }

    #[test]
    fn heads_are_read_whole_or_refused() {
        let complete = parse_head(b"GET /task/000001-a?x=1 HTTP/1.1\r\nHost: h\r\n\r\n");
        assert_eq!(
            complete,
            Parsed::Complete(Request {
                method: "GET".into(),
                target: "/task/000001-a?x=1".into(),
                host: Some("h".into()),
            })
        );
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nHost:"), Parsed::Partial);
        let many: String = (0..HEADERS + 1).map(|i| format!("H{i}: v\r\n")).collect();
        assert_eq!(
            parse_head(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            Parsed::Refused(431)
        );
        assert_eq!(parse_head(b"GET / HTTP/9\r\n\r\n"), Parsed::Refused(400));
    }
}
