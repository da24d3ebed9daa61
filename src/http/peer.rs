//! Who a connection to the status page is, for its per-peer bound: on
//! this machine, the user whose socket it is; elsewhere, its address.
//!
//! Every local user connects from a loopback address, and may bind any of
//! `127.0.0.0/8`'s sixteen million, as an IPv4 socket or a v4-mapped IPv6
//! one: counted by address, one user held every place. The kernel is asked
//! for the one socket with the connection's addresses (`sock_diag`, as
//! `ss` does): an exact lookup, where reading `/proc/net/tcp` cost the
//! accepting thread a pass over every TCP socket of the machine at each
//! connection (a user who opens a few hundred thousand sockets made it
//! seconds). A local connection whose socket is not found (the kernel
//! without `tcp_diag`, a client already gone) counts as one and the same
//! unknown local user. A remote IPv6 peer counts by its /64, the block a
//! single host is given.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::libc;

/// Who a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Peer {
    /// A local user (their subordinate ids count as them).
    User(u32),
    /// A local connection whose socket's owner could not be found.
    Local,
    /// A remote address: an IPv4 address, or an IPv6 /64.
    Address(IpAddr),
}

/// The peer of `stream`.
pub(super) fn peer_of(stream: &TcpStream) -> Peer {
    let (Ok(mut remote), Ok(mut local)) = (stream.peer_addr(), stream.local_addr()) else {
        return Peer::Local;
    };
    remote.set_ip(remote.ip().to_canonical());
    local.set_ip(local.ip().to_canonical());
    if !(remote.ip().is_loopback() || remote.ip() == local.ip()) {
        return Peer::Address(block(remote.ip()));
    }
    match socket_owner(remote, local) {
        Ok(Some(uid)) => Peer::User(crate::accounts::accountable(uid)),
        _ => Peer::Local,
    }
}

