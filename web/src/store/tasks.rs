//! Messages and the tasks they become.

use super::agents::{get_agent, project_dirs};
use super::approval_rows;
use super::asked::{payload, status_after};
use super::rows::{Finish, TASK_COLUMNS};
use super::rules::{self, Ended};
use super::sessions::{append_event, get_session, session_id};
use super::{
    Outbox, ProjectDirRow, SessionRow, Store, StoreError, TaskRow, resolve_session, resolve_task,
};
use crate::clock;
use crate::executor::AgentSpec;
use crate::metrics::WaitReason;
use crate::transcript::{Delta, EventKind, Live, TranscriptEvent};
use berth_core::api::TaskStatus;
use berth_core::approval::Approval;
use berth_core::binding::MachineId;
use berth_core::resolve::Origin;
use berth_core::{SessionId, TaskId};
use rusqlite::{Connection, params};

/// What startup recovery found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// Tasks that were running (or had been claimed) when the server stopped; now
    /// `interrupted`, never re-run in place.
    pub interrupted: Vec<TaskId>,
    /// Sessions with tasks still waiting to run, to schedule again.
    pub pending_sessions: Vec<SessionId>,
    /// On PostgreSQL, tasks the last leader had handed to a daemon: they may still be
    /// running there, and the new leader carries on with them (never on SQLite, whose
    /// one server ends them `interrupted`).
    pub adopted: Vec<Adopted>,
}

/// A task a daemon's process may still be running, left by the last leader: the new
/// one takes its events and outcome if that process comes back within the heartbeat
/// window, and ends it `interrupted` otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adopted {
    pub task: TaskRow,
    /// The machine it was handed to, and its name as last seen.
    pub machine: MachineId,
    pub machine_name: String,
    /// The daemon process (its registration's instance) that took it.
    pub instance: String,
    /// How many of the daemon's events for it are stored.
    pub received: u64,
    /// The session's binding revision now (a binding changed since still keeps the
    /// session's recorded directory, as for any run).
    pub binding_rev: i64,
    /// How it ended, if its daemon had reported that: recorded at once.
    pub outcome: Option<crate::executor::TaskOutcome>,
}

/// A batch of events a daemon sent for a task it runs ([`Store::daemon_events`]): the
/// daemon's events numbered `from` up to `to`, as the items to store.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonEvents {
    pub task_id: TaskId,
    pub session_id: SessionId,
    pub items: Vec<RunItem>,
    pub from: u64,
    pub to: u64,
}

/// One thing a run reported, for [`Store::run_events`].
#[derive(Debug, Clone, PartialEq)]
pub enum RunItem {
    /// A status change, with why the task waits (for a wait).
    Status(TaskStatus, Option<String>),
    /// An agent event's JSON.
    Agent(serde_json::Value),
    /// A request put to a person, its deadline set (the task then shows
    /// `waiting_approval`).
    Approval(Box<berth_core::approval::Approval>),
    /// A live-only agent event's JSON (a message's piece): published in its place,
    /// never stored.
    Delta(serde_json::Value),
}

impl RunItem {
    /// The live-only delta of `task` in `session` this item is, if it is one.
    pub(crate) fn delta(&self, task: &TaskId, session: &SessionId) -> Option<Delta> {
        match self {
            RunItem::Delta(payload) => Some(Delta {
                session_id: session.clone(),
                task_id: task.clone(),
                payload: payload.clone(),
                after: None,
            }),
            RunItem::Status(..) | RunItem::Agent(_) | RunItem::Approval(_) => None,
        }
    }
}

/// Task `id`, whole: with its requests.
pub(crate) fn get_task(conn: &Connection, id: &TaskId) -> Result<TaskRow, StoreError> {
    let mut task = task_row(conn, id)?;
    task.approvals = approval_rows::of_task(conn, id)?;
    Ok(task)
}

/// Task `id`'s own row, without its requests (what a status change needs).
pub(crate) fn task_row(conn: &Connection, id: &TaskId) -> Result<TaskRow, StoreError> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([id.as_str()])?;
    match rows.next()? {
        Some(r) => TaskRow::from_row(r),
        None => Err(StoreError::UnknownTask {
            prefix: id.to_string(),
        }),
    }
}

