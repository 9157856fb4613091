//! Codex in exec mode: `codex exec --json`.
//!
//! Codex has no flag that adds to the system prompt, and the alternatives that would
//! write `AGENTS.md` would show up in the user's own `git status` (and possibly their
//! commits) while they edit the same directory. So the brief travels in the prompt
//! itself, as a labelled block before the user's message. The prompt is a positional
//! argument with stdin at `/dev/null` (codex waits for EOF on an open pipe); a prompt
//! too long for one argument, or one starting with `-`, goes through stdin (`-`), which
//! is closed once written. `-C` and `--sandbox` go before `resume`. See
//! `agent-protocols.md` §2.

use super::{Invocation, Turn, TurnState, program};
use berth_core::Permissions;
use berth_core::api::Denial;
use berth_core::event::AgentEvent;
use berth_core::exec::AgentSpec;
use serde_json::Value;

/// Codex's sandbox for a policy; approvals are always off (`exec` cannot ask).
pub(crate) fn sandbox(p: Permissions) -> &'static str {
    match p {
        Permissions::ReadOnly => "read-only",
        // `codex exec` cannot ask: `ask` runs as `edit` (its note and the run say so).
        Permissions::Edit | Permissions::Ask => "workspace-write",
        Permissions::Full => "danger-full-access",
    }
}

/// What a policy means for Codex, in a sentence for `agent add` and `agent list`.
///
/// Codex's own sandbox (bubblewrap) cannot start inside Berth's fence (Landlock
/// refuses every mount): a fenced codex runs with `--sandbox danger-full-access` and
/// the fence is its sandbox. Unfenced, the policy picks codex's sandbox.
pub(crate) fn policy_note(p: Permissions) -> &'static str {
    match p {
        Permissions::ReadOnly => {
            "fenced: Berth's fence refuses every write (codex's own sandbox off); unfenced: sandbox read-only, commands run, writes fail"
        }
        Permissions::Edit => {
            "fenced: edits and commands inside the directory, by Berth's fence (codex's own sandbox off); unfenced: sandbox workspace-write, no network"
        }
        Permissions::Ask => {
            "codex exec cannot ask: runs as edit (commands without asking, kept to the directory by the fence); for approvals register codex-acp (--kind acp)"
        }
        Permissions::Full => {
            "fenced: edits and commands inside the directory, network on (Berth's fence); unfenced: sandbox danger-full-access, no sandbox at all"
        }
    }
}

