//! What the daemon's loops ([`super::link`]), tasks ([`super::task`]) and socket
//! ([`super::proxy`]) share: its standing with the server (registration, whether the
//! link is up), the tasks it is running (their cancels and the decisions their
//! requests wait for), and stopping.
//!
//! A 401 on a heartbeat or claim means the server no longer knows this process (it
//! restarted) or the token was revoked: the daemon registers again once, and only a
//! 401 on that registration is final.

use super::DaemonError;
use super::backoff::{self, Backoff, LINK_BASE, LINK_CAP};
use super::remote::{CallError, Remote};
use super::{RESTORE_WAIT, SEND_WAIT};
use crate::run::NativeExecutor;
use berth_core::TaskId;
use berth_web::daemon::wire::{Register, Registered, WireAnswer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// The heartbeat period until the server says otherwise.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);

/// A task claimed by this process and not yet acknowledged finished.
#[derive(Debug)]
struct Running {
    /// Turns `true` to stop the agent.
    cancel: watch::Sender<bool>,
    /// Turns `true` once the executor returned (its directory is restored).
    ran: watch::Receiver<bool>,
}

/// What the daemon's loops, tasks and socket share.
#[derive(Debug)]
pub(super) struct Daemon {
    pub(super) remote: Remote,
    pub(super) executor: NativeExecutor,
    name: String,
    /// Fresh per process (see `Register::instance`).
    pub(super) instance: String,
    max_tasks: usize,
    /// One per task allowed to run at once; taken before claiming.
    pub(super) permits: Arc<Semaphore>,
    registered: watch::Sender<Option<Registered>>,
    /// Counts successful registrations, so one 401 seen by several loops registers once.
    generation: AtomicU64,
    /// The last claim's number (`wire::ClaimRequest::seq`); claims go one at a time.
    claims: AtomicU64,
    /// The number of the last claim whose answer was handled: its task, if any, is
    /// tracked by then (`wire::Heartbeat::claimed_through`).
    claimed_through: AtomicU64,
    registering: tokio::sync::Mutex<()>,
    running: Mutex<HashMap<TaskId, Running>>,
    stopping: watch::Sender<bool>,
    fatal: Mutex<Option<DaemonError>>,
    /// Whether the last call failed to reach the server (printed once per outage).
    lost: AtomicBool,
    /// Woken when the server answers again after an outage, or accepted a
    /// registration: a claim loop backing off tries at once.
    pub(super) back: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Daemon {
    pub(super) fn new(
        remote: Remote,
        executor: NativeExecutor,
        name: String,
        max_tasks: usize,
    ) -> Daemon {
        Daemon {
            remote,
            executor,
            name,
            instance: uuid::Uuid::new_v4().to_string(),
            max_tasks,
            permits: Arc::new(Semaphore::new(max_tasks)),
            registered: watch::Sender::new(None),
            generation: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            claimed_through: AtomicU64::new(0),
            registering: tokio::sync::Mutex::new(()),
            running: Mutex::new(HashMap::new()),
            stopping: watch::Sender::new(false),
            fatal: Mutex::new(None),
            lost: AtomicBool::new(false),
            back: tokio::sync::Notify::new(),
        }
    }

    /// Whether the server can bind directories; `None` until registered.
    pub(super) fn local_binding(&self) -> Option<bool> {
        self.registered.borrow().as_ref().map(|r| r.local_binding)
    }

    /// Stops claiming; running tasks are cancelled by [`Daemon::drain`].
    pub(super) fn stop(&self) {
        self.stopping.send_replace(true);
    }

    pub(super) fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once the daemon is stopping.
    pub(super) async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Stops with an error the process exits with.
    fn fail(&self, e: DaemonError) {
        lock(&self.fatal).get_or_insert(e);
        self.stop();
    }

    /// The error that stopped the daemon, if one did.
    pub(super) fn fatal(&self) -> Result<(), DaemonError> {
        match lock(&self.fatal).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Changes each time the daemon registers (again).
    pub(super) fn registrations(&self) -> watch::Receiver<Option<Registered>> {
        let mut rx = self.registered.subscribe();
        rx.mark_unchanged();
        rx
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A call reached the server.
    pub(super) fn link_ok(&self) {
        if self.lost.swap(false, Ordering::SeqCst) {
            println!("the server at {} answers again", self.remote.url());
            self.back.notify_waiters();
        }
    }

    /// A call did not get an answer (printed once per outage).
    /// A TLS failure stops the daemon with that error: retrying cannot fix a
    /// certificate, and a retry loop would hide it.
    pub(super) fn link_lost(&self, e: &CallError) {
        if let CallError::Tls(problem) = e {
            self.fail(DaemonError::Tls {
                url: self.remote.url().to_string(),
                problem: problem.clone(),
            });
            return;
        }
        if matches!(e, CallError::Unreachable(_)) && !self.lost.swap(true, Ordering::SeqCst) {
            eprintln!(
                "lost the server at {}: {e}; retrying (running tasks go on, their events are kept)",
                self.remote.url()
            );
        }
    }

    fn register_body(&self) -> Register {
        Register {
            machine_id: self.remote.machine_id().clone(),
            name: self.name.clone(),
            instance: self.instance.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            // So the server shows this machine's paths as `~/…` where it may show
            // display forms only, wherever the home lies.
            home: self
                .executor
                .context()
                .home
                .as_ref()
                .map(|h| h.as_str().to_owned()),
        }
    }

    /// Registers, retrying while the server is unreachable (one status line per
    /// attempt). `Ok(None)`: stopped while waiting.
    async fn register_until_answered(&self) -> Result<Option<Registered>, DaemonError> {
        let url = self.remote.url().to_string();
        let body = self.register_body();
        let mut wait = Backoff::new(LINK_BASE, LINK_CAP);
        loop {
            if self.is_stopping() {
                return Ok(None);
            }
            let why = match self.remote.register(&body).await {
                Ok(r) => {
                    self.lost.store(false, Ordering::SeqCst);
                    self.registered.send_replace(Some(r.clone()));
                    self.generation.fetch_add(1, Ordering::SeqCst);
                    self.back.notify_waiters();
                    return Ok(Some(r));
                }
                Err(CallError::Tls(problem)) => {
                    return Err(DaemonError::Tls { url, problem });
                }
                Err(e) if e.is_unauthorized() => {
                    return Err(DaemonError::TokenRefused {
                        url,
                        message: message(&e),
                    });
                }
                Err(
                    e @ CallError::Status {
                        status:
                            hyper::StatusCode::NOT_FOUND
                            | hyper::StatusCode::METHOD_NOT_ALLOWED
                            | hyper::StatusCode::FORBIDDEN
                            | hyper::StatusCode::BAD_REQUEST,
                        ..
                    },
                ) => {
                    return Err(DaemonError::NotADaemonServer {
                        url,
                        message: message(&e),
                    });
                }
                Err(e) => e,
            };
            let delay = wait.next_delay();
            println!(
                "waiting for the server at {url} (attempt {}, next in {}): {why}",
                wait.attempts(),
                backoff::human(delay)
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.stopped() => return Ok(None),
            }
        }
    }

    /// The first registration; prints who this daemon is once accepted.
    pub(super) async fn register_at_start(&self) -> Result<(), DaemonError> {
        if let Some(r) = self.register_until_answered().await? {
            println!(
                "registered {} (machine {}) with the server at {}",
                r.name,
                r.machine_id,
                self.remote.url()
            );
            if !r.local_binding {
                println!(
                    "  the server cannot bind directories (cloud build): tasks run in scratch directories and worktrees only"
                );
            }
        }
        Ok(())
    }

    /// Registers again after a 401, unless another loop already did since `seen`.
    /// A refusal of the token stops the daemon.
    pub(super) async fn reregister(&self, seen: u64, refusal: &CallError) {
        let _one = self.registering.lock().await;
        if self.generation() != seen || self.is_stopping() {
            return;
        }
        println!(
            "the server at {} refused a call ({}); registering again",
            self.remote.url(),
            message(refusal)
        );
        match self.register_until_answered().await {
            Ok(Some(_)) => println!("registered again with the server at {}", self.remote.url()),
            Ok(None) => {}
            Err(e) => self.fail(e),
        }
    }

    pub(super) fn heartbeat_every(&self) -> Duration {
        self.registered
            .borrow()
            .as_ref()
            .map(|r| Duration::from_millis(r.heartbeat_ms.max(100)))
            .unwrap_or(DEFAULT_HEARTBEAT)
    }

    pub(super) fn claim_wait(&self) -> Duration {
        self.registered
            .borrow()
            .as_ref()
            .map(|r| Duration::from_millis(r.claim_wait_ms))
            .unwrap_or(Duration::ZERO)
    }

    /// The next claim's number, and whether the server takes it (an older server is
    /// sent none).
    pub(super) fn next_claim(&self) -> (u64, bool) {
        (
            self.claims.fetch_add(1, Ordering::SeqCst) + 1,
            self.numbers_claims(),
        )
    }

    /// Whether the server takes claims' numbers (`wire::Registered::claim_numbers`).
    fn numbers_claims(&self) -> bool {
        self.registered
            .borrow()
            .as_ref()
            .is_some_and(|r| r.claim_numbers)
    }

    /// Claim `seq`'s answer is handled: its task, if it carried one, is tracked.
    pub(super) fn claim_handled(&self, seq: u64) {
        self.claimed_through.fetch_max(seq, Ordering::SeqCst);
    }

    /// What a heartbeat says: the claims handled, then the tasks running, read in that
    /// order so that a task from a claim counted here is in the list (or finished).
    pub(super) fn heartbeat_body(&self) -> berth_web::daemon::wire::Heartbeat {
        let numbers = self.numbers_claims();
        let through = self.claimed_through.load(Ordering::SeqCst);
        berth_web::daemon::wire::Heartbeat {
            instance: self.instance.clone(),
            running: self.running_ids(),
            claimed_through: numbers.then_some(through),
        }
    }

    /// Records a claimed task; returns its cancel switch (already on when stopping)
    /// and the sender that says the executor returned.
    pub(super) fn track(&self, id: &TaskId) -> (watch::Sender<bool>, watch::Sender<bool>) {
        let cancel = watch::Sender::new(self.is_stopping());
        let (ran_tx, ran) = watch::channel(false);
        lock(&self.running).insert(
            id.clone(),
            Running {
                cancel: cancel.clone(),
                ran,
            },
        );
        (cancel, ran_tx)
    }

    /// Forgets a task: its finish was acknowledged, or the server no longer wants it.
    pub(super) fn untrack(&self, id: &TaskId) {
        lock(&self.running).remove(id);
    }

    pub(super) fn running_ids(&self) -> Vec<TaskId> {
        let mut ids: Vec<TaskId> = lock(&self.running).keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Stops a running task's agent (the server cancelled it).
    pub(super) fn cancel(&self, id: &TaskId) {
        if let Some(r) = lock(&self.running).get(id) {
            r.cancel.send_replace(true);
        }
    }

    /// Hands a decision from the server to the run that waits on it. One for a task
    /// this process no longer runs, for a request not of that task, or for a request
    /// no longer waiting (answered, timed out) is dropped.
    pub(super) fn answer(&self, a: WireAnswer) {
        let ours = lock(&self.running).contains_key(&a.task_id)
            && berth_web::store::approval_task(&a.id).is_ok_and(|t| t == a.task_id);
        if ours {
            self.executor.answer_request(&a.id, a.answer);
        }
    }

    /// After a stop: cancels every running task, waits for the executor to restore
    /// their directories, then gives them [`SEND_WAIT`] to report.
    pub(super) async fn drain(&self) {
        self.stop();
        let waits: Vec<watch::Receiver<bool>> = {
            let running = lock(&self.running);
            for r in running.values() {
                r.cancel.send_replace(true);
            }
            running.values().map(|r| r.ran.clone()).collect()
        };
        let restored = async {
            for mut ran in waits {
                let _ = ran.wait_for(|r| *r).await;
            }
        };
        if tokio::time::timeout(RESTORE_WAIT, restored).await.is_err() {
            eprintln!(
                "berth daemon: some agents did not stop in time; their directories are restored at the next start"
            );
        }
        let all = u32::try_from(self.max_tasks).unwrap_or(u32::MAX);
        if tokio::time::timeout(SEND_WAIT, self.permits.acquire_many(all))
            .await
            .is_err()
        {
            eprintln!(
                "berth daemon: could not report every task's outcome to the server; it marks them interrupted"
            );
        }
        // Leaving at once, rather than at the end of the heartbeat window, lets the
        // server show this machine's sessions waiting for it now. Best effort: an
        // unreachable server finds out from the window.
        let leave = berth_web::daemon::wire::Leave {
            instance: self.instance.clone(),
        };
        if let Ok(Err(e)) = tokio::time::timeout(SEND_WAIT, self.remote.leave(&leave)).await {
            eprintln!(
                "berth daemon: could not tell the server it stops: {}",
                message(&e)
            );
        }
    }
}

/// The server's message, for an error line.
fn message(e: &CallError) -> String {
    match e {
        CallError::Status { message, .. } => message.clone(),
        CallError::Unreachable(m) | CallError::Protocol(m) | CallError::Tls(m) => m.clone(),
    }
}
