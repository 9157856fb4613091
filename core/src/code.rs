//! Stable error codes and the refusal value every rule produces.
//!
//! The codes are part of Berth's contract (CLI `--json`, HTTP error bodies, the browser
//! preview): they never change meaning once published.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every stable error code Berth reports. Serialized in `snake_case`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    PathEmpty,
    PathNotAbsolute,
    PathInvalid,
    SystemRoot,
    HomeDirectory,
    CredentialDirectory,
    BerthState,
    NotFound,
    NotADirectory,
    NotOwner,
    NotWritable,
    PathChanged,
    NotAGitRepo,
    OriginCannotBind,
    DaemonOffline,
    DaemonMismatch,
    UnknownSession,
    UnknownAgent,
    /// A name in the directory that Berth must write through for a run (the brief's
    /// `CLAUDE.md`, a skill folder's parent) is not a regular file with one link or a
    /// plain directory: a hard link, a symlink, a FIFO. Nothing is written.
    SidecarBlocked,
    // Extension: why a task failed or did not finish, on every failed task.
    /// The agent's program is not installed (not on `PATH`).
    AgentNotFound,
    /// The agent's program could not be started for another reason.
    AgentStartFailed,
    /// The agent exited with a non-zero code (or a signal) without reporting why.
    AgentExited,
    /// The agent reported that its turn failed (an error result, a failed turn).
    AgentError,
    /// The agent's own permission system denied what it tried, and nothing it tried
    /// to change went through.
    PermissionDenied,
    /// The settings could not be read, or Berth's files could not be put in place.
    PrepareFailed,
    /// The directory's lock could not be taken.
    LockFailed,
    /// The settings require the fence (`"fence": "required"`) and this machine's
    /// kernel cannot set it up: nothing ran, nothing was written.
    FenceUnavailable,
    /// The task was running when its server or machine stopped.
    Interrupted,
    /// Berth itself failed (a bug): the message says where.
    Internal,
}

impl ErrorCode {
    /// Every code, in contract order.
    pub const ALL: [ErrorCode; 29] = [
        ErrorCode::PathEmpty,
        ErrorCode::PathNotAbsolute,
        ErrorCode::PathInvalid,
        ErrorCode::SystemRoot,
        ErrorCode::HomeDirectory,
        ErrorCode::CredentialDirectory,
        ErrorCode::BerthState,
        ErrorCode::NotFound,
        ErrorCode::NotADirectory,
        ErrorCode::NotOwner,
        ErrorCode::NotWritable,
        ErrorCode::PathChanged,
        ErrorCode::NotAGitRepo,
        ErrorCode::OriginCannotBind,
        ErrorCode::DaemonOffline,
        ErrorCode::DaemonMismatch,
        ErrorCode::UnknownSession,
        ErrorCode::UnknownAgent,
        ErrorCode::SidecarBlocked,
        ErrorCode::AgentNotFound,
        ErrorCode::AgentStartFailed,
        ErrorCode::AgentExited,
        ErrorCode::AgentError,
        ErrorCode::PermissionDenied,
        ErrorCode::PrepareFailed,
        ErrorCode::LockFailed,
        ErrorCode::FenceUnavailable,
        ErrorCode::Interrupted,
        ErrorCode::Internal,
    ];

    /// The code as written in JSON and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::PathEmpty => "path_empty",
            ErrorCode::PathNotAbsolute => "path_not_absolute",
            ErrorCode::PathInvalid => "path_invalid",
            ErrorCode::SystemRoot => "system_root",
            ErrorCode::HomeDirectory => "home_directory",
            ErrorCode::CredentialDirectory => "credential_directory",
            ErrorCode::BerthState => "berth_state",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NotADirectory => "not_a_directory",
            ErrorCode::NotOwner => "not_owner",
            ErrorCode::NotWritable => "not_writable",
            ErrorCode::PathChanged => "path_changed",
            ErrorCode::NotAGitRepo => "not_a_git_repo",
            ErrorCode::OriginCannotBind => "origin_cannot_bind",
            ErrorCode::DaemonOffline => "daemon_offline",
            ErrorCode::DaemonMismatch => "daemon_mismatch",
            ErrorCode::UnknownSession => "unknown_session",
            ErrorCode::UnknownAgent => "unknown_agent",
            ErrorCode::SidecarBlocked => "sidecar_blocked",
            ErrorCode::AgentNotFound => "agent_not_found",
            ErrorCode::AgentStartFailed => "agent_start_failed",
            ErrorCode::AgentExited => "agent_exited",
            ErrorCode::AgentError => "agent_error",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::PrepareFailed => "prepare_failed",
            ErrorCode::LockFailed => "lock_failed",
            ErrorCode::FenceUnavailable => "fence_unavailable",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::Internal => "internal",
        }
    }

    /// Parses a code from its contract spelling.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why Berth will not use a path (or run a task): a stable code, a message that names
/// the path and the rule, and a hint that says what to do instead.
///
/// Refusals are values: every rule returns one instead of panicking, and every surface
/// (CLI, HTTP, browser) shows the same three fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
    pub hint: String,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
            hint: hint.into(),
        }
    }
}
