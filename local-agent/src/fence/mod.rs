//! The fence's engine: confining an agent Berth starts, by the kernel.
//!
//! [`berth_core::fence::FencePolicy`] says what a run's agent may touch; this module
//! turns it into kernel objects in the parent ([`prepare`], blocking file I/O: run it
//! off the async threads) that the spawn applies in the child between its last own
//! step and the `execve` (`crate::spawn`, and the fork path in `crate::process`):
//! `PR_SET_NO_NEW_PRIVS`, `landlock_restrict_self`, then the seccomp filter. The
//! parent is never confined.
//!
//! What a fenced agent and everything it starts get (Linux, Landlock ABI ≥ 1):
//!
//! - **Writes** only beneath the policy's write paths (the run's directory unless it is
//!   read-only, the task's tmp, the kind's state, the settings' extras) and the devices
//!   every program needs (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/tty`,
//!   `/dev/ptmx`, `/dev/pts/`, and `/dev/shm/`). Renames and hard links out of or into
//!   those places are refused (REFER, ABI ≥ 2; below it every such move is refused).
//! - **Reads** everywhere except the policy's `read_deny` paths, by decomposition: the
//!   ancestors of a hidden path get no read rule, their other entries one each. The
//!   canonical form of each hidden path is hidden too (a `~/.ssh` that is a symlink
//!   hides its target). Symlinks get no rule; Landlock checks the resolved path, so a
//!   link, a hard link or `/proc/<pid>/root` leads nowhere hidden. Directory *names*
//!   are listable everywhere (`READ_DIR` on `/`): an agent that cannot list `~` or `/tmp`
//!   breaks, and names are a small leak beside contents.
//! - **Network off**: `socket()` for every family but `AF_UNIX` is refused by seccomp,
//!   and Landlock (ABI ≥ 4) refuses every TCP bind and connect as a second wall.
//! - **Always** a seccomp filter (see `seccomp`), the mark [`peer_is_fenced`] reads, and
//!   the Landlock scopes (ABI ≥ 6): no signals to, and no abstract unix sockets of,
//!   processes outside the fence.
//!
//! What it does **not** guarantee (DESIGN.md's promise needs the wiring step too):
//!
//! - `.git/hooks`, `.git/config` and `.berth` inside a writable run directory
//!   (`FencePolicy::protect`) are *not* protected by this engine: Landlock's rights pass
//!   to everything beneath a directory. The read-only binds (user namespaces) and the
//!   check-and-restore after the run are a later step.
//! - Pathname unix sockets (Berth's control socket, D-Bus, docker) are reachable below
//!   Landlock ABI 9: Berth's sockets must refuse fenced peers ([`peer_is_fenced`]).
//! - Reads are a snapshot: an entry created after [`prepare`] in a directory that was
//!   decomposed (e.g. a new `~/.foo`) is unreadable for that run.
//! - Write paths that do not exist when [`prepare`] runs get no rule (the caller creates
//!   the kind's state first); explicit write paths are followed if they are symlinks.
//! - Below ABI 4 there is no TCP wall beside seccomp; UDP has only seccomp below ABI 10.
//! - Other platforms: nothing yet ([`probe`] says unavailable; macOS's Seatbelt profile
//!   is a later step).

use std::path::PathBuf;
use std::sync::OnceLock;

#[cfg(target_os = "linux")]
mod linux;
pub mod seatbelt;
#[cfg(target_os = "linux")]
mod seccomp;

#[cfg(target_os = "linux")]
pub use linux::{ChildFence, Prepared, prepare};

/// A test hook, read once per process: `BERTH_FENCE_PROBE=unavailable` makes [`probe`]
/// report a kernel without the fence, so "fence required but unavailable" can be tested
/// on a kernel that has it. Other values are ignored (with a warning).
pub const PROBE_ENV: &str = "BERTH_FENCE_PROBE";

/// What the running kernel offers the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The kernel's Landlock ABI version; 0 when it has none (not built, or not enabled
    /// at boot).
    pub landlock_abi: u32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
}

impl Probe {
    /// A kernel with nothing the fence needs.
    pub const UNAVAILABLE: Probe = Probe {
        landlock_abi: 0,
        seccomp: false,
    };

