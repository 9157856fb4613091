//! Rows as the store reads them, and their contract documents.

use super::{StoreError, parse_enum};
use crate::transcript::TranscriptEvent;
use berth_core::api::{Needs, Task, TaskStatus};
use berth_core::binding::{BindMode, BindingState, MachineId};
use berth_core::resolve::Origin;
use berth_core::{IdError, SessionId, TaskId};

/// A result row of either backend, read by column index. Both backends return the same
/// columns in the same order for the same query; the row types share one parser.
pub(crate) trait Cols {
    fn text(&self, i: usize) -> Result<String, StoreError>;
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError>;
    fn int(&self, i: usize) -> Result<i64, StoreError>;
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError>;
    fn opt_i32(&self, i: usize) -> Result<Option<i32>, StoreError>;
    /// A text column borrowed from the row, without a copy.
    fn str_at(&self, i: usize) -> Result<Option<&str>, StoreError>;

    /// An id column, parsed: a stored id that breaks the rule is corrupt data.
    fn id<T: TryFrom<String, Error = IdError>>(&self, i: usize) -> Result<T, StoreError> {
        Ok(T::try_from(self.text(i)?)?)
    }

    /// A nullable id column, parsed.
    fn opt_id<T: TryFrom<String, Error = IdError>>(
        &self,
        i: usize,
    ) -> Result<Option<T>, StoreError> {
        Ok(self.opt_text(i)?.map(T::try_from).transpose()?)
    }
}

impl Cols for rusqlite::Row<'_> {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        Ok(self.get(i)?)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(self.get(i)?)
    }
    fn int(&self, i: usize) -> Result<i64, StoreError> {
        Ok(self.get(i)?)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.get(i)?)
    }
    fn opt_i32(&self, i: usize) -> Result<Option<i32>, StoreError> {
        Ok(self.get(i)?)
    }
    fn str_at(&self, i: usize) -> Result<Option<&str>, StoreError> {
        Ok(self
            .get_ref(i)?
            .as_str_or_null()
            .map_err(rusqlite::Error::from)?)
    }
}

#[cfg(feature = "postgres")]
impl Cols for tokio_postgres::Row {
    fn text(&self, i: usize) -> Result<String, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn int(&self, i: usize) -> Result<i64, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_i32(&self, i: usize) -> Result<Option<i32>, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn str_at(&self, i: usize) -> Result<Option<&str>, StoreError> {
        Ok(self.try_get(i)?)
    }
}

/// A session's binding as stored: the canonical path, its display form, the machine
/// and mode, and the state last observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBinding {
    pub dir: String,
    pub display: String,
    /// The directory's (device, inode) when it was linked; `None` for bindings stored
    /// before Berth recorded it.
    pub identity: Option<crate::executor::DirIdentity>,
    pub machine: MachineId,
    /// The machine's human name (joined from `machines`).
    pub machine_name: String,
    pub mode: BindMode,
    pub state: BindingState,
}

/// A session row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    pub id: SessionId,
    pub title: String,
    pub agent: String,
    pub origin: Origin,
    pub project: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Only ever set in builds with `local-binding`; always `None` in the cloud build.
    pub binding: Option<StoredBinding>,
    pub binding_rev: i64,
    pub work_dir: Option<String>,
    /// `work_dir` privacy-stripped by the machine the run was on (see
    /// `TaskOutcome::work_dir_display`); `None`: strip it here.
    pub work_dir_display: Option<String>,
    pub resume_id: Option<String>,
    /// The member who owns it (`berth-server`); `None` on `berth serve` (one user).
    pub owner: Option<String>,
    /// When it was archived: hidden from the list unless asked for, kept whole.
    pub archived_at: Option<String>,
    /// What it waits for from a person: a request of one of its tasks (read with the
    /// row, never stored on it).
    pub needs: Option<Needs>,
}

/// A change to a session: a new title, archived or back (`None`: unchanged).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionChange {
    pub title: Option<String>,
    pub archived: Option<bool>,
}

impl SessionChange {
    /// Refuses a change of nothing, and an empty title.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.title.is_none() && self.archived.is_none() {
            return Err(StoreError::BadChange(
                "the change names neither `title` nor `archived`".into(),
            ));
        }
        if self.title.as_ref().is_some_and(|t| t.trim().is_empty()) {
            return Err(StoreError::BadChange("the new title is empty".into()));
        }
        Ok(())
    }
}

