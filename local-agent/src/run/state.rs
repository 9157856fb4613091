//! What the stages of a run share: the executor's state, where the task runs, what
//! was prepared, how a stage stops the run, and the hand-off to a blocking thread.

use crate::agent::groups::Watcher;
use crate::config::ExecutorConfig;
use crate::dir::lock::{DirLock, DirLocks};
use crate::dir::pin::PinnedDir;
use crate::inject::brief::WorkMode;
use crate::inject::journal::Journal;
use crate::inject::sidecar::Sidecars;
use crate::run::worktree::Worktree;
use berth_core::event::AgentEvent;
use berth_core::exec::ExecEvent;
use berth_core::policy::Policy;
use berth_core::{Context, ErrorCode, LocalPath, Refusal};
use std::sync::Arc;
use tokio::sync::mpsc;

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) cfg: ExecutorConfig,
    pub(super) ctx: Context,
    pub(super) locks: DirLocks,
    pub(super) journal: Arc<Journal>,
    /// One process-group watcher for every agent this executor starts.
    pub(super) watcher: Watcher,
    /// The fenced tasks' temporary directories.
    pub(super) tmps: Arc<crate::run::tmp::Tmps>,
    /// What each session's runs hand on to its next.
    pub(super) fences: Arc<crate::run::fence::SessionFences>,
    /// The runs waiting for a person's answer (the `ask` policy).
    pub(super) waiting: crate::agent::ask::Waiting,
}

/// Where a task runs, pinned.
#[derive(Debug)]
pub(super) struct Place {
    pub(super) pinned: PinnedDir,
    pub(super) mode: WorkMode,
    /// The bound directory, for the project settings layer.
    pub(super) bound: Option<LocalPath>,
    pub(super) worktree: Option<Worktree>,
}

/// What was prepared in the directory before the agent starts.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) sidecars: Sidecars,
    /// The brief, when it travels with the invocation.
    pub(super) brief_arg: Option<String>,
    pub(super) brief_text: String,
    pub(super) env: std::collections::BTreeMap<String, String>,
    pub(super) warnings: Vec<String>,
    /// The run's permission policy, and where it came from.
    pub(super) policy: Policy,
    /// The user's `ask` rules and deadline (a project layer's denies too).
    pub(super) ask: berth_core::approval::AskRules,
    /// What became of the project layer's keys, when one was read.
    pub(super) project: Option<berth_core::settings::trust::ProjectLayerReport>,
    /// The run's fence, its temporary directory, and its lines for the transcript.
    pub(super) fence: crate::run::fence::RunFence,
    /// The repositories' control files before the agent, when the guard holds them:
    /// checked again after the run with the nested repositories found then.
    pub(super) repos: Option<Vec<crate::inject::sidecar::guard::repos::Control>>,
}

pub(super) enum Stop {
    Refused(Refusal),
    Failed(ErrorCode, String),
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Refused(r)
    }
}

/// The change record of an in-place run: the directory's shadow, its tree before the
/// agent, the limits it was taken with, and the directory (path, identity).
pub(super) type Record = (
    crate::changes::Shadow,
    crate::changes::Snapshot,
    crate::changes::Limits,
    std::path::PathBuf,
    (u64, u64),
);

/// A run's directory once placed: locked with everything done under the lock, or only
/// placed, its lock held by someone else.
pub(super) enum Staged {
    Locked(Box<Locked>),
    /// Placed, its directory held by another run: the lock is waited for, then
    /// [`under_lock`](super::prepare::under_lock) runs with the user layer read at
    /// placement.
    Placed(Box<(Place, crate::settings::UserLayer)>),
}

/// A run ready to start its agent: its directory, held, recorded and prepared.
pub(super) struct Locked {
    pub(super) place: Place,
    pub(super) lock: DirLock,
    pub(super) record: Option<Record>,
    pub(super) prepared: Prepared,
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Stop> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Stop::Failed(ErrorCode::Internal, format!("internal error: {e}")))
}

/// A line of Berth's own in the run's stderr stream (`berth: …`).
pub(super) fn warn(events: &mpsc::UnboundedSender<ExecEvent>, line: String) {
    let _ = events.send(ExecEvent::Agent(AgentEvent::Stderr {
        line: format!("berth: {line}"),
    }));
}