fn task_id(conn: &Connection, prefix: &str) -> Result<TaskId, StoreError> {
    resolve_task(conn, prefix, None)
}

fn task_event(conn: &Connection, outbox: &mut Outbox, task: &TaskRow) -> Result<(), StoreError> {
    append_event(
        conn,
        outbox,
        &task.session_id,
        Some(&task.id),
        EventKind::Task,
        rules::task_payload(task),
    )?;
    Ok(())
}

pub(crate) fn status_event(
    conn: &Connection,
    outbox: &mut Outbox,
    task: &TaskRow,
) -> Result<(), StoreError> {
    append_event(
        conn,
        outbox,
        &task.session_id,
        Some(&task.id),
        EventKind::Status,
        rules::status_payload(task),
    )?;
    Ok(())
}

/// Records a non-final status change and appends it to the transcript: the task's
/// row as it is now (without its requests).
pub(crate) fn record_status(
    conn: &Connection,
    outbox: &mut Outbox,
    id: &TaskId,
    status: TaskStatus,
    wait_reason: Option<String>,
) -> Result<TaskRow, StoreError> {
    conn.prepare_cached("UPDATE tasks SET status = ?2, wait_reason = ?3 WHERE id = ?1")?
        .execute(params![id.as_str(), status.as_str(), wait_reason])?;
    let task = task_row(conn, id)?;
    status_event(conn, outbox, &task)?;
    Ok(task)
}

/// What a run reported for one task, in order: status changes (each also a transcript
/// event) and agent events.
pub(crate) struct TaskItems<'a> {
    pub task_id: &'a TaskId,
    pub session_id: &'a SessionId,
    pub items: Vec<RunItem>,
}

fn write_items(conn: &Connection, outbox: &mut Outbox, t: TaskItems<'_>) -> Result<(), StoreError> {
    for item in t.items {
        match item {
            // Most of a run's items: its output.
            RunItem::Agent(payload) => {
                let (session, task) = (t.session_id, Some(t.task_id));
                append_event(conn, outbox, session, task, EventKind::Agent, payload)?;
            }
            RunItem::Status(status, why) => {
                record_status(conn, outbox, t.task_id, status, why)?;
            }
            RunItem::Approval(a) => {
                record_asked(conn, outbox, t.task_id, *a)?;
            }
            RunItem::Delta(payload) => outbox.pass(Delta {
                session_id: t.session_id.clone(),
                task_id: t.task_id.clone(),
                payload,
                after: None,
            }),
        }
    }
    Ok(())
}

/// Startup recovery, in one transaction.
pub(crate) fn recover(conn: &Connection, outbox: &mut Outbox) -> Result<Recovery, StoreError> {
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks
         WHERE status IN ('running', 'waiting_lock', 'waiting_approval')
            OR (status IN ('queued', 'waiting_daemon') AND started_at IS NOT NULL)
         ORDER BY session_id, seq"
    );
    let stale = {
        let mut stmt = conn.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(TaskRow::from_row(r)?);
        }
        out
    };
    let now = clock::now();
    let mut interrupted = Vec::new();
    for t in stale {
        conn.prepare_cached(
            "UPDATE tasks SET status = 'interrupted', wait_reason = NULL, finished_at = ?2,
               error = ?3, error_code = 'interrupted'
             WHERE id = ?1",
        )?
        .execute(params![t.id.as_str(), now, rules::INTERRUPTED])?;
        task_event(conn, outbox, &get_task(conn, &t.id)?)?;
        interrupted.push(t.id);
    }
    // A task waiting for a machine is resolved again from scratch.
    conn.prepare_cached(
        "UPDATE tasks SET status = 'queued', wait_reason = NULL WHERE status = 'waiting_daemon'",
    )?
    .execute([])?;
    let mut stmt = conn.prepare(
        "SELECT DISTINCT session_id FROM tasks WHERE status = 'queued' ORDER BY session_id",
    )?;
    let pending_sessions = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?
        .into_iter()
        .map(SessionId::try_from)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Recovery {
        interrupted,
        pending_sessions,
        adopted: Vec::new(),
    })
}