/// What deleting a session removed with it: its tasks (whose change records live on
/// the machines that ran them) and its transcript.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Deleted {
    pub session: SessionId,
    pub tasks: Vec<TaskId>,
    pub events: i64,
}

/// A listed session's columns, borrowed from its result row: what its documents need,
/// without a copy of any text (a long list reads one per session; see
/// `api::views::write_session_doc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCols<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub agent: &'a str,
    pub origin: Origin,
    pub project: Option<&'a str>,
    pub created_at: &'a str,
    pub updated_at: &'a str,
    pub binding: Option<BindingCols<'a>>,
    pub work_dir: Option<&'a str>,
    pub work_dir_display: Option<&'a str>,
    /// The member who owns it (see [`SessionRow::owner`]): which machines run it.
    pub owner: Option<&'a str>,
    /// Whether it is archived (see [`SessionRow::archived_at`]).
    pub archived: bool,
    /// What it waits for from a person (see [`SessionRow::needs`]).
    pub needs: Option<Needs>,
}

/// A listed session's binding, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BindingCols<'a> {
    pub dir: &'a str,
    pub display: &'a str,
    pub machine: &'a str,
    pub machine_name: &'a str,
    pub mode: BindMode,
    pub state: BindingState,
    /// The directory's (device, inode) when it was linked (see [`StoredBinding`]), so
    /// the web listener can tell a directory replaced since.
    pub identity: Option<crate::executor::DirIdentity>,
}

impl<'a> SessionCols<'a> {
    /// Reads a row of the list's query ([`LIST_COLUMNS`]): the machine's name comes
    /// from `names`, by id.
    pub(crate) fn from_row(
        r: &'a impl Cols,
        names: &'a std::collections::HashMap<String, String>,
    ) -> Result<SessionCols<'a>, StoreError> {
        let need = |i: usize| {
            r.str_at(i)?
                .ok_or_else(|| StoreError::Corrupt(format!("session column {i} is NULL")))
        };
        let binding = match r.str_at(7)? {
            None => None,
            Some(dir) => {
                let machine = need(9)?;
                Some(BindingCols {
                    dir,
                    display: r.str_at(8)?.unwrap_or_default(),
                    machine,
                    machine_name: names.get(machine).map_or(machine, String::as_str),
                    mode: parse_enum(r.str_at(10)?.unwrap_or("in-place"))?,
                    state: parse_enum(r.str_at(11)?.unwrap_or("ok"))?,
                    identity: identity_from(r.opt_int(16)?, r.opt_int(17)?),
                })
            }
        };
        Ok(SessionCols {
            id: need(0)?,
            title: need(1)?,
            agent: need(2)?,
            origin: origin_from(need(3)?)?,
            project: r.str_at(4)?,
            created_at: need(5)?,
            updated_at: need(6)?,
            binding,
            work_dir: r.str_at(12)?,
            work_dir_display: r.str_at(13)?,
            owner: r.str_at(14)?,
            archived: r.str_at(15)?.is_some(),
            needs: needs_from(r.int(18)?),
        })
    }

    /// The same columns, borrowed from a session read whole.
    pub fn of(row: &'a SessionRow) -> SessionCols<'a> {
        SessionCols {
            id: row.id.as_str(),
            title: &row.title,
            agent: &row.agent,
            origin: row.origin,
            project: row.project.as_deref(),
            created_at: &row.created_at,
            updated_at: &row.updated_at,
            binding: row.binding.as_ref().map(|b| BindingCols {
                dir: &b.dir,
                display: &b.display,
                machine: b.machine.as_str(),
                machine_name: &b.machine_name,
                mode: b.mode,
                state: b.state,
                identity: b.identity,
            }),
            work_dir: row.work_dir.as_deref(),
            work_dir_display: row.work_dir_display.as_deref(),
            owner: row.owner.as_deref(),
            archived: row.archived_at.is_some(),
            needs: row.needs,
        }
    }

    /// The contract's session document (a copy of every text: for tests and single
    /// reads; a list writes `api::views::write_session_doc` instead). The columns are
    /// read as they are stored; here the ids are parsed.
    pub fn to_api(&self) -> Result<berth_core::api::Session, StoreError> {
        Ok(berth_core::api::Session {
            id: SessionId::parse(self.id)?,
            title: self.title.to_owned(),
            agent: self.agent.to_owned(),
            origin: self.origin,
            project: self.project.map(str::to_owned),
            work_dir: self.work_dir.map(str::to_owned),
            created_at: self.created_at.to_owned(),
            updated_at: self.updated_at.to_owned(),
            archived: self.archived,
            needs: self.needs,
            #[cfg(feature = "local-binding")]
            binding: match self.binding {
                None => None,
                Some(b) => Some(berth_core::api::SessionBinding {
                    dir: b.dir.to_owned(),
                    display: b.display.to_owned(),
                    daemon: MachineId::parse(b.machine)?,
                    daemon_name: b.machine_name.to_owned(),
                    mode: b.mode,
                    state: b.state,
                }),
            },
        })
    }
}

