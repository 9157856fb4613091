//! Human output: the binding header a user must never miss, tables, and the live
//! stream of a task.

use berth_core::api::CheckReport;
use berth_core::settings::trust::{KeyVerdict, ProjectLayerReport, Trust, Verdict};
use serde_json::Value;
use std::io::{IsTerminal, Write};

pub use berth_core::quote::{escape, escape_lines};

/// Untrusted text of several lines (an agent's words, a title, a message) made inert for
/// a terminal: newlines and tabs kept, every other control character and every
/// bidirectional or invisible format character escaped (`\x1b`, `\u{202e}`), never
/// dropped, so what is shown is what was sent ([`berth_core::quote::escape_text`]).
pub fn inert(text: &str) -> String {
    berth_core::quote::escape_text(text).into_owned()
}

/// A warning that lets the command go on: `warning: …` and `hint: …` on stderr.
pub fn warn(message: &str, hint: &str) {
    eprintln!("warning: {}", escape_lines(message));
    eprintln!("hint: {}", escape_lines(hint));
}

/// The first 8 characters of an id.
pub fn short(id: &Value) -> String {
    id.as_str().unwrap_or("?").chars().take(8).collect()
}

/// A JSON document, pretty-printed, as every `--json` command prints one.
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

pub fn check_report(r: &CheckReport) {
    if r.ok {
        println!("ok: {}", escape_lines(&r.message));
    } else {
        let code = r.code.map(|c| c.as_str()).unwrap_or("refused");
        println!("refused [{code}]: {}", escape_lines(&r.message));
        if let Some(hint) = &r.hint {
            println!("hint: {}", escape_lines(hint));
        }
    }
    if let Some(c) = &r.canonical {
        println!("  canonical: {}", escape(c));
    }
    if let Some(d) = &r.display {
        println!("  display:   {}", escape(d));
    }
    if let Some(report) = &r.project_layer {
        project_layer(report, true);
    }
}

/// How a directory's trust reads in a sentence.
fn trust_words(trust: Trust) -> &'static str {
    match trust {
        Trust::Trusted => "trusted",
        Trust::Untrusted => "not trusted",
        Trust::Replaced => "not trusted: the directory was replaced since you trusted it",
    }
}

/// A project layer's keys and what becomes of them (`all`), or only the ignored ones,
/// then the command that trusts the directory when that would apply more.
pub fn project_layer(report: &ProjectLayerReport, all: bool) {
    for line in project_layer_lines(report, all) {
        println!("{line}");
    }
}

/// [`project_layer`]'s lines.
pub fn project_layer_lines(report: &ProjectLayerReport, all: bool) -> Vec<String> {
    let mut out = Vec::new();
    out.push(format!(
        "project layer {} ({})",
        inert(&report.file),
        trust_words(report.trust)
    ));
    for k in &report.keys {
        if !all && !k.verdict.ignored() {
            continue;
        }
        let (label, text) = match k.verdict {
            Verdict::Applied => ("applies", format!("{}: {}", k.key, k.message)),
            Verdict::Trusted => ("trusted", format!("{}: {}", k.key, k.message)),
            Verdict::NeedsTrust | Verdict::Never | Verdict::UserLayerOnly | Verdict::Foreign => {
                ("ignored", k.message.clone())
            }
        };
        out.push(format!(
            "  {:<7} {label:<8} {}",
            format!("{}:{}", k.line, k.column),
            inert(&text)
        ));
    }
    if let Some(hint) = &report.hint {
        out.push(format!("hint: {} applies what needs trust", inert(hint)));
    } else if all && report.keys.iter().any(|k| k.verdict == Verdict::Trusted) {
        out.push(format!(
            "note: the keys marked trusted are ignored without trust (berth trust --revoke {})",
            inert(&report.dir)
        ));
    }
    out
}

