//! Claude Code in print mode: `claude -p --output-format stream-json --verbose`.
//!
//! The prompt goes on stdin (flags such as `--allowedTools` swallow a trailing
//! positional prompt); the brief goes in `--append-system-prompt`, so nothing is
//! written into the directory. See `agent-protocols.md` §1.

use super::{Invocation, Turn, TurnState, program};
use berth_core::event::AgentEvent;
use berth_web::executor::AgentSpec;
use serde_json::Value;

/// What claude prints for an unknown `--resume` id.
const STALE: &str = "No conversation found with session ID";

pub(super) fn invocation(spec: &AgentSpec, turn: &Turn<'_>) -> Invocation {
    let (program, extra) = program(spec, "claude");
    let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"]
        .map(String::from)
        .to_vec();
    if let Some(brief) = turn.brief {
        args.push("--append-system-prompt".to_owned());
        args.push(brief.to_owned());
    }
    if let Some(id) = turn.resume_id {
        args.push("--resume".to_owned());
        args.push(id.to_owned());
    }
    args.extend(extra);
    Invocation {
        program,
        args,
        stdin: Some(turn.prompt.as_bytes().to_vec()),
        pass_prefixes: &["ANTHROPIC_", "CLAUDE_", "AWS_", "GOOGLE_", "VERTEX_"],
    }
}

pub(super) fn is_stale(text: &str) -> bool {
    text.contains(STALE)
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| i.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other @ (Value::Bool(_) | Value::Number(_) | Value::Object(_)) => other.to_string(),
    }
}

pub(super) fn parse_line(line: &str, resumed: bool, st: &mut TurnState) -> Vec<AgentEvent> {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return if line.trim().is_empty() {
            Vec::new()
        } else {
            vec![AgentEvent::Text {
                text: line.to_owned(),
            }]
        };
    };
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut out = Vec::new();
    match v.get("type").and_then(Value::as_str) {
        Some("system") if str_of(&v, "subtype").as_deref() == Some("init") => {
            let id = str_of(&v, "session_id");
            if id.is_some() {
                st.resume_id.clone_from(&id);
            }
            out.push(AgentEvent::Started {
                resume_id: id,
                model: str_of(&v, "model"),
            });
        }
        Some("assistant") => {
            let items = v.pointer("/message/content").and_then(Value::as_array);
            for item in items.into_iter().flatten() {
                match item.get("type").and_then(Value::as_str) {
                    Some("text") => out.push(AgentEvent::Text {
                        text: str_of(item, "text").unwrap_or_default(),
                    }),
                    Some("thinking") => out.push(AgentEvent::Thinking {
                        text: str_of(item, "thinking").unwrap_or_default(),
                    }),
                    Some("tool_use") => out.push(AgentEvent::ToolUse {
                        id: str_of(item, "id"),
                        name: str_of(item, "name").unwrap_or_default(),
                        input: item.get("input").cloned().unwrap_or(Value::Null),
                    }),
                    Some(_) | None => {}
                }
            }
        }
        Some("user") => {
            let items = v.pointer("/message/content").and_then(Value::as_array);
            for item in items.into_iter().flatten() {
                if item.get("type").and_then(Value::as_str) == Some("tool_result") {
                    out.push(AgentEvent::ToolResult {
                        id: str_of(item, "tool_use_id"),
                        output: text_of(item.get("content").unwrap_or(&Value::Null)),
                        is_error: item
                            .get("is_error")
                            .and_then(Value::as_bool)
                            .unwrap_or(false),
                    });
                }
            }
        }
        Some("result") => {
            let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(true);
            let errors: Vec<String> = v
                .get("errors")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(text_of).collect())
                .unwrap_or_default();
            if resumed && is_error && errors.iter().any(|e| is_stale(e)) {
                st.stale_resume = true;
                return out;
            }
            if let Some(id) = str_of(&v, "session_id") {
                st.resume_id = Some(id);
            }
            st.ok = Some(!is_error);
            let text =
                str_of(&v, "result").or_else(|| (!errors.is_empty()).then(|| errors.join("; ")));
            if is_error {
                st.error = text.clone().or_else(|| str_of(&v, "subtype"));
            }
            out.push(AgentEvent::Result {
                ok: !is_error,
                text,
                usage: v.get("usage").cloned(),
                cost_usd: v.get("total_cost_usd").and_then(Value::as_f64),
            });
        }
        Some(_) | None => {}
    }
    out
}
