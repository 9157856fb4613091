//! The server's `Executor` trait, implemented on the runner's [`NativeExecutor`]: the
//! one place the executor meets the server's own types (`berth serve` embeds it, the
//! daemon hands it remote tasks). Each method calls the executor's own (named apart
//! from the trait's, so a caller with the trait in scope still calls the trait's);
//! the runner's folders (`run/`, `agent/`, …) name no server type.

use crate::run::NativeExecutor;
use berth_core::Refusal;
use berth_core::binding::{BindingState, MachineId};
use berth_web::executor::{
    BoxFuture, DirIdentity, ExecEvent, Executor, TaskOutcome, TaskSpec, ValidatedDir,
};
use tokio::sync::{mpsc, watch};

impl Executor for NativeExecutor {
    fn machine(&self) -> (MachineId, String) {
        self.this_machine()
    }

    fn run(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        cancel: watch::Receiver<bool>,
    ) -> BoxFuture<'static, TaskOutcome> {
        let this = self.clone();
        Box::pin(async move { this.run_task(task, events, cancel).await })
    }

    fn answer(
        &self,
        _task: &berth_core::TaskId,
        id: &str,
        answer: berth_core::approval::Answer,
    ) -> bool {
        self.answer_request(id, answer)
    }

    fn recover(&self) -> Vec<String> {
        self.recover_leftovers()
    }

    fn fence(&self) -> Option<berth_core::api::FenceStatus> {
        self.fence_status()
    }

    fn validate(&self, dir: &str) -> Result<ValidatedDir, Refusal> {
        self.validate_binding(dir)
    }

    fn warm(&self, dir: &ValidatedDir) {
        self.warm_up(dir)
    }

    fn look(&self, dir: &str, identity: Option<DirIdentity>) -> Option<BindingState> {
        self.look_at(dir, identity)
    }
}
