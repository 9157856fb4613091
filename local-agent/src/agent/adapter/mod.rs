//! How each kind of agent is started and how its output becomes Berth's events.
//!
//! An adapter is pure: it builds the invocation (program, arguments, stdin, extra
//! environment) for one turn and parses output lines into
//! [`berth_core::event::AgentEvent`], tracking the resume id and whether the resume id
//! it was given turned out to be stale. The executor does the spawning.

pub mod claude;
pub mod codex;
pub mod command;

use berth_core::Permissions;
use berth_core::api::Denial;
use berth_core::event::AgentEvent;
use berth_core::exec::{AgentKind, AgentSpec};
use std::collections::{HashMap, HashSet};
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
    /// The run's effective permission policy.
    pub permissions: Permissions,
    /// Whether Berth's fence confines the agent (codex then runs without its own
    /// sandbox, which cannot start inside it).
    pub fenced: bool,
}

/// What to run for one turn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Invocation {
    pub program: String,
    pub args: Vec<String>,
    /// Bytes written to stdin, which is then closed; `None` means stdin is `/dev/null`
    /// (unless [`Invocation::stdin_pipe`]).
    pub stdin: Option<Vec<u8>>,
    /// Stdin stays an open pipe that the turn's driver writes to ([`AgentProcess::stdin`]):
    /// an ACP agent's requests.
    ///
    /// [`AgentProcess::stdin`]: crate::agent::process::AgentProcess::stdin
    pub stdin_pipe: bool,
    /// Environment variable prefixes passed through from Berth's own environment
    /// (credentials the agent's CLI reads).
    pub pass_prefixes: &'static [&'static str],
    /// Variables the adapter sets for this agent, over the pass-through and the
    /// settings' `env` (see [`crate::agent::process::agent_env`]); empty for most.
    pub env: Vec<(&'static str, String)>,
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
    /// What the agent's own permission system denied, in order, once per action.
    pub denials: Vec<Denial>,
    /// The tool-call ids already counted as denied (a denial is reported twice by
    /// Claude Code: as it happens and again in the final result).
    pub denied_ids: HashSet<String>,
    /// Tool calls that could change files, by id, until their result arrives.
    pub pending_changes: HashSet<String>,
    /// What each tool call was aimed at, by id, for a denial reported without it.
    pub targets: HashMap<String, String>,
    /// How many actions that could change files went through.
    pub changes_applied: u32,
    /// Each tool call's name, by id, for a refusal by the fence named in its result.
    pub tool_names: HashMap<String, String>,
    /// Refusals by the fence seen beyond [`MAX_FENCE_DENIALS`], not listed.
    pub fence_denials_dropped: u32,
    /// How many pieces of the message streaming now went out as deltas (Claude
    /// Code's partial messages).
    pub streamed_parts: u32,
    /// Why the agent could not be started, when it got that far and no further (an
    /// ACP agent that never answered `initialize`): the task's `agent_start_failed`.
    pub start_failed: Option<String>,
    /// The token usage the turn's result reported, normalized: the task's `usage`.
    pub usage: Option<berth_core::usage::Usage>,
}

/// Whether `text` names `path` (a whole path, not the start of a longer name), or,
/// with `entry`, something in the directory `path`.
fn names_path(text: &str, path: &str, entry: bool) -> bool {
    text.match_indices(path).any(|(at, _)| {
        let next = text[at + path.len()..].chars().next();
        if entry {
            next == Some('/')
        } else {
            !next.is_some_and(|c| c == '/' || c.is_alphanumeric() || matches!(c, '.' | '-' | '_'))
        }
    })
}

/// The most refusals by the fence a turn lists (a `find /` prints thousands).
pub const MAX_FENCE_DENIALS: usize = 20;

/// The words of the kernel's three refusals as `strerror` gives them: `EACCES`
/// (`Permission denied`, Landlock's answer), `EPERM` (`Operation not permitted`, the
/// seccomp filter's) and `EROFS` (`Read-only file system`, the in-place layer's binds
/// of `.git/hooks`, `.git/config` and `.berth`).
const STRERRORS: [&str; 3] = [
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
];

/// The shapes a refusal takes in a runtime's own words, beyond `strerror`'s: the
/// error names (Node's `EACCES: permission denied, open '…'`, Go's and Rust's
/// `permission denied`), Rust's `(os error 13)`, Python's `[Errno 13]`, and opencode's
/// `PermissionDenied: FileSystem.writeFile (…)` (its Effect file system's error tag).
const RUNTIME_FORMS: [&str; 10] = [
    "EACCES:",
    "EPERM:",
    "EROFS:",
    "(os error 13)",
    "(os error 1)",
    "(os error 30)",
    "[Errno 13]",
    "[Errno 1]",
    "[Errno 30]",
    "PermissionDenied: FileSystem.",
];

/// Whether a failed tool result (or a fenced command agent's stderr line) names an
/// action the kernel refused: any of [`STRERRORS`] or [`RUNTIME_FORMS`] anywhere in
/// it. Only asked of a fenced run's output, and only of what a tool or the agent's
/// process reported, never of the agent's prose.
pub fn names_a_refusal(text: &str) -> bool {
    STRERRORS
        .iter()
        .chain(RUNTIME_FORMS.iter())
        .any(|t| text.contains(t))
}