/// Stores a user message and its queued task inside the caller's transaction (see
/// [`Store::add_message`]).
pub(crate) fn insert_message(
    tx: &Connection,
    outbox: &mut Outbox,
    session_prefix: &str,
    origin: Origin,
    text: &str,
) -> Result<(TaskRow, i64), StoreError> {
    let session = session_id(tx, session_prefix)?;
    let message_id = uuid::Uuid::new_v4().to_string();
    let task = rules::new_task_id()?;
    let now = clock::now();
    tx.prepare_cached(
        "INSERT INTO messages (id, session_id, origin, text, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        message_id,
        session.as_str(),
        origin.as_str(),
        text,
        now
    ])?;
    let seq: i64 = tx
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks WHERE session_id = ?1")?
        .query_row([session.as_str()], |r| r.get(0))?;
    tx.prepare_cached(
        "INSERT INTO tasks (id, session_id, seq, message_id, status, created_at)
         VALUES (?1, ?2, ?3, ?4, 'queued', ?5)",
    )?
    .execute(params![
        task.as_str(),
        session.as_str(),
        seq,
        message_id,
        now
    ])?;
    let message_seq = append_event(
        tx,
        outbox,
        &session,
        Some(&task),
        EventKind::Message,
        rules::message_payload(&task, &message_id, origin, text),
    )?;
    tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")?
        .execute(params![session.as_str(), now])?;
    Ok((get_task(tx, &task)?, message_seq))
}

impl Store {
    /// Marks tasks left running by a previous process `interrupted` and lists the
    /// sessions whose queued tasks must be scheduled again.
    pub async fn recover(&self) -> Result<Recovery, StoreError> {
        on_pg!(self, pg => pg.recover());
        self.write(|tx, outbox| recover(tx, outbox)).await
    }

    /// Stores a user message and the task it becomes, queued at the end of its
    /// session, and appends the message to the transcript; returns the task and the
    /// message event's `seq`.
    pub async fn add_message(
        &self,
        session_prefix: String,
        origin: Origin,
        text: String,
    ) -> Result<(TaskRow, i64), StoreError> {
        on_pg!(self, pg => pg.add_message(session_prefix, origin, text));
        self.write(move |tx, outbox| insert_message(tx, outbox, &session_prefix, origin, &text))
            .await
    }

    /// [`Store::add_message`], with the message's transcript event when this process
    /// is the only one that writes the transcript (SQLite): a stream that starts at the
    /// message (`berth send`) begins with it and follows the live feed from there,
    /// without reading the transcript back. `None` on PostgreSQL, where the stream reads
    /// the store as before.
    pub async fn add_message_with_event(
        &self,
        session_prefix: String,
        origin: Origin,
        text: String,
    ) -> Result<(TaskRow, i64, Option<TranscriptEvent>), StoreError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            let (task, seq) = self.tally(pg.add_message(session_prefix, origin, text).await)?;
            return Ok((task, seq, None));
        }
        self.write(move |tx, outbox| {
            let (task, seq) = insert_message(tx, outbox, &session_prefix, origin, &text)?;
            let event = outbox.0.iter().rev().find_map(|e| match e {
                Live::Stored(e) if e.seq == seq => Some(e.clone()),
                Live::Stored(_) | Live::Nudge(_) | Live::Delta(_) => None,
            });
            Ok((task, seq, event))
        })
        .await
    }

    /// The session's next task with everything its run needs, in one read: the
    /// scheduler's hot path.
    pub async fn next_run(&self, session: SessionId) -> Result<Option<NextRun>, StoreError> {
        on_pg!(self, pg => pg.next_run(session));
        self.read_small(move |conn| {
            let Some((task, prompt, origin)) = next_task(conn, &session)? else {
                return Ok(None);
            };
            let context = run_context(conn, &task.session_id)?;
            Ok(Some(NextRun::new((task, prompt, origin), context)))
        })
        .await
    }
}

