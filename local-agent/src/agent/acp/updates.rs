//! `session/update` as transcript events. Message and thought chunks go out as they
//! arrive, each a live-only [`AgentEvent::Delta`], and are gathered into one text (or
//! thinking) event, sent when something else comes (the transcript stores that one,
//! whole); a tool call is kept
//! by id and merged with each update (every field of an update is optional, and an
//! agent may update, or ask permission for, a call it never announced), and becomes a
//! [`AgentEvent::Tool`] each time it changes, a [`AgentEvent::ToolResult`] when it
//! ends with output, and a [`AgentEvent::Diff`] per file it changes; a plan becomes a
//! [`AgentEvent::Plan`]. Unknown updates are ignored: agents add their own.

use crate::agent::adapter::TurnState;
use berth_core::api::Denial;
use berth_core::event::{AgentEvent, PlanEntry};
use serde_json::Value;
use std::collections::HashMap;

/// What Berth knows of one tool call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ToolCall {
    pub id: String,
    pub kind: String,
    pub title: String,
    pub status: String,
    /// The paths it acts on: its locations, its diffs' paths, and a path in its input.
    pub paths: Vec<String>,
    /// A command in its input, for a denial's target.
    pub command: Option<String>,
    /// Where [`ToolCall::paths`] come from, each as the latest update that had it set
    /// it: an update's `locations`, `content` and `rawInput` *replace* the earlier
    /// ones (the ACP schema), so a stale path announced earlier never counts.
    locations: Vec<String>,
    diffs: Vec<String>,
    inputs: Vec<String>,
}

impl ToolCall {
    /// The denial's tool: the title the agent gave, else the kind.
    pub fn name(&self) -> String {
        if self.title.is_empty() {
            self.kind.clone()
        } else {
            self.title.clone()
        }
    }

    /// The denial's target: the first path, else the command.
    pub fn target(&self) -> String {
        self.paths
            .first()
            .cloned()
            .or_else(|| self.command.clone())
            .unwrap_or_default()
    }

    fn event(&self) -> AgentEvent {
        AgentEvent::Tool {
            id: self.id.clone(),
            kind: self.kind.clone(),
            title: self.title.clone(),
            status: self.status.clone(),
            locations: self.paths.clone(),
        }
    }
}

/// A tool call as the rules see it (its kind, command, paths), owned apart from the
/// view so the view may change meanwhile.
#[derive(Debug, Clone)]
pub(super) struct Subject {
    kind: String,
    command: Option<String>,
    paths: Vec<String>,
}

impl Subject {
    pub fn of(t: &ToolCall) -> Subject {
        Subject {
            kind: t.kind.clone(),
            command: t.command.clone(),
            paths: t.paths.clone(),
        }
    }

    pub fn subject(&self) -> berth_core::approval::Subject<'_> {
        berth_core::approval::Subject {
            kind: &self.kind,
            command: self.command.as_deref(),
            paths: &self.paths,
        }
    }
}

/// The turn's view of the agent's updates.
#[derive(Debug, Default)]
pub(super) struct View {
    tools: HashMap<String, ToolCall>,
    text: String,
    thought: String,
    /// How many pieces of the message (and of the thought) went out as deltas.
    text_parts: u32,
    thought_parts: u32,
    /// The last message the agent finished, for the turn's result.
    pub last_text: Option<String>,
    /// The latest usage the agent reported in an update.
    pub usage: Option<Value>,
    pub cost_usd: Option<f64>,
}

fn text_of(content: &Value) -> Option<&str> {
    (content["type"] == "text")
        .then(|| content["text"].as_str())
        .flatten()
}

/// What opencode says when its own permission rules refuse a tool call without
/// asking (a `deny` rule, or its `plan` mode's refusal of edits): its
/// `PermissionDeniedError`.
const OWN_RULE_REFUSAL: &str =
    "The user has specified a rule which prevents you from using this specific tool call";

/// A failed tool call's refusal by the agent's own rules, as its denial's message.
fn own_rule_refusal(output: &str) -> Option<String> {
    output
        .lines()
        .find(|l| l.contains(OWN_RULE_REFUSAL))
        .map(|l| crate::agent::adapter::cut(l.trim(), 300).to_owned())
}

