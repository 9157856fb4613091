//! The JSON documents of Berth's contract (docs/api.md, "The contract"), defined once.
//!
//! The CLI, the server and the browser all read and write these types, so a field
//! cannot drift between surfaces. Documents that carry a local path exist only with
//! the `local-binding` feature, and every request type denies unknown fields: a cloud
//! build handed a `dir` or a `binding` refuses it instead of ignoring it.

#[cfg(feature = "local-binding")]
use crate::binding::{BindMode, BindingState, MachineId};
use crate::code::{ErrorCode, Refusal};
use crate::ids::{SessionId, TaskId};
use crate::resolve::Origin;
use serde::{Deserialize, Serialize};

/// A session as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    pub id: SessionId,
    pub title: String,
    pub agent: String,
    pub origin: Origin,
    pub project: Option<String>,
    /// Where the last run actually worked (recorded after each run).
    pub work_dir: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// When anything about the session last changed (a message, a run, a link).
    /// Extends the contract; older documents without it read as empty.
    #[serde(default)]
    pub updated_at: String,
    /// Archived: left out of `GET sessions` unless `?all=true`, kept whole (its
    /// transcript, tasks and binding). Extends the contract; older documents without
    /// it read as not archived.
    #[serde(default)]
    pub archived: bool,
    /// What the session waits for from a person: `approval` while a request of the
    /// `ask` policy waits for an answer ("needs you"), else null. Extends the contract;
    /// older documents without it read as null.
    #[serde(default)]
    pub needs: Option<Needs>,
    /// The explicit binding, kept apart from `work_dir`.
    #[cfg(feature = "local-binding")]
    pub binding: Option<SessionBinding>,
}

/// What a session waits for from a person (`needs` in its document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Needs {
    /// A request of the `ask` policy waits for an answer.
    Approval,
}

impl Needs {
    /// The value in a document and in `GET sessions?needs=…`.
    pub fn as_str(self) -> &'static str {
        match self {
            Needs::Approval => "approval",
        }
    }
}

/// A session's binding as the API returns it.
#[cfg(feature = "local-binding")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionBinding {
    /// The canonical path, as validated natively.
    pub dir: String,
    /// The privacy-stripped form (`~/code/app`).
    pub display: String,
    pub daemon: MachineId,
    pub daemon_name: String,
    pub mode: BindMode,
    pub state: BindingState,
}

/// `POST sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub project: Option<String>,
    /// The directory to bind, validated natively before anything is stored.
    #[cfg(feature = "local-binding")]
    #[serde(default)]
    pub dir: Option<String>,
    #[cfg(feature = "local-binding")]
    #[serde(default)]
    pub mode: Option<BindMode>,
}

/// `PUT sessions/{id}/binding`.
#[cfg(feature = "local-binding")]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkRequest {
    pub dir: String,
    #[serde(default)]
    pub mode: Option<BindMode>,
}

/// A task's lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Queued,
    WaitingLock,
    WaitingDaemon,
    Running,
    /// Running, and its agent waits for a person's answer to a request (the `ask`
    /// policy): `wait_reason` says what it asks.
    WaitingApproval,
    Succeeded,
    Failed,
    Cancelled,
    Interrupted,
    Refused,
}

impl TaskStatus {
    /// Whether the task has ended and will not change again.
    pub const fn is_final(self) -> bool {
        match self {
            TaskStatus::Succeeded
            | TaskStatus::Failed
            | TaskStatus::Cancelled
            | TaskStatus::Interrupted
            | TaskStatus::Refused => true,
            TaskStatus::Queued
            | TaskStatus::WaitingLock
            | TaskStatus::WaitingDaemon
            | TaskStatus::Running
            | TaskStatus::WaitingApproval => false,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::WaitingLock => "waiting_lock",
            TaskStatus::WaitingDaemon => "waiting_daemon",
            TaskStatus::Running => "running",
            TaskStatus::WaitingApproval => "waiting_approval",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::Interrupted => "interrupted",
            TaskStatus::Refused => "refused",
        }
    }
}

