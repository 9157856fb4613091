//! The rules of approvals in the store, pure: a decision taken exactly once
//! (`already_decided`, saying how and by whom) and a person's only before the deadline
//! (`expired`), and the status a task shows meanwhile. Both backends apply them inside
//! the transaction that reads the request's row.

use super::StoreError;
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

/// Decides request `a`: exactly once, and a person's answer only before the deadline.
/// `now_ms` is the clock's now. The request as decided.
pub(crate) fn apply(a: &mut Approval, d: Decision, now_ms: i64) -> Result<Approval, StoreError> {
    let id = a.id.as_str();
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

/// The status a task shows once its requests changed, given the first of them that
/// still waits: `waiting_approval` (with its reason) while one waits, else `running`.
pub(crate) fn status_after(first_waiting: Option<&Approval>) -> (TaskStatus, Option<String>) {
    match first_waiting {
        Some(a) => (TaskStatus::WaitingApproval, Some(wait_reason(a))),
        None => (TaskStatus::Running, None),
    }
}

/// A request as a row of the `approvals` table keeps it (its JSON).
pub(crate) fn from_body(body: &str) -> Result<Approval, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt(format!("approval row: {e}")))
}

/// The transcript's `approval` event: the request as it stands.
pub(crate) fn payload(a: &Approval) -> serde_json::Value {
    serde_json::to_value(a).unwrap_or_default()
}

/// Whether `owner` (everyone's with `None`) may see the session's requests.
pub(crate) fn owns(owner: Option<&str>, session_owner: Option<&str>) -> bool {
    owner.is_none_or(|o| session_owner.unwrap_or(crate::store::FIRST_ADMIN) == o)
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
        let mut a = req("t1-1", far);
        let now = clock::parse_millis("2026-01-01T00:00:01.000Z").unwrap();
        let first = apply(
            &mut a,
            by(Some("alice"), DecidedBy::Human, Verdict::Allow),
            now,
        )
        .unwrap();
        assert_eq!(first.decision.unwrap().decision, Verdict::Allow);
        let Err(StoreError::Approval { code, message }) = apply(
            &mut a,
            by(Some("bob"), DecidedBy::Human, Verdict::Deny),
            now,
        ) else {
            panic!("a second answer must be refused");
        };
        assert_eq!(code, ErrorCode::AlreadyDecided);
        assert!(message.contains("allowed by alice via cli"), "{message}");
        assert_eq!(a.decision.as_ref().unwrap().decision, Verdict::Allow);
        assert_eq!(status_after(None).0, TaskStatus::Running);
    }

    #[test]
    fn a_late_answer_is_expired_and_the_timeout_is_not_a_person() {
        let mut a = req("t1-1", "2026-01-01T00:00:00.500Z");
        let now = clock::parse_millis("2026-01-01T00:00:01.000Z").unwrap();
        let (status, why) = status_after(Some(&a));
        assert_eq!(status, TaskStatus::WaitingApproval);
        assert!(why.unwrap().contains("berth approve t1-1"));
        let late = apply(
            &mut a,
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
        apply(&mut a, by(None, DecidedBy::Timeout, Verdict::Deny), now).unwrap();
        let after = apply(
            &mut a,
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
