//! `berth chat [SESSION]`: one conversation with a session's agent, its binding always
//! on screen.
//!
//! On a terminal it is a full-screen composer (`tty`): the header pinned at the top,
//! the transcript streaming below it, an input line with history at the bottom. When
//! stdin or stdout is not a terminal it is a plain line mode (`line`) that scripts can
//! drive. Both speak to the control socket as every other command does (a daemon's
//! socket on a daemon's machine), and share the actions here.

mod diff;
mod editor;
mod line;
pub mod log;
mod slash;
mod tty;
mod view;

use super::ChatArgs;
use super::client::{Client, encode};
use super::commands::{add_project_layer, agent_policy, create_session};
use super::error::CliError;
use super::render::short;
use super::render::{ignored_lines, inert, tasks_lines};
use super::setup::{absolute, runtime};
use berth_core::settings::trust::ProjectLayerReport;
use berth_local_agent::ExecutorConfig;
use hyper::Method;
use serde_json::{Value, json};
use std::io::IsTerminal;
use std::path::PathBuf;
use view::{Style, View};

pub fn run(home: Option<PathBuf>, args: ChatArgs) -> Result<u8, CliError> {
    let config = ExecutorConfig::from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))?;
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let line_mode = args.line || args.json || !terminal;
    runtime()?.block_on(async move {
        let mut chat = Chat::open(config, &args).await?;
        if line_mode {
            line::run(&mut chat, args.json).await
        } else {
            tty::run(&mut chat).await
        }
    })
}

/// Whether a new chat session binds the current directory: `Some` when Berth's rules
/// accept it (`berth check`'s validation, the read/write probe included), with the
/// line that says so; else `None` and why it stays unbound. With `--mode` the binding
/// was asked for, so a refusal is the command's error.
fn where_you_are(
    config: &ExecutorConfig,
    cwd: &std::path::Path,
    asked: bool,
) -> Result<(Option<PathBuf>, String), CliError> {
    let input = cwd.to_str().ok_or_else(|| {
        CliError::usage(
            format!("{} is not valid UTF-8", cwd.display()),
            "Berth handles UTF-8 paths only; pass --dir PATH or --no-dir",
        )
    })?;
    let report = berth_local_agent::check_with(config, input, cwd);
    let shown = report
        .display
        .clone()
        .unwrap_or_else(|| String::from("here"));
    if report.ok {
        let note =
            format!("binding the current directory {shown} (--no-dir keeps a new session unbound)");
        return Ok((Some(cwd.to_owned()), note));
    }
    let why = match &report.code {
        Some(code) => format!("{} ({code})", report.message),
        None => report.message.clone(),
    };
    if asked {
        return Err(CliError {
            message: why,
            hint: report
                .hint
                .clone()
                .unwrap_or_else(|| String::from("cd into your project, or pass --dir PATH")),
            code: report.code,
            exit: 1,
        });
    }
    Ok((
        None,
        format!("not bound: {why}; the agent works in a scratch directory (/link PATH binds one)"),
    ))
}

/// The session being chatted in, and what acts on it.
#[derive(Debug)]
pub struct Chat {
    client: Client,
    config: ExecutorConfig,
    /// The shell's directory: `/link` without a path binds it; relative paths start here.
    cwd: PathBuf,
    /// The user's home, for `~` in `/link` paths.
    home: PathBuf,
    pub view: View,
}

/// What an action has to say: lines in the transcript (or on stdout in line mode).
pub type Said = Vec<(Style, String)>;