/// Codex's sandbox for a turn: none of its own inside Berth's fence.
fn turn_sandbox(turn: &Turn<'_>) -> &'static str {
    if turn.fenced {
        "danger-full-access"
    } else {
        sandbox(turn.permissions)
    }
}

/// Whether the agent's own arguments choose the sandbox.
pub(crate) fn chooses_permissions(extra: &[String]) -> bool {
    extra.iter().any(|a| {
        matches!(
            a.as_str(),
            "-s" | "--sandbox" | "--dangerously-bypass-approvals-and-sandbox" | "--yolo"
        ) || a.starts_with("--sandbox=")
    })
}

/// The longest prompt passed as an argument (Linux caps one argument at 128 KiB).
const MAX_ARG: usize = 96 * 1024;

pub(super) fn invocation(spec: &AgentSpec, turn: &Turn<'_>) -> Invocation {
    let (program, extra) = program(spec, "codex");
    let mut args: Vec<String> = vec!["exec".into(), "--json".into()];
    args.push("-C".into());
    args.push(turn.work_dir.display().to_string());
    if !chooses_permissions(&extra) {
        args.push("--sandbox".to_owned());
        args.push(turn_sandbox(turn).to_owned());
        args.push("-c".to_owned());
        args.push("approval_policy=\"never\"".to_owned());
    }
    args.push("--skip-git-repo-check".into());
    args.extend(extra);
    if let Some(id) = turn.resume_id {
        args.push("resume".into());
        args.push(id.to_owned());
    }
    let prompt = match turn.brief {
        Some(brief) => format!(
            "<berth-brief>\n{}\n</berth-brief>\n\n{}",
            brief.trim_end(),
            turn.prompt
        ),
        None => turn.prompt.to_owned(),
    };
    let stdin = if prompt.len() > MAX_ARG || prompt.starts_with('-') {
        args.push("-".into());
        Some(prompt.into_bytes())
    } else {
        args.push(prompt);
        None
    };
    Invocation {
        program,
        args,
        stdin,
        pass_prefixes: &["OPENAI_", "CODEX_", "AZURE_OPENAI_"],
        env: Vec::new(),
        stdin_pipe: false,
    }
}

/// A denial Codex reports only on stderr: its tool router's refusal of a patch or a
/// command under the sandbox, e.g. `ERROR codex_core::tools::router: error=patch
/// rejected: writing is blocked by read-only sandbox; rejected by user approval
/// settings` (codex-cli 0.171; no JSON item is emitted for it).
pub(super) fn stderr_denial(line: &str, st: &mut TurnState) -> Option<AgentEvent> {
    // Inside Berth's fence codex runs without its own sandbox, and the kernel refuses
    // the write itself: apply_patch prints `Failed to write file PATH` in the router's
    // error output (codex-cli 0.171).
    if let Some(path) = line.strip_prefix("Failed to write file ") {
        return st.deny(
            None,
            Denial {
                by: None,
                tool: "apply_patch".to_owned(),
                target: path.trim().to_owned(),
            },
            Some(line.trim().to_owned()),
        );
    }
    let (_, error) = line.split_once("codex_core::tools::router: error=")?;
    let refused = error.contains("rejected by user approval settings")
        || error.contains("sandbox")
        || error.contains("declined");
    if !refused {
        return None;
    }
    let tool = if error.starts_with("patch rejected") {
        "apply_patch"
    } else {
        "command"
    };
    st.deny(
        None,
        Denial {
            by: None,
            tool: tool.to_owned(),
            target: error.trim().to_owned(),
        },
        None,
    )
}

pub(super) fn is_stale(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("no saved session found") || lower.contains("no rollout found")
}

pub(super) fn parse_line(line: &str, resumed: bool, st: &mut TurnState) -> Vec<AgentEvent> {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        if resumed && is_stale(line) {
            st.stale_resume = true;
        }
        return Vec::new();
    };
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let item = v.get("item").cloned().unwrap_or(Value::Null);
    let item_type = item.get("type").and_then(Value::as_str).unwrap_or("");
    let mut out = Vec::new();
    match v.get("type").and_then(Value::as_str) {
        Some("thread.started") => {
            let id = str_of(&v, "thread_id");
            if id.is_some() {
                st.resume_id.clone_from(&id);
            }
            out.push(AgentEvent::Started {
                resume_id: id,
                model: None,
            });
        }
        Some("item.started") => match item_type {
            "command_execution" => {
                if let Some(id) = str_of(&item, "id") {
                    st.pending_changes.insert(id);
                }
                out.push(AgentEvent::ToolUse {
                    id: str_of(&item, "id"),
                    name: "command".to_owned(),
                    input: serde_json::json!({ "command": item.get("command") }),
                });
            }
            "mcp_tool_call" => out.push(AgentEvent::ToolUse {
                id: str_of(&item, "id"),
                name: format!(
                    "{}.{}",
                    str_of(&item, "server").unwrap_or_default(),
                    str_of(&item, "tool").unwrap_or_default()
                ),
                input: item.get("arguments").cloned().unwrap_or(Value::Null),
            }),
            "web_search" => out.push(AgentEvent::ToolUse {
                id: str_of(&item, "id"),
                name: "web_search".to_owned(),
                input: serde_json::json!({ "query": item.get("query") }),
            }),
            _ => {}
        },
        Some("item.completed") => {
            let status = str_of(&item, "status");
            let failed = matches!(status.as_deref(), Some("failed" | "declined"));
            let id = str_of(&item, "id");
            let was_pending = id.as_ref().is_some_and(|i| st.pending_changes.remove(i));
            match item_type {
                "agent_message" => out.push(AgentEvent::Text {
                    text: str_of(&item, "text").unwrap_or_default(),
                }),
                "reasoning" => out.push(AgentEvent::Thinking {
                    text: str_of(&item, "text").unwrap_or_default(),
                }),
                "command_execution" => {
                    let output = str_of(&item, "aggregated_output").unwrap_or_default();
                    let is_error = failed
                        || item
                            .get("exit_code")
                            .and_then(Value::as_i64)
                            .is_some_and(|c| c != 0);
                    let command = item
                        .get("command")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    out.push(AgentEvent::ToolResult {
                        id: id.clone(),
                        output,
                        is_error,
                    });
                    // Only Codex's own verdict is a denial: a command that merely failed
                    // (even with "Permission denied" in its output) is the agent's business,
                    // and one its sandbox blocks is reported on stderr, not here.
                    if status.as_deref() == Some("declined") {
                        let denial = Denial {
                            by: None,
                            tool: "command".to_owned(),
                            target: command,
                        };
                        out.extend(st.deny(id.as_deref(), denial, None));
                    } else if !is_error && was_pending {
                        st.changes_applied += 1;
                    }
                }
                "file_change" => {
                    let paths: Vec<&str> = item
                        .get("changes")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get("path").and_then(Value::as_str))
                        .collect();
                    out.push(AgentEvent::ToolUse {
                        id: id.clone(),
                        name: "file_change".to_owned(),
                        input: item.get("changes").cloned().unwrap_or(Value::Null),
                    });
                    match status.as_deref() {
                        Some("declined") => {
                            let denial = Denial {
                                by: None,
                                tool: "file_change".to_owned(),
                                target: paths.join(", "),
                            };
                            out.extend(st.deny(id.as_deref(), denial, None));
                        }
                        Some("completed") => st.changes_applied += 1,
                        // A patch that failed to apply changed nothing and was not denied.
                        Some(_) | None => {}
                    }
                }
                "error" => out.push(AgentEvent::Error {
                    message: str_of(&item, "message").unwrap_or_default(),
                }),
                "mcp_tool_call" => out.push(AgentEvent::ToolResult {
                    id: str_of(&item, "id"),
                    output: item.get("result").map(Value::to_string).unwrap_or_default(),
                    is_error: failed,
                }),
                _ => {}
            }
        }
        Some("turn.completed") => {
            st.ok = Some(true);
            out.push(AgentEvent::Result {
                ok: true,
                text: None,
                usage: v.get("usage").cloned(),
                cost_usd: None,
            });
        }
        Some("turn.failed") => {
            let msg = v
                .pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if resumed && msg.as_deref().is_some_and(is_stale) {
                st.stale_resume = true;
                return out;
            }
            st.ok = Some(false);
            st.error.clone_from(&msg);
            out.push(AgentEvent::Result {
                ok: false,
                text: msg,
                usage: None,
                cost_usd: None,
            });
        }
        Some("error") => {
            let msg = str_of(&v, "message").unwrap_or_default();
            if resumed && is_stale(&msg) {
                st.stale_resume = true;
                return out;
            }
            st.error = Some(msg.clone());
            out.push(AgentEvent::Error { message: msg });
        }
        Some(_) | None => {}
    }
    out
}

