//! What the store decides the same way on SQLite and on PostgreSQL: which id a prefix
//! names, what a new session is called and which agent it gets, what the transcript's
//! events say, and how a task's ending is stored. The backends differ in their SQL
//! only; what does not depend on it lives here, once.

use super::StoreError;
use super::rows::{Finish, StoredBinding, TaskRow};
use berth_core::api::TaskStatus;
use berth_core::resolve::Origin;
use berth_core::{ErrorCode, SessionId, TaskId};

/// What an [`IdPrefix`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scoped {
    Sessions,
    Tasks,
}

impl Scoped {
    /// The answer for a prefix that names none.
    fn unknown(self, prefix: &str) -> StoreError {
        match self {
            Scoped::Sessions => StoreError::UnknownSession {
                prefix: prefix.to_owned(),
            },
            Scoped::Tasks => StoreError::UnknownTask {
                prefix: prefix.to_owned(),
            },
        }
    }
}

/// A prefix that may name a session (or a task) among an owner's, and how it is
/// looked up: both backends run [`IdPrefix::SQL`] (the same text: `$N` parameters and
/// a standard `CAST` read the same on SQLite and PostgreSQL) and hand the ids it finds
/// to [`IdPrefix::pick`]. Another member's ids neither match nor make a prefix
/// ambiguous. Ids are lowercase uuids.
pub(crate) struct IdPrefix<'a> {
    what: Scoped,
    asked: &'a str,
    /// `asked` as ids are stored (trimmed, lowercase).
    pub wanted: String,
    pub owner: Option<&'a str>,
}

impl<'a> IdPrefix<'a> {
    /// `prefix`, or the answer that it names none when it cannot begin an id (hex
    /// digits and dashes).
    pub(crate) fn new(
        what: Scoped,
        prefix: &'a str,
        owner: Option<&'a str>,
    ) -> Result<IdPrefix<'a>, StoreError> {
        let wanted = prefix.trim().to_ascii_lowercase();
        let valid = !wanted.is_empty() && wanted.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
        if !valid {
            return Err(what.unknown(prefix));
        }
        Ok(IdPrefix {
            what,
            asked: prefix,
            wanted,
            owner,
        })
    }

    /// The first few ids (in order) that begin with `$1` among owner `$2`'s (all
    /// with `NULL`).
    pub(crate) fn sql(&self) -> &'static str {
        match self.what {
            Scoped::Sessions => {
                "SELECT id FROM sessions WHERE id >= $1 AND id < $1 || '~'
                 AND (CAST($2 AS TEXT) IS NULL OR owner = $2) ORDER BY id LIMIT 6"
            }
            Scoped::Tasks => {
                "SELECT t.id FROM tasks t JOIN sessions s ON s.id = t.session_id
                 WHERE t.id >= $1 AND t.id < $1 || '~'
                 AND (CAST($2 AS TEXT) IS NULL OR s.owner = $2) ORDER BY t.id LIMIT 6"
            }
        }
    }

    /// The id the prefix names among `ids` (what [`IdPrefix::sql`] found): the only
    /// one, or the one it spells out whole.
    pub(crate) fn pick(self, ids: Vec<String>) -> Result<String, StoreError> {
        match ids.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(self.what.unknown(self.asked)),
            _ if ids.contains(&self.wanted) => Ok(self.wanted),
            _ => Err(StoreError::Ambiguous {
                what: match self.what {
                    Scoped::Sessions => "sessions",
                    Scoped::Tasks => "tasks",
                },
                prefix: self.asked.to_owned(),
                candidates: ids,
            }),
        }
    }
}

/// `named` when it is a whole session id as ids are stored (a lowercase hyphenated
/// uuid): such a name can only be that id, so it needs no lookup by prefix.
#[cfg(feature = "postgres")]
pub(crate) fn whole_session_id(named: &str) -> Option<SessionId> {
    let id = uuid::Uuid::try_parse(named).ok()?;
    if id.hyphenated().to_string() != named {
        return None;
    }
    SessionId::parse(named).ok()
}

/// A new session's id. Random (v4), not time-ordered (v7): users type ids by prefix,
/// and v7 ids made in the same minute share their first eight characters.
pub(crate) fn new_session_id() -> Result<SessionId, StoreError> {
    // A uuid's text is hex digits and dashes: it always parses.
    Ok(SessionId::parse(&uuid::Uuid::new_v4().to_string())?)
}

