//! Chat channels' bookkeeping on PostgreSQL (see SQLite's `channels`).

use super::Pg;
use crate::clock;
use crate::store::rows::{Cols, payload_from};
use crate::store::{
    ChannelIntake, ChannelThread, NewChannelMessage, NewSessionRow, StoreError, TaskRow,
};
use berth_core::SessionId;
use berth_core::resolve::Origin;

impl Pg {
    pub(crate) async fn channel_intake(
        &self,
        m: NewChannelMessage,
    ) -> Result<ChannelIntake, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // A retry delivered to another replica at the same moment waits here on the
        // primary key, then finds the row and stores nothing.
        let fresh = w
            .q()
            .exec(
                "INSERT INTO channel_events (platform, event_id, received_at) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&m.platform, &m.event_id, &clock::now()],
            )
            .await?;
        if fresh == 0 {
            return Ok(ChannelIntake::Duplicate);
        }
        let known = w
            .q()
            .opt(
                "SELECT session_id FROM channel_threads WHERE platform = $1 AND thread_key = $2",
                &[&m.platform, &m.thread_key],
            )
            .await?;
        let (session_id, new_session) = match known {
            Some(r) => (r.id(0)?, false),
            None => {
                let session = w
                    .insert_session(NewSessionRow::channel(m.title, m.agent, m.owner))
                    .await?;
                w.q()
                    .exec(
                        "INSERT INTO channel_threads
                           (platform, thread_key, session_id, created_at, started_by)
                         VALUES ($1, $2, $3, $4, $5)",
                        &[
                            &m.platform,
                            &m.thread_key,
                            &session.id.as_str(),
                            &clock::now(),
                            &m.user,
                        ],
                    )
                    .await?;
                (session.id, true)
            }
        };
        let (task, _) = w
            .insert_message(session_id.as_str(), Origin::Channel, &m.text)
            .await?;
        self.publish(w).await?;
        Ok(ChannelIntake::Queued {
            session_id,
            task: Box::new(task),
            new_session,
        })
    }

    pub(crate) async fn channel_thread(
        &self,
        session_id: SessionId,
    ) -> Result<Option<ChannelThread>, StoreError> {
        self.first(
            "SELECT platform, thread_key, started_by FROM channel_threads WHERE session_id = $1",
            &[&session_id.as_str()],
            |r| {
                Ok(ChannelThread {
                    platform: r.text(0)?,
                    thread_key: r.text(1)?,
                    started_by: r.opt_text(2)?,
                })
            },
        )
        .await
    }

    pub(crate) async fn task_agent_events(
        &self,
        task: TaskRow,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        self.all(
            "SELECT payload FROM events
             WHERE session_id = $1 AND task_id = $2 AND kind = 'agent' ORDER BY seq",
            &[&task.session_id.as_str(), &task.id.as_str()],
            |r| payload_from(&r.text(0)?),
        )
        .await
    }
}
