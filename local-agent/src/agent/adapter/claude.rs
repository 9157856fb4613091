//! Claude Code in print mode: `claude -p --output-format stream-json --verbose
//! --include-partial-messages`.
//!
//! Its partial messages (`stream_event` lines: the model API's own stream events)
//! become live-only [`AgentEvent::Delta`]s, a text or thinking block's pieces as they
//! arrive; the whole block follows in its `assistant` line, which the transcript
//! stores.
//!
//! The prompt goes on stdin (flags such as `--allowedTools` swallow a trailing
//! positional prompt); the brief goes in `--append-system-prompt`, so nothing is
//! written into the directory. See `agent-protocols.md` §1.
//!
//! Permissions: print mode cannot ask, so whatever Claude Code would ask about is
//! denied. Berth's policy is mapped onto its own controls (see [`permission_args`]);
//! every denial it reports becomes a [`AgentEvent::Denied`].

use super::{Invocation, Turn, TurnState, program};
use berth_core::Permissions;
use berth_core::api::Denial;
use berth_core::event::AgentEvent;
use berth_core::exec::AgentSpec;
use serde_json::Value;

/// What claude prints for an unknown `--resume` id.
const STALE: &str = "No conversation found with session ID";

/// Claude Code's tools that change files or run commands.
const CHANGING_TOOLS: [&str; 5] = ["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"];

/// Claude Code's file-editing tools, denied outright under `read-only`.
const EDIT_TOOLS: &str = "Write,Edit,MultiEdit,NotebookEdit";

/// Every tool allowed without asking under `full`. `--permission-mode
/// bypassPermissions` would say the same, but Claude Code refuses it under root.
const ALL_TOOLS: &str = "Bash,Write,Edit,MultiEdit,NotebookEdit,WebFetch,WebSearch";

/// Flags in an agent's own command that choose permissions themselves: Berth then
/// adds none of its own.
const OWN_PERMISSION_FLAGS: [&str; 5] = [
    "--permission-mode",
    "--dangerously-skip-permissions",
    "--allowedTools",
    "--allowed-tools",
    "--disallowedTools",
];

/// Whether the agent's own arguments choose its permissions.
pub(crate) fn chooses_permissions(extra: &[String]) -> bool {
    extra.iter().any(|a| {
        OWN_PERMISSION_FLAGS
            .iter()
            .any(|f| a == f || a.starts_with(&format!("{f}=")))
    })
}

/// Claude Code's flags for a policy. Each value is one argument joined with `=`, so a
/// multi-value flag can never swallow what follows it.
///
/// Fenced, `edit` also gets the shell (`--allowedTools=Bash`): the kernel keeps its
/// commands to the directory, so the agent can run the project's tests and builds.
/// Unfenced, `edit` keeps its shell denied.
pub(crate) fn permission_args(p: Permissions, fenced: bool) -> Vec<String> {
    match p {
        Permissions::ReadOnly => vec![
            "--permission-mode=default".into(),
            format!("--disallowedTools={EDIT_TOOLS}"),
        ],
        Permissions::Edit if fenced => vec![
            "--permission-mode=acceptEdits".into(),
            "--allowedTools=Bash".into(),
        ],
        // Edits inside the directory without asking (acceptEdits); what Claude Code
        // would ask about goes to Berth through its permission prompt (stdio).
        Permissions::Edit | Permissions::Ask => vec!["--permission-mode=acceptEdits".into()],
        Permissions::Full => vec![
            "--permission-mode=acceptEdits".into(),
            format!("--allowedTools={ALL_TOOLS}"),
        ],
    }
}

/// What a policy means for Claude Code, in a sentence for `agent add` and `agent list`.
pub(crate) fn policy_note(p: Permissions) -> &'static str {
    match p {
        Permissions::ReadOnly => {
            "reads only: its file-editing tools are removed and shell commands are denied"
        }
        Permissions::Edit => {
            "fenced: edits files and runs shell commands, the fence keeping both to the directory; unfenced: edits only (acceptEdits), shell commands denied"
        }
        Permissions::Ask => {
            "edits inside the directory without asking (acceptEdits); every other tool, shell included, waits for your answer (berth approvals)"
        }
        Permissions::Full => {
            "every tool without asking, shell included (--allowedTools; bypassPermissions is refused under root)"
        }
    }
}

