//! Approvals on PostgreSQL: the same rules as SQLite's ([`crate::store::approvals`]),
//! the task's row locked (`FOR UPDATE`) while a decision is taken, so two replicas'
//! answers racing give one decision.

use super::Pg;
use super::pool::W;
use super::tasks::get_task;
use crate::clock;
use crate::store::asked::{RECENT, apply, asked, listed, owns, status_after, task_of};
use crate::store::rows::TASK_COLUMNS;
use crate::store::rules::json_text;
use crate::store::{StoreError, TaskRow};
use crate::transcript::EventKind;
use berth_core::SessionId;
use berth_core::TaskId;
use berth_core::approval::{Approval, Decision, SessionRule};

impl W<'_> {
    /// Writes a task's list back and shows its status (see the SQLite twin).
    async fn store_approvals(
        &mut self,
        task: &TaskRow,
        list: &[Approval],
        changed: &Approval,
    ) -> Result<(), StoreError> {
        let (status, why) = status_after(list);
        self.q()
            .exec(
                "UPDATE tasks SET approvals = $2 WHERE id = $1",
                &[&task.id.as_str(), &json_text(&list)?],
            )
            .await?;
        let payload = crate::store::asked::payload(changed);
        self.append(
            &task.session_id,
            Some(&task.id),
            EventKind::Approval,
            payload,
        )
        .await?;
        if !task.status.is_final() && (task.status != status || task.wait_reason != why) {
            self.record_status(&task.id, status, why).await?;
        }
        Ok(())
    }

    /// Records a request the run sent.
    pub(super) async fn record_asked(
        &mut self,
        id: &TaskId,
        a: Approval,
    ) -> Result<(), StoreError> {
        self.q()
            .exec(
                "SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE",
                &[&id.as_str()],
            )
            .await?;
        let task = get_task(&mut self.q(), id).await?;
        let mut list = task.approvals.clone();
        asked(&mut list, a.clone());
        self.store_approvals(&task, &list, &a).await
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
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks
             WHERE approvals IS NOT NULL
               AND ($2 OR status = 'waiting_approval')
               AND ($1::text IS NULL OR session_id IN (SELECT id FROM sessions WHERE owner = $1))
             ORDER BY created_at DESC LIMIT $3"
        );
        let limit: i64 = if all { RECENT as i64 } else { i64::MAX };
        let rows = q.rows(&sql, &[&owner.as_deref(), &all, &limit]).await?;
        let tasks = rows
            .iter()
            .map(TaskRow::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(listed(tasks, all))
    }

    pub(crate) async fn decide_approval(
        &self,
        id: String,
        owner: Option<berth_core::Member>,
        d: Decision,
    ) -> Result<(Approval, TaskRow), StoreError> {
        let task_id = task_of(&id)?;
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let locked = w
            .q()
            .opt(
                "SELECT s.owner FROM tasks t JOIN sessions s ON s.id = t.session_id
                 WHERE t.id = $1 FOR UPDATE OF t",
                &[&task_id.as_str()],
            )
            .await?;
        let Some(row) = locked else {
            return Err(crate::store::asked::unknown(&id));
        };
        let session_owner: Option<String> = row.get(0);
        if !owns(owner.as_deref(), session_owner.as_deref()) {
            return Err(crate::store::asked::unknown(&id));
        }
        let task = get_task(&mut w.q(), &task_id).await?;
        let mut list = task.approvals.clone();
        let decided = apply(&mut list, &id, d, clock::now_millis())?;
        w.store_approvals(&task, &list, &decided).await?;
        let task = get_task(&mut w.q(), &task_id).await?;
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
