//! One error type for every HTTP surface (the API, the daemon routes, the webhooks):
//! it knows its HTTP status and renders the contract's shape,
//! `{"error": {"code", "message", "hint"}}`.

use crate::store::StoreError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use berth_core::api::ErrorBody;
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
    /// A parameter's value that is not one it takes (code `bad_request`), with what
    /// it takes.
    #[error("{message}")]
    BadValue { message: String, hint: String },
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

/// The HTTP status of a contract refusal code (and of every other code, as the
/// surfaces answer it).
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
        // The HTTP layer's codes, as `ApiError` answers them.
        ErrorCode::BadRequest | ErrorCode::AmbiguousId => StatusCode::BAD_REQUEST,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::NotFoundRoute
        | ErrorCode::ChannelNotConfigured
        | ErrorCode::UnknownToken
        | ErrorCode::UnknownMember
        | ErrorCode::UnknownTask
        | ErrorCode::UnknownApproval
        | ErrorCode::UnknownProject => StatusCode::NOT_FOUND,
        ErrorCode::AlreadyDecided | ErrorCode::NoExactRule => StatusCode::CONFLICT,
        ErrorCode::Expired => StatusCode::GONE,
        ErrorCode::ApprovalTimeout => StatusCode::REQUEST_TIMEOUT,
        ErrorCode::ForbiddenHost | ErrorCode::OwnerOnly | ErrorCode::AdminOnly => {
            StatusCode::FORBIDDEN
        }
        ErrorCode::Unauthorized | ErrorCode::BadSignature => StatusCode::UNAUTHORIZED,
        ErrorCode::NoExecutor | ErrorCode::Unavailable | ErrorCode::ServerUnreachable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ErrorCode::TaskGone
        | ErrorCode::EventsMissing
        | ErrorCode::TokenExists
        | ErrorCode::MemberExists
        | ErrorCode::MemberProtected
        | ErrorCode::AgentExists
        | ErrorCode::ProjectExists
        | ErrorCode::AgentInUse
        | ErrorCode::SessionBusy => StatusCode::CONFLICT,
        ErrorCode::BadGateway => StatusCode::BAD_GATEWAY,
        // The CLI's own codes never come from a server; were one refused with them.
        ErrorCode::NotRunning => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::PlainHttp | ErrorCode::OptionInCommand | ErrorCode::ConfirmationNeeded => {
            StatusCode::BAD_REQUEST
        }
        ErrorCode::ChangedSince => StatusCode::CONFLICT,
        ErrorCode::TrustList
        | ErrorCode::NotTrusted
        | ErrorCode::SettingsInvalid
        | ErrorCode::NotARegularFile
        | ErrorCode::FileTooLarge
        | ErrorCode::Unreadable => StatusCode::UNPROCESSABLE_ENTITY,
    }
}

/// A code with its fixed hint ([`ErrorCode::hint`]).
fn fixed(status: StatusCode, code: ErrorCode) -> (StatusCode, ErrorCode, String) {
    (status, code, code.hint().unwrap_or_default().to_owned())
}