    /// Whether [`prepare`] can fence on this kernel.
    pub fn available(&self) -> bool {
        self.landlock_abi > 0 && self.seccomp
    }
}

/// What the kernel offers, checked once per process (or what [`PROBE_ENV`] says).
pub fn probe() -> Probe {
    static PROBE: OnceLock<Probe> = OnceLock::new();
    *PROBE.get_or_init(|| match std::env::var(PROBE_ENV) {
        Ok(value) => parse_probe_override(&value).unwrap_or_else(|| {
            tracing::warn!(
                value,
                "{PROBE_ENV} is a test hook that only knows \"unavailable\"; ignored"
            );
            kernel_probe()
        }),
        Err(_) => kernel_probe(),
    })
}

/// The probe [`PROBE_ENV`]'s value stands for, if it names one.
pub fn parse_probe_override(value: &str) -> Option<Probe> {
    (value == "unavailable").then_some(Probe::UNAVAILABLE)
}

#[cfg(target_os = "linux")]
fn kernel_probe() -> Probe {
    linux::kernel_probe()
}

#[cfg(not(target_os = "linux"))]
fn kernel_probe() -> Probe {
    Probe::UNAVAILABLE
}

/// Why a fence could not be prepared. Each message names the path or the facility;
/// [`FenceError::hint`] says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("the fence is unavailable: {reason}")]
    Unavailable { reason: String },
    #[error("cannot fence the run: {} ({what}) does not exist", path.display())]
    Missing { path: PathBuf, what: &'static str },
    #[error("cannot fence the run: cannot open {} ({what}): {source}", path.display())]
    Open {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot fence the run: the kernel refused the rule for {}: {source}", path.display())]
    Rule {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("cannot fence the run: the Landlock ruleset cannot be created: {source}")]
    Ruleset {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl FenceError {
    /// What the user can do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            FenceError::Unavailable { .. } => {
                "the fence needs Linux 5.13 or later with Landlock enabled (lsm=…,landlock); \
                 set \"fence\": {\"mode\": \"auto\"} to run unfenced where it is missing"
            }
            FenceError::Missing { .. } => "create it, or remove it from the settings' fence.write",
            FenceError::Open { .. } => {
                "check the path's permissions, or remove it from the settings"
            }
            FenceError::Rule { .. } | FenceError::Ruleset { .. } => {
                "this kernel's Landlock refused the fence; set \"fence\": {\"mode\": \"off\"} \
                 to run unfenced, and report it"
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod unavailable {
    use super::FenceError;
    use berth_core::fence::FencePolicy;

    /// A prepared fence: none can exist on this platform yet.
    #[derive(Debug)]
    pub struct Prepared {
        never: std::convert::Infallible,
    }

    /// What the fork path applies in the child: none exists here.
    #[derive(Debug)]
    pub enum ChildFence {}

    impl Prepared {
        pub(crate) fn child_fence(&self) -> ChildFence {
            match self.never {}
        }
    }

    impl ChildFence {
        pub(crate) fn apply(&self) -> std::io::Result<()> {
            match *self {}
        }
    }

    /// No fence on this platform yet (macOS's Seatbelt profile is a later step).
    pub fn prepare(_: &FencePolicy) -> Result<Prepared, FenceError> {
        Err(FenceError::Unavailable {
            reason: format!("no fence is built for {} yet", std::env::consts::OS),
        })
    }
}

#[cfg(not(target_os = "linux"))]
pub use unavailable::{ChildFence, Prepared, prepare};

/// The peer check of Berth's sockets lives with the sockets (`berth_web::peer`): one
/// home for reading the mark that the fence's seccomp filter sets.
pub use berth_web::peer::{peer_is_fenced, seccomp_filters};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_override() {
        assert_eq!(
            parse_probe_override("unavailable"),
            Some(Probe::UNAVAILABLE)
        );
        assert_eq!(parse_probe_override("available"), None);
        assert_eq!(parse_probe_override(""), None);
        assert!(!Probe::UNAVAILABLE.available());
        assert!(
            Probe {
                landlock_abi: 7,
                seccomp: true
            }
            .available()
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn berth_itself_is_not_a_fenced_peer() {
        assert!(!peer_is_fenced(std::process::id() as i32));
        // A pid that cannot exist: fails closed.
        assert!(peer_is_fenced(i32::MAX));
    }
}
