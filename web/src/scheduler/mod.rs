//! The scheduler: from stored tasks to executor runs, and back to the transcript.
//!
//! A message is stored as a `queued` task and its session id is sent on a channel;
//! the dispatcher starts one worker per session with work (no polling). A worker runs
//! its session's tasks one at a time in `seq` order; workers of different sessions run
//! in parallel, each run holding one permit of a semaphore sized by
//! [`SchedulerConfig::max_parallel`]. Where a task runs is core's resolution
//! ([`placement::decide`]); the executor reports progress, which the worker stores and
//! publishes, then the outcome, which it records on the task and the session.
//!
//! Remote daemons ([`crate::daemon`]) are more claimers: a session bound on a daemon's
//! machine runs there only, through that daemon; a task that resolves to `Wait` (its
//! machine is offline) stays `waiting_daemon` with the machine's name, and every
//! session waiting is scheduled again when a machine comes online. Unbound work runs
//! on the embedded executor, or, on a server without one, on the least busy daemon.

mod approvals;
pub mod placement;
mod remote;

pub use approvals::HumanAnswer;
pub use remote::{Asked, RemoteMachines, waiting_for};

use crate::executor::{ExecEvent, Executor, SessionFacts, TaskOutcome, TaskSpec};
use crate::store::{Adopted, Finish, NextRun, RunItem, Store, StoreError, TaskRow};
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_core::exec::AgentKind;
use berth_core::usage::Usage;
use berth_core::{ErrorCode, SessionId, TaskId};
use placement::{Claim, Decision};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use tokio::sync::{Semaphore, mpsc, watch};

/// How many sessions may run a task at the same time, by default.
pub const DEFAULT_MAX_PARALLEL: usize = 8;

/// Scheduler settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    pub max_parallel: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_parallel: DEFAULT_MAX_PARALLEL,
        }
    }
}

/// Told when a task has reached its final status (after it is recorded), e.g. to
/// post a channel session's answer back, and when a request of the `ask` policy is put
/// to a person or decided. Called on the scheduler's task: an observer must not block;
/// it spawns whatever takes time.
pub trait TaskObserver: Send + Sync + 'static {
    fn task_finished(&self, task: &TaskRow);

    /// A request now waits for a person (no session rule answered it), recorded with
    /// its deadline.
    fn approval_asked(&self, approval: &berth_core::approval::Approval) {
        let _ = approval;
    }

    /// A request was decided (by a person, a rule, its deadline or a cancel), recorded.
    fn approval_decided(&self, approval: &berth_core::approval::Approval) {
        let _ = approval;
    }
}

/// A handle to the scheduler; cheap to clone.
#[derive(Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("has_executor", &self.inner.executor.is_some())
            .finish_non_exhaustive()
    }
}

struct Inner {
    store: Store,
    executor: Option<Arc<dyn Executor>>,
    machine: Option<MachineId>,
    permits: Arc<Semaphore>,
    /// Sessions with a live worker; `true` when more work arrived while it ran.
    sessions: Mutex<HashMap<SessionId, bool>>,
    /// Runs in progress. Claiming a task and cancelling one both hold this lock, so a
    /// cancel never misses a run that is starting.
    running: tokio::sync::Mutex<HashMap<TaskId, Run>>,
    stopping: AtomicBool,
    /// `true` once this process hands its work over to the next leader: runs on
    /// daemons are left going, unrecorded here ([`Scheduler::hand_over`]).
    handing_over: watch::Sender<bool>,
    workers: watch::Sender<usize>,
    observers: Mutex<Vec<Arc<dyn TaskObserver>>>,
    daemons: OnceLock<Arc<dyn RemoteMachines>>,
    /// `false` while another process on the database leads: work is announced to it
    /// instead of run here ([`Scheduler::follow`], [`Scheduler::lead`]).
    leading: AtomicBool,
    /// Counts finished tasks and how long each waited to be handed out
    /// ([`Scheduler::measure`]).
    metrics: OnceLock<crate::metrics::Metrics>,
}

