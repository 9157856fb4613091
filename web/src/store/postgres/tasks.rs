//! Messages and the tasks they become, on PostgreSQL; and what a new leader takes
//! over from the last one.

use super::Pg;
use super::agents::{get_agent, project_dirs};
use super::approval_rows;
use super::pool::{Q, W};
use super::sessions::{get_session, resolve_session, resolve_task};
use crate::clock;
use crate::store::rows::{Cols, TASK_COLUMN_COUNT, TASK_COLUMNS, qualified_task_columns};
use crate::store::rules::{self, Ended, json_text};
use crate::store::tasks::TaskItems;
use crate::store::{
    Adopted, DaemonEvents, Finish, NextRun, Recovery, RunItem, StoreError, TaskRow, parse_enum,
};
use crate::transcript::EventKind;
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_core::resolve::Origin;
use berth_core::{SessionId, TaskId};
use tokio_postgres::GenericClient;

/// Task `id`, whole: with its requests.
pub(crate) async fn get_task<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    id: &TaskId,
) -> Result<TaskRow, StoreError> {
    let mut task = task_row(q, id).await?;
    task.approvals = approval_rows::of_task(q, id).await?;
    Ok(task)
}

/// Task `id`'s own row, without its requests (what a status change needs).
pub(crate) async fn task_row<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    id: &TaskId,
) -> Result<TaskRow, StoreError> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1");
    match q.opt(&sql, &[&id.as_str()]).await? {
        Some(r) => TaskRow::from_row(&r),
        None => Err(StoreError::UnknownTask {
            prefix: id.to_string(),
        }),
    }
}

impl W<'_> {
    async fn task_event(&mut self, task: &TaskRow) -> Result<(), StoreError> {
        self.append(
            &task.session_id,
            Some(&task.id),
            EventKind::Task,
            rules::task_payload(task),
        )
        .await?;
        Ok(())
    }

    pub(super) async fn status_event(&mut self, task: &TaskRow) -> Result<(), StoreError> {
        self.append(
            &task.session_id,
            Some(&task.id),
            EventKind::Status,
            rules::status_payload(task),
        )
        .await?;
        Ok(())
    }

    /// See [`TaskItems`].
    async fn run_items(&mut self, t: TaskItems<'_>) -> Result<(), StoreError> {
        for item in t.items {
            match item {
                RunItem::Status(status, why) => {
                    self.record_status(t.task_id, status, why).await?;
                }
                RunItem::Agent(payload) => {
                    self.append(t.session_id, Some(t.task_id), EventKind::Agent, payload)
                        .await?;
                }
                RunItem::Approval(a) => self.record_asked(t.task_id, *a).await?,
                RunItem::Delta(payload) => self.outbox.pass(crate::transcript::Delta {
                    session_id: t.session_id.clone(),
                    task_id: t.task_id.clone(),
                    payload,
                    after: None,
                }),
            }
        }
        Ok(())
    }

    pub(super) async fn record_status(
        &mut self,
        id: &TaskId,
        status: TaskStatus,
        wait_reason: Option<String>,
    ) -> Result<TaskRow, StoreError> {
        let sql = format!(
            "UPDATE tasks SET status = $2, wait_reason = $3 WHERE id = $1 RETURNING {TASK_COLUMNS}"
        );
        let task = match self
            .q()
            .opt(&sql, &[&id.as_str(), &status.as_str(), &wait_reason])
            .await?
        {
            Some(r) => TaskRow::from_row(&r)?,
            None => {
                return Err(StoreError::UnknownTask {
                    prefix: id.to_string(),
                });
            }
        };
        self.status_event(&task).await?;
        Ok(task)
    }

    pub(super) async fn insert_message(
        &mut self,
        session_prefix: &str,
        origin: Origin,
        text: &str,
    ) -> Result<(TaskRow, i64), StoreError> {
        // A whole id (what the API hands over, resolved already) needs no lookup: the
        // update below finds the row or says there is none.
        let session = match rules::whole_session_id(session_prefix) {
            Some(id) => id,
            None => resolve_session(&mut self.q(), session_prefix, None).await?,
        };
        let now = clock::now();
        // The session's writers queue here: the task's `seq` below is the next one.
        let found = self
            .q()
            .exec(
                "UPDATE sessions SET updated_at = $2 WHERE id = $1",
                &[&session.as_str(), &now],
            )
            .await?;
        if found == 0 {
            return Err(StoreError::UnknownSession {
                prefix: session_prefix.to_owned(),
            });
        }
        let message_id = uuid::Uuid::new_v4().to_string();
        let task = rules::new_task_id()?;
        self.q()
            .exec(
                "INSERT INTO messages (id, session_id, origin, text, created_at)
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    &message_id,
                    &session.as_str(),
                    &origin.as_str(),
                    &text,
                    &now,
                ],
            )
            .await?;
        // A new task has no requests yet: the row it returns is the whole task.
        let sql = format!(
            "INSERT INTO tasks (id, session_id, seq, message_id, status, created_at)
             VALUES ($1, $2,
               (SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks WHERE session_id = $2),
               $3, 'queued', $4)
             RETURNING {TASK_COLUMNS}"
        );
        let row = self
            .q()
            .one(
                &sql,
                &[&task.as_str(), &session.as_str(), &message_id, &now],
            )
            .await?;
        let row = TaskRow::from_row(&row)?;
        let message_seq = self
            .append(
                &session,
                Some(&task),
                EventKind::Message,
                rules::message_payload(&task, &message_id, origin, text),
            )
            .await?;
        self.work.push(session);
        Ok((row, message_seq))
    }
}

