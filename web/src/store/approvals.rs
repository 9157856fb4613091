//! Approvals in the store: each task's requests and their decisions (the task's
//! `approvals` column, its audit), and the rules a session's "always" answers made
//! (`session_rules`).
//!
//! A decision is taken exactly once: [`apply`] refuses a second one (`already_decided`,
//! saying how and by whom) inside the transaction that reads the task, so two answers
//! racing (the chat and the CLI) give one decision. A person's answer after the
//! deadline is `expired`: the request was denied as timed out, and says so.

use super::rules::json_text;
use super::sessions::append_event;
use super::tasks::get_task;
use super::{Outbox, Store, StoreError, TaskRow};
use crate::clock;
use crate::transcript::EventKind;
use berth_core::ErrorCode;
use berth_core::api::TaskStatus;
use berth_core::approval::{Approval, DecidedBy, Decision, SessionRule, Verdict};
use berth_core::{SessionId, TaskId};
use rusqlite::{Connection, OptionalExtension, params};

/// How many decided requests `berth approvals --all` lists, newest first.
pub(crate) const RECENT: usize = 200;

fn refused(code: ErrorCode, message: String) -> StoreError {
    StoreError::Approval { code, message }
}

/// `unknown_approval` for `id`.
#[cfg(feature = "postgres")]
pub(crate) fn unknown_id(id: &str) -> StoreError {
    unknown(id)
}

/// A session's rule `n` that does not exist.
pub(crate) fn no_rule(id: &SessionId, n: i64) -> StoreError {
    StoreError::BadChange(format!(
        "session {id} has no rule {n}; `berth session rules {}` lists them",
        &id.as_str()[..8.min(id.as_str().len())]
    ))
}

fn unknown(id: &str) -> StoreError {
    refused(
        ErrorCode::UnknownApproval,
        format!("no request {id:?} of yours is known"),
    )
}

/// The task an approval id names.
pub fn task_of(id: &str) -> Result<TaskId, StoreError> {
    Approval::split_id(id)
        .and_then(|(task, _)| TaskId::parse(task).ok())
        .ok_or_else(|| unknown(id))
}

/// What a task waits for while a request is pending.
pub(crate) fn wait_reason(a: &Approval) -> String {
    let what = a.command.as_deref().unwrap_or(&a.title);
    format!(
        "waiting for your approval ({} {}): berth approve {} / berth deny {}",
        a.kind,
        clip(what, 120),
        short(&a.id),
        short(&a.id)
    )
}

/// An approval id as a person types it: the task's first eight characters and the
/// request's number (`3f9c0a12-1`); the CLI resolves it among what waits.
pub fn short(id: &str) -> String {
    match Approval::split_id(id) {
        Some((task, n)) => format!("{}-{n}", &task[..task.len().min(8)]),
        None => id.to_owned(),
    }
}

