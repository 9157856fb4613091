//! One claimed task on the daemon: run it on the executor, stream its events in order,
//! then report its outcome.
//!
//! At most one request per task is in flight; a batch always starts at the first event
//! the server has not acknowledged, so after any failure the same events simply go
//! again. The outcome is sent only after every event is acknowledged, and retried until
//! the server records it (or says it no longer expects the task).

use super::backoff::{Backoff, TASK_BASE, TASK_CAP};
use super::outbox::{BATCH_BYTES, Outbox};
use super::remote::{CallError, Remote};
use super::state::Daemon;
use berth_core::api::TaskStatus;
use berth_core::{ErrorCode, TaskId};
use berth_web::daemon::wire::{ClaimedTask, EventBatch, EventsReply, FinishRequest};
use berth_web::executor::{TaskOutcome, TaskSpec};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What ended the task's streaming.
enum Ended {
    /// The executor returned this outcome; events may still be waiting.
    Ran(Box<TaskOutcome>),
    /// The server no longer expects the task: nothing more is sent.
    Gone,
}

fn short(id: &impl AsRef<str>) -> &str {
    let id = id.as_ref();
    id.get(..8).unwrap_or(id)
}

/// Runs one claimed task to the end, holding its slot (`permit`) until the server has
/// its outcome. A task whose directory does not parse on this machine is reported
/// `refused` and never run.
pub(super) async fn run(
    d: Arc<Daemon>,
    claimed: ClaimedTask,
    permit: OwnedSemaphorePermit,
    (cancel, ran): (watch::Sender<bool>, watch::Sender<bool>),
) {
    let id = claimed.task_id.clone();
    println!(
        "task {} claimed (session {}, agent {})",
        short(&id),
        short(&claimed.session_id),
        claimed.agent.name
    );
    let mut outbox = Outbox::new();
    let ended = match claimed.into_spec() {
        Ok(spec) => stream(&d, &id, spec, &cancel, &mut outbox).await,
        Err(refusal) => Ended::Ran(Box::new(TaskOutcome::refused(&refusal))),
    };
    ran.send_replace(true);
    match ended {
        Ended::Ran(mut outcome) => {
            if outcome.status == TaskStatus::Cancelled && d.is_stopping() {
                // Stopped with the daemon, not by anyone's cancel: as when
                // `berth serve` stops, the task was interrupted.
                outcome.status = TaskStatus::Interrupted;
                outcome.error = Some("berth daemon stopped while the task was running".into());
            }
            // The server never sees this machine's home or account name: where the
            // agent worked goes with its display form, stripped here.
            if let Some(dir) = outcome.work_dir.as_deref() {
                let ctx = d.executor.context();
                outcome.work_dir_display = berth_core::LocalPath::parse(ctx.platform, dir)
                    .ok()
                    .map(|p| berth_core::display::display(ctx, &p));
            }
            let status = outcome.status;
            if deliver(&d, &id, &mut outbox, *outcome).await {
                println!("task {} {}", short(&id), status.as_str());
            }
        }
        Ended::Gone => println!(
            "task {} was dropped: the server no longer expects it",
            short(&id)
        ),
    }
    d.untrack(&id);
    drop(permit);
}

fn send_batch(
    remote: &Remote,
    id: &TaskId,
    batch: EventBatch,
) -> Pending<Result<EventsReply, CallError>> {
    let remote = remote.clone();
    let id = id.clone();
    Box::pin(async move { remote.events(&id, &batch).await })
}

