//! The live side of remote daemons, behind one mutex: which machines are online, the
//! tasks waiting for each, and the runs each holds.
//!
//! A task the scheduler resolves to a daemon's machine goes through the [`remote`]
//! executor, which queues it here and waits. The daemon's long-poll claim
//! takes it from the queue; its events and outcome come back through the daemon
//! routes and reach the waiting executor, so the scheduler records them exactly as
//! for the embedded executor. A machine silent for longer than the heartbeat window
//! goes offline: tasks it had not claimed go back to `waiting_daemon`, tasks it was
//! running end `interrupted`.
//!
//! This file holds the state behind the mutex and starts the registry; each part is
//! a set of [`Daemons`]' methods on that state:
//! - [`tokens`]: daemon tokens, and who a call comes from;
//! - [`machines`]: registration, heartbeats, leaving, the offline monitor, and which
//!   machine runs unbound work;
//! - [`queue`]: the tasks waiting for a machine, and its daemon's claims;
//! - [`runs`]: the runs a daemon holds: their events, the decisions on their
//!   requests waiting to be handed over, and how they end;
//! - [`remote`]: the executor that runs a task on a machine through all of these.

mod machines;
mod queue;
mod remote;
mod runs;
mod tokens;

pub use machines::MachineHome;
pub use runs::{Finished, Gone, TaskCallError};
pub use tokens::{AuthError, Caller};

use super::DaemonConfig;
use crate::executor::{Executor, TaskOutcome};
use crate::scheduler::{Asked, RemoteMachines};
use crate::store::{Adopted, Store, StoreError, TokenRow};
use berth_core::TaskId;
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use queue::Pending;
use runs::{RemoteRun, back_in_line, outcome};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot, watch};

/// A machine as this process knows it: its daemon's liveness, queue and runs.
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
    runs: HashMap<TaskId, RemoteRun>,
    finished: VecDeque<(TaskId, TaskStatus)>,
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

    /// Takes the machine offline: its queue goes back in line, its runs end
    /// `interrupted`.
    fn take_offline(&mut self, window: Duration) {
        self.online = false;
        for p in self.queue.drain(..) {
            let _ = p.link.done.send(back_in_line(&self.name));
        }
        self.interrupt_runs(&format!(
            "machine {} stopped answering (no heartbeat for {} s) while the task ran",
            self.name,
            window.as_secs_f64()
        ));
        self.wake.notify_waiters();
    }

    /// Ends every run the machine holds `interrupted`, with `error`.
    fn interrupt_runs(&mut self, error: &str) {
        for (_, run) in self.runs.drain() {
            let _ = run
                .link
                .done
                .send(outcome(TaskStatus::Interrupted, error.to_owned()));
        }
    }
}

/// Everything behind the registry's one mutex.
#[derive(Default)]
struct State {
    machines: HashMap<MachineId, Machine>,
    /// Live and revoked tokens by hash.
    tokens: HashMap<String, TokenRow>,
    /// Round-robin cursor for unbound work.
    turn: usize,
    /// Where the requests runs put to a person go once stored (the scheduler's
    /// [`RemoteMachines::requests`]); none kept before it asks.
    asked: Option<mpsc::UnboundedSender<Asked>>,
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
    /// How long a task waits in a machine's queue for its daemon's claim.
    metrics: crate::metrics::Metrics,
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

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Daemons {
    /// Loads the tokens and starts the offline monitor. `accept`: whether daemon
    /// routes are served at all (only then does the server show bindings on other
    /// machines as waiting for them). Claims are timed into `metrics`
    /// (`berth_claim_latency_seconds`).
    pub async fn start(
        store: Store,
        config: DaemonConfig,
        accept: bool,
        metrics: crate::metrics::Metrics,
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
                metrics,
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

    fn requests(&self) -> mpsc::UnboundedReceiver<Asked> {
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&self.inner.state).asked = Some(tx);
        rx
    }
}
