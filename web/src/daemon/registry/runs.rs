//! The runs the daemons hold: their events, stored as they come, and how each ends
//! (the daemon's outcome, or one the server gives when the daemon cannot).

use super::tokens::Caller;
use super::{Daemons, Machine, State, lock};
use crate::daemon::wire::{EventBatch, EventsReply, FinishRequest, WireAnswer};
use crate::executor::{ExecEvent, TaskOutcome};
use crate::scheduler::{Asked, run_items, waiting_for};
use crate::store::{Adopted, DaemonEvents, RunItem, StoreError};
use berth_core::api::TaskStatus;
use berth_core::approval::Answer;
use berth_core::binding::MachineId;
use berth_core::{ErrorCode, SessionId, TaskId};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::{oneshot, watch};

/// How many finished task ids a machine remembers, so a repeated `finish` (its
/// answer was lost) is acknowledged again.
const FINISHED_MEMORY: usize = 256;

/// A daemon call the server no longer expects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task} is not running on machine {machine} (it ended, or was never claimed by it)")]
pub struct Gone {
    /// The task as the daemon named it.
    pub task: String,
    pub machine: String,
}

impl Gone {
    /// The answer to `caller`'s call about `task` (as the daemon named it: an id it
    /// holds, or text that is no task id at all).
    pub fn of(caller: &Caller, task: &str) -> Gone {
        Gone {
            task: task.to_owned(),
            machine: caller.name.clone(),
        }
    }
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

/// Where a run's outcome goes, and whether it is cancelled. (Its events go straight
/// to the store: see [`Daemons::events`].)
pub(super) struct Link {
    pub(super) done: oneshot::Sender<TaskOutcome>,
    pub(super) cancel: watch::Receiver<bool>,
}

/// How far a run's events are stored.
#[derive(Debug, Default)]
pub(super) struct RunLog {
    /// How many of the daemon's events for the task are stored (and acknowledged).
    received: AtomicU64,
    /// Whether the transcript already says the task runs.
    running: AtomicBool,
    /// One batch at a time is stored (a retried request may overlap its original).
    write: tokio::sync::Mutex<()>,
}

/// A task a daemon claimed (or the last leader handed it), until it finishes.
pub(super) struct RemoteRun {
    pub(super) link: Link,
    pub(super) session_id: SessionId,
    pub(super) log: Arc<RunLog>,
    pub(super) claimed_at: Instant,
    /// The daemon process that holds it.
    pub(super) instance: String,
    /// The number of the claim that handed it out, when the daemon numbers its claims
    /// (see `wire::Heartbeat::claimed_through`); `None` for a run handed over by the
    /// last leader.
    pub(super) claim_seq: Option<u64>,
    /// Heartbeats past the window that did not list it, in a row.
    pub(super) misses: u32,
    /// Decisions on its requests not yet handed to its daemon (see `wire`'s
    /// decisions): each goes once, on the daemon's next exchange.
    pub(super) answers: Vec<WireAnswer>,
}

impl RemoteRun {
    /// A run just claimed by (or handed over to) `instance`, nothing heard of it yet.
    pub(super) fn new(
        link: Link,
        session_id: SessionId,
        log: RunLog,
        instance: String,
        claim_seq: Option<u64>,
    ) -> Self {
        RemoteRun {
            link,
            session_id,
            log: Arc::new(log),
            claimed_at: Instant::now(),
            instance,
            claim_seq,
            misses: 0,
            answers: Vec::new(),
        }
    }

