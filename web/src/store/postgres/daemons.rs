//! Remote daemons' tokens, waiting work, and machines going offline, on PostgreSQL.

use super::Pg;
use super::pool::Q;
use super::tasks::get_task;
use crate::clock;
use crate::store::daemons::{TOKEN_COLUMNS, token_from};
use crate::store::rows::Cols;
use crate::store::rules::online_change;
use crate::store::{StoreError, TokenChange, TokenRow};
use berth_core::binding::MachineId;
use berth_core::{SessionId, TaskId};
use tokio_postgres::GenericClient;

async fn get_token<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    name: &str,
) -> Result<Option<TokenRow>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens WHERE name = $1");
    q.opt(&sql, &[&name])
        .await?
        .map(|r| token_from(&r))
        .transpose()
}

impl Pg {
    pub(crate) async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens ORDER BY name");
        self.all(&sql, &[], token_from).await
    }

    pub(crate) async fn create_token(
        &self,
        name: String,
        hash: String,
        member: Option<String>,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        if let Some(old) = get_token(&mut w.q(), &name).await? {
            if old.revoked_at.is_none() {
                return Ok(TokenChange::Exists);
            }
            w.q()
                .exec("DELETE FROM daemon_tokens WHERE name = $1", &[&name])
                .await?;
        }
        w.q()
            .exec(
                "INSERT INTO daemon_tokens (name, hash, created_at, member) VALUES ($1, $2, $3, $4)",
                &[&name, &hash, &clock::now(), &member],
            )
            .await?;
        let row = get_token(&mut w.q(), &name).await?;
        self.publish(w).await?;
        Ok(row.map_or(TokenChange::Unknown, TokenChange::Done))
    }

    pub(crate) async fn revoke_token(
        &self,
        name: String,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.q()
            .exec(
                "UPDATE daemon_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
                &[&name, &clock::now()],
            )
            .await?;
        let row = get_token(&mut w.q(), &name).await?;
        self.publish(w).await?;
        Ok(row.map_or(TokenChange::Unknown, TokenChange::Done))
    }

    pub(crate) async fn bind_token(
        &self,
        name: String,
        machine: MachineId,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // Two replicas binding the same new token at once: the row lock decides.
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens WHERE name = $1 FOR UPDATE");
        let Some(row) = w
            .q()
            .opt(&sql, &[&name])
            .await?
            .map(|r| token_from(&r))
            .transpose()?
        else {
            return Ok(TokenChange::Unknown);
        };
        if row.revoked_at.is_some() {
            return Ok(TokenChange::Unknown);
        }
        let out = match &row.machine {
            Some(m) if *m == machine => TokenChange::Done(row),
            Some(m) => TokenChange::OtherMachine(m.clone()),
            None => {
                w.q()
                    .exec(
                        "UPDATE daemon_tokens SET machine = $2 WHERE name = $1",
                        &[&name, &machine.as_str()],
                    )
                    .await?;
                get_token(&mut w.q(), &name)
                    .await?
                    .map_or(TokenChange::Unknown, TokenChange::Done)
            }
        };
        self.publish(w).await?;
        Ok(out)
    }

    pub(crate) async fn machines(
        &self,
    ) -> Result<Vec<(MachineId, String, Option<String>)>, StoreError> {
        self.all("SELECT id, name, last_seen FROM machines", &[], |r| {
            Ok((r.id(0)?, r.text(1)?, r.opt_text(2)?))
        })
        .await
    }

    pub(crate) async fn waiting_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.all(
            "SELECT session_id FROM tasks WHERE status = 'waiting_daemon'
               AND started_at IS NULL GROUP BY session_id ORDER BY MIN(created_at)",
            &[],
            |r| r.id(0),
        )
        .await
    }

    pub(crate) async fn requeue(&self, id: TaskId, reason: String) -> Result<bool, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE tasks SET started_at = NULL, status = 'waiting_daemon', wait_reason = $2,
                   handed_at = NULL, handed_to = NULL, handed_instance = NULL, daemon_events = 0,
                   daemon_outcome = NULL
                 WHERE id = $1 AND status IN ('queued', 'waiting_daemon') AND finished_at IS NULL",
                &[&id.as_str(), &reason],
            )
            .await?;
        if n == 1 {
            let task = get_task(&mut w.q(), &id).await?;
            w.status_event(&task).await?;
        }
        self.publish(w).await?;
        Ok(n == 1)
    }

    pub(crate) async fn set_machine_online(
        &self,
        machine: MachineId,
        online: bool,
    ) -> Result<usize, StoreError> {
        let (from, to) = online_change(online);
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE sessions SET binding_state = $3
                 WHERE binding_machine = $1 AND binding_state = $2",
                &[&machine.as_str(), &from, &to],
            )
            .await?;
        self.publish(w).await?;
        Ok(n as usize)
    }

    pub(crate) async fn mark_remote_offline(
        &self,
        local: Option<MachineId>,
    ) -> Result<usize, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE sessions SET binding_state = 'machine_offline'
                 WHERE binding_machine IS NOT NULL AND binding_state = 'ok'
                   AND binding_machine IS DISTINCT FROM $1::text",
                &[&local.as_ref().map(MachineId::as_str)],
            )
            .await?;
        self.publish(w).await?;
        Ok(n as usize)
    }
}
