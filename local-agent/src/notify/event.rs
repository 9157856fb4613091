//! What Berth notifies about, and what of it may leave the machine.
//!
//! An [`Event`] holds only what is safe to show anywhere: ids, a request's kind, a
//! task's status and stable error code, how long it ran, and its directory in the
//! privacy-stripped display form (`~/code/app`). A request's command line, title and
//! paths (real paths) are never part of the webhook's body; the desktop, which is the
//! user's own screen, shows the command line through the display rule, cut short
//! ([`Event::command`]).

use berth_core::api::TaskStatus;
use berth_core::approval::{Approval, KINDS};
use berth_core::display::{redact_json, redact_text};
use berth_core::{Context, SessionId, TaskId};
use berth_web::store::TaskRow;
use serde_json::{Value, json};
use std::time::Duration;

/// The longest command line a desktop notification shows, in characters.
const COMMAND_CHARS: usize = 80;

/// What happened: the `event` of the webhook's body and its `X-Berth-Event` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A request of the `ask` policy waits for a person.
    ApprovalRequested,
    /// A task succeeded.
    TaskFinished,
    /// A task failed, was refused, or was interrupted (Berth stopped while it ran).
    TaskFailed,
}

impl EventKind {
    /// The event's name on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::TaskFinished => "task_finished",
            EventKind::TaskFailed => "task_failed",
        }
    }
}

/// The task an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFacts {
    pub id: TaskId,
    pub status: TaskStatus,
    /// The stable code of a task that did not succeed (only a code: never its message,
    /// which may name paths).
    pub error_code: Option<String>,
    /// From its start to its end, for a task that started.
    pub duration: Option<Duration>,
    /// Where it ran, in the display form.
    pub dir: Option<String>,
}

/// The request an `approval_requested` event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFacts {
    pub id: String,
    /// The id as a person types it (`3f9c0a12-1`).
    pub short_id: String,
    /// The tool call's kind, one of the rules' kinds (anything else is `other`).
    pub kind: String,
    /// When it is denied unanswered (RFC 3339).
    pub deadline: String,
    /// The command line, for the desktop alone: through the display rule, cut short.
    pub command: Option<String>,
}

/// One notification, before it is shaped for the desktop or a webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique per event, the same on every attempt to deliver it (`X-Berth-Delivery`):
    /// a receiver that sees it twice drops the second.
    pub id: String,
    pub kind: EventKind,
    /// When it happened (RFC 3339, UTC).
    pub at: String,
    pub session: SessionId,
    pub task: TaskFacts,
    pub approval: Option<ApprovalFacts>,
}

impl Event {
    /// The event of a task that reached `task.status`: `task_finished` or
    /// `task_failed`; none for a cancelled task (you cancelled it) or one that has not
    /// ended. Its directory is the display form the machine that ran it made, else
    /// `task.work_dir` shown by `ctx` (as the web listener shows it).
    pub fn of_task(task: &TaskRow, ctx: &Context) -> Option<Event> {
        let kind = match task.status {
            TaskStatus::Succeeded => EventKind::TaskFinished,
            TaskStatus::Failed | TaskStatus::Refused | TaskStatus::Interrupted => {
                EventKind::TaskFailed
            }
            TaskStatus::Cancelled
            | TaskStatus::Queued
            | TaskStatus::WaitingLock
            | TaskStatus::WaitingDaemon
            | TaskStatus::Running
            | TaskStatus::WaitingApproval => return None,
        };
        let millis = |t: &Option<String>| t.as_deref().and_then(berth_web::clock::parse_millis);
        let duration = match (millis(&task.started_at), millis(&task.finished_at)) {
            (Some(start), Some(end)) => u64::try_from(end - start).ok().map(Duration::from_millis),
            _ => None,
        };
        Some(Event {
            id: new_id(),
            kind,
            at: berth_web::clock::now(),
            session: task.session_id.clone(),
            task: TaskFacts {
                id: task.id.clone(),
                status: task.status,
                error_code: task
                    .error_code
                    .as_deref()
                    .filter(|c| is_code(c))
                    .map(str::to_owned),
                duration,
                dir: task.work_dir_display.clone().or_else(|| {
                    task.work_dir
                        .as_deref()
                        .and_then(|p| berth_web::api::strip_path(ctx, p))
                }),
            },
            approval: None,
        })
    }

