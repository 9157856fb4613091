//! The rules of approvals in the store, pure: a request added once, a decision taken
//! exactly once (`already_decided`, saying how and by whom) and a person's only before
//! the deadline (`expired`), the status a task shows meanwhile, and the lists. Both
//! backends apply them inside the transaction that reads the task.

use super::{StoreError, TaskRow};
use crate::clock;
use berth_core::ErrorCode;
use berth_core::SessionId;
use berth_core::TaskId;
use berth_core::api::TaskStatus;
use berth_core::approval::{Approval, DecidedBy, Decision, Verdict};

/// How many decided requests `berth approvals --all` lists, newest first.
pub(crate) const RECENT: usize = 200;

fn refused(code: ErrorCode, message: String) -> StoreError {
    StoreError::Approval { code, message }
}

/// A session's rule `n` that does not exist.
pub(crate) fn no_rule(id: &SessionId, n: i64) -> StoreError {
    StoreError::BadChange(format!(
        "session {id} has no rule {n}; `berth session rules {}` lists them",
        &id.as_str()[..8.min(id.as_str().len())]
    ))
}

/// `unknown_approval` for `id`.
pub(crate) fn unknown(id: &str) -> StoreError {
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
        Approval::short_id(&a.id),
        Approval::short_id(&a.id)
    )
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
                    Approval::short_id(id),
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
                Approval::short_id(id),
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
        Approval::short_id(id),
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
        assert_eq!(Approval::short_id(id), "3f9c0a12-2");
        assert_eq!(
            task_of(id).unwrap().as_str(),
            "3f9c0a12-aaaa-bbbb-cccc-123456789abc"
        );
        assert!(task_of("nodash").is_err());
    }
}
