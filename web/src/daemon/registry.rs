//! The live side of remote daemons: which machines are online, the tasks waiting for
//! each, and the runs each holds.
//!
//! A task the scheduler resolves to a daemon's machine goes through a
//! [`RemoteExecutor`], which queues it here and waits. The daemon's long-poll claim
//! takes it from the queue; its events and outcome come back through the daemon
//! routes and reach the waiting executor, so the scheduler records them exactly as
//! for the embedded executor. A machine silent for longer than the heartbeat window
//! goes offline: tasks it had not claimed go back to `waiting_daemon`, tasks it was
//! running end `interrupted`.

use super::DaemonConfig;
use super::wire::{
    ClaimedTask, EventBatch, EventsReply, FinishRequest, HeartbeatReply, Registered, TokenInfo,
};
use crate::executor::{BoxFuture, ExecEvent, Executor, TaskOutcome, TaskSpec};
use crate::scheduler::{RemoteMachines, run_items, waiting_for};
use crate::secret::{new_token, token_hash};
use crate::store::{Adopted, Store, StoreError, TokenChange, TokenRow};
use berth_core::ErrorCode;
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// How many finished task ids a machine remembers, so a repeated `finish` (its
/// answer was lost) is acknowledged again.
const FINISHED_MEMORY: usize = 256;

/// Why a daemon call is refused with 401.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the request carries no daemon token (Authorization: Bearer) or machine id")]
    Missing,
    #[error("the daemon token is not valid")]
    Unknown,
    #[error("the daemon token {name:?} was revoked")]
    Revoked { name: String },
    #[error("the daemon token {name:?} belongs to another machine")]
    OtherMachine { name: String },
    #[error("machine {machine} is not registered with this server (or registered again since)")]
    NotRegistered { machine: String },
}

/// A daemon call the server no longer expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task} is not running on machine {machine} (it ended, or was never claimed by it)")]
pub struct Gone {
    pub task: String,
    pub machine: String,
}

/// Why a daemon's events or outcome were not taken.
#[derive(Debug, thiserror::Error)]
pub enum TaskCallError {
    #[error(transparent)]
    Gone(#[from] Gone),
    /// Not stored (the database is away): the daemon sends them again.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What `finish` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Recorded (or recorded before: a repeated finish).
    Done(TaskStatus),
    /// Events the daemon sent are not all here yet.
    Missing { received: u64 },
}

/// Who is calling, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub machine: MachineId,
    /// The machine's name as it registered.
    pub name: String,
    /// The member its token belongs to (`berth-server`).
    pub member: Option<String>,
}

/// Where a run's outcome goes, and whether it is cancelled. (Its events go straight
/// to the store: see [`Daemons::events`].)
struct Link {
    done: oneshot::Sender<TaskOutcome>,
    cancel: watch::Receiver<bool>,
}

struct Pending {
    task: ClaimedTask,
    link: Link,
}

/// How far a run's events are stored.
#[derive(Debug, Default)]
struct RunLog {
    /// How many of the daemon's events for the task are stored (and acknowledged).
    received: AtomicU64,
    /// Whether the transcript already says the task runs.
    running: AtomicBool,
    /// One batch at a time is stored (a retried request may overlap its original).
    write: tokio::sync::Mutex<()>,
}

struct RemoteRun {
    link: Link,
    session_id: String,
    log: Arc<RunLog>,
    claimed_at: Instant,
    instance: String,
}

impl RemoteRun {
    fn received(&self) -> u64 {
        self.log.received.load(Ordering::SeqCst)
    }
}

struct Machine {
    name: String,
    /// The member of the token it registered with: it runs only their sessions' tasks.
    member: Option<String>,
    /// Its user's home, as its daemon said at registration (see `wire::Register`).
    home: Option<berth_core::LocalPath>,
    instance: String,
    last_seen: Instant,
    online: bool,
    queue: VecDeque<Pending>,
    runs: HashMap<String, RemoteRun>,
    finished: VecDeque<(String, TaskStatus)>,
    wake: Arc<Notify>,
}

