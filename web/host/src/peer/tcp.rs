//! Who is at the other end of a TCP connection to one of Berth's listeners: a fenced
//! agent on this machine is refused, whatever token it shows.
//!
//! A token is a file's worth of secret: an agent that finds one (left in a repository,
//! pasted into a prompt, read from a log) could otherwise `curl` the web listener or a
//! team server on loopback and read every session. The unix sockets already refuse a
//! fenced peer by its pid ([`super::refuse`]); TCP has no `SO_PEERCRED`, so the peer's
//! process is found the way `ss -p` finds it:
//!
//! 1. the connection's other end is a socket of this host exactly when
//!    `/proc/net/tcp` or `/proc/net/tcp6` lists a socket whose own end is the
//!    connection's peer address and whose remote end is the listener's address (IPv4
//!    written as v4-mapped IPv6 in `tcp6` included). No such row: the peer is another
//!    machine (or another network namespace, such as a container's bridge): allowed;
//! 2. the row gives the socket's owner and inode; the processes holding
//!    `socket:[inode]` are found in `/proc/<pid>/fd`, looking only at processes of
//!    that owner (to keep it cheap);
//! 3. any holder fenced ([`super::peer_is_fenced`]: more seccomp filters than Berth):
//!    the connection is closed and logged.
//!
//! It fails closed where it could look and found nothing: a socket of Berth's own user
//! (or of anyone, when Berth is root) that no process can be found holding (closed
//! already, held by a thread with its own descriptor table, a process made not
//! dumpable, a process in another pid namespace) is refused, and so is every
//! connection while the tables cannot be read. It does not look where it cannot: when
//! Berth is not root, another user's `/proc/<pid>/fd` is closed to it, so another
//! user's socket is allowed: it is not an agent this Berth started, and the token
//! still gates it (a daemon run by another user on a team server's machine: its agents
//! are not told apart). Off Linux nothing is checked (there is no `/proc`), as for the
//! unix sockets. A client inside some other sandbox that adds seccomp filters (Docker's
//! default profile, systemd's `SystemCallFilter=`) on this host is refused too.

use std::io::{self, BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The kernel's tables of TCP sockets (this network namespace's).
const TCP4: &str = "/proc/net/tcp";
const TCP6: &str = "/proc/net/tcp6";

/// One row of `/proc/net/tcp` or `/proc/net/tcp6`: a TCP socket of this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Its own end (a v4-mapped IPv6 address as IPv4).
    pub local: SocketAddr,
    /// The end it is connected to (likewise).
    pub remote: SocketAddr,
    /// Its owner.
    pub uid: u32,
    /// Its inode, as its holders' `/proc/<pid>/fd` show it (`socket:[inode]`); 0 once
    /// no process holds it (closed, `TIME_WAIT`).
    pub inode: u64,
}

impl Row {
    /// Parses one line of the tables: `sl local rem st tx:rx tr:when retrnsmt uid
    /// timeout inode …`. `None` for the header or a line that is not a row.
    pub fn parse(line: &str) -> Option<Row> {
        let mut fields = line.split_whitespace();
        let local = end(fields.nth(1)?)?;
        let remote = end(fields.next()?)?;
        let uid = fields.nth(4)?.parse().ok()?;
        let inode = fields.nth(1)?.parse().ok()?;
        Some(Row {
            local,
            remote,
            uid,
            inode,
        })
    }
}

/// One end as the tables print it: `0100007F:1F90` (IPv4) or 32 hex digits and a port
/// (IPv6). The kernel prints each 32-bit word of the address as the number it is in
/// this machine's byte order, and the port as a plain number.
fn end(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| {
        let hex = addr.get(i * 8..i * 8 + 8)?;
        u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes)
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

/// `addr` with a v4-mapped IPv6 address written as the IPv4 it is (a dual-stack
/// listener sees an IPv4 peer as `::ffff:a.b.c.d`; a client may connect either way).
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The row of the socket at the other end of a connection whose ends are `local` (the
/// listener's) and `peer`, read from `tables`: its own end is `peer`, its remote end
/// `local`. A row with an inode wins over one without (a `TIME_WAIT` left by an
/// earlier connection between the same ends). A table that does not exist (no IPv6)
/// is skipped; one that cannot be read is an error.
pub fn find_row(tables: &[&Path], local: SocketAddr, peer: SocketAddr) -> io::Result<Option<Row>> {
    let (local, peer) = (canonical(local), canonical(peer));
    let mut found = None;
    for table in tables {
        let file = match std::fs::File::open(table) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in BufReader::new(file).lines() {
            let Some(row) = Row::parse(&line?) else {
                continue;
            };
            if row.local == peer && row.remote == local {
                if row.inode != 0 {
                    return Ok(Some(row));
                }
                found = Some(row);
            }
        }
    }
    Ok(found)
}

/// The processes of `uid` holding the socket `inode`, from `/proc/<pid>/fd`. A process
/// whose descriptors cannot be read is passed over (the caller fails closed when none
/// is found).
pub fn holders(inode: u64, uid: u32) -> Vec<i32> {
    let target = format!("socket:[{inode}]");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if entry.metadata().map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|link| link.as_os_str() == target.as_str())
        });
        if holds {
            out.push(pid);
        }
    }
    out
}