/// The lines `berth send` prints for an `ignored` event (alerts, on stderr).
pub fn ignored_lines(report: &ProjectLayerReport) -> Vec<String> {
    let ignored: Vec<&KeyVerdict> = report.ignored().collect();
    let mut lines = vec![format!(
        "warning: {} setting{} of {} {} ignored ({}):",
        ignored.len(),
        if ignored.len() == 1 { "" } else { "s" },
        inert(&report.file),
        if ignored.len() == 1 { "is" } else { "are" },
        trust_words(report.trust)
    )];
    for k in ignored {
        lines.push(format!("  {}:{}: {}", k.line, k.column, inert(&k.message)));
    }
    if let Some(hint) = &report.hint {
        lines.push(format!(
            "hint: to apply what needs trust, after reading that file: {}",
            inert(hint)
        ));
    }
    lines
}

/// The binding's state as the server recorded it, corrected by a look at the
/// directory now when it is on this machine, `here` (a directory deleted since shows
/// `missing`, one replaced shows `changed`). A binding on another machine (a daemon's)
/// is shown as recorded: its path means nothing on this one.
pub fn live_state(binding: &Value, here: &str) -> String {
    let recorded = s(&binding["state"]).to_owned();
    if binding["daemon"].as_str() != Some(here) {
        return recorded;
    }
    let Some(dir) = binding["dir"].as_str() else {
        return recorded;
    };
    let report = crate::check(dir, std::path::Path::new("/"));
    match (report.ok, report.code.map(|c| c.as_str())) {
        (false, Some("not_found" | "not_a_directory")) => "missing".into(),
        (true, _) if report.canonical.as_deref() != Some(dir) => "changed".into(),
        (false, Some(_)) if recorded == "ok" => "changed".into(),
        _ => recorded,
    }
}

/// The header of a session: directory (privacy-stripped), mode, machine, state.
/// `here` is this machine's id (the CLI's `Client::machine`).
pub fn header(session: &Value, here: &str, policy: Option<&str>) {
    let b = &session["binding"];
    println!(
        "session   {}  {}",
        short(&session["id"]),
        escape(s(&session["title"]))
    );
    if b.is_null() {
        println!("directory (not bound: runs in its scratch directory)");
    } else {
        let state = live_state(b, here);
        let advice = match state.as_str() {
            "ok" => String::new(),
            "missing" => format!(
                "  <- the directory is gone: `berth session link {} PATH` or `berth session unlink {}`",
                short(&session["id"]),
                short(&session["id"])
            ),
            "changed" => String::from(
                "  <- the path now names another directory; the next run is refused until you link again",
            ),
            "machine_offline" => String::from("  <- tasks wait until that machine is back"),
            _ => String::new(),
        };
        println!("directory {}", escape(s(&b["display"])));
        println!("mode      {}", escape(s(&b["mode"])));
        println!("machine   {}", escape(s(&b["daemon_name"])));
        println!("state     {}{advice}", escape(&state));
    }
    println!("agent     {}", escape(s(&session["agent"])));
    if let Some(policy) = policy {
        println!("may       {policy}");
    }
}

/// `session new` without `--dir`: say that nothing is bound, and suggest (only
/// suggest) the directory this agent last used.
pub fn unbound_notice(session: &Value, last_used: Option<&str>) {
    println!("not bound to any directory: the agent works in this session's scratch directory");
    if let Some(dir) = last_used {
        let display = crate::check(dir, std::path::Path::new("/"))
            .display
            .unwrap_or_else(|| dir.to_owned());
        println!(
            "the agent last worked in {}; to bind it: berth session link {} {}   (or --dir when creating)",
            escape(&display),
            short(&session["id"]),
            escape(dir)
        );
    }
}

pub fn table(rows: Vec<Vec<String>>) {
    let mut out = std::io::stdout().lock();
    for line in table_lines(rows) {
        let _ = writeln!(out, "{line}");
    }
}

/// A table's lines: columns as wide as their widest cell, two blanks apart.
pub fn table_lines(rows: Vec<Vec<String>>) -> Vec<String> {
    // Every cell is one line of text, whatever it holds.
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|c| match escape(&c) {
                    std::borrow::Cow::Borrowed(_) => c,
                    std::borrow::Cow::Owned(e) => e,
                })
                .collect()
        })
        .collect();
    let Some(first) = rows.first() else {
        return Vec::new();
    };
    let mut widths = vec![0; first.len()];
    for r in &rows {
        for (i, cell) in r.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = Vec::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push(line.trim_end().to_owned());
    }
    out
}