impl Inner {
    /// Tells every observer that `task` ended.
    fn finished(&self, task: &TaskRow) {
        if let Some(m) = self.metrics.get() {
            m.task_finished(task.status);
        }
        let observers = self
            .observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for o in observers {
            o.task_finished(task);
        }
    }

    /// Every observer, as they are now.
    fn observers(&self) -> Vec<Arc<dyn TaskObserver>> {
        self.observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Run {
    cancel: watch::Sender<bool>,
    /// What runs it: the decisions to its requests go there (`None` for a run a new
    /// leader adopted with no daemons attached: nothing can reach it).
    executor: Option<Arc<dyn Executor>>,
    interrupted: Arc<AtomicBool>,
    /// On a daemon: at a hand-over ([`Scheduler::hand_over`]) it goes on there.
    remote: bool,
}

/// Whether a worker goes on with its session after a task.
enum Next {
    Continue,
    /// The head task waits for a machine; later tasks stay behind it.
    Blocked,
}

/// Counts a live worker; the count drops even if the worker fails.
struct WorkerGuard {
    inner: Arc<Inner>,
    session: SessionId,
    /// The worker left the session's entry itself, under the lock where it saw no
    /// more work; otherwise (an error, a panic, shutdown) the guard removes it.
    left: AtomicBool,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if !self.left.load(Ordering::SeqCst) {
            self.inner
                .sessions
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&self.session);
        }
        self.inner.workers.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl WorkerGuard {
    /// Whether to go on: `true` if work arrived since the worker last looked (the
    /// flag is reset); otherwise the worker leaves the session's entry **under the
    /// same lock**, so a message notified right after starts a new worker instead of
    /// setting the flag of one that is leaving.
    fn more_or_leave(&self) -> bool {
        let mut sessions = self
            .inner
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match sessions.get_mut(&self.session) {
            Some(more) if *more => {
                *more = false;
                true
            }
            Some(_) | None => {
                sessions.remove(&self.session);
                self.left.store(true, Ordering::SeqCst);
                false
            }
        }
    }
}

impl Scheduler {
    /// Starts the scheduler (on the runtime). Call [`Scheduler::notify`] for every
    /// session with queued work found at startup.
    pub fn start(
        store: Store,
        executor: Option<Arc<dyn Executor>>,
        config: SchedulerConfig,
    ) -> Scheduler {
        let machine = executor.as_ref().map(|e| e.machine().0);
        let inner = Arc::new(Inner {
            store,
            executor,
            machine,
            permits: Arc::new(Semaphore::new(config.max_parallel.max(1))),
            sessions: Mutex::new(HashMap::new()),
            running: tokio::sync::Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            handing_over: watch::channel(false).0,
            workers: watch::channel(0).0,
            observers: Mutex::new(Vec::new()),
            daemons: OnceLock::new(),
            leading: AtomicBool::new(true),
            metrics: OnceLock::new(),
        });
        Scheduler { inner }
    }

    /// Tells the scheduler a session has new work. While another process leads, the
    /// session is announced to it instead (the stored message already was, at its
    /// commit; this covers work that did not come with a message).
    pub fn notify(&self, session_id: &SessionId) {
        if !self.inner.leading.load(Ordering::SeqCst) {
            let (store, session) = (self.inner.store.clone(), session_id.clone());
            tokio::spawn(async move {
                if let Err(e) = store.announce_work(session).await {
                    tracing::warn!(error = %e, "could not announce work to the leader");
                }
            });
            return;
        }
        dispatch(&self.inner, session_id.clone());
    }

    /// Whether this process runs the tasks: on a shared database, once it leads and
    /// has recovered what the last leader left ([`Scheduler::lead`]).
    pub fn leads(&self) -> bool {
        self.inner.leading.load(Ordering::SeqCst)
    }

    /// Another process on the database leads: run nothing here, announce work to it.
    pub fn follow(&self) {
        self.inner.leading.store(false, Ordering::SeqCst);
    }

    /// This process leads the database's processes: it runs the work any of them
    /// announces, and looks for queued work every [`RECHECK`] besides, so that a
    /// missed announcement only delays a task.
    pub fn lead(&self) {
        self.inner.leading.store(true, Ordering::SeqCst);
        let weak = Arc::downgrade(&self.inner);
        #[cfg(feature = "postgres")]
        if let Some(mut notices) = self.inner.store.work_notices() {
            let weak = weak.clone();
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    let notice = notices.recv().await;
                    let Some(inner) = weak.upgrade() else { break };
                    match notice {
                        Ok(crate::store::postgres::Notice::Work(session)) => {
                            dispatch(&inner, session);
                        }
                        Ok(crate::store::postgres::Notice::Resync) | Err(RecvError::Lagged(_)) => {
                            requeue_all(&inner).await;
                        }
                        Err(RecvError::Closed) => break,
                    }
                }
            });
        }
        tokio::spawn(async move {
            let mut every = tokio::time::interval(RECHECK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else { break };
                if inner.stopping.load(Ordering::SeqCst) {
                    break;
                }
                requeue_all(&inner).await;
            }
        });
    }

    /// Carries on with tasks the last leader handed to daemons ([`Adopted`]): each
    /// holds its session as a running task does, until its daemon reports how it
    /// ended (or misses the window); the session's later tasks run after it. Call
    /// with the daemons attached, before [`Scheduler::lead`] schedules the sessions.
    pub async fn adopt(&self, adopted: Vec<Adopted>) {
        for a in adopted {
            let (cancel_tx, cancel_rx) = watch::channel(false);
            let interrupted = Arc::new(AtomicBool::new(false));
            let finished = match (&a.outcome, self.inner.daemons.get()) {
                (Some(outcome), _) => {
                    // Its daemon had reported it: only the record is left to make.
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let _ = tx.send(outcome.clone());
                    rx
                }
                (None, Some(d)) => d.adopt(&a, cancel_rx),
                (None, None) => {
                    // Nothing here can hear from a daemon: the task ends now.
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    let _ = tx.send(interrupted_run(
                        "the server stopped while the task was running; it was not run again",
                    ));
                    rx
                }
            };
            // Decisions on its requests go to its daemon, as for a run started here;
            // those still waiting get their session's rules and deadline again.
            let executor = self.inner.daemons.get().map(|d| d.executor(&a.machine));
            self.inner.running.lock().await.insert(
                a.task.id.clone(),
                Run {
                    cancel: cancel_tx,
                    executor: executor.clone(),
                    interrupted: interrupted.clone(),
                    remote: true,
                },
            );
            if let (Some(executor), None) = (&executor, &a.outcome) {
                for waiting in a.task.approvals.iter().filter(|x| x.decision.is_none()) {
                    approvals::pending(&self.inner, executor, waiting).await;
                }
            }
            let first = Resumed {
                task: a.task,
                binding_rev: a.binding_rev,
                finished,
                interrupted,
            };
            let session = first.task.session_id.clone();
            start_worker(&self.inner, session, Some(first));
        }
    }

    /// Counts into `metrics` (once): every task that reaches a final status
    /// (`berth_tasks_finished_total`), and, for each run handed out, how long after it
    /// was queued (`berth_dispatch_latency_seconds`).
    pub fn measure(&self, metrics: crate::metrics::Metrics) {
        let _ = self.inner.metrics.set(metrics);
    }

    /// Adds an observer of finished tasks.
    pub fn observe(&self, observer: Arc<dyn TaskObserver>) {
        self.inner
            .observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(observer);
    }

    /// Attaches the registry of remote daemons (once): their machines become
    /// claimers, and whenever one comes online every session waiting for a machine is
    /// scheduled again.
    pub fn attach_daemons(&self, daemons: impl RemoteMachines) {
        let mut online = daemons.subscribe();
        let daemons: Arc<dyn RemoteMachines> = Arc::new(daemons);
        if self.inner.daemons.set(daemons.clone()).is_err() {
            return;
        }
        // Their runs' requests, stored by the registry: answered by a session rule, or
        // timed out at their deadline, as a run of this server's own.
        let mut asked = daemons.requests();
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(Asked { machine, approval }) = asked.recv().await {
                let Some(inner) = weak.upgrade() else { break };
                let executor = daemons.executor(&machine);
                approvals::pending(&inner, &executor, &approval).await;
            }
        });
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while online.changed().await.is_ok() {
                let Some(inner) = weak.upgrade() else { break };
                match inner.store.waiting_sessions().await {
                    Ok(sessions) => {
                        for s in sessions {
                            dispatch(&inner, s);
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "could not list waiting sessions"),
                }
            }
        });
    }

    /// The attached executor, if any.
    pub fn executor(&self) -> Option<&Arc<dyn Executor>> {
        self.inner.executor.as_ref()
    }

    /// Cancels a task given by unique prefix: a running one is told to stop (it ends
    /// `cancelled` when the executor returns); one not started yet is `cancelled` at
    /// once; a finished one is returned unchanged.
    pub async fn cancel(&self, prefix: &str) -> Result<TaskRow, StoreError> {
        let task = self.inner.store.resolve_task(prefix).await?;
        let running = self.inner.running.lock().await;
        if let Some(run) = running.get(&task.id) {
            run.cancel.send_replace(true);
            return Ok(task);
        }
        match self.inner.store.cancel_waiting(task.id.clone()).await? {
            Some(cancelled) => {
                self.inner.finished(&cancelled);
                Ok(cancelled)
            }
            None => self.inner.store.task(&task.id).await,
        }
    }

    /// Before [`Scheduler::shutdown`], on a database other processes share: nothing
    /// more starts here, and the tasks running on daemons are left to them and to the
    /// next leader, which carries on with them as after a crash (`Store::recover`
    /// adopts them). Their workers leave without recording anything, so the next
    /// leader is the only one that does.
    pub fn hand_over(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        self.inner.handing_over.send_replace(true);
    }

    /// Stops scheduling, tells every running task to stop, and waits until every
    /// executor has returned (directories restored). Stopped tasks end `interrupted`;
    /// tasks not started stay `queued` for the next start. After
    /// [`Scheduler::hand_over`], tasks on daemons are not stopped.
    pub async fn shutdown(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
        let handing_over = *self.inner.handing_over.borrow();
        {
            let running = self.inner.running.lock().await;
            for run in running.values().filter(|r| !(handing_over && r.remote)) {
                run.interrupted.store(true, Ordering::SeqCst);
                run.cancel.send_replace(true);
            }
        }
        let mut workers = self.inner.workers.subscribe();
        // The sender lives in `inner`, which we hold: the wait ends only at zero.
        let _ = workers.wait_for(|n| *n == 0).await;
    }
}