/// What a remote address counts as: itself (IPv4), or its /64 (IPv6),
/// where a host may take any of 2^64 addresses.
fn block(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(ip) => IpAddr::V6(Ipv6Addr::from_bits(ip.to_bits() & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

/// `SOCK_DIAG_BY_FAMILY` (`linux/sock_diag.h`).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `INET_DIAG_NOCOOKIE`: any socket with the addresses.
const NO_COOKIE: u32 = !0;
/// `struct nlmsghdr`, then `struct inet_diag_req_v2`.
const HEADER: usize = 16;
const REQUEST: usize = HEADER + 8 + 48;
/// Where `idiag_uid` is in a `struct inet_diag_msg`: after the family,
/// state, timer and retransmits, the 48-byte socket id, the expiry and
/// both queues.
const UID_AT: usize = 4 + 48 + 12;

/// The uid of this machine's TCP socket bound to `from` and connected to
/// `to`, asked of the kernel by those four values: `None` where there is
/// none.
fn socket_owner(from: SocketAddr, to: SocketAddr) -> io::Result<Option<u32>> {
    // SAFETY: a plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, and owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // Both addresses as IPv4 where both are (a v4-mapped IPv6 socket is
    // found by them too), else as IPv6.
    let family = match (from.ip(), to.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET,
        _ => libc::AF_INET6,
    };
    let request = diag_request(family as u8, from, to);
    // SAFETY: sends a buffer of ours to the kernel (its address is the
    // netlink default, the kernel).
    if unsafe {
        libc::send(
            socket.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    // The answer is a message with the socket, or an error (ENOENT: none).
    // The kernel answers before `send` returns, so a read that would wait
    // has nothing to wait for.
    let mut answer = [0u8; 512];
    // SAFETY: receives into a buffer of ours, without waiting.
    let got = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            answer.as_mut_ptr().cast(),
            answer.len(),
            libc::MSG_DONTWAIT,
        )
    };
    let got = usize::try_from(got).map_err(|_| io::Error::last_os_error())?;
    Ok(owner_in(&answer[..got]))
}

/// A `SOCK_DIAG_BY_FAMILY` request for the one TCP socket bound to `from`
/// and connected to `to`.
fn diag_request(family: u8, from: SocketAddr, to: SocketAddr) -> [u8; REQUEST] {
    let mut m = [0u8; REQUEST];
    m[0..4].copy_from_slice(&(REQUEST as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    m[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, extensions, pad, states (all).
    m[16] = family;
    m[17] = libc::IPPROTO_TCP as u8;
    m[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: ports and addresses in network order.
    m[24..26].copy_from_slice(&from.port().to_be_bytes());
    m[26..28].copy_from_slice(&to.port().to_be_bytes());
    let octets = |ip: IpAddr| -> [u8; 16] {
        match (family as i32, ip) {
            (libc::AF_INET, IpAddr::V4(v4)) => {
                let mut o = [0u8; 16];
                o[..4].copy_from_slice(&v4.octets());
                o
            }
            (_, IpAddr::V4(v4)) => v4.to_ipv6_mapped().octets(),
            (_, IpAddr::V6(v6)) => v6.octets(),
        }
    };
    m[28..44].copy_from_slice(&octets(from.ip()));
    m[44..60].copy_from_slice(&octets(to.ip()));
    // Any interface; no cookie.
    m[64..68].copy_from_slice(&NO_COOKIE.to_ne_bytes());
    m[68..72].copy_from_slice(&NO_COOKIE.to_ne_bytes());
    m
}

/// The uid in the kernel's answer `bytes`, when it names a socket.
fn owner_in(bytes: &[u8]) -> Option<u32> {
    let kind = u16::from_ne_bytes(bytes.get(4..6)?.try_into().ok()?);
    let body = bytes.get(HEADER..)?;
    (kind == SOCK_DIAG_BY_FAMILY).then(|| {
        Some(u32::from_ne_bytes(
            body.get(UID_AT..UID_AT + 4)?.try_into().ok()?,
        ))
    })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn a_local_connection_is_its_sockets_owner_whichever_loopback_address_and_family_it_uses() {
        let me = nix::unistd::geteuid().as_raw();
        for (listen, connect) in [
            ("127.0.0.1:0", "127.0.0.1"),
            ("[::]:0", "::ffff:127.0.0.1"),
            ("[::]:0", "127.0.0.1"),
        ] {
            // A host without IPv6 has only the first.
            let Ok(listener) = TcpListener::bind(listen) else {
                assert!(listen.starts_with('['), "{listen}");
                continue;
            };
            let to = SocketAddr::new(
                connect.parse().unwrap(),
                listener.local_addr().unwrap().port(),
            );
            let client = TcpStream::connect(to).unwrap();
            let (server_side, _) = listener.accept().unwrap();
            assert_eq!(
                peer_of(&server_side),
                Peer::User(me),
                "{listen} from {connect}"
            );
            drop(client);
        }
    }

    #[test]
    #[ignore = "needs root: connects as nobody"]
    fn another_user_bound_to_other_loopback_addresses_is_still_one_user() {
        // A v4-mapped IPv6 socket bound to 127.0.0.N, then connected to
        // an IPv4 listener: each N was a peer of its own.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = format!(
            "import socket, sys\n\
             for n in (5, 77):\n\
             \x20   s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n\
             \x20   s.bind(('::ffff:127.0.0.%d' % n, 0))\n\
             \x20   s.connect(('::ffff:127.0.0.1', {port}))\n\
             \x20   sys.stdin.readline()\n"
        );
        let mut child = Command::new("python3")
            .args(["-c", &script])
            .uid(65534)
            .gid(65534)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut peers = Vec::new();
        for _ in 0..2 {
            let (server_side, from) = listener.accept().unwrap();
            assert!(from.ip().to_canonical().is_loopback(), "{from}");
            peers.push(peer_of(&server_side));
            use std::io::Write;
            child.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
        }
        child.wait().unwrap();
        assert_eq!(peers, [Peer::User(65534), Peer::User(65534)]);
    }

    #[test]
    fn a_remote_ipv6_peer_counts_by_its_64_and_an_ipv4_one_by_its_address() {
        let block = |ip: &str| block(ip.parse().unwrap()).to_string();
        assert_eq!(block("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::");
        assert_eq!(block("2001:db8:1:2:bbbb::7"), "2001:db8:1:2::");
        assert_eq!(block("192.0.2.7"), "192.0.2.7");
    }

    #[test]
    fn an_answer_that_names_no_socket_names_no_owner() {
        let mut error = [0u8; 36];
        error[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        assert_eq!(owner_in(&error), None);
        assert_eq!(owner_in(&[0u8; 3]), None);
        let mut found = [0u8; HEADER + UID_AT + 4];
        found[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        found[HEADER + UID_AT..].copy_from_slice(&4242u32.to_ne_bytes());
        assert_eq!(owner_in(&found), Some(4242));
    }
}