/// What is at the other end of a TCP connection to one of Berth's listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpPeer {
    /// No socket of this host (in this network namespace) is the other end: another
    /// machine. Allowed.
    Remote,
    /// A process of this host, not fenced (the first holder found). Allowed.
    Local { pid: i32 },
    /// A fenced process of this host: an agent Berth started. Refused.
    Fenced { pid: i32 },
    /// A socket of this host that Berth may look into but that no process can be found
    /// holding (see the module documentation). Refused.
    Unheld { uid: u32, inode: u64 },
    /// Another user's socket, whose holders Berth (not root) cannot see. Allowed.
    OtherUser { uid: u32 },
    /// The tables could not be read: nobody can tell. Refused.
    Unknown { why: String },
}

impl TcpPeer {
    /// Finds the peer of the connection whose ends are `local` (the listener's) and
    /// `peer`. Blocking file I/O: call it off the async threads.
    pub fn of(local: SocketAddr, peer: SocketAddr) -> TcpPeer {
        let tables: &[&Path] = if canonical(peer).is_ipv4() {
            &[Path::new(TCP4), Path::new(TCP6)]
        } else {
            &[Path::new(TCP6)]
        };
        let row = match find_row(tables, local, peer) {
            Ok(None) => return TcpPeer::Remote,
            Ok(Some(row)) => row,
            Err(e) => {
                return TcpPeer::Unknown {
                    why: format!("cannot read {TCP4} or {TCP6}: {e}"),
                };
            }
        };
        let (uid, inode) = (row.uid, row.inode);
        if inode == 0 {
            return TcpPeer::Unheld { uid, inode };
        }
        let me = rustix::process::geteuid().as_raw();
        if me != 0 && uid != me {
            return TcpPeer::OtherUser { uid };
        }
        let pids = holders(inode, uid);
        if let Some(&pid) = pids.iter().find(|&&pid| super::peer_is_fenced(pid)) {
            return TcpPeer::Fenced { pid };
        }
        match pids.first() {
            Some(&pid) => TcpPeer::Local { pid },
            None => TcpPeer::Unheld { uid, inode },
        }
    }

    /// Whether the connection must be closed.
    pub fn refused(&self) -> bool {
        match self {
            TcpPeer::Remote | TcpPeer::Local { .. } | TcpPeer::OtherUser { .. } => false,
            TcpPeer::Fenced { .. } | TcpPeer::Unheld { .. } | TcpPeer::Unknown { .. } => true,
        }
    }
}