impl Pg {
    /// Sessions with a task queued and not started: the leader's periodic re-check,
    /// so that a missed notification only delays.
    pub(crate) async fn queued_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.all(
            "SELECT DISTINCT session_id FROM tasks
             WHERE status = 'queued' AND started_at IS NULL",
            &[],
            |r| r.id(0),
        )
        .await
    }

    /// See [`crate::store::Store::waiting`].
    pub(crate) async fn waiting(
        &self,
    ) -> Result<Vec<(crate::metrics::WaitReason, i64)>, StoreError> {
        let rows = self
            .all(crate::store::tasks::WAITING_SQL, &[], |r| {
                Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))
            })
            .await?;
        crate::store::tasks::waiting_by_reason(rows)
    }

    pub(crate) async fn recover(&self) -> Result<Recovery, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // Claimed by the last leader but never handed to a machine: nothing ran, so
        // back in line, in order.
        w.q()
            .exec(
                "UPDATE tasks SET started_at = NULL
                 WHERE status IN ('queued', 'waiting_daemon') AND started_at IS NOT NULL
                   AND handed_at IS NULL",
                &[],
            )
            .await?;
        // Handed to a daemon's process: it may be running there still. The new leader
        // carries on with it when that process comes back (see `Adopted`).
        let adopt_sql = format!(
            "SELECT {TASK_COLUMNS}, t.handed_to, t.handed_instance, t.daemon_events,
                    COALESCE(m.name, t.handed_to), s.binding_rev, t.daemon_outcome
             FROM tasks t JOIN sessions s ON s.id = t.session_id
                  LEFT JOIN machines m ON m.id = t.handed_to
             WHERE t.status IN ('queued', 'waiting_daemon', 'waiting_lock', 'running',
                                'waiting_approval')
               AND t.started_at IS NOT NULL AND t.handed_at IS NOT NULL
               AND t.handed_to IS NOT NULL AND t.handed_instance IS NOT NULL
             ORDER BY t.session_id, t.seq",
            TASK_COLUMNS = qualified_task_columns("t")
        );
        let mut adopted = Vec::new();
        for r in w.q().rows(&adopt_sql, &[]).await?.iter() {
            let n = TASK_COLUMN_COUNT;
            adopted.push(Adopted {
                task: TaskRow::from_row(r)?,
                machine: r.id(n)?,
                instance: r.text(n + 1)?,
                received: u64::try_from(r.int(n + 2)?).unwrap_or(0),
                machine_name: r.text(n + 3)?,
                binding_rev: r.int(n + 4)?,
                outcome: r
                    .opt_text(n + 5)?
                    .map(|text| {
                        serde_json::from_str(&text)
                            .map_err(|e| StoreError::Corrupt(format!("a daemon's outcome: {e}")))
                    })
                    .transpose()?,
            });
        }
        for a in &mut adopted {
            // Those still waiting get their session's rules and deadline again.
            a.task.approvals = approval_rows::of_task(&mut w.q(), &a.task.id).await?;
        }
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks
             WHERE (status IN ('running', 'waiting_lock', 'waiting_approval')
                    OR (status IN ('queued', 'waiting_daemon') AND started_at IS NOT NULL))
               AND NOT (handed_at IS NOT NULL AND handed_to IS NOT NULL
                        AND handed_instance IS NOT NULL)
             ORDER BY session_id, seq"
        );
        let stale = w
            .q()
            .rows(&sql, &[])
            .await?
            .iter()
            .map(TaskRow::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let now = clock::now();
        let mut interrupted = Vec::new();
        for t in stale {
            w.q()
                .exec(
                    "UPDATE tasks SET status = 'interrupted', wait_reason = NULL, finished_at = $2,
                       error = $3, error_code = 'interrupted'
                     WHERE id = $1",
                    &[&t.id.as_str(), &now, &rules::INTERRUPTED],
                )
                .await?;
            let task = get_task(&mut w.q(), &t.id).await?;
            w.task_event(&task).await?;
            interrupted.push(t.id);
        }
        w.q()
            .exec(
                "UPDATE tasks SET status = 'queued', wait_reason = NULL
                 WHERE status = 'waiting_daemon' AND started_at IS NULL",
                &[],
            )
            .await?;
        let pending_sessions = w
            .q()
            .rows(
                "SELECT DISTINCT session_id FROM tasks WHERE status = 'queued' ORDER BY session_id",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.id(0))
            .collect::<Result<Vec<_>, _>>()?;
        self.publish(w).await?;
        Ok(Recovery {
            interrupted,
            pending_sessions,
            adopted,
        })
    }

    pub(crate) async fn add_message(
        &self,
        session_prefix: String,
        origin: Origin,
        text: String,
    ) -> Result<(TaskRow, i64), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let out = w.insert_message(&session_prefix, origin, &text).await?;
        self.publish(w).await?;
        Ok(out)
    }

    pub(crate) async fn next_run(&self, session: SessionId) -> Result<Option<NextRun>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        // The task and its message in one statement.
        let sql = format!(
            "SELECT {}, m.text, m.origin
             FROM tasks t LEFT JOIN messages m ON m.id = t.message_id
             WHERE t.session_id = $1
               AND t.status IN ('queued', 'waiting_daemon') AND t.started_at IS NULL
             ORDER BY t.seq LIMIT 1",
            qualified_task_columns("t")
        );
        let Some(row) = q.opt(&sql, &[&session.as_str()]).await? else {
            return Ok(None);
        };
        let task = TaskRow::from_row(&row)?;
        let (Some(prompt), Some(origin)) = (
            row.try_get::<_, Option<String>>(TASK_COLUMN_COUNT)?,
            row.try_get::<_, Option<String>>(TASK_COLUMN_COUNT + 1)?,
        ) else {
            return Err(StoreError::Corrupt(format!(
                "task {} has no message {}",
                task.id, task.message_id
            )));
        };
        let origin = parse_enum(&origin)?;
        let session = get_session(&mut q, &task.session_id).await?;
        let agent = get_agent(&mut q, &session.agent).await?;
        let dirs = match &session.project {
            Some(p) => project_dirs(&mut q, p).await?,
            None => Vec::new(),
        };
        Ok(Some(NextRun::new(
            (task, prompt, origin),
            (session, agent, dirs),
        )))
    }

    /// Records that a claimed task reached its machine (see migration V2 in [`super::schema`]).
    pub(crate) async fn mark_handed(
        &self,
        id: TaskId,
        machine: MachineId,
        instance: String,
    ) -> Result<(), StoreError> {
        self.exec(
            "UPDATE tasks SET handed_at = $2, handed_to = $3, handed_instance = $4,
               daemon_events = 0, daemon_outcome = NULL
             WHERE id = $1",
            &[&id.as_str(), &clock::now(), &machine.as_str(), &instance],
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn claim(&self, id: TaskId) -> Result<bool, StoreError> {
        let n = self
            .exec(
                "UPDATE tasks SET started_at = $2 WHERE id = $1
                   AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL",
                &[&id.as_str(), &clock::now()],
            )
            .await?;
        Ok(n == 1)
    }

    pub(crate) async fn set_status(
        &self,
        id: TaskId,
        status: TaskStatus,
        wait_reason: Option<String>,
    ) -> Result<TaskRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let task = w.record_status(&id, status, wait_reason).await?;
        self.publish(w).await?;
        Ok(task)
    }

    pub(crate) async fn run_events(
        &self,
        task: TaskRow,
        items: Vec<RunItem>,
    ) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let t = TaskItems {
            task_id: &task.id,
            session_id: &task.session_id,
            items,
        };
        w.run_items(t).await?;
        self.publish(w).await
    }

    pub(crate) async fn daemon_events(&self, sent: DaemonEvents) -> Result<u64, StoreError> {
        let DaemonEvents {
            task_id,
            session_id,
            items,
            from,
            to,
        } = sent;
        let (from, to) = (
            i64::try_from(from).unwrap_or(i64::MAX),
            i64::try_from(to).unwrap_or(i64::MAX),
        );
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // First, and only from where the count stands: a batch whose commit was
        // already made (its answer lost) is not stored twice.
        let n = w
            .q()
            .exec(
                "UPDATE tasks SET daemon_events = $3 WHERE id = $1 AND daemon_events = $2",
                &[&task_id.as_str(), &from, &to],
            )
            .await?;
        if n == 0 {
            let stood = w
                .q()
                .rows(
                    "SELECT daemon_events FROM tasks WHERE id = $1",
                    &[&task_id.as_str()],
                )
                .await?
                .first()
                .map(|r| r.int(0))
                .transpose()?
                .unwrap_or(0);
            return Ok(u64::try_from(stood).unwrap_or(0));
        }
        let t = TaskItems {
            task_id: &task_id,
            session_id: &session_id,
            items,
        };
        w.run_items(t).await?;
        self.publish(w).await?;
        Ok(u64::try_from(to).unwrap_or(0))
    }

    pub(crate) async fn daemon_outcome(
        &self,
        task_id: TaskId,
        outcome: crate::executor::TaskOutcome,
    ) -> Result<(), StoreError> {
        let text = json_text(&outcome)?;
        self.exec(
            "UPDATE tasks SET daemon_outcome = $2 WHERE id = $1 AND finished_at IS NULL",
            &[&task_id.as_str(), &text],
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn finish(&self, id: TaskId, fin: Finish) -> Result<TaskRow, StoreError> {
        let now = clock::now();
        let ended = Ended::of(&fin)?;
        let code = ended.code_text();
        let out = &fin.outcome;
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let sql = format!(
            "UPDATE tasks SET status = $2, wait_reason = NULL, exit_code = $3, error = $4,
               error_code = $5, work_dir = $6, finished_at = $7,
               started_at = COALESCE(started_at, $7), work_dir_display = $8, denials = $9,
               changes = $10, fence = $11, usage = $12
             WHERE id = $1
             RETURNING {TASK_COLUMNS}"
        );
        let row = w
            .q()
            .opt(
                &sql,
                &[
                    &id.as_str(),
                    &out.status.as_str(),
                    &out.exit_code,
                    &out.error,
                    &code,
                    &out.work_dir,
                    &now,
                    &out.work_dir_display,
                    &ended.denials,
                    &ended.changes,
                    &ended.fence,
                    &ended.usage,
                ],
            )
            .await?
            .ok_or_else(|| StoreError::UnknownTask {
                prefix: id.to_string(),
            })?;
        let mut task = TaskRow::from_row(&row)?;
        task.approvals = approval_rows::of_task(&mut w.q(), &id).await?;
        if let Some(diff) = &ended.diff {
            w.q()
                .exec(
                    "INSERT INTO task_diffs (task_id, body) VALUES ($1, $2)
                     ON CONFLICT (task_id) DO UPDATE SET body = excluded.body",
                    &[&id.as_str(), diff],
                )
                .await?;
        }
        if let Some(rev) = fin.session_rev {
            w.q()
                .exec(
                    "UPDATE sessions SET work_dir = COALESCE($2, work_dir), resume_id = $3,
                       updated_at = $4,
                       work_dir_display = CASE WHEN $2::text IS NULL THEN work_dir_display ELSE $6 END
                     WHERE id = $1 AND binding_rev = $5",
                    &[
                        &task.session_id.as_str(),
                        &out.work_dir,
                        &out.resume_id,
                        &now,
                        &rev,
                        &out.work_dir_display,
                    ],
                )
                .await?;
        }
        if let Some(state) = ended.binding_state() {
            w.q()
                .exec(
                    "UPDATE sessions SET binding_state = $2 WHERE id = $1 AND binding_dir IS NOT NULL",
                    &[&task.session_id.as_str(), &state],
                )
                .await?;
        }
        w.task_event(&task).await?;
        self.publish(w).await?;
        Ok(task)
    }

    pub(crate) async fn cancel_waiting(&self, id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE tasks SET status = 'cancelled', wait_reason = NULL, finished_at = $2
                 WHERE id = $1 AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL",
                &[&id.as_str(), &clock::now()],
            )
            .await?;
        if n == 0 {
            return Ok(None);
        }
        let task = get_task(&mut w.q(), &id).await?;
        w.task_event(&task).await?;
        self.publish(w).await?;
        Ok(Some(task))
    }

    pub(crate) async fn record_undo(
        &self,
        task_id: TaskId,
        payload: serde_json::Value,
    ) -> Result<i64, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let task = get_task(&mut w.q(), &task_id).await?;
        // The task says it was undone (its record, as every surface shows it).
        if let Some(mut changes) = task.changes.clone() {
            changes.undone_at = Some(clock::now());
            let text = serde_json::to_string(&changes).unwrap_or_default();
            w.q()
                .exec(
                    "UPDATE tasks SET changes = $2 WHERE id = $1",
                    &[&task.id.as_str(), &text],
                )
                .await?;
        }
        let seq = w
            .append(&task.session_id, Some(&task.id), EventKind::Undo, payload)
            .await?;
        self.publish(w).await?;
        Ok(seq)
    }

    pub(crate) async fn resolve_task_of(
        &self,
        prefix: &str,
        owner: Option<berth_core::Member>,
    ) -> Result<TaskRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let id = resolve_task(&mut q, prefix, owner.as_deref()).await?;
        get_task(&mut q, &id).await
    }

    pub(crate) async fn task(&self, id: &TaskId) -> Result<TaskRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        get_task(&mut q, id).await
    }

    pub(crate) async fn task_diff(
        &self,
        id: &TaskId,
    ) -> Result<Option<berth_core::patch::TaskDiff>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let body: Option<String> = match q
            .opt(
                "SELECT body FROM task_diffs WHERE task_id = $1",
                &[&id.as_str()],
            )
            .await?
        {
            Some(r) => Some(r.try_get(0)?),
            None => None,
        };
        body.map(|b| serde_json::from_str(&b).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    pub(crate) async fn list_tasks(
        &self,
        session: Option<String>,
        owner: Option<berth_core::Member>,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let rows = match session {
            Some(prefix) => {
                let id = resolve_session(&mut q, &prefix, owner.as_deref()).await?;
                get_session(&mut q, &id).await?;
                let sql =
                    format!("SELECT {TASK_COLUMNS} FROM tasks WHERE session_id = $1 ORDER BY seq");
                q.rows(&sql, &[&id.as_str()]).await?
            }
            None => {
                let sql = format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE $1::text IS NULL
                     OR session_id IN (SELECT id FROM sessions WHERE owner = $1)
                     ORDER BY created_at, id"
                );
                q.rows(&sql, &[&owner.as_deref()]).await?
            }
        };
        let mut tasks = rows
            .iter()
            .map(TaskRow::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        approval_rows::fill(&mut q, &mut tasks).await?;
        Ok(tasks)
    }
}