/// What creating a session stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSessionRow {
    pub title: Option<String>,
    /// `None`: the only registered agent.
    pub agent: Option<String>,
    pub origin: Origin,
    pub project: Option<String>,
    pub binding: Option<StoredBinding>,
    /// The member creating it (`None` on `berth serve`).
    pub owner: Option<String>,
}

impl NewSessionRow {
    /// A chat conversation's session: origin `channel`, in no project, unbound (a chat
    /// message has no path and binds nothing).
    pub(crate) fn channel(title: String, agent: Option<String>, owner: Option<String>) -> Self {
        NewSessionRow {
            title: Some(title),
            agent,
            origin: Origin::Channel,
            project: None,
            binding: None,
            owner,
        }
    }
}

/// How a task ended, as the store records it: the run's outcome (its `status` final,
/// its `code` the task's error code; `branch` is not stored), and whether what the run
/// leaves (`work_dir`, `work_dir_display`, `resume_id`) is recorded on its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish {
    pub outcome: berth_core::exec::TaskOutcome,
    /// The session's binding revision the run was for: the outcome's directory and
    /// resume id are recorded on the session only while this is still its revision.
    /// `None`: nothing is recorded on the session (a task refused before it ran).
    pub session_rev: Option<i64>,
}

pub(crate) const SESSION_COLUMNS: &str = "s.id, s.title, s.agent, s.origin, s.project, \
    s.created_at, s.updated_at, s.binding_dir, s.binding_display, s.binding_machine, \
    s.binding_mode, s.binding_state, s.binding_rev, s.work_dir, s.resume_id, m.name, \
    s.binding_dev, s.binding_ino, s.work_dir_display, s.owner, s.archived_at, CAST(CASE WHEN EXISTS (SELECT 1 FROM approvals a WHERE a.session_id = s.id AND a.waiting) THEN 1 ELSE 0 END AS BIGINT)";

/// What a listed session's documents need, in [`SessionCols::from_row`]'s order: the
/// list reads no more (on PostgreSQL, every column costs the server and the wire
/// something per session).
pub(crate) const LIST_COLUMNS: &str = "s.id, s.title, s.agent, s.origin, s.project, \
    s.created_at, s.updated_at, s.binding_dir, s.binding_display, s.binding_machine, \
    s.binding_mode, s.binding_state, s.work_dir, s.work_dir_display, s.owner, s.archived_at, \
    s.binding_dev, s.binding_ino, CAST(CASE WHEN EXISTS (SELECT 1 FROM approvals a WHERE a.session_id = s.id AND a.waiting) THEN 1 ELSE 0 END AS BIGINT)";

/// Whether a session needs a person: 1 while a request of its waits (the last column of
/// [`SESSION_COLUMNS`] and [`LIST_COLUMNS`]; the same text on both backends, whose
/// `approvals.waiting` is an integer on SQLite and a boolean on PostgreSQL).
fn needs_from(waiting: i64) -> Option<Needs> {
    (waiting != 0).then_some(Needs::Approval)
}

pub(crate) const SESSION_FROM: &str = "sessions s LEFT JOIN machines m ON m.id = s.binding_machine";

