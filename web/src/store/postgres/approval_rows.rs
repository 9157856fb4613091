//! The `approvals` table on PostgreSQL: a row per request, as on SQLite
//! ([`crate::store::approval_rows`]).

use super::pool::Q;
use crate::store::asked::{RECENT, from_body};
use crate::store::rules::json_text;
use crate::store::{StoreError, TaskRow};
use berth_core::TaskId;
use berth_core::approval::Approval;
use tokio_postgres::GenericClient;

/// A task's requests, in the order asked.
pub(crate) async fn of_task<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    task: &TaskId,
) -> Result<Vec<Approval>, StoreError> {
    q.rows(
        "SELECT body FROM approvals WHERE task_id = $1 ORDER BY seq",
        &[&task.as_str()],
    )
    .await?
    .iter()
    .map(|r| from_body(r.try_get(0)?))
    .collect()
}

/// Fills in the requests of each of `tasks`, in one query.
pub(crate) async fn fill<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    tasks: &mut [TaskRow],
) -> Result<(), StoreError> {
    if tasks.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let rows = q
        .rows(
            "SELECT task_id, body FROM approvals WHERE task_id = ANY($1) ORDER BY seq",
            &[&ids],
        )
        .await?;
    let mut found: std::collections::HashMap<String, Vec<Approval>> = Default::default();
    for r in &rows {
        found
            .entry(r.try_get(0)?)
            .or_default()
            .push(from_body(r.try_get(1)?)?);
    }
    for t in tasks {
        if let Some(list) = found.remove(t.id.as_str()) {
            t.approvals = list;
        }
    }
    Ok(())
}

/// The first of a task's requests that still waits.
pub(crate) async fn first_waiting<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    task: &TaskId,
) -> Result<Option<Approval>, StoreError> {
    q.opt(
        "SELECT body FROM approvals WHERE task_id = $1 AND waiting ORDER BY seq LIMIT 1",
        &[&task.as_str()],
    )
    .await?
    .map(|r| from_body(r.try_get(0)?))
    .transpose()
}

/// Request `id` with its session's owner; with `lock`, its task's row and its own are
/// locked until the transaction ends (a decision's read).
pub(crate) async fn one<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    id: &str,
    lock: bool,
) -> Result<Option<(Approval, Option<String>)>, StoreError> {
    let sql = if lock {
        "SELECT a.body, s.owner FROM approvals a
           JOIN tasks t ON t.id = a.task_id JOIN sessions s ON s.id = a.session_id
         WHERE a.id = $1 FOR UPDATE OF a, t"
    } else {
        "SELECT a.body, s.owner FROM approvals a JOIN sessions s ON s.id = a.session_id
         WHERE a.id = $1"
    };
    match q.opt(sql, &[&id]).await? {
        Some(r) => Ok(Some((from_body(r.try_get(0)?)?, r.try_get(1)?))),
        None => Ok(None),
    }
}

/// Records a new request; `false` when its id is kept already (a replayed batch).
pub(crate) async fn insert<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    a: &Approval,
) -> Result<bool, StoreError> {
    let n = q
        .exec(
            "INSERT INTO approvals (id, task_id, session_id, waiting, asked_at, body)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
            &[
                &a.id,
                &a.task_id.as_str(),
                &a.session_id.as_str(),
                &a.decision.is_none(),
                &a.asked_at,
                &json_text(a)?,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// Writes a request back as it stands now.
pub(crate) async fn update<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    a: &Approval,
) -> Result<(), StoreError> {
    q.exec(
        "UPDATE approvals SET waiting = $2, body = $3 WHERE id = $1",
        &[&a.id, &a.decision.is_none(), &json_text(a)?],
    )
    .await?;
    Ok(())
}

/// The requests that wait, oldest first, in the sessions of `owner` (everyone's with
/// `None`); with `all`, then the most recently asked decided ones.
pub(crate) async fn listed<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    owner: Option<&str>,
    all: bool,
) -> Result<Vec<Approval>, StoreError> {
    let mut out: Vec<Approval> = q
        .rows(
            "SELECT body FROM approvals WHERE waiting
               AND ($1::text IS NULL OR session_id IN (SELECT id FROM sessions WHERE owner = $1))
             ORDER BY asked_at, seq",
            &[&owner],
        )
        .await?
        .iter()
        .map(|r| from_body(r.try_get(0)?))
        .collect::<Result<_, _>>()?;
    if all {
        let rows = q
            .rows(
                "SELECT body FROM approvals WHERE NOT waiting
                   AND ($1::text IS NULL OR session_id IN (SELECT id FROM sessions WHERE owner = $1))
                 ORDER BY asked_at DESC, seq DESC LIMIT $2",
                &[&owner, &(RECENT as i64)],
            )
            .await?;
        for r in &rows {
            out.push(from_body(r.try_get(0)?)?);
        }
    }
    Ok(out)
}
