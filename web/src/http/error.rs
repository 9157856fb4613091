//! One error type for every HTTP surface (the API, the daemon routes, the webhooks):
//! it knows its HTTP status and renders the contract's shape,
//! `{"error": {"code", "message", "hint"}}`.

use crate::store::StoreError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use berth_core::api::{ErrorBody, ErrorDetail};
use berth_core::{ErrorCode, Refusal};

/// Everything an API call can answer besides success.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A refusal with a stable contract code (path rules, validator, resolution).
    #[error("{0}")]
    Refused(Refusal),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{message}")]
    BadRequest { message: String },
    /// A query string that does not parse (code `bad_request`).
    #[error("{message}")]
    BadQuery { message: String },
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("{method} is not allowed on this listener")]
    MethodNotAllowed { method: String },
    #[error("no route for {path}")]
    NoRoute { path: String },
    #[error("the Host header {host:?} is not one of this server's addresses")]
    ForbiddenHost { host: String },
    /// A request that names its server more than one way (code `bad_request`).
    #[error("the request is ambiguous about which server it is for: {what}")]
    AmbiguousTarget { what: String },
    #[error("a valid token is required")]
    Unauthorized,
    #[error("this server has no executor, so it cannot reach local directories")]
    NoExecutor,
    #[error("the {platform} webhook is not configured on this server")]
    ChannelNotConfigured { platform: &'static str },
    #[error("the {platform} request is not authentic: {reason}")]
    BadSignature {
        platform: &'static str,
        reason: String,
    },
    #[error("{0}")]
    DaemonAuth(#[from] crate::daemon::AuthError),
    #[error("{0}")]
    TaskGone(#[from] crate::daemon::Gone),
    #[error("the server holds {received} events of the task; send the rest before finishing it")]
    EventsMissing { received: u64 },
    #[error("a daemon token named {name:?} exists")]
    TokenExists { name: String },
    #[error("no daemon token is named {name:?}")]
    UnknownToken { name: String },
    #[error("only {owner}, who owns the session, can {what}")]
    OwnerOnly { owner: String, what: &'static str },
    #[error("only an admin can {what}")]
    AdminOnly { what: &'static str },
    #[error("no member is named {name:?}")]
    UnknownMember { name: String },
    #[error("a member named {name:?} exists (or existed)")]
    MemberExists { name: String },
    #[error(
        "the member {name:?} is the server's first admin, whose token is the one in serve.json"
    )]
    MemberProtected { name: String },
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        ApiError::Refused(r)
    }
}

/// The HTTP status of a contract refusal code.
pub fn refusal_status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::PathEmpty | ErrorCode::PathNotAbsolute | ErrorCode::PathInvalid => {
            StatusCode::BAD_REQUEST
        }
        ErrorCode::SystemRoot
        | ErrorCode::HomeDirectory
        | ErrorCode::CredentialDirectory
        | ErrorCode::BerthState
        | ErrorCode::NotFound
        | ErrorCode::NotADirectory
        | ErrorCode::NotOwner
        | ErrorCode::NotWritable
        | ErrorCode::PathChanged
        | ErrorCode::NotAGitRepo
        | ErrorCode::SidecarBlocked => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::OriginCannotBind => StatusCode::FORBIDDEN,
        ErrorCode::DaemonOffline | ErrorCode::FenceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::DaemonMismatch => StatusCode::CONFLICT,
        ErrorCode::UnknownSession | ErrorCode::UnknownAgent => StatusCode::NOT_FOUND,
        ErrorCode::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorCode::LockFailed | ErrorCode::Interrupted => StatusCode::CONFLICT,
        ErrorCode::AgentNotFound
        | ErrorCode::AgentStartFailed
        | ErrorCode::AgentExited
        | ErrorCode::AgentError
        | ErrorCode::PrepareFailed
        | ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ApiError {
    /// Status, stable code and hint.
    fn parts(&self) -> (StatusCode, &'static str, String) {
        match self {
            ApiError::Refused(r) => (refusal_status(r.code), r.code.as_str(), r.hint.clone()),
            ApiError::Store(e) => store_parts(e),
            ApiError::BadRequest { .. } => (
                StatusCode::BAD_REQUEST,
                "bad_request",
                "fix the request body; it must be a JSON object with the documented fields".into(),
            ),
            ApiError::BadQuery { .. } => (
                StatusCode::BAD_REQUEST,
                "bad_request",
                "fix the query string; its parameters take the documented values \
                 (`after` a transcript seq, `stream` true or false)"
                    .into(),
            ),
            ApiError::PayloadTooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "send a smaller body".into(),
            ),
            ApiError::MethodNotAllowed { .. } => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "the web listener is read-only; use the berth CLI (control socket) to change things"
                    .into(),
            ),
            ApiError::NoRoute { .. } => (
                StatusCode::NOT_FOUND,
                "not_found_route",
                "see docs/api.md for the routes under /api/v1".into(),
            ),
            ApiError::ForbiddenHost { .. } => (
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "open the UI at the address `berth serve` printed".into(),
            ),
            ApiError::AmbiguousTarget { .. } => (
                StatusCode::BAD_REQUEST,
                "bad_request",
                "send exactly one Host header, and the path alone as the request target \
                 (`GET /api/v1/...`, not `GET http://host/api/v1/...`)"
                    .into(),
            ),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "open the URL with ?token= from serve.json, or send Authorization: Bearer <token>"
                    .into(),
            ),
            ApiError::NoExecutor => (
                StatusCode::SERVICE_UNAVAILABLE,
                "no_executor",
                "bind directories through `berth serve` on the machine that has them".into(),
            ),
            ApiError::ChannelNotConfigured { platform } => (
                StatusCode::NOT_FOUND,
                "channel_not_configured",
                format!(
                    "set BERTH_{}_* (or `channels` in the user settings) and restart",
                    platform.to_ascii_uppercase()
                ),
            ),
            ApiError::BadSignature { .. } => (
                StatusCode::UNAUTHORIZED,
                "bad_signature",
                "the request must be signed by the platform with the configured secret, \
                 within 300 s"
                    .into(),
            ),
            ApiError::DaemonAuth(_) => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "create a token on the server with `berth daemon token create NAME` and start \
                 `berth daemon --server URL --token TOKEN` with it; a token serves one machine"
                    .into(),
            ),
            ApiError::TaskGone(_) => (
                StatusCode::CONFLICT,
                crate::daemon::wire::TASK_GONE,
                "stop the agent; the server recorded how the task ended".into(),
            ),
            ApiError::EventsMissing { .. } => (
                StatusCode::CONFLICT,
                crate::daemon::wire::EVENTS_MISSING,
                "send the task's events from the number the server holds, then finish again"
                    .into(),
            ),
            ApiError::TokenExists { .. } => (
                StatusCode::CONFLICT,
                "token_exists",
                "choose another name, or revoke the old token first with \
                 `berth daemon token revoke NAME`"
                    .into(),
            ),
            ApiError::UnknownToken { .. } => (
                StatusCode::NOT_FOUND,
                "unknown_token",
                "`berth daemon token list` shows the tokens".into(),
            ),
            ApiError::OwnerOnly { .. } => (
                StatusCode::FORBIDDEN,
                "owner_only",
                "an admin may read every session, but an agent runs only for its session's owner"
                    .into(),
            ),
            ApiError::AdminOnly { .. } => (
                StatusCode::FORBIDDEN,
                "admin_only",
                "ask an admin of this server (berth-server member add NAME --admin makes one)"
                    .into(),
            ),
            ApiError::UnknownMember { .. } => (
                StatusCode::NOT_FOUND,
                "unknown_member",
                "`berth-server member list` shows the members".into(),
            ),
            ApiError::MemberExists { .. } => (
                StatusCode::CONFLICT,
                "member_exists",
                "choose another name (a removed member's name is not reused)".into(),
            ),
            ApiError::MemberProtected { .. } => (
                StatusCode::CONFLICT,
                "member_protected",
                "restart berth-server for a new first-admin token; other admins can be removed"
                    .into(),
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "see the server's log".into(),
            ),
        }
    }

    /// The contract's error document.
    pub fn body(&self) -> ErrorBody {
        let (_, code, hint) = self.parts();
        ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.to_string(),
                hint,
            },
        }
    }

    pub fn status(&self) -> StatusCode {
        self.parts().0
    }
}

