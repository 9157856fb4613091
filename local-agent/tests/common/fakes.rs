//! Fake `claude` and `codex` executables speaking the real formats
//! (agent-protocols.md), logging what they were given to a file outside the directory.

use super::Sandbox;
use std::path::{Path, PathBuf};

/// Sessions the fakes know: any id except `stale-id`.
pub const STALE: &str = "stale-id";

const CLAUDE: &str = r#"#!/usr/bin/env python3
import sys, json, os
args = sys.argv[1:]
stdin = sys.stdin.read()
log = {"argv": args, "cwd": os.getcwd(), "stdin": stdin,
       "env": {k: v for k, v in os.environ.items() if k.startswith("BERTH_") or k in ("HOME", "FAKE_FLAG")},
       "claude_md": open("CLAUDE.md").read() if os.path.exists("CLAUDE.md") else None,
       "skills": sorted(os.listdir(".claude/skills")) if os.path.isdir(".claude/skills") else []}
with open(LOG, "a") as f:
    f.write(json.dumps(log) + "\n")
def out(obj):
    print(json.dumps(obj), flush=True)
if "-p" not in args:
    sys.exit(2)
if "--output-format" in args and "--verbose" not in args:
    print("Error: When using --print, --output-format=stream-json requires --verbose", file=sys.stderr)
    sys.exit(1)
resume = args[args.index("--resume") + 1] if "--resume" in args else None
if resume == "stale-id":
    msg = "No conversation found with session ID: " + resume
    out({"type": "result", "subtype": "error_during_execution", "is_error": True, "num_turns": 0, "errors": [msg]})
    print(msg, file=sys.stderr)
    sys.exit(1)
sid = resume or "claude-sess-1"
out({"type": "system", "subtype": "init", "session_id": sid, "cwd": os.getcwd(), "model": "fake-model", "tools": ["Bash"], "mcp_servers": [], "permissionMode": "default"})
out({"type": "assistant", "message": {"content": [{"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "text", "text": "on it"}, {"type": "tool_use", "id": "tu_1", "name": "Read", "input": {"file_path": "a.txt"}}]}, "parent_tool_use_id": None, "session_id": sid})
out({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "tu_1", "content": "file text", "is_error": False}]}, "session_id": sid})
out({"type": "unknown_future_type", "x": 1})
if "write" in stdin:
    with open("agent-made.txt", "w") as f:
        f.write("made by the agent\n")
if "sleep" in stdin:
    import time
    time.sleep(30)
out({"type": "result", "subtype": "success", "is_error": False, "result": "Done.", "session_id": sid, "duration_ms": 5, "num_turns": 1, "total_cost_usd": 0.012, "usage": {"input_tokens": 3}})
"#;

const CODEX: &str = r#"#!/usr/bin/env python3
import sys, json, os, select
args = sys.argv[1:]
# stdin must be closed or at EOF: codex waits for EOF on an open pipe.
r, _, _ = select.select([sys.stdin], [], [], 2.0)
stdin = sys.stdin.read() if r else None
log = {"argv": args, "cwd": os.getcwd(), "stdin": stdin,
       "env": {k: v for k, v in os.environ.items() if k.startswith("BERTH_") or k == "HOME"}}
with open(LOG, "a") as f:
    f.write(json.dumps(log) + "\n")
def out(obj):
    print(json.dumps(obj), flush=True)
if not args or args[0] != "exec" or "--json" not in args:
    sys.exit(2)
if "resume" in args:
    i = args.index("resume")
    for flag in ("-C", "--sandbox"):
        if flag in args[i:]:
            print("error: unexpected argument '" + flag + "' found", file=sys.stderr)
            sys.exit(2)
    resume = args[i + 1]
else:
    resume = None
if resume == "stale-id":
    print("Error: No saved session found with ID stale-id", file=sys.stderr)
    sys.exit(1)
tid = resume or "codex-thread-1"
out({"type": "thread.started", "thread_id": tid})
out({"type": "turn.started"})
out({"type": "item.started", "item": {"id": "item_1", "type": "command_execution", "command": "bash -lc ls", "aggregated_output": "", "exit_code": None, "status": "in_progress"}})
out({"type": "item.completed", "item": {"id": "item_1", "type": "command_execution", "command": "bash -lc ls", "aggregated_output": "a.txt\n", "exit_code": 0, "status": "completed"}})
out({"type": "item.completed", "item": {"id": "item_2", "type": "agent_message", "text": "Done."}})
out({"type": "turn.completed", "usage": {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}})
"#;

fn write(sb: &Sandbox, name: &str, body: &str, log: &Path) -> PathBuf {
    let body = body.replacen(
        "python3\n",
        &format!("python3\nLOG = {:?}\n", log.display().to_string()),
        1,
    );
    sb.script(name, &body)
}

/// Writes the fake `claude`; returns its path and its log file.
pub fn claude(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let log = sb.side().join("claude.log");
    (write(sb, "claude", CLAUDE, &log), log)
}

/// Writes the fake `codex`; returns its path and its log file.
pub fn codex(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let log = sb.side().join("codex.log");
    (write(sb, "codex", CODEX, &log), log)
}

/// The invocations logged so far.
pub fn calls(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
