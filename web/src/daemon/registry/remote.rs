//! The executor that runs a task on a remote machine: it queues the task for the
//! machine's daemon ([`super::queue`]) and waits for the run to end
//! ([`super::runs`]), so the scheduler treats it as any other executor.

use super::runs::{Link, back_in_line, outcome};
use super::{Daemons, lock};
use crate::daemon::wire::ClaimedTask;
use crate::executor::{BoxFuture, ExecEvent, Executor, TaskOutcome, TaskSpec};
use berth_core::TaskId;
use berth_core::api::TaskStatus;
use berth_core::approval::Answer;
use berth_core::binding::MachineId;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

impl Daemons {
    /// The executor that runs tasks on `machine` through its daemon.
    pub fn executor(&self, machine: &MachineId) -> Arc<dyn Executor> {
        let name = lock(&self.inner.state)
            .machines
            .get(machine)
            .map_or_else(|| machine.to_string(), |m| m.name.clone());
        Arc::new(RemoteExecutor {
            daemons: self.clone(),
            machine: machine.clone(),
            name,
        })
    }
}

/// Runs tasks on one remote machine, through its daemon.
struct RemoteExecutor {
    daemons: Daemons,
    machine: MachineId,
    name: String,
}

impl Executor for RemoteExecutor {
    fn machine(&self) -> (MachineId, String) {
        (self.machine.clone(), self.name.clone())
    }

    fn run(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        mut cancel: watch::Receiver<bool>,
    ) -> BoxFuture<'static, TaskOutcome> {
        let daemons = self.daemons.clone();
        let machine = self.machine.clone();
        let name = self.name.clone();
        Box::pin(async move {
            let id = task.task_id.clone();
            let (done, mut finished) = oneshot::channel();
            // The daemon's events are stored as they arrive (`Daemons::events`), not
            // through the scheduler's channel.
            drop(events);
            let link = Link {
                done,
                cancel: cancel.clone(),
            };
            if daemons
                .enqueue(&machine, ClaimedTask::from_spec(&task), link)
                .is_err()
            {
                return back_in_line(&name);
            }
            let mut watching = true;
            loop {
                tokio::select! {
                    out = &mut finished => {
                        let mut out = out.unwrap_or_else(|_| outcome(
                            TaskStatus::Interrupted,
                            format!("the server lost track of the task on machine {name}"),
                        ));
                        // Never show another machine's real path where only display
                        // forms may appear: without the daemon's own, name the machine.
                        if out.work_dir.is_some() && out.work_dir_display.is_none() {
                            out.work_dir_display = Some(format!("a directory on machine {name}"));
                        }
                        return out;
                    }
                    changed = cancel.changed(), if watching => {
                        if changed.is_err() {
                            watching = false;
                        } else if *cancel.borrow_and_update() && daemons.withdraw(&machine, &id) {
                            return outcome(TaskStatus::Cancelled, "cancelled before it started".into());
                        }
                    }
                }
            }
        })
    }

    /// Kept for the machine's daemon, which hands it to its run on its next
    /// exchange with this server (see `wire`'s decisions).
    fn answer(&self, task: &TaskId, id: &str, answer: Answer) -> bool {
        self.daemons.hand(&self.machine, task, id, answer)
    }

    #[cfg(feature = "local-binding")]
    fn validate(&self, dir: &str) -> Result<crate::executor::ValidatedDir, berth_core::Refusal> {
        Err(berth_core::Refusal::new(
            berth_core::ErrorCode::DaemonMismatch,
            format!(
                "{dir} is on machine {}, whose daemon validates its own directories",
                self.name
            ),
            "link it with the berth CLI on that machine, while `berth daemon` runs there",
        ))
    }
}
