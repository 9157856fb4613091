//! Which process leads: the one whose scheduler runs tasks and whose registry holds
//! the daemons, while it holds an advisory lock; and the address it advertised.

use super::Pg;
use crate::clock;
use crate::store::StoreError;
use crate::store::rows::Cols;
use std::sync::PoisonError;

/// The advisory lock the leading `berth-server` holds while it leads ("berthS").
const SERVING_LOCK: i64 = 0x62_65_72_74_68_53;

impl Pg {
    /// The leader's address, as it advertised it.
    pub(crate) async fn leader_url(&self) -> Result<Option<String>, StoreError> {
        self.first("SELECT url FROM berth_leader WHERE id = 1", &[], |r| {
            r.text(0)
        })
        .await
    }

    /// Tries to become the database's leader: the one process whose scheduler runs
    /// tasks and whose registry holds the daemons' connections (the others forward
    /// those to it). Holds [`SERVING_LOCK`] on a connection of its own for as long as it
    /// leads, and advertises `url` for the others. `Ok(false)`: another process leads.
    pub(crate) async fn try_lead(&self, url: &str) -> Result<bool, StoreError> {
        let conn = self.open().await?;
        let got: bool = conn
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&SERVING_LOCK])
            .await?
            .try_get(0)?;
        if !got {
            return Ok(false);
        }
        conn.client
            .execute(
                "INSERT INTO berth_leader (id, replica, url, since) VALUES (1, $1, $2, $3)
                 ON CONFLICT (id) DO UPDATE
                 SET replica = excluded.replica, url = excluded.url, since = excluded.since",
                &[&self.replica, &url, &clock::now()],
            )
            .await?;
        *self.serving.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.client);
        Ok(true)
    }

    /// Whether no process holds the leader's lock now (a leader that lost its
    /// connection takes it back within a fraction of a second; see `Server::lead`).
    pub(crate) async fn leader_lock_free(&self) -> Result<bool, StoreError> {
        let mut lease = self.lease().await?;
        // A bigint advisory key shows as (classid, objid) = (high, low) 32 bits, with
        // objsubid 1.
        let (high, low) = (
            (SERVING_LOCK >> 32) as u32,
            (SERVING_LOCK & 0xffff_ffff) as u32,
        );
        let row = lease
            .read()?
            .one(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
                   AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
                &[&i64::from(high), &i64::from(low)],
            )
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Whether this process still holds the leadership it took: `false` once the
    /// connection holding the lock is gone (the database restarted, or dropped it).
    pub(crate) fn leads(&self) -> bool {
        self.serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|c| !c.is_closed())
    }
}