/// SQLite stores integers signed; (device, inode) round-trip through their bits.
fn identity_from(dev: Option<i64>, ino: Option<i64>) -> Option<crate::executor::DirIdentity> {
    Some(crate::executor::DirIdentity {
        dev: dev? as u64,
        ino: ino? as u64,
    })
}

/// The columns' values for an identity (see [`identity_from`]).
pub(crate) fn identity_columns(b: Option<&StoredBinding>) -> (Option<i64>, Option<i64>) {
    match b.and_then(|b| b.identity) {
        Some(id) => (Some(id.dev as i64), Some(id.ino as i64)),
        None => (None, None),
    }
}

/// Parses an origin without going through serde (this runs once per listed row).
fn origin_from(s: &str) -> Result<Origin, StoreError> {
    match s {
        "desktop" => Ok(Origin::Desktop),
        "web" => Ok(Origin::Web),
        "channel" => Ok(Origin::Channel),
        "api" => Ok(Origin::Api),
        other => Err(StoreError::Corrupt(format!("unexpected origin {other:?}"))),
    }
}

impl SessionRow {
    pub(crate) fn from_row(r: &impl Cols) -> Result<SessionRow, StoreError> {
        let origin = origin_from(&r.text(3)?)?;
        let binding = match r.opt_text(7)? {
            None => None,
            Some(dir) => {
                let machine: MachineId = r.id(9)?;
                let mode = r.opt_text(10)?;
                let state = r.opt_text(11)?;
                let name = r.opt_text(15)?;
                let (dev, ino) = (r.opt_int(16)?, r.opt_int(17)?);
                Some(StoredBinding {
                    dir,
                    display: r.opt_text(8)?.unwrap_or_default(),
                    identity: identity_from(dev, ino),
                    machine_name: name.unwrap_or_else(|| machine.to_string()),
                    machine,
                    mode: parse_enum(mode.as_deref().unwrap_or("in-place"))?,
                    state: parse_enum(state.as_deref().unwrap_or("ok"))?,
                })
            }
        };
        Ok(SessionRow {
            id: r.id(0)?,
            title: r.text(1)?,
            agent: r.text(2)?,
            origin,
            project: r.opt_text(4)?,
            created_at: r.text(5)?,
            updated_at: r.text(6)?,
            binding,
            binding_rev: r.int(12)?,
            work_dir: r.opt_text(13)?,
            work_dir_display: r.opt_text(18)?,
            resume_id: r.opt_text(14)?,
            owner: r.opt_text(19)?,
            archived_at: r.opt_text(20)?,
            needs: needs_from(r.int(21)?),
        })
    }

    /// The contract's session document, with the real path (control socket, and the
    /// cloud build, where no session has a binding).
    pub fn to_api(&self) -> berth_core::api::Session {
        berth_core::api::Session {
            id: self.id.clone(),
            title: self.title.clone(),
            agent: self.agent.clone(),
            origin: self.origin,
            project: self.project.clone(),
            work_dir: self.work_dir.clone(),
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            archived: self.archived_at.is_some(),
            needs: self.needs,
            #[cfg(feature = "local-binding")]
            binding: self
                .binding
                .as_ref()
                .map(|b| berth_core::api::SessionBinding {
                    dir: b.dir.clone(),
                    display: b.display.clone(),
                    daemon: b.machine.clone(),
                    daemon_name: b.machine_name.clone(),
                    mode: b.mode,
                    state: b.state,
                }),
        }
    }

    /// The binding's read view: everything but the real path.
    pub fn binding_view(&self) -> Option<berth_core::binding::BindingView> {
        self.binding
            .as_ref()
            .map(|b| berth_core::binding::BindingView {
                display: b.display.clone(),
                daemon: b.machine.clone(),
                daemon_name: b.machine_name.clone(),
                mode: b.mode,
                state: b.state,
            })
    }
}