/// How often the leader looks for queued work nobody announced (see
/// [`Scheduler::lead`]).
pub const RECHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// Schedules every session with queued work.
async fn requeue_all(inner: &Arc<Inner>) {
    match inner.store.queued_sessions().await {
        Ok(sessions) => {
            for s in sessions {
                dispatch(inner, s);
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not look for queued work"),
    }
}

/// A run carried over from the last leader ([`Scheduler::adopt`]): its worker waits
/// for its outcome before the session's next task.
struct Resumed {
    task: TaskRow,
    binding_rev: i64,
    finished: tokio::sync::oneshot::Receiver<TaskOutcome>,
    interrupted: Arc<AtomicBool>,
}

/// A run that ended without an outcome from its executor.
fn interrupted_run(error: &str) -> TaskOutcome {
    TaskOutcome::ended(TaskStatus::Interrupted, Some(ErrorCode::Interrupted), error)
}

/// Starts the session's worker, or tells the running one there is more work: right
/// where the work was found (a request's handler, a notification), with no hop through
/// another task. Nothing starts once the scheduler is stopping.
fn dispatch(inner: &Arc<Inner>, session: SessionId) {
    if !inner.stopping.load(Ordering::SeqCst) {
        start_worker(inner, session, None);
    }
}

fn start_worker(inner: &Arc<Inner>, session: SessionId, first: Option<Resumed>) {
    {
        let mut sessions = inner
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(more) = sessions.get_mut(&session) {
            *more = true;
            if first.is_none() {
                return;
            }
        } else {
            sessions.insert(session.clone(), false);
        }
    }
    inner.workers.send_modify(|n| *n += 1);
    let guard = WorkerGuard {
        inner: inner.clone(),
        session: session.clone(),
        left: AtomicBool::new(false),
    };
    tokio::spawn(async move {
        if let Some(r) = first {
            let mut over = guard.inner.handing_over.subscribe();
            let finished = tokio::select! {
                f = r.finished => Some(f),
                _ = over.wait_for(|h| *h) => None,
            };
            guard.inner.running.lock().await.remove(&r.task.id);
            // Handed over: the next leader carries on with it.
            let Some(finished) = finished else { return };
            let outcome = finished.unwrap_or_else(|_| {
                interrupted_run("the server lost track of the task on its machine")
            });
            approvals::settle_left(&guard.inner, &r.task.id).await;
            // The agent's kind is not carried over: its tokens go uncounted in the
            // metric (its task keeps its usage).
            let recorded = record(
                &guard.inner,
                &r.task,
                r.binding_rev,
                outcome,
                &r.interrupted,
                None,
            )
            .await;
            if let Err(e) = recorded {
                tracing::error!(task = %r.task.id, error = %e, "could not record a carried-over task");
            }
        }
        let mut wait = crate::backoff::Backoff::new(RETRY_FIRST, RETRY_MAX);
        loop {
            match drain(&guard).await {
                Ok(()) => break,
                // The database is away (PostgreSQL restarting): the session's work is
                // still stored; look again after a pause.
                Err(StoreError::Unavailable(e)) if !guard.inner.stopping.load(Ordering::SeqCst) => {
                    let pause = wait.next_delay();
                    tracing::warn!(session = %session, error = %e, pause_ms = pause.as_millis() as u64,
                        "the database is unavailable; scheduling the session again after a pause");
                    tokio::time::sleep(pause).await;
                }
                Err(e) => {
                    tracing::error!(session = %session, error = %e, "scheduling stopped for the session");
                    break;
                }
            }
        }
        drop(guard);
    });
}

/// The first pause before a store call is tried again while the database is
/// unavailable; it doubles up to [`RETRY_MAX`], with jitter (`crate::backoff`).
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(100);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// How long a run's record (its events, its outcome) is retried before it is given up.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs a store write, again with backoff while the database is unavailable (for up to
/// [`RETRY_FOR`]): what a run reported and how it ended must not be lost to a database
/// restart. Any other error returns at once.
async fn durable<T, Fut>(what: &str, mut call: impl FnMut() -> Fut) -> Result<T, StoreError>
where
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let start = std::time::Instant::now();
    let mut wait = crate::backoff::Backoff::new(RETRY_FIRST, RETRY_MAX);
    loop {
        match call().await {
            Err(StoreError::Unavailable(e)) if start.elapsed() < RETRY_FOR => {
                let pause = wait.next_delay();
                tracing::warn!(error = %e, pause_ms = pause.as_millis() as u64,
                    "the database is unavailable; {what} is tried again after a pause");
                tokio::time::sleep(pause).await;
            }
            other => return other,
        }
    }
}

/// Runs a session's waiting tasks in order until none is left.
async fn drain(guard: &WorkerGuard) -> Result<(), StoreError> {
    let (inner, session) = (&guard.inner, &guard.session);
    loop {
        if inner.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Ok(_permit) = inner.permits.clone().acquire_owned().await else {
            return Ok(());
        };
        if inner.stopping.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(next) = inner.store.next_run(session.clone()).await? else {
            if guard.more_or_leave() {
                continue;
            }
            return Ok(());
        };
        match run_one(inner, next).await? {
            Next::Continue => {}
            // A machine may have come online while this worker decided to wait.
            Next::Blocked if guard.more_or_leave() => {}
            Next::Blocked => return Ok(()),
        }
    }
}

async fn run_one(inner: &Arc<Inner>, next: NextRun) -> Result<Next, StoreError> {
    let store = &inner.store;
    #[rustfmt::skip]
    let NextRun { task, prompt, origin, session, agent, dirs } = next;
    let daemons = inner.daemons.get();
    let mut online: Vec<MachineId> = inner.machine.iter().cloned().collect();
    online.extend(daemons.map(|d| d.online()).unwrap_or_default());
    // The claimer: the bound machine while it is online (nobody else may run the
    // session), else this server's own executor, else the least busy daemon of the
    // session's owner. A machine runs only its own member's sessions: a bound machine
    // of another member counts as offline (binding through it is refused, so this is
    // only ever an old binding).
    //
    // This server's own executor runs only its own user's sessions (no owner). A
    // session made through a daemon's forwarded control socket belongs to the token's
    // member and runs on that member's machines alone: a daemon token, a credential
    // that crossed the network, never runs anything on the server's host (issue 33).
    let owner = crate::store::owner_name(session.owner.as_deref());
    let local = inner.machine.as_ref().filter(|_| session.owner.is_none());
    let owns = |m: &MachineId| {
        local == Some(m)
            || daemons.is_some_and(|d| {
                d.machine_member(m)
                    .is_some_and(|o| crate::store::owner_name(o.as_deref()) == owner)
            })
    };
    let bound = session.binding.as_ref().map(|b| &b.machine);
    let claimer = match bound {
        Some(m) if online.contains(m) && owns(m) => Some(m.clone()),
        _ => local
            .cloned()
            .or_else(|| daemons.and_then(|d| d.pick(owner))),
    };
    let online: Vec<MachineId> = online.into_iter().filter(|m| owns(m)).collect();
    let claim = Claim {
        origin,
        claimer: claimer.as_ref(),
        online: &online,
        local: inner.machine.is_some(),
    };
    let placement = match placement::decide(&session, &dirs, claim) {
        Decision::Run(p) => p,
        Decision::Wait(reason) => {
            let reason = match &session.binding {
                Some(b) => waiting_for(&b.machine_name),
                None => reason,
            };
            wait(store, &task, reason).await?;
            return Ok(Next::Blocked);
        }
        Decision::Refuse { code, message } => {
            let fin = Finish {
                outcome: TaskOutcome::ended(TaskStatus::Refused, Some(code), message),
                session_rev: None,
            };
            if store.claim(task.id.clone()).await? {
                let done = store.finish(task.id, fin).await?;
                inner.finished(&done);
            }
            return Ok(Next::Continue);
        }
    };
    let remote = claimer.is_some() && claimer != inner.machine;
    let executor = match (&claimer, &inner.machine) {
        (Some(c), Some(local)) if c == local => inner.executor.clone(),
        (Some(c), _) => daemons.map(|d| d.executor(c)),
        (None, _) => None,
    };
    let Some(executor) = executor else {
        let reason = if daemons.is_some_and(|d| d.accepts()) {
            "no machine is online to run it; the task waits for a daemon"
        } else {
            "no machine is attached to run tasks; the task waits for one"
        };
        wait(store, &task, reason.to_owned()).await?;
        return Ok(Next::Blocked);
    };
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let mut running = inner.running.lock().await;
        if !store.claim(task.id.clone()).await? {
            return Ok(Next::Continue);
        }
        running.insert(
            task.id.clone(),
            Run {
                cancel: cancel_tx,
                executor: Some(executor.clone()),
                interrupted: interrupted.clone(),
                remote,
            },
        );
    }
    // Handed out: to this server's executor, or to a daemon's queue.
    if let (Some(m), Some(waited)) = (inner.metrics.get(), crate::clock::age(&task.created_at)) {
        m.dispatch_latency(waited);
    }
    let kind = agent.kind;
    let spec = TaskSpec {
        task_id: task.id.clone(),
        session: SessionFacts {
            id: session.id.clone(),
            title: session.title.clone(),
            display: session.binding.as_ref().map(|b| b.display.clone()),
        },
        agent,
        prompt,
        placement,
        resume_id: session.resume_id.clone(),
    };
    let outcome = if remote {
        let mut over = inner.handing_over.subscribe();
        tokio::select! {
            o = execute(inner, &executor, &task, spec, cancel_rx) => Some(o),
            _ = over.wait_for(|h| *h) => None,
        }
    } else {
        Some(execute(inner, &executor, &task, spec, cancel_rx).await)
    };
    inner.running.lock().await.remove(&task.id);
    match outcome {
        Some(outcome) => {
            // The same thread as the last turn: the agent resumed the id it was given.
            let continued = session.resume_id.is_some() && outcome.resume_id == session.resume_id;
            let ran = Some(Ran { kind, continued });
            record(
                inner,
                &task,
                session.binding_rev,
                outcome,
                &interrupted,
                ran,
            )
            .await
        }
        // Handed over: the task goes on on its daemon; the next leader records it.
        None => Ok(Next::Continue),
    }
}