pub(super) fn invocation(spec: &AgentSpec, turn: &Turn<'_>) -> Invocation {
    let (program, extra) = program(spec, "claude");
    let mut args: Vec<String> = [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
    ]
    .map(String::from)
    .to_vec();
    let asks = asks_berth(turn, &extra);
    if !chooses_permissions(&extra) {
        args.extend(permission_args(turn.permissions, turn.fenced));
    }
    if asks {
        // What Claude Code would ask about comes to Berth on stdout (`control_request`
        // `can_use_tool`), answered on stdin: the prompt then goes as a stream-json
        // line, and stdin stays open until the turn's result.
        args.extend(
            [
                "--input-format",
                "stream-json",
                "--permission-prompt-tool",
                "stdio",
            ]
            .map(String::from),
        );
    }
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
        stdin: (!asks).then(|| turn.prompt.as_bytes().to_vec()),
        pass_prefixes: &["ANTHROPIC_", "CLAUDE_", "AWS_", "GOOGLE_", "VERTEX_"],
        env: Vec::new(),
        stdin_pipe: asks,
    }
}

/// Whether a turn's permission prompts come to Berth: under `ask`, unless the agent's
/// own arguments choose its permissions.
pub(crate) fn asks_berth(turn: &Turn<'_>, extra: &[String]) -> bool {
    turn.permissions == Permissions::Ask && !chooses_permissions(extra)
}

/// The prompt as the one user line of `--input-format stream-json`.
pub(crate) fn user_line(prompt: &str) -> Vec<u8> {
    let mut line = serde_json::json!({
        "type": "user",
        "message": {"role": "user", "content": prompt},
    })
    .to_string()
    .into_bytes();
    line.push(b'\n');
    line
}

/// A permission request of Claude Code's (`control_request` `can_use_tool`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CanUseTool {
    pub request_id: String,
    pub tool: String,
    pub input: Value,
    pub tool_use_id: Option<String>,
    pub description: Option<String>,
}

/// The line as a permission request, if it is one.
pub(crate) fn can_use_tool(line: &str) -> Option<CanUseTool> {
    if !line.contains("control_request") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    let r = &v["request"];
    if v["type"] != "control_request" || r["subtype"] != "can_use_tool" {
        return None;
    }
    Some(CanUseTool {
        request_id: v["request_id"].as_str()?.to_owned(),
        tool: r["tool_name"].as_str().unwrap_or_default().to_owned(),
        input: r["input"].clone(),
        tool_use_id: r["tool_use_id"].as_str().map(str::to_owned),
        description: r["description"].as_str().map(str::to_owned),
    })
}

/// Whether the line is the turn's `result` (stdin may close after it).
pub(crate) fn is_result(line: &str) -> bool {
    line.contains("\"result\"")
        && serde_json::from_str::<Value>(line).is_ok_and(|v| v["type"] == "result")
}

impl CanUseTool {
    /// The request in the rules' words: an ACP kind, the command, the paths.
    pub fn ask(&self) -> crate::agent::ask::Ask {
        let kind = match self.tool.as_str() {
            "Bash" | "BashOutput" | "KillShell" => "execute",
            "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => "edit",
            "Read" | "Grep" | "Glob" | "LS" => "read",
            "WebFetch" | "WebSearch" => "fetch",
            "TodoWrite" | "Task" | "ExitPlanMode" => "think",
            _ => "other",
        };
        let command = (kind == "execute")
            .then(|| self.input["command"].as_str().map(str::to_owned))
            .flatten();
        let paths = ["file_path", "notebook_path", "path"]
            .iter()
            .filter_map(|k| self.input[*k].as_str())
            .map(str::to_owned)
            .collect();
        let title = self
            .description
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| format!("{} {}", self.tool, target_of(&self.input)));
        crate::agent::ask::Ask {
            kind: kind.to_owned(),
            title,
            command,
            paths,
            input: serde_json::json!({"tool_name": self.tool, "input": self.input}),
            options: Vec::new(),
        }
    }

    /// Berth's answer on stdin: an allow echoes the input back (an empty
    /// `updatedInput` would run with nothing changed, but a changed one is what runs,
    /// so the request's own is sent); a deny carries the words the model is given.
    /// `updatedPermissions` is never sent: Claude Code would write the rule into the
    /// project's `.claude/settings.local.json`.
    pub fn answer(&self, allow: bool, message: &str) -> Vec<u8> {
        let response = if allow {
            serde_json::json!({"behavior": "allow", "updatedInput": self.input})
        } else {
            serde_json::json!({"behavior": "deny", "message": message})
        };
        let mut line = serde_json::json!({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": self.request_id, "response": response},
        })
        .to_string()
        .into_bytes();
        line.push(b'\n');
        line
    }

    /// The denial the task records for a deny of Berth's.
    pub fn denial(&self, by: &str) -> Denial {
        Denial {
            tool: self.tool.clone(),
            target: target_of(&self.input),
            by: Some(by.to_owned()),
        }
    }
}

pub(super) fn is_stale(text: &str) -> bool {
    text.contains(STALE)
}

