//! Sessions, their bindings, and the transcript's storage.

use super::agents::{agent_names, get_agent, require_project};
use super::rows::SessionCols;
use super::rows::{LIST_COLUMNS, SESSION_COLUMNS, SESSION_FROM, event_from, identity_columns};
use super::rules::{self, Minted};
use super::{
    Deleted, NewSessionRow, Outbox, SessionChange, SessionRow, Store, StoreError, StoredBinding,
    resolve_session,
};
use crate::clock;
use crate::transcript::{EventKind, TranscriptEvent};
use axum::body::Bytes;
use berth_core::{SessionId, TaskId};
use rusqlite::{Connection, params};
use std::collections::HashMap;

pub(crate) fn get_session(conn: &Connection, id: &SessionId) -> Result<SessionRow, StoreError> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM {SESSION_FROM} WHERE s.id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([id.as_str()])?;
    match rows.next()? {
        Some(r) => SessionRow::from_row(r),
        None => Err(StoreError::UnknownSession {
            prefix: id.to_string(),
        }),
    }
}

/// The full id of the session `prefix` names uniquely.
pub(crate) fn session_id(conn: &Connection, prefix: &str) -> Result<SessionId, StoreError> {
    resolve_session(conn, prefix, None)
}

/// Appends one event to a session's transcript, numbering it after the last one.
pub(crate) fn append_event(
    conn: &Connection,
    outbox: &mut Outbox,
    session_id: &SessionId,
    task_id: Option<&TaskId>,
    kind: EventKind,
    payload: serde_json::Value,
) -> Result<i64, StoreError> {
    let seq: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE session_id = ?1")?
        .query_row([session_id.as_str()], |r| r.get(0))?;
    let at = clock::now();
    conn.prepare_cached(
        "INSERT INTO events (session_id, seq, task_id, kind, payload, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        session_id.as_str(),
        seq,
        task_id.map(TaskId::as_str),
        kind.as_str(),
        payload.to_string(),
        at
    ])?;
    outbox.push(TranscriptEvent::stored(
        session_id, seq, task_id, kind, payload, at,
    ));
    Ok(seq)
}

pub(crate) fn events_after(
    conn: &Connection,
    session_id: &SessionId,
    after: i64,
    limit: i64,
) -> Result<Vec<TranscriptEvent>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, task_id, kind, payload, at FROM events
         WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let mut rows = stmt.query(params![session_id.as_str(), after, limit])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(event_from(session_id, r)?);
    }
    Ok(out)
}

/// Inserts a session inside the caller's transaction. Without an agent name, the only
/// registered agent is used.
pub(crate) fn insert_session(
    tx: &Connection,
    new: NewSessionRow,
) -> Result<SessionRow, StoreError> {
    let agent = match new.agent {
        Some(name) => get_agent(tx, &name)?.name,
        None => rules::only_agent(agent_names(tx)?)?,
    };
    if let Some(project) = &new.project {
        require_project(tx, project)?;
    }
    let Minted { id, title, now } = rules::mint_session(new.title)?;
    let b = new.binding.as_ref();
    tx.prepare_cached(
        "INSERT INTO sessions (id, title, agent, origin, project, created_at, updated_at,
               binding_dir, binding_display, binding_machine, binding_mode, binding_state,
               binding_dev, binding_ino, owner)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )?
    .execute(params![
        id.as_str(),
        title,
        agent,
        new.origin.as_str(),
        new.project,
        now,
        b.map(|b| &b.dir),
        b.map(|b| &b.display),
        b.map(|b| b.machine.as_str()),
        b.map(|b| b.mode.as_str()),
        b.map(|b| b.state.as_str()),
        identity_columns(b).0,
        identity_columns(b).1,
        new.owner,
    ])?;
    get_session(tx, &id)
}

impl Store {
    /// Creates a session. Without an agent name, the only registered agent is used.
    pub async fn create_session(&self, new: NewSessionRow) -> Result<SessionRow, StoreError> {
        on_pg!(self, pg => pg.create_session(new));
        self.write(move |tx, _| insert_session(tx, new)).await
    }

    /// The session `prefix` (what a user typed) names uniquely among `owner`'s (among
    /// all with `None`): another member's sessions neither match nor make a prefix
    /// ambiguous.
    pub async fn resolve_session_of(
        &self,
        prefix: &str,
        owner: Option<berth_core::Member>,
    ) -> Result<SessionRow, StoreError> {
        on_pg!(self, pg => pg.resolve_session_of(prefix, owner));
        let prefix = prefix.to_owned();
        self.read_small(move |conn| {
            get_session(conn, &resolve_session(conn, &prefix, owner.as_deref())?)
        })
        .await
    }

