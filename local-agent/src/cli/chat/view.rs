//! What the composer shows, as data: the header's lines and tone, and the transcript's
//! styled lines. No terminal here; `tty` paints it, tests read it.

use super::super::render::short;
use super::super::render::{self, ignored_lines, inert, live_state};
use berth_core::settings::trust::ProjectLayerReport;
use serde_json::Value;
use std::collections::BTreeMap;

/// How a transcript line is painted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// The agent's words.
    Plain,
    /// What the user sent.
    You,
    /// Tool calls, results, diagnostics, notes.
    Dim,
    /// Something to read: an error, ignored settings.
    Alert,
    /// An action the agent's permission system denied.
    Denied,
    /// Berth's own news: binding changes, command results.
    Info,
    /// A line a task added, in `/diff`.
    Added,
    /// A line a task removed, in `/diff`.
    Removed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub style: Style,
    pub text: String,
}

impl Line {
    pub fn new(style: Style, text: impl Into<String>) -> Line {
        Line {
            style,
            text: text.into(),
        }
    }
}

/// The header's colour: it changes with the binding's state and the current wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Bound, state ok, nothing waiting.
    Bound,
    /// Not bound: the agent works in a scratch directory.
    Unbound,
    /// A task waits for the directory's lock or for a machine.
    Waiting,
    /// The binding's machine is offline.
    Offline,
    /// The directory is missing or now names another directory.
    Problem,
    /// The binding was changed from another terminal (for a few seconds).
    Relinked,
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn one_line(text: &str, max: usize) -> String {
    let flat = inert(text).replace(['\n', '\t'], " ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// What the composer knows about its session, folded from the session document and
/// the transcript's events.
#[derive(Debug, Default)]
pub struct View {
    pub session: Value,
    /// The agent's permission policy as the header shows it.
    pub policy: Option<String>,
    /// This machine's id (bindings elsewhere are shown as recorded).
    pub here: String,
    /// Tasks not yet ended: id → (status, wait reason).
    pub active: BTreeMap<String, (String, Option<String>)>,
    /// The last binding change made elsewhere, shown until `relinked_until`.
    pub relinked: Option<String>,
    pub relinked_until: Option<std::time::Instant>,
    /// Binding changes this composer made and whose event has not come back yet.
    pub own_changes: usize,
    /// Undos this composer made (`/undo`, which said what it put back) whose event has
    /// not come back yet.
    pub own_undos: usize,
    /// The session's `updated_at` when it was opened: a binding change stamped no later
    /// happened before (a replay), not from another terminal now.
    pub opened_at: String,
    /// The highest transcript `seq` seen.
    pub last_seq: i64,
    /// The state the directory showed at the last look (`ok`, `changed`, …).
    pub state: String,
    /// How the last run was fenced (from its `fence` event): fenced, and the text.
    pub fence: Option<(bool, String)>,
    /// The agent's last stderr line: a denial naming it points at it.
    pub last_stderr: Option<String>,
    /// What the agent asks and no one has answered yet (`approval` events), oldest
    /// first: the prompt below the transcript answers the first.
    pub pending: Vec<Value>,
    pub lines: Vec<Line>,
    /// The message streaming now, and where its lines start in [`View::lines`]: the
    /// whole message replaces them when it arrives.
    pub live: berth_local_agent::front::live::Live,
    pub live_from: Option<usize>,
    /// The session's tasks' usage added up, as the server last said (`None` before it
    /// answered, or from a server without usage).
    pub usage: Option<berth_core::usage::UsageTotals>,
    /// A task ended since `usage` was read: read it again.
    pub usage_stale: bool,
}

impl View {
    pub fn id(&self) -> String {
        s(&self.session["id"]).to_owned()
    }

    pub fn binding(&self) -> &Value {
        &self.session["binding"]
    }

    /// Takes a fresh session document. The directory is looked at in full (a
    /// validation, which writes a probe file there) only when the binding is new to
    /// this view; the once-a-second rereads keep the earlier finding and only notice a
    /// directory that is gone, so an open composer never writes into the directory.
    pub fn set_session(&mut self, session: Value) {
        let same = !self.session["binding"].is_null()
            && self.session["binding"]["dir"] == session["binding"]["dir"]
            && self.session["binding"]["daemon"] == session["binding"]["daemon"];
        self.session = session;
        let b = self.binding();
        self.state = if b.is_null() {
            String::new()
        } else if !same {
            live_state(b, &self.here)
        } else {
            let gone = b["daemon"].as_str() == Some(self.here.as_str())
                && b["dir"]
                    .as_str()
                    .is_some_and(|d| !std::path::Path::new(d).is_dir());
            let recorded = b["state"].as_str().unwrap_or("");
            match (gone, self.state.as_str()) {
                (true, _) => String::from("missing"),
                (false, "changed") if recorded == "ok" => String::from("changed"),
                (false, _) => recorded.to_owned(),
            }
        };
    }

    /// Shows lines (after a message's streamed lines, which then stay).
    pub fn push(&mut self, style: Style, text: impl Into<String>) {
        self.live_from = None;
        for l in text.into().split('\n') {
            self.lines.push(Line::new(style, l));
        }
        const KEEP: usize = 5000;
        if self.lines.len() > KEEP {
            self.lines.drain(..self.lines.len() - KEEP);
        }
    }

    /// The id of a task still running or waiting (the newest).
    pub fn running(&self) -> Option<&str> {
        self.active.keys().next_back().map(String::as_str)
    }

    pub fn tone(&self) -> Tone {
        if self
            .relinked_until
            .is_some_and(|t| std::time::Instant::now() < t)
        {
            return Tone::Relinked;
        }
        if self.binding().is_null() {
            return Tone::Unbound;
        }
        match self.state.as_str() {
            "missing" | "changed" => return Tone::Problem,
            "machine_offline" => return Tone::Offline,
            _ => {}
        }
        if self
            .active
            .values()
            .any(|(st, _)| st.starts_with("waiting"))
        {
            return Tone::Waiting;
        }
        Tone::Bound
    }

    /// The header: the session, where it works (privacy-stripped) and how, and what
    /// is happening now.
    pub fn header(&self) -> [String; 3] {
        let sess = &self.session;
        let id = short(&sess["id"]);
        // The default title only repeats the id.
        let title = match one_line(s(&sess["title"]), 40) {
            t if t.is_empty() || t == format!("session {id}") => String::new(),
            t => format!(" {t}"),
        };
        let policy = self.policy.as_deref().unwrap_or("?");
        // Before anything a narrow terminal may cut (the title is at most 40 columns):
        // the transcript's `berth: fenced: …` line has the details.
        let fence = match &self.fence {
            Some((true, _)) => " · fenced",
            Some((false, _)) => " · UNFENCED",
            None => "",
        };
        let usage = self
            .usage
            .as_ref()
            .map(|u| format!(" · {}", u.brief()))
            .unwrap_or_default();
        let first = format!(
            "session {id}{title}{fence} · agent {} · may {policy}{usage}",
            s(&sess["agent"]),
        );
        let b = self.binding();
        let second = if b.is_null() {
            String::from(
                "dir (not bound: the agent works in a scratch directory) · /link binds one",
            )
        } else {
            let state = match self.state.as_str() {
                "ok" => String::from("ok"),
                "missing" => String::from("MISSING: the directory is gone (/link or /unlink)"),
                "changed" => String::from(
                    "CHANGED: the path names another directory; runs are refused until /link",
                ),
                "machine_offline" => String::from("MACHINE OFFLINE: tasks wait for it"),
                other => other.to_owned(),
            };
            format!(
                "dir {} · {} · on {} · {}",
                inert(s(&b["display"])),
                s(&b["mode"]),
                inert(s(&b["daemon_name"])),
                state
            )
        };
        let third = if let Some(note) = self
            .relinked
            .as_ref()
            .filter(|_| self.tone() == Tone::Relinked)
        {
            note.clone()
        } else if let Some((id, (status, reason))) = self.active.iter().next_back() {
            match reason {
                Some(r) if status.starts_with("waiting") => {
                    let r = inert(r);
                    let what = r.strip_prefix("waiting for ").unwrap_or(&r);
                    // A person's answer, not a lock or a machine: said first, as the
                    // session list and the web page say it.
                    let needs = if status == "waiting_approval" {
                        "NEEDS YOU · "
                    } else {
                        ""
                    };
                    format!(
                        "{needs}task {} waits for {what}",
                        short(&Value::from(id.as_str()))
                    )
                }
                _ => format!(
                    "task {} {status} · Ctrl-C cancels it",
                    short(&Value::from(id.as_str()))
                ),
            }
        } else {
            String::from("idle · Enter sends · Ctrl-J new line · Tab completes · /help")
        };
        [first, second, third]
    }

    /// Folds one transcript event (`data` is `{seq, task_id, kind, at, payload}`) into
    /// the view. Returns true when the binding changed (the session must be read again).
    pub fn event(&mut self, kind: &str, data: &Value) -> bool {
        if kind == "delta" {
            self.delta(s(&data["task_id"]), &data["payload"]);
            return false;
        }
        if let Some(seq) = data["seq"].as_i64() {
            if seq <= self.last_seq {
                return false;
            }
            self.last_seq = seq;
        }
        let p = &data["payload"];
        let task = s(&data["task_id"]).to_owned();
        match kind {
            "message" => {
                let origin = s(&p["origin"]);
                let who = match origin {
                    "" | "desktop" => String::from("you"),
                    other => format!("you ({})", inert(other)),
                };
                let text = inert(s(&p["text"])).replace('\n', "\n      ");
                self.push(Style::You, format!("{who} › {text}"));
                self.active.insert(task, (String::from("queued"), None));
            }
            "status" => {
                let status = s(&p["status"]).to_owned();
                let reason = p["wait_reason"].as_str().map(str::to_owned);
                if status.starts_with("waiting") {
                    let r = inert(reason.as_deref().unwrap_or(&status));
                    if r.starts_with("waiting") {
                        self.push(Style::Dim, r);
                    } else {
                        self.push(Style::Dim, format!("waiting: {r}"));
                    }
                } else if status == "running"
                    && self
                        .active
                        .get(&task)
                        .is_some_and(|(st, _)| st.starts_with("waiting"))
                {
                    self.push(Style::Dim, "done waiting; running");
                }
                if !matches!(
                    status.as_str(),
                    "succeeded" | "failed" | "cancelled" | "interrupted" | "refused"
                ) {
                    self.active.insert(task, (status, reason));
                }
            }
            "agent" => {
                let thought = match s(&p["type"]) {
                    "text" => Some(false),
                    "thinking" => Some(true),
                    _ => None,
                };
                if let Some(thought) = thought {
                    self.unstream(&task, thought, s(&p["text"]));
                }
                self.agent(p);
            }
            "approval" => self.approval(p),
            "task" => {
                self.active.remove(&task);
                self.usage_stale = true;
                self.finish(&p["task"]);
            }
            // An undo made elsewhere (`berth task undo`, another terminal), or replayed.
            "undo" => {
                if self.own_undos > 0 {
                    self.own_undos -= 1;
                } else {
                    let n = p["files"].as_array().map_or(0, Vec::len);
                    let commit = if p["commit"].is_string() {
                        " (a revert commit)"
                    } else {
                        ""
                    };
                    self.push(
                        Style::Info,
                        format!(
                            "undone: task {}: {n} file{} put back as before it{commit}",
                            render::short(&data["task_id"]),
                            if n == 1 { "" } else { "s" }
                        ),
                    );
                }
            }
            "binding_changed" => {
                let from = p["from"].as_str().map(inert);
                let to = p["to"].as_str().map(inert);
                let what = match (&from, &to) {
                    (_, Some(to)) => format!("now bound to {to}"),
                    (Some(_), None) => {
                        String::from("unbound: the agent works in a scratch directory")
                    }
                    (None, None) => String::from("binding unchanged"),
                };
                let replayed = s(&data["at"]) <= self.opened_at.as_str();
                if replayed {
                    self.push(Style::Info, format!("directory: {what}"));
                } else if self.own_changes > 0 {
                    self.own_changes -= 1;
                    self.push(Style::Info, format!("directory: {what}"));
                } else {
                    let note = format!("relinked from another terminal: {what}");
                    self.push(Style::Info, note.clone());
                    self.relinked = Some(note);
                    self.relinked_until =
                        Some(std::time::Instant::now() + std::time::Duration::from_secs(5));
                }
                return true;
            }
            _ => {}
        }
        false
    }

    /// A piece of a message as it streams: on the message's own lines, which the whole
    /// message replaces when it arrives.
    fn delta(&mut self, task: &str, p: &Value) {
        let Some(piece) = self.live.delta(task, p) else {
            return;
        };
        let text = if piece.thought {
            // The reasoning is one dimmed line, as when it is shown whole.
            inert(piece.text).replace(['\n', '\t'], " ")
        } else {
            inert(piece.text)
        };
        let open = self
            .live_from
            .is_some_and(|from| from < self.lines.len() && !piece.first);
        if !open {
            let (style, label) = if piece.thought {
                (Style::Dim, "(thinking) ")
            } else {
                (Style::Plain, "")
            };
            let from = self.lines.len();
            self.push(style, format!("{label}{text}"));
            self.live_from = Some(from);
            return;
        }
        let mut rest = text.split('\n');
        if let (Some(first), Some(last)) = (rest.next(), self.lines.last_mut()) {
            last.text.push_str(first);
        }
        for more in rest {
            self.lines.push(Line::new(Style::Plain, more));
        }
    }

    /// The whole message arrived: the lines its pieces made go (when nothing was
    /// shown after them), and the message is shown whole in their place.
    fn unstream(&mut self, task: &str, thought: bool, text: &str) {
        let _ = self.live.whole(task, thought, text);
        if let Some(from) = self.live_from.take()
            && from < self.lines.len()
        {
            self.lines.truncate(from);
        }
    }

    /// A request put to a person, or its decision.
    fn approval(&mut self, a: &Value) {
        use super::super::approvals::{decided, what};
        use berth_core::approval::Approval;
        let id = s(&a["id"]).to_owned();
        let said = format!("{} {}", inert(s(&a["kind"])), inert(&what(a)));
        match a.get("decision").filter(|d| d.is_object()) {
            None => {
                if !self.pending.iter().any(|p| p["id"] == a["id"]) {
                    self.pending.push(a.clone());
                }
                self.push(
                    Style::Alert,
                    format!(
                        "⏸ the agent asks: {said} ({}) · y allow · n deny · a always · d details",
                        Approval::short_id(&id)
                    ),
                );
            }
            Some(d) => {
                self.pending.retain(|p| p["id"] != a["id"]);
                let style = if d["decision"] == "allow" {
                    Style::Info
                } else {
                    Style::Denied
                };
                self.push(style, format!("{}: {said}", decided(d)));
            }
        }
    }

    /// The lines `d` shows of a request: everything the agent sent with it.
    pub fn details(a: &Value) -> Vec<String> {
        let mut out = vec![format!(
            "request {} · {} · until {}",
            s(&a["id"]),
            inert(s(&a["kind"])),
            s(&a["deadline"])
        )];
        out.push(format!("title: {}", inert(s(&a["title"]))));
        if let Some(c) = a["command"].as_str() {
            out.push(format!("command: {}", inert(c)));
        }
        for p in a["paths"].as_array().into_iter().flatten() {
            out.push(format!("path: {}", inert(s(p))));
        }
        let input = serde_json::to_string_pretty(&a["input"]).unwrap_or_default();
        for line in input.lines().take(40) {
            out.push(format!("  {}", inert(line)));
        }
        let options: Vec<String> = a["options"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| format!("{} ({})", inert(s(&o["name"])), s(&o["kind"])))
            .collect();
        if !options.is_empty() {
            out.push(format!("the agent offers: {}", options.join(", ")));
        }
        out
    }

    fn agent(&mut self, p: &Value) {
        match s(&p["type"]) {
            "text" => self.push(Style::Plain, inert(s(&p["text"]))),
            "thinking" => self.push(
                Style::Dim,
                format!("(thinking) {}", one_line(s(&p["text"]), 200)),
            ),
            "tool_use" => {
                let input = p["input"].to_string();
                self.push(
                    Style::Dim,
                    format!(
                        "→ {} {}",
                        one_line(s(&p["name"]), 40),
                        one_line(&input, 100)
                    ),
                );
            }
            "tool_result" => {
                let mark = if p["is_error"].as_bool() == Some(true) {
                    "✗"
                } else {
                    "←"
                };
                self.push(
                    Style::Dim,
                    format!("  {mark} {}", one_line(s(&p["output"]), 100)),
                );
            }
            "stderr" => {
                self.last_stderr = Some(s(&p["line"]).to_owned());
                self.push(Style::Dim, one_line(s(&p["line"]), 400));
            }
            "progress" => {
                // One line, brought up to date: `recording ~/x: 41,000 of 100,000 files`.
                let text = one_line(s(&p["text"]), 200);
                let head = text.split(": ").next().unwrap_or_default().to_owned();
                match self.lines.last_mut() {
                    Some(last)
                        if last.style == Style::Dim
                            && last.text.starts_with(&format!("{head}: ")) =>
                    {
                        last.text = text;
                    }
                    _ => self.push(Style::Dim, text),
                }
            }
            "fence" => {
                self.fence = Some((p["fenced"] == true, s(&p["text"]).to_owned()));
                match render::fence_line(p) {
                    (true, line) => self.push(Style::Dim, line),
                    (false, line) => self.push(Style::Alert, line),
                }
            }
            "error" => self.push(Style::Alert, format!("error: {}", inert(s(&p["message"])))),
            "denied" => {
                let by = if p["by"] == "fence" { " (fence)" } else { "" };
                // Said once: a command agent's denial is its stderr line, just shown.
                let said = self.last_stderr.as_deref() == p["target"].as_str();
                let line = if said {
                    format!("DENIED{by}: the line above")
                } else {
                    format!(
                        "DENIED{by} {} {}",
                        one_line(s(&p["tool"]), 40),
                        one_line(s(&p["target"]), 120)
                    )
                };
                self.push(Style::Denied, line);
            }
            "ignored" => match serde_json::from_value::<ProjectLayerReport>(p.clone()) {
                Ok(report) => {
                    for line in ignored_lines(&report) {
                        self.push(Style::Alert, line);
                    }
                }
                Err(_) => self.push(Style::Alert, "warning: some project settings were ignored"),
            },
            _ => {}
        }
    }

    fn finish(&mut self, task: &Value) {
        let style = if s(&task["status"]) == "succeeded" {
            Style::Dim
        } else {
            Style::Alert
        };
        self.push(style, render::task_line(task));
        if let Some(hint) = render::task_hint(task) {
            self.push(Style::Info, format!("hint: {hint}"));
        }
        for l in render::changes_lines(task) {
            self.push(Style::Info, l);
        }
        for (denied, _) in render::denials_lines(task) {
            self.push(Style::Denied, denied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(seq: i64, task: &str, payload: Value) -> Value {
        json!({"seq": seq, "task_id": task, "payload": payload})
    }

    /// Issue 37: a long first snapshot's progress is one line, brought up to date.
    #[test]
    fn progress_is_one_line_kept_up_to_date() {
        let mut v = View {
            session: json!({"id": "0193abcdef", "agent": "a", "binding": null}),
            ..View::default()
        };
        let progress = |text: &str, done: u64| json!({"type": "progress", "text": text, "done": done, "total": 100_000});
        v.event(
            "message",
            &ev(1, "t1", json!({"origin": "desktop", "text": "go"})),
        );
        v.event(
            "agent",
            &ev(
                2,
                "t1",
                progress("recording ~/code/mono: looking for changed files", 0),
            ),
        );
        v.event(
            "agent",
            &ev(
                3,
                "t1",
                progress("recording ~/code/mono: 41,000 of 100,000 files", 41_000),
            ),
        );
        v.event(
            "agent",
            &ev(
                4,
                "t1",
                progress("recording ~/code/mono: 99,000 of 100,000 files", 99_000),
            ),
        );
        v.event(
            "agent",
            &ev(5, "t1", json!({"type": "text", "text": "hello"})),
        );
        let texts: Vec<&str> = v.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "you › go",
                "recording ~/code/mono: 99,000 of 100,000 files",
                "hello"
            ]
        );
    }

    #[test]
    fn events_fold_into_lines_and_active_tasks() {
        let mut v = View {
            session: json!({"id": "0193abcdef", "agent": "a", "binding": null}),
            ..View::default()
        };
        v.event(
            "message",
            &ev(1, "t1", json!({"origin": "desktop", "text": "hi\u{1b}[2J"})),
        );
        assert_eq!(v.running(), Some("t1"));
        v.event(
            "status",
            &ev(2, "t1", json!({"status": "waiting_lock", "wait_reason": "waiting for the directory: in use by task t0"})),
        );
        assert_eq!(v.tone(), Tone::Unbound, "unbound wins over waiting");
        assert!(v.header()[2].contains("task t1 waits for the directory: in use by task t0"));
        v.event(
            "agent",
            &ev(
                3,
                "t1",
                json!({"type": "denied", "tool": "Bash", "target": "rm -rf /"}),
            ),
        );
        v.event(
            "task",
            &ev(
                4,
                "t1",
                json!({"task": {"id": "t1", "status": "cancelled"}}),
            ),
        );
        assert_eq!(v.running(), None);
        // A replayed event changes nothing.
        v.event("message", &ev(1, "t1", json!({"text": "again"})));
        let texts: Vec<(Style, &str)> =
            v.lines.iter().map(|l| (l.style, l.text.as_str())).collect();
        assert_eq!(
            texts,
            [
                (Style::You, "you › hi\\x1b[2J"),
                (Style::Dim, "waiting for the directory: in use by task t0"),
                (Style::Denied, "DENIED Bash rm -rf /"),
                (Style::Alert, "task t1 cancelled"),
            ]
        );
    }

    /// Issue 56: the header carries the session's usage totals, read again once a task
    /// ends.
    #[test]
    fn the_header_shows_the_sessions_usage() {
        let mut v = View {
            session: json!({"id": "s", "agent": "a", "binding": null}),
            policy: Some("edit".into()),
            ..View::default()
        };
        assert_eq!(v.header()[0], "session s · agent a · may edit");
        v.usage = Some(berth_core::usage::UsageTotals {
            tasks: 2,
            input: 1000,
            output: 234,
            cost_usd: Some(0.05),
            ..Default::default()
        });
        assert_eq!(
            v.header()[0],
            "session s · agent a · may edit · 1,234 tokens, $0.0500"
        );
        assert!(!v.usage_stale);
        v.event(
            "task",
            &ev(
                3,
                "t1",
                json!({"task": {"id": "t1", "status": "succeeded"}}),
            ),
        );
        assert!(v.usage_stale, "a finished task makes the totals stale");
    }

    #[test]
    fn the_header_says_how_the_last_run_was_fenced() {
        let mut v = View {
            session: json!({"id": "s", "agent": "a", "binding": null}),
            ..View::default()
        };
        assert!(!v.header()[0].contains("fenced"), "{:?}", v.header());
        let fence = |n, fenced, text: &str| {
            ev(
                n,
                "t1",
                json!({"type": "fence", "fenced": fenced, "text": text}),
            )
        };
        v.event(
            "agent",
            &fence(1, true, "~/code/app + tmp · network on (Landlock ABI 7)"),
        );
        assert!(
            v.header()[0].starts_with("session s · fenced · agent a"),
            "{:?}",
            v.header()
        );
        assert!(
            v.lines
                .iter()
                .any(|l| l.text == "berth: fenced: ~/code/app + tmp · network on (Landlock ABI 7)")
        );
        v.event(
            "agent",
            &fence(2, false, "your settings turn the fence off"),
        );
        assert!(
            v.header()[0].starts_with("session s · UNFENCED · agent a"),
            "{:?}",
            v.header()
        );
    }

    #[test]
    fn a_binding_change_from_elsewhere_turns_the_header() {
        let mut v = View {
            session: json!({"id": "s", "agent": "a",
                "binding": {"display": "~/code/app", "mode": "in-place", "daemon": "m", "daemon_name": "laptop", "state": "ok"}}),
            here: String::from("elsewhere"),
            ..View::default()
        };
        v.set_session(v.session.clone());
        assert_eq!(v.tone(), Tone::Bound);
        assert!(v.header()[1].starts_with("dir ~/code/app · in-place · on laptop · ok"));
        v.opened_at = String::from("2026-12-01T10:00:00.000Z");
        let at = |mut e: Value, at: &str| {
            e["at"] = json!(at);
            e
        };
        let old = at(
            ev(1, "", json!({"from": null, "to": "~/o"})),
            "2026-12-01T09:59:59.000Z",
        );
        v.event("binding_changed", &old);
        assert_eq!(v.tone(), Tone::Bound, "a replayed change is old news");
        v.own_changes = 1;
        let mine = at(
            ev(2, "", json!({"from": null, "to": "~/a"})),
            "2026-12-01T10:00:01.000Z",
        );
        assert!(v.event("binding_changed", &mine));
        assert_eq!(v.tone(), Tone::Bound);
        let theirs = at(
            ev(3, "", json!({"from": "~/a", "to": "~/b"})),
            "2026-12-01T10:00:02.000Z",
        );
        v.event("binding_changed", &theirs);
        assert_eq!(v.tone(), Tone::Relinked);
        assert!(v.header()[2].contains("relinked from another terminal: now bound to ~/b"));
        let mut offline = v.session.clone();
        offline["binding"]["state"] = json!("machine_offline");
        v.relinked_until = None;
        v.set_session(offline);
        assert_eq!(v.tone(), Tone::Offline);
    }

    /// A message's pieces show as they come, on the message's own lines; the whole
    /// message replaces them, so it shows once.
    #[test]
    fn pieces_show_as_they_come_and_the_whole_message_once() {
        let mut v = View::default();
        let delta = |text: &str, part: u64| json!({"task_id": "t1", "payload": {"type": "delta", "text": text, "part": part}});
        v.event("delta", &delta("Hel", 0));
        v.event("delta", &delta("lo\nwor", 1));
        let texts = |v: &View| -> Vec<(Style, String)> {
            v.lines.iter().map(|l| (l.style, l.text.clone())).collect()
        };
        assert_eq!(
            texts(&v),
            [(Style::Plain, "Hello".into()), (Style::Plain, "wor".into())]
        );
        v.event(
            "agent",
            &ev(5, "t1", json!({"type": "text", "text": "Hello\nworld"})),
        );
        assert_eq!(
            texts(&v),
            [
                (Style::Plain, "Hello".into()),
                (Style::Plain, "world".into())
            ]
        );
    }
}
