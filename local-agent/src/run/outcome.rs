//! How a task ends: its outcome from a stop, or from the turn that ran (its status,
//! stable code, error and denials).

use super::state::Stop;
use crate::agent::adapter::Adapter;
use crate::agent::turn::Ran;
use berth_core::ErrorCode;
use berth_core::api::TaskStatus;
use berth_core::exec::TaskOutcome;

pub(super) fn outcome(status: TaskStatus, error: Option<String>) -> TaskOutcome {
    TaskOutcome {
        error,
        ..TaskOutcome::new(status)
    }
}

pub(super) fn stopped(stop: Stop) -> TaskOutcome {
    match stop {
        Stop::Refused(r) => TaskOutcome::refused(&r),
        Stop::Failed(code, msg) => TaskOutcome::failed(code, msg),
    }
}

/// How a turn that ran ended: its status, stable code, error, and denials.
///
/// A turn in which the agent's permission system denied actions and nothing that
/// could change files went through is `permission_denied`, whatever the agent said:
/// it must not look like a clean success.
pub(super) fn ran_outcome(
    adapter: Adapter,
    agent: &str,
    ran: Ran,
    resume: Option<String>,
) -> TaskOutcome {
    let ok = adapter.succeeded(&ran.state, ran.exit_code);
    let (status, code, error) = if ran.cancelled {
        (TaskStatus::Cancelled, None, None)
    } else if let Some(why) = ran.state.start_failed.clone() {
        (
            TaskStatus::Failed,
            Some(ErrorCode::AgentStartFailed),
            Some(why),
        )
    } else if ran.state.all_denied() && adapter != Adapter::Command {
        // A command agent has no permission system: what the fence refused it is
        // listed, and its exit code says how the turn went.
        let what: Vec<String> = ran
            .state
            .denials
            .iter()
            .take(3)
            .map(|d| format!("{} {}", d.tool, d.target).trim_end().to_owned())
            .collect();
        let more = ran.state.denials.len().saturating_sub(what.len());
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        (
            TaskStatus::Failed,
            Some(ErrorCode::PermissionDenied),
            Some(format!(
                "the agent {agent:?} was denied {}{more}, and nothing it tried to change went through",
                what.join(", ")
            )),
        )
    } else if ok {
        (TaskStatus::Succeeded, None, None)
    } else {
        let code = if ran.state.error.is_some() || ran.state.ok == Some(false) {
            ErrorCode::AgentError
        } else {
            ErrorCode::AgentExited
        };
        let error = ran
            .state
            .error
            .clone()
            .unwrap_or_else(|| match ran.exit_code {
                Some(c) => format!("the agent exited with code {c}"),
                None => "the agent was killed by a signal".to_owned(),
            });
        (TaskStatus::Failed, Some(code), Some(error))
    };
    TaskOutcome {
        exit_code: ran.exit_code,
        error,
        code,
        resume_id: ran.state.resume_id.or(resume),
        denials: ran.state.denials,
        usage: ran.state.usage,
        ..TaskOutcome::new(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::adapter::TurnState;

    fn replay(adapter: Adapter, stdout: &str) -> TurnState {
        let mut st = TurnState::default();
        for l in stdout.lines() {
            adapter.stdout_line(l, false, &mut st);
        }
        st
    }

    #[test]
    fn a_turn_whose_every_write_was_denied_fails_with_permission_denied() {
        let state = replay(
            Adapter::Claude,
            include_str!("../../tests/fixtures/real/claude-write-denied.jsonl"),
        );
        let ran = Ran {
            state,
            exit_code: Some(0),
            cancelled: false,
        };
        let out = ran_outcome(Adapter::Claude, "claude", ran, None);
        assert_eq!(
            (out.status, out.code, out.error.as_deref()),
            (
                TaskStatus::Failed,
                Some(ErrorCode::PermissionDenied),
                Some(
                    "the agent \"claude\" was denied Write /home/alice/code/app/hello.txt, and nothing it tried to change went through"
                )
            )
        );
        assert_eq!(out.denials.len(), 1);
    }

    #[test]
    fn failures_carry_their_codes() {
        let ran = |state: TurnState, exit_code| Ran {
            state,
            exit_code,
            cancelled: false,
        };
        let ok = replay(
            Adapter::Claude,
            include_str!("../../tests/fixtures/real/claude-write-ok.jsonl"),
        );
        let out = ran_outcome(Adapter::Claude, "c", ran(ok, Some(0)), None);
        assert_eq!((out.status, out.code), (TaskStatus::Succeeded, None));
        let out = ran_outcome(
            Adapter::Command,
            "c",
            ran(TurnState::default(), Some(2)),
            None,
        );
        assert_eq!(
            (out.status, out.code, out.error.as_deref()),
            (
                TaskStatus::Failed,
                Some(ErrorCode::AgentExited),
                Some("the agent exited with code 2")
            )
        );
        let failed = TurnState {
            ok: Some(false),
            error: Some("API Error: 529".into()),
            ..TurnState::default()
        };
        let out = ran_outcome(Adapter::Claude, "c", ran(failed, Some(1)), None);
        assert_eq!(out.code, Some(ErrorCode::AgentError));
    }
}
