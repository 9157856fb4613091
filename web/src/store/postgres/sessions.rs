//! Sessions, their bindings, the transcript, and the session list, on PostgreSQL.

use super::Pg;
use super::agents::{agent_names, get_agent, require_project};
use super::pool::{Q, W};
use crate::clock;
use crate::store::lists::Key;
use crate::store::rows::{
    Cols, LIST_COLUMNS, SESSION_COLUMNS, SESSION_FROM, SessionCols, event_from, identity_columns,
};
use crate::store::rules::{self, IdPrefix, Minted, Scoped};
use crate::store::{Deleted, NewSessionRow, SessionChange, SessionRow, StoreError, StoredBinding};
use crate::transcript::{EventKind, TranscriptEvent};
use axum::body::Bytes;
use berth_core::{SessionId, TaskId};
use std::collections::HashMap;
use tokio_postgres::GenericClient;

/// PostgreSQL's [`crate::store::resolve_session`].
pub(super) async fn resolve_session<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    prefix: &str,
    owner: Option<&str>,
) -> Result<SessionId, StoreError> {
    Ok(
        resolve_id(q, IdPrefix::new(Scoped::Sessions, prefix, owner)?)
            .await?
            .try_into()?,
    )
}

/// PostgreSQL's [`crate::store::resolve_task`].
pub(super) async fn resolve_task<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    prefix: &str,
    owner: Option<&str>,
) -> Result<TaskId, StoreError> {
    Ok(resolve_id(q, IdPrefix::new(Scoped::Tasks, prefix, owner)?)
        .await?
        .try_into()?)
}

/// The full id `p` names, see [`rules::IdPrefix`].
async fn resolve_id<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    p: IdPrefix<'_>,
) -> Result<String, StoreError> {
    let rows = q.rows(p.sql(), &[&p.wanted, &p.owner]).await?;
    let ids = rows.iter().map(|r| r.text(0)).collect::<Result<_, _>>()?;
    p.pick(ids)
}

pub(super) async fn get_session<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    id: &SessionId,
) -> Result<SessionRow, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM {SESSION_FROM} WHERE s.id = $1");
    match q.opt(&sql, &[&id.as_str()]).await? {
        Some(r) => SessionRow::from_row(&r),
        None => Err(StoreError::UnknownSession {
            prefix: id.to_string(),
        }),
    }
}

impl W<'_> {
    /// Appends one event to a session's transcript: the session row numbers it (and
    /// stays locked until commit).
    pub(super) async fn append(
        &mut self,
        session_id: &SessionId,
        task_id: Option<&TaskId>,
        kind: EventKind,
        payload: serde_json::Value,
    ) -> Result<i64, StoreError> {
        let at = clock::now();
        // One round trip: the session row numbers the event (and is locked) in the
        // statement that stores it; no row, no session.
        let seq = self
            .q()
            .opt(
                "WITH s AS (UPDATE sessions SET event_seq = event_seq + 1 WHERE id = $1
                            RETURNING event_seq)
                 INSERT INTO events (session_id, seq, task_id, kind, payload, at)
                 SELECT $1, s.event_seq, $2, $3, $4, $5 FROM s
                 RETURNING seq",
                &[
                    &session_id.as_str(),
                    &task_id.map(TaskId::as_str),
                    &kind.as_str(),
                    &payload.to_string(),
                    &at,
                ],
            )
            .await?
            .ok_or_else(|| StoreError::UnknownSession {
                prefix: session_id.to_string(),
            })?
            .int(0)?;
        let event = TranscriptEvent::stored(session_id, seq, task_id, kind, payload, at);
        self.outbox.push(event);
        Ok(seq)
    }

    pub(super) async fn insert_session(
        &mut self,
        new: NewSessionRow,
    ) -> Result<SessionRow, StoreError> {
        let agent = match new.agent {
            Some(name) => get_agent(&mut self.q(), &name).await?.name,
            None => rules::only_agent(agent_names(&mut self.q()).await?)?,
        };
        if let Some(project) = &new.project {
            require_project(&mut self.q(), project).await?;
        }
        let Minted { id, title, now } = rules::mint_session(new.title)?;
        let b = new.binding.as_ref();
        let (dev, ino) = identity_columns(b);
        self.q()
            .exec(
                "INSERT INTO sessions (id, title, agent, origin, project, created_at, updated_at,
                   binding_dir, binding_display, binding_machine, binding_mode, binding_state,
                   binding_dev, binding_ino, owner)
                 VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
                &[
                    &id.as_str(),
                    &title,
                    &agent,
                    &new.origin.as_str(),
                    &new.project,
                    &now,
                    &b.map(|b| b.dir.as_str()),
                    &b.map(|b| b.display.as_str()),
                    &b.map(|b| b.machine.as_str()),
                    &b.map(|b| b.mode.as_str()),
                    &b.map(|b| b.state.as_str()),
                    &dev,
                    &ino,
                    &new.owner,
                ],
            )
            .await?;
        get_session(&mut self.q(), &id).await
    }
}

