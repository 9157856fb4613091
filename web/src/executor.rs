//! The seam between the server and whatever runs tasks.
//!
//! The server decides *what* runs and records everything; an [`Executor`] runs it.
//! `berth-local-agent` hands in its native executor at startup; the cloud build runs
//! with none, so it has no way to reach a local path. Placements that name a local
//! directory exist only with `local-binding`.
//!
//! The contract's types are pure and live in core ([`berth_core::exec`]), where the
//! runner and the browser read them too; they are re-exported here, so the server's
//! code names them at this path. The trait stays here: it needs tokio's channels.

use berth_core::binding::MachineId;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, watch};

#[cfg(feature = "local-binding")]
pub use berth_core::exec::ValidatedDir;
pub use berth_core::exec::{
    AgentKind, AgentSpec, DirIdentity, ExecEvent, Placement, SessionFacts, TaskOutcome, TaskSpec,
};

/// A boxed future, so executors can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

    /// Hands a decision to the run of `task` that waits on request `id` (an
    /// [`ExecEvent::Approval`] it sent). `false` when no run of this executor waits on
    /// it (it ended, or runs elsewhere): the decision stays on record all the same.
    fn answer(
        &self,
        _task: &berth_core::TaskId,
        _id: &str,
        _answer: berth_core::approval::Answer,
    ) -> bool {
        false
    }

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
    fn validate(&self, dir: &str) -> Result<ValidatedDir, berth_core::Refusal>;

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