async fn maybe<T>(f: &mut Option<Pending<T>>) -> T {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Runs the task and sends its events while it runs, until the executor returned and
/// its event channel closed (events may remain to send), or the task is gone.
async fn stream(
    d: &Arc<Daemon>,
    id: &TaskId,
    spec: TaskSpec,
    cancel: &watch::Sender<bool>,
    outbox: &mut Outbox,
) -> Ended {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let exec = d.executor.clone();
    let mut run = tokio::spawn({
        let cancel = cancel.subscribe();
        async move { exec.run_task(spec, tx, cancel).await }
    });
    let mut outcome: Option<TaskOutcome> = None;
    let mut events_open = true;
    let mut gone = false;
    let mut inflight: Option<Pending<Result<EventsReply, CallError>>> = None;
    let mut retry: Option<Pending<()>> = None;
    let mut wait = Backoff::new(TASK_BASE, TASK_CAP);
    // An empty batch asks whether the server still expects this task: after the
    // daemon registers again (the server restarted, say) and every heartbeat period
    // of silence, so an agent the server gave up on (it missed the window, say) is
    // stopped now rather than at its next event.
    let mut registrations = d.registrations();
    let every = d.heartbeat_every();
    let mut quiet = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    quiet.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probe = false;
    let mut watching = true;
    loop {
        if !gone && inflight.is_none() && retry.is_none() {
            let batch = outbox.batch(BATCH_BYTES).or_else(|| {
                probe.then(|| EventBatch {
                    first: outbox.acknowledged(),
                    events: Vec::new(),
                })
            });
            if let Some(batch) = batch {
                probe = false;
                inflight = Some(send_batch(&d.remote, id, batch));
            }
        }
        if outcome.is_some() && !events_open {
            break;
        }
        tokio::select! {
            ev = rx.recv(), if events_open => match ev {
                Some(ev) if !gone => {
                    outbox.push(ev.into());
                }
                Some(_) => {}
                None => events_open = false,
            },
            res = &mut run, if outcome.is_none() => {
                outcome = Some(res.unwrap_or_else(|e| {
                    TaskOutcome::failed(
                        berth_core::ErrorCode::Internal,
                        format!("the daemon's executor failed: {e}"),
                    )
                }));
            }
            res = maybe(&mut inflight), if inflight.is_some() => {
                inflight = None;
                match res {
                    Ok(reply) => {
                        wait.reset();
                        d.link_ok();
                        if reply.cancel {
                            cancel.send_replace(true);
                        }
                        for a in reply.answers {
                            d.answer(a);
                        }
                        if let Err(lost) = outbox.ack(reply.received) {
                            eprintln!("task {}: {lost}; stopping it", short(id));
                            gone = true;
                        }
                    }
                    Err(e) if e.code() == Some(ErrorCode::TaskGone) => gone = true,
                    Err(e) => {
                        if e.is_unauthorized() {
                            let d = d.clone();
                            let seen = d.generation();
                            tokio::spawn(async move { d.reregister(seen, &e).await });
                        } else {
                            d.link_lost(&e);
                        }
                        let delay = wait.next_delay();
                        retry = Some(Box::pin(tokio::time::sleep(delay)));
                    }
                }
                if gone {
                    cancel.send_replace(true);
                    outbox.clear();
                }
            }
            () = maybe(&mut retry), if retry.is_some() => retry = None,
            _ = quiet.tick(), if !gone => {
                if inflight.is_none() && !outbox.has_pending() {
                    probe = true;
                }
            }
            changed = registrations.changed(), if watching && !gone => match changed {
                Ok(()) => probe = true,
                Err(_) => watching = false,
            },
        }
    }
    match outcome {
        Some(o) if !gone => Ended::Ran(Box::new(o)),
        Some(_) | None => Ended::Gone,
    }
}

/// The most a task's lines take of its `finish` request, written as JSON: well inside
/// the server's body limit, with room for the rest of the outcome.
const DIFF_JSON: usize = 640 * 1024;

/// Sends what is left of the events, then the outcome, retrying until the server
/// records it. Returns whether it did (false: the task is gone).
async fn deliver(
    d: &Arc<Daemon>,
    id: &TaskId,
    outbox: &mut Outbox,
    mut outcome: TaskOutcome,
) -> bool {
    // The task's lines travel inside the request size the server takes.
    outcome.diff = outcome.diff.take().map(|diff| diff.fit_json(DIFF_JSON));
    let mut wait = Backoff::new(TASK_BASE, TASK_CAP);
    loop {
        let seen = d.generation();
        let sent = match outbox.batch(BATCH_BYTES) {
            Some(batch) => d.remote.events(id, &batch).await.map(Some),
            None => {
                let body = FinishRequest {
                    events: outbox.total(),
                    outcome: outcome.clone(),
                };
                d.remote.finish(id, &body).await.map(|_| None)
            }
        };
        let err = match sent {
            Ok(None) => {
                d.link_ok();
                return true;
            }
            Ok(Some(reply)) => {
                wait.reset();
                d.link_ok();
                match outbox.ack(reply.received) {
                    Ok(()) => continue,
                    Err(lost) => {
                        eprintln!("task {}: {lost}; its outcome cannot be recorded", short(id));
                        return false;
                    }
                }
            }
            Err(e) => e,
        };
        match err.code() {
            Some(ErrorCode::TaskGone) => return false,
            Some(ErrorCode::EventsMissing) => {
                // Ask how many the server holds: an empty batch answers its count.
                let probe = EventBatch {
                    first: outbox.acknowledged(),
                    events: Vec::new(),
                };
                match d.remote.events(id, &probe).await {
                    Ok(reply) => {
                        if let Err(lost) = outbox.ack(reply.received) {
                            eprintln!("task {}: {lost}; its outcome cannot be recorded", short(id));
                            return false;
                        }
                        continue;
                    }
                    Err(e) if e.code() == Some(ErrorCode::TaskGone) => return false,
                    Err(e) => d.link_lost(&e),
                }
            }
            _ if err.is_unauthorized() => d.reregister(seen, &err).await,
            Some(_) | None => d.link_lost(&err),
        }
        tokio::time::sleep(wait.next_delay()).await;
    }
}