/// What the recorder knows of the run: its agent's kind, and whether the agent
/// continued the thread of the session's last turn.
#[derive(Debug, Clone, Copy)]
struct Ran {
    kind: AgentKind,
    continued: bool,
}

/// Records how a run ended: back in line if its machine never started it, otherwise
/// its final status on the task and what it leaves on the session.
async fn record(
    inner: &Arc<Inner>,
    task: &TaskRow,
    binding_rev: i64,
    mut outcome: TaskOutcome,
    interrupted: &AtomicBool,
    ran: Option<Ran>,
) -> Result<Next, StoreError> {
    let store = &inner.store;
    if outcome.status == TaskStatus::WaitingDaemon {
        // Its machine never started it (it went offline, or the claim was lost): back
        // in line, in order, and resolved again at once — it waits if the machine is
        // offline, or is handed out again if not.
        let reason = outcome
            .error
            .unwrap_or_else(|| "the task waits for its machine".to_owned());
        durable("putting the task back in line", || {
            store.requeue(task.id.clone(), reason.clone())
        })
        .await?;
        return Ok(Next::Continue);
    }
    if interrupted.load(Ordering::SeqCst) && outcome.status == TaskStatus::Cancelled {
        outcome.status = TaskStatus::Interrupted;
    }
    if !outcome.status.is_final() {
        outcome.status = TaskStatus::Failed;
    }
    if outcome.error.is_none() && outcome.status == TaskStatus::Interrupted {
        outcome.error = Some("the server shut down while the task was running".to_owned());
    }
    if let (
        Some(Ran {
            kind: AgentKind::Codex,
            continued: true,
        }),
        Some(u),
    ) = (ran, &outcome.usage)
    {
        // Codex reports the thread's running total: the turn counts what it added.
        let previous = store
            .previous_usage(task.session_id.clone(), task.seq)
            .await;
        let previous = previous.unwrap_or_else(|e| {
            tracing::warn!(task = %task.id, error = %e, "the previous turn's usage could not be read");
            None
        });
        outcome.usage = Some(Usage::codex_turn(&u.raw, previous.as_ref().map(|p| &p.raw)));
    }
    let tokens = outcome.usage.clone();
    let fin = Finish {
        outcome,
        session_rev: Some(binding_rev),
    };
    let done = durable("recording the task's outcome", || {
        store.finish(task.id.clone(), fin.clone())
    })
    .await?;
    if let (Some(m), Some(ran), Some(usage)) = (inner.metrics.get(), ran, &tokens) {
        m.tokens(ran.kind, usage);
    }
    inner.finished(&done);
    Ok(Next::Continue)
}