/// Whether the connection `stream` must be closed: its peer is a fenced process of this
/// host, or one Berth cannot tell from a fenced one ([`TcpPeer::refused`]). The lookup
/// runs on the blocking pool; a refusal is logged at warn. Off Linux, `false`.
pub async fn refuse(stream: &tokio::net::TcpStream) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let (Ok(local), Ok(peer)) = (stream.local_addr(), stream.peer_addr()) else {
        // Reset before it was looked at: nothing to serve.
        return true;
    };
    let found = match tokio::task::spawn_blocking(move || TcpPeer::of(local, peer)).await {
        Ok(found) => found,
        Err(e) => TcpPeer::Unknown {
            why: format!("the lookup did not finish: {e}"),
        },
    };
    match &found {
        TcpPeer::Remote | TcpPeer::Local { .. } | TcpPeer::OtherUser { .. } => {}
        TcpPeer::Fenced { pid } => tracing::warn!(
            pid,
            %peer,
            listener = %local,
            "refused a connection from a fenced process (an agent Berth started): agents may not use Berth's listeners, whatever token they hold"
        ),
        TcpPeer::Unheld { uid, inode } => tracing::warn!(
            uid,
            inode,
            %peer,
            listener = %local,
            "refused a connection from this machine whose process cannot be found (closed, hidden or in another pid namespace): it could be a fenced agent"
        ),
        TcpPeer::Unknown { why } => tracing::warn!(
            %peer,
            listener = %local,
            "refused a connection whose peer cannot be told from a fenced agent: {why}"
        ),
    }
    found.refused()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    // Lines as this machine's kernel printed them (x86-64, little-endian): a
    // connection from 127.0.0.1:59130 to a dual-stack listener on port 45905, one
    // from ::1, and one from an AF_INET6 socket to ::ffff:127.0.0.1.
    #[cfg(target_endian = "little")]
    #[test]
    fn rows_of_the_kernels_tables() {
        let rows: [(&str, Option<Row>); 6] = [
            (
                "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
                None,
            ),
            (
                "   1: 0100007F:E6FA 0100007F:B351 01 00000000:00000000 00:00000000 00000000     0        0 21336 2 00000000aaddb726 20 0 0 10 -1",
                Some(Row {
                    local: addr("127.0.0.1:59130"),
                    remote: addr("127.0.0.1:45905"),
                    uid: 0,
                    inode: 21336,
                }),
            ),
            (
                "   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1287 1 000000005b91e51f 100 0 0 10 0",
                Some(Row {
                    local: addr("0.0.0.0:2024"),
                    remote: addr("0.0.0.0:0"),
                    uid: 1000,
                    inode: 1287,
                }),
            ),
            (
                "   5: 00000000000000000000000001000000:E74C 00000000000000000000000001000000:B351 01 00000000:00000000 00:00000000 00000000     0        0 21338 2 000000003770d7d7 20 0 0 10 -1",
                Some(Row {
                    local: addr("[::1]:59212"),
                    remote: addr("[::1]:45905"),
                    uid: 0,
                    inode: 21338,
                }),
            ),
            // v4-mapped: read as the IPv4 it is.
            (
                "   3: 0000000000000000FFFF00000100007F:E700 0000000000000000FFFF00000100007F:B351 01 00000000:00000000 00:00000000 00000000     0        0 21340 2 00000000fa802ca7 20 0 0 10 -1",
                Some(Row {
                    local: addr("127.0.0.1:59136"),
                    remote: addr("127.0.0.1:45905"),
                    uid: 0,
                    inode: 21340,
                }),
            ),
            // A global IPv6 address (2001:db8::1), word by word in memory order.
            (
                "   2: B80D0120000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000    33        0 99 1 0000000000000000 100 0 0 10 0",
                Some(Row {
                    local: addr("[2001:db8::1]:80"),
                    remote: addr("[::]:0"),
                    uid: 33,
                    inode: 99,
                }),
            ),
        ];
        for (line, want) in rows {
            assert_eq!(Row::parse(line), want, "{line}");
        }
    }

    #[test]
    fn lines_that_are_not_rows() {
        for line in [
            "",
            "   1: 0100007F:E6FA",
            // An address of neither length.
            "   1: 0100007F00:E6FA 0100007F:B351 01 00000000:00000000 00:00000000 00000000     0        0 21336",
            // Not hex.
            "   1: 0100007G:E6FA 0100007F:B351 01 00000000:00000000 00:00000000 00000000     0        0 21336",
            // No inode.
            "   1: 0100007F:E6FA 0100007F:B351 01 00000000:00000000 00:00000000 00000000     0        0",
            // Not ASCII where a word is cut.
            "   1: 0000000000000000FFFF000é100007F:E700 0100007F:B351 01 00000000:00000000 00:00000000 00000000     0        0 1",
        ] {
            assert_eq!(Row::parse(line), None, "{line:?}");
        }
    }

    /// Tables written as the kernel writes them; the row at the other end of a
    /// connection is found whichever way either side wrote its addresses.
    #[cfg(target_endian = "little")]
    #[test]
    fn the_other_end_of_a_connection_in_the_tables() {
        let dir = berth_test_support::TempDir::new("peer-tcp-tables");
        let tcp = dir.path().join("tcp");
        let tcp6 = dir.path().join("tcp6");
        std::fs::write(
            &tcp,
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             \x20  0: 0100007F:B351 0100007F:E6FA 01 00000000:00000000 00:00000000 00000000     0        0 21337 1 0 20 0 0 10 -1\n\
             \x20  1: 0100007F:E6FA 0100007F:B351 06 00000000:00000000 03:00001000 00000000     0        0 0 3 0\n\
             \x20  2: 0100007F:E6FA 0100007F:B351 01 00000000:00000000 00:00000000 00000000  1000        0 21336 2 0 20 0 0 10 -1\n",
        )
        .unwrap();
        std::fs::write(
            &tcp6,
            "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             \x20  3: 0000000000000000FFFF00000100007F:E700 0000000000000000FFFF00000100007F:B351 01 00000000:00000000 00:00000000 00000000  1000        0 21340 2 0 20 0 0 10 -1\n\
             \x20  5: 00000000000000000000000001000000:E74C 00000000000000000000000001000000:B351 01 00000000:00000000 00:00000000 00000000  1001        0 21338 2 0 20 0 0 10 -1\n",
        )
        .unwrap();
        let both: &[&Path] = &[&tcp, &tcp6];
        let find = |local: &str, peer: &str| {
            find_row(both, addr(local), addr(peer))
                .unwrap()
                .map(|r| (r.uid, r.inode))
        };
        // The client's row, not ours (the same ends the other way round), and not the
        // TIME_WAIT left before it.
        assert_eq!(
            find("127.0.0.1:45905", "127.0.0.1:59130"),
            Some((1000, 21336))
        );
        // A dual-stack listener sees its IPv4 peer v4-mapped.
        assert_eq!(
            find("[::ffff:127.0.0.1]:45905", "[::ffff:127.0.0.1]:59130"),
            Some((1000, 21336))
        );
        // A client that connected with an AF_INET6 socket to the mapped address.
        assert_eq!(
            find("127.0.0.1:45905", "127.0.0.1:59136"),
            Some((1000, 21340))
        );
        assert_eq!(find("[::1]:45905", "[::1]:59212"), Some((1001, 21338)));
        // Nothing of this host at the other end: another machine.
        assert_eq!(find("127.0.0.1:45905", "192.0.2.7:59130"), None);
        assert_eq!(find("127.0.0.1:45906", "127.0.0.1:59130"), None);
        // Only the TIME_WAIT is left: found without an inode.
        let only_wait: &[&Path] = &[&tcp];
        std::fs::write(
            &tcp,
            "   1: 0100007F:E6FA 0100007F:B351 06 00000000:00000000 03:00001000 00000000     0        0 0 3 0\n",
        )
        .unwrap();
        assert_eq!(
            find_row(only_wait, addr("127.0.0.1:45905"), addr("127.0.0.1:59130"))
                .unwrap()
                .map(|r| r.inode),
            Some(0)
        );
        // A table that does not exist is skipped (no IPv6); one that cannot be read
        // (here a directory) is an error.
        let missing: &[&Path] = &[&dir.path().join("none")];
        assert_eq!(
            find_row(missing, addr("127.0.0.1:1"), addr("127.0.0.1:2")).unwrap(),
            None
        );
        let unreadable: &[&Path] = &[dir.path()];
        assert!(find_row(unreadable, addr("127.0.0.1:1"), addr("127.0.0.1:2")).is_err());
    }

    /// A real connection from this process, IPv4 and IPv6: the kernel's tables lead to
    /// this process, which is not fenced; an address nobody holds is another machine.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_connection_from_this_process_is_found_and_allowed() {
        let me = std::process::id() as i32;
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(bind) else {
                continue; // no IPv6 here
            };
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (server, peer) = listener.accept().unwrap();
            let local = server.local_addr().unwrap();
            assert_eq!(
                TcpPeer::of(local, peer),
                TcpPeer::Local { pid: me },
                "{bind}"
            );
            drop(client);
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        assert_eq!(TcpPeer::of(local, addr("192.0.2.7:40000")), TcpPeer::Remote);
    }

    #[test]
    fn what_is_refused() {
        let rows = [
            (TcpPeer::Remote, false),
            (TcpPeer::Local { pid: 1 }, false),
            (TcpPeer::OtherUser { uid: 1000 }, false),
            (TcpPeer::Fenced { pid: 1 }, true),
            (TcpPeer::Unheld { uid: 0, inode: 0 }, true),
            (TcpPeer::Unknown { why: "x".into() }, true),
        ];
        for (peer, refused) in rows {
            assert_eq!(peer.refused(), refused, "{peer:?}");
        }
    }
}