#[cfg(test)]
mod fence_tests {
    use super::*;

    #[test]
    fn a_write_the_fence_refused_is_a_denial() {
        let mut st = TurnState::default();
        assert!(
            stderr_denial(
                "2026 ERROR codex_core::tools::router: error=Exit code: 1",
                &mut st
            )
            .is_none()
        );
        let ev = stderr_denial("Failed to write file /home/a/code/app/other.txt", &mut st);
        assert!(matches!(ev, Some(AgentEvent::Denied { .. })), "{ev:?}");
        assert_eq!(st.denials[0].tool, "apply_patch");
        assert_eq!(st.denials[0].target, "/home/a/code/app/other.txt");
    }

    #[test]
    fn a_fenced_codex_runs_without_its_own_sandbox() {
        let spec = AgentSpec {
            name: "codex".into(),
            kind: berth_core::exec::AgentKind::Codex,
            command: vec![],
            permissions: None,
        };
        for (fenced, want) in [(true, "danger-full-access"), (false, "read-only")] {
            let turn = Turn {
                prompt: "hi",
                brief: None,
                resume_id: None,
                work_dir: std::path::Path::new("/w"),
                permissions: Permissions::ReadOnly,
                fenced,
            };
            let inv = invocation(&spec, &turn);
            let at = inv.args.iter().position(|a| a == "--sandbox").unwrap();
            assert_eq!(inv.args[at + 1], want);
        }
    }
}
