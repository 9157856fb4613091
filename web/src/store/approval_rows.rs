//! The `approvals` table on SQLite: a row per request (its JSON, and whether it still
//! waits), so recording a request or deciding one touches that row alone however many
//! the task has asked before. A task's audit is read back in the order asked.

use super::StoreError;
use super::asked::{RECENT, from_body};
use super::rules::json_text;
use berth_core::TaskId;
use berth_core::approval::Approval;
use rusqlite::{Connection, OptionalExtension, params};

fn collect(
    stmt: &mut rusqlite::CachedStatement<'_>,
    args: impl rusqlite::Params,
) -> Result<Vec<Approval>, StoreError> {
    let mut rows = stmt.query(args)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(from_body(&r.get::<_, String>(0)?)?);
    }
    Ok(out)
}

/// A task's requests, in the order asked.
pub(crate) fn of_task(conn: &Connection, task: &TaskId) -> Result<Vec<Approval>, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT body FROM approvals WHERE task_id = ?1 ORDER BY seq")?;
    collect(&mut stmt, [task.as_str()])
}

/// The first of a task's requests that still waits.
pub(crate) fn first_waiting(
    conn: &Connection,
    task: &TaskId,
) -> Result<Option<Approval>, StoreError> {
    let body: Option<String> = conn
        .prepare_cached(
            "SELECT body FROM approvals WHERE task_id = ?1 AND waiting = 1 ORDER BY seq LIMIT 1",
        )?
        .query_row([task.as_str()], |r| r.get(0))
        .optional()?;
    body.as_deref().map(from_body).transpose()
}

/// Request `id`, with its session's owner (`None` for `berth serve`'s one user).
pub(crate) fn one(
    conn: &Connection,
    id: &str,
) -> Result<Option<(Approval, Option<String>)>, StoreError> {
    let row: Option<(String, Option<String>)> = conn
        .prepare_cached(
            "SELECT a.body, s.owner FROM approvals a JOIN sessions s ON s.id = a.session_id
             WHERE a.id = ?1",
        )?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    row.map(|(body, owner)| Ok((from_body(&body)?, owner)))
        .transpose()
}

/// Records a new request; `false` when its id is kept already (a replayed batch).
pub(crate) fn insert(conn: &Connection, a: &Approval) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(
            "INSERT INTO approvals (id, task_id, session_id, waiting, asked_at, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![
            a.id,
            a.task_id.as_str(),
            a.session_id.as_str(),
            a.decision.is_none(),
            a.asked_at,
            json_text(a)?
        ])?;
    Ok(n == 1)
}

/// Writes a request back as it stands now.
pub(crate) fn update(conn: &Connection, a: &Approval) -> Result<(), StoreError> {
    conn.prepare_cached("UPDATE approvals SET waiting = ?2, body = ?3 WHERE id = ?1")?
        .execute(params![a.id, a.decision.is_none(), json_text(a)?])?;
    Ok(())
}

/// The requests that wait, oldest first, in the sessions of `owner` (everyone's with
/// `None`); with `all`, then the most recently asked decided ones (at most
/// [`RECENT`]).
pub(crate) fn listed(
    conn: &Connection,
    owner: Option<&str>,
    all: bool,
) -> Result<Vec<Approval>, StoreError> {
    const OWNED: &str = "(?1 IS NULL OR session_id IN (SELECT id FROM sessions WHERE owner = ?1))";
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT body FROM approvals WHERE waiting = 1 AND {OWNED} ORDER BY asked_at, seq"
    ))?;
    let mut out = collect(&mut stmt, [owner])?;
    if all {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT body FROM approvals WHERE waiting = 0 AND {OWNED}
             ORDER BY asked_at DESC, seq DESC LIMIT ?2"
        ))?;
        out.extend(collect(&mut stmt, params![owner, RECENT as i64])?);
    }
    Ok(out)
}