/// Shows the task waiting for a machine, with why (once per reason).
async fn wait(store: &Store, task: &TaskRow, reason: String) -> Result<(), StoreError> {
    if task.status != TaskStatus::WaitingDaemon || task.wait_reason.as_ref() != Some(&reason) {
        store
            .set_status(task.id.clone(), TaskStatus::WaitingDaemon, Some(reason))
            .await?;
    }
    Ok(())
}

/// What a run reported, as the store records it: an agent event with no `running`
/// status before it brings one (`running` says whether the transcript already has it).
pub(crate) fn run_items(
    task: &TaskId,
    session: &SessionId,
    events: impl IntoIterator<Item = ExecEvent>,
    running: &mut bool,
) -> Vec<RunItem> {
    let mut items = Vec::new();
    for ev in events {
        match ev {
            ExecEvent::Approval(req) => {
                *running = true;
                items.push(RunItem::Approval(Box::new(approvals::arrived(
                    task, session, req,
                ))));
            }
            ExecEvent::Status {
                status,
                wait_reason,
            } => {
                *running = status == TaskStatus::Running;
                items.push(RunItem::Status(status, wait_reason));
            }
            ExecEvent::Agent(ev) => {
                if !*running {
                    *running = true;
                    items.push(RunItem::Status(TaskStatus::Running, None));
                }
                let live = ev.is_live_only();
                match serde_json::to_value(&ev) {
                    Ok(payload) if live => items.push(RunItem::Delta(payload)),
                    Ok(payload) => items.push(RunItem::Agent(payload)),
                    Err(e) => {
                        tracing::error!(task = %task, error = %e, "could not encode an event");
                    }
                }
            }
        }
    }
    items
}