    /// The session `prefix` (what a user typed) names uniquely.
    pub async fn resolve_session(&self, prefix: &str) -> Result<SessionRow, StoreError> {
        on_pg!(self, pg => pg.resolve_session_of(prefix, None));
        let prefix = prefix.to_owned();
        self.read_small(move |conn| get_session(conn, &session_id(conn, &prefix)?))
            .await
    }

    /// The session `id`, resolved already.
    pub async fn session(&self, id: &SessionId) -> Result<SessionRow, StoreError> {
        on_pg!(self, pg => pg.session(id));
        let id = id.clone();
        self.read_small(move |conn| get_session(conn, &id)).await
    }

    /// Sets or clears a session's binding. A change drops the resume id (the agent's
    /// context belonged to the old place), bumps the binding revision and appends a
    /// `binding_changed` event with both display forms.
    pub async fn set_binding(
        &self,
        id: SessionId,
        binding: Option<StoredBinding>,
    ) -> Result<SessionRow, StoreError> {
        on_pg!(self, pg => pg.set_binding(id, binding));
        self.write(move |tx, outbox| {
            let before = get_session(tx, &id)?;
            let b = binding.as_ref();
            tx.prepare_cached(
                "UPDATE sessions SET binding_dir = ?2, binding_display = ?3, binding_machine = ?4,
                   binding_mode = ?5, binding_state = ?6, binding_rev = binding_rev + 1,
                   resume_id = NULL, updated_at = ?7, binding_dev = ?8, binding_ino = ?9
                 WHERE id = ?1",
            )?
            .execute(params![
                id.as_str(),
                b.map(|b| &b.dir),
                b.map(|b| &b.display),
                b.map(|b| b.machine.as_str()),
                b.map(|b| b.mode.as_str()),
                b.map(|b| b.state.as_str()),
                clock::now(),
                identity_columns(b).0,
                identity_columns(b).1,
            ])?;
            append_event(
                tx,
                outbox,
                &id,
                None,
                EventKind::BindingChanged,
                rules::binding_payload(before.binding.as_ref(), b),
            )?;
            get_session(tx, &id)
        })
        .await
    }

    /// Renames a session, archives it or brings it back ([`SessionChange`]); the
    /// title is trimmed. Archiving keeps everything: only the list leaves it out.
    pub async fn change_session(
        &self,
        id: SessionId,
        change: SessionChange,
    ) -> Result<SessionRow, StoreError> {
        change.check()?;
        on_pg!(self, pg => pg.change_session(id, change));
        self.write(move |tx, _| {
            get_session(tx, &id)?;
            let now = clock::now();
            if let Some(title) = &change.title {
                tx.prepare_cached("UPDATE sessions SET title = ?2, updated_at = ?3 WHERE id = ?1")?
                    .execute(params![id.as_str(), title.trim(), now])?;
            }
            match change.archived {
                // Archived once: a second archive keeps the first time.
                Some(true) => tx.prepare_cached(
                    "UPDATE sessions SET archived_at = COALESCE(archived_at, ?2), updated_at = ?2
                     WHERE id = ?1",
                )?,
                Some(false) => tx.prepare_cached(
                    "UPDATE sessions SET archived_at = NULL, updated_at = ?2 WHERE id = ?1",
                )?,
                None => return get_session(tx, &id),
            }
            .execute(params![id.as_str(), now])?;
            get_session(tx, &id)
        })
        .await
    }

