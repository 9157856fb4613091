//! The seam between the server and whatever runs tasks.
//!
//! The server decides *what* runs and records everything; an [`Executor`] runs it.
//! `berth-local-agent` hands in its native executor at startup; the cloud build runs
//! with none, so it has no way to reach a local path. Placements that name a local
//! directory exist only with `local-binding`.

use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_core::event::AgentEvent;
use berth_core::{ErrorCode, Refusal, SessionId, TaskId};
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, watch};

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
    /// [`berth_core::Permissions::DEFAULT`].
    #[serde(default)]
    pub permissions: Option<berth_core::Permissions>,
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
        dir: berth_core::LocalPath,
        identity: Option<DirIdentity>,
    },
    /// In the session's git worktree of the directory.
    #[cfg(feature = "local-binding")]
    Worktree {
        dir: berth_core::LocalPath,
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
    Agent(AgentEvent),
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
    pub denials: Vec<berth_core::api::Denial>,
    /// What the run changed in its bound directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<berth_core::api::Changes>,
    /// How the agent was fenced, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<berth_core::api::FenceNote>,
    /// The agent's token usage for the turn, as it reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<serde_json::Value>,
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
            usage: None,
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

/// A boxed future, so executors can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A directory validated natively for a binding.
#[cfg(feature = "local-binding")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedDir {
    pub canonical: berth_core::LocalPath,
    pub display: String,
    pub identity: DirIdentity,
}

/// Runs tasks on one machine.
pub trait Executor: Send + Sync + 'static {
    /// This machine's id and human name.
    fn machine(&self) -> (MachineId, String);

    /// Runs one task to its end, reporting progress on `events`. When `cancel` turns
    /// `true` the executor stops the agent (its whole process group), restores the
    /// directory and returns `cancelled`. The executor never returns before the
    /// directory is restored.
    fn run(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        cancel: watch::Receiver<bool>,
    ) -> BoxFuture<'static, TaskOutcome>;

    /// Restores whatever interrupted runs left behind (crash recovery: sidecar files
    /// journaled but never cleaned up). The server calls it once at startup, holding
    /// its single-instance lock and before it schedules anything, so no task runs in
    /// a directory still being restored. Blocking. Returns one line per action, for
    /// the operator.
    fn recover(&self) -> Vec<String> {
        Vec::new()
    }

    /// How this machine fences the agents it runs now; `None` where it runs none
    /// itself. Reads the user settings: cheap, blocking.
    fn fence(&self) -> Option<berth_core::api::FenceStatus> {
        None
    }

    /// Validates a directory natively, as a binding would use it (no server state
    /// involved). Runs blocking I/O; callers use `spawn_blocking`.
    #[cfg(feature = "local-binding")]
    fn validate(&self, dir: &str) -> Result<ValidatedDir, Refusal>;

    /// A directory was just bound in place: the executor may get ready for its first
    /// run in the background (take the change record's first snapshot), so that the
    /// first message starts at once. Returns at once; never blocks a run (a run that
    /// comes meanwhile waits for it, and is told how far it is).
    #[cfg(feature = "local-binding")]
    fn warm(&self, _dir: &ValidatedDir) {}

    /// Whether a directory bound on this machine still holds, looked at now: `Missing`
    /// when `dir` names no directory, `Changed` when it names another than
    /// `identity` (the one linked); `None` when it holds, or this executor cannot
    /// tell. So the page flags a binding the next run would refuse, before it runs.
    /// Blocking (a `stat`); callers run it off the async threads.
    #[cfg(feature = "local-binding")]
    fn look(
        &self,
        _dir: &str,
        _identity: Option<DirIdentity>,
    ) -> Option<berth_core::binding::BindingState> {
        None
    }
}
