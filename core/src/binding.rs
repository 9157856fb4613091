//! What a session's binding is: a directory on one machine, used in one mode.
//!
//! Two views exist. [`Binding`] carries the real path and exists only with the
//! `local-binding` feature; [`BindingView`] is the privacy-stripped read view that every
//! build has (the browser previews with it). Resolution is written once over
//! [`BindingFacts`], so both drive the same code.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A machine's id, defined with the other ids in [`crate::ids`] and named here too,
/// where bindings have always reached it.
pub use crate::ids::MachineId;

/// How a bound directory is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BindMode {
    /// The agent works in the directory itself.
    #[default]
    InPlace,
    /// The agent works in a per-session git worktree of the directory.
    Worktree,
}

impl BindMode {
    /// The contract spelling: `in-place` or `worktree`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BindMode::InPlace => "in-place",
            BindMode::Worktree => "worktree",
        }
    }

    /// Parses the contract spelling.
    pub fn from_name(name: &str) -> Option<BindMode> {
        match name {
            "in-place" | "in_place" | "inplace" => Some(BindMode::InPlace),
            "worktree" => Some(BindMode::Worktree),
            _ => None,
        }
    }
}

impl fmt::Display for BindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a binding as last observed, shown wherever the session appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BindingState {
    /// Validated and usable.
    #[default]
    Ok,
    /// The directory no longer exists.
    Missing,
    /// The path now names another directory than the one validated.
    Changed,
    /// A task waits for another run in the same directory to finish.
    WaitingLock,
    /// The bound machine is offline; tasks wait for it.
    MachineOffline,
}

impl BindingState {
    /// Every state.
    pub const ALL: [BindingState; 5] = [
        BindingState::Ok,
        BindingState::Missing,
        BindingState::Changed,
        BindingState::WaitingLock,
        BindingState::MachineOffline,
    ];

    /// Parses the contract spelling.
    pub fn from_name(name: &str) -> Option<BindingState> {
        BindingState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            BindingState::Ok => "ok",
            BindingState::Missing => "missing",
            BindingState::Changed => "changed",
            BindingState::WaitingLock => "waiting_lock",
            BindingState::MachineOffline => "machine_offline",
        }
    }
}

/// The read view of a binding: everything but the real path. Exists in every build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindingView {
    /// The privacy-stripped directory, e.g. `~/code/app`.
    pub display: String,
    /// The bound machine's id.
    pub daemon: MachineId,
    /// The bound machine's human name.
    pub daemon_name: String,
    pub mode: BindMode,
    pub state: BindingState,
}

/// A session's binding with its real path: only where local paths may exist.
#[cfg(feature = "local-binding")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub dir: crate::path::LocalPath,
    pub daemon: MachineId,
    pub mode: BindMode,
}

/// What resolution needs to know of a binding, whichever view carries it.
pub trait BindingFacts {
    /// How the directory is named in a resolution: the real path, or its display.
    type Dir: Clone + fmt::Debug + PartialEq;
    fn machine(&self) -> &MachineId;
    fn mode(&self) -> BindMode;
    fn dir(&self) -> Self::Dir;
}

impl BindingFacts for BindingView {
    type Dir = String;
    fn machine(&self) -> &MachineId {
        &self.daemon
    }
    fn mode(&self) -> BindMode {
        self.mode
    }
    fn dir(&self) -> String {
        self.display.clone()
    }
}

#[cfg(feature = "local-binding")]
impl BindingFacts for Binding {
    type Dir = crate::path::LocalPath;
    fn machine(&self) -> &MachineId {
        &self.daemon
    }
    fn mode(&self) -> BindMode {
        self.mode
    }
    fn dir(&self) -> crate::path::LocalPath {
        self.dir.clone()
    }
}