/// A task row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRow {
    pub id: TaskId,
    pub session_id: SessionId,
    pub seq: i64,
    pub message_id: String,
    pub status: TaskStatus,
    pub wait_reason: Option<String>,
    pub work_dir: Option<String>,
    /// See [`SessionRow::work_dir_display`].
    pub work_dir_display: Option<String>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    /// The `error_code` column as stored: an [`berth_core::ErrorCode`]'s spelling.
    /// Kept as text, never parsed: a code written by a server of another version (a
    /// shared PostgreSQL database) is served as it was written, and cannot fail a read.
    pub error_code: Option<String>,
    /// What the agent was denied, as stored (a JSON array; empty when none).
    pub denials: Vec<berth_core::api::Denial>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// What it changed in its directory.
    pub changes: Option<berth_core::api::Changes>,
    /// How its agent was fenced.
    pub fence: Option<berth_core::api::FenceNote>,
    /// The agent's token usage, normalized (a row stored before that shape is read
    /// into it).
    pub usage: Option<berth_core::usage::Usage>,
    /// What its agent asked a person, with the decisions: a row each in the
    /// `approvals` table, filled in by the reads that return a whole task (empty from
    /// [`TaskRow::from_row`] alone).
    pub approvals: Vec<berth_core::approval::Approval>,
}

pub(crate) const TASK_COLUMNS: &str = "id, session_id, seq, message_id, status, wait_reason, \
    work_dir, exit_code, error, error_code, created_at, started_at, finished_at, \
    work_dir_display, denials, changes, fence, usage";

/// How many columns [`TASK_COLUMNS`] names: a query's own columns follow them.
#[cfg(feature = "postgres")]
pub(crate) const TASK_COLUMN_COUNT: usize = 18;

/// [`TASK_COLUMNS`], each qualified by a table alias (`t.id, t.session_id, …`).
#[cfg(feature = "postgres")]
pub(crate) fn qualified_task_columns(alias: &str) -> String {
    TASK_COLUMNS
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl TaskRow {
    pub(crate) fn from_row(r: &impl Cols) -> Result<TaskRow, StoreError> {
        Ok(TaskRow {
            id: r.id(0)?,
            session_id: r.id(1)?,
            seq: r.int(2)?,
            message_id: r.text(3)?,
            status: parse_enum(&r.text(4)?)?,
            wait_reason: r.opt_text(5)?,
            work_dir: r.opt_text(6)?,
            exit_code: r.opt_i32(7)?,
            error: r.opt_text(8)?,
            error_code: r.opt_text(9)?,
            created_at: r.text(10)?,
            started_at: r.opt_text(11)?,
            finished_at: r.opt_text(12)?,
            work_dir_display: r.opt_text(13)?,
            denials: match r.opt_text(14)? {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| StoreError::Corrupt(format!("task denials {text:?}: {e}")))?,
                None => Vec::new(),
            },
            changes: match r.opt_text(15)? {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("task changes: {e}")))?,
                ),
                None => None,
            },
            fence: match r.opt_text(16)? {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("task fence: {e}")))?,
                ),
                None => None,
            },
            usage: match r.opt_text(17)? {
                Some(text) => berth_core::usage::Usage::from_stored(
                    &serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("task usage: {e}")))?,
                ),
                None => None,
            },
            approvals: Vec::new(),
        })
    }

    /// The contract's task document.
    pub fn to_api(&self) -> Task {
        Task {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            status: self.status,
            wait_reason: self.wait_reason.clone(),
            work_dir: self.work_dir.clone(),
            exit_code: self.exit_code,
            error: self.error.clone(),
            error_code: self.error_code.clone(),
            denials: self.denials.clone(),
            created_at: Some(self.created_at.clone()),
            started_at: self.started_at.clone(),
            finished_at: self.finished_at.clone(),
            changes: self.changes.clone(),
            fence: self.fence.clone(),
            approvals: self.approvals.clone(),
            usage: self.usage.clone(),
            waits_for: None,
        }
    }
}

/// A transcript event of `session_id`, from the columns `seq, task_id, kind, payload,
/// at`.
pub(crate) fn event_from(
    session_id: &SessionId,
    r: &impl Cols,
) -> Result<TranscriptEvent, StoreError> {
    Ok(TranscriptEvent {
        session_id: session_id.clone(),
        seq: r.int(0)?,
        task_id: r.opt_id(1)?,
        kind: r.text(2)?,
        payload: payload_from(&r.text(3)?)?,
        at: r.text(4)?,
    })
}

/// An event's payload, stored as JSON text.
pub(crate) fn payload_from(text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("event payload: {e}")))
}
