//! Rows as the store reads them, and their contract documents.

use super::{StoreError, parse_enum};
use berth_core::api::{Task, TaskStatus};
use berth_core::binding::{BindMode, BindingState, MachineId};
use berth_core::resolve::Origin;
use rusqlite::Row;

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
    pub id: String,
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

pub(crate) const SESSION_COLUMNS: &str = "s.id, s.title, s.agent, s.origin, s.project, \
    s.created_at, s.updated_at, s.binding_dir, s.binding_display, s.binding_machine, \
    s.binding_mode, s.binding_state, s.binding_rev, s.work_dir, s.resume_id, m.name, \
    s.binding_dev, s.binding_ino, s.work_dir_display, s.owner";

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
    pub(crate) fn from_row(r: &Row<'_>) -> Result<SessionRow, StoreError> {
        let origin = r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
        let origin = origin_from(origin)?;
        let dir: Option<String> = r.get(7)?;
        let binding = match dir {
            None => None,
            Some(dir) => {
                let machine: String = r.get(9)?;
                let mode: Option<String> = r.get(10)?;
                let state: Option<String> = r.get(11)?;
                let name: Option<String> = r.get(15)?;
                let dev: Option<i64> = r.get(16)?;
                let ino: Option<i64> = r.get(17)?;
                Some(StoredBinding {
                    dir,
                    display: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
                    identity: identity_from(dev, ino),
                    machine_name: name.unwrap_or_else(|| machine.clone()),
                    machine: MachineId::new(machine),
                    mode: parse_enum(mode.as_deref().unwrap_or("in-place"))?,
                    state: parse_enum(state.as_deref().unwrap_or("ok"))?,
                })
            }
        };
        Ok(SessionRow {
            id: r.get(0)?,
            title: r.get(1)?,
            agent: r.get(2)?,
            origin,
            project: r.get(4)?,
            created_at: r.get(5)?,
            updated_at: r.get(6)?,
            binding,
            binding_rev: r.get(12)?,
            work_dir: r.get(13)?,
            work_dir_display: r.get(18)?,
            resume_id: r.get(14)?,
            owner: r.get(19)?,
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
    pub id: String,
    pub session_id: String,
    pub seq: i64,
    pub message_id: String,
    pub status: TaskStatus,
    pub wait_reason: Option<String>,
    pub work_dir: Option<String>,
    /// See [`SessionRow::work_dir_display`].
    pub work_dir_display: Option<String>,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub error_code: Option<String>,
    /// What the agent was denied, as stored (a JSON array; empty when none).
    pub denials: Vec<berth_core::api::Denial>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// What it changed in its directory.
    pub changes: Option<berth_core::api::Changes>,
}

pub(crate) const TASK_COLUMNS: &str = "id, session_id, seq, message_id, status, wait_reason, \
    work_dir, exit_code, error, error_code, created_at, started_at, finished_at, \
    work_dir_display, denials, changes";

impl TaskRow {
    pub(crate) fn from_row(r: &Row<'_>) -> Result<TaskRow, StoreError> {
        let status: String = r.get(4)?;
        Ok(TaskRow {
            id: r.get(0)?,
            session_id: r.get(1)?,
            seq: r.get(2)?,
            message_id: r.get(3)?,
            status: parse_enum(&status)?,
            wait_reason: r.get(5)?,
            work_dir: r.get(6)?,
            exit_code: r.get(7)?,
            error: r.get(8)?,
            error_code: r.get(9)?,
            created_at: r.get(10)?,
            started_at: r.get(11)?,
            finished_at: r.get(12)?,
            work_dir_display: r.get(13)?,
            denials: match r.get::<_, Option<String>>(14)? {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| StoreError::Corrupt(format!("task denials {text:?}: {e}")))?,
                None => Vec::new(),
            },
            changes: match r.get::<_, Option<String>>(15)? {
                Some(text) => Some(
                    serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("task changes: {e}")))?,
                ),
                None => None,
            },
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
        }
    }
}