    /// The `approval_requested` event of a request that now waits for a person;
    /// `ctx` strips the command line the desktop shows.
    pub fn of_approval(a: &Approval, ctx: &Context) -> Event {
        let kind = if KINDS.contains(&a.kind.as_str()) && a.kind != "*" {
            a.kind.clone()
        } else {
            "other".to_owned()
        };
        let command = a.command.as_deref().map(|c| {
            let one_line = c.split_whitespace().collect::<Vec<_>>().join(" ");
            cut(&redact_text(ctx, &one_line), COMMAND_CHARS)
        });
        Event {
            id: new_id(),
            kind: EventKind::ApprovalRequested,
            at: berth_web::clock::now(),
            session: a.session_id.clone(),
            task: TaskFacts {
                id: a.task_id.clone(),
                status: TaskStatus::WaitingApproval,
                error_code: None,
                duration: None,
                dir: None,
            },
            approval: Some(ApprovalFacts {
                id: a.id.clone(),
                short_id: Approval::short_id(&a.id),
                kind,
                deadline: a.deadline.clone(),
                command,
            }),
        }
    }

    /// One line for a person, which relays (ntfy, Discord, Teams) show as it is.
    pub fn text(&self) -> String {
        let session = short(self.session.as_str());
        let task = short(self.task.id.as_str());
        let ran = self
            .task
            .duration
            .map(|d| format!(" after {}", human(d)))
            .unwrap_or_default();
        let code = self
            .task
            .error_code
            .as_deref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        match (self.kind, &self.approval) {
            (EventKind::ApprovalRequested, Some(a)) => format!(
                "Berth: the agent of session {session} asks to {}; answer with `berth approve {}` or `berth deny {}`",
                a.kind, a.short_id, a.short_id
            ),
            (EventKind::ApprovalRequested, None) => {
                format!("Berth: the agent of session {session} asks for your answer")
            }
            (EventKind::TaskFinished, _) => {
                format!("Berth: task {task} of session {session} finished{ran}")
            }
            (EventKind::TaskFailed, _) => {
                let how = match self.task.status {
                    TaskStatus::Interrupted => "was interrupted",
                    TaskStatus::Refused => "was refused",
                    TaskStatus::Failed
                    | TaskStatus::Succeeded
                    | TaskStatus::Cancelled
                    | TaskStatus::Queued
                    | TaskStatus::WaitingLock
                    | TaskStatus::WaitingDaemon
                    | TaskStatus::Running
                    | TaskStatus::WaitingApproval => "failed",
                };
                format!("Berth: task {task} of session {session} {how}{code}{ran}")
            }
        }
    }

    /// The webhook's body: `{event, id, at, session, task, approval?, text}`, every
    /// string passed through the display rule once more (`ctx`), so that not even a
    /// display form made elsewhere can carry the user's home or name.
    pub fn body(&self, ctx: &Context) -> Value {
        let mut task = json!({
            "id": self.task.id.as_str(),
            "status": self.task.status.as_str(),
        });
        if let Some(code) = &self.task.error_code {
            task["error_code"] = json!(code);
        }
        if let Some(d) = self.task.duration {
            task["duration_ms"] = json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        }
        if let Some(dir) = &self.task.dir {
            task["dir"] = json!(dir);
        }
        let mut body = json!({
            "event": self.kind.as_str(),
            "id": self.id,
            "at": self.at,
            "session": { "id": self.session.as_str() },
            "task": task,
            "text": self.text(),
        });
        // The same line as `content`, which Discord's webhooks show (Teams' and the
        // rest show `text`): a webhook URL of either takes the body as it is.
        body["content"] = body["text"].clone();
        if let Some(a) = &self.approval {
            body["approval"] = json!({
                "id": a.id,
                "short_id": a.short_id,
                "kind": a.kind,
                "deadline": a.deadline,
                "answer": format!("berth approve {}", a.short_id),
            });
        }
        redact_json(ctx, &mut body);
        body
    }

