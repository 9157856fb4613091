//! What the processes on one database tell each other: `LISTEN`/`NOTIFY` on a
//! connection of its own, and the notices a write sends at its commit.

use super::Pg;
use super::pool::W;
use crate::store::StoreError;
use crate::transcript::Live;
use berth_core::SessionId;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

/// `NOTIFY` channels, payload `REPLICA SESSION`: a session's transcript grew; a
/// session has work for the leader's scheduler.
const EVENTS_CHANNEL: &str = "berth_events";
const WORK_CHANNEL: &str = "berth_work";

/// What another process on the database announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A session has new work.
    Work(SessionId),
    /// Notifications may have been missed (the listening connection was lost): look
    /// at everything again.
    Resync,
}

impl Pg {
    /// Listens for other processes' notices, for as long as `pg` lives: transcript
    /// growth reaches this process's live feed (its subscribers read the new events
    /// from the store), work reaches [`Pg::work`]. A lost connection is replaced, with
    /// backoff, and a [`Notice::Resync`] (plus a nudge to every live subscriber) covers
    /// whatever was announced meanwhile.
    pub(crate) fn listen(pg: &Arc<Pg>) {
        let weak = Arc::downgrade(pg);
        tokio::spawn(async move {
            let mut wait =
                crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
            let mut first = true;
            loop {
                let Some(pg) = weak.upgrade() else { return };
                let config = pg.config.clone();
                let catch_up = pg.lists.channel().to_owned();
                drop(pg);
                match config.connect(NoTls).await {
                    Ok((client, mut connection)) => {
                        let sql = format!(
                            "LISTEN {EVENTS_CHANNEL}; LISTEN {WORK_CHANNEL}; LISTEN {}; LISTEN {}",
                            crate::store::lists::CHANGED,
                            catch_up,
                        );
                        let listening = async { client.batch_execute(&sql).await };
                        let mut listening = std::pin::pin!(listening);
                        let mut subscribed = false;
                        loop {
                            tokio::select! {
                                r = &mut listening, if !subscribed => {
                                    if r.is_err() { break; }
                                    subscribed = true;
                                    wait.reset();
                                    let Some(pg) = weak.upgrade() else { return };
                                    pg.lists.subscribed();
                                    if !first {
                                        pg.hub.nudge_all();
                                        let _ = pg.work.send(Notice::Resync);
                                    }
                                    first = false;
                                }
                                msg = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                                    let Some(Ok(msg)) = msg else { break };
                                    let Some(pg) = weak.upgrade() else { return };
                                    if let tokio_postgres::AsyncMessage::Notification(n) = msg {
                                        pg.noticed(n.channel(), n.payload());
                                    }
                                }
                            }
                        }
                        if let Some(pg) = weak.upgrade() {
                            pg.lists.lost();
                        }
                        tracing::warn!(
                            "the database connection for notifications was lost; reconnecting"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for database notifications; retrying");
                    }
                }
                tokio::time::sleep(wait.next_delay()).await;
            }
        });
    }

    fn noticed(&self, channel: &str, payload: &str) {
        match channel {
            EVENTS_CHANNEL => {
                if let Some((replica, session)) = payload.split_once(' ')
                    && replica != self.replica
                {
                    match SessionId::parse(session) {
                        Ok(session) => self.hub.nudge(&session),
                        Err(e) => tracing::warn!(error = %e, "a notification names no session"),
                    }
                }
            }
            WORK_CHANNEL => {
                // This process's own work went to its scheduler directly.
                if let Some((replica, session)) = payload.split_once(' ')
                    && replica != self.replica
                {
                    match SessionId::parse(session) {
                        Ok(session) => {
                            let _ = self.work.send(Notice::Work(session));
                        }
                        Err(e) => tracing::warn!(error = %e, "a notification names no session"),
                    }
                }
            }
            crate::store::lists::CHANGED => self.lists.changed(),
            other if other == self.lists.channel() => self.lists.caught_up(payload),
            _ => {}
        }
    }

    /// Work announced on the database (by this process too).
    pub(crate) fn work(&self) -> tokio::sync::broadcast::Receiver<Notice> {
        self.work.subscribe()
    }

    /// Announces that `session` has work, to whichever process leads.
    pub(crate) async fn announce_work(&self, session: SessionId) -> Result<(), StoreError> {
        self.exec(
            "SELECT pg_notify($1, $2)",
            &[&WORK_CHANNEL, &format!("{} {session}", self.replica)],
        )
        .await?;
        Ok(())
    }

    /// Commits a write. Other processes' live feeds hear of every session it appended
    /// to, and the leader of every session given work: delivered at commit, not before.
    pub(super) async fn publish(&self, mut w: W<'_>) -> Result<(), StoreError> {
        // Deltas stay on this replica: others show the whole message once stored.
        let mut sessions: Vec<SessionId> = w
            .outbox
            .0
            .iter()
            .filter_map(|e| match e {
                Live::Stored(e) => Some(e.session_id.clone()),
                Live::Nudge(_) | Live::Delta(_) => None,
            })
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        let work = std::mem::take(&mut w.work);
        let notes: Vec<(&str, String)> = sessions
            .iter()
            .map(|s| (EVENTS_CHANNEL, s))
            .chain(work.iter().map(|s| (WORK_CHANNEL, s)))
            .map(|(channel, session)| (channel, format!("{} {session}", self.replica)))
            .collect();
        w.commit(&notes, &self.hub).await
    }
}