impl Chat {
    /// Opens the session named, or creates one from `--agent/--dir/--title/--mode`.
    async fn open(config: ExecutorConfig, args: &ChatArgs) -> Result<Chat, CliError> {
        let client = Client::new(&config.berth_home);
        let cwd = std::env::current_dir().map_err(|e| {
            CliError::new(
                format!("cannot read the current directory: {e}"),
                "cd into an existing directory",
            )
        })?;
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| cwd.clone());
        let mut said = Said::new();
        let session = match &args.session {
            Some(id) => {
                client
                    .get(&format!("/api/v1/sessions/{}", encode(id)))
                    .await?
            }
            None => {
                // Like `claude` and `codex`, a new chat works where it was started:
                // the current directory, when the rules accept it.
                let dir = match (&args.dir, args.no_dir) {
                    (Some(dir), _) => Some(dir.clone()),
                    (None, true) => None,
                    (None, false) => {
                        let (dir, note) = where_you_are(&config, &cwd, args.mode.is_some())?;
                        said.push((Style::Info, note));
                        dir
                    }
                };
                let (s, agent_from) = create_session(
                    &client,
                    args.agent.clone(),
                    args.title.clone(),
                    dir.as_deref(),
                    args.mode,
                    None,
                )
                .await?;
                said.push((
                    Style::Info,
                    format!(
                        "created session {} with agent {}{}",
                        short(&s["id"]),
                        s["agent"].as_str().unwrap_or("?"),
                        agent_from
                            .map(|f| format!(" (named at {f})"))
                            .unwrap_or_default()
                    ),
                ));
                s
            }
        };
        let here = client.machine();
        let mut chat = Chat {
            client,
            config,
            cwd,
            home,
            view: View {
                here,
                ..View::default()
            },
        };
        chat.adopt(session).await;
        said.extend(chat.layer_notes());
        for (style, text) in said {
            chat.view.push(style, text);
        }
        Ok(chat)
    }

    /// Takes a session document as the current one (and its agent's policy).
    async fn adopt(&mut self, session: Value) {
        if self.view.opened_at.is_empty() {
            self.view.opened_at = session["updated_at"].as_str().unwrap_or("").to_owned();
        }
        self.view.policy = agent_policy(&self.client, &session).await;
        self.view.set_session(session);
        self.read_usage().await;
    }

    /// Reads the session's usage totals for the header; a server that cannot say
    /// (an older one) leaves them out.
    async fn read_usage(&mut self) {
        self.view.usage_stale = false;
        let id = self.view.id();
        self.view.usage = super::usage::of_session(&self.client, &id).await.ok();
    }

    /// Reads the session again (the binding may have changed elsewhere).
    pub async fn refresh(&mut self) -> Result<(), CliError> {
        let s = self
            .client
            .get(&format!("/api/v1/sessions/{}", encode(&self.view.id())))
            .await?;
        let agent_changed = s["agent"] != self.view.session["agent"];
        if agent_changed {
            self.adopt(s).await;
        } else {
            self.view.set_session(s);
            if self.view.usage_stale {
                self.read_usage().await;
            }
        }
        Ok(())
    }

    /// What the bound directory's project layer leaves out, and how to apply it.
    fn layer_notes(&self) -> Said {
        let mut s = self.view.session.clone();
        add_project_layer(&self.client, &mut s);
        let layer = &s["project_layer"];
        if let Some(e) = layer["error"].as_str() {
            return vec![(
                Style::Alert,
                format!("the project settings cannot be used: {}", inert(e)),
            )];
        }
        match serde_json::from_value::<ProjectLayerReport>(layer.clone()) {
            Ok(report) if report.ignored().next().is_some() => ignored_lines(&report)
                .into_iter()
                .map(|l| (Style::Alert, l))
                .collect(),
            Ok(_) | Err(_) => Vec::new(),
        }
    }

    /// Sends a message; the task's events arrive on the session's stream.
    pub async fn send(&mut self, text: &str) -> Result<Value, CliError> {
        let reply = self
            .client
            .post(
                &format!("/api/v1/sessions/{}/messages", encode(&self.view.id())),
                &json!({"text": text}),
            )
            .await?;
        Ok(reply)
    }

    /// Runs a slash command.
    pub async fn command(&mut self, cmd: slash::Slash) -> Result<Said, CliError> {
        use slash::Slash;
        let id = self.view.id();
        match cmd {
            Slash::Link(arg) => {
                let path = slash::link_path(arg.as_deref(), &self.cwd, &self.home);
                let dir = absolute(&path)?;
                self.bind(json!({"dir": dir})).await
            }
            Slash::Mode(mode) => {
                let b = self.view.binding().clone();
                if b.is_null() {
                    return Err(CliError::usage(
                        "the session is not bound, so it has no mode",
                        "/link PATH first",
                    ));
                }
                if b["daemon"].as_str() != Some(self.view.here.as_str()) {
                    return Err(CliError::new(
                        format!(
                            "the session is bound on machine {}; its mode is changed there",
                            inert(b["daemon_name"].as_str().unwrap_or("?"))
                        ),
                        "run berth session link ID PATH --mode MODE on that machine",
                    ));
                }
                self.bind(json!({"dir": b["dir"], "mode": mode})).await
            }
            Slash::Unlink => {
                self.view.own_changes += 1;
                let s = self
                    .client
                    .call(
                        Method::DELETE,
                        &format!("/api/v1/sessions/{}/binding", encode(&id)),
                        None,
                    )
                    .await
                    .inspect_err(|_| self.view.own_changes -= 1)?;
                self.adopt(s).await;
                Ok(vec![(
                    Style::Info,
                    String::from(
                        "unbound: the next message runs with your user settings alone, in the session's scratch directory",
                    ),
                )])
            }
            Slash::Cancel => self.cancel().await,
            Slash::Undo => {
                let tasks = self
                    .client
                    .get(&format!("/api/v1/tasks?session={}", encode(&id)))
                    .await?;
                // Tasks come oldest first: the last one that ended.
                let last = tasks
                    .as_array()
                    .and_then(|t| {
                        t.iter().rev().find(|t| {
                            serde_json::from_value::<berth_core::api::TaskStatus>(
                                t["status"].clone(),
                            )
                            .is_ok_and(berth_core::api::TaskStatus::is_final)
                        })
                    })
                    .and_then(|t| t["id"].as_str())
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        CliError::usage(
                            "this session has no finished task to undo",
                            "send a message first",
                        )
                    })?;
                let undone = super::changes::undo_task(&self.client, &last, false).await?;
                if undone.warning.is_none() {
                    self.view.own_undos += 1;
                }
                let mut said: Said = undone.lines.into_iter().map(|l| (Style::Info, l)).collect();
                if let Some(w) = undone.warning {
                    said.push((Style::Alert, format!("warning: {w}")));
                }
                Ok(said)
            }
            Slash::Tasks => {
                let tasks = self
                    .client
                    .get(&format!("/api/v1/tasks?session={}", encode(&id)))
                    .await?;
                let lines = tasks_lines(&tasks);
                Ok(if lines.len() <= 1 {
                    vec![(Style::Info, String::from("no tasks yet"))]
                } else {
                    // Numbered as `/diff N` takes them.
                    let width = (lines.len() - 1).to_string().len();
                    lines
                        .into_iter()
                        .enumerate()
                        .map(|(i, l)| {
                            let n = if i == 0 {
                                "#".to_owned()
                            } else {
                                i.to_string()
                            };
                            (Style::Info, format!("{n:>width$}  {l}"))
                        })
                        .collect()
                })
            }
            Slash::Diff(which) => {
                let tasks = self
                    .client
                    .get(&format!("/api/v1/tasks?session={}", encode(&id)))
                    .await?;
                let task = diff::pick(&tasks, which.as_deref())?;
                let doc = self
                    .client
                    .get(&format!("/api/v1/tasks/{}/diff?format=json", encode(&task)))
                    .await?;
                Ok(diff::lines(&task, &doc))
            }
            Slash::Settings => {
                let lines = super::settings::session_lines(
                    &self.config,
                    &self.view.here,
                    &self.view.session,
                )?;
                Ok(lines.into_iter().map(|l| (Style::Info, l)).collect())
            }
            Slash::New(title) => {
                let b = self.view.binding().clone();
                let here = b["daemon"].as_str() == Some(self.view.here.as_str());
                let dir = here.then(|| b["dir"].as_str().map(PathBuf::from)).flatten();
                let mode = match (dir.is_some(), b["mode"].as_str()) {
                    (true, Some("worktree")) => Some(super::Mode::Worktree),
                    (true, Some(_) | None) => Some(super::Mode::InPlace),
                    (false, _) => None,
                };
                let agent = self.view.session["agent"].as_str().map(str::to_owned);
                let (s, _) =
                    create_session(&self.client, agent, title, dir.as_deref(), mode, None).await?;
                let old = short(&self.view.session["id"]);
                let here_name = std::mem::take(&mut self.view.here);
                self.view = View {
                    here: here_name,
                    ..View::default()
                };
                self.adopt(s).await;
                let mut said = vec![(
                    Style::Info,
                    format!(
                        "new session {} (session {old} goes on; berth chat {old} returns to it)",
                        short(&self.view.session["id"])
                    ),
                )];
                if !b.is_null() && !here {
                    said.push((
                        Style::Info,
                        String::from(
                            "not bound: the old session's directory is on another machine",
                        ),
                    ));
                }
                said.extend(self.layer_notes());
                Ok(said)
            }
            Slash::Help => {
                let mut out = vec![(Style::Info, String::from("commands:"))];
                for (name, arg, what) in slash::COMMANDS {
                    let head = format!("{name} {arg}");
                    out.push((Style::Info, format!("  {head:<28} {what}")));
                }
                out.push((
                    Style::Info,
                    String::from(
                        "keys: Enter sends · Ctrl-J or Alt-Enter new line · Up/Down history · Tab completes · PgUp/PgDn scroll · Ctrl-C cancels the task, twice on an empty line quits",
                    ),
                ));
                Ok(out)
            }
            Slash::Quit => Ok(Vec::new()),
        }
    }

    /// PUT the binding; the header follows from the answer.
    async fn bind(&mut self, body: Value) -> Result<Said, CliError> {
        let id = self.view.id();
        self.view.own_changes += 1;
        let s = self
            .client
            .call(
                Method::PUT,
                &format!("/api/v1/sessions/{}/binding", encode(&id)),
                Some(&body),
            )
            .await
            .inspect_err(|_| self.view.own_changes -= 1)?;
        self.adopt(s).await;
        let b = self.view.binding();
        let mut said = vec![(
            Style::Info,
            format!(
                "bound to {} ({}); it applies at the next message",
                inert(b["display"].as_str().unwrap_or("?")),
                b["mode"].as_str().unwrap_or("?")
            ),
        )];
        said.extend(self.layer_notes());
        Ok(said)
    }

    /// Answers the first request waiting in this session (`y`, `n`, `a` in the
    /// composer): as `berth approve` / `berth deny` do, said from the chat.
    pub async fn answer(&mut self, allow: bool, always: bool) -> Result<Said, CliError> {
        let Some(a) = self.view.pending.first().cloned() else {
            return Ok(vec![(
                Style::Info,
                String::from("nothing waits for an answer"),
            )]);
        };
        let id = a["id"].as_str().unwrap_or_default().to_owned();
        let body = json!({
            "decision": if allow { "allow" } else { "deny" },
            "always": always,
            "via": "chat",
        });
        self.client
            .post(&format!("/api/v1/approvals/{}", encode(&id)), &body)
            .await?;
        // The decision's own event says it, and takes it off the prompt; until then
        // the next key must not answer it again.
        self.view.pending.retain(|p| p["id"] != a["id"]);
        Ok(Said::new())
    }

    /// Cancels every task of this session that has not ended.
    pub async fn cancel(&mut self) -> Result<Said, CliError> {
        let ids: Vec<String> = self.view.active.keys().cloned().collect();
        if ids.is_empty() {
            return Ok(vec![(Style::Info, String::from("no task is running"))]);
        }
        let mut said = Said::new();
        for id in ids {
            let reply = self
                .client
                .post(&format!("/api/v1/tasks/{}/cancel", encode(&id)), &json!({}))
                .await?;
            said.push((
                Style::Info,
                format!(
                    "cancelling task {} (it was {})",
                    short(&Value::from(id.as_str())),
                    reply["task"]["status"].as_str().unwrap_or("?")
                ),
            ));
        }
        Ok(said)
    }
}

/// An error as the transcript shows it.
fn error_lines(e: &CliError) -> Said {
    let code = e.code.map(|c| format!(" [{c}]")).unwrap_or_default();
    vec![
        (Style::Alert, format!("error{code}: {}", inert(&e.message))),
        (Style::Alert, format!("hint: {}", inert(&e.hint))),
    ]
}