/// Whether a tool result that the agent reports as *completed* carries a refusal: a
/// line as a program prints one, `PROGRAM: …: <strerror>` (the `strerror` text ends
/// the line, after `": "`, as `touch: cannot touch 'x': Permission denied` does), or
/// one of [`RUNTIME_FORMS`]. A shell call completes whatever its commands' fate (opencode
/// reports `touch`'s refusal so), so its output is all there is; the stricter shape
/// keeps a successful output that merely mentions the words (a file's text, a log
/// line quoted mid-sentence) from counting.
pub fn reports_a_refusal(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_end();
        STRERRORS.iter().any(|t| {
            line.strip_suffix(t)
                .is_some_and(|head| head.ends_with(": "))
        }) || RUNTIME_FORMS.iter().any(|t| line.contains(t))
    })
}

/// The line of `text` that names the refusal, for the denial's message: the first
/// shaped as a program's refusal, else the first with a refusal's words.
fn refusal_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| reports_a_refusal(l))
        .or_else(|| text.lines().find(|l| names_a_refusal(l)))
        .unwrap_or(text)
        .trim();
    cut(line, 300).to_owned()
}

/// The tools that only read (Claude Code's names; opencode's and other ACP agents'
/// tools are told by their ACP kind instead): what they return is a file's or a
/// page's text, so a refusal's words in a *completed* result of theirs are content,
/// not a refusal of theirs.
const READING_TOOLS: [&str; 7] = [
    "Read",
    "Grep",
    "Glob",
    "LS",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
];

impl TurnState {
    /// Records a denial once per tool-call id (every call without an id counts); the
    /// event to report, unless this call's denial was already reported.
    pub fn deny(
        &mut self,
        id: Option<&str>,
        denial: Denial,
        message: Option<String>,
    ) -> Option<AgentEvent> {
        if let Some(id) = id
            && !self.denied_ids.insert(id.to_owned())
        {
            return None;
        }
        self.denials.push(denial.clone());
        Some(AgentEvent::Denied {
            tool: denial.tool,
            target: denial.target,
            message,
            by: denial.by,
        })
    }

    /// What a fenced run's event tells of the fence: a tool call's name is kept; a
    /// tool result goes to [`TurnState::fence_result`] (a tool of [`READING_TOOLS`]
    /// only reads). Returns the event to report.
    pub fn fence_event(&mut self, ev: &AgentEvent) -> Option<AgentEvent> {
        match ev {
            AgentEvent::ToolUse {
                id: Some(id), name, ..
            } => {
                self.tool_names.insert(id.clone(), name.clone());
                None
            }
            AgentEvent::ToolResult {
                id,
                output,
                is_error,
            } => {
                let reads = id
                    .as_ref()
                    .and_then(|i| self.tool_names.get(i))
                    .is_some_and(|n| READING_TOOLS.contains(&n.as_str()));
                self.fence_result(id.as_deref(), output, *is_error, reads)
            }
            AgentEvent::ToolUse { id: None, .. }
            | AgentEvent::Started { .. }
            | AgentEvent::Text { .. }
            | AgentEvent::Thinking { .. }
            | AgentEvent::Delta { .. }
            | AgentEvent::Stderr { .. }
            | AgentEvent::Error { .. }
            | AgentEvent::Denied { .. }
            | AgentEvent::Ignored { .. }
            | AgentEvent::Fence { .. }
            | AgentEvent::Progress { .. }
            | AgentEvent::Tool { .. }
            | AgentEvent::Diff { .. }
            | AgentEvent::Plan { .. }
            | AgentEvent::Result { .. } => None,
        }
    }

    /// A fenced run's tool result, `failed` or completed, from a tool that only
    /// `reads` or not: a denial by the fence (once per call, at most
    /// [`MAX_FENCE_DENIALS`] a turn) when a failed result [`names_a_refusal`], or a
    /// completed one of a tool that does more than read [`reports_a_refusal`]. Returns
    /// the event to report.
    pub fn fence_result(
        &mut self,
        id: Option<&str>,
        output: &str,
        failed: bool,
        reads: bool,
    ) -> Option<AgentEvent> {
        let refused = if failed {
            names_a_refusal(output)
        } else {
            !reads && reports_a_refusal(output)
        };
        if !refused {
            return None;
        }
        let tool = id
            .and_then(|i| self.tool_names.get(i).cloned())
            .unwrap_or_else(|| "tool".to_owned());
        let target = id
            .and_then(|i| self.targets.get(i).cloned())
            .unwrap_or_default();
        self.fence_deny(id, tool, target, output)
    }

    /// A line a fenced `command` agent wrote to stderr that names a refusal: a denial
    /// by the fence, with the line as its target.
    pub fn fence_stderr(&mut self, line: &str) -> Option<AgentEvent> {
        if !names_a_refusal(line) {
            return None;
        }
        self.fence_deny(None, "command".to_owned(), refusal_line(line), line)
    }

    fn fence_deny(
        &mut self,
        id: Option<&str>,
        tool: String,
        target: String,
        output: &str,
    ) -> Option<AgentEvent> {
        let message = refusal_line(output);
        self.fence_denial(id, tool, target, message)
    }

    /// A denial by the fence, listed unless [`MAX_FENCE_DENIALS`] are (then counted).
    fn fence_denial(
        &mut self,
        id: Option<&str>,
        tool: String,
        target: String,
        message: String,
    ) -> Option<AgentEvent> {
        let listed = self
            .denials
            .iter()
            .filter(|d| d.by.as_deref() == Some("fence"))
            .count();
        if listed >= MAX_FENCE_DENIALS {
            self.fence_denials_dropped += 1;
            return None;
        }
        self.deny(
            id,
            Denial {
                tool,
                target,
                by: Some("fence".to_owned()),
            },
            Some(message),
        )
    }