impl Machine {
    /// A machine as first seen: offline, with nothing queued or running.
    fn new(name: String, member: Option<String>, instance: String, now: Instant) -> Machine {
        Machine {
            name,
            member,
            home: None,
            instance,
            last_seen: now,
            online: false,
            queue: VecDeque::new(),
            runs: HashMap::new(),
            finished: VecDeque::new(),
            wake: Arc::new(Notify::new()),
        }
    }

    fn load(&self) -> usize {
        self.queue.len() + self.runs.len()
    }
}

#[derive(Default)]
struct State {
    machines: HashMap<MachineId, Machine>,
    /// Live and revoked tokens by hash.
    tokens: HashMap<String, TokenRow>,
    /// Round-robin cursor for unbound work.
    turn: usize,
}

struct Inner {
    config: DaemonConfig,
    accept: bool,
    store: Store,
    state: Mutex<State>,
    /// Bumped whenever a machine comes online: the scheduler schedules the sessions
    /// waiting for one again.
    online: watch::Sender<u64>,
    /// Serializes the store's binding-state updates so the last one written is the
    /// machine's current state.
    sync: tokio::sync::Mutex<()>,
}

/// The registry of remote daemons; cheap to clone.
#[derive(Clone)]
pub struct Daemons {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Daemons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemons")
            .field("config", &self.inner.config)
            .field("accept", &self.inner.accept)
            .finish_non_exhaustive()
    }
}

/// How a remote run ended without the daemon's own outcome, and why: `interrupted`
/// carries its code.
fn outcome(status: TaskStatus, error: String) -> TaskOutcome {
    let code = (status == TaskStatus::Interrupted).then_some(ErrorCode::Interrupted);
    TaskOutcome::ended(status, code, error)
}

