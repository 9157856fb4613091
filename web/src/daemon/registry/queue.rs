//! The tasks waiting for each machine, and its daemon's claims: a claim takes the next
//! one and holds it as a run ([`super::runs`]).

use super::machines::current;
use super::runs::{Link, RemoteRun, RunLog};
use super::tokens::{AuthError, Caller};
use super::{Daemons, lock};
use crate::daemon::wire::ClaimedTask;
use berth_core::TaskId;
use berth_core::binding::MachineId;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;

/// A task waiting for its machine's daemon to claim it.
pub(super) struct Pending {
    task: ClaimedTask,
    pub(super) link: Link,
    /// When it was queued: its claim's latency is from here.
    queued: Instant,
}

impl Daemons {
    /// Queues a task for `machine`; `false` if the machine is not online.
    pub(super) fn enqueue(
        &self,
        machine: &MachineId,
        task: ClaimedTask,
        link: Link,
    ) -> Result<(), Link> {
        let mut state = lock(&self.inner.state);
        match state.machines.get_mut(machine) {
            Some(m) if m.online => {
                m.queue.push_back(Pending {
                    task,
                    link,
                    queued: Instant::now(),
                });
                m.wake.notify_waiters();
                Ok(())
            }
            _ => Err(link),
        }
    }

    /// Removes a task not claimed yet; `false` if its daemon has it.
    pub(super) fn withdraw(&self, machine: &MachineId, task: &TaskId) -> bool {
        let mut state = lock(&self.inner.state);
        let Some(m) = state.machines.get_mut(machine) else {
            return false;
        };
        let before = m.queue.len();
        m.queue.retain(|p| p.task.task_id != *task);
        m.queue.len() != before
    }

    /// What a claim waits on, and whether `instance` is the machine's current one.
    pub fn claim_wake(&self, caller: &Caller, instance: &str) -> Result<Arc<Notify>, AuthError> {
        let mut state = lock(&self.inner.state);
        Ok(current(&mut state, caller, instance)?.wake.clone())
    }

    /// Takes the machine's next waiting task, if any, and holds it as running, handed
    /// out by the daemon's claim number `seq` (when it numbers them).
    pub fn take(&self, caller: &Caller, instance: &str, seq: Option<u64>) -> Option<ClaimedTask> {
        let mut state = lock(&self.inner.state);
        let m = current(&mut state, caller, instance).ok()?;
        while let Some(p) = m.queue.pop_front() {
            if p.link.done.is_closed() {
                continue;
            }
            self.inner.metrics.claim_latency(p.queued.elapsed());
            let id = p.task.task_id.clone();
            m.runs.insert(
                id,
                RemoteRun::new(
                    p.link,
                    p.task.session_id.clone(),
                    RunLog::default(),
                    instance.to_owned(),
                    seq,
                ),
            );
            return Some(p.task);
        }
        None
    }
}