    /// The command line a request asks to run, for the desktop (stripped, cut).
    pub fn command(&self) -> Option<&str> {
        self.approval.as_ref()?.command.as_deref()
    }
}

/// A fresh event id.
fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Whether `code` is a stable error code's spelling (`prepare_failed`): a code written
/// by another version is passed on, anything else is not.
fn is_code(code: &str) -> bool {
    (1..=64).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// An id's first eight characters, as the CLI shows it.
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// `text` cut to `max` characters, with `…` where it was cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A duration for people: `45 s`, `2 min 5 s`, `1 h 3 min`.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => match secs % 60 {
            0 => format!("{} min", secs / 60),
            s => format!("{} min {s} s", secs / 60),
        },
        _ => match (secs % 3600) / 60 {
            0 => format!("{} h", secs / 3600),
            m => format!("{} h {m} min", secs / 3600),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::{LocalPath, Platform};

    const SESSION: &str = "3f9c0a12-aaaa-4bbb-8ccc-000000000001";
    const TASK: &str = "1a2b3c4d-aaaa-4bbb-8ccc-000000000002";

    fn ctx() -> Context {
        Context::new(Platform::Linux)
            .with_home(LocalPath::parse(Platform::Linux, "/home/alice").unwrap())
            .with_user("alice")
    }

    fn row(status: TaskStatus) -> TaskRow {
        TaskRow {
            id: TaskId::parse(TASK).unwrap(),
            session_id: SessionId::parse(SESSION).unwrap(),
            seq: 1,
            message_id: "m".into(),
            status,
            wait_reason: None,
            work_dir: Some("/home/alice/code/app".into()),
            work_dir_display: Some("~/code/app".into()),
            exit_code: Some(1),
            error: Some("the agent failed in /home/alice/code/app".into()),
            error_code: Some("agent_failed".into()),
            denials: vec![],
            created_at: "2026-01-01T10:00:00.000Z".into(),
            started_at: Some("2026-01-01T10:00:00.000Z".into()),
            finished_at: Some("2026-01-01T10:02:05.500Z".into()),
            changes: None,
            fence: None,
            usage: None,
            approvals: vec![],
        }
    }

    /// Which statuses notify, and as what: a cancel is yours, so it tells you nothing.
    #[test]
    fn a_final_status_is_one_event_or_none() {
        let cases = [
            (TaskStatus::Succeeded, Some(EventKind::TaskFinished)),
            (TaskStatus::Failed, Some(EventKind::TaskFailed)),
            (TaskStatus::Refused, Some(EventKind::TaskFailed)),
            (TaskStatus::Interrupted, Some(EventKind::TaskFailed)),
            (TaskStatus::Cancelled, None),
            (TaskStatus::Running, None),
            (TaskStatus::WaitingApproval, None),
        ];
        for (status, want) in cases {
            assert_eq!(
                Event::of_task(&row(status), &ctx()).map(|e| e.kind),
                want,
                "{status:?}"
            );
        }
    }

    #[test]
    fn a_failed_tasks_body_has_its_code_and_duration_and_no_message_or_path() {
        let mut event = Event::of_task(&row(TaskStatus::Failed), &ctx()).unwrap();
        event.id = "e1".into();
        event.at = "2026-01-01T10:02:05.600Z".into();
        assert_eq!(
            event.body(&ctx()),
            json!({
                "event": "task_failed",
                "id": "e1",
                "at": "2026-01-01T10:02:05.600Z",
                "session": { "id": SESSION },
                "task": {
                    "id": TASK,
                    "status": "failed",
                    "error_code": "agent_failed",
                    "duration_ms": 125_500,
                    "dir": "~/code/app",
                },
                "text": "Berth: task 1a2b3c4d of session 3f9c0a12 failed (agent_failed) after 2 min 5 s",
                "content": "Berth: task 1a2b3c4d of session 3f9c0a12 failed (agent_failed) after 2 min 5 s",
            })
        );
    }

    /// A display form that still holds the home or the name (made by another
    /// version, another machine) is stripped on the way out; an unknown code is
    /// dropped rather than passed on.
    #[test]
    fn the_body_never_carries_the_home_or_the_user_name() {
        let mut task = row(TaskStatus::Succeeded);
        task.work_dir_display = Some("/home/alice/code/app".into());
        task.error_code = Some("Alice's /home/alice".into());
        let body = Event::of_task(&task, &ctx())
            .unwrap()
            .body(&ctx())
            .to_string();
        assert!(
            !body.contains("/home/alice") && !body.to_lowercase().contains("alice"),
            "{body}"
        );
        assert!(body.contains("\"dir\":\"~/code/app\""), "{body}");
        assert!(!body.contains("error_code"), "{body}");
        // A local run leaves no display form: its path is shown here.
        task.work_dir_display = None;
        let event = Event::of_task(&task, &ctx()).unwrap();
        assert_eq!(event.task.dir.as_deref(), Some("~/code/app"));
    }

    #[test]
    fn an_approvals_body_names_its_kind_and_how_to_answer_never_its_command() {
        let a = Approval {
            id: format!("{TASK}-2"),
            task_id: TaskId::parse(TASK).unwrap(),
            session_id: SessionId::parse(SESSION).unwrap(),
            kind: "execute".into(),
            title: "Run /srv/secret/deploy.sh".into(),
            command: Some("sh /srv/secret/deploy.sh --home /home/alice".into()),
            paths: vec!["/srv/secret".into()],
            input: json!({"command": "sh /srv/secret/deploy.sh"}),
            options: vec![],
            asked_at: "2026-01-01T10:00:00.000Z".into(),
            deadline: "2026-01-01T10:10:00.000Z".into(),
            decision: None,
        };
        let mut event = Event::of_approval(&a, &ctx());
        event.id = "e2".into();
        event.at = "2026-01-01T10:00:00.100Z".into();
        assert_eq!(
            event.body(&ctx()),
            json!({
                "event": "approval_requested",
                "id": "e2",
                "at": "2026-01-01T10:00:00.100Z",
                "session": { "id": SESSION },
                "task": { "id": TASK, "status": "waiting_approval" },
                "approval": {
                    "id": format!("{TASK}-2"),
                    "short_id": "1a2b3c4d-2",
                    "kind": "execute",
                    "deadline": "2026-01-01T10:10:00.000Z",
                    "answer": "berth approve 1a2b3c4d-2",
                },
                "text": "Berth: the agent of session 3f9c0a12 asks to execute; answer with `berth approve 1a2b3c4d-2` or `berth deny 1a2b3c4d-2`",
                "content": "Berth: the agent of session 3f9c0a12 asks to execute; answer with `berth approve 1a2b3c4d-2` or `berth deny 1a2b3c4d-2`",
            })
        );
        // The desktop's copy: the display rule applied, on one line.
        assert_eq!(event.command(), Some("sh /srv/secret/deploy.sh --home ~"));
        // A kind no rule names is `other`.
        let odd = Approval {
            kind: "rm -rf /srv".into(),
            ..a
        };
        assert_eq!(
            Event::of_approval(&odd, &ctx()).approval.unwrap().kind,
            "other"
        );
    }

    #[test]
    fn durations_and_cuts_read_well() {
        let d = Duration::from_secs;
        assert_eq!(
            [d(0), d(59), d(60), d(125), d(3600), d(3725)].map(human),
            ["0 s", "59 s", "1 min", "2 min 5 s", "1 h", "1 h 2 min"]
        );
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}
