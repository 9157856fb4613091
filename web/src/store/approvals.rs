//! Approvals in the store: each task's requests and their decisions (the task's
//! `approvals` column, its audit), and the rules a session's "always" answers made
//! (`session_rules`).
//!
//! A decision is taken exactly once: [`apply`] refuses a second one (`already_decided`,
//! saying how and by whom) inside the transaction that reads the task, so two answers
//! racing (the chat and the CLI) give one decision. A person's answer after the
//! deadline is `expired`: the request was denied as timed out, and says so.

use super::asked::{RECENT, apply, listed, no_rule, owns, task_of, unknown};
use super::tasks::{get_task, store_approvals};
use super::{Store, StoreError, TaskRow};
use crate::clock;
use berth_core::SessionId;
use berth_core::approval::{Approval, Decision, SessionRule};
use rusqlite::{Connection, OptionalExtension, params};

fn session_owner_sqlite(conn: &Connection, id: &SessionId) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT owner FROM sessions WHERE id = ?1")?
        .query_row([id.as_str()], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

impl Store {
    /// The requests that wait (with `all`, recent decided ones too) in the sessions of
    /// `owner` (everyone's with `None`).
    pub async fn approvals(
        &self,
        owner: Option<berth_core::Member>,
        all: bool,
    ) -> Result<Vec<Approval>, StoreError> {
        on_pg!(self, pg => pg.approvals(owner, all));
        self.read(move |conn| {
            let sql = format!(
                "SELECT {} FROM tasks
                 WHERE approvals IS NOT NULL
                   AND (?2 OR status = 'waiting_approval')
                   AND (?1 IS NULL OR session_id IN (SELECT id FROM sessions WHERE owner = ?1))
                 ORDER BY created_at DESC LIMIT ?3",
                super::rows::TASK_COLUMNS
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let limit = if all { RECENT as i64 } else { -1 };
            let mut rows = stmt.query(params![owner.as_deref(), all, limit])?;
            let mut tasks = Vec::new();
            while let Some(r) = rows.next()? {
                tasks.push(TaskRow::from_row(r)?);
            }
            Ok(listed(tasks, all))
        })
        .await
    }

    /// Decides request `id` (its full id) of a session of `owner` (any with `None`),
    /// exactly once. The decided request, and its task.
    pub async fn decide_approval(
        &self,
        id: String,
        owner: Option<berth_core::Member>,
        d: Decision,
    ) -> Result<(Approval, TaskRow), StoreError> {
        on_pg!(self, pg => pg.decide_approval(id, owner, d));
        self.write(move |conn, outbox| {
            let task_id = task_of(&id)?;
            let task = match get_task(conn, &task_id) {
                Ok(t) => t,
                Err(StoreError::UnknownTask { .. }) => return Err(unknown(&id)),
                Err(e) => return Err(e),
            };
            if !owns(
                owner.as_deref(),
                session_owner_sqlite(conn, &task.session_id)?.as_deref(),
            ) {
                return Err(unknown(&id));
            }
            let mut list = task.approvals.clone();
            let decided = apply(&mut list, &id, d, clock::now_millis())?;
            store_approvals(conn, outbox, &task, &list, &decided)?;
            Ok((decided, get_task(conn, &task_id)?))
        })
        .await
    }

    /// The rules a session's "always" answers made, oldest first.
    pub async fn session_rules(&self, id: &SessionId) -> Result<Vec<SessionRule>, StoreError> {
        on_pg!(self, pg => pg.session_rules(id));
        let id = id.clone();
        self.read_small(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT n, rule, added_at, approval_id FROM session_rules
                 WHERE session_id = ?1 ORDER BY n",
            )?;
            let rows = stmt.query_map([id.as_str()], |r| {
                Ok(SessionRule {
                    n: r.get(0)?,
                    rule: r.get(1)?,
                    added_at: r.get(2)?,
                    approval_id: r.get(3)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    /// Adds a rule to a session (the same rule again adds nothing): the rule as kept.
    pub async fn add_session_rule(
        &self,
        id: &SessionId,
        rule: String,
        approval_id: Option<String>,
    ) -> Result<SessionRule, StoreError> {
        on_pg!(self, pg => pg.add_session_rule(id, rule, approval_id));
        let id = id.clone();
        self.write(move |conn, _| {
            let existing = conn
                .prepare_cached(
                    "SELECT n, added_at, approval_id FROM session_rules
                     WHERE session_id = ?1 AND rule = ?2",
                )?
                .query_row(params![id.as_str(), rule], |r| {
                    Ok(SessionRule {
                        n: r.get(0)?,
                        rule: rule.clone(),
                        added_at: r.get(1)?,
                        approval_id: r.get(2)?,
                    })
                })
                .optional()?;
            if let Some(kept) = existing {
                return Ok(kept);
            }
            let n: i64 = conn
                .prepare_cached(
                    "SELECT COALESCE(MAX(n), 0) + 1 FROM session_rules WHERE session_id = ?1",
                )?
                .query_row([id.as_str()], |r| r.get(0))?;
            let added_at = clock::now();
            conn.prepare_cached(
                "INSERT INTO session_rules (session_id, n, rule, added_at, approval_id)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![id.as_str(), n, rule, added_at, approval_id])?;
            Ok(SessionRule {
                n,
                rule,
                added_at,
                approval_id,
            })
        })
        .await
    }

    /// Removes rule `n` of a session: the rule removed.
    pub async fn remove_session_rule(
        &self,
        id: &SessionId,
        n: i64,
    ) -> Result<SessionRule, StoreError> {
        on_pg!(self, pg => pg.remove_session_rule(id, n));
        let id = id.clone();
        self.write(move |conn, _| {
            let found = conn
                .prepare_cached(
                    "SELECT rule, added_at, approval_id FROM session_rules
                     WHERE session_id = ?1 AND n = ?2",
                )?
                .query_row(params![id.as_str(), n], |r| {
                    Ok(SessionRule {
                        n,
                        rule: r.get(0)?,
                        added_at: r.get(1)?,
                        approval_id: r.get(2)?,
                    })
                })
                .optional()?;
            let Some(rule) = found else {
                return Err(no_rule(&id, n));
            };
            conn.prepare_cached("DELETE FROM session_rules WHERE session_id = ?1 AND n = ?2")?
                .execute(params![id.as_str(), n])?;
            Ok(rule)
        })
        .await
    }
}
