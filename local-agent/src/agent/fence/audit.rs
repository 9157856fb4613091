//! Landlock's own reports of what it refused (Linux 6.15+, Landlock ABI 7): the audit
//! records the kernel writes for each denial, read for the agent Berth fenced.
//!
//! A fenced agent's refusals are otherwise known only from its output: a tool result
//! or a stderr line that names one (`adapter::names_a_refusal`). A program that hides
//! the error (`2>/dev/null`, a runtime that swallows it) leaves nothing to read. The
//! kernel knows every one: where its audit is on, each Landlock denial is an
//! `AUDIT_LANDLOCK_ACCESS` record (`domain=… blockers=fs.write_file path="…"`) and the
//! domain's first denial an `AUDIT_LANDLOCK_DOMAIN` record naming the process that
//! made it (`status=allocated … pid=…`): the agent, which confines itself between fork
//! and exec.
//!
//! Used only where the kernel reports them already: the system's audit is enabled
//! (`AUDIT_GET`, which needs `CAP_AUDIT_CONTROL`) and Berth may read its multicast
//! group (`AUDIT_NLGRP_READLOG`, `CAP_AUDIT_READ`): Berth run as root, on a machine
//! whose administrator turned audit on. Berth never turns it on itself (a global
//! change). Then the agent's ruleset is applied with
//! `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (denials after the exec are logged only
//! when asked), and a [`Listener`] opened before the spawn collects the records until
//! the turn ends.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`: log the denials of programs executed
/// after `landlock_restrict_self` (the agent), off by default.
pub const LOG_NEW_EXEC_ON: u32 = 1 << 1;

/// The first Landlock ABI with audit records.
pub const FIRST_ABI: u32 = 7;

const NETLINK_AUDIT: i32 = 9;
const AUDIT_GET: u16 = 1000;
/// The multicast group of every record the kernel logs.
const AUDIT_NLGRP_READLOG: u32 = 1;
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
/// `struct nlmsghdr`'s size.
const NLMSG_HDRLEN: usize = 16;

/// The most denials kept of one turn (a `find /` meets thousands; the task lists the
/// first few).
const MAX_KEPT: usize = 1000;

/// How long the end of a turn waits for the records of a domain that denied
/// something to be complete (its `deallocated` record), at most.
const DRAIN: Duration = Duration::from_millis(500);
/// How long the end of a turn waits for records still on their way when none of the
/// agent's has come yet.
const QUIET: Duration = Duration::from_millis(20);
/// How often the reader looks at its stop flag.
const POLL: Duration = Duration::from_millis(10);

/// One denial the kernel reported: `blockers` (`fs.write_file`, `fs.make_reg`,
/// `net.connect_tcp`, …) and what it was aimed at (a path: for a new entry, its
/// directory; an address for the network).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub blockers: String,
    pub target: String,
}

/// What the reader keeps: each domain's creator, and each domain's denials.
#[derive(Default)]
struct Seen {
    /// Domain id → the pid that created it (from its `allocated` record).
    creators: HashMap<String, i32>,
    /// Domains whose `deallocated` record came.
    ended: Vec<String>,
    /// Denials by domain, in order.
    denials: Vec<(String, Denied)>,
    /// When the last Landlock record came.
    last: Option<Instant>,
}

/// Reads Landlock's audit records while a fenced agent runs (see the module).
pub struct Listener {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

fn netlink_socket() -> Option<OwnedFd> {
    // SAFETY: a plain system call; the descriptor it returns is owned here.
    #[allow(unsafe_code)]
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_AUDIT,
        );
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

fn bind(fd: &OwnedFd, groups: u32) -> bool {
    // SAFETY: `addr` lives across the call, and its size is passed with it.
    #[allow(unsafe_code)]
    unsafe {
        let mut addr: libc::sockaddr_nl = std::mem::zeroed();
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = groups;
        libc::bind(
            fd.as_raw_fd(),
            std::ptr::from_ref(&addr).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        ) == 0
    }
}

fn set_timeout(fd: &OwnedFd, timeout: Duration) -> bool {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    // SAFETY: `tv` lives across the call, and its size is passed with it.
    #[allow(unsafe_code)]
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::from_ref(&tv).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        ) == 0
    }
}

fn recv(fd: &OwnedFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    #[allow(unsafe_code)]
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).ok()
}

/// How long an answer of [`enabled`] is used before the kernel is asked again:
/// `AUDIT_GET` costs about 0.13 ms here, more than the rest of a scratch message's
/// own work, and the audit is turned on or off rarely.
pub const ENABLED_TTL: Duration = Duration::from_secs(1);

/// [`enabled`], asked of the kernel at most once every [`ENABLED_TTL`].
pub fn enabled_lately() -> bool {
    static LAST: Mutex<Option<(Instant, bool)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    match *last {
        Some((at, on)) if at.elapsed() < ENABLED_TTL => on,
        _ => {
            let on = enabled();
            *last = Some((Instant::now(), on));
            on
        }
    }
}