    /// The denials the kernel's audit reported (`fence::audit`): `(blockers, target)`,
    /// Landlock's name of the access (`fs.write_file`) and its path. Each is listed
    /// unless a denial by the fence read from the agent's output names that path
    /// already. Returns the events to report.
    pub fn audited_denials(&mut self, denied: Vec<(String, String)>) -> Vec<AgentEvent> {
        let read: Vec<String> = self
            .denials
            .iter()
            .filter(|d| d.by.as_deref() == Some("fence"))
            .map(|d| d.target.clone())
            .collect();
        let mut events = Vec::new();
        for (blockers, target) in denied {
            // A new entry's record names its directory (`fs.make_reg` in `/h`): the
            // output names the entry (`cannot create /h/x`).
            let entry = blockers.starts_with("fs.make_");
            if target.len() > 1 && read.iter().any(|r| names_path(r, &target, entry)) {
                continue;
            }
            events.extend(self.fence_denial(
                None,
                blockers,
                target,
                "the kernel's audit record of the fence's refusal".to_owned(),
            ));
        }
        events
    }

    /// Whether every action that could have changed something was denied: a turn that
    /// must not look like a clean success.
    pub fn all_denied(&self) -> bool {
        !self.denials.is_empty() && self.changes_applied == 0
    }
}

/// How an agent kind is driven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    Command,
    Claude,
    Codex,
    /// An Agent Client Protocol agent, driven by [`crate::agent::acp`].
    Acp,
}

impl Adapter {
    pub fn for_kind(kind: AgentKind) -> Adapter {
        match kind {
            AgentKind::Command => Adapter::Command,
            AgentKind::Claude => Adapter::Claude,
            AgentKind::Codex => Adapter::Codex,
            AgentKind::Acp => Adapter::Acp,
        }
    }

    /// The kind of agent this adapter drives.
    pub fn kind(self) -> AgentKind {
        match self {
            Adapter::Command => AgentKind::Command,
            Adapter::Claude => AgentKind::Claude,
            Adapter::Codex => AgentKind::Codex,
            Adapter::Acp => AgentKind::Acp,
        }
    }

