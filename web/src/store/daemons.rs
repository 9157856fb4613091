//! Remote daemons' tokens, waiting work, and which bound sessions' machines are
//! offline.

use super::rows::Cols;
use super::rules::online_change;
use super::{Store, StoreError};
use crate::clock;
use berth_core::binding::MachineId;
use berth_core::{SessionId, TaskId};
use rusqlite::{OptionalExtension, params};

/// A daemon token as stored: its hash, never the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub name: String,
    pub hash: String,
    pub machine: Option<MachineId>,
    pub created_at: String,
    pub revoked_at: Option<String>,
    /// The member it belongs to (`berth-server`); `None` on `berth serve`.
    pub member: Option<String>,
}

/// Why a token could not be created or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenChange<T> {
    Done(T),
    /// `create`: a live token of that name exists.
    Exists,
    /// `revoke`/`bind`: no token of that name.
    Unknown,
    /// `bind`: the token already belongs to another machine.
    OtherMachine(MachineId),
}

pub(crate) const TOKEN_COLUMNS: &str = "name, hash, machine, created_at, revoked_at, member";

pub(crate) fn token_from(r: &impl Cols) -> Result<TokenRow, StoreError> {
    Ok(TokenRow {
        name: r.text(0)?,
        hash: r.text(1)?,
        machine: r.opt_id(2)?,
        created_at: r.text(3)?,
        revoked_at: r.opt_text(4)?,
        member: r.opt_text(5)?,
    })
}

fn token_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenRow> {
    token_from(r).map_err(StoreError::into_sqlite)
}

fn get_token(conn: &rusqlite::Connection, name: &str) -> Result<Option<TokenRow>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens WHERE name = ?1"),
            [name],
            token_from_row,
        )
        .optional()?)
}

impl Store {
    /// Every token, revoked ones included, by name.
    pub async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        on_pg!(self, pg => pg.tokens());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {TOKEN_COLUMNS} FROM daemon_tokens ORDER BY name"
            ))?;
            let rows = stmt
                .query_map([], token_from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Stores a new token's hash under `name`. A revoked token's name may be reused
    /// (the old row is replaced); a live one's may not.
    pub async fn create_token(
        &self,
        name: String,
        hash: String,
        member: Option<String>,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        on_pg!(self, pg => pg.create_token(name, hash, member));
        self.write(move |tx, _| {
            if let Some(old) = get_token(tx, &name)? {
                if old.revoked_at.is_none() {
                    return Ok(TokenChange::Exists);
                }
                tx.execute("DELETE FROM daemon_tokens WHERE name = ?1", [&name])?;
            }
            tx.execute(
                "INSERT INTO daemon_tokens (name, hash, created_at, member) VALUES (?1, ?2, ?3, ?4)",
                params![name, hash, clock::now(), member],
            )?;
            Ok(get_token(tx, &name)?.map_or(TokenChange::Unknown, TokenChange::Done))
        })
        .await
    }

    /// Revokes a token; revoking a revoked one changes nothing.
    pub async fn revoke_token(&self, name: String) -> Result<TokenChange<TokenRow>, StoreError> {
        on_pg!(self, pg => pg.revoke_token(name));
        self.write(move |tx, _| {
            tx.execute(
                "UPDATE daemon_tokens SET revoked_at = ?2 WHERE name = ?1 AND revoked_at IS NULL",
                params![name, clock::now()],
            )?;
            Ok(get_token(tx, &name)?.map_or(TokenChange::Unknown, TokenChange::Done))
        })
        .await
    }

    /// Binds a live token to the machine registering with it, the first time; later
    /// registers must come from the same machine.
    pub async fn bind_token(
        &self,
        name: String,
        machine: MachineId,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        on_pg!(self, pg => pg.bind_token(name, machine));
        self.write(move |tx, _| {
            let Some(row) = get_token(tx, &name)? else {
                return Ok(TokenChange::Unknown);
            };
            if row.revoked_at.is_some() {
                return Ok(TokenChange::Unknown);
            }
            match &row.machine {
                Some(m) if *m == machine => Ok(TokenChange::Done(row)),
                Some(m) => Ok(TokenChange::OtherMachine(m.clone())),
                None => {
                    tx.execute(
                        "UPDATE daemon_tokens SET machine = ?2 WHERE name = ?1",
                        params![name, machine.as_str()],
                    )?;
                    Ok(get_token(tx, &name)?.map_or(TokenChange::Unknown, TokenChange::Done))
                }
            }
        })
        .await
    }

    /// Machines' names and when they were last seen, by id.
    pub async fn machines(&self) -> Result<Vec<(MachineId, String, Option<String>)>, StoreError> {
        on_pg!(self, pg => pg.machines());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT id, name, last_seen FROM machines")?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.id(0).map_err(StoreError::into_sqlite)?,
                        r.get(1)?,
                        r.get(2)?,
                    ))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Sessions whose next task waits for a machine, oldest first: scheduled again
    /// when a machine comes online.
    pub async fn waiting_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        on_pg!(self, pg => pg.waiting_sessions());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT session_id FROM tasks WHERE status = 'waiting_daemon'
                   AND started_at IS NULL GROUP BY session_id ORDER BY MIN(created_at)",
            )?;
            let rows = stmt
                .query_map([], |r| r.id(0).map_err(StoreError::into_sqlite))?
                .collect::<Result<Vec<SessionId>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Puts a task claimed for a machine that never started it back in line:
    /// `waiting_daemon` with `reason`, not started. `false` if it has moved on.
    pub async fn requeue(&self, id: TaskId, reason: String) -> Result<bool, StoreError> {
        on_pg!(self, pg => pg.requeue(id, reason));
        self.write(move |tx, outbox| {
            let n = tx.execute(
                "UPDATE tasks SET started_at = NULL, status = 'waiting_daemon', wait_reason = ?2
                 WHERE id = ?1 AND status IN ('queued', 'waiting_daemon') AND finished_at IS NULL",
                params![id.as_str(), reason],
            )?;
            if n == 1 {
                let task = super::tasks::get_task(tx, &id)?;
                super::tasks::status_event(tx, outbox, &task)?;
            }
            Ok(n == 1)
        })
        .await
    }

    /// Shows a machine going offline (or coming back) on the bindings made there:
    /// `machine_offline` replaces `ok`, and back. Other states (`missing`, `changed`)
    /// stay as they are. Returns how many sessions changed.
    pub async fn set_machine_online(
        &self,
        machine: MachineId,
        online: bool,
    ) -> Result<usize, StoreError> {
        on_pg!(self, pg => pg.set_machine_online(machine, online));
        self.write(move |tx, _| {
            let (from, to) = online_change(online);
            let n = tx.execute(
                "UPDATE sessions SET binding_state = ?3
                 WHERE binding_machine = ?1 AND binding_state = ?2",
                params![machine.as_str(), from, to],
            )?;
            Ok(n)
        })
        .await
    }

    /// At startup no daemon is online yet: every binding on a machine other than
    /// `local` shows `machine_offline` until that machine registers.
    pub async fn mark_remote_offline(&self, local: Option<MachineId>) -> Result<usize, StoreError> {
        on_pg!(self, pg => pg.mark_remote_offline(local));
        self.write(move |tx, _| {
            let n = tx.execute(
                "UPDATE sessions SET binding_state = 'machine_offline'
                 WHERE binding_machine IS NOT NULL AND binding_state = 'ok'
                   AND binding_machine IS NOT ?1",
                params![local.as_ref().map(MachineId::as_str)],
            )?;
            Ok(n)
        })
        .await
    }
}