/// Whether the system's audit is on: `AUDIT_GET`'s `enabled` (1, or 2 when locked on).
/// `false` when the question is refused (no `CAP_AUDIT_CONTROL`).
pub fn enabled() -> bool {
    let Some(fd) = netlink_socket() else {
        return false;
    };
    if !bind(&fd, 0) || !set_timeout(&fd, Duration::from_millis(200)) {
        return false;
    }
    let mut req = [0u8; NLMSG_HDRLEN];
    req[0..4].copy_from_slice(&(NLMSG_HDRLEN as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&AUDIT_GET.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // SAFETY: `req` lives across the call; the kernel is the destination (no address).
    #[allow(unsafe_code)]
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent != req.len() as isize {
        return false;
    }
    let mut buf = [0u8; 512];
    let Some(n) = recv(&fd, &mut buf) else {
        return false;
    };
    // The answer: a header of type AUDIT_GET, then `struct audit_status` (`mask`,
    // `enabled`, …). A refusal comes as NLMSG_ERROR instead.
    if n < NLMSG_HDRLEN + 8 || u16::from_ne_bytes([buf[4], buf[5]]) != AUDIT_GET {
        return false;
    }
    let on = u32::from_ne_bytes([buf[20], buf[21], buf[22], buf[23]]);
    on != 0
}

impl Listener {
    /// A listener for the next fenced agent, when the kernel reports Landlock's
    /// denials (`abi` ≥ 7, audit on) and Berth may read them; `None` otherwise.
    pub fn open(abi: u32) -> Option<Listener> {
        if abi < FIRST_ABI || !enabled_lately() {
            return None;
        }
        let fd = netlink_socket()?;
        if !bind(&fd, AUDIT_NLGRP_READLOG) || !set_timeout(&fd, POLL) {
            return None;
        }
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::Builder::new()
                .name("berth-audit".into())
                .spawn(move || read(&fd, &seen, &stop))
                .ok()?
        };
        Some(Listener {
            seen,
            stop,
            reader: Some(reader),
        })
    }

    /// The turn is over (the agent's group is gone): the denials of the domains `pid`
    /// created, once their records are complete (bounded waits, see [`DRAIN`]).
    pub fn finish(mut self, pid: i32) -> Vec<Denied> {
        let start = Instant::now();
        loop {
            let done = {
                let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                let ours: Vec<&String> = seen
                    .creators
                    .iter()
                    .filter(|(_, p)| **p == pid)
                    .map(|(d, _)| d)
                    .collect();
                if ours.is_empty() {
                    // Nothing of the agent's yet: done once the stream has been quiet.
                    let quiet_since = seen.last.map_or(start, |l| l.max(start));
                    quiet_since.elapsed() >= QUIET
                } else {
                    ours.iter().all(|d| seen.ended.contains(d))
                }
            };
            if done || start.elapsed() >= DRAIN {
                break;
            }
            std::thread::sleep(POLL / 2);
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.denials
            .iter()
            .filter(|(d, _)| seen.creators.get(d) == Some(&pid))
            .map(|(_, denied)| denied.clone())
            .collect()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The reader's loop: every Landlock record, until told to stop.
fn read(fd: &OwnedFd, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let mut buf = vec![0u8; 16 * 1024];
    while !stop.load(Ordering::SeqCst) {
        let Some(n) = recv(fd, &mut buf) else {
            // The timeout (EAGAIN), or an overrun (ENOBUFS: records were lost; the
            // ones that come still count).
            continue;
        };
        let mut at = 0;
        while at + NLMSG_HDRLEN <= n {
            let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
            let kind = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
            if len < NLMSG_HDRLEN || at + len > n {
                // Audit's records come one a datagram, with a length that may not
                // count the text: take the rest.
                take(kind, &buf[at + NLMSG_HDRLEN..n], seen);
                break;
            }
            take(kind, &buf[at + NLMSG_HDRLEN..at + len], seen);
            at += len.next_multiple_of(4);
        }
    }
}

fn take(kind: u16, body: &[u8], seen: &Mutex<Seen>) {
    if kind != AUDIT_LANDLOCK_ACCESS && kind != AUDIT_LANDLOCK_DOMAIN {
        return;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim_end_matches('\0');
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    seen.last = Some(Instant::now());
    match parse(kind, text) {
        Some(Record::Access { domain, denied }) if seen.denials.len() < MAX_KEPT => {
            seen.denials.push((domain, denied));
        }
        Some(Record::Allocated { domain, pid }) => {
            seen.creators.insert(domain, pid);
        }
        Some(Record::Deallocated { domain }) => seen.ended.push(domain),
        // Past the first `MAX_KEPT` denials of the turn, the rest are dropped.
        Some(Record::Access { .. }) | None => {}
    }
}

/// A Landlock record, as far as Berth reads it.
#[derive(Debug, PartialEq, Eq)]
enum Record {
    Access { domain: String, denied: Denied },
    Allocated { domain: String, pid: i32 },
    Deallocated { domain: String },
}

/// A record's `key=value` fields, after its `audit(…): ` stamp. A value is a quoted
/// string, or hex when it holds what would need quoting (audit's untrusted strings),
/// or a bare word.
fn fields(text: &str) -> HashMap<&str, String> {
    let body = text.split_once("): ").map_or(text, |(_, b)| b);
    let mut out = HashMap::new();
    let mut rest = body.trim_start();
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.split_once('"') {
                Some((v, n)) => (v.to_owned(), n),
                None => (q.to_owned(), ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            (after[..end].to_owned(), &after[end..])
        };
        out.insert(key, value);
        rest = next.trim_start();
    }
    out
}

/// An untrusted string's value: quoted (given unquoted by [`fields`]) or hex.
fn untrusted(value: &str, quoted_in: &str, key: &str) -> String {
    if quoted_in.contains(&format!("{key}=\"")) {
        return value.to_owned();
    }
    let bytes: Option<Vec<u8>> = (value.len().is_multiple_of(2) && !value.is_empty())
        .then(|| {
            (0..value.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&value[i..i + 2], 16).ok())
                .collect()
        })
        .flatten();
    match bytes {
        Some(b) => String::from_utf8_lossy(&b).into_owned(),
        None => value.to_owned(),
    }
}

fn parse(kind: u16, text: &str) -> Option<Record> {
    let f = fields(text);
    let domain = f.get("domain")?.clone();
    if kind == AUDIT_LANDLOCK_DOMAIN {
        return match f.get("status").map(String::as_str) {
            Some("allocated") => Some(Record::Allocated {
                domain,
                pid: f.get("pid")?.parse().ok()?,
            }),
            Some("deallocated") => Some(Record::Deallocated { domain }),
            _ => None,
        };
    }
    let blockers = f.get("blockers")?.clone();
    let target = if let Some(p) = f.get("path") {
        untrusted(p, text, "path")
    } else if let Some(d) = f.get("daddr") {
        match f.get("dest") {
            Some(port) => format!("{d}:{port}"),
            None => d.clone(),
        }
    } else if let Some(port) = f.get("dest").or_else(|| f.get("src")) {
        format!("port {port}")
    } else if let Some(pid) = f.get("opid") {
        format!("process {pid}")
    } else {
        String::new()
    };
    Some(Record::Access {
        domain,
        denied: Denied { blockers, target },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_as_the_kernel_writes_them_are_read() {
        // As Linux 6.18 wrote them for a shell under a ruleset refusing writes.
        let access = r#"audit(1796591879.635:6): domain=1bf3dbf55 blockers=fs.write_file path="/tmp/ll-target" dev="vda" ino=10010831"#;
        assert_eq!(
            parse(AUDIT_LANDLOCK_ACCESS, access),
            Some(Record::Access {
                domain: "1bf3dbf55".into(),
                denied: Denied {
                    blockers: "fs.write_file".into(),
                    target: "/tmp/ll-target".into()
                }
            })
        );
        let alloc = r#"audit(1796591879.635:6): domain=1bf3dbf55 status=allocated mode=enforcing pid=5280 uid=0 exe="/usr/bin/python3.11" comm="python3""#;
        assert_eq!(
            parse(AUDIT_LANDLOCK_DOMAIN, alloc),
            Some(Record::Allocated {
                domain: "1bf3dbf55".into(),
                pid: 5280
            })
        );
        let dealloc = "audit(1796591879.683:8): domain=1bf3dbf55 status=deallocated denials=2";
        assert_eq!(
            parse(AUDIT_LANDLOCK_DOMAIN, dealloc),
            Some(Record::Deallocated {
                domain: "1bf3dbf55".into()
            })
        );
        // A path audit gives in hex (it holds a space).
        let hex =
            "audit(1.2:3): domain=1 blockers=fs.make_reg path=2F746D702F6120622F dev=\"vda\" ino=2";
        let Some(Record::Access { denied, .. }) = parse(AUDIT_LANDLOCK_ACCESS, hex) else {
            panic!("not read");
        };
        assert_eq!(denied.target, "/tmp/a b/");
        let net = "audit(1.2:3): domain=1 blockers=net.connect_tcp daddr=127.0.0.1 dest=8080";
        let Some(Record::Access { denied, .. }) = parse(AUDIT_LANDLOCK_ACCESS, net) else {
            panic!("not read");
        };
        assert_eq!(denied.target, "127.0.0.1:8080");
        assert_eq!(parse(AUDIT_LANDLOCK_ACCESS, "audit(1.2:3): nothing"), None);
    }
}