/// Runs the executor, storing what it reports as it happens; the requests it puts
/// to a person are answered by the session's rules, a person, or their deadline.
async fn execute(
    inner: &Arc<Inner>,
    executor: &Arc<dyn Executor>,
    task: &TaskRow,
    spec: TaskSpec,
    cancel: watch::Receiver<bool>,
) -> TaskOutcome {
    let store = &inner.store;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(executor.run(spec, tx, cancel));
    let mut running = false;
    // Whether the agent asked anything: only then can a request be left open.
    let mut asked = false;
    let mut burst = Vec::new();
    while let Some(first) = rx.recv().await {
        // Everything already reported goes into one transaction.
        burst.push(first);
        while let Ok(more) = rx.try_recv() {
            burst.push(more);
        }
        let items = run_items(&task.id, &task.session_id, burst.drain(..), &mut running);
        let recorded = durable("recording the task's events", || {
            store.run_events(task.clone(), items.clone())
        })
        .await;
        if let Err(e) = recorded {
            tracing::error!(task = %task.id, error = %e, "could not record events");
        }
        for item in &items {
            if let RunItem::Approval(a) = item {
                asked = true;
                approvals::pending(inner, executor, a).await;
            }
        }
    }
    let outcome = match handle.await {
        Ok(outcome) => outcome,
        Err(e) => TaskOutcome::failed(ErrorCode::Internal, format!("the executor failed: {e}")),
    };
    if asked {
        approvals::settle_left(inner, &task.id).await;
    }
    outcome
}