pub fn agents(agents: &Value) {
    let mut rows = vec![vec![
        "NAME".into(),
        "KIND".into(),
        "PERMISSIONS".into(),
        "COMMAND".into(),
    ]];
    for a in agents.as_array().into_iter().flatten() {
        let cmd: Vec<&str> = a["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let permissions = match (a["kind"].as_str(), a["permissions"].as_str()) {
            (Some("command"), p) => format!(
                "{} (by the fence)",
                p.unwrap_or(berth_core::Permissions::DEFAULT.as_str())
            ),
            (_, Some(p)) => p.to_owned(),
            (_, None) => format!("{} (default)", berth_core::Permissions::DEFAULT),
        };
        rows.push(vec![
            s(&a["name"]).into(),
            s(&a["kind"]).into(),
            permissions,
            inert(&cmd.join(" ")),
        ]);
    }
    table(rows);
}

fn latest_status<'a>(tasks: &'a Value, session: &str) -> &'a str {
    tasks
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|t| t["session_id"].as_str() == Some(session))
        .map(|t| s(&t["status"]))
        .unwrap_or("-")
}

pub fn sessions(sessions: &Value, tasks: &Value) {
    let mut rows = vec![vec![
        "ID".into(),
        "TITLE".into(),
        "AGENT".into(),
        "DIRECTORY".into(),
        "MODE".into(),
        "LAST TASK".into(),
    ]];
    for x in sessions.as_array().into_iter().flatten() {
        let b = &x["binding"];
        let (dir, mode) = if b.is_null() {
            ("(scratch)".to_owned(), "-".to_owned())
        } else {
            let mut dir = s(&b["display"]).to_owned();
            if let Some(flag) = binding_flag(b) {
                dir.push_str(&format!(" ({flag})"));
            }
            (dir, s(&b["mode"]).to_owned())
        };
        // A cell is escaped as one line by `table`.
        let title = if x["archived"].as_bool() == Some(true) {
            format!("{} (archived)", s(&x["title"]))
        } else {
            s(&x["title"]).to_owned()
        };
        // Waiting for a person, not for a lock or a machine: "needs you".
        let last = if x["needs"] == "approval" {
            "needs you"
        } else {
            latest_status(tasks, s(&x["id"]))
        };
        rows.push(vec![
            short(&x["id"]),
            title,
            s(&x["agent"]).into(),
            dir,
            mode,
            last.into(),
        ]);
    }
    table(rows);
}

/// Why a binding does not hold, for the session list: the state the server recorded
/// when it is not `ok`, or, for a directory on this machine (the local server's own,
/// `daemon: "local"`), one that is gone now. `None` when it holds as far as is known.
fn binding_flag(b: &Value) -> Option<String> {
    let state = s(&b["state"]);
    if !state.is_empty() && state != "ok" {
        return Some(state.replace('_', " "));
    }
    let here = b["daemon"] == "local";
    match b["dir"].as_str() {
        Some(dir) if here && !std::path::Path::new(dir).is_dir() => {
            Some(String::from("missing: link it again"))
        }
        _ => None,
    }
}

pub fn tasks(tasks: &Value) {
    for line in tasks_lines(tasks) {
        println!("{line}");
    }
}

/// [`tasks`]' table.
pub fn tasks_lines(tasks: &Value) -> Vec<String> {
    let mut rows = vec![vec![
        "ID".into(),
        "SESSION".into(),
        "STATUS".into(),
        "DETAIL".into(),
    ]];
    for t in tasks.as_array().into_iter().flatten() {
        let detail = t["wait_reason"]
            .as_str()
            .or_else(|| t["error"].as_str())
            .map(str::to_owned)
            .or_else(|| t["exit_code"].as_i64().map(|c| format!("exit {c}")))
            .unwrap_or_default();
        // An undone task says so: its files are back as they were before it.
        let detail = if t["changes"]["undone_at"].is_string() {
            if detail.is_empty() {
                String::from("undone")
            } else {
                format!("{detail} · undone")
            }
        } else {
            detail
        };
        rows.push(vec![
            short(&t["id"]),
            short(&t["session_id"]),
            s(&t["status"]).into(),
            inert(&detail),
        ]);
    }
    table_lines(rows)
}