/// The outcome that puts a task back in line: not started, waiting for `machine`.
fn back_in_line(name: &str) -> TaskOutcome {
    let mut o = outcome(TaskStatus::WaitingDaemon, waiting_for(name));
    o.code = Some(ErrorCode::DaemonOffline);
    o
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemons {
    /// Loads the tokens and starts the offline monitor. `accept`: whether daemon
    /// routes are served at all (only then does the server show bindings on other
    /// machines as waiting for them).
    pub async fn start(
        store: Store,
        config: DaemonConfig,
        accept: bool,
    ) -> Result<Daemons, StoreError> {
        let tokens = store
            .tokens()
            .await?
            .into_iter()
            .map(|t| (t.hash.clone(), t))
            .collect();
        let daemons = Daemons {
            inner: Arc::new(Inner {
                config,
                accept,
                store,
                state: Mutex::new(State {
                    tokens,
                    ..State::default()
                }),
                online: watch::channel(0).0,
                sync: tokio::sync::Mutex::new(()),
            }),
        };
        let weak = Arc::downgrade(&daemons.inner);
        let tick = (config.window / 5).clamp(Duration::from_millis(20), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(inner) = weak.upgrade() else { break };
                Daemons { inner }.expire().await;
            }
        });
        Ok(daemons)
    }

    /// Reads the tokens again from the store: a server that starts leading a shared
    /// database serves daemons whose tokens were made through the previous leader.
    pub async fn reload_tokens(&self) -> Result<(), StoreError> {
        let tokens = self
            .inner
            .store
            .tokens()
            .await?
            .into_iter()
            .map(|t| (t.hash.clone(), t))
            .collect();
        lock(&self.inner.state).tokens = tokens;
        Ok(())
    }

    pub fn config(&self) -> DaemonConfig {
        self.inner.config
    }

    /// Whether this server serves the daemon routes.
    pub fn accepts(&self) -> bool {
        self.inner.accept
    }

    /// Told (the counter changes) whenever a machine comes online.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.online.subscribe()
    }

    /// The homes of the machines that registered with this process and said theirs:
    /// what the display rule shows as `~` in text that came from them.
    pub fn homes(&self) -> Vec<berth_core::LocalPath> {
        lock(&self.inner.state)
            .machines
            .values()
            .filter_map(|m| m.home.clone())
            .collect()
    }

    /// The machines online now.
    pub fn online(&self) -> Vec<MachineId> {
        lock(&self.inner.state)
            .machines
            .iter()
            .filter(|(_, m)| m.online)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The online machine of `owner` (whose token is `owner`'s) with the least work,
    /// for a task any of their machines may run (scratch), taking turns among equals.
    pub fn pick(&self, owner: &str) -> Option<MachineId> {
        let mut state = lock(&self.inner.state);
        let mut online: Vec<(&MachineId, usize)> = state
            .machines
            .iter()
            .filter(|(_, m)| m.online && crate::store::owner_name(m.member.as_deref()) == owner)
            .map(|(id, m)| (id, m.load()))
            .collect();
        online.sort();
        let least = online.first()?.1;
        let equals: Vec<MachineId> = online
            .iter()
            .filter(|(_, l)| *l == least)
            .map(|(id, _)| (*id).clone())
            .collect();
        let pick = equals[state.turn % equals.len()].clone();
        state.turn = state.turn.wrapping_add(1);
        Some(pick)
    }

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

    /// Checks a daemon call's token and machine id. `register`: the token may be bound
    /// to this machine now; otherwise the machine must be registered.
    pub fn authenticate(
        &self,
        token: Option<&str>,
        machine: Option<&str>,
    ) -> Result<(TokenRow, MachineId), AuthError> {
        let (Some(token), Some(machine)) = (token, machine) else {
            return Err(AuthError::Missing);
        };
        if machine.is_empty() || machine.len() > 128 {
            return Err(AuthError::Missing);
        }
        let machine = MachineId::new(machine);
        let state = lock(&self.inner.state);
        let row = state
            .tokens
            .get(&token_hash(token))
            .ok_or(AuthError::Unknown)?;
        if row.revoked_at.is_some() {
            return Err(AuthError::Revoked {
                name: row.name.clone(),
            });
        }
        match &row.machine {
            Some(m) if *m != machine => Err(AuthError::OtherMachine {
                name: row.name.clone(),
            }),
            _ => Ok((row.clone(), machine)),
        }
    }

    /// A registered caller of this process (`instance`), for every call but register.
    pub fn caller(&self, token: Option<&str>, machine: Option<&str>) -> Result<Caller, AuthError> {
        let (row, machine) = self.authenticate(token, machine)?;
        let state = lock(&self.inner.state);
        match (&row.machine, state.machines.get(&machine)) {
            (Some(_), Some(m)) => Ok(Caller {
                machine,
                name: m.name.clone(),
                member: row.member.clone(),
            }),
            _ => Err(AuthError::NotRegistered {
                machine: machine.to_string(),
            }),
        }
    }

    /// A daemon (re)starting: binds its token to its machine the first time, brings
    /// the machine online, and ends `interrupted` whatever an earlier process of the
    /// same machine was running.
    pub async fn register(
        &self,
        token: Option<&str>,
        machine: Option<&str>,
        name: String,
        instance: String,
        home: Option<berth_core::LocalPath>,
    ) -> Result<Result<Registered, AuthError>, StoreError> {
        let (row, machine) = match self.authenticate(token, machine) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        if row.machine.is_none() {
            match self
                .inner
                .store
                .bind_token(row.name.clone(), machine.clone())
                .await?
            {
                TokenChange::Done(bound) => {
                    lock(&self.inner.state)
                        .tokens
                        .insert(bound.hash.clone(), bound);
                }
                TokenChange::OtherMachine(_) => {
                    return Ok(Err(AuthError::OtherMachine { name: row.name }));
                }
                TokenChange::Unknown | TokenChange::Exists => {
                    return Ok(Err(AuthError::Revoked { name: row.name }));
                }
            }
        }
        self.inner
            .store
            .touch_machine(machine.clone(), name.clone())
            .await?;
        let came_online = {
            let mut state = lock(&self.inner.state);
            let now = Instant::now();
            let m = state.machines.entry(machine.clone()).or_insert_with(|| {
                Machine::new(name.clone(), row.member.clone(), instance.clone(), now)
            });
            m.name.clone_from(&name);
            m.member.clone_from(&row.member);
            m.home = home;
            m.last_seen = now;
            if m.instance != instance {
                m.instance.clone_from(&instance);
                let stale: Vec<String> = m
                    .runs
                    .iter()
                    .filter(|(_, r)| r.instance != instance)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in stale {
                    if let Some(run) = m.runs.remove(&id) {
                        let _ = run.link.done.send(outcome(
                            TaskStatus::Interrupted,
                            format!("the daemon on machine {name} restarted while the task ran"),
                        ));
                    }
                }
            }
            let came = !m.online;
            m.online = true;
            came
        };
        if came_online {
            self.sync_bindings(&machine).await?;
            self.inner.online.send_modify(|n| *n = n.wrapping_add(1));
        }
        let c = self.inner.config;
        Ok(Ok(Registered {
            machine_id: machine.to_string(),
            name,
            heartbeat_ms: millis(c.window / 3),
            window_ms: millis(c.window),
            claim_wait_ms: millis(c.claim_wait),
            local_binding: berth_core::LOCAL_BINDING,
        }))
    }

    /// A heartbeat: the machine is alive. Claimed tasks the daemon does not list for
    /// longer than the window never reached it (a lost claim answer): back in line if
    /// nothing was heard of them, `interrupted` otherwise. Answers the tasks to stop:
    /// those cancelled, and those it lists that the server no longer expects.
    pub fn heartbeat(
        &self,
        caller: &Caller,
        instance: &str,
        running: &[String],
    ) -> Result<HeartbeatReply, AuthError> {
        let window = self.inner.config.window;
        let mut state = lock(&self.inner.state);
        let m = current(&mut state, caller, instance)?;
        let lost: Vec<String> = m
            .runs
            .iter()
            .filter(|(id, r)| r.claimed_at.elapsed() > window && !running.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in lost {
            if let Some(run) = m.runs.remove(&id) {
                let out = if run.received() == 0 {
                    back_in_line(&m.name)
                } else {
                    outcome(
                        TaskStatus::Interrupted,
                        format!("machine {} lost the task while it ran", m.name),
                    )
                };
                let _ = run.link.done.send(out);
            }
        }
        // Stop what was cancelled, and what the server no longer expects (it ended
        // while the daemon was out of reach, or the server restarted).
        let mut cancel: Vec<String> = m
            .runs
            .iter()
            .filter(|(_, r)| *r.link.cancel.borrow())
            .map(|(id, _)| id.clone())
            .collect();
        cancel.extend(
            running
                .iter()
                .filter(|id| !m.runs.contains_key(*id) && !m.finished.iter().any(|(f, _)| f == *id))
                .cloned(),
        );
        Ok(HeartbeatReply { cancel })
    }

    /// What a claim waits on, and whether `instance` is the machine's current one.
    pub fn claim_wake(&self, caller: &Caller, instance: &str) -> Result<Arc<Notify>, AuthError> {
        let mut state = lock(&self.inner.state);
        Ok(current(&mut state, caller, instance)?.wake.clone())
    }

    /// Takes the machine's next waiting task, if any, and holds it as running.
    pub fn take(&self, caller: &Caller, instance: &str) -> Option<ClaimedTask> {
        let mut state = lock(&self.inner.state);
        let m = current(&mut state, caller, instance).ok()?;
        while let Some(p) = m.queue.pop_front() {
            if p.link.done.is_closed() {
                continue;
            }
            let id = p.task.task_id.clone();
            m.runs.insert(
                id,
                RemoteRun {
                    link: p.link,
                    session_id: p.task.session_id.clone(),
                    log: Arc::default(),
                    claimed_at: Instant::now(),
                    instance: instance.to_owned(),
                },
            );
            return Some(p.task);
        }
        None
    }

    /// Events of a running task: stores those not seen yet, in order, before
    /// answering how many are stored. The count the daemon is told is on the task's
    /// row as well (PostgreSQL), so a new leader resumes the stream where it stands.
    pub async fn events(
        &self,
        caller: &Caller,
        task: &str,
        batch: EventBatch,
    ) -> Result<EventsReply, TaskCallError> {
        let (log, session_id, cancel) = {
            let mut state = lock(&self.inner.state);
            let m = holding(&mut state, caller, task)?;
            let run = m.runs.get(task).ok_or_else(|| gone(caller, task))?;
            (
                run.log.clone(),
                run.session_id.clone(),
                run.link.cancel.clone(),
            )
        };
        // On a task of its own: a daemon that gives up on the request (or loses its
        // connection) drops this handler, and a write that committed must still be
        // counted, or the events would be stored again when they come again.
        let store = self.inner.store.clone();
        let task_id = task.to_owned();
        let write = tokio::spawn(async move {
            let _one = log.write.lock().await;
            let received = log.received.load(Ordering::SeqCst);
            if batch.first <= received {
                let skip = usize::try_from(received - batch.first).unwrap_or(usize::MAX);
                let fresh: Vec<ExecEvent> = batch
                    .events
                    .into_iter()
                    .skip(skip)
                    .map(Into::into)
                    .collect();
                if !fresh.is_empty() {
                    let now = received + fresh.len() as u64;
                    let mut running = log.running.load(Ordering::SeqCst);
                    let items = run_items(&task_id, fresh, &mut running);
                    let stored = store
                        .daemon_events(task_id, session_id, items, received, now)
                        .await?;
                    if stored == now {
                        log.running.store(running, Ordering::SeqCst);
                    }
                    log.received.store(stored, Ordering::SeqCst);
                }
            }
            Ok::<u64, StoreError>(log.received.load(Ordering::SeqCst))
        });
        let received = write
            .await
            .map_err(|e| StoreError::Worker(format!("storing a daemon's events failed: {e}")))??;
        let cancel = *cancel.borrow();
        Ok(EventsReply { received, cancel })
    }

    /// Carries on with a task the last leader handed to `a.machine`'s daemon process
    /// `a.instance`: that process finds it here when it comes back (registering
    /// again with the same instance), and its events resume after `a.received`. The
    /// outcome comes on the receiver; `interrupted` if the process does not come back
    /// within the heartbeat window (or comes back as another process), and back in
    /// line if it never had the task.
    pub fn adopt(
        &self,
        a: &Adopted,
        cancel: watch::Receiver<bool>,
    ) -> oneshot::Receiver<TaskOutcome> {
        let (done, finished) = oneshot::channel();
        let mut state = lock(&self.inner.state);
        let now = Instant::now();
        let m = state
            .machines
            .entry(a.machine.clone())
            .or_insert_with(|| Machine::new(a.machine_name.clone(), None, a.instance.clone(), now));
        let log = RunLog::default();
        log.received.store(a.received, Ordering::SeqCst);
        log.running
            .store(a.task.status == TaskStatus::Running, Ordering::SeqCst);
        m.runs.insert(
            a.task.id.clone(),
            RemoteRun {
                link: Link { done, cancel },
                session_id: a.task.session_id.clone(),
                log: Arc::new(log),
                claimed_at: now,
                instance: a.instance.clone(),
            },
        );
        finished
    }

    /// The outcome of a task, once all its events are here. It is stored (on
    /// PostgreSQL) before the daemon is told so and forgets the task: a new leader
    /// records it even if this process dies before its scheduler does.
    pub async fn finish(
        &self,
        caller: &Caller,
        task: &str,
        req: FinishRequest,
    ) -> Result<Finished, TaskCallError> {
        let remembered = |m: &Machine| {
            m.finished
                .iter()
                .find(|(id, _)| id == task)
                .map(|(_, s)| Finished::Done(*s))
                .ok_or_else(|| gone(caller, task))
        };
        {
            let mut state = lock(&self.inner.state);
            let m = holding(&mut state, caller, task)?;
            let Some(run) = m.runs.get(task) else {
                return Ok(remembered(m)?);
            };
            if run.received() < req.events {
                return Ok(Finished::Missing {
                    received: run.received(),
                });
            }
        }
        // On a task of its own, as for events: a dropped request must not leave it
        // half done.
        let store = self.inner.store.clone();
        let (id, outcome) = (task.to_owned(), req.outcome.clone());
        tokio::spawn(async move { store.daemon_outcome(id, outcome).await })
            .await
            .map_err(|e| StoreError::Worker(format!("storing a daemon's outcome failed: {e}")))??;
        let mut state = lock(&self.inner.state);
        let m = holding(&mut state, caller, task)?;
        let Some(run) = m.runs.remove(task) else {
            return Ok(remembered(m)?);
        };
        let status = req.outcome.status;
        let _ = run.link.done.send(req.outcome);
        m.finished.push_back((task.to_owned(), status));
        if m.finished.len() > FINISHED_MEMORY {
            m.finished.pop_front();
        }
        Ok(Finished::Done(status))
    }

    /// A daemon stopping cleanly: its machine is offline at once. Whatever it still
    /// held (it reports its tasks before leaving) ends as for a missed window.
    pub async fn leave(&self, caller: &Caller, instance: &str) -> Result<(), StoreError> {
        let left = {
            let mut state = lock(&self.inner.state);
            let window = self.inner.config.window;
            match state.machines.get_mut(&caller.machine) {
                Some(m) if m.instance == instance && m.online => {
                    take_offline(m, window);
                    true
                }
                Some(_) | None => false,
            }
        };
        if left {
            tracing::info!(machine = %caller.machine, "a daemon left");
            self.sync_bindings(&caller.machine).await?;
        }
        Ok(())
    }

    /// Takes machines silent for longer than the window offline.
    async fn expire(&self) {
        let window = self.inner.config.window;
        let grace = window + super::DAEMON_RETRY_CAP + super::DAEMON_RETRY_CAP / 5;
        let gone: Vec<MachineId> = {
            let mut state = lock(&self.inner.state);
            let mut gone = Vec::new();
            for (id, m) in state.machines.iter_mut() {
                if m.online && m.last_seen.elapsed() > window {
                    take_offline(m, window);
                    gone.push(id.clone());
                } else if !m.online && !m.runs.is_empty() && m.last_seen.elapsed() > grace {
                    // Runs carried over from the last leader whose daemon did not
                    // come back.
                    for (_, run) in m.runs.drain() {
                        let _ = run.link.done.send(outcome(
                            TaskStatus::Interrupted,
                            format!(
                                "machine {} did not come back within {} s after the server that handed it the task stopped",
                                m.name,
                                grace.as_secs_f64()
                            ),
                        ));
                    }
                }
            }
            gone
        };
        for id in gone {
            tracing::warn!(machine = %id, "a daemon missed its heartbeat window; it is offline");
            if let Err(e) = self.sync_bindings(&id).await {
                tracing::error!(error = %e, "could not record a machine going offline");
            }
        }
    }

    /// Writes the machine's current online state onto the bindings made there.
    async fn sync_bindings(&self, machine: &MachineId) -> Result<(), StoreError> {
        let _serial = self.inner.sync.lock().await;
        let (online, name) = {
            let state = lock(&self.inner.state);
            match state.machines.get(machine) {
                Some(m) => (m.online, m.name.clone()),
                None => return Ok(()),
            }
        };
        self.inner
            .store
            .set_machine_online(machine.clone(), online)
            .await?;
        if !online {
            self.inner
                .store
                .touch_machine(machine.clone(), name)
                .await?;
        }
        Ok(())
    }

    /// Queues a task for `machine`; `false` if the machine is not online.
    fn enqueue(&self, machine: &MachineId, task: ClaimedTask, link: Link) -> Result<(), Link> {
        let mut state = lock(&self.inner.state);
        match state.machines.get_mut(machine) {
            Some(m) if m.online => {
                m.queue.push_back(Pending { task, link });
                m.wake.notify_waiters();
                Ok(())
            }
            _ => Err(link),
        }
    }

    /// Removes a task not claimed yet; `false` if its daemon has it.
    fn withdraw(&self, machine: &MachineId, task: &str) -> bool {
        let mut state = lock(&self.inner.state);
        let Some(m) = state.machines.get_mut(machine) else {
            return false;
        };
        let before = m.queue.len();
        m.queue.retain(|p| p.task.task_id != task);
        m.queue.len() != before
    }

    /// Creates a token named `name`; the token is in the answer only.
    pub async fn create_token(
        &self,
        name: String,
        member: Option<String>,
    ) -> Result<TokenChange<(TokenRow, String)>, StoreError> {
        let token = new_token()
            .map(|t| format!("berthd_{t}"))
            .map_err(|e| StoreError::Worker(format!("cannot read /dev/urandom: {e}")))?;
        let hash = token_hash(&token);
        Ok(
            match self.inner.store.create_token(name, hash, member).await? {
                TokenChange::Done(row) => {
                    lock(&self.inner.state)
                        .tokens
                        .insert(row.hash.clone(), row.clone());
                    TokenChange::Done((row, token))
                }
                TokenChange::Exists => TokenChange::Exists,
                TokenChange::Unknown => TokenChange::Unknown,
                TokenChange::OtherMachine(m) => TokenChange::OtherMachine(m),
            },
        )
    }

    /// Revokes a token; its machine goes offline at once (its runs end
    /// `interrupted`, its waiting tasks wait).
    pub async fn revoke_token(&self, name: String) -> Result<TokenChange<TokenRow>, StoreError> {
        let change = self.inner.store.revoke_token(name).await?;
        if let TokenChange::Done(row) = &change {
            let machine = {
                let mut state = lock(&self.inner.state);
                state.tokens.insert(row.hash.clone(), row.clone());
                let window = self.inner.config.window;
                match row
                    .machine
                    .as_ref()
                    .and_then(|id| state.machines.remove(id).map(|m| (id.clone(), m)))
                {
                    Some((id, mut m)) => {
                        take_offline(&mut m, window);
                        Some(id)
                    }
                    None => None,
                }
            };
            if let Some(id) = machine {
                self.inner.store.set_machine_online(id, false).await?;
            }
        }
        Ok(change)
    }

    /// The member a machine's token belongs to: `None` for a machine not registered
    /// in this process, `Some(None)` for one without a member (`berth serve`).
    pub fn machine_member(&self, machine: &MachineId) -> Option<Option<String>> {
        lock(&self.inner.state)
            .machines
            .get(machine)
            .map(|m| m.member.clone())
    }

    /// Removes a member: their API token stops working, their daemon tokens are
    /// revoked and their machines go offline at once (their sessions' tasks wait).
    pub async fn remove_member(
        &self,
        name: String,
    ) -> Result<crate::store::MemberChange, StoreError> {
        let (change, tokens) = self.inner.store.remove_member(name).await?;
        for token in tokens {
            self.revoke_token(token).await?;
        }
        Ok(change)
    }

    /// Every token, with its machine's state.
    pub async fn token_infos(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let rows = self.inner.store.tokens().await?;
        let machines: HashMap<MachineId, (String, Option<String>)> = self
            .inner
            .store
            .machines()
            .await?
            .into_iter()
            .map(|(id, name, seen)| (id, (name, seen)))
            .collect();
        let state = lock(&self.inner.state);
        Ok(rows
            .into_iter()
            .map(|r| {
                let live = r.machine.as_ref().and_then(|id| state.machines.get(id));
                let stored = r.machine.as_ref().and_then(|id| machines.get(id));
                let online = live.is_some_and(|m| m.online) && r.revoked_at.is_none();
                TokenInfo {
                    name: r.name,
                    machine_id: r.machine.as_ref().map(ToString::to_string),
                    machine_name: live
                        .map(|m| m.name.clone())
                        .or_else(|| stored.map(|s| s.0.clone())),
                    created_at: r.created_at,
                    revoked_at: r.revoked_at,
                    member: r.member,
                    online,
                    last_seen: if online {
                        Some(crate::clock::now())
                    } else {
                        stored.and_then(|s| s.1.clone())
                    },
                }
            })
            .collect())
    }
}

/// The registry as the scheduler sees it.
impl RemoteMachines for Daemons {
    fn accepts(&self) -> bool {
        Daemons::accepts(self)
    }

    fn online(&self) -> Vec<MachineId> {
        Daemons::online(self)
    }

    fn machine_member(&self, machine: &MachineId) -> Option<Option<String>> {
        Daemons::machine_member(self, machine)
    }

    fn pick(&self, owner: &str) -> Option<MachineId> {
        Daemons::pick(self, owner)
    }

    fn executor(&self, machine: &MachineId) -> Arc<dyn Executor> {
        Daemons::executor(self, machine)
    }

    fn adopt(&self, a: &Adopted, cancel: watch::Receiver<bool>) -> oneshot::Receiver<TaskOutcome> {
        Daemons::adopt(self, a, cancel)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        Daemons::subscribe(self)
    }
}

/// The caller's machine as its current process (`instance`) may use it, marked seen:
/// registered, online and not since registered again by another process.
fn current<'a>(
    state: &'a mut State,
    caller: &Caller,
    instance: &str,
) -> Result<&'a mut Machine, AuthError> {
    match state.machines.get_mut(&caller.machine) {
        Some(m) if m.instance == instance && m.online => {
            m.last_seen = Instant::now();
            Ok(m)
        }
        _ => Err(AuthError::NotRegistered {
            machine: caller.machine.to_string(),
        }),
    }
}