fn clip(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() <= max && !text.contains('\n') {
        line.to_owned()
    } else {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// Adds a new request to a task's list (the same id again, from a replayed batch,
/// replaces nothing).
pub(crate) fn asked(list: &mut Vec<Approval>, a: Approval) {
    if !list.iter().any(|x| x.id == a.id) {
        list.push(a);
    }
}

/// Decides request `id` on its task's list: exactly once, and a person's answer only
/// before the deadline. `now_ms` is the clock's now.
pub(crate) fn apply(
    list: &mut [Approval],
    id: &str,
    d: Decision,
    now_ms: i64,
) -> Result<Approval, StoreError> {
    let Some(a) = list.iter_mut().find(|a| a.id == id) else {
        return Err(unknown(id));
    };
    if let Some(done) = &a.decision {
        if done.by == DecidedBy::Timeout && d.by == DecidedBy::Human {
            return Err(refused(
                ErrorCode::Expired,
                format!(
                    "request {} expired at {}: it was denied as nobody answered in time",
                    short(id),
                    a.deadline
                ),
            ));
        }
        return Err(refused(ErrorCode::AlreadyDecided, already(id, done)));
    }
    let past = clock::parse_millis(&a.deadline).is_some_and(|deadline| now_ms >= deadline);
    if past && d.by == DecidedBy::Human {
        return Err(refused(
            ErrorCode::Expired,
            format!(
                "request {} expired at {}: it is being denied as nobody answered in time",
                short(id),
                a.deadline
            ),
        ));
    }
    a.decision = Some(d);
    Ok(a.clone())
}

/// `already decided: allowed by alice via cli at …`.
fn already(id: &str, d: &Decision) -> String {
    let verdict = match d.decision {
        Verdict::Allow => "allowed",
        Verdict::Deny => "denied",
    };
    let by = match (d.by, &d.who) {
        (DecidedBy::Human, Some(who)) => who.clone(),
        (by, _) => by.as_str().to_owned(),
    };
    let via = d
        .via
        .as_deref()
        .map(|v| format!(" via {v}"))
        .unwrap_or_default();
    format!(
        "request {} is already decided: {verdict} by {by}{via} at {}",
        short(id),
        d.at
    )
}

/// The status a task shows once its requests changed: `waiting_approval` (with the
/// first pending request's reason) while one waits, else `running`.
pub(crate) fn status_after(list: &[Approval]) -> (TaskStatus, Option<String>) {
    match list.iter().find(|a| a.decision.is_none()) {
        Some(a) => (TaskStatus::WaitingApproval, Some(wait_reason(a))),
        None => (TaskStatus::Running, None),
    }
}

/// The transcript's `approval` event: the request as it stands.
pub(crate) fn payload(a: &Approval) -> serde_json::Value {
    serde_json::to_value(a).unwrap_or_default()
}

/// Writes a task's list back and shows its status, in the caller's transaction.
pub(crate) fn store_list_sqlite(
    conn: &Connection,
    outbox: &mut Outbox,
    task: &TaskRow,
    list: &[Approval],
    changed: &Approval,
) -> Result<(), StoreError> {
    let (status, why) = status_after(list);
    conn.prepare_cached("UPDATE tasks SET approvals = ?2 WHERE id = ?1")?
        .execute(params![task.id.as_str(), json_text(&list)?])?;
    append_event(
        conn,
        outbox,
        &task.session_id,
        Some(&task.id),
        EventKind::Approval,
        payload(changed),
    )?;
    // A task that ended meanwhile keeps its final status.
    if !task.status.is_final() && (task.status != status || task.wait_reason != why) {
        super::tasks::record_status(conn, outbox, &task.id, status, why)?;
    }
    Ok(())
}

/// Records a request the run sent (a [`super::RunItem::Approval`]).
pub(crate) fn record_asked(
    conn: &Connection,
    outbox: &mut Outbox,
    task_id: &TaskId,
    a: Approval,
) -> Result<(), StoreError> {
    let task = get_task(conn, task_id)?;
    let mut list = task.approvals.clone();
    asked(&mut list, a.clone());
    store_list_sqlite(conn, outbox, &task, &list, &a)
}

fn session_owner_sqlite(conn: &Connection, id: &SessionId) -> Result<Option<String>, StoreError> {
    Ok(conn
        .prepare_cached("SELECT owner FROM sessions WHERE id = ?1")?
        .query_row([id.as_str()], |r| r.get::<_, Option<String>>(0))
        .optional()?
        .flatten())
}

/// Whether `owner` (everyone's with `None`) may see the session's requests.
pub(crate) fn owns(owner: Option<&str>, session_owner: Option<&str>) -> bool {
    owner.is_none_or(|o| session_owner.unwrap_or(crate::store::FIRST_ADMIN) == o)
}

/// The pending requests first (oldest first), then, with `all`, the decided ones of
/// recent tasks (newest first, at most [`RECENT`]).
pub(crate) fn listed(tasks: Vec<TaskRow>, all: bool) -> Vec<Approval> {
    let mut pending: Vec<Approval> = Vec::new();
    let mut decided: Vec<Approval> = Vec::new();
    for t in tasks {
        for a in t.approvals {
            if a.decision.is_none() {
                pending.push(a);
            } else if all {
                decided.push(a);
            }
        }
    }
    pending.sort_by(|a, b| a.asked_at.cmp(&b.asked_at));
    decided.sort_by(|a, b| b.asked_at.cmp(&a.asked_at));
    decided.truncate(RECENT);
    pending.extend(decided);
    pending
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
            store_list_sqlite(conn, outbox, &task, &list, &decided)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: &str, deadline: &str) -> Approval {
        Approval {
            id: id.to_owned(),
            task_id: TaskId::parse("t1").unwrap(),
            session_id: SessionId::parse("s1").unwrap(),
            kind: "execute".into(),
            title: "sh ./check.sh".into(),
            command: Some("sh ./check.sh".into()),
            paths: vec![],
            input: serde_json::json!({"command": "sh ./check.sh"}),
            options: vec![],
            asked_at: "2026-01-01T00:00:00.000Z".into(),
            deadline: deadline.to_owned(),
            decision: None,
        }
    }

    fn by(who: Option<&str>, by: DecidedBy, v: Verdict) -> Decision {
        Decision {
            decision: v,
            by,
            who: who.map(str::to_owned),
            via: Some("cli".into()),
            at: "2026-01-01T00:00:01.000Z".into(),
            reason: None,
            always: false,
        }
    }

    #[test]
    fn a_request_is_decided_once_and_the_loser_hears_by_whom() {
        let far = "2099-01-01T00:00:00.000Z";
        let mut list = vec![req("t1-1", far)];
        let now = clock::parse_millis("2026-01-01T00:00:01.000Z").unwrap();
        let first = apply(
            &mut list,
            "t1-1",
            by(Some("alice"), DecidedBy::Human, Verdict::Allow),
            now,
        )
        .unwrap();
        assert_eq!(first.decision.unwrap().decision, Verdict::Allow);
        let Err(StoreError::Approval { code, message }) = apply(
            &mut list,
            "t1-1",
            by(Some("bob"), DecidedBy::Human, Verdict::Deny),
            now,
        ) else {
            panic!("a second answer must be refused");
        };
        assert_eq!(code, ErrorCode::AlreadyDecided);
        assert!(message.contains("allowed by alice via cli"), "{message}");
        assert_eq!(list[0].decision.as_ref().unwrap().decision, Verdict::Allow);
        assert_eq!(status_after(&list).0, TaskStatus::Running);
    }

    #[test]
    fn a_late_answer_is_expired_and_the_timeout_is_not_a_person() {
        let mut list = vec![req("t1-1", "2026-01-01T00:00:00.500Z")];
        let now = clock::parse_millis("2026-01-01T00:00:01.000Z").unwrap();
        assert_eq!(status_after(&list).0, TaskStatus::WaitingApproval);
        let late = apply(
            &mut list,
            "t1-1",
            by(Some("alice"), DecidedBy::Human, Verdict::Allow),
            now,
        );
        assert!(matches!(
            late,
            Err(StoreError::Approval {
                code: ErrorCode::Expired,
                ..
            })
        ));
        apply(
            &mut list,
            "t1-1",
            by(None, DecidedBy::Timeout, Verdict::Deny),
            now,
        )
        .unwrap();
        let after = apply(
            &mut list,
            "t1-1",
            by(Some("alice"), DecidedBy::Human, Verdict::Allow),
            now,
        );
        assert!(matches!(
            after,
            Err(StoreError::Approval {
                code: ErrorCode::Expired,
                ..
            })
        ));
        assert!(matches!(
            apply(
                &mut list,
                "t1-9",
                by(None, DecidedBy::Rule, Verdict::Allow),
                now
            ),
            Err(StoreError::Approval {
                code: ErrorCode::UnknownApproval,
                ..
            })
        ));
    }

    #[test]
    fn ids_are_shown_short_and_split_at_the_last_dash() {
        let id = "3f9c0a12-aaaa-bbbb-cccc-123456789abc-2";
        assert_eq!(short(id), "3f9c0a12-2");
        assert_eq!(
            task_of(id).unwrap().as_str(),
            "3f9c0a12-aaaa-bbbb-cccc-123456789abc"
        );
        assert!(task_of("nodash").is_err());
    }
}