pub fn session_body(session: &Value, tasks: &Value) {
    if let Some(w) = session["work_dir"].as_str() {
        println!("last ran  {}", escape(w));
    }
    if let Some(fence) = last_fence(tasks) {
        println!("fence     {fence}");
    }
    println!();
    self::tasks(tasks);
}

/// The live view of one task for `berth send`.
#[derive(Debug)]
pub struct Stream {
    json: bool,
    waiting: bool,
    color: bool,
    /// The agent's last stderr line shown: a denial naming that very line points at it
    /// instead of printing it again.
    last_stderr: Option<String>,
    /// The message shown as it streams.
    live: super::live::Live,
}

impl Stream {
    pub fn new(json: bool) -> Stream {
        Stream {
            json,
            waiting: false,
            color: std::io::stderr().is_terminal(),
            last_stderr: None,
            live: super::live::Live::default(),
        }
    }

    fn note(&self, text: &str) {
        if self.color {
            eprintln!("\x1b[2m{text}\x1b[0m");
        } else {
            eprintln!("{text}");
        }
    }

    /// Something the user must see: an error the agent reported, a denied action.
    fn alert(&self, text: &str) {
        if self.color {
            eprintln!("\x1b[1;33m{text}\x1b[0m");
        } else {
            eprintln!("{text}");
        }
    }

    /// A piece of the agent's words (stdout) or reasoning (stderr, dimmed), printed
    /// as it comes, without a line end.
    fn piece(&self, piece: &super::live::Piece<'_>) {
        let text = inert(piece.text);
        if !piece.thought {
            print!("{text}");
            let _ = std::io::stdout().flush();
            return;
        }
        let label = if piece.first { "(thinking) " } else { "" };
        if self.color {
            eprint!("\x1b[2m{label}{text}\x1b[0m");
        } else {
            eprint!("{label}{text}");
        }
    }

    /// A whole message (`thought`: the reasoning), as much of it as its pieces did not
    /// show already.
    fn whole(&mut self, task: &str, thought: bool, text: &str) {
        use super::live::Whole;
        let shown = self.live.whole(task, thought, text);
        let (rest, again) = match shown {
            Whole::All => (None, false),
            Whole::Rest(rest) => (Some(rest), false),
            Whole::Again => (None, true),
        };
        match (thought, rest) {
            (false, Some(rest)) => println!("{}", inert(rest)),
            (true, Some(rest)) => self.piece(&super::live::Piece {
                text: &format!("{rest}\n"),
                thought: true,
                first: false,
            }),
            (false, None) => {
                if again {
                    println!();
                }
                println!("{}", inert(text));
            }
            (true, None) => {
                if again {
                    eprintln!();
                }
                self.note(&format!("(thinking) {}", inert(text)));
            }
        }
    }