/// A session's next task and what its run needs ([`Store::next_run`]).
#[derive(Debug, Clone)]
pub struct NextRun {
    pub task: TaskRow,
    pub prompt: String,
    pub origin: Origin,
    pub session: super::SessionRow,
    pub agent: crate::executor::AgentSpec,
    pub dirs: Vec<super::ProjectDirRow>,
}

impl NextRun {
    /// The claimed task (with its message's text and origin) and what its run needs.
    pub(crate) fn new(
        (task, prompt, origin): (TaskRow, String, Origin),
        (session, agent, dirs): (SessionRow, AgentSpec, Vec<ProjectDirRow>),
    ) -> NextRun {
        NextRun {
            task,
            prompt,
            origin,
            session,
            agent,
            dirs,
        }
    }
}

/// The session's next task to run, with its prompt and origin: the lowest `seq`
/// still waiting. A task that was claimed is never returned again.
fn next_task(
    conn: &Connection,
    session: &SessionId,
) -> Result<Option<(TaskRow, String, Origin)>, StoreError> {
    let sql = format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE session_id = ?1
           AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL
         ORDER BY seq LIMIT 1"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([session.as_str()])?;
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    let task = TaskRow::from_row(r)?;
    let (text, origin): (String, String) = conn
        .prepare_cached("SELECT text, origin FROM messages WHERE id = ?1")?
        .query_row([&task.message_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(Some((task, text, super::parse_enum(&origin)?)))
}

/// What a run needs besides its task, read on `conn`.
fn run_context(
    conn: &Connection,
    session_id: &SessionId,
) -> Result<(SessionRow, AgentSpec, Vec<ProjectDirRow>), StoreError> {
    let session = get_session(conn, session_id)?;
    let agent = get_agent(conn, &session.agent)?;
    let dirs = match &session.project {
        Some(p) => project_dirs(conn, p)?,
        None => Vec::new(),
    };
    Ok((session, agent, dirs))
}

impl Store {
    /// Records that a claimed task was handed to a daemon's machine: from then on it may
    /// have started there. On PostgreSQL a new leader puts back in line, rather than
    /// ending `interrupted`, what the last one claimed and never handed over. SQLite's
    /// single server ends every claimed task `interrupted` at a restart: nothing to
    /// record.
    pub async fn mark_handed(
        &self,
        id: TaskId,
        machine: MachineId,
        instance: String,
    ) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.mark_handed(id, machine, instance));
        let _ = (id, machine, instance);
        Ok(())
    }

    /// How many tasks wait now, by why (`berth_tasks_waiting`), every reason listed:
    /// queued and not handed out yet; waiting for a directory's lock; waiting for a
    /// daemon, with a bound session (its machine is offline) or without (no machine of
    /// its owner is online). Counted in the database, so every replica says the same.
    pub async fn waiting(&self) -> Result<Vec<(WaitReason, i64)>, StoreError> {
        on_pg!(self, pg => pg.waiting());
        self.read_small(|conn| {
            let mut stmt = conn.prepare_cached(WAITING_SQL)?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<(String, bool, i64)>, _>>()?;
            waiting_by_reason(rows)
        })
        .await
    }

    /// Claims a waiting task for a run: `false` if it was cancelled meanwhile.
    pub async fn claim(&self, id: TaskId) -> Result<bool, StoreError> {
        on_pg!(self, pg => pg.claim(id));
        self.write(move |tx, _| {
            let n = tx
                .prepare_cached(
                    "UPDATE tasks SET started_at = ?2 WHERE id = ?1
                   AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL",
                )?
                .execute(params![id.as_str(), clock::now()])?;
            Ok(n == 1)
        })
        .await
    }

    /// Records a non-final status change and appends it to the transcript.
    pub async fn set_status(
        &self,
        id: TaskId,
        status: TaskStatus,
        wait_reason: Option<String>,
    ) -> Result<TaskRow, StoreError> {
        on_pg!(self, pg => pg.set_status(id, status, wait_reason));
        self.write(move |tx, outbox| record_status(tx, outbox, &id, status, wait_reason))
            .await
    }

    /// Records a burst of what a run reported, in order, in one transaction: status
    /// changes (each also a transcript event) and agent events. Throughput depends on
    /// it: an agent's first output usually arrives with its `running` status.
    pub async fn run_events(&self, task: TaskRow, items: Vec<RunItem>) -> Result<(), StoreError> {
        // Only deltas: nothing to store, so no transaction to wait for.
        let deltas: Option<Vec<Delta>> = items
            .iter()
            .map(|i| i.delta(&task.id, &task.session_id))
            .collect();
        if let Some(deltas) = deltas {
            for d in deltas {
                self.hub().publish(Live::Delta(d));
            }
            return Ok(());
        }
        on_pg!(self, pg => pg.run_events(task, items));
        self.write(move |tx, outbox| {
            let t = TaskItems {
                task_id: &task.id,
                session_id: &task.session_id,
                items,
            };
            write_items(tx, outbox, t)
        })
        .await
    }

    /// Records events a daemon sent for a task it runs, like [`Store::run_events`]. On
    /// PostgreSQL the task's row counts them in the same transaction, and only from
    /// `sent.from`: a new leader knows where the daemon's stream resumes, and a batch
    /// committed once (its answer lost) is not stored again. Answers how many of the
    /// daemon's events are stored now.
    pub async fn daemon_events(&self, sent: DaemonEvents) -> Result<u64, StoreError> {
        on_pg!(self, pg => pg.daemon_events(sent));
        self.write(move |tx, outbox| {
            let t = TaskItems {
                task_id: &sent.task_id,
                session_id: &sent.session_id,
                items: sent.items,
            };
            write_items(tx, outbox, t)?;
            Ok(sent.to)
        })
        .await
    }

    /// Keeps what a daemon reported of how a task ended, before the daemon is told it
    /// was received (PostgreSQL; see [`Adopted::outcome`]): [`Store::finish`] records
    /// it. SQLite's one server has nothing to hand it to.
    pub async fn daemon_outcome(
        &self,
        task_id: TaskId,
        outcome: crate::executor::TaskOutcome,
    ) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.daemon_outcome(task_id, outcome));
        let _ = (task_id, outcome);
        Ok(())
    }

    /// Records how a task ended, updates its session, and appends the final task
    /// document to the transcript.
    pub async fn finish(&self, id: TaskId, fin: Finish) -> Result<TaskRow, StoreError> {
        on_pg!(self, pg => pg.finish(id, fin));
        self.write(move |tx, outbox| {
            let now = clock::now();
            let ended = Ended::of(&fin)?;
            let out = &fin.outcome;
            tx.prepare_cached("UPDATE tasks SET status = ?2, wait_reason = NULL, exit_code = ?3, error = ?4,
                   error_code = ?5, work_dir = ?6, finished_at = ?7,
                   started_at = COALESCE(started_at, ?7), work_dir_display = ?8, denials = ?9,
                   changes = ?10, fence = ?11, usage = ?12
                 WHERE id = ?1")?.execute(
                params![id.as_str(), out.status.as_str(), out.exit_code, out.error, ended.code_text(), out.work_dir, now, out.work_dir_display, ended.denials, ended.changes, ended.fence, ended.usage],
            )?;
            if let Some(diff) = &ended.diff {
                tx.prepare_cached(
                    "INSERT INTO task_diffs (task_id, body) VALUES (?1, ?2)
                     ON CONFLICT (task_id) DO UPDATE SET body = excluded.body",
                )?
                .execute(params![id.as_str(), diff])?;
            }
            let task = get_task(tx, &id)?;
            if let Some(rev) = fin.session_rev {
                tx.prepare_cached("UPDATE sessions SET work_dir = COALESCE(?2, work_dir), resume_id = ?3, updated_at = ?4,
                       work_dir_display = CASE WHEN ?2 IS NULL THEN work_dir_display ELSE ?6 END
                     WHERE id = ?1 AND binding_rev = ?5")?.execute(
                    params![task.session_id.as_str(), out.work_dir, out.resume_id, now, rev, out.work_dir_display],
                )?;
            }
            if let Some(state) = ended.binding_state() {
                tx.prepare_cached(
                    "UPDATE sessions SET binding_state = ?2
                     WHERE id = ?1 AND binding_dir IS NOT NULL",
                )?
                .execute(
                    params![task.session_id.as_str(), state],
                )?;
            }
            task_event(tx, outbox, &task)?;
            Ok(task)
        })
        .await
    }

    /// Cancels a task that has not started; `None` if it already has (or ended).
    pub async fn cancel_waiting(&self, id: TaskId) -> Result<Option<TaskRow>, StoreError> {
        on_pg!(self, pg => pg.cancel_waiting(id));
        self.write(move |tx, outbox| {
            let n = tx
                .prepare_cached(
                    "UPDATE tasks SET status = 'cancelled', wait_reason = NULL, finished_at = ?2
                 WHERE id = ?1 AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL",
                )?
                .execute(params![id.as_str(), clock::now()])?;
            if n == 0 {
                return Ok(None);
            }
            let task = get_task(tx, &id)?;
            task_event(tx, outbox, &task)?;
            Ok(Some(task))
        })
        .await
    }

    /// Records in the session's transcript that a task's changes were undone.
    pub async fn record_undo(
        &self,
        task_id: TaskId,
        payload: serde_json::Value,
    ) -> Result<i64, StoreError> {
        on_pg!(self, pg => pg.record_undo(task_id, payload));
        self.write(move |tx, outbox| {
            let task = get_task(tx, &task_id)?;
            // The task says it was undone (its record, as every surface shows it).
            if let Some(mut changes) = task.changes.clone() {
                changes.undone_at = Some(clock::now());
                tx.prepare_cached("UPDATE tasks SET changes = ?2 WHERE id = ?1")?
                    .execute(params![
                        task.id.as_str(),
                        serde_json::to_string(&changes).unwrap_or_default()
                    ])?;
            }
            append_event(
                tx,
                outbox,
                &task.session_id,
                Some(&task.id),
                EventKind::Undo,
                payload,
            )
        })
        .await
    }

    /// The task `prefix` (what a user typed) names uniquely among those of `owner`'s
    /// sessions (among all with `None`).
    pub async fn resolve_task_of(
        &self,
        prefix: &str,
        owner: Option<berth_core::Member>,
    ) -> Result<TaskRow, StoreError> {
        on_pg!(self, pg => pg.resolve_task_of(prefix, owner));
        let prefix = prefix.to_owned();
        self.read_small(move |conn| {
            let id = resolve_task(conn, &prefix, owner.as_deref())?;
            get_task(conn, &id)
        })
        .await
    }

    /// The task `prefix` (what a user typed) names uniquely.
    pub async fn resolve_task(&self, prefix: &str) -> Result<TaskRow, StoreError> {
        on_pg!(self, pg => pg.resolve_task_of(prefix, None));
        let prefix = prefix.to_owned();
        self.read_small(move |conn| get_task(conn, &task_id(conn, &prefix)?))
            .await
    }

    /// The task `id`, resolved already.
    pub async fn task(&self, id: &TaskId) -> Result<TaskRow, StoreError> {
        on_pg!(self, pg => pg.task(id));
        let id = id.clone();
        self.read_small(move |conn| get_task(conn, &id)).await
    }

    /// Task `id`'s lines as its machine sent them (bounded), `None` when it sent none
    /// (it changed nothing, kept no record, or ran before lines were kept).
    pub async fn task_diff(
        &self,
        id: &TaskId,
    ) -> Result<Option<berth_core::patch::TaskDiff>, StoreError> {
        on_pg!(self, pg => pg.task_diff(id));
        let id = id.clone();
        let body: Option<String> = self
            .read_small(move |conn| {
                use rusqlite::OptionalExtension;
                Ok(conn
                    .prepare_cached("SELECT body FROM task_diffs WHERE task_id = ?1")?
                    .query_row([id.as_str()], |r| r.get(0))
                    .optional()?)
            })
            .await?;
        body.map(|b| serde_json::from_str(&b).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    /// Tasks of one session (by prefix) or of all, oldest first; only those of
    /// `owner`'s sessions when given.
    pub async fn list_tasks(
        &self,
        session: Option<String>,
        owner: Option<berth_core::Member>,
    ) -> Result<Vec<TaskRow>, StoreError> {
        on_pg!(self, pg => pg.list_tasks(session, owner));
        self.read(move |conn| {
            let (sql, arg) = match session {
                Some(prefix) => {
                    let id = resolve_session(conn, &prefix, owner.as_deref())?;
                    get_session(conn, &id)?;
                    (
                        format!(
                            "SELECT {TASK_COLUMNS} FROM tasks WHERE session_id = ?1 ORDER BY seq"
                        ),
                        Some(id.into_string()),
                    )
                }
                None => (
                    format!(
                        "SELECT {TASK_COLUMNS} FROM tasks WHERE ?1 IS NULL
                         OR session_id IN (SELECT id FROM sessions WHERE owner = ?1)
                         ORDER BY created_at, id"
                    ),
                    owner.map(|o| o.as_str().to_owned()),
                ),
            };
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query([&arg])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let mut task = TaskRow::from_row(r)?;
                task.approvals = approval_rows::of_task(conn, &task.id)?;
                out.push(task);
            }
            Ok(out)
        })
        .await
    }
}