/// What a new session's row gets besides what was asked for: its id, its title (the
/// one asked for unless blank, see [`session_title`]) and its creation time.
pub(crate) struct Minted {
    pub id: SessionId,
    pub title: String,
    pub now: String,
}

pub(crate) fn mint_session(title: Option<String>) -> Result<Minted, StoreError> {
    let id = new_session_id()?;
    let title = session_title(title, &id);
    Ok(Minted {
        id,
        title,
        // Sessions list oldest first: one made in the same millisecond as the one
        // before still comes after it.
        now: crate::clock::now_ordered(),
    })
}

/// A session's or a project directory's project must exist (`found`).
pub(crate) fn project_known(name: &str, found: bool) -> Result<(), StoreError> {
    if found {
        Ok(())
    } else {
        Err(StoreError::UnknownProject {
            name: name.to_owned(),
        })
    }
}

/// A new task's id, random (v4) as a session's.
pub(crate) fn new_task_id() -> Result<TaskId, StoreError> {
    Ok(TaskId::parse(&uuid::Uuid::new_v4().to_string())?)
}

/// A new session's title: the one asked for unless it is blank, else `session` and
/// the first eight characters of its id.
pub(crate) fn session_title(asked: Option<String>, id: &SessionId) -> String {
    asked
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| format!("session {}", &id.as_str()[..8]))
}

/// The agent of a session created without naming one: the only registered agent
/// (`known`, every agent's name); with none or several, no agent was named.
pub(crate) fn only_agent(known: Vec<String>) -> Result<String, StoreError> {
    match <[String; 1]>::try_from(known) {
        Ok([only]) => Ok(only),
        Err(known) => Err(StoreError::UnknownAgent {
            name: String::new(),
            known,
        }),
    }
}

/// A `binding_changed` event's payload: both display forms (never a real path).
pub(crate) fn binding_payload(
    from: Option<&StoredBinding>,
    to: Option<&StoredBinding>,
) -> serde_json::Value {
    serde_json::json!({
        "from": from.map(|b| b.display.as_str()),
        "to": to.map(|b| b.display.as_str()),
    })
}

/// A user message's event payload.
pub(crate) fn message_payload(
    task_id: &TaskId,
    message_id: &str,
    origin: Origin,
    text: &str,
) -> serde_json::Value {
    serde_json::json!({
        "task_id": task_id, "message_id": message_id,
        "origin": origin, "text": text,
    })
}

/// A `task` event's payload: the task's document, its error code and where it worked
/// (for display).
pub(crate) fn task_payload(task: &TaskRow) -> serde_json::Value {
    serde_json::json!({
        "task": task.to_api(),
        "code": task.error_code,
        "work_dir_display": task.work_dir_display,
    })
}

/// A `status` event's payload.
pub(crate) fn status_payload(task: &TaskRow) -> serde_json::Value {
    serde_json::json!({
        "task_id": task.id,
        "status": task.status,
        "wait_reason": task.wait_reason,
    })
}

/// The error of a task that was running when its server stopped (startup recovery
/// ends it `interrupted`).
pub(crate) const INTERRUPTED: &str =
    "the server stopped while the task was running; it was not run again";

/// The code of a task that ended badly without a more precise one: every failed,
/// refused or interrupted task carries a stable code (an executor that reported none
/// failed in a way nobody named — a bug).
pub(crate) fn default_code(status: TaskStatus) -> Option<ErrorCode> {
    match status {
        TaskStatus::Interrupted => Some(ErrorCode::Interrupted),
        TaskStatus::Failed | TaskStatus::Refused => Some(ErrorCode::Internal),
        TaskStatus::Queued
        | TaskStatus::WaitingLock
        | TaskStatus::WaitingDaemon
        | TaskStatus::Running
        | TaskStatus::WaitingApproval
        | TaskStatus::Succeeded
        | TaskStatus::Cancelled => None,
    }
}

/// How a task ended, as its row's text columns store it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ended {
    /// The reported code, else [`default_code`].
    pub error_code: Option<ErrorCode>,
    /// A JSON array, `None` when the agent was denied nothing.
    pub denials: Option<String>,
    /// JSON documents.
    pub changes: Option<String>,
    pub fence: Option<String>,
    pub usage: Option<String>,
    /// The task's lines, bounded again: a daemon's outcome is its machine's word.
    pub diff: Option<String>,
}