    /// One transcript event of this task (`data` is `{seq, task_id, kind, at, payload}`),
    /// or a live `delta` (a piece of a message as it streams: printed as it comes, and
    /// the whole message that follows is not printed again). `--json` prints the
    /// transcript's events only: the whole message, not its pieces.
    pub fn event(&mut self, kind: &str, data: &Value) {
        if kind == "delta" {
            if !self.json
                && let Some(piece) = self.live.delta(s(&data["task_id"]), &data["payload"])
            {
                self.piece(&piece);
            }
            return;
        }
        if self.json {
            println!("{data}");
            return;
        }
        let p = &data["payload"];
        let task = s(&data["task_id"]);
        match kind {
            "status" => {
                let status = s(&p["status"]);
                match status {
                    "waiting_lock" | "waiting_daemon" => {
                        self.waiting = true;
                        self.note(&format!(
                            "waiting: {}",
                            inert(p["wait_reason"].as_str().unwrap_or(status))
                        ));
                    }
                    "running" if self.waiting => {
                        self.note("done waiting; running");
                        self.waiting = false;
                    }
                    _ => {}
                }
            }
            "approval" => {
                let short = berth_core::approval::Approval::short_id(s(&p["id"]));
                let said = format!("{} {}", inert(s(&p["kind"])), inert(&what(p)));
                match p.get("decision").filter(|d| d.is_object()) {
                    None => self.alert(&format!(
                        "the agent asks: {said}\n  answer: berth approve {short} [--always] | berth deny {short} [--reason TEXT] (until {})",
                        s(&p["deadline"])
                    )),
                    Some(d) => self.note(&format!("{}: {said}", decided(d))),
                }
            }
            "agent" => match s(&p["type"]) {
                "text" => self.whole(task, false, s(&p["text"])),
                "thinking" => self.whole(task, true, s(&p["text"])),
                "tool_use" => {
                    let input = p["input"].to_string();
                    let input: String = input.chars().take(120).collect();
                    self.note(&format!("→ {} {}", inert(s(&p["name"])), inert(&input)));
                }
                "tool" => self.note(&format!(
                    "→ {} {} ({})",
                    inert(s(&p["kind"])),
                    inert(s(&p["title"])),
                    inert(s(&p["status"]))
                )),
                "diff" => self.note(&format!("± {}", inert(s(&p["path"])))),
                "plan" => {
                    for e in p["entries"].as_array().into_iter().flatten() {
                        let mark = match s(&e["status"]) {
                            "completed" => "[x]",
                            "in_progress" => "[~]",
                            _ => "[ ]",
                        };
                        self.note(&format!("plan {mark} {}", inert(s(&e["content"]))));
                    }
                }
                "tool_result" => {
                    let out: String = s(&p["output"]).chars().take(200).collect();
                    let mark = if p["is_error"].as_bool() == Some(true) {
                        "✗"
                    } else {
                        "←"
                    };
                    self.note(&format!("{mark} {}", inert(&out)));
                }
                "stderr" => {
                    self.note(&inert(s(&p["line"])));
                    self.last_stderr = Some(s(&p["line"]).to_owned());
                }
                // Berth's own wait before the agent starts, and how far it is.
                "progress" => self.note(&inert(s(&p["text"]))),
                "fence" => match fence_line(p) {
                    (true, line) => self.note(&line),
                    (false, line) => self.alert(&line),
                },
                "error" => self.alert(&format!("error: {}", inert(s(&p["message"])))),
                "ignored" => match serde_json::from_value::<ProjectLayerReport>(p.clone()) {
                    Ok(report) => {
                        for line in ignored_lines(&report) {
                            self.alert(&line);
                        }
                    }
                    Err(_) => self.alert("warning: some project settings were ignored"),
                },
                "denied" => {
                    let by = if p["by"] == "fence" {
                        " by the fence"
                    } else {
                        ""
                    };
                    let target = s(&p["target"]);
                    // Said once: a command agent's denial is its stderr line, just shown.
                    let line = if self.last_stderr.as_deref() == Some(target) {
                        format!("denied{by}: the line above")
                    } else {
                        let mut line =
                            format!("denied{by}: {} {}", inert(s(&p["tool"])), inert(target));
                        if let Some(m) = p["message"]
                            .as_str()
                            .filter(|m| !by.is_empty() && !target.contains(m))
                        {
                            line.push_str(&format!(" ({})", inert(m)));
                        }
                        line
                    };
                    self.alert(&line);
                }
                _ => {}
            },
            _ => {}
        }
        let _ = std::io::stdout().flush();
    }

    pub fn finish(&self, task: &Value) {
        if self.json {
            println!("{}", serde_json::json!({"task": task}));
            return;
        }
        let line = task_line(task);
        if s(&task["status"]) == "succeeded" {
            self.note(&line);
        } else {
            eprintln!("{line}");
            if let Some(hint) = task_hint(task) {
                eprintln!("hint: {hint}");
            }
        }
        for l in changes_lines(task) {
            eprintln!("{l}");
        }
        for (denied, hint) in denials_lines(task) {
            self.alert(&format!("warning: {denied}"));
            self.alert(&hint);
        }
    }
}

