//! Berth's own event types: what an agent did, whichever CLI it was.
//!
//! Adapters parse `claude`'s and `codex`'s JSON streams (and a `command` agent's
//! stdout) into [`AgentEvent`]; the server appends them to the session's transcript,
//! and the CLI and the browser render them. Agent text is untrusted: surfaces render it
//! as text, never as markup.

use serde::{Deserialize, Serialize};

/// One thing an agent did or said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The agent started; `resume_id` is its session/thread id when it reports one.
    Started {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    /// Text for the user (assistant message, or a `command` agent's stdout line).
    Text { text: String },
    /// The agent's visible reasoning.
    Thinking { text: String },
    /// A piece of a message (or, `thought`, of the reasoning) as the agent streams it:
    /// for live listeners only. Never stored: the transcript gets the whole message
    /// once, as a [`AgentEvent::Text`] (or [`AgentEvent::Thinking`]) right after its
    /// last piece, so a replay is unchanged and compact. `part` counts the message's
    /// pieces from 0: a listener that missed one (it joined late, or fell behind)
    /// waits for the whole message instead.
    Delta {
        text: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        thought: bool,
        part: u32,
    },
    /// A tool call.
    ToolUse {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        name: String,
        #[serde(default)]
        input: serde_json::Value,
    },
    /// A tool call as an ACP agent reports it, each time it changes: what kind of
    /// action (`read`, `edit`, `delete`, `move`, `search`, `execute`, `think`,
    /// `fetch`, `other`), its title, where it acts, and how far it is (`pending`,
    /// `in_progress`, `completed`, `failed`).
    Tool {
        id: String,
        kind: String,
        title: String,
        status: String,
        /// The paths it reads or changes (absolute; redacted on the web).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        locations: Vec<String>,
    },
    /// A change to one file an ACP agent proposed or made: the whole text before
    /// (`None` for a new file) and after.
    Diff {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        old_text: Option<String>,
        new_text: String,
    },
    /// The agent's plan, whole, each time it changes.
    Plan { entries: Vec<PlanEntry> },
    /// A tool's result.
    ToolResult {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        output: String,
        #[serde(default)]
        is_error: bool,
    },
    /// A diagnostic line: what the agent's CLI wrote to stderr (progress, reconnect
    /// notices), or a warning of Berth's own (prefixed `berth:`). Never the agent's
    /// words: surfaces show it apart, dimmed.
    Stderr { line: String },
    /// An error the agent's CLI reported without ending the turn (Codex's `error`
    /// items), or with it.
    Error { message: String },
    /// An action denied: by the agent's own permission system (`by` absent), or by
    /// Berth's fence (`by: "fence"`). The tool and its target.
    Denied {
        tool: String,
        #[serde(default)]
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Keys of the bound directory's project layer that Berth did not apply (an
    /// untrusted directory's `env`, a widening of permissions, a variable never taken
    /// from a project layer), with the command that trusts the directory. Berth's own
    /// event, sent before the agent starts.
    Ignored {
        /// The settings file, as displayed.
        file: String,
        /// The directory trust is given to, as displayed.
        dir: String,
        trust: crate::settings::trust::Trust,
        keys: Vec<crate::settings::trust::KeyVerdict>,
        /// `berth trust DIR`, when trust would apply something ignored.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint: Option<String>,
    },
    /// Whether the agent runs fenced, and in what: Berth's own event, before the agent
    /// starts. Fenced, `text` is what the fence lets it write and reach
    /// (`~/code/app + tmp · network on (Landlock ABI 7)`); unfenced, why not.
    Fence { fenced: bool, text: String },
    /// What Berth is doing before the agent can start, and how far it is: Berth's own
    /// event, sent while a wait lasts (`recording ~/code/mono: 41,000 of 100,000
    /// files`). `done` of `total` items (`total` 0 while unknown).
    Progress { text: String, done: u64, total: u64 },
    /// The agent's final result for the turn.
    Result {
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
    },
}

impl AgentEvent {
    /// Whether the event is for live listeners only ([`AgentEvent::Delta`]): shown
    /// as it arrives, never appended to the transcript.
    pub fn is_live_only(&self) -> bool {
        matches!(self, AgentEvent::Delta { .. })
    }
}

/// One step of an agent's [`AgentEvent::Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub content: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
    /// `high`, `medium` or `low`.
    #[serde(default)]
    pub priority: String,
}