/// The list's query: only what a listed session's documents need ([`LIST_COLUMNS`]),
/// without the join (a probe of `machines` per row was most of the server's time), in
/// no order ([`Pg::sessions_json`] sorts); the few machines' names are read once and
/// filled in.
fn session_list_sql(owner: bool) -> String {
    let columns = LIST_COLUMNS;
    if owner {
        format!("SELECT {columns} FROM sessions s WHERE s.owner = $1")
    } else {
        format!("SELECT {columns} FROM sessions s")
    }
}

impl Pg {
    pub(crate) async fn create_session(
        &self,
        new: NewSessionRow,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let row = w.insert_session(new).await?;
        self.publish(w).await?;
        Ok(row)
    }

    pub(crate) async fn resolve_session_of(
        &self,
        prefix: &str,
        owner: Option<berth_core::Member>,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        // A whole id is read in one statement, the owner's rule in it.
        if let Some(id) = rules::whole_session_id(prefix) {
            let sql = format!(
                "SELECT {SESSION_COLUMNS} FROM {SESSION_FROM}
                 WHERE s.id = $1 AND (CAST($2 AS TEXT) IS NULL OR s.owner = $2)"
            );
            return match q.opt(&sql, &[&id.as_str(), &owner.as_deref()]).await? {
                Some(r) => SessionRow::from_row(&r),
                None => Err(StoreError::UnknownSession {
                    prefix: prefix.to_owned(),
                }),
            };
        }
        let id = resolve_session(&mut q, prefix, owner.as_deref()).await?;
        get_session(&mut q, &id).await
    }