/// What a tool call was aimed at, from its input: the file, the command, the URL.
pub(crate) fn target_of(input: &Value) -> String {
    [
        "file_path",
        "notebook_path",
        "path",
        "command",
        "url",
        "pattern",
        "query",
    ]
    .iter()
    .find_map(|k| input.get(k).and_then(Value::as_str))
    .map(str::to_owned)
    .unwrap_or_default()
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
        Some("system") if str_of(&v, "subtype").as_deref() == Some("permission_denied") => {
            let id = str_of(&v, "tool_use_id");
            // The event names the call, not its input: the target was seen with the call.
            let target = v
                .get("tool_input")
                .map(target_of)
                .or_else(|| id.as_ref().and_then(|i| st.targets.get(i).cloned()))
                .unwrap_or_default();
            let denial = Denial {
                by: None,
                tool: str_of(&v, "tool_name").unwrap_or_default(),
                target,
            };
            out.extend(st.deny(id.as_deref(), denial, str_of(&v, "message")));
        }
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
        // A subagent's pieces are left to its whole messages.
        Some("stream_event") if v["parent_tool_use_id"].is_null() => {
            let e = &v["event"];
            match e["type"].as_str() {
                Some("content_block_start") => st.streamed_parts = 0,
                Some("content_block_delta") => {
                    let d = &e["delta"];
                    let piece = match d["type"].as_str() {
                        Some("text_delta") => d["text"].as_str().map(|t| (t, false)),
                        Some("thinking_delta") => d["thinking"].as_str().map(|t| (t, true)),
                        Some(_) | None => None,
                    };
                    if let Some((text, thought)) = piece.filter(|(t, _)| !t.is_empty()) {
                        out.push(AgentEvent::Delta {
                            text: text.to_owned(),
                            thought,
                            part: st.streamed_parts,
                        });
                        st.streamed_parts += 1;
                    }
                }
                Some(_) | None => {}
            }
        }
        Some("assistant") => {
            st.streamed_parts = 0;
            let items = v.pointer("/message/content").and_then(Value::as_array);
            for item in items.into_iter().flatten() {
                match item.get("type").and_then(Value::as_str) {
                    Some("text") => out.push(AgentEvent::Text {
                        text: str_of(item, "text").unwrap_or_default(),
                    }),
                    Some("thinking") => out.push(AgentEvent::Thinking {
                        text: str_of(item, "thinking").unwrap_or_default(),
                    }),
                    Some("tool_use") => {
                        let name = str_of(item, "name").unwrap_or_default();
                        let id = str_of(item, "id");
                        let input = item.get("input").unwrap_or(&Value::Null);
                        if let Some(id) = &id {
                            st.targets.insert(id.clone(), target_of(input));
                            if CHANGING_TOOLS.contains(&name.as_str()) {
                                st.pending_changes.insert(id.clone());
                            }
                        }
                        out.push(AgentEvent::ToolUse {
                            id,
                            name,
                            input: item.get("input").cloned().unwrap_or(Value::Null),
                        });
                    }
                    Some(_) | None => {}
                }
            }
        }
        Some("user") => {
            let items = v.pointer("/message/content").and_then(Value::as_array);
            for item in items.into_iter().flatten() {
                if item.get("type").and_then(Value::as_str) == Some("tool_result") {
                    let id = str_of(item, "tool_use_id");
                    let is_error = item
                        .get("is_error")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    if let Some(id) = &id
                        && st.pending_changes.remove(id)
                        && !is_error
                    {
                        st.changes_applied += 1;
                    }
                    out.push(AgentEvent::ToolResult {
                        id,
                        output: text_of(item.get("content").unwrap_or(&Value::Null)),
                        is_error,
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
            // The final list repeats the denials reported as they happened; older
            // builds report them only here.
            for d in v
                .get("permission_denials")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let denial = Denial {
                    by: None,
                    tool: str_of(d, "tool_name").unwrap_or_default(),
                    target: target_of(d.get("tool_input").unwrap_or(&Value::Null)),
                };
                out.extend(st.deny(str_of(d, "tool_use_id").as_deref(), denial, None));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `edit` gets the shell only where the fence keeps it to the directory.
    #[test]
    fn edit_gets_its_shell_only_when_fenced() {
        let shell = |p, fenced| {
            permission_args(p, fenced)
                .iter()
                .any(|a| a.contains("Bash"))
        };
        assert!(shell(Permissions::Edit, true));
        assert!(!shell(Permissions::Edit, false));
        assert!(!shell(Permissions::ReadOnly, true));
        assert!(shell(Permissions::Full, false));
        assert_eq!(
            permission_args(Permissions::Edit, true),
            ["--permission-mode=acceptEdits", "--allowedTools=Bash"]
        );
    }
}