/// A task as the API returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    pub session_id: SessionId,
    pub status: TaskStatus,
    pub wait_reason: Option<String>,
    pub work_dir: Option<String>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// A stable code on every refused, failed or interrupted task (an [`ErrorCode`]
    /// spelling), for scripts to act on; `null` otherwise.
    #[serde(default)]
    pub error_code: Option<String>,
    /// One entry per action the agent's own permission system denied, in order.
    #[serde(default)]
    pub denials: Vec<Denial>,
    /// When the task was accepted, started and ended (RFC 3339, UTC). Extends the
    /// contract, for durations.
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    /// What the task changed in its bound directory (in-place and worktree runs;
    /// absent for scratch runs and tasks that did not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Changes>,
    /// How the agent was fenced (absent for tasks that did not run, and those of a
    /// Berth before the fence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<FenceNote>,
    /// The agent's token usage for the turn in one shape for every kind
    /// (`{input, output, cache_read, cache_write, cost_usd?, raw}`, see
    /// [`crate::usage`]); absent when it reported none.
    #[cfg(feature = "usage")]
    #[serde(
        default,
        deserialize_with = "crate::usage::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage: Option<crate::usage::Usage>,
    /// Whom a task waiting for its directory waits for, read from `wait_reason` (see
    /// [`crate::wait`]) when the server serves the task; absent otherwise. Extends the
    /// contract, so a page can name the session rather than a bare task id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<WaitsFor>,
    /// What the agent asked a person (the `ask` policy), in order, each with its
    /// decision once made: the task's audit of approvals.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<crate::approval::Approval>,
}

/// The task holding the directory another task waits for, and that task's session
/// when the caller may see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitsFor {
    /// The holding task's id: whole when its session is named, else its first eight
    /// characters (a session the caller may not see is not shown, nor its task's id).
    pub task_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_title: Option<String>,
}

/// How a machine fences the agents it runs now: the user settings' mode and what its
/// kernel offers (`GET capabilities`' `fence`; `berth agent list` prints `text`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceStatus {
    /// `auto`, `required` or `off`.
    pub mode: String,
    /// Whether the kernel can fence (Landlock and seccomp).
    pub available: bool,
    /// What the user settings let agents read: `everywhere` (the default), or
    /// `directory` (`"fence": {"read": "directory"}`). Absent from an older Berth's
    /// answer, which read everywhere.
    #[serde(default)]
    pub read: crate::fence::ReadScope,
    /// One line: `on (Landlock ABI 7): every agent is fenced ("fence": "auto")`, or why
    /// not and what happens instead; `; reads: directory only` in the strict read mode.
    pub text: String,
}

/// Whether a run's agent was fenced, and in what (or why not): the `fence` event's
/// content, kept on the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceNote {
    pub fenced: bool,
    pub text: String,
}

/// What a task changed in the directory it ran in, paths relative to it. Changes made
/// outside that directory are not tracked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub files: Vec<FileChange>,
    /// Files left out of the record (too large), so the summary is honest about them.
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// In worktree mode, the commit that holds the task's changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The agent ran fenced: it could write nowhere outside this directory but its own
    /// temporary directory and its CLI's state, so this record is the whole of its
    /// writes to the user's files.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fenced: bool,
    /// When the task's changes were put back (`berth task undo`): its files are as
    /// they were before it, as far as this record goes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undone_at: Option<String>,
}

/// One file a task added, modified, deleted or renamed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub path: String,
    /// `added`, `modified`, `deleted` or `renamed` (then `from` is the old path).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Lines added and removed; `null` for a binary file.
    pub added: Option<u64>,
    pub removed: Option<u64>,
}

/// A file the change record left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    pub reason: String,
}

