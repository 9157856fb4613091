//! The daemon's retry schedules, on [`berth_web::backoff`].

use std::time::Duration;

pub use berth_web::backoff::{Backoff, human};

/// Events and finishes: 100 ms doubling to 5 s.
pub const TASK_BASE: Duration = Duration::from_millis(100);
pub const TASK_CAP: Duration = Duration::from_secs(5);
/// Registering and claiming while the server is away: 500 ms doubling to 15 s (the
/// server counts on it: a new leader waits that long past its window for a daemon
/// running a task the last leader handed it).
pub const LINK_BASE: Duration = Duration::from_millis(500);
pub const LINK_CAP: Duration = berth_web::daemon::DAEMON_RETRY_CAP;