/// Waiting tasks by status and whether their session is bound: see [`Store::waiting`].
/// A claimed task (`started_at` set) is handed out, unless it waits for a lock.
pub(crate) const WAITING_SQL: &str = "SELECT t.status, s.binding_machine IS NOT NULL, COUNT(*)
    FROM tasks t JOIN sessions s ON s.id = t.session_id
    WHERE (t.status IN ('queued', 'waiting_daemon') AND t.started_at IS NULL)
       OR t.status IN ('waiting_lock', 'waiting_approval')
    GROUP BY t.status, s.binding_machine IS NOT NULL";

/// [`WAITING_SQL`]'s rows, by [`WaitReason`] (each listed, at zero if none waits).
pub(crate) fn waiting_by_reason(
    rows: Vec<(String, bool, i64)>,
) -> Result<Vec<(WaitReason, i64)>, StoreError> {
    let mut counts: Vec<(WaitReason, i64)> = WaitReason::ALL.iter().map(|r| (*r, 0)).collect();
    for (status, bound, n) in rows {
        let reason = match super::parse_enum::<TaskStatus>(&status)? {
            TaskStatus::Queued => WaitReason::Queued,
            TaskStatus::WaitingLock => WaitReason::DirectoryLock,
            TaskStatus::WaitingDaemon if bound => WaitReason::MachineOffline,
            TaskStatus::WaitingDaemon => WaitReason::NoMachine,
            TaskStatus::WaitingApproval => WaitReason::Approval,
            TaskStatus::Running
            | TaskStatus::Succeeded
            | TaskStatus::Failed
            | TaskStatus::Cancelled
            | TaskStatus::Interrupted
            | TaskStatus::Refused => continue,
        };
        if let Some(c) = counts.iter_mut().find(|(r, _)| *r == reason) {
            c.1 += n;
        }
    }
    Ok(counts)
}