    /// How many of its events are stored.
    pub(super) fn received(&self) -> u64 {
        self.log.received.load(Ordering::SeqCst)
    }
}

/// How a remote run ended without the daemon's own outcome, and why: `interrupted`
/// carries its code.
pub(super) fn outcome(status: TaskStatus, error: String) -> TaskOutcome {
    let code = (status == TaskStatus::Interrupted).then_some(ErrorCode::Interrupted);
    TaskOutcome::ended(status, code, error)
}

/// The outcome that puts a task back in line: not started, waiting for `machine`.
pub(super) fn back_in_line(name: &str) -> TaskOutcome {
    let mut o = outcome(TaskStatus::WaitingDaemon, waiting_for(name));
    o.code = Some(ErrorCode::DaemonOffline);
    o
}

impl Daemons {
    /// Events of a running task: stores those not seen yet, in order, before
    /// answering how many are stored. The count the daemon is told is on the task's
    /// row as well (PostgreSQL), so a new leader resumes the stream where it stands.
    pub async fn events(
        &self,
        caller: &Caller,
        task: &TaskId,
        batch: EventBatch,
    ) -> Result<EventsReply, TaskCallError> {
        let (log, session_id, cancel, asked) = {
            let mut state = lock(&self.inner.state);
            let asked = state.asked.clone();
            let m = holding(&mut state, caller, task)?;
            let run = m.runs.get(task).ok_or_else(|| gone(caller, task))?;
            (
                run.log.clone(),
                run.session_id.clone(),
                run.link.cancel.clone(),
                asked,
            )
        };
        let machine = caller.machine.clone();
        // On a task of its own: a daemon that gives up on the request (or loses its
        // connection) drops this handler, and a write that committed must still be
        // counted, or the events would be stored again when they come again.
        let store = self.inner.store.clone();
        let task_id = task.clone();
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
                    let items = run_items(&task_id, &session_id, fresh, &mut running);
                    let requests: Vec<_> = items
                        .iter()
                        .filter_map(|i| match i {
                            RunItem::Approval(a) => Some((**a).clone()),
                            RunItem::Status(..) | RunItem::Agent(_) | RunItem::Delta(_) => None,
                        })
                        .collect();
                    let sent = DaemonEvents {
                        task_id,
                        session_id,
                        items,
                        from: received,
                        to: now,
                    };
                    let stored = store.daemon_events(sent).await?;
                    if stored == now {
                        log.running.store(running, Ordering::SeqCst);
                        // Stored by this batch (not an earlier copy of it): each
                        // request gets its session's rules and its deadline once.
                        for approval in requests {
                            if let Some(tx) = &asked {
                                let _ = tx.send(Asked {
                                    machine: machine.clone(),
                                    approval,
                                });
                            }
                        }
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
        let answers = lock(&self.inner.state)
            .machines
            .get_mut(&caller.machine)
            .and_then(|m| m.runs.get_mut(task))
            .map(|run| std::mem::take(&mut run.answers))
            .unwrap_or_default();
        Ok(EventsReply {
            received,
            cancel,
            answers,
        })
    }

    /// Keeps a decision on request `id` for the daemon running `task` on `machine`,
    /// to hand over on its next exchange; `false` when no daemon of `machine` holds
    /// the task (it ended, or was never claimed): nothing is kept.
    pub(super) fn hand(
        &self,
        machine: &MachineId,
        task: &TaskId,
        id: &str,
        answer: Answer,
    ) -> bool {
        let mut state = lock(&self.inner.state);
        let Some(run) = state
            .machines
            .get_mut(machine)
            .and_then(|m| m.runs.get_mut(task))
        else {
            return false;
        };
        run.answers.push(WireAnswer {
            task_id: task.clone(),
            id: id.to_owned(),
            answer,
        });
        true
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
            RemoteRun::new(
                Link { done, cancel },
                a.task.session_id.clone(),
                log,
                a.instance.clone(),
                None,
            ),
        );
        finished
    }

    /// The outcome of a task, once all its events are here. It is stored (on
    /// PostgreSQL) before the daemon is told so and forgets the task: a new leader
    /// records it even if this process dies before its scheduler does.
    pub async fn finish(
        &self,
        caller: &Caller,
        task: &TaskId,
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
        let (id, outcome) = (task.clone(), req.outcome.clone());
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
        m.finished.push_back((task.clone(), status));
        if m.finished.len() > FINISHED_MEMORY {
            m.finished.pop_front();
        }
        Ok(Finished::Done(status))
    }
}

/// The caller's machine, marked seen, for a call about one of its tasks.
fn holding<'a>(
    state: &'a mut State,
    caller: &Caller,
    task: &TaskId,
) -> Result<&'a mut Machine, Gone> {
    let m = state
        .machines
        .get_mut(&caller.machine)
        .ok_or_else(|| gone(caller, task))?;
    m.last_seen = Instant::now();
    Ok(m)
}

fn gone(caller: &Caller, task: &TaskId) -> Gone {
    Gone::of(caller, task.as_str())
}
