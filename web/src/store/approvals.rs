//! Approvals in the store: each task's requests and their decisions (a row each in
//! `approvals`, the task's audit), and the rules a session's "always" answers made
//! (`session_rules`).
//!
//! A decision is taken exactly once: [`apply`] refuses a second one (`already_decided`,
//! saying how and by whom) inside the transaction that reads the request, so two answers
//! racing (the chat and the CLI) give one decision. A person's answer after the
//! deadline is `expired`: the request was denied as timed out, and says so.

use super::approval_rows;
use super::asked::{apply, no_rule, owns, unknown};
use super::tasks::{show_approval, task_row};
use super::{Store, StoreError, TaskRow};
use crate::clock;
use berth_core::SessionId;
use berth_core::approval::{Approval, Decision, SessionRule};
use rusqlite::{OptionalExtension, params};

impl Store {
    /// The requests that wait (with `all`, recent decided ones too) in the sessions of
    /// `owner` (everyone's with `None`).
    pub async fn approvals(
        &self,
        owner: Option<berth_core::Member>,
        all: bool,
    ) -> Result<Vec<Approval>, StoreError> {
        on_pg!(self, pg => pg.approvals(owner, all));
        self.read(move |conn| approval_rows::listed(conn, owner.as_deref(), all))
            .await
    }

    /// Request `id` (its full id), of a session of `owner` (any with `None`).
    pub async fn approval(
        &self,
        id: String,
        owner: Option<berth_core::Member>,
    ) -> Result<Approval, StoreError> {
        on_pg!(self, pg => pg.approval(id, owner));
        self.read_small(move |conn| match approval_rows::one(conn, &id)? {
            Some((a, theirs)) if owns(owner.as_deref(), theirs.as_deref()) => Ok(a),
            _ => Err(unknown(&id)),
        })
        .await
    }

    /// Decides request `id` (its full id) of a session of `owner` (any with `None`),
    /// exactly once. The decided request, and its task's row as it is now (without its
    /// requests).
    pub async fn decide_approval(
        &self,
        id: String,
        owner: Option<berth_core::Member>,
        d: Decision,
    ) -> Result<(Approval, TaskRow), StoreError> {
        on_pg!(self, pg => pg.decide_approval(id, owner, d));
        self.write(move |conn, outbox| {
            let mut a = match approval_rows::one(conn, &id)? {
                Some((a, theirs)) if owns(owner.as_deref(), theirs.as_deref()) => a,
                _ => return Err(unknown(&id)),
            };
            let decided = apply(&mut a, d, clock::now_millis())?;
            approval_rows::update(conn, &decided)?;
            let task = task_row(conn, &decided.task_id)?;
            show_approval(conn, outbox, &task, &decided)?;
            let now = task_row(conn, &decided.task_id)?;
            Ok((decided, now))
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