impl ApiError {
    /// Status, stable code and hint.
    fn parts(&self) -> (StatusCode, ErrorCode, String) {
        match self {
            ApiError::Refused(r) => (refusal_status(r.code), r.code, r.hint.clone()),
            ApiError::Store(e) => store_parts(e),
            ApiError::BadRequest { .. } => fixed(StatusCode::BAD_REQUEST, ErrorCode::BadRequest),
            ApiError::BadQuery { .. } => (
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                "fix the query string; its parameters take the documented values \
                 (`after` a transcript seq, `stream` true or false)"
                    .into(),
            ),
            ApiError::BadValue { hint, .. } => {
                (StatusCode::BAD_REQUEST, ErrorCode::BadRequest, hint.clone())
            }
            ApiError::PayloadTooLarge { .. } => {
                fixed(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::PayloadTooLarge)
            }
            ApiError::MethodNotAllowed { .. } => {
                fixed(StatusCode::METHOD_NOT_ALLOWED, ErrorCode::MethodNotAllowed)
            }
            ApiError::NoRoute { .. } => fixed(StatusCode::NOT_FOUND, ErrorCode::NotFoundRoute),
            ApiError::ForbiddenHost { .. } => {
                fixed(StatusCode::FORBIDDEN, ErrorCode::ForbiddenHost)
            }
            ApiError::AmbiguousTarget { .. } => (
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                "send exactly one Host header, and the path alone as the request target \
                 (`GET /api/v1/...`, not `GET http://host/api/v1/...`)"
                    .into(),
            ),
            ApiError::Unauthorized => fixed(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized),
            ApiError::NoExecutor => fixed(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NoExecutor),
            ApiError::ChannelNotConfigured { platform } => (
                StatusCode::NOT_FOUND,
                ErrorCode::ChannelNotConfigured,
                format!(
                    "set BERTH_{}_* (or `channels` in the user settings) and restart",
                    platform.to_ascii_uppercase()
                ),
            ),
            ApiError::BadSignature { .. } => {
                fixed(StatusCode::UNAUTHORIZED, ErrorCode::BadSignature)
            }
            ApiError::DaemonAuth(_) => (
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "create a token on the server with `berth daemon token create NAME` and start \
                 `berth daemon --server URL --token TOKEN` with it; a token serves one machine"
                    .into(),
            ),
            ApiError::TaskGone(_) => fixed(StatusCode::CONFLICT, ErrorCode::TaskGone),
            ApiError::EventsMissing { .. } => fixed(StatusCode::CONFLICT, ErrorCode::EventsMissing),
            ApiError::TokenExists { .. } => fixed(StatusCode::CONFLICT, ErrorCode::TokenExists),
            ApiError::UnknownToken { .. } => fixed(StatusCode::NOT_FOUND, ErrorCode::UnknownToken),
            ApiError::OwnerOnly { .. } => fixed(StatusCode::FORBIDDEN, ErrorCode::OwnerOnly),
            ApiError::AdminOnly { .. } => fixed(StatusCode::FORBIDDEN, ErrorCode::AdminOnly),
            ApiError::UnknownMember { .. } => {
                fixed(StatusCode::NOT_FOUND, ErrorCode::UnknownMember)
            }
            ApiError::MemberExists { .. } => fixed(StatusCode::CONFLICT, ErrorCode::MemberExists),
            ApiError::MemberProtected { .. } => {
                fixed(StatusCode::CONFLICT, ErrorCode::MemberProtected)
            }
            ApiError::Internal(_) => fixed(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        }
    }

    /// The contract's error document.
    pub fn body(&self) -> ErrorBody {
        let (_, code, hint) = self.parts();
        ErrorBody::new(code, self.to_string(), hint)
    }

    pub fn status(&self) -> StatusCode {
        self.parts().0
    }
}

fn store_parts(e: &StoreError) -> (StatusCode, ErrorCode, String) {
    match e {
        StoreError::UnknownSession { .. } => {
            fixed(StatusCode::NOT_FOUND, ErrorCode::UnknownSession)
        }
        StoreError::UnknownTask { .. } => fixed(StatusCode::NOT_FOUND, ErrorCode::UnknownTask),
        StoreError::Ambiguous { .. } => fixed(StatusCode::BAD_REQUEST, ErrorCode::AmbiguousId),
        StoreError::UnknownAgent { known, .. } => (
            StatusCode::NOT_FOUND,
            ErrorCode::UnknownAgent,
            if known.is_empty() {
                "add one with `berth agent add NAME --kind claude|codex|command`".into()
            } else {
                format!("name one of: {}", known.join(", "))
            },
        ),
        StoreError::AgentExists { .. } => fixed(StatusCode::CONFLICT, ErrorCode::AgentExists),
        StoreError::UnknownProject { .. } => {
            fixed(StatusCode::NOT_FOUND, ErrorCode::UnknownProject)
        }
        StoreError::ProjectExists { .. } => fixed(StatusCode::CONFLICT, ErrorCode::ProjectExists),
        StoreError::AgentInUse { name, sessions } => (
            StatusCode::CONFLICT,
            ErrorCode::AgentInUse,
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
            ErrorCode::SessionBusy,
            format!(
                "cancel it first: berth task cancel {}",
                tasks.first().map_or("ID", |t| &t[..t.len().min(8)])
            ),
        ),
        StoreError::Approval { code, .. } => (
            refusal_status(*code),
            *code,
            code.hint().unwrap_or_default().to_owned(),
        ),
        StoreError::BadChange(_) => (
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            "give at least one change: a non-empty title, archived, a command or permissions"
                .into(),
        ),
        StoreError::Unavailable(_) => {
            fixed(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable)
        }
        #[cfg(feature = "postgres")]
        StoreError::Postgres(_) => fixed(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
        StoreError::Sqlite(_)
        | StoreError::Migration { .. }
        | StoreError::Corrupt(_)
        | StoreError::Worker(_)
        | StoreError::Files { .. } => fixed(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal),
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
