//! The transcript: each session's append-only event log, and its live feed.
//!
//! Every event is stored first (SQLite assigns nothing; the store numbers events 1, 2,
//! 3… per session inside the writing transaction) and only then published on the
//! session's broadcast channel, under the store's writer lock, so subscribers see
//! events in sequence order. A subscriber that falls behind re-reads the store;
//! the sequence number is the SSE `id`, which makes replay exact.

use berth_core::{SessionId, TaskId};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::broadcast;

/// What a transcript event records. The SSE `event:` field is [`EventKind::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A user message: `{task_id, message_id, origin, text}`.
    Message,
    /// A task's status changed: `{task_id, status, wait_reason}`.
    Status,
    /// Something the agent did: an [`berth_core::event::AgentEvent`] document.
    Agent,
    /// A task ended: `{"task": Task, "code": stable code or null}`, the final task
    /// document and, for a refusal or a validator failure, its contract code.
    Task,
    /// The session's binding changed: `{from, to}`, display forms or `null`.
    BindingChanged,
    /// A task's changes were undone: `{task_id, files, forced, commit}`.
    Undo,
    /// The agent asked a person (an [`berth_core::approval::Approval`]), sent again
    /// with its `decision` once decided.
    Approval,
}

impl EventKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::Message => "message",
            EventKind::Status => "status",
            EventKind::Agent => "agent",
            EventKind::Task => "task",
            EventKind::BindingChanged => "binding_changed",
            EventKind::Undo => "undo",
            EventKind::Approval => "approval",
        }
    }
}

/// One stored transcript event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscriptEvent {
    pub session_id: SessionId,
    /// 1, 2, 3… within the session, never reused.
    pub seq: i64,
    pub task_id: Option<TaskId>,
    /// An [`EventKind`] spelling.
    pub kind: String,
    pub payload: serde_json::Value,
    pub at: String,
}

impl TranscriptEvent {
    /// The event a store just wrote: number `seq` of the session's transcript.
    pub(crate) fn stored(
        session_id: &SessionId,
        seq: i64,
        task_id: Option<&TaskId>,
        kind: EventKind,
        payload: serde_json::Value,
        at: String,
    ) -> TranscriptEvent {
        TranscriptEvent {
            session_id: session_id.clone(),
            seq,
            task_id: task_id.cloned(),
            kind: kind.as_str().to_owned(),
            payload,
            at,
        }
    }
}

/// The `seq` of a [`Hub::nudge`]: no event, only "read the store".
pub const NUDGE_SEQ: i64 = i64::MAX;

/// How many undelivered events a slow subscriber may fall behind before it re-reads
/// the store.
const CHANNEL_CAPACITY: usize = 1024;

/// One broadcast channel per session with live subscribers.
#[derive(Debug, Default)]
pub struct Hub {
    channels: Mutex<HashMap<SessionId, broadcast::Sender<Arc<TranscriptEvent>>>>,
}

impl Hub {
    /// Subscribes to a session's future events. Subscribe *before* reading the
    /// backlog; de-duplicate by `seq`.
    pub fn subscribe(&self, session_id: &SessionId) -> broadcast::Receiver<Arc<TranscriptEvent>> {
        let mut map = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(session_id.clone())
            .or_insert_with(|| broadcast::channel(CHANNEL_CAPACITY).0)
            .subscribe()
    }

    /// Tells a session's subscribers that the store holds events they have not been
    /// given (another process on the database wrote them): they read the store.
    pub fn nudge(&self, session_id: &SessionId) {
        self.publish(TranscriptEvent {
            session_id: session_id.clone(),
            seq: NUDGE_SEQ,
            task_id: None,
            kind: String::new(),
            payload: serde_json::Value::Null,
            at: String::new(),
        });
    }

    /// [`Hub::nudge`] for every session with subscribers.
    pub fn nudge_all(&self) {
        let sessions: Vec<SessionId> = self
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        for s in sessions {
            self.nudge(&s);
        }
    }

    /// Delivers a stored event to the session's subscribers, if any.
    pub fn publish(&self, event: TranscriptEvent) {
        let mut map = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = map.get(&event.session_id) else {
            return;
        };
        if tx.receiver_count() == 0 {
            map.remove(&event.session_id);
            return;
        }
        // Nobody listening between the check and the send is harmless.
        let _ = tx.send(Arc::new(event));
    }
}
