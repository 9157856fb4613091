//! Which process leads: the one whose scheduler runs tasks and whose registry holds
//! the daemons, while it holds an advisory lock; and the address it advertised.

use super::Pg;
use crate::clock;
use crate::store::LockSeen;
use crate::store::StoreError;
use crate::store::rows::Cols;
use std::sync::PoisonError;

/// The advisory lock the leading `berth-server` holds while it leads ("berthS").
const SERVING_LOCK: i64 = 0x62_65_72_74_68_53;

/// A bigint advisory key shows in `pg_locks` as (classid, objid) = (high, low) 32
/// bits, with objsubid 1.
fn lock_key() -> (u32, u32) {
    (
        (SERVING_LOCK >> 32) as u32,
        (SERVING_LOCK & 0xffff_ffff) as u32,
    )
}

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

    /// Gives up the leadership this process holds, at once: the leader's row goes
    /// first (so the others see a resignation, not a death to wait out), then the lock.
    /// Nothing to do for a process that does not lead. Dropping the connection releases
    /// the lock too, whatever the two statements managed.
    pub(crate) async fn resign(&self) -> Result<(), StoreError> {
        let client = self
            .serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(client) = client else {
            return Ok(());
        };
        client
            .execute(
                "DELETE FROM berth_leader WHERE id = 1 AND replica = $1",
                &[&self.replica],
            )
            .await?;
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&SERVING_LOCK])
            .await?;
        Ok(())
    }

    /// Whether the schema is the one this build knows and a leader holds the lock:
    /// `Err` says what is missing.
    pub(crate) async fn ready(&self) -> Result<Result<(), String>, StoreError> {
        let version: i64 = {
            let mut lease = self.lease().await?;
            lease
                .read()?
                .one("SELECT COALESCE(MAX(version), 0) FROM berth_schema", &[])
                .await?
                .try_get(0)?
        };
        let known = super::schema::MIGRATIONS.len() as i64;
        Ok(if version != known {
            Err(format!(
                "the schema is version {version}, this build's is {known}"
            ))
        } else if self.leader_lock().await? != LockSeen::Held {
            Err("no berth-server leads".to_owned())
        } else {
            Ok(())
        })
    }

    /// Whether no process holds the leader's lock now (a leader that lost its
    /// connection takes it back within a fraction of a second; see `Server::lead`),
    /// and whether the last leader resigned (its row is gone: no need to wait).
    pub(crate) async fn leader_lock(&self) -> Result<LockSeen, StoreError> {
        let mut lease = self.lease().await?;
        let (high, low) = lock_key();
        let row = lease
            .read()?
            .one(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
                   AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())),
                   NOT EXISTS (SELECT 1 FROM berth_leader WHERE id = 1)",
                &[&i64::from(high), &i64::from(low)],
            )
            .await?;
        let (free, resigned): (bool, bool) = (row.try_get(0)?, row.try_get(1)?);
        Ok(match (free, resigned) {
            (false, _) => LockSeen::Held,
            (true, false) => LockSeen::Free,
            (true, true) => LockSeen::Resigned,
        })
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