/// How the latest task that ran was fenced, as a line: `fenced: ~/code/app + tmp ·
/// network on (Landlock ABI 7)`, or `UNFENCED: why`.
pub fn last_fence(tasks: &Value) -> Option<String> {
    // Tasks come oldest first.
    let task = tasks.as_array()?.iter().rfind(|t| t["fence"].is_object())?;
    let text = escape(s(&task["fence"]["text"]));
    Some(if task["fence"]["fenced"] == true {
        format!("fenced: {text}")
    } else {
        format!("UNFENCED: {text}")
    })
}

/// A `fence` event's line, and whether it is fine (fenced) or a warning (unfenced):
/// `berth: fenced: ~/code/app + tmp · network on (Landlock ABI 7)`, or
/// `berth: warning: unfenced: why`.
pub fn fence_line(p: &Value) -> (bool, String) {
    let text = escape(s(&p["text"]));
    if p["fenced"].as_bool() == Some(true) {
        (true, format!("berth: fenced: {text}"))
    } else {
        (false, format!("berth: warning: unfenced: {text}"))
    }
}

/// What to do about a task that failed with a code the user can act on, beyond its
/// message: `path_changed` names the command that links the session again, and a
/// missing agent program how to install or repoint it.
pub fn task_hint(task: &Value) -> Option<String> {
    match task["error_code"].as_str()? {
        "path_changed" | "not_found" => Some(format!(
            "check what happened to the directory, then link it again: berth session link {} DIR",
            short(&task["session_id"])
        )),
        "agent_not_found" => Some(String::from(
            "install the agent's program, or point the agent at it: berth agent edit NAME \
             --command PATH (berth agent list shows each agent's command)",
        )),
        _ => None,
    }
}

/// How a task ended, in one line: `task 0d41be27 failed (exit 1) [code]: why`.
pub fn task_line(task: &Value) -> String {
    let mut line = format!("task {} {}", short(&task["id"]), s(&task["status"]));
    if let Some(c) = task["exit_code"].as_i64() {
        line.push_str(&format!(" (exit {c})"));
    }
    if let Some(code) = task["error_code"].as_str() {
        line.push_str(&format!(" [{code}]"));
    }
    if let Some(e) = task["error"].as_str() {
        line.push_str(&format!(": {}", inert(e)));
    }
    line
}

/// What was denied during a task, in sentences, each with its hint: what the agent's
/// permission system denied, then what the fence put back. Nothing when nothing was.
pub fn denials_lines(task: &Value) -> Vec<(String, String)> {
    let denials: Vec<&Value> = task["denials"].as_array().into_iter().flatten().collect();
    // A read-only run's directory is unwritable by the policy in force, not by the
    // fence's own rules: the setting to look at is `permissions`, not `fence`.
    let read_only = task["fence"]["text"]
        .as_str()
        .is_some_and(|t| t.contains(" read-only + tmp"));
    let fence_hint = if read_only {
        format!(
            "hint: this run was read-only: the \"permissions\" in force leave the directory unwritable (berth settings show --session {} names the file that set them)",
            short(&task["session_id"])
        )
    } else {
        String::from(FENCE_HINT)
    };
    [
        (
            false,
            "the agent's permission system",
            "hint: to allow them, register the agent with a wider policy (berth agent add NAME --kind KIND --permissions edit|full) and use it in a new session, or set \"permissions\" in your user settings",
        ),
        (true, "the fence", fence_hint.as_str()),
    ]
    .into_iter()
    .filter_map(|(by_fence, who, hint)| {
        let n = denials
            .iter()
            .filter(|d| (d["by"] == "fence") == by_fence)
            .count();
        // Each was shown as it happened: the count, not the text again.
        (n > 0).then(|| {
            (
                format!("{who} denied {n} action{} (shown above)", if n == 1 { "" } else { "s" }),
                hint.to_owned(),
            )
        })
    })
    .collect()
}