impl Ended {
    pub(crate) fn of(fin: &Finish) -> Result<Ended, StoreError> {
        let out = &fin.outcome;
        Ok(Ended {
            error_code: out.code.or_else(|| default_code(out.status)),
            denials: (!out.denials.is_empty())
                .then(|| json_text(&out.denials))
                .transpose()?,
            changes: out.changes.as_ref().map(json_text).transpose()?,
            fence: out.fence.as_ref().map(json_text).transpose()?,
            usage: out.usage.as_ref().map(json_text).transpose()?,
            diff: out
                .diff
                .as_ref()
                .filter(|d| !d.is_empty())
                .map(|d| json_text(&d.clone().bounded()))
                .transpose()?,
        })
    }

    /// The error code as the `error_code` column stores it (its contract spelling).
    pub(crate) fn code_text(&self) -> Option<&'static str> {
        self.error_code.map(ErrorCode::as_str)
    }

    /// What the task's ending says of its session's binding: its directory is gone
    /// (`missing`) or another stands in its place (`changed`); `None`: nothing.
    pub(crate) fn binding_state(&self) -> Option<&'static str> {
        if self.error_code == Some(ErrorCode::NotFound) {
            Some("missing")
        } else if self.error_code == Some(ErrorCode::PathChanged) {
            Some("changed")
        } else {
            None
        }
    }
}

/// The binding states a machine going offline (`online` false) or coming back
/// changes, `(from, to)`: `machine_offline` replaces `ok`, and back. Other states
/// (`missing`, `changed`) stay as they are.
pub(crate) fn online_change(online: bool) -> (&'static str, &'static str) {
    if online {
        ("machine_offline", "ok")
    } else {
        ("ok", "machine_offline")
    }
}

/// A value stored as JSON text.
pub(crate) fn json_text<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The SQL list of the task statuses that are not final
/// ([`berth_core::api::TaskStatus::is_final`]): a session with such a task is busy.
pub(crate) const UNFINISHED: &str =
    "('queued', 'waiting_lock', 'waiting_daemon', 'running', 'waiting_approval')";

/// Refuses to delete session `id` while `tasks` (its unfinished ones) exist.
pub(crate) fn idle(id: &SessionId, tasks: Vec<String>) -> Result<(), StoreError> {
    if tasks.is_empty() {
        Ok(())
    } else {
        Err(StoreError::SessionBusy {
            id: id.to_string(),
            tasks,
        })
    }
}

/// Refuses to remove agent `name` while `sessions` name it.
pub(crate) fn unused(name: &str, sessions: Vec<String>) -> Result<(), StoreError> {
    if sessions.is_empty() {
        Ok(())
    } else {
        Err(StoreError::AgentInUse {
            name: name.to_owned(),
            sessions,
        })
    }
}

#[cfg(test)]
mod unfinished_tests {
    use berth_core::api::TaskStatus;

    #[test]
    fn unfinished_names_exactly_the_statuses_that_are_not_final() {
        let all = [
            "queued",
            "waiting_lock",
            "waiting_daemon",
            "running",
            "waiting_approval",
            "succeeded",
            "failed",
            "cancelled",
            "interrupted",
            "refused",
        ];
        for s in all {
            let status: TaskStatus = crate::store::parse_enum(s).unwrap();
            assert_eq!(
                super::UNFINISHED.contains(&format!("'{s}'")),
                !status.is_final(),
                "{s}"
            );
        }
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::whole_session_id;

    #[test]
    fn only_a_stored_id_spelled_out_whole_skips_the_lookup() {
        let id = "3f9c0a12-7b1e-4c2d-9e8f-0123456789ab";
        assert_eq!(
            whole_session_id(id).map(|s| s.to_string()).as_deref(),
            Some(id)
        );
        for other in [
            "3f9c0a12",
            "3F9C0A12-7B1E-4C2D-9E8F-0123456789AB",
            " 3f9c0a12-7b1e-4c2d-9e8f-0123456789ab",
            "3f9c0a127b1e4c2d9e8f0123456789ab",
            "{3f9c0a12-7b1e-4c2d-9e8f-0123456789ab}",
            "",
        ] {
            assert_eq!(whole_session_id(other), None, "{other:?}");
        }
    }
}
