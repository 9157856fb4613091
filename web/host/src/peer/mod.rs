//! Who is at the other end of one of Berth's sockets: a fenced agent is refused.
//!
//! Landlock below ABI 9 does not govern `connect(2)` to a pathname unix socket, so a
//! fenced agent could reach Berth's control socket (same user: its 0600 mode does not
//! stop it) and, through it, register agents, send into other sessions and relink
//! them. Every fenced agent carries one more seccomp filter than Berth itself,
//! inherited by everything it starts and never removed (a double fork and `setsid` do
//! not shed it): the socket reads its peer's pid (`SO_PEERCRED`) on accept and closes
//! the connection of a peer that carries more filters than the server ([`refuse`]; the
//! server's listener that applies it on every accept is `berth-web`'s `peer::Checked`).
//!
//! Limits: a peer that exits before the check is refused (fail closed); a pid reused
//! between the peer's exit and the check is judged as the new process (a small window;
//! `SO_PEERPIDFD` would close it). A client run from inside some other sandbox that adds
//! seccomp filters is refused too. Off Linux nothing is checked (no `/proc`).
//!
//! The TCP listeners (the web listener, `berth-server`'s) make the same test on the
//! process found at the other end of each connection ([`tcp`]).

pub mod tcp;

use std::sync::OnceLock;
use tokio::net::UnixStream;

/// How many seccomp filters the process whose `/proc/<pid>/status` is `status`
/// carries: the `Seccomp_filters` line (Linux 5.9+), else 1 for filter mode
/// (`Seccomp: 2`) and 0 otherwise. `None` when neither line is there.
pub fn seccomp_filters(status: &str) -> Option<u32> {
    let field = |name: &str| {
        status.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key == name).then(|| value.trim().parse::<u32>().ok())?
        })
    };
    field("Seccomp_filters").or_else(|| field("Seccomp").map(|mode| u32::from(mode == 2)))
}

/// Whether the process `pid` is fenced: it carries more seccomp filters than this
/// process (every fenced agent carries one more, inherited by all it starts and never
/// removed).
///
/// Fails closed: a process whose status cannot be read (gone, or not ours to see) is
/// treated as fenced. Off Linux, `false`: there is no `/proc`.
pub fn peer_is_fenced(pid: i32) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    static OWN: OnceLock<Option<u32>> = OnceLock::new();
    let own = *OWN.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| seccomp_filters(&s))
    });
    let peer = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| seccomp_filters(&s));
    match (peer, own) {
        (Some(peer), Some(own)) => peer > own,
        (Some(peer), None) => peer > 0,
        (None, _) => true,
    }
}

/// Whether the peer of `stream` must be refused: a fenced process, or (Linux) one whose
/// pid cannot be read. Logged at warn.
pub fn refuse(stream: &UnixStream, socket: &str) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    match stream.peer_cred().ok().and_then(|c| c.pid()) {
        Some(pid) if peer_is_fenced(pid) => {
            tracing::warn!(
                pid,
                socket,
                "refused a connection from a fenced process (an agent Berth started): agents may not use Berth's controls"
            );
            true
        }
        Some(_) => false,
        None => {
            tracing::warn!(
                socket,
                "refused a connection whose peer's pid cannot be read"
            );
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seccomp_filter_count_of_a_status() {
        let rows: [(&str, Option<u32>); 7] = [
            (
                "Name:\tsh\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n",
                Some(3),
            ),
            ("Seccomp:\t0\nSeccomp_filters:\t0\n", Some(0)),
            // Before Linux 5.9: the mode alone.
            ("Name:\tsh\nSeccomp:\t2\n", Some(1)),
            ("Seccomp:\t0\n", Some(0)),
            ("Seccomp:\t1\n", Some(0)),
            ("Name:\tsh\n", None),
            // A name that merely starts like the field is not it.
            ("Seccomp_filters_x:\t9\nSeccomp:\t2\n", Some(1)),
        ];
        for (status, want) in rows {
            assert_eq!(seccomp_filters(status), want, "{status:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_not_a_fenced_peer() {
        assert!(!peer_is_fenced(std::process::id() as i32));
        // A pid that cannot exist: fails closed.
        assert!(peer_is_fenced(i32::MAX));
    }
}
