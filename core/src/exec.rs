//! The executor contract's shapes: what the server hands whatever runs tasks, and what
//! it hears back. Pure types, no I/O, so the server, the native executor and the
//! browser read the same shapes; the `Executor` trait itself (channels, a boxed
//! future) stays with the server (`berth-web`'s `executor` module), which re-exports
//! these.
//!
//! Placements that name a local directory, and [`ValidatedDir`], exist only with
//! `local-binding`.

use crate::api::TaskStatus;
use crate::{ErrorCode, Refusal, SessionId, TaskId};

/// How an agent is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    Claude,
    Codex,
    Command,
    /// Any agent that speaks the Agent Client Protocol (JSON-RPC over stdio): Gemini
    /// CLI, Zed's Codex and Claude adapters, opencode, goose. `command` is how to start
    /// it (`gemini --acp`).
    Acp,
}

#[cfg(feature = "usage")]
impl AgentKind {
    /// Usage `raw` as an agent of this kind reported it, with the cost it reported
    /// (`None` for a `command` agent, which reports none, and for a report that is not
    /// an object). Here rather than in [`crate::usage`], which knows no agent kinds.
    pub fn usage(
        self,
        raw: &serde_json::Value,
        cost_usd: Option<f64>,
    ) -> Option<crate::usage::Usage> {
        use crate::usage::Usage;
        if !raw.is_object() {
            return None;
        }
        match self {
            AgentKind::Claude => Some(Usage::claude(raw, cost_usd)),
            AgentKind::Codex => Some(Usage::codex(raw)),
            AgentKind::Acp => Some(Usage::acp(raw, cost_usd)),
            AgentKind::Command => None,
        }
    }
}

/// A registered agent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentSpec {
    pub name: String,
    pub kind: AgentKind,
    /// The program and its arguments. For `claude`/`codex`, the program to run
    /// (default `claude`/`codex`) plus extra arguments; for `command` and `acp`, the
    /// command.
    pub command: Vec<String>,
    /// What the agent may do; `None` takes the user settings' default, else
    /// [`crate::Permissions::DEFAULT`].
    #[serde(default)]
    pub permissions: Option<crate::Permissions>,
}

/// A directory's identity on its machine, (device, inode), taken when it was validated
/// for a binding. The executor refuses to run if the bound path later names another
/// directory, even a perfectly valid one put in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// Where a task runs, as resolved by the server (core's resolution, on the claiming
/// machine).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In the bound (or project) directory itself; `identity` is the directory's as
    /// linked (known for session bindings).
    #[cfg(feature = "local-binding")]
    InPlace {
        dir: crate::LocalPath,
        identity: Option<DirIdentity>,
    },
    /// In the session's git worktree of the directory.
    #[cfg(feature = "local-binding")]
    Worktree {
        dir: crate::LocalPath,
        identity: Option<DirIdentity>,
    },
    /// In the session's scratch directory.
    Scratch,
}

/// Facts about the session, for the agent's brief.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFacts {
    pub id: SessionId,
    pub title: String,
    /// The privacy-stripped bound directory, if any.
    pub display: Option<String>,
}

/// One task handed to an executor.
#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub task_id: TaskId,
    pub session: SessionFacts,
    pub agent: AgentSpec,
    pub prompt: String,
    pub placement: Placement,
    /// The agent's session/thread id from the previous turn in the same place.
    pub resume_id: Option<String>,
}

/// What an executor reports while a task runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecEvent {
    /// A status change, e.g. `waiting_lock` with who holds the directory, or `running`.
    Status {
        status: TaskStatus,
        wait_reason: Option<String>,
    },
    /// Something the agent did.
    Agent(crate::event::AgentEvent),
    /// The agent asks what the policy leaves to a person: the run waits for the
    /// executor's `answer` (or the deadline).
    Approval(crate::approval::ApprovalRequest),
}

/// How a task ended. A daemon sends it as JSON (`finish`); every field but `status`
/// may be left out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskOutcome {
    /// `succeeded`, `failed`, `cancelled`, `refused` or `interrupted`.
    pub status: TaskStatus,
    pub exit_code: Option<i32>,
    /// Why it failed or was refused (a refusal's code is in `code`).
    pub error: Option<String>,
    pub code: Option<ErrorCode>,
    /// Where the agent actually worked.
    pub work_dir: Option<String>,
    /// The same, privacy-stripped for the user of the machine it ran on. A daemon
    /// sets it (the server does not know that machine's home or account name);
    /// `None` from the embedded executor: the server strips `work_dir` itself.
    pub work_dir_display: Option<String>,
    /// The agent's resume id to pass on the next turn (`None` clears it).
    pub resume_id: Option<String>,
    /// For worktree runs, the branch the changes were committed on.
    pub branch: Option<String>,
    /// What the agent's own permission system denied, one entry per action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<crate::api::Denial>,
    /// What the run changed in its bound directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<crate::api::Changes>,
    /// How the agent was fenced, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<crate::api::FenceNote>,
    /// The agent's token usage for the turn, normalized ([`crate::usage`]); an older
    /// daemon's raw object is read into that shape, and junk reads as none.
    #[cfg(feature = "usage")]
    #[serde(
        default,
        deserialize_with = "crate::usage::lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage: Option<crate::usage::Usage>,
    /// What the run changed, as lines, bounded ([`crate::patch`]); absent when it
    /// changed nothing or kept no record.
    #[cfg(not(target_arch = "wasm32"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<crate::patch::TaskDiff>,
}

impl TaskOutcome {
    /// An outcome of `status` and nothing else: the one place every field is named.
    /// Others start from it (`TaskOutcome { exit_code, ..TaskOutcome::new(status) }`).
    pub fn new(status: TaskStatus) -> TaskOutcome {
        TaskOutcome {
            status,
            exit_code: None,
            error: None,
            code: None,
            work_dir: None,
            work_dir_display: None,
            resume_id: None,
            branch: None,
            denials: Vec::new(),
            changes: None,
            fence: None,
            #[cfg(feature = "usage")]
            usage: None,
            #[cfg(not(target_arch = "wasm32"))]
            diff: None,
        }
    }

    /// A task that ended with nothing of a run to report (no exit code, directory,
    /// resume id, changes or fence): its status, its error and the error's code.
    pub fn ended(
        status: TaskStatus,
        code: Option<ErrorCode>,
        error: impl Into<String>,
    ) -> TaskOutcome {
        TaskOutcome {
            error: Some(error.into()),
            code,
            ..TaskOutcome::new(status)
        }
    }

    /// A task refused before anything ran.
    pub fn refused(r: &Refusal) -> TaskOutcome {
        TaskOutcome::ended(TaskStatus::Refused, Some(r.code), r.message.clone())
    }

    /// A task that failed before or without the agent, with its stable code.
    pub fn failed(code: ErrorCode, error: impl Into<String>) -> TaskOutcome {
        TaskOutcome::ended(TaskStatus::Failed, Some(code), error)
    }
}

/// A directory validated natively for a binding.
#[cfg(feature = "local-binding")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedDir {
    pub canonical: crate::LocalPath,
    pub display: String,
    pub identity: DirIdentity,
}
