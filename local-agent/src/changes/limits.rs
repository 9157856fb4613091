//! How much the change record keeps.

use std::time::Duration;

/// How much the change record keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Files larger than this are not recorded (listed as skipped).
    pub max_file_bytes: u64,
    /// Tasks whose records are kept per directory.
    pub keep: usize,
    /// Records older than this are dropped.
    pub max_age: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_file_bytes: 10 * 1024 * 1024,
            keep: 200,
            max_age: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

impl Limits {
    /// The defaults, with what the user settings' `snapshots` set.
    pub fn from_settings(s: &berth_core::settings::SnapshotLimits) -> Limits {
        let d = Limits::default();
        Limits {
            max_file_bytes: s
                .max_file_mb
                .map_or(d.max_file_bytes, |mb| mb * 1024 * 1024),
            keep: s
                .keep
                .map_or(d.keep, |k| usize::try_from(k).unwrap_or(usize::MAX)),
            max_age: s
                .max_age_days
                .map_or(d.max_age, |days| Duration::from_secs(days * 24 * 3600)),
        }
    }
}