/// Shows a request that was recorded or decided (`changed`, written already): its
/// event, and the status its task shows now, in the caller's transaction. `task` is
/// the task's row as read before.
pub(crate) fn show_approval(
    conn: &Connection,
    outbox: &mut Outbox,
    task: &TaskRow,
    changed: &Approval,
) -> Result<(), StoreError> {
    append_event(
        conn,
        outbox,
        &task.session_id,
        Some(&task.id),
        EventKind::Approval,
        payload(changed),
    )?;
    let (status, why) = status_after(approval_rows::first_waiting(conn, &task.id)?.as_ref());
    // A task that ended meanwhile keeps its final status.
    if !task.status.is_final() && (task.status != status || task.wait_reason != why) {
        record_status(conn, outbox, &task.id, status, why)?;
    }
    Ok(())
}

/// Records a request the run sent (a [`super::RunItem::Approval`]); the same one
/// again, from a replayed batch, changes nothing.
pub(crate) fn record_asked(
    conn: &Connection,
    outbox: &mut Outbox,
    task_id: &TaskId,
    a: Approval,
) -> Result<(), StoreError> {
    let task = task_row(conn, task_id)?;
    if approval_rows::insert(conn, &a)? {
        show_approval(conn, outbox, &task, &a)?;
    }
    Ok(())
}
