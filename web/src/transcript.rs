//! The transcript: each session's append-only event log, and its live feed.
//!
//! Every event is stored first (SQLite assigns nothing; the store numbers events 1, 2,
//! 3… per session inside the writing transaction) and only then published on the
//! session's broadcast channel, under the store's writer lock, so subscribers see
//! events in sequence order. A subscriber that falls behind re-reads the store;
//! the sequence number is the SSE `id`, which makes replay exact.
//!
//! The feed also carries what is never stored: a message's pieces as the agent
//! streams them ([`Live::Delta`]), in their place among the stored events, with no
//! `seq`. A subscriber that falls behind loses them and shows the whole message
//! when it is stored.

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

/// What a session's live feed carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Live {
    /// An event just stored, in `seq` order.
    Stored(TranscriptEvent),
    /// Another process stored events: read the store.
    Nudge(SessionId),
    /// A piece of a message as it arrives: shown live, never stored.
    Delta(Delta),
}

/// A piece of a message, for [`Live::Delta`].
#[derive(Debug, Clone, PartialEq)]
pub struct Delta {
    pub session_id: SessionId,
    pub task_id: TaskId,
    /// An [`berth_core::event::AgentEvent::Delta`] document.
    pub payload: serde_json::Value,
    /// The `seq` of the last stored event this process published to the session
    /// before it (set by [`Hub::publish`]; `None` when unknown): a subscriber shows
    /// the delta only right after that event, never ahead of it nor after an event
    /// stored later (the whole message, say, read from the store while catching up).
    pub after: Option<i64>,
}

impl Live {
    fn session_id(&self) -> &SessionId {
        match self {
            Live::Stored(ev) => &ev.session_id,
            Live::Nudge(s) => s,
            Live::Delta(d) => &d.session_id,
        }
    }
}

/// How many undelivered events a slow subscriber may fall behind before it re-reads
/// the store.
const CHANNEL_CAPACITY: usize = 1024;

/// One broadcast channel per session with live subscribers.
#[derive(Debug, Default)]
pub struct Hub {
    channels: Mutex<HashMap<SessionId, Channel>>,
}

#[derive(Debug)]
struct Channel {
    tx: broadcast::Sender<Arc<Live>>,
    /// The `seq` of the last stored event published on it (see [`Delta::after`]).
    last: Option<i64>,
}

impl Hub {
    /// Subscribes to a session's future events. Subscribe *before* reading the
    /// backlog; de-duplicate by `seq`.
    pub fn subscribe(&self, session_id: &SessionId) -> broadcast::Receiver<Arc<Live>> {
        let mut map = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(session_id.clone())
            .or_insert_with(|| Channel {
                tx: broadcast::channel(CHANNEL_CAPACITY).0,
                last: None,
            })
            .tx
            .subscribe()
    }

    /// Tells a session's subscribers that the store holds events they have not been
    /// given (another process on the database wrote them): they read the store.
    pub fn nudge(&self, session_id: &SessionId) {
        self.publish(Live::Nudge(session_id.clone()));
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

    /// Delivers a stored event (or a nudge, or a delta) to the session's subscribers,
    /// if any.
    pub fn publish(&self, mut event: Live) {
        let mut map = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(channel) = map.get_mut(event.session_id()) else {
            return;
        };
        if channel.tx.receiver_count() == 0 {
            map.remove(event.session_id());
            return;
        }
        match &mut event {
            Live::Stored(ev) => channel.last = channel.last.max(Some(ev.seq)),
            // What this process published last is no longer the store's last.
            Live::Nudge(_) => channel.last = None,
            Live::Delta(d) => d.after = channel.last,
        }
        let tx = &channel.tx;
        // Nobody listening between the check and the send is harmless.
        let _ = tx.send(Arc::new(event));
    }
}