fn store_parts(e: &StoreError) -> (StatusCode, &'static str, String) {
    match e {
        StoreError::UnknownSession { .. } => (
            StatusCode::NOT_FOUND,
            ErrorCode::UnknownSession.as_str(),
            "`berth session list` shows the sessions".into(),
        ),
        StoreError::UnknownTask { .. } => (
            StatusCode::NOT_FOUND,
            "unknown_task",
            "`berth task list` shows the tasks".into(),
        ),
        StoreError::Ambiguous { .. } => (
            StatusCode::BAD_REQUEST,
            "ambiguous_id",
            "give more characters of the id".into(),
        ),
        StoreError::UnknownAgent { known, .. } => (
            StatusCode::NOT_FOUND,
            ErrorCode::UnknownAgent.as_str(),
            if known.is_empty() {
                "add one with `berth agent add NAME --kind claude|codex|command`".into()
            } else {
                format!("name one of: {}", known.join(", "))
            },
        ),
        StoreError::AgentExists { .. } => (
            StatusCode::CONFLICT,
            "agent_exists",
            "choose another name".into(),
        ),
        StoreError::UnknownProject { .. } => (
            StatusCode::NOT_FOUND,
            "unknown_project",
            "create it with `berth project add NAME`".into(),
        ),
        StoreError::ProjectExists { .. } => (
            StatusCode::CONFLICT,
            "project_exists",
            "choose another name".into(),
        ),
        StoreError::AgentInUse { name, sessions } => (
            StatusCode::CONFLICT,
            "agent_in_use",
            format!(
                "delete those sessions first (`berth session delete ID`; an archived session \
                 still names its agent), or change the agent in place with \
                 `berth agent edit {name} --command ...`{}",
                if sessions.len() > 1 {
                    " (it applies to all of them)"
                } else {
                    ""
                }
            ),
        ),
        StoreError::SessionBusy { tasks, .. } => (
            StatusCode::CONFLICT,
            "session_busy",
            format!(
                "cancel it first: berth task cancel {}",
                tasks.first().map_or("ID", |t| &t[..t.len().min(8)])
            ),
        ),
        StoreError::BadChange(_) => (
            StatusCode::BAD_REQUEST,
            "bad_request",
            "give at least one change: a non-empty title, archived, a command or permissions"
                .into(),
        ),
        StoreError::Unavailable(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "the server's database is not reachable right now; try again in a few seconds".into(),
        ),
        #[cfg(feature = "postgres")]
        StoreError::Postgres(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "see the server's log".into(),
        ),
        StoreError::Sqlite(_)
        | StoreError::Migration { .. }
        | StoreError::Corrupt(_)
        | StoreError::Worker(_)
        | StoreError::Files { .. } => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "see the server's log".into(),
        ),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut res = (status, Json(self.body())).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // The database is away for a moment (a restart): say when to try again.
            res.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        res
    }
}
