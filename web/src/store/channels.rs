//! Chat channels' bookkeeping: which webhook deliveries were already taken in, and
//! which conversation (a Slack thread, a Lark chat) belongs to which session.

use super::rows::payload_from;
use super::sessions::insert_session;
use super::tasks::insert_message;
use super::{NewSessionRow, Store, StoreError, TaskRow};
use crate::clock;
use berth_core::SessionId;
use berth_core::resolve::Origin;
use rusqlite::{OptionalExtension, params};

/// A chat message as the store takes it in. It has no path and no binding: a channel
/// session is created unbound with origin `channel`, and its text is only a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChannelMessage {
    /// `slack` or `lark`.
    pub platform: &'static str,
    /// The conversation: one session per key.
    pub thread_key: String,
    /// The platform's id of the delivery; a second delivery with it is a retry.
    pub event_id: String,
    pub text: String,
    /// The agent of a new session (`None`: the only registered agent).
    pub agent: Option<String>,
    /// The title of a new session.
    pub title: String,
    /// Who a new session belongs to (the channel identity of a team server).
    pub owner: Option<String>,
    /// The platform's id of the user who wrote it (Slack's `U…`, Lark's open id): kept
    /// for a new conversation as who started it.
    pub user: Option<String>,
}

/// What became of a channel message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelIntake {
    /// The event id was seen before: nothing was stored.
    Duplicate,
    /// Stored as a queued task of the conversation's session.
    Queued {
        session_id: SessionId,
        task: Box<TaskRow>,
        new_session: bool,
    },
}

/// The conversation a channel session answers to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelThread {
    pub platform: String,
    pub thread_key: String,
    /// The platform's id of the user whose message started it (who answers its
    /// requests); `None` for a conversation taken in before it was kept.
    pub started_by: Option<String>,
}

impl Store {
    /// Takes a channel message in, in one transaction: records its event id (a retry
    /// stores nothing), finds or creates the conversation's session (origin
    /// `channel`, unbound), and queues the text as a task with origin `channel`.
    /// When anything fails (e.g. no agent to use), nothing is recorded, so the
    /// platform's retry can succeed later.
    pub async fn channel_intake(&self, m: NewChannelMessage) -> Result<ChannelIntake, StoreError> {
        on_pg!(self, pg => pg.channel_intake(m));
        self.write(move |tx, outbox| {
            let fresh = tx
                .prepare_cached(
                    "INSERT INTO channel_events (platform, event_id, received_at)
                     VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
                )?
                .execute(params![m.platform, m.event_id, clock::now()])?;
            if fresh == 0 {
                return Ok(ChannelIntake::Duplicate);
            }
            let known: Option<String> = tx
                .query_row(
                    "SELECT session_id FROM channel_threads WHERE platform = ?1 AND thread_key = ?2",
                    params![m.platform, m.thread_key],
                    |r| r.get(0),
                )
                .optional()?;
            let (session_id, new_session) = match known {
                Some(id) => (SessionId::try_from(id)?, false),
                None => {
                    let session =
                        insert_session(tx, NewSessionRow::channel(m.title, m.agent, m.owner))?;
                    tx.prepare_cached(
                        "INSERT INTO channel_threads
                           (platform, thread_key, session_id, created_at, started_by)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )?
                    .execute(params![
                        m.platform,
                        m.thread_key,
                        session.id.as_str(),
                        clock::now(),
                        m.user
                    ])?;
                    (session.id, true)
                }
            };
            let (task, _) = insert_message(tx, outbox, session_id.as_str(), Origin::Channel, &m.text)?;
            Ok(ChannelIntake::Queued {
                session_id,
                task: Box::new(task),
                new_session,
            })
        })
        .await
    }

    /// The conversation a session answers to, if it is a channel session.
    pub async fn channel_thread(
        &self,
        session_id: SessionId,
    ) -> Result<Option<ChannelThread>, StoreError> {
        on_pg!(self, pg => pg.channel_thread(session_id));
        self.read_small(move |conn| {
            conn.prepare_cached(
                "SELECT platform, thread_key, started_by FROM channel_threads
                 WHERE session_id = ?1",
            )?
            .query_row([session_id.as_str()], |r| {
                Ok(ChannelThread {
                    platform: r.get(0)?,
                    thread_key: r.get(1)?,
                    started_by: r.get(2)?,
                })
            })
            .optional()
            .map_err(StoreError::from)
        })
        .await
    }

    /// The agent events one task appended to its session's transcript, in order.
    pub async fn task_agent_events(
        &self,
        task: TaskRow,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        on_pg!(self, pg => pg.task_agent_events(task));
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT payload FROM events
                 WHERE session_id = ?1 AND task_id = ?2 AND kind = 'agent' ORDER BY seq",
            )?;
            let rows = stmt
                .query_map(params![task.session_id.as_str(), task.id.as_str()], |r| {
                    r.get::<_, String>(0)
                })?;
            let mut out = Vec::new();
            for payload in rows {
                out.push(payload_from(&payload?)?);
            }
            Ok(out)
        })
        .await
    }
}
