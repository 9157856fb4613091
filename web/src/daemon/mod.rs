//! Remote daemons: machines that run tasks for this server (`berth daemon`).

mod registry;
pub mod wire;

pub use crate::secret::token_hash;
pub use registry::{AuthError, Caller, Daemons, Finished, Gone, MachineHome, TaskCallError};

use std::time::Duration;

/// The default heartbeat window: a daemon silent this long is offline.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(15);
/// The longest a daemon waits between two attempts to reach its server while it cannot
/// (with up to a fifth more of jitter): `berth daemon` keeps to it. A task the last
/// leader handed to a daemon is kept this long past the window for that daemon to
/// come back to the new one.
pub const DAEMON_RETRY_CAP: Duration = Duration::from_secs(15);
/// The default longest claim held open.
pub const DEFAULT_CLAIM_WAIT: Duration = Duration::from_secs(20);

/// How the server treats remote daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaemonConfig {
    /// No heartbeat (or claim) for this long: the machine is offline, its running tasks
    /// end `interrupted` and its sessions' tasks wait. Heartbeats come every third of it.
    pub window: Duration,
    /// The longest a claim is held open before answering 204.
    pub claim_wait: Duration,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            window: DEFAULT_WINDOW,
            claim_wait: DEFAULT_CLAIM_WAIT,
        }
    }
}

impl DaemonConfig {
    /// The defaults, overridden by `BERTH_DAEMON_WINDOW_MS` and
    /// `BERTH_DAEMON_CLAIM_WAIT_MS` (milliseconds; tests shorten them).
    pub fn from_env() -> DaemonConfig {
        let ms = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|v| *v > 0)
                .map(Duration::from_millis)
        };
        let d = DaemonConfig::default();
        DaemonConfig {
            window: ms("BERTH_DAEMON_WINDOW_MS").unwrap_or(d.window),
            claim_wait: ms("BERTH_DAEMON_CLAIM_WAIT_MS").unwrap_or(d.claim_wait),
        }
    }
}