    /// Where skill folders go for this agent, if it reads any from its directory.
    pub fn skills_dir(self) -> Option<&'static str> {
        match self {
            Adapter::Claude => Some(".claude/skills"),
            Adapter::Codex => Some(".agents/skills"),
            Adapter::Command | Adapter::Acp => None,
        }
    }

    /// The instructions file that carries the brief when it is too long for the
    /// directory-free channel, if the agent reads one.
    pub fn brief_file(self) -> Option<&'static str> {
        match self {
            Adapter::Claude => Some("CLAUDE.md"),
            // Codex and ACP agents take the brief in the prompt, which has no length
            // limit on stdin.
            Adapter::Codex | Adapter::Command | Adapter::Acp => None,
        }
    }

    /// The agent kind's own state, which it writes wherever it runs (the fence lets
    /// it): Claude Code's `~/.claude/` (or `$CLAUDE_CONFIG_DIR`) and `~/.claude.json`,
    /// Codex's `$CODEX_HOME` (or `~/.codex/`); nothing for a command agent. `var`
    /// looks a variable up in the agent's environment. Each path is created by
    /// [`Adapter::create_state`] before the spawn when missing: the fence's rules need
    /// existing files.
    pub fn fence_state(
        self,
        home: Option<&Path>,
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Vec<(std::path::PathBuf, berth_core::fence::WriteKind)> {
        self.state_paths(home, &var)
    }

    fn state_paths(
        self,
        home: Option<&Path>,
        var: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Vec<(std::path::PathBuf, berth_core::fence::WriteKind)> {
        use berth_core::fence::WriteKind;
        let set = |name: &str| {
            var(name)
                .filter(|v| !v.is_empty())
                .map(std::path::PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        match self {
            Adapter::Command => Vec::new(),
            Adapter::Claude => {
                let mut out = Vec::new();
                match set("CLAUDE_CONFIG_DIR") {
                    Some(dir) => out.push((dir, WriteKind::Subtree)),
                    None => {
                        if let Some(home) = home {
                            out.push((home.join(".claude"), WriteKind::Subtree));
                        }
                    }
                }
                // Read and rewritten in place when its lock and atomic rename are
                // refused (a file rule gives no right to create beside it).
                if let Some(home) = home {
                    out.push((home.join(".claude.json"), WriteKind::File));
                }
                out
            }
            Adapter::Codex => set("CODEX_HOME")
                .or_else(|| home.map(|h| h.join(".codex")))
                .map(|dir| vec![(dir, WriteKind::Subtree)])
                .unwrap_or_default(),
            // What the ACP agents Berth knows keep in the home: Gemini CLI's
            // `~/.gemini` (its sessions, for `session/load`), the Codex adapter's
            // `$CODEX_HOME`, the Claude adapter's Claude Code state, and opencode's
            // `opencode` folder in each XDG base directory (its sessions database,
            // logs, locks, the `.gitignore` it keeps beside its configuration and its
            // tools cache). Another agent's state goes in the user settings'
            // `"fence": {"write": [...]}`.
            Adapter::Acp => {
                let mut out = Adapter::Codex.state_paths(home, var);
                if let Some(home) = home {
                    out.push((home.join(".gemini"), WriteKind::Subtree));
                }
                out.extend(Adapter::Claude.state_paths(home, var));
                for (xdg, under_home) in [
                    ("XDG_DATA_HOME", ".local/share"),
                    ("XDG_STATE_HOME", ".local/state"),
                    ("XDG_CONFIG_HOME", ".config"),
                    ("XDG_CACHE_HOME", ".cache"),
                ] {
                    if let Some(base) = set(xdg).or_else(|| home.map(|h| h.join(under_home))) {
                        out.push((base.join("opencode"), WriteKind::Subtree));
                    }
                }
                out
            }
        }
    }

    /// Creates what [`Adapter::fence_state`] names and is missing: directories
    /// (0700), and files with what the agent expects of a new one (`{}` for Claude
    /// Code's `~/.claude.json`, 0600).
    pub fn create_state(
        state: &[(std::path::PathBuf, berth_core::fence::WriteKind)],
    ) -> std::io::Result<()> {
        use berth_core::fence::WriteKind;
        for (path, kind) in state {
            match kind {
                WriteKind::Subtree => {
                    if !path.exists() {
                        berth_host::private::dir(path)?;
                    }
                }
                WriteKind::File => {
                    if std::fs::symlink_metadata(path).is_err() {
                        use std::io::Write;
                        use std::os::unix::fs::OpenOptionsExt;
                        match std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(0o600)
                            .open(path)
                        {
                            Ok(mut f) => f.write_all(b"{}\n")?,
                            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// What `permissions` means for this kind of agent, in one sentence.
    pub fn policy_note(self, permissions: Permissions) -> &'static str {
        match self {
            Adapter::Claude => claude::policy_note(permissions),
            Adapter::Codex => codex::policy_note(permissions),
            Adapter::Command => match permissions {
                Permissions::ReadOnly => {
                    "no permission prompts (a command agent has none); where the fence is on it writes nothing but its tmp, and unfenced whatever its program does"
                }
                Permissions::Ask => {
                    "a command agent cannot ask: runs as edit; where the fence is on it edits its directory only, and unfenced whatever its program does"
                }
                Permissions::Edit | Permissions::Full => {
                    "no permission prompts (a command agent has none); where the fence is on it edits its directory only, and unfenced whatever its program does"
                }
            },
            Adapter::Acp => match permissions {
                Permissions::ReadOnly => {
                    "Berth answers the agent's permission requests: reading and searching only; its file writes through Berth are refused"
                }
                Permissions::Edit => {
                    "Berth answers the agent's permission requests: edits inside the directory, and commands where the fence confines them"
                }
                Permissions::Ask => {
                    "Berth answers reads and edits inside the directory; every other request waits for your answer (berth approvals)"
                }
                Permissions::Full => "Berth allows every permission request the agent makes",
            },
        }
    }

    /// Why `permissions` will not be honoured for `spec`, if it will not: a command
    /// agent has no permission system, so unfenced nothing holds it (fenced, the fence
    /// does: a read-only run's directory is unwritable, an edit run writes it alone);
    /// and an agent whose own arguments choose its permissions keeps them.
    pub fn unenforced(
        self,
        spec: &AgentSpec,
        permissions: Permissions,
        fenced: bool,
    ) -> Option<String> {
        let (_, extra) = program(spec, "");
        match self {
            // Neither has a way to ask: `ask` runs as `edit`, and every run says so.
            Adapter::Command if permissions == Permissions::Ask => Some(format!(
                "permissions ask cannot be kept by the command agent {:?}: it has no protocol to ask with, so it runs as edit{}",
                spec.name,
                if fenced { " (the fence keeps it to its directory)" } else { ", and this run is unfenced" }
            )),
            Adapter::Codex
                if permissions == Permissions::Ask && !codex::chooses_permissions(&extra) =>
            {
                Some(format!(
                    "permissions ask cannot be kept by the codex agent {:?}: codex exec has no way to ask, so it runs as edit; for approvals register Codex through codex-acp (--kind acp)",
                    spec.name
                ))
            }
            Adapter::Command if fenced => None,
            Adapter::Command => spec.permissions.map(|p| {
                format!(
                    "permissions {p} are not enforced for the command agent {:?}: it has no permission system of its own, and this run is unfenced",
                    spec.name
                )
            }),
            Adapter::Claude if claude::chooses_permissions(&extra) => Some(format!(
                "permissions {permissions} are not applied: the agent {:?} chooses its own with its arguments",
                spec.name
            )),
            Adapter::Codex if codex::chooses_permissions(&extra) => Some(format!(
                "permissions {permissions} are not applied: the agent {:?} chooses its own sandbox with its arguments",
                spec.name
            )),
            Adapter::Claude | Adapter::Codex | Adapter::Acp => None,
        }
    }

    /// The invocation for one turn.
    pub fn invocation(self, spec: &AgentSpec, turn: &Turn<'_>) -> Result<Invocation, AdapterError> {
        match self {
            Adapter::Command => command::invocation(spec, turn),
            Adapter::Claude => Ok(claude::invocation(spec, turn)),
            Adapter::Codex => Ok(codex::invocation(spec, turn)),
            Adapter::Acp => {
                let (program, args) = program(spec, "");
                if program.is_empty() {
                    return Err(AdapterError::EmptyCommand {
                        name: spec.name.clone(),
                    });
                }
                let env = acp_env(&program, &args, turn.permissions);
                let args = acp_args(&program, args, turn.permissions);
                Ok(Invocation {
                    program,
                    args,
                    stdin: None,
                    stdin_pipe: true,
                    env,
                    // The credentials of the agents that speak ACP today (opencode's
                    // `OPENCODE_CONFIG` and switches too).
                    pass_prefixes: &[
                        "GEMINI_",
                        "GOOGLE_",
                        "OPENAI_",
                        "CODEX_",
                        "ANTHROPIC_",
                        "CLAUDE_",
                        "OPENCODE_",
                    ],
                })
            }
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
            // Driven by `acp::drive`, which reads its stdout itself.
            Adapter::Acp => Vec::new(),
        }
    }

    /// Looks at one stderr line (forwarded as a diagnostic by the executor); returns
    /// what it tells beyond that, e.g. a denial Codex reports only there.
    pub fn stderr_line(self, line: &str, resumed: bool, st: &mut TurnState) -> Option<AgentEvent> {
        match self {
            Adapter::Command | Adapter::Acp => None,
            Adapter::Claude => {
                if resumed && claude::is_stale(line) {
                    st.stale_resume = true;
                }
                None
            }
            Adapter::Codex => {
                if resumed && codex::is_stale(line) {
                    st.stale_resume = true;
                }
                codex::stderr_denial(line, st)
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
            // The turn's answer says; the process is stopped after it, whatever its
            // exit code.
            Adapter::Acp => st.ok == Some(true),
        }
    }
}

/// What opencode is told under `ask`: to ask before each shell command, edit, web
/// fetch and path outside its directory (its own permission keys), so each comes to
/// Berth as `session/request_permission`; Berth lets edits inside the directory
/// through and puts the rest to a person. opencode asks nothing by default.
pub const OPENCODE_ASK: &[&str] = &["bash", "edit", "webfetch", "external_directory"];

/// Whether an ACP command starts opencode: its program, or the package a runner such
/// as `npx` starts, is `opencode` (`opencode-ai`, `opencode-ai@1.18.33`).
pub fn is_opencode(program: &str, args: &[String]) -> bool {
    let named = |a: &str| {
        let base = Path::new(a)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        base == "opencode" || base.starts_with("opencode-ai")
    };
    named(program) || args.iter().take_while(|a| *a != "acp").any(|a| named(a))
}

/// Whether an ACP command starts Zed's Codex adapter (`codex-acp`, or the npm package
/// `@zed-industries/codex-acp` through `npx`).
pub fn is_codex_acp(program: &str, args: &[String]) -> bool {
    let named = |a: &str| {
        let base = Path::new(a)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or_default();
        base == "codex-acp" || a.starts_with("@zed-industries/codex-acp")
    };
    named(program) || args.iter().any(|a| named(a))
}

/// The arguments Berth adds to an ACP agent's: for codex-acp under `ask`,
/// `-c approval_policy="untrusted"`, without which it runs commands unasked (0.16.0:
/// none of its modes asks per command), unless the user's arguments set an approval
/// policy themselves (then theirs holds, and `agent list` shows it).
fn acp_args(program: &str, mut args: Vec<String>, permissions: Permissions) -> Vec<String> {
    let own = args.iter().any(|a| a.contains("approval_policy"));
    if permissions == Permissions::Ask && is_codex_acp(program, &args) && !own {
        args.extend(["-c".to_owned(), "approval_policy=\"untrusted\"".to_owned()]);
    }
    args
}

/// The variables Berth sets for an ACP agent: for opencode under `ask`,
/// `OPENCODE_PERMISSION` asking for [`OPENCODE_ASK`] (laid over the user's own value
/// of it, see [`crate::agent::process::agent_env`]). Nothing otherwise.
fn acp_env(
    program: &str,
    args: &[String],
    permissions: Permissions,
) -> Vec<(&'static str, String)> {
    if permissions != Permissions::Ask || !is_opencode(program, args) {
        return Vec::new();
    }
    let ask: serde_json::Map<String, serde_json::Value> = OPENCODE_ASK
        .iter()
        .map(|k| ((*k).to_owned(), serde_json::Value::from("ask")))
        .collect();
    vec![(
        "OPENCODE_PERMISSION",
        serde_json::Value::Object(ask).to_string(),
    )]
}

/// The program of `spec`, or `default` when the command is empty, and its arguments.
fn program(spec: &AgentSpec, default: &str) -> (String, Vec<String>) {
    match spec.command.split_first() {
        Some((p, rest)) => (p.clone(), rest.to_vec()),
        None => (default.to_owned(), Vec::new()),
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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

    /// Claude Code's partial messages: each text or thinking piece a delta, counted
    /// per block; a subagent's and a tool input's pieces are not; the whole block
    /// follows in its `assistant` line.
    #[test]
    fn claude_partial_messages_are_deltas() {
        let (events, _) = parse(
            Adapter::Claude,
            &[
                r#"{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}},"parent_tool_use_id":null}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}},"parent_tool_use_id":null}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}},"parent_tool_use_id":null}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hel"}},"parent_tool_use_id":null}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"lo"}},"parent_tool_use_id":null}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"sub"}},"parent_tool_use_id":"tu_1"}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{"}},"parent_tool_use_id":null}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello"}]},"parent_tool_use_id":null}"#,
            ],
            false,
        );
        let delta = |text: &str, thought: bool, part: u32| AgentEvent::Delta {
            text: text.into(),
            thought,
            part,
        };
        assert_eq!(
            events,
            vec![
                delta("hm", true, 0),
                delta("Hel", false, 0),
                delta("lo", false, 1),
                AgentEvent::Text {
                    text: "Hello".into()
                },
            ]
        );
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
    fn agents_that_cannot_ask_say_so_under_ask_and_claude_asks_berth() {
        let spec = |kind, command: &[&str]| AgentSpec {
            name: "a".into(),
            kind,
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            permissions: Some(Permissions::Ask),
        };
        let command = spec(AgentKind::Command, &["cat"]);
        for fenced in [true, false] {
            let why = Adapter::Command
                .unenforced(&command, Permissions::Ask, fenced)
                .unwrap();
            assert!(why.contains("runs as edit"), "{why}");
        }
        let codex = spec(AgentKind::Codex, &["codex"]);
        let why = Adapter::Codex
            .unenforced(&codex, Permissions::Ask, true)
            .unwrap();
        assert!(why.contains("codex-acp"), "{why}");
        assert_eq!(
            Adapter::Codex.unenforced(&codex, Permissions::Edit, true),
            None
        );
        // Claude Code under `ask`: its prompts come to Berth on stdio, the prompt on
        // stdin as a stream-json line (stdin kept open).
        let claude = spec(AgentKind::Claude, &["claude"]);
        let turn = Turn {
            prompt: "p",
            brief: None,
            resume_id: None,
            work_dir: Path::new("/w"),
            permissions: Permissions::Ask,
            fenced: true,
        };
        let inv = Adapter::Claude.invocation(&claude, &turn).unwrap();
        let args = inv.args.join(" ");
        assert!(
            args.contains("--input-format stream-json --permission-prompt-tool stdio")
                && args.contains("--permission-mode=acceptEdits")
                && !args.contains("--allowedTools"),
            "{args}"
        );
        assert!(inv.stdin.is_none() && inv.stdin_pipe);
        let edit = Adapter::Claude
            .invocation(
                &claude,
                &Turn {
                    permissions: Permissions::Edit,
                    ..turn
                },
            )
            .unwrap();
        assert!(!edit.args.join(" ").contains("--permission-prompt-tool"));
    }

    /// Claude Code 2.1.332's permission prompt, verbatim (ids shortened), and Berth's
    /// answers in the shape it accepts.
    #[test]
    fn claudes_permission_prompt_is_read_and_answered_in_its_own_shape() {
        let line = r#"{"type":"control_request","request_id":"r-1","request":{"subtype":"can_use_tool","tool_name":"Bash","display_name":"Bash","input":{"command":"sh ./check.sh","description":"run check"},"description":"run check","permission_suggestions":[{"type":"addRules","rules":[{"toolName":"Bash","ruleContent":"sh ./check.sh"}],"behavior":"allow","destination":"localSettings"}],"decision_reason":"This command requires approval","decision_reason_type":"other","tool_use_id":"toolu_1"}}"#;
        let req = claude::can_use_tool(line).unwrap();
        assert_eq!(
            (
                req.request_id.as_str(),
                req.tool.as_str(),
                req.tool_use_id.as_deref()
            ),
            ("r-1", "Bash", Some("toolu_1"))
        );
        let ask = req.ask();
        assert_eq!(
            (
                ask.kind.as_str(),
                ask.command.as_deref(),
                ask.title.as_str()
            ),
            ("execute", Some("sh ./check.sh"), "run check")
        );
        let allow: serde_json::Value = serde_json::from_slice(&req.answer(true, "")).unwrap();
        assert_eq!(
            allow,
            serde_json::json!({"type": "control_response", "response": {"subtype": "success",
                "request_id": "r-1", "response": {"behavior": "allow",
                "updatedInput": {"command": "sh ./check.sh", "description": "run check"}}}})
        );
        assert!(
            allow.to_string().find("updatedPermissions").is_none(),
            "never a rule Claude Code would write into the project"
        );
        let deny: serde_json::Value =
            serde_json::from_slice(&req.answer(false, "not today")).unwrap();
        assert_eq!(
            deny["response"]["response"],
            serde_json::json!({"behavior": "deny", "message": "not today"})
        );
        let write = claude::can_use_tool(
            r#"{"type":"control_request","request_id":"r-2","request":{"subtype":"can_use_tool","tool_name":"Write","input":{"file_path":"/tmp/outside-x.txt","content":"x"},"tool_use_id":"toolu_2"}}"#,
        )
        .unwrap()
        .ask();
        assert_eq!(
            (write.kind.as_str(), write.paths.as_slice()),
            ("edit", ["/tmp/outside-x.txt".to_owned()].as_slice())
        );
        assert_eq!(
            claude::can_use_tool(
                r#"{"type":"control_request","request_id":"x","request":{"subtype":"interrupt"}}"#
            ),
            None
        );
        assert!(claude::is_result(
            r#"{"is_error":false,"type":"result","result":"ok"}"#
        ));
        assert!(!claude::is_result(
            r#"{"type":"assistant","message":{"content":"result"}}"#
        ));
    }

    #[test]
    fn a_command_without_a_program_is_an_error() {
        let spec = AgentSpec {
            name: "x".into(),
            kind: AgentKind::Command,
            command: vec![],
            permissions: None,
        };
        let turn = Turn {
            prompt: "p",
            brief: None,
            resume_id: None,
            work_dir: Path::new("/w"),
            permissions: Permissions::Edit,
            fenced: false,
        };
        assert!(matches!(
            Adapter::Command.invocation(&spec, &turn),
            Err(AdapterError::EmptyCommand { .. })
        ));
    }

    /// Output recorded from the real CLIs against the fake model server
    /// (`local-agent/tests/fixtures/real/README.md` says how).
    fn replay(adapter: Adapter, stdout: &str, stderr: &str) -> (Vec<AgentEvent>, TurnState) {
        let mut st = TurnState::default();
        let mut events: Vec<AgentEvent> = stdout
            .lines()
            .flat_map(|l| adapter.stdout_line(l, false, &mut st))
            .collect();
        events.extend(
            stderr
                .lines()
                .filter_map(|l| adapter.stderr_line(l, false, &mut st)),
        );
        (events, st)
    }

    fn denied(events: &[AgentEvent]) -> Vec<(String, String)> {
        events
            .iter()
            .filter_map(|e| {
                if let AgentEvent::Denied { tool, target, .. } = e {
                    Some((tool.clone(), target.clone()))
                } else {
                    None
                }
            })
            .collect()
    }

    #[test]
    fn real_claude_denial_is_one_denial_with_its_file() {
        let (events, st) = replay(
            Adapter::Claude,
            include_str!("../../../tests/fixtures/real/claude-write-denied.jsonl"),
            "",
        );
        let want = Denial {
            by: None,
            tool: "Write".into(),
            target: "/home/alice/code/app/hello.txt".into(),
        };
        assert_eq!(st.denials, vec![want.clone()]);
        assert_eq!(
            denied(&events),
            vec![(want.tool.clone(), want.target)],
            "reported once, though the result repeats it"
        );
        // Claude Code calls the turn a success and exits 0: only the denial tells.
        assert!(Adapter::Claude.succeeded(&st, Some(0)));
        assert!(st.all_denied());
    }

    #[test]
    fn real_claude_write_counts_as_a_change() {
        let (events, st) = replay(
            Adapter::Claude,
            include_str!("../../../tests/fixtures/real/claude-write-ok.jsonl"),
            "",
        );
        assert_eq!((st.denials.len(), st.changes_applied), (0, 1));
        assert!(denied(&events).is_empty() && !st.all_denied());
        assert!(Adapter::Claude.succeeded(&st, Some(0)));
    }

    #[test]
    fn real_codex_write_and_read_only_refusal() {
        let (_, st) = replay(
            Adapter::Codex,
            include_str!("../../../tests/fixtures/real/codex-write-ok.jsonl"),
            include_str!("../../../tests/fixtures/real/codex-write-ok.stderr"),
        );
        assert_eq!((st.denials.len(), st.changes_applied), (0, 1));
        let (events, st) = replay(
            Adapter::Codex,
            include_str!("../../../tests/fixtures/real/codex-read-only.jsonl"),
            include_str!("../../../tests/fixtures/real/codex-read-only.stderr"),
        );
        assert_eq!(
            denied(&events),
            vec![(
                "apply_patch".to_owned(),
                "patch rejected: writing is blocked by read-only sandbox; rejected by user approval settings".to_owned()
            )]
        );
        assert!(st.all_denied() && Adapter::Codex.succeeded(&st, Some(0)));
    }

    #[test]
    fn real_codex_error_items_are_errors_and_its_chatter_is_not_an_event() {
        let (events, st) = replay(
            Adapter::Codex,
            include_str!("../../../tests/fixtures/real/codex-unknown-model-read-only.jsonl"),
            include_str!("../../../tests/fixtures/real/codex-unknown-model-read-only.stderr"),
        );
        let errors: Vec<&AgentEvent> = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::Error { .. }))
            .collect();
        assert_eq!(
            errors,
            vec![&AgentEvent::Error {
                message: "Model metadata for `gpt-fake` not found. Defaulting to fallback metadata; this can degrade performance and cause issues.".into()
            }]
        );
        assert!(
            st.ok == Some(true) && st.error.is_none(),
            "an error item does not fail the turn"
        );
        let mut st = TurnState::default();
        assert_eq!(
            Adapter::Codex.stderr_line("Reading additional input from stdin...", false, &mut st),
            None
        );
        let (_, st) = replay(
            Adapter::Codex,
            "",
            include_str!("../../../tests/fixtures/real/codex-stale-resume.stderr"),
        );
        assert!(!st.stale_resume, "only a resumed turn can be stale");
        let mut st = TurnState::default();
        for l in include_str!("../../../tests/fixtures/real/codex-stale-resume.stderr").lines() {
            Adapter::Codex.stderr_line(l, true, &mut st);
        }
        assert!(st.stale_resume);
    }

    #[test]
    fn only_codexs_own_verdict_is_a_denial() {
        let (events, st) = replay(
            Adapter::Codex,
            concat!(
                r#"{"type":"item.started","item":{"id":"c1","type":"command_execution","command":"cat /root/x","status":"in_progress"}}"#,
                "\n",
                r#"{"type":"item.completed","item":{"id":"c1","type":"command_execution","command":"cat /root/x","aggregated_output":"cat: /root/x: Permission denied","exit_code":1,"status":"failed"}}"#,
                "\n",
                r#"{"type":"item.completed","item":{"id":"p1","type":"file_change","changes":[{"path":"a.rs","kind":"update"}],"status":"failed"}}"#,
                "\n",
                r#"{"type":"item.completed","item":{"id":"p2","type":"file_change","changes":[{"path":"b.rs","kind":"add"}],"status":"declined"}}"#,
            ),
            "",
        );
        assert_eq!(
            denied(&events),
            vec![("file_change".to_owned(), "b.rs".to_owned())]
        );
        assert_eq!(st.changes_applied, 0);
    }

    /// Each tested agent's and runtime's words for the kernel's refusal, and what a
    /// completed result may say without being one.
    #[test]
    fn refusals_in_every_agents_words() {
        let cases: &[(&str, bool, bool)] = &[
            // (text, names_a_refusal, reports_a_refusal)
            ("touch: cannot touch 'x': Permission denied", true, true),
            (
                "/bin/sh: 1: cannot create /home/a/.bashrc: Permission denied",
                true,
                true,
            ),
            (
                "rm: cannot remove '/etc/x': Operation not permitted",
                true,
                true,
            ),
            (
                "sh: 1: cannot create .git/hooks/pre-commit: Read-only file system",
                true,
                true,
            ),
            (
                "fatal: could not create work tree dir 'x': Permission denied  ",
                true,
                true,
            ),
            (
                "PermissionDenied: FileSystem.writeFile (/w/app/x)",
                true,
                true,
            ),
            ("EACCES: permission denied, open '/w/app/x'", true, true),
            ("EPERM: operation not permitted, unlink '/w/x'", true, true),
            (
                "EROFS: read-only file system, open '/w/.git/config'",
                true,
                true,
            ),
            ("Error: Permission denied (os error 13)", true, true),
            (
                "PermissionError: [Errno 13] Permission denied: '/w/x'",
                true,
                true,
            ),
            (
                "OSError: [Errno 30] Read-only file system: '/w/.berth/x'",
                true,
                true,
            ),
            // Words in a sentence: a failed result's, not a completed one's.
            ("Permission denied is a phrase", true, false),
            (
                "I got Permission denied when touching it, so I stopped.",
                true,
                false,
            ),
            (
                "the Operation not permitted case is handled below",
                true,
                false,
            ),
            // Nothing refused.
            (
                "Exit code 1
no such file",
                false,
                false,
            ),
            (
                "touch: cannot touch 'x': No such file or directory",
                false,
                false,
            ),
            ("permission granted", false, false),
        ];
        for (text, names, reports) in cases {
            assert_eq!(
                (names_a_refusal(text), reports_a_refusal(text)),
                (*names, *reports),
                "{text}"
            );
        }
    }

    /// A fenced run's failed tool result that names a refusal is a denial by the
    /// fence, once per call; other failures are not; stderr lines of a command agent
    /// likewise, listed up to the cap and counted beyond it.
    #[test]
    fn refusals_named_in_a_fenced_runs_output_are_the_fences_denials() {
        let mut st = TurnState::default();
        let use_ = AgentEvent::ToolUse {
            id: Some("t1".into()),
            name: "Bash".into(),
            input: serde_json::json!({"command": "echo x >> ~/.bashrc"}),
        };
        assert_eq!(st.fence_event(&use_), None);
        st.targets.insert("t1".into(), "echo x >> ~/.bashrc".into());
        let result = |id: &str, output: &str, is_error| AgentEvent::ToolResult {
            id: Some(id.into()),
            output: output.into(),
            is_error,
        };
        let refused = "Exit code 2\n/bin/sh: 1: cannot create /home/a/.bashrc: Permission denied";
        assert_eq!(
            st.fence_event(&result("t1", refused, true)),
            Some(AgentEvent::Denied {
                tool: "Bash".into(),
                target: "echo x >> ~/.bashrc".into(),
                message: Some(
                    "/bin/sh: 1: cannot create /home/a/.bashrc: Permission denied".into()
                ),
                by: Some("fence".into()),
            })
        );
        // The same call again, a success that mentions it, another failure: nothing.
        assert_eq!(st.fence_event(&result("t1", refused, true)), None);
        assert_eq!(
            st.fence_event(&result("t2", "Permission denied is a phrase", false)),
            None
        );
        assert_eq!(
            st.fence_event(&result("t3", "Exit code 1\nno such file", true)),
            None
        );
        assert_eq!(st.denials.len(), 1);
        assert!(st.all_denied());

        // A completed result counts when a line is a program's refusal, never for a
        // tool that only reads (what it returns is a file's text).
        st.tool_names.insert("t4".into(), "Bash".into());
        st.tool_names.insert("t5".into(), "Read".into());
        let touch = "touch: cannot touch 'x': Permission denied\n";
        assert_eq!(
            st.fence_event(&result("t4", touch, false)),
            Some(AgentEvent::Denied {
                tool: "Bash".into(),
                target: String::new(),
                message: Some("touch: cannot touch 'x': Permission denied".into()),
                by: Some("fence".into()),
            })
        );
        assert_eq!(st.fence_event(&result("t5", touch, false)), None);
        assert_eq!(st.denials.len(), 2);

        let mut st = TurnState::default();
        assert_eq!(st.fence_stderr("warning: slow"), None);
        // The in-place layer's answer is a refusal too.
        assert!(names_a_refusal(
            "sh: 1: cannot create .git/hooks/pre-commit: Read-only file system"
        ));
        for i in 0..MAX_FENCE_DENIALS + 5 {
            let line = format!("rm: cannot remove '/etc/x{i}': Operation not permitted");
            let ev = st.fence_stderr(&line);
            assert_eq!(ev.is_some(), i < MAX_FENCE_DENIALS, "{i}");
        }
        assert_eq!(st.denials.len(), MAX_FENCE_DENIALS);
        assert_eq!(st.fence_denials_dropped, 5);
        assert_eq!(st.denials[0].tool, "command");
        assert_eq!(
            st.denials[0].target,
            "rm: cannot remove '/etc/x0': Operation not permitted"
        );
    }

    #[test]
    fn the_kernels_denials_are_listed_once_beside_those_the_output_named() {
        let mut st = TurnState::default();
        st.fence_stderr("sh: 1: cannot create /h/notes.txt: Permission denied");
        st.fence_stderr("sh: 1: cannot create /h/new.txt: Permission denied");
        let events = st.audited_denials(vec![
            // Named by the output already: the file, and a new entry's directory.
            ("fs.write_file".into(), "/h/notes.txt".into()),
            ("fs.make_reg".into(), "/h".into()),
            // Not named: a longer name, and what the agent hid.
            ("fs.write_file".into(), "/h/notes".into()),
            ("fs.read_file".into(), "/h/.ssh/id_ed25519".into()),
        ]);
        let listed: Vec<(&str, &str)> = st.denials[2..]
            .iter()
            .map(|d| (d.tool.as_str(), d.target.as_str()))
            .collect();
        assert_eq!(
            listed,
            [
                ("fs.write_file", "/h/notes"),
                ("fs.read_file", "/h/.ssh/id_ed25519")
            ]
        );
        assert_eq!(events.len(), 2);
        assert!(st.denials.iter().all(|d| d.by.as_deref() == Some("fence")));
    }
}
