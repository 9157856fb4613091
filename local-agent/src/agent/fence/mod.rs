//! The fence's engine: confining an agent Berth starts, by the kernel.
//!
//! [`berth_core::fence::FencePolicy`] says what a run's agent may touch; this module
//! turns it into kernel objects in the parent ([`prepare`], blocking file I/O: run it
//! off the async threads) that the spawn applies in the child between its last own
//! step and the `execve` (`crate::agent::spawn`, and the fork path in `crate::agent::process`):
//! the capabilities dropped ([`caps`]: none at all when Berth runs as root),
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
//!   In the strict read mode (`"fence": {"read": "directory"}`,
//!   [`berth_core::fence::Reads::Only`]) the same decomposition runs beneath each root
//!   of the policy instead of `/` (each in its canonical form; one beneath a hidden
//!   path gets none), and no name of `/` or the home is listable: another project can
//!   be neither read nor listed.
//! - **Network off**: `socket()` for every family but `AF_UNIX` is refused by seccomp,
//!   and Landlock (ABI ≥ 4) refuses every TCP bind and connect as a second wall.
//! - **Always** a seccomp filter (see `seccomp`), the mark [`peer_is_fenced`] reads, and
//!   the Landlock scopes (ABI ≥ 6): no signals to, and no abstract unix sockets of,
//!   processes outside the fence.
//!
//! What it does **not** guarantee (docs/architecture.md's promise, "The trust model",
//! needs the wiring step too):
//!
//! - `.git/hooks`, `.git/config` and `.berth` inside a writable run directory
//!   (`FencePolicy::protect`) are not protected by Landlock, whose rights pass to
//!   everything beneath a directory. Where the machine allows a mount namespace,
//!   [`binds`] makes those that exist read-only for the run; the guard
//!   (`crate::inject::sidecar::guard`) checks and puts back all of them after it, always.
//! - Pathname unix sockets (Berth's control socket, D-Bus, docker) are reachable below
//!   Landlock ABI 9: Berth's sockets must refuse fenced peers ([`peer_is_fenced`]).
//! - Reads are a snapshot: an entry created after [`prepare`] in a directory that was
//!   decomposed (e.g. a new `~/.foo`) is unreadable for that run.
//! - Write paths that do not exist when [`prepare`] runs get no rule (the caller creates
//!   the kind's state first); explicit write paths are followed if they are symlinks.
//! - Below ABI 4 there is no TCP wall beside seccomp; UDP has only seccomp below ABI 10.
//! - macOS: [`seatbelt`]'s profile of the same policy, run by `sandbox-exec`
//!   (`Prepared::wrap`, on the fork path); nothing there has been run by Berth's tests,
//!   which check the profile as text. Other platforms: none ([`probe`] says so).

use std::path::PathBuf;
use std::sync::OnceLock;

#[cfg(target_os = "linux")]
pub mod audit;
#[cfg(target_os = "linux")]
pub mod binds;
#[cfg(target_os = "linux")]
pub mod caps;
#[cfg(target_os = "linux")]
mod linux;
pub mod seatbelt;
#[cfg(target_os = "linux")]
mod seccomp;

#[cfg(target_os = "linux")]
pub use linux::{ChildFence, Prepared, prepare};

/// Opens the kernel's reports of the denials of `prepared`'s next agent where it gives
/// them ([`audit`]), and has the ruleset applied so that it does; `None` elsewhere.
#[cfg(target_os = "linux")]
pub fn listen_for_denials(prepared: &mut Prepared) -> Option<audit::Listener> {
    let listener = audit::Listener::open(prepared.landlock_abi());
    prepared.log_denials(listener.is_some());
    listener
}

/// A test hook, read once per process: `BERTH_FENCE_PROBE=unavailable` makes [`probe`]
/// report a kernel without the fence, so "fence required but unavailable" can be tested
/// on a kernel that has it; `no-binds` keeps the fence but not its in-place layer
/// (`binds`), so the guard's path is tested too. Other values are ignored (with a
/// warning).
pub const PROBE_ENV: &str = "BERTH_FENCE_PROBE";

/// [`PROBE_ENV`]'s value for the fence without its in-place layer.
pub const NO_BINDS: &str = "no-binds";

/// What the running kernel offers the fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The kernel's Landlock ABI version; 0 when it has none (not built, or not enabled
    /// at boot).
    pub landlock_abi: u32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// macOS: whether `sandbox-exec` is there to run agents inside a Seatbelt profile.
    pub seatbelt: bool,
}

impl Probe {
    /// A kernel with nothing the fence needs.
    pub const UNAVAILABLE: Probe = Probe {
        landlock_abi: 0,
        seccomp: false,
        seatbelt: false,
    };