/// The caller's machine, marked seen, for a call about one of its tasks.
fn holding<'a>(state: &'a mut State, caller: &Caller, task: &str) -> Result<&'a mut Machine, Gone> {
    let m = state
        .machines
        .get_mut(&caller.machine)
        .ok_or_else(|| gone(caller, task))?;
    m.last_seen = Instant::now();
    Ok(m)
}

fn gone(caller: &Caller, task: &str) -> Gone {
    Gone {
        task: task.to_owned(),
        machine: caller.name.clone(),
    }
}

/// Takes a machine offline: its queue goes back in line, its runs end `interrupted`.
fn take_offline(m: &mut Machine, window: Duration) {
    m.online = false;
    for p in m.queue.drain(..) {
        let _ = p.link.done.send(back_in_line(&m.name));
    }
    for (_, run) in m.runs.drain() {
        let _ = run.link.done.send(outcome(
            TaskStatus::Interrupted,
            format!(
                "machine {} stopped answering (no heartbeat for {} s) while the task ran",
                m.name,
                window.as_secs_f64()
            ),
        ));
    }
    m.wake.notify_waiters();
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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

    #[cfg(feature = "local-binding")]
    fn validate(&self, dir: &str) -> Result<crate::executor::ValidatedDir, berth_core::Refusal> {
        Err(berth_core::Refusal::new(
            ErrorCode::DaemonMismatch,
            format!(
                "{dir} is on machine {}, whose daemon validates its own directories",
                self.name
            ),
            "link it with the berth CLI on that machine, while `berth daemon` runs there",
        ))
    }
}