impl Changes {
    /// `3 files changed, +20 −4` (and the skipped count), for one-line summaries.
    pub fn summary(&self) -> String {
        let n = self.files.len();
        let added: u64 = self.files.iter().filter_map(|f| f.added).sum();
        let removed: u64 = self.files.iter().filter_map(|f| f.removed).sum();
        let mut s = if n == 0 {
            String::from("no files changed")
        } else {
            format!(
                "{n} file{} changed, +{added} \u{2212}{removed}",
                if n == 1 { "" } else { "s" }
            )
        };
        if !self.skipped.is_empty() {
            s.push_str(&format!(" ({} not tracked: too large)", self.skipped.len()));
        }
        if self.undone_at.is_some() {
            s.push_str(" · undone");
        }
        s
    }
}

/// One action an agent's own permission system denied: the tool, and what it was
/// aimed at (a file, a command), as the agent reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    pub tool: String,
    #[serde(default)]
    pub target: String,
    /// Who denied it: absent for the agent's own permission system, `fence` for
    /// Berth's fence (the kernel refused it, or Berth put a guarded path back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// `berth check --json` and `POST check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    pub ok: bool,
    pub code: Option<ErrorCode>,
    pub message: String,
    /// The path as resolved (canonical when checked natively, normalized otherwise).
    pub canonical: Option<String>,
    pub display: Option<String>,
    /// What to do instead, when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// What the directory's project layer would do, and what it could not do without
    /// trust (native checks of an accepted directory that has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project_layer: Option<crate::settings::trust::ProjectLayerReport>,
}

impl CheckReport {
    /// An accepted path.
    pub fn accepted(canonical: String, display: String) -> CheckReport {
        CheckReport {
            ok: true,
            code: None,
            message: format!("{display} can be bound"),
            canonical: Some(canonical),
            display: Some(display),
            hint: None,
            project_layer: None,
        }
    }

    /// A refused path; `canonical`/`display` are known when the refusal came after
    /// parsing.
    pub fn refused(r: &Refusal, canonical: Option<String>, display: Option<String>) -> CheckReport {
        CheckReport {
            ok: false,
            code: Some(r.code),
            message: r.message.clone(),
            canonical,
            display,
            hint: Some(r.hint.clone()),
            project_layer: None,
        }
    }
}

/// The body of every HTTP error: `{"error": {"code", "message", "hint"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// One error. `code` is a stable code, one of [`ErrorCode`]'s spellings. It is text on
/// the wire: an answer of a Berth of another version may carry a code this build does
/// not know, and decoding it must not fail ([`ErrorDetail::known_code`] parses it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    pub hint: String,
}

impl ErrorBody {
    /// The error document of `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>, hint: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: code.as_str().to_owned(),
                message: message.into(),
                hint: hint.into(),
            },
        }
    }

    /// An error answer's body, when it is the contract's document (`None` for
    /// anything else: a proxy's HTML page, an empty body).
    pub fn parse(bytes: &[u8]) -> Option<ErrorBody> {
        serde_json::from_slice(bytes).ok()
    }
}

impl ErrorDetail {
    /// The code, when this build knows it.
    pub fn known_code(&self) -> Option<ErrorCode> {
        ErrorCode::from_name(&self.code)
    }

    /// The code when this build knows it, and the message to show: an unknown code
    /// is kept at the end of the message ([`ErrorCode::decode`]).
    pub fn decoded(self) -> (Option<ErrorCode>, String, String) {
        let (code, message) = ErrorCode::decode(Some(&self.code), self.message);
        (code, message, self.hint)
    }
}