    pub(crate) async fn session(&self, id: &SessionId) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        get_session(&mut q, id).await
    }

    pub(crate) async fn set_binding(
        &self,
        id: SessionId,
        binding: Option<StoredBinding>,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let before = get_session(&mut w.q(), &id).await?;
        let b = binding.as_ref();
        let (dev, ino) = identity_columns(b);
        w.q()
            .exec(
                "UPDATE sessions SET binding_dir = $2, binding_display = $3, binding_machine = $4,
                   binding_mode = $5, binding_state = $6, binding_rev = binding_rev + 1,
                   resume_id = NULL, updated_at = $7, binding_dev = $8, binding_ino = $9
                 WHERE id = $1",
                &[
                    &id.as_str(),
                    &b.map(|b| b.dir.as_str()),
                    &b.map(|b| b.display.as_str()),
                    &b.map(|b| b.machine.as_str()),
                    &b.map(|b| b.mode.as_str()),
                    &b.map(|b| b.state.as_str()),
                    &clock::now(),
                    &dev,
                    &ino,
                ],
            )
            .await?;
        w.append(
            &id,
            None,
            EventKind::BindingChanged,
            rules::binding_payload(before.binding.as_ref(), b),
        )
        .await?;
        let row = get_session(&mut w.q(), &id).await?;
        self.publish(w).await?;
        Ok(row)
    }

    pub(crate) async fn change_session(
        &self,
        id: SessionId,
        change: SessionChange,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        get_session(&mut w.q(), &id).await?;
        let now = clock::now();
        if let Some(title) = &change.title {
            w.q()
                .exec(
                    "UPDATE sessions SET title = $2, updated_at = $3 WHERE id = $1",
                    &[&id.as_str(), &title.trim(), &now],
                )
                .await?;
        }
        let archive = match change.archived {
            Some(true) => Some(
                "UPDATE sessions SET archived_at = COALESCE(archived_at, $2), updated_at = $2
                 WHERE id = $1",
            ),
            Some(false) => {
                Some("UPDATE sessions SET archived_at = NULL, updated_at = $2 WHERE id = $1")
            }
            None => None,
        };
        if let Some(sql) = archive {
            w.q().exec(sql, &[&id.as_str(), &now]).await?;
        }
        let row = get_session(&mut w.q(), &id).await?;
        self.publish(w).await?;
        Ok(row)
    }

    pub(crate) async fn delete_session(&self, id: SessionId) -> Result<Deleted, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // Locked as a message's transcript event locks it: no task joins meanwhile.
        w.q()
            .opt(
                "SELECT id FROM sessions WHERE id = $1 FOR UPDATE",
                &[&id.as_str()],
            )
            .await?
            .ok_or_else(|| StoreError::UnknownSession {
                prefix: id.to_string(),
            })?;
        let busy = w
            .q()
            .rows(
                &format!(
                    "SELECT id FROM tasks WHERE session_id = $1 AND status IN {} ORDER BY seq",
                    rules::UNFINISHED
                ),
                &[&id.as_str()],
            )
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        rules::idle(&id, busy)?;
        let tasks = w
            .q()
            .rows(
                "SELECT id FROM tasks WHERE session_id = $1 ORDER BY seq",
                &[&id.as_str()],
            )
            .await?
            .iter()
            .map(|r| r.id::<TaskId>(0))
            .collect::<Result<Vec<_>, _>>()?;
        let events = w
            .q()
            .exec("DELETE FROM events WHERE session_id = $1", &[&id.as_str()])
            .await?;
        for table in ["approvals", "tasks", "messages", "channel_threads"] {
            w.q()
                .exec(
                    &format!("DELETE FROM {table} WHERE session_id = $1"),
                    &[&id.as_str()],
                )
                .await?;
        }
        w.q()
            .exec("DELETE FROM sessions WHERE id = $1", &[&id.as_str()])
            .await?;
        self.publish(w).await?;
        Ok(Deleted {
            session: id,
            tasks,
            events: events as i64,
        })
    }

    pub(crate) async fn events_after(
        &self,
        session_id: SessionId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TranscriptEvent>, StoreError> {
        self.all(
            "SELECT seq, task_id, kind, payload, at FROM events
             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            &[&session_id.as_str(), &after, &limit],
            |r| event_from(&session_id, r),
        )
        .await
    }

    /// Every session (only `owner`'s), as [`Store::sessions_json`] writes them: the
    /// body kept for `view` and `owner` when nothing it shows has changed since on any
    /// replica (see [`crate::store::lists`]), else read and kept.
    ///
    /// [`Store::sessions_json`]: crate::store::Store::sessions_json
    /// A list with the archived sessions is read each time (it is asked for rarely).
    pub(crate) async fn sessions_json<F>(
        &self,
        key: Key,
        archived: bool,
        needs: Option<berth_core::api::Needs>,
        doc: F,
    ) -> Result<Bytes, StoreError>
    where
        F: Fn(&mut Vec<u8>, &SessionCols<'_>) -> Result<(), StoreError> + Send + 'static,
    {
        // Only the whole list of the sessions not archived is kept.
        if archived || needs.is_some() {
            return Ok(Bytes::from(
                self.read_sessions_json(key.1.as_deref(), archived, needs, doc)
                    .await?,
            ));
        }
        if let Some((generation, body)) = self.lists.kept(&key)
            && self.caught_up().await?
            && self.lists.generation() == Some(generation)
        {
            return Ok(body);
        }
        // Loaded before the read's snapshot: the read shows at least what it counts.
        let generation = self.lists.generation();
        let body = Bytes::from(
            self.read_sessions_json(key.1.as_deref(), false, None, doc)
                .await?,
        );
        if let Some(generation) = generation {
            self.lists.keep(key, generation, body.clone());
        }
        Ok(body)
    }

    /// Whether this replica has heard every change notification committed before now
    /// (see [`crate::store::lists`]): it notifies itself and waits to hear that.
    async fn caught_up(&self) -> Result<bool, StoreError> {
        let Some((n, heard)) = self.lists.expect() else {
            return Ok(false);
        };
        self.exec(
            "SELECT pg_notify($1, $2)",
            &[&self.lists.channel(), &n.to_string()],
        )
        .await?;
        Ok(self.lists.arrived(n, heard).await)
    }

    /// Every session (only `owner`'s when given), oldest first, as one JSON array of
    /// the documents `doc` writes, read now. The rows are read whole, then turned into
    /// documents on a blocking thread, where they are also sorted (see below).
    async fn read_sessions_json<F>(
        &self,
        owner: Option<&str>,
        archived: bool,
        needs: Option<berth_core::api::Needs>,
        doc: F,
    ) -> Result<Vec<u8>, StoreError>
    where
        F: Fn(&mut Vec<u8>, &SessionCols<'_>) -> Result<(), StoreError> + Send + 'static,
    {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let names: HashMap<String, String> = q
            .rows("SELECT id, name FROM machines", &[])
            .await?
            .iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?)))
            .collect::<Result<_, StoreError>>()?;
        let rows = match owner {
            Some(o) => q.rows(&session_list_sql(true), &[&o]).await?,
            None => q.rows(&session_list_sql(false), &[]).await?,
        };
        drop(lease);
        tokio::task::spawn_blocking(move || {
            // Ordered here rather than by the server: an index scan in that order
            // visits the table's pages at random, which cost the server more than the
            // whole sort costs this one (`COLLATE "C"` orders bytes, as `str` does).
            let mut listed = rows
                .iter()
                .map(|r| SessionCols::from_row(r, &names))
                .collect::<Result<Vec<_>, _>>()?;
            listed
                .retain(|s| (archived || !s.archived) && needs.is_none_or(|n| s.needs == Some(n)));
            listed.sort_unstable_by(|a, b| (a.created_at, a.id).cmp(&(b.created_at, b.id)));
            let mut out = Vec::with_capacity(64 * 1024);
            out.push(b'[');
            for (i, s) in listed.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                doc(&mut out, s)?;
            }
            out.push(b']');
            Ok::<_, StoreError>(out)
        })
        .await
        .map_err(|e| StoreError::Worker(e.to_string()))?
    }
}
