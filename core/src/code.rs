//! Stable error codes and the refusal value every rule produces.
//!
//! The codes are part of Berth's contract (CLI `--json`, HTTP error bodies, the browser
//! preview): they never change meaning once published.
//!
//! One table (the `codes!` invocation below) names every code once: its variant, its contract
//! spelling and, where the hint is fixed text, the hint shown with it. The enum,
//! [`ErrorCode::ALL`], [`ErrorCode::as_str`] and [`ErrorCode::hint`] all come from it.
//!
//! A build knows the codes of its own version only, and `ErrorCode` has no catch-all:
//! a code received from a Berth of another version that this build does not know is
//! kept as text where it arrives (the wire types, [`crate::api::ErrorDetail::code`]
//! and [`crate::api::Task::error_code`], hold the spelling), and a surface that needs
//! an `ErrorCode` gets `None` from [`ErrorCode::from_name`] and keeps the spelling in
//! its message instead (see [`ErrorCode::decode`]).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Defines [`ErrorCode`] from one table: `Variant = "spelling", hint;` per code, in
/// contract order (the order of [`ErrorCode::ALL`]).
macro_rules! codes {
    (
        $( $(#[$doc:meta])* $variant:ident = $name:literal, $hint:expr; )*
        @all_codes {
            $( $(#[$more_doc:meta])* $more:ident = $more_name:literal, $more_hint:expr; )*
        }
    ) => {
        /// Every stable error code Berth reports. Serialized as its contract spelling
        /// ([`ErrorCode::as_str`], `snake_case`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )*
            $( $(#[$more_doc])* #[cfg(feature = "all-codes")] $more, )*
        }

        impl ErrorCode {
            /// Every code, in contract order.
            #[cfg(feature = "all-codes")]
            pub const ALL: [ErrorCode; [$($name,)* $($more_name),*].len()] =
                [$(ErrorCode::$variant,)* $(ErrorCode::$more),*];
            /// Every code of this build (the browser's), in contract order.
            #[cfg(not(feature = "all-codes"))]
            pub const ALL: [ErrorCode; [$($name),*].len()] = [$(ErrorCode::$variant),*];

            /// The code as written in JSON and on the command line.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( ErrorCode::$variant => $name, )*
                    $( #[cfg(feature = "all-codes")] ErrorCode::$more => $more_name, )*
                }
            }

            /// The hint shown with the code where it is fixed text (a site that knows
            /// better may say more); `None` where every site builds its hint from the
            /// values at hand (the path, the name, the home).
            pub const fn hint(self) -> Option<&'static str> {
                match self {
                    $( ErrorCode::$variant => $hint, )*
                    $( #[cfg(feature = "all-codes")] ErrorCode::$more => $more_hint, )*
                }
            }
        }
    };
}

codes! {
    // Refusals of a path or a binding (the rules, resolution): their hints name the path.
    PathEmpty = "path_empty", None;
    PathNotAbsolute = "path_not_absolute", None;
    PathInvalid = "path_invalid", None;
    SystemRoot = "system_root", None;
    HomeDirectory = "home_directory", None;
    CredentialDirectory = "credential_directory", None;
    BerthState = "berth_state", None;
    NotFound = "not_found", None;
    NotADirectory = "not_a_directory", None;
    NotOwner = "not_owner", None;
    NotWritable = "not_writable", None;
    PathChanged = "path_changed", None;
    NotAGitRepo = "not_a_git_repo", None;
    OriginCannotBind = "origin_cannot_bind", None;
    DaemonOffline = "daemon_offline", None;
    DaemonMismatch = "daemon_mismatch", None;
    UnknownSession = "unknown_session", Some("`berth session list` shows the sessions");
    UnknownAgent = "unknown_agent", None;
    /// A name in the directory that Berth must write through for a run (the brief's
    /// `CLAUDE.md`, a skill folder's parent) is not a regular file with one link or a
    /// plain directory: a hard link, a symlink, a FIFO. Nothing is written.
    SidecarBlocked = "sidecar_blocked", None;
    // Extension: why a task failed or did not finish, on every failed task.
    /// The agent's program is not installed (not on `PATH`).
    AgentNotFound = "agent_not_found", None;
    /// The agent's program could not be started for another reason.
    AgentStartFailed = "agent_start_failed", None;
    /// The agent exited with a non-zero code (or a signal) without reporting why.
    AgentExited = "agent_exited", None;
    /// The agent reported that its turn failed (an error result, a failed turn).
    AgentError = "agent_error", None;
    /// The agent's own permission system denied what it tried, and nothing it tried
    /// to change went through.
    PermissionDenied = "permission_denied", None;
    /// The settings could not be read, or Berth's files could not be put in place.
    PrepareFailed = "prepare_failed", None;
    /// The directory's lock could not be taken.
    LockFailed = "lock_failed", None;
    /// The settings require the fence (`"fence": "required"`) and this machine's
    /// kernel cannot set it up: nothing ran, nothing was written.
    FenceUnavailable = "fence_unavailable", None;
    /// The task was running when its server or machine stopped.
    Interrupted = "interrupted", None;
    /// Berth itself failed (a bug): the message says where.
    Internal = "internal", Some("see the server's log");

    // Feature `all-codes` (every build but the browser's, whose bundle has a size
    // budget and which produces none of these).
    @all_codes {
    // The HTTP layer's own codes (every surface: the API, the daemon routes, the
    // webhooks, a daemon's forwarded socket).
    /// A request body, query or target that does not parse or is ambiguous.
    BadRequest = "bad_request",
        Some("fix the request body; it must be a JSON object with the documented fields");
    PayloadTooLarge = "payload_too_large", Some("send a smaller body");
    /// A write on the read-only web listener.
    MethodNotAllowed = "method_not_allowed", Some(
        "the web listener is read-only; use the berth CLI (control socket) to change things",
    );
    NotFoundRoute = "not_found_route", Some("see docs/api.md for the routes under /api/v1");
    /// A `Host` header that is not one of the server's addresses (DNS rebinding).
    ForbiddenHost = "forbidden_host", Some("open the UI at the address `berth serve` printed");
    /// No token, or one the server does not know.
    Unauthorized = "unauthorized", Some(
        "open the URL with ?token= from serve.json, or send Authorization: Bearer <token>",
    );
    /// A server without an executor asked to reach a local directory.
    NoExecutor = "no_executor",
        Some("bind directories through `berth serve` on the machine that has them");
    /// A webhook of a platform the server has no credentials for (the hint names it).
    ChannelNotConfigured = "channel_not_configured", None;
    BadSignature = "bad_signature", Some(
        "the request must be signed by the platform with the configured secret, within 300 s",
    );
    /// The server no longer runs the task a daemon reports on (the daemon protocol).
    TaskGone = "task_gone", Some("stop the agent; the server recorded how the task ended");
    /// A daemon finished a task before sending all its events (the daemon protocol).
    EventsMissing = "events_missing",
        Some("send the task's events from the number the server holds, then finish again");
    TokenExists = "token_exists", Some(
        "choose another name, or revoke the old token first with \
         `berth daemon token revoke NAME`",
    );
    UnknownToken = "unknown_token", Some("`berth daemon token list` shows the tokens");
    OwnerOnly = "owner_only", Some(
        "an admin may read every session, but an agent runs only for its session's owner",
    );
    AdminOnly = "admin_only",
        Some("ask an admin of this server (berth-server member add NAME --admin makes one)");
    UnknownMember = "unknown_member", Some("`berth-server member list` shows the members");
    MemberExists = "member_exists",
        Some("choose another name (a removed member's name is not reused)");
    MemberProtected = "member_protected", Some(
        "restart berth-server for a new first-admin token; other admins can be removed",
    );
    UnknownTask = "unknown_task", Some("`berth task list` shows the tasks");
    AmbiguousId = "ambiguous_id", Some("give more characters of the id");
    AgentExists = "agent_exists", Some("choose another name");
    UnknownProject = "unknown_project", Some("create it with `berth project add NAME`");
    ProjectExists = "project_exists", Some("choose another name");
    /// An agent that sessions still name (the hint says how to change it in place).
    AgentInUse = "agent_in_use", None;
    /// A session with unfinished tasks (the hint names one to cancel).
    SessionBusy = "session_busy", None;
    /// The database cannot be reached, or the replicas are electing a leader (503).
    Unavailable = "unavailable",
        Some("the server's database is not reachable right now; try again in a few seconds");
    /// A daemon's forwarded socket could not forward a request to its server.
    BadGateway = "bad_gateway", Some("check the server's log");
    /// A daemon's forwarded socket found its server not answering.
    ServerUnreachable = "server_unreachable", None;

    // The CLI's own codes (`berth … --json`).
    /// No server answers on the home's control socket (the hint names the home).
    NotRunning = "not_running", None;
    /// The trust list cannot be read or written.
    TrustList = "trust_list", None;
    /// A daemon URL that is plain http off loopback.
    PlainHttp = "plain_http", None;
    /// An option of berth's own after `--command` (exit 2).
    OptionInCommand = "option_in_command", None;
    /// Revoking trust of a directory that is not trusted.
    NotTrusted = "not_trusted", Some("berth trust list shows the trusted directories");
    /// A question nobody can answer (stdin is not a terminal; exit 2).
    ConfirmationNeeded = "confirmation_needed", None;
    /// Undoing a task whose files changed since (without `--force`).
    ChangedSince = "changed_since", None;
    /// A settings file that cannot be used as written.
    SettingsInvalid = "settings_invalid",
        Some("fix the settings file (berth settings check FILE)");
    /// A settings file that is not a regular file (a directory, a FIFO, a link).
    NotARegularFile = "not_a_regular_file",
        Some("replace it with a regular file (a symbolic link to one is fine), or remove it");
    /// A settings file larger than Berth reads.
    FileTooLarge = "file_too_large", Some("shorten the file, or remove it");
    /// A settings file that cannot be read.
    Unreadable = "unreadable", Some("check the file's permissions, or remove it");

    // Approvals (issue 54): the `ask` policy's requests and their answers.
    /// An approval id that names no request (or one of another member's sessions).
    UnknownApproval = "unknown_approval", Some("`berth approvals` lists what waits");
    /// A second answer to a request already decided (the message says how and by whom).
    AlreadyDecided = "already_decided", Some("`berth approvals --all` shows every decision");
    /// An answer after the request's deadline: it was denied as timed out.
    Expired = "expired", Some(
        "the agent was told nobody answered in time; send the message again to retry",
    );
    /// A request nobody answered before its deadline, denied as such (never a person's
    /// "no"): on the task's approvals and its denials.
    ApprovalTimeout = "approval_timeout",
        Some("answer sooner, or raise \"ask\": {\"deadline_secs\": …} in the user settings");
    /// "Always" for a request no exact rule can be made of (a compound command,
    /// several paths).
    NoExactRule = "no_exact_rule",
        Some("answer this one without --always, or write an ask.allow rule in the settings");
    }
}

impl ErrorCode {
    /// Parses a code from its contract spelling; `None` for a spelling this build
    /// does not know (another version's code).
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == name)
    }

    /// A code received as text (an error body, another version's answer): the code if
    /// this build knows it, and the message to show. An unknown code is not lost: it
    /// is kept at the end of the message, `message [code]`, and the code is `None`.
    pub fn decode(name: Option<&str>, message: String) -> (Option<ErrorCode>, String) {
        match name {
            None => (None, message),
            Some(name) => match ErrorCode::from_name(name) {
                Some(code) => (Some(code), message),
                None => (None, format!("{message} [{name}]")),
            },
        }
    }
}

// By hand rather than derived: the spellings are the table's, once (a derive would add
// a second and third copy of every name, and the browser bundle has a size budget).
impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ErrorCode, D::Error> {
        let name = std::borrow::Cow::<'de, str>::deserialize(d)?;
        ErrorCode::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {name:?}")))
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
