//! The remote machines the scheduler hands work to, as it sees them. The daemon
//! registry ([`crate::daemon::Daemons`]) is one; the server attaches it
//! ([`super::Scheduler::attach_daemons`]). The scheduler only asks who is online, whose
//! each machine is and which to pick, and runs tasks through the executors it is
//! handed: it depends on this trait, never on the registry.

use crate::executor::{Executor, TaskOutcome};
use crate::store::Adopted;
use berth_core::approval::Approval;
use berth_core::binding::MachineId;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// A request a run on a remote machine put to a person, just stored: the scheduler
/// answers it by a session rule or starts its deadline, as for a run of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// The machine whose daemon runs the task: decisions go to its executor.
    pub machine: MachineId,
    pub approval: Approval,
}

/// Machines other than this server's own that claim tasks (remote daemons).
pub trait RemoteMachines: Send + Sync + 'static {
    /// Whether this server accepts them at all: unbound work with no machine to run
    /// it then waits for one to come online.
    fn accepts(&self) -> bool;

    /// The machines online now.
    fn online(&self) -> Vec<MachineId>;

    /// The member a machine's token belongs to: `None` for a machine not registered
    /// in this process, `Some(None)` for one without a member (`berth serve`).
    fn machine_member(&self, machine: &MachineId) -> Option<Option<String>>;

    /// The online machine of `owner` with the least work, for a task any of their
    /// machines may run (scratch), taking turns among equals.
    fn pick(&self, owner: &str) -> Option<MachineId>;

    /// The executor that runs tasks on `machine`.
    fn executor(&self, machine: &MachineId) -> Arc<dyn Executor>;

    /// Carries on with a task the last leader handed to a machine: its outcome comes
    /// on the receiver.
    fn adopt(&self, a: &Adopted, cancel: watch::Receiver<bool>) -> oneshot::Receiver<TaskOutcome>;

    /// Told (the counter changes) whenever a machine comes online.
    fn subscribe(&self) -> watch::Receiver<u64>;

    /// The requests the machines' runs put to a person, each once it is stored (their
    /// events reach the store without passing the scheduler). Nothing is kept before
    /// this is called; a second call takes the stream from the first.
    fn requests(&self) -> mpsc::UnboundedReceiver<Asked>;
}

/// Why a task waits for machine `name`: one wording wherever it is decided (here, and
/// where a machine's daemon gives a task back), so the transcript shows the wait once.
pub fn waiting_for(name: &str) -> String {
    format!("waiting for machine {name}, which is offline")
}
