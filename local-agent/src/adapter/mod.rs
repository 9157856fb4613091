//! How each kind of agent is started and how its output becomes Berth's events.
//!
//! An adapter is pure: it builds the invocation (program, arguments, stdin, extra
//! environment) for one turn and parses output lines into
//! [`berth_core::event::AgentEvent`], tracking the resume id and whether the resume id
//! it was given turned out to be stale. The executor does the spawning.

pub mod claude;
pub mod codex;
pub mod command;

use berth_core::event::AgentEvent;
use berth_web::executor::{AgentKind, AgentSpec};
use std::path::Path;

/// Why an agent cannot be started.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error("the agent {name:?} has an empty command")]
    EmptyCommand { name: String },
}

/// One turn's inputs.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    pub prompt: &'a str,
    /// The brief, when it travels with the invocation (`None` when it went into a
    /// file in the directory).
    pub brief: Option<&'a str>,
    pub resume_id: Option<&'a str>,
    pub work_dir: &'a Path,
}

/// What to run for one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub program: String,
    pub args: Vec<String>,
    /// Bytes written to stdin, which is then closed; `None` means stdin is `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Environment variable prefixes passed through from Berth's own environment
    /// (credentials the agent's CLI reads).
    pub pass_prefixes: &'static [&'static str],
}

/// What the adapter learnt from a turn's output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnState {
    /// The session/thread id the agent reported.
    pub resume_id: Option<String>,
    /// The final verdict the agent reported, if it did.
    pub ok: Option<bool>,
    /// The agent said the resume id it was given does not exist.
    pub stale_resume: bool,
    /// The agent's own error text, if any.
    pub error: Option<String>,
}

/// How an agent kind is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    Command,
    Claude,
    Codex,
}

impl Adapter {
    pub fn for_kind(kind: AgentKind) -> Adapter {
        match kind {
            AgentKind::Command => Adapter::Command,
            AgentKind::Claude => Adapter::Claude,
            AgentKind::Codex => Adapter::Codex,
        }
    }

    /// Where skill folders go for this agent, if it reads any from its directory.
    pub fn skills_dir(self) -> Option<&'static str> {
        match self {
            Adapter::Claude => Some(".claude/skills"),
            Adapter::Codex => Some(".agents/skills"),
            Adapter::Command => None,
        }
    }

    /// The instructions file that carries the brief when it is too long for the
    /// directory-free channel, if the agent reads one.
    pub fn brief_file(self) -> Option<&'static str> {
        match self {
            Adapter::Claude => Some("CLAUDE.md"),
            // Codex takes the brief in the prompt, which has no length limit on stdin.
            Adapter::Codex | Adapter::Command => None,
        }
    }

    /// The invocation for one turn.
    pub fn invocation(self, spec: &AgentSpec, turn: &Turn<'_>) -> Result<Invocation, AdapterError> {
        match self {
            Adapter::Command => command::invocation(spec, turn),
            Adapter::Claude => Ok(claude::invocation(spec, turn)),
            Adapter::Codex => Ok(codex::invocation(spec, turn)),
        }
    }

    /// Parses one stdout line.
    pub fn stdout_line(self, line: &str, resumed: bool, st: &mut TurnState) -> Vec<AgentEvent> {
        match self {
            Adapter::Command => vec![AgentEvent::Text {
                text: line.to_owned(),
            }],
            Adapter::Claude => claude::parse_line(line, resumed, st),
            Adapter::Codex => codex::parse_line(line, resumed, st),
        }
    }

    /// Looks at one stderr line (forwarded as `Stderr` by the executor).
    pub fn stderr_line(self, line: &str, resumed: bool, st: &mut TurnState) {
        match self {
            Adapter::Command => {}
            Adapter::Claude => {
                if resumed && claude::is_stale(line) {
                    st.stale_resume = true;
                }
            }
            Adapter::Codex => {
                if resumed && codex::is_stale(line) {
                    st.stale_resume = true;
                }
            }
        }
    }

    /// Whether the turn succeeded, from what was parsed and the exit code.
    pub fn succeeded(self, st: &TurnState, exit_code: Option<i32>) -> bool {
        match self {
            Adapter::Command => exit_code == Some(0),
            Adapter::Claude => exit_code == Some(0) && st.ok == Some(true),
            // Codex's exit code is unreliable (turn.failed with exit 0 was seen).
            Adapter::Codex => st.ok == Some(true),
        }
    }
}

/// The program of `spec`, or `default` when the command is empty, and its arguments.
fn program(spec: &AgentSpec, default: &str) -> (String, Vec<String>) {
    match spec.command.split_first() {
        Some((p, rest)) => (p.clone(), rest.to_vec()),
        None => (default.to_owned(), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(adapter: Adapter, lines: &[&str], resumed: bool) -> (Vec<AgentEvent>, TurnState) {
        let mut st = TurnState::default();
        let events = lines
            .iter()
            .flat_map(|l| adapter.stdout_line(l, resumed, &mut st))
            .collect();
        (events, st)
    }

    #[test]
    fn claude_error_results_fail_even_when_labelled_success() {
        let (events, st) = parse(
            Adapter::Claude,
            &[
                r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 529","session_id":"s"}"#,
            ],
            false,
        );
        assert_eq!(
            events,
            vec![AgentEvent::Result {
                ok: false,
                text: Some("API Error: 529".into()),
                usage: None,
                cost_usd: None
            }]
        );
        assert!(!Adapter::Claude.succeeded(&st, Some(0)));
        assert_eq!(st.resume_id.as_deref(), Some("s"));
    }

    #[test]
    fn claude_stale_resume_is_recognised_only_when_resuming() {
        let line = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"errors":["No conversation found with session ID: x"]}"#;
        let (events, st) = parse(Adapter::Claude, &[line], true);
        assert_eq!((events, st.stale_resume), (vec![], true));
        let (events, st) = parse(Adapter::Claude, &[line], false);
        assert_eq!(
            (events.len(), st.stale_resume, st.ok),
            (1, false, Some(false))
        );
    }

    #[test]
    fn codex_turn_failed_and_exit_zero_is_a_failure() {
        let (events, st) = parse(
            Adapter::Codex,
            &[
                r#"{"type":"thread.started","thread_id":"th"}"#,
                r#"{"type":"plan","x":1}"#,
                r#"{"type":"turn.failed","error":{"message":"boom"}}"#,
            ],
            false,
        );
        assert_eq!(events.len(), 2);
        assert!(!Adapter::Codex.succeeded(&st, Some(0)));
        assert_eq!(st.error.as_deref(), Some("boom"));
        let mut st = TurnState::default();
        Adapter::Codex.stderr_line("Error: no rollout found for thread id th", true, &mut st);
        assert!(st.stale_resume);
    }

    #[test]
    fn a_command_without_a_program_is_an_error() {
        let spec = AgentSpec {
            name: "x".into(),
            kind: AgentKind::Command,
            command: vec![],
        };
        let turn = Turn {
            prompt: "p",
            brief: None,
            resume_id: None,
            work_dir: Path::new("/w"),
        };
        assert!(matches!(
            Adapter::Command.invocation(&spec, &turn),
            Err(AdapterError::EmptyCommand { .. })
        ));
    }
}