/// The command line an argument vector runs: a shell's script itself (`bash -lc
/// 'cargo test'` is `cargo test`, as codex-acp sends its commands), else each word
/// quoted as a shell would need it, so what a person reads (and a rule matches) is
/// what runs.
pub(super) fn command_line(argv: &[&str]) -> String {
    const SHELLS: [&str; 6] = ["sh", "bash", "zsh", "/bin/sh", "/bin/bash", "/usr/bin/bash"];
    if let [shell, flag, script] = argv
        && SHELLS.contains(shell)
        && matches!(*flag, "-c" | "-lc")
    {
        return (*script).to_owned();
    }
    argv.iter()
        .map(|w| berth_core::quote::shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

fn push_path(paths: &mut Vec<String>, p: Option<&str>) {
    if let Some(p) = p.filter(|p| !p.is_empty())
        && !paths.iter().any(|q| q == p)
    {
        paths.push(p.to_owned());
    }
}

impl View {
    /// Merges a tool call (or an update of one) into what is known of it.
    pub fn merge(&mut self, call: &Value) -> ToolCall {
        let id = call["toolCallId"].as_str().unwrap_or_default().to_owned();
        let t = self.tools.entry(id.clone()).or_insert_with(|| ToolCall {
            id,
            kind: "other".to_owned(),
            status: "pending".to_owned(),
            ..ToolCall::default()
        });
        if let Some(k) = call["kind"].as_str() {
            t.kind = k.to_owned();
        }
        if let Some(s) = call["title"].as_str() {
            t.title = s.to_owned();
        }
        if let Some(s) = call["status"].as_str() {
            t.status = s.to_owned();
        }
        if let Some(locations) = call["locations"].as_array() {
            t.locations.clear();
            for l in locations {
                push_path(&mut t.locations, l["path"].as_str());
            }
        }
        if let Some(content) = call["content"].as_array() {
            t.diffs.clear();
            for c in content.iter().filter(|c| c["type"] == "diff") {
                push_path(&mut t.diffs, c["path"].as_str());
            }
        }
        let input = &call["rawInput"];
        if input.is_object() {
            t.inputs.clear();
            for key in [
                "file_path",
                "path",
                "absolute_path",
                "filePath",
                "notebook_path",
            ] {
                push_path(&mut t.inputs, input[key].as_str());
            }
            if let Some(cmd) = input["command"].as_str() {
                t.command = Some(cmd.to_owned());
            } else if let Some(argv) = input["command"].as_array() {
                let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
                t.command = Some(command_line(&argv));
            }
        }
        let mut paths = Vec::new();
        for p in t.locations.iter().chain(&t.diffs).chain(&t.inputs) {
            push_path(&mut paths, Some(p));
        }
        t.paths = paths;
        t.clone()
    }

    /// The events one update makes (`update` is the `update` member of the params).
    pub fn update(&mut self, update: &Value, st: &mut TurnState, fenced: bool) -> Vec<AgentEvent> {
        let mut out = Vec::new();
        match update["sessionUpdate"].as_str().unwrap_or_default() {
            "agent_message_chunk" => {
                if let Some(t) = text_of(&update["content"]).filter(|t| !t.is_empty()) {
                    out.extend(self.flush_thought());
                    out.push(AgentEvent::Delta {
                        text: t.to_owned(),
                        thought: false,
                        part: self.text_parts,
                    });
                    self.text_parts += 1;
                    self.text.push_str(t);
                }
            }
            "agent_thought_chunk" => {
                if let Some(t) = text_of(&update["content"]).filter(|t| !t.is_empty()) {
                    out.extend(self.flush_text());
                    out.push(AgentEvent::Delta {
                        text: t.to_owned(),
                        thought: true,
                        part: self.thought_parts,
                    });
                    self.thought_parts += 1;
                    self.thought.push_str(t);
                }
            }
            kind @ ("tool_call" | "tool_call_update") => {
                out.extend(self.flush());
                let id = update["toolCallId"].as_str().unwrap_or_default();
                let before = self.tools.get(id).cloned();
                let t = self.merge(update);
                if kind == "tool_call" || before.as_ref() != Some(&t) {
                    out.push(t.event());
                }
                // What a fenced run's refusals look like: the call's name and target.
                st.tool_names.insert(t.id.clone(), t.name());
                st.targets.insert(t.id.clone(), t.target());
                for c in update["content"].as_array().into_iter().flatten() {
                    if c["type"] == "diff"
                        && let (Some(path), Some(new)) = (c["path"].as_str(), c["newText"].as_str())
                    {
                        out.push(AgentEvent::Diff {
                            path: path.to_owned(),
                            old_text: c["oldText"].as_str().map(str::to_owned),
                            new_text: new.to_owned(),
                        });
                    }
                }
                let ended = matches!(t.status.as_str(), "completed" | "failed");
                let was_ended = before
                    .as_ref()
                    .is_some_and(|b| matches!(b.status.as_str(), "completed" | "failed"));
                if ended && !was_ended {
                    if t.status == "completed"
                        && matches!(t.kind.as_str(), "edit" | "delete" | "move")
                    {
                        st.changes_applied += 1;
                    }
                    let output: Vec<&str> = update["content"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|c| c["type"] == "content")
                        .filter_map(|c| text_of(&c["content"]))
                        .collect();
                    let output = output.join("\n");
                    let failed = t.status == "failed";
                    // A refusal by the fence, failed or completed (a shell call
                    // completes whatever its commands' fate); ACP's reading kinds
                    // return content, never their own refusal when completed.
                    let reads = matches!(t.kind.as_str(), "read" | "search" | "fetch" | "think");
                    let denied = if failed && let Some(rule) = own_rule_refusal(&output) {
                        let denial = Denial {
                            tool: t.name(),
                            target: t.target(),
                            by: None,
                        };
                        st.deny(Some(&t.id), denial, Some(rule))
                    } else if fenced {
                        st.fence_result(Some(&t.id), &output, failed, reads)
                    } else {
                        None
                    };
                    let result = AgentEvent::ToolResult {
                        id: Some(t.id.clone()),
                        output,
                        is_error: failed,
                    };
                    out.push(result);
                    out.extend(denied);
                }
            }
            "plan" => {
                out.extend(self.flush());
                let entries = update["entries"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| PlanEntry {
                        content: e["content"].as_str().unwrap_or_default().to_owned(),
                        status: e["status"].as_str().unwrap_or("pending").to_owned(),
                        priority: e["priority"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect();
                out.push(AgentEvent::Plan { entries });
            }
            "usage_update" => {
                let mut u = update.clone();
                if let Some(o) = u.as_object_mut() {
                    o.remove("sessionUpdate");
                }
                self.cost_usd = update["cost"]["amount"]
                    .as_f64()
                    .filter(|_| update["cost"]["currency"] == "USD")
                    .or(self.cost_usd);
                self.usage = Some(u);
            }
            // `user_message_chunk` (a replay), modes, commands, config, session info,
            // and what later versions add.
            _ => {}
        }
        out
    }

    fn flush_text(&mut self) -> Option<AgentEvent> {
        self.text_parts = 0;
        if self.text.is_empty() {
            return None;
        }
        let text = std::mem::take(&mut self.text);
        self.last_text = Some(text.clone());
        Some(AgentEvent::Text { text })
    }

    fn flush_thought(&mut self) -> Option<AgentEvent> {
        self.thought_parts = 0;
        if self.thought.is_empty() {
            return None;
        }
        Some(AgentEvent::Thinking {
            text: std::mem::take(&mut self.thought),
        })
    }

    /// The gathered text and thinking, as events.
    pub fn flush(&mut self) -> Vec<AgentEvent> {
        self.flush_thought()
            .into_iter()
            .chain(self.flush_text())
            .collect()
    }
}

/// The token usage in a `session/prompt` answer: ACP's `usage` (not yet in stable
/// v1; Claude's and the ACP org's Codex adapters send it), or Gemini CLI's
/// `_meta.quota.token_count`.
pub(super) fn usage(answer: &Value) -> Option<Value> {
    if answer["usage"].is_object() {
        return Some(answer["usage"].clone());
    }
    let count = &answer["_meta"]["quota"]["token_count"];
    count.is_object().then(|| {
        serde_json::json!({
            "inputTokens": count["input_tokens"],
            "outputTokens": count["output_tokens"],
        })
    })
}
