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
}

impl ErrorCode {
    /// Every code, in contract order.
    pub const ALL: [ErrorCode; 18] = [
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