    /// Deletes a session with its tasks, messages and transcript, unless a task of
    /// it is not finished ([`StoreError::SessionBusy`]): that one would run, or go on
    /// running, for a session that is gone. Returns what went with it.
    pub async fn delete_session(&self, id: SessionId) -> Result<Deleted, StoreError> {
        on_pg!(self, pg => pg.delete_session(id));
        self.write(move |tx, _| {
            get_session(tx, &id)?;
            let busy = tx
                .prepare_cached(&format!(
                    "SELECT id FROM tasks WHERE session_id = ?1 AND status IN {} ORDER BY seq",
                    rules::UNFINISHED
                ))?
                .query_map([id.as_str()], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            rules::idle(&id, busy)?;
            let tasks = tx
                .prepare_cached("SELECT id FROM tasks WHERE session_id = ?1 ORDER BY seq")?
                .query_map([id.as_str()], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?
                .into_iter()
                .map(TaskId::try_from)
                .collect::<Result<Vec<_>, _>>()?;
            let events = tx.execute("DELETE FROM events WHERE session_id = ?1", [id.as_str()])?;
            for table in ["approvals", "tasks", "messages", "channel_threads"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE session_id = ?1"),
                    [id.as_str()],
                )?;
            }
            tx.execute("DELETE FROM sessions WHERE id = ?1", [id.as_str()])?;
            Ok(Deleted {
                session: id,
                tasks,
                events: events as i64,
            })
        })
        .await
    }

    /// Up to `limit` transcript events after `after`, in order.
    pub async fn events_after(
        &self,
        session_id: SessionId,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TranscriptEvent>, StoreError> {
        on_pg!(self, pg => pg.events_after(session_id, after, limit));
        self.read(move |conn| events_after(conn, &session_id, after, limit))
            .await
    }
}

impl Store {
    /// Every session (only `owner`'s when given; archived ones only with `archived`),
    /// oldest first, as one JSON array of the documents `doc` writes, built off the
    /// async threads: a long list costs them nothing.
    ///
    /// `view` names `doc`: the same name must mean the same documents for the same
    /// rows, for as long as the process lives. On PostgreSQL a replica keeps each
    /// view's body until something it shows changes, on any replica.
    pub async fn sessions_json<F>(
        &self,
        owner: Option<berth_core::Member>,
        archived: bool,
        needs: Option<berth_core::api::Needs>,
        view: &'static str,
        doc: F,
    ) -> Result<Bytes, StoreError>
    where
        F: Fn(&mut Vec<u8>, &SessionCols<'_>) -> Result<(), StoreError> + Send + 'static,
    {
        on_pg!(self, pg => pg.sessions_json((view, owner.map(|o| o.to_string())), archived, needs, doc));
        // SQLite keeps no list (one process reads it; see `super::lists`).
        let _ = view;
        self.read(move |conn| {
            let mut out = Vec::with_capacity(64 * 1024);
            out.push(b'[');
            let mut first = true;
            each_listed(conn, LIST_COLUMNS, owner.as_deref(), |r, names| {
                let cols = SessionCols::from_row(r, names)?;
                if (cols.archived && !archived) || needs.is_some_and(|n| cols.needs != Some(n)) {
                    return Ok(());
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                doc(&mut out, &cols)
            })?;
            out.push(b']');
            Ok(Bytes::from(out))
        })
        .await
    }
}

/// The list's query: the sessions alone, oldest first, `columns` of each. Machine
/// names come from one read of the machines ([`each_listed`]): a join probed the
/// machines for every session, bound or not.
fn session_list_sql(columns: &str, owner: bool) -> String {
    if owner {
        format!("SELECT {columns} FROM sessions s WHERE s.owner = ?1 ORDER BY s.created_at, s.id")
    } else {
        format!("SELECT {columns} FROM sessions s ORDER BY s.created_at, s.id")
    }
}

/// Calls `f` with every session's row of the list's query (only `owner`'s when
/// given), oldest first, as it is read, with the machines' names by id.
fn each_listed(
    conn: &Connection,
    columns: &str,
    owner: Option<&str>,
    mut f: impl FnMut(&rusqlite::Row<'_>, &HashMap<String, String>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let names: HashMap<String, String> = conn
        .prepare_cached("SELECT id, name FROM machines")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut stmt = conn.prepare_cached(&session_list_sql(columns, owner.is_some()))?;
    let mut rows = match owner {
        Some(o) => stmt.query([o])?,
        None => stmt.query([])?,
    };
    while let Some(r) = rows.next()? {
        f(r, &names)?;
    }
    Ok(())
}

/// Every session, oldest first; only `owner`'s when given.
pub fn list_sessions(
    conn: &Connection,
    owner: Option<&str>,
) -> Result<Vec<SessionRow>, StoreError> {
    let mut out = Vec::new();
    // Every column, the machine's name left NULL (and filled in from `names`).
    let columns = SESSION_COLUMNS.replace(", m.name,", ", NULL,");
    debug_assert_ne!(columns, SESSION_COLUMNS, "SESSION_COLUMNS names m.name");
    each_listed(conn, &columns, owner, |r, names| {
        let mut session = SessionRow::from_row(r)?;
        if let Some(b) = &mut session.binding
            && let Some(name) = names.get(b.machine.as_str())
        {
            b.machine_name.clone_from(name);
        }
        out.push(session);
        Ok(())
    })?;
    Ok(out)
}