/// What to do about a denial by the fence's own rules.
const FENCE_HINT: &str = "hint: the fence keeps an agent to its directory and off its .git/hooks, .git/config and .berth; make such changes in your own shell, or set \"fence\": \"off\" in your user settings to run agents unfenced";

/// A task's change summary: one line (`3 files changed, +20 −4`), then one per file.
/// Nothing for a task without a record (scratch runs, tasks that did not run).
pub fn changes_lines(task: &Value) -> Vec<String> {
    let Ok(Some(changes)) =
        serde_json::from_value::<Option<berth_core::api::Changes>>(task["changes"].clone())
    else {
        return Vec::new();
    };
    let mut out = vec![changes.summary()];
    for f in &changes.files {
        let counts = match (f.added, f.removed) {
            (Some(a), Some(r)) => format!("+{a} \u{2212}{r}"),
            _ => String::from("binary"),
        };
        let what = match &f.from {
            Some(from) => format!("{} \u{2192} {}", inert(from), inert(&f.path)),
            None => inert(&f.path),
        };
        out.push(format!("  {:<9} {what}  {counts}", f.status));
    }
    for s in &changes.skipped {
        out.push(format!(
            "  not tracked {}  ({})",
            inert(&s.path),
            inert(&s.reason)
        ));
    }
    if !changes.fenced {
        // Unfenced, the agent could write anywhere the user can.
        out.push(String::from(
            "  (only the bound directory is tracked: changes made outside it are not in this list)",
        ));
    }
    if !changes.files.is_empty() {
        out.push(format!(
            "  (berth task diff {0} shows them; berth task undo {0} puts them back)",
            short(&task["id"])
        ));
    }
    out
}

/// `berth daemon token list`: one row per token, never the token itself.
pub fn daemon_tokens(tokens: &Value) {
    let mut rows = vec![vec![
        "NAME".into(),
        "MACHINE".into(),
        "STATE".into(),
        "LAST SEEN".into(),
        "REVOKED".into(),
    ]];
    for t in tokens.as_array().into_iter().flatten() {
        let machine = match (t["machine_name"].as_str(), t["machine_id"].as_str()) {
            (Some(name), Some(id)) => format!("{} ({})", inert(name), short(&Value::from(id))),
            (Some(name), None) => inert(name),
            (None, Some(id)) => short(&Value::from(id)),
            (None, None) => "(not registered yet)".into(),
        };
        let state = if !t["revoked_at"].is_null() {
            "revoked"
        } else if t["online"].as_bool() == Some(true) {
            "online"
        } else {
            "offline"
        };
        rows.push(vec![
            inert(s(&t["name"])),
            machine,
            state.into(),
            t["last_seen"].as_str().unwrap_or("-").into(),
            t["revoked_at"].as_str().unwrap_or("-").into(),
        ]);
    }
    table(rows);
}

/// What the request is about, on one line: its command, else its paths, else its
/// title.
pub fn what(a: &Value) -> String {
    let line = match (a["command"].as_str(), a["paths"].as_array()) {
        (Some(cmd), _) => cmd.to_owned(),
        (None, Some(paths)) if !paths.is_empty() => paths
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        _ => a["title"].as_str().unwrap_or_default().to_owned(),
    };
    berth_core::quote::escape_text(&line).into_owned()
}

/// How a decided request was decided, in words.
pub fn decided(d: &Value) -> String {
    let verdict = match d["decision"].as_str() {
        Some("allow") => "allowed",
        Some("deny") => "denied",
        _ => "decided",
    };
    let by = match (d["by"].as_str(), d["who"].as_str()) {
        (Some("human"), Some(who)) => who.to_owned(),
        (Some("human"), None) => "you".to_owned(),
        (Some("timeout"), _) => "nobody: it timed out".to_owned(),
        (Some(other), _) => other.to_owned(),
        (None, _) => "?".to_owned(),
    };
    let via = d["via"]
        .as_str()
        .map(|v| format!(" via {v}"))
        .unwrap_or_default();
    format!("{verdict} by {by}{via}")
}
