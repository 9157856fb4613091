//! Approvals on PostgreSQL: the same rules as SQLite's ([`crate::store::approvals`]),
//! the request's and its task's rows locked (`FOR UPDATE`) while a decision is taken,
//! so two replicas' answers racing give one decision.

use super::Pg;
use super::approval_rows;
use super::pool::W;
use super::tasks::task_row;
use crate::clock;
use crate::store::asked::{apply, owns, payload, status_after, unknown};
use crate::store::{StoreError, TaskRow};
use crate::transcript::EventKind;
use berth_core::SessionId;
use berth_core::TaskId;
use berth_core::approval::{Approval, Decision, SessionRule};

impl W<'_> {
    /// Shows a request that was recorded or decided (see the SQLite twin,
    /// `show_approval`).
    async fn show_approval(
        &mut self,
        task: &TaskRow,
        changed: &Approval,
    ) -> Result<(), StoreError> {
        self.append(
            &task.session_id,
            Some(&task.id),
            EventKind::Approval,
            payload(changed),
        )
        .await?;
        let first = approval_rows::first_waiting(&mut self.q(), &task.id).await?;
        let (status, why) = status_after(first.as_ref());
        if !task.status.is_final() && (task.status != status || task.wait_reason != why) {
            self.record_status(&task.id, status, why).await?;
        }
        Ok(())
    }

    /// Records a request the run sent; the same one again changes nothing.
    pub(super) async fn record_asked(
        &mut self,
        id: &TaskId,
        a: Approval,
    ) -> Result<(), StoreError> {
        // The task's row locked: its status follows its requests, one writer at a time.
        self.q()
            .exec(
                "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE",
                &[&id.as_str()],
            )
            .await?;
        let task = task_row(&mut self.q(), id).await?;
        if approval_rows::insert(&mut self.q(), &a).await? {
            self.show_approval(&task, &a).await?;
        }
        Ok(())
    }
}

impl Pg {
    pub(crate) async fn approvals(
        &self,
        owner: Option<berth_core::Member>,
        all: bool,
    ) -> Result<Vec<Approval>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        approval_rows::listed(&mut q, owner.as_deref(), all).await
    }

    pub(crate) async fn approval(
        &self,
        id: String,
        owner: Option<berth_core::Member>,
    ) -> Result<Approval, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        match approval_rows::one(&mut q, &id, false).await? {
            Some((a, theirs)) if owns(owner.as_deref(), theirs.as_deref()) => Ok(a),
            _ => Err(unknown(&id)),
        }
    }

    pub(crate) async fn decide_approval(
        &self,
        id: String,
        owner: Option<berth_core::Member>,
        d: Decision,
    ) -> Result<(Approval, TaskRow), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // The request's row and its task's, locked: two replicas' answers racing give
        // one decision, and the task's status follows its requests.
        let mut a = match approval_rows::one(&mut w.q(), &id, true).await? {
            Some((a, theirs)) if owns(owner.as_deref(), theirs.as_deref()) => a,
            _ => return Err(unknown(&id)),
        };
        let decided = apply(&mut a, d, clock::now_millis())?;
        approval_rows::update(&mut w.q(), &decided).await?;
        let task = task_row(&mut w.q(), &decided.task_id).await?;
        w.show_approval(&task, &decided).await?;
        let task = task_row(&mut w.q(), &decided.task_id).await?;
        self.publish(w).await?;
        Ok((decided, task))
    }

    pub(crate) async fn session_rules(
        &self,
        id: &SessionId,
    ) -> Result<Vec<SessionRule>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let rows = q
            .rows(
                "SELECT n, rule, added_at, approval_id FROM session_rules
                 WHERE session_id = $1 ORDER BY n",
                &[&id.as_str()],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| SessionRule {
                n: r.get(0),
                rule: r.get(1),
                added_at: r.get(2),
                approval_id: r.get(3),
            })
            .collect())
    }

    pub(crate) async fn add_session_rule(
        &self,
        id: &SessionId,
        rule: String,
        approval_id: Option<String>,
    ) -> Result<SessionRule, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.q()
            .exec(
                "SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE",
                &[&id.as_str()],
            )
            .await?;
        let existing = w
            .q()
            .opt(
                "SELECT n, added_at, approval_id FROM session_rules
                 WHERE session_id = $1 AND rule = $2",
                &[&id.as_str(), &rule],
            )
            .await?;
        if let Some(r) = existing {
            let kept = SessionRule {
                n: r.get(0),
                rule,
                added_at: r.get(1),
                approval_id: r.get(2),
            };
            self.publish(w).await?;
            return Ok(kept);
        }
        let n: i64 = w
            .q()
            .one(
                "SELECT COALESCE(MAX(n), 0) + 1 FROM session_rules WHERE session_id = $1",
                &[&id.as_str()],
            )
            .await?
            .get(0);
        let added_at = clock::now();
        w.q()
            .exec(
                "INSERT INTO session_rules (session_id, n, rule, added_at, approval_id)
                 VALUES ($1, $2, $3, $4, $5)",
                &[&id.as_str(), &n, &rule, &added_at, &approval_id],
            )
            .await?;
        self.publish(w).await?;
        Ok(SessionRule {
            n,
            rule,
            added_at,
            approval_id,
        })
    }

    pub(crate) async fn remove_session_rule(
        &self,
        id: &SessionId,
        n: i64,
    ) -> Result<SessionRule, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let found = w
            .q()
            .opt(
                "DELETE FROM session_rules WHERE session_id = $1 AND n = $2
                 RETURNING rule, added_at, approval_id",
                &[&id.as_str(), &n],
            )
            .await?;
        let Some(r) = found else {
            return Err(crate::store::asked::no_rule(id, n));
        };
        let rule = SessionRule {
            n,
            rule: r.get(0),
            added_at: r.get(1),
            approval_id: r.get(2),
        };
        self.publish(w).await?;
        Ok(rule)
    }
}