    /// Whether [`prepare`] can fence on this kernel.
    pub fn available(&self) -> bool {
        (self.landlock_abi > 0 && self.seccomp) || self.seatbelt
    }

    /// The mechanism, for what Berth says of the fence: `Landlock ABI 7`, `Seatbelt`.
    pub fn mechanism(&self) -> String {
        if self.seatbelt {
            "Seatbelt".to_owned()
        } else {
            format!("Landlock ABI {}", self.landlock_abi)
        }
    }
}

/// What the kernel offers, checked once per process (or what [`PROBE_ENV`] says).
pub fn probe() -> Probe {
    static PROBE: OnceLock<Probe> = OnceLock::new();
    *PROBE.get_or_init(|| match std::env::var(PROBE_ENV) {
        // The kernel's fence without the in-place layer (`binds`).
        Ok(value) if value == NO_BINDS => kernel_probe(),
        Ok(value) => parse_probe_override(&value).unwrap_or_else(|| {
            tracing::warn!(
                value,
                "{PROBE_ENV} is a test hook that only knows \"unavailable\" and \"{NO_BINDS}\"; ignored"
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

#[cfg(target_os = "macos")]
fn kernel_probe() -> Probe {
    Probe {
        seatbelt: std::path::Path::new(seatbelt::SANDBOX_EXEC).is_file(),
        ..Probe::UNAVAILABLE
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
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

#[cfg(target_os = "macos")]
mod macos {
    use super::{FenceError, seatbelt};
    use berth_core::LocalPath;
    use berth_core::fence::FencePolicy;

    /// A fence ready to apply: the run's Seatbelt profile. The agent's program is run
    /// inside it by `sandbox-exec` ([`Prepared::wrap`]); nothing is applied in the child.
    #[derive(Debug)]
    pub struct Prepared {
        profile: seatbelt::Profile,
    }

    /// What the fork path's child applies: nothing (`sandbox-exec` applies the
    /// profile before it executes the agent).
    #[derive(Debug)]
    pub struct ChildFence;

    impl Prepared {
        pub(crate) fn child_fence(&self) -> ChildFence {
            ChildFence
        }

        /// Never reused here: a profile is text, made again for each run.
        pub fn reuse(&self, _: &FencePolicy) -> Option<Prepared> {
            None
        }

        /// `program args…` as run inside the profile.
        pub fn wrap(&self, program: &str, args: &[String]) -> seatbelt::Wrapped {
            seatbelt::wrap(&self.profile, program, args)
        }

        /// The profile, for what the run says of its fence.
        pub fn profile(&self) -> &seatbelt::Profile {
            &self.profile
        }
    }

    impl ChildFence {
        pub(crate) fn apply(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The Seatbelt profile of `policy`, with Berth's `sockets` named in it (on macOS
    /// the profile, not the socket, refuses a fenced peer).
    pub fn prepare(policy: &FencePolicy, sockets: &[LocalPath]) -> Result<Prepared, FenceError> {
        if !super::probe().available() {
            return Err(FenceError::Unavailable {
                reason: format!("{} is missing", seatbelt::SANDBOX_EXEC),
            });
        }
        Ok(Prepared {
            profile: seatbelt::Profile::new(policy, sockets),
        })
    }
}

#[cfg(target_os = "macos")]
pub use macos::{ChildFence, Prepared, prepare};

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod unavailable {
    use super::FenceError;
    use berth_core::LocalPath;
    use berth_core::fence::FencePolicy;

    /// A prepared fence: none can exist on this platform.
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

        pub fn reuse(&self, _: &FencePolicy) -> Option<Prepared> {
            match self.never {}
        }
    }

    impl ChildFence {
        pub(crate) fn apply(&self) -> std::io::Result<()> {
            match *self {}
        }
    }

    /// No fence on this platform.
    pub fn prepare(_: &FencePolicy, _: &[LocalPath]) -> Result<Prepared, FenceError> {
        Err(FenceError::Unavailable {
            reason: format!("no fence is built for {}", std::env::consts::OS),
        })
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub use unavailable::{ChildFence, Prepared, prepare};

/// The peer check of Berth's sockets lives with the sockets (`berth_host::peer`, which
/// the server's listeners use too): one home for reading the mark that the fence's
/// seccomp filter sets.
pub use berth_host::peer::{peer_is_fenced, seccomp_filters};

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
                seccomp: true,
                seatbelt: false,
            }
            .available()
        );
        assert!(
            Probe {
                seatbelt: true,
                ..Probe::UNAVAILABLE
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