impl From<&Refusal> for ErrorBody {
    fn from(r: &Refusal) -> ErrorBody {
        ErrorBody::new(r.code, r.message.clone(), r.hint.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITH_BINDING: &str = r#"{"id":"s1","title":"t","agent":"a","origin":"desktop",
        "project":null,"work_dir":null,"created_at":"2026-11-30T00:00:00Z",
        "binding":{"dir":"/home/u/app","display":"~/app","daemon":"m1","daemon_name":"laptop",
                   "mode":"in-place","state":"ok"}}"#;

    #[cfg(feature = "local-binding")]
    #[test]
    fn a_session_with_a_binding_round_trips() {
        let s: Session = serde_json::from_str(WITH_BINDING).unwrap();
        let b = s.binding.clone().unwrap();
        assert_eq!(
            b,
            SessionBinding {
                dir: "/home/u/app".into(),
                display: "~/app".into(),
                daemon: MachineId::parse("m1").unwrap(),
                daemon_name: "laptop".into(),
                mode: BindMode::InPlace,
                state: BindingState::Ok,
            }
        );
        let again: Session = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }

    /// Without `local-binding` the binding does not exist: a document carrying one is
    /// rejected as an unknown field, and so is a create request naming a directory.
    #[cfg(not(feature = "local-binding"))]
    #[test]
    fn without_local_binding_a_binding_is_an_unknown_field() {
        let err = serde_json::from_str::<Session>(WITH_BINDING).unwrap_err();
        assert!(err.to_string().contains("unknown field `binding`"), "{err}");
        let err = serde_json::from_str::<NewSession>(r#"{"dir":"/home/u/app"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `dir`"), "{err}");
        let unbound = WITH_BINDING
            .split(",\n        \"binding\"")
            .next()
            .unwrap()
            .to_owned()
            + "}";
        let s: Session = serde_json::from_str(&unbound).unwrap();
        assert_eq!(s.id, "s1");
    }

    #[test]
    fn task_status_spellings_match_the_contract() {
        let all = [
            (TaskStatus::Queued, "queued"),
            (TaskStatus::WaitingLock, "waiting_lock"),
            (TaskStatus::WaitingDaemon, "waiting_daemon"),
            (TaskStatus::Running, "running"),
            (TaskStatus::WaitingApproval, "waiting_approval"),
            (TaskStatus::Succeeded, "succeeded"),
            (TaskStatus::Failed, "failed"),
            (TaskStatus::Cancelled, "cancelled"),
            (TaskStatus::Interrupted, "interrupted"),
            (TaskStatus::Refused, "refused"),
        ];
        for (s, name) in all {
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(name));
            assert_eq!(s.as_str(), name);
        }
    }

    #[cfg(feature = "all-codes")]
    #[test]
    fn error_codes_match_the_contract() {
        let names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            names.join(" "),
            "path_empty path_not_absolute path_invalid system_root home_directory \
             credential_directory berth_state not_found not_a_directory not_owner not_writable \
             path_changed not_a_git_repo origin_cannot_bind daemon_offline daemon_mismatch \
             unknown_session unknown_agent sidecar_blocked agent_not_found agent_start_failed agent_exited \
             agent_error permission_denied prepare_failed lock_failed fence_unavailable interrupted internal \
             bad_request payload_too_large method_not_allowed not_found_route forbidden_host \
             unauthorized no_executor channel_not_configured bad_signature task_gone events_missing \
             token_exists unknown_token owner_only admin_only unknown_member member_exists \
             member_protected unknown_task ambiguous_id agent_exists unknown_project project_exists \
             agent_in_use session_busy unavailable bad_gateway server_unreachable \
             not_running trust_list plain_http option_in_command not_trusted confirmation_needed \
             changed_since settings_invalid not_a_regular_file file_too_large unreadable \
             unknown_approval already_decided expired approval_timeout no_exact_rule"
        );
        for c in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::json!(c.as_str())
            );
            assert_eq!(ErrorCode::from_name(c.as_str()), Some(c));
            assert!(c.hint().is_none_or(|h| !h.is_empty()), "{c}");
        }
    }

    #[test]
    fn an_unknown_code_is_kept_in_the_message() {
        let body = br#"{"error":{"code":"from_the_future","message":"no","hint":"h"}}"#;
        let detail = ErrorBody::parse(body).unwrap().error;
        assert_eq!(detail.known_code(), None);
        assert_eq!(
            detail.decoded(),
            (None, "no [from_the_future]".to_owned(), "h".to_owned())
        );
        let known = ErrorBody::new(ErrorCode::AgentError, "failed", "h").error;
        assert_eq!(known.code, "agent_error");
        assert_eq!(
            known.decoded(),
            (
                Some(ErrorCode::AgentError),
                "failed".to_owned(),
                "h".to_owned()
            )
        );
        assert!(ErrorBody::parse(b"<html>").is_none());
    }
}
