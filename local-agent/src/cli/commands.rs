//! The client commands: each one request (or a few) over the control socket.

use super::client::{Client, encode};
use super::error::CliError;
use super::lean::Request;
use super::render::{self, print_json};
use super::setup::{absolute, berth_home, runtime};
use super::{AgentCmd, Command, Mode, ProjectCmd, SessionCmd, TaskCmd};
use berth_core::ErrorCode;
use berth_local_agent::ExecutorConfig;
use hyper::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// `berth check PATH [--json]`: native validation, no server.
pub fn check(home: Option<PathBuf>, path: &Path, json: bool) -> Result<u8, CliError> {
    let config = ExecutorConfig::from_env(home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))?;
    let cwd = std::env::current_dir().map_err(|e| {
        CliError::new(
            format!("cannot read the current directory: {e}"),
            "cd into an existing directory",
        )
    })?;
    let input = path.to_str().ok_or_else(|| {
        CliError::usage(
            format!("{} is not valid UTF-8", path.display()),
            "Berth handles UTF-8 paths only; rename the directory",
        )
    })?;
    let report = berth_local_agent::check_with(&config, input, &cwd);
    if json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        render::check_report(&report);
    }
    Ok(if report.ok { 0 } else { 1 })
}

pub fn client_command(home: Option<PathBuf>, cmd: Command) -> Result<u8, CliError> {
    let home = berth_home(home)?;
    let client = Client::new(&home);
    runtime()?.block_on(dispatch(&client, cmd))
}

async fn dispatch(c: &Client, cmd: Command) -> Result<u8, CliError> {
    match cmd {
        Command::Serve(_)
        | Command::Check { .. }
        | Command::Daemon(_)
        | Command::Trust(_)
        | Command::Completions { .. }
        | Command::Chat(_)
        | Command::Service(_)
        | Command::Ui { .. }
        | Command::Settings(_) => Err(CliError::usage(
            "this command does not talk to a server",
            "run it directly",
        )),
        Command::Agent(AgentCmd::Add {
            name,
            kind,
            permissions,
            command,
            json,
        }) => super::agents::add(c, name, kind, permissions, command, json).await,
        Command::Agent(AgentCmd::Edit {
            name,
            permissions,
            command,
            json,
        }) => super::agents::edit(c, name, permissions, command, json).await,
        Command::Agent(AgentCmd::Remove { name, json }) => {
            super::agents::remove(c, name, json).await
        }
        Command::Send {
            id,
            message,
            detach,
            json,
        } => lean(
            c,
            Request::Send {
                id,
                message,
                detach,
                json,
            },
        ),
        Command::Agent(AgentCmd::List { json }) => lean(c, Request::AgentList { json }),
        Command::Task(TaskCmd::List { session, json }) => {
            lean(c, Request::TaskList { session, json })
        }
        Command::Session(cmd) => session(c, cmd).await,
        Command::Approvals { all, json } => super::approvals::list(c, all, json).await,
        Command::Usage { since, by, json } => {
            super::usage::report(c, since.as_deref(), by.as_deref(), json).await
        }
        Command::Approve { id, always, json } => {
            let verdict = super::approvals::Say::Allow { always };
            super::approvals::answer(c, &id, verdict, json).await
        }
        Command::Deny { id, reason, json } => {
            let verdict = super::approvals::Say::Deny { reason };
            super::approvals::answer(c, &id, verdict, json).await
        }
        Command::Task(TaskCmd::Diff { id, stat, json }) => {
            super::changes::diff(c, &id, stat, json).await
        }
        Command::Task(TaskCmd::Undo { id, force, json }) => {
            super::changes::undo(c, &id, force, json).await
        }
        Command::Task(TaskCmd::Cancel { id, json }) => {
            let reply = c
                .post(&format!("/api/v1/tasks/{}/cancel", encode(&id)), &json!({}))
                .await?;
            let task = until_final(c, reply["task"].clone(), json).await?;
            if json {
                print_json(&task);
            } else {
                let status = task["status"].as_str().unwrap_or("?");
                if is_final(&task) {
                    println!("task {} is {status}", short(&task["id"]));
                } else {
                    println!(
                        "task {} is still {status}: the cancel stands, and its agent is \
                         stopped after the grace period",
                        short(&task["id"])
                    );
                }
            }
            Ok(0)
        }
        Command::Project(ProjectCmd::Add { name, json }) => {
            let p = c.post("/api/v1/projects", &json!({"name": name})).await?;
            if json {
                print_json(&p);
            } else {
                println!("added project {name}");
            }
            Ok(0)
        }
        Command::Project(ProjectCmd::Dir {
            name,
            path,
            mode,
            json,
        }) => {
            let body = json!({"dir": absolute(&path)?, "mode": mode.map(Mode::as_str)});
            let p = c
                .call(
                    Method::PUT,
                    &format!("/api/v1/projects/{}/dir", encode(&name)),
                    Some(&body),
                )
                .await?;
            if json {
                print_json(&p);
            } else {
                println!("project {name} now has a directory on this machine");
            }
            Ok(0)
        }
    }
}

/// The lean client's commands, when a line reaches this binary (a message after
/// `--`, say): run by the lean client's code, the one implementation of each. Its
/// socket is a blocking one, which is fine here: nothing else runs on this
/// current-thread runtime meanwhile.
fn lean(c: &Client, request: Request) -> Result<u8, CliError> {
    Ok(super::lean::run(Some(c.home().to_owned()), request))
}

async fn session(c: &Client, cmd: SessionCmd) -> Result<u8, CliError> {
    match cmd {
        SessionCmd::New {
            agent,
            title,
            dir,
            mode,
            project,
            trust,
            json,
        } => {
            let (mut s, agent_from) =
                create_session(c, agent, title, dir.as_deref(), mode, project).await?;
            let trusted = settle_binding(c, &mut s, trust, json)?;
            if json {
                return Ok(0);
            }
            println!(
                "created session {} ({})",
                short(&s["id"]),
                render::escape(s["title"].as_str().unwrap_or(""))
            );
            if let Some(from) = &agent_from {
                println!(
                    "agent {} (named at {from})",
                    s["agent"].as_str().unwrap_or("")
                );
            }
            if s["binding"].is_null() {
                let suggestion = last_used_dir(c, &s).await;
                render::unbound_notice(&s, suggestion.as_deref());
            } else {
                bound_header(c, &s, trusted.as_ref()).await;
            }
            Ok(0)
        }
        SessionCmd::List { all, json } => lean(c, Request::SessionList { all, json }),
        SessionCmd::Rename { id, title, json } => {
            super::lifecycle::rename(c, &id, &title, json).await
        }
        SessionCmd::Archive { id, json } => super::lifecycle::archive(c, &id, true, json).await,
        SessionCmd::Unarchive { id, json } => super::lifecycle::archive(c, &id, false, json).await,
        SessionCmd::Delete { id, yes, json } => super::lifecycle::delete(c, &id, yes, json).await,
        SessionCmd::Rules { id, remove, json } => {
            super::approvals::rules(c, &id, remove, json).await
        }
        SessionCmd::Log { .. } => Err(CliError::usage(
            "session log is run by the chat's code",
            "run it as `berth session log ID`",
        )),
        SessionCmd::Show { id, json } => {
            let mut s = c.get(&format!("/api/v1/sessions/{}", encode(&id))).await?;
            add_project_layer(c, &mut s);
            // A server before usage totals has no such route: shown without them.
            let usage = super::usage::of_session(c, s["id"].as_str().unwrap_or(&id))
                .await
                .ok();
            if json {
                if let Some(u) = &usage {
                    s["usage"] = serde_json::to_value(u).unwrap_or_default();
                }
                print_json(&s);
                return Ok(0);
            }
            render::header(&s, &c.machine(), agent_policy(c, &s).await.as_deref());
            if let Some(u) = &usage {
                println!("usage     {}", u.line());
            }
            project_layer_lines(&s);
            let tasks = c
                .get(&format!(
                    "/api/v1/tasks?session={}",
                    encode(s["id"].as_str().unwrap_or(&id))
                ))
                .await?;
            render::session_body(&s, &tasks);
            Ok(0)
        }
        SessionCmd::Link {
            id,
            path: _,
            mode: _,
            unlink: true,
            trust: _,
            json,
        }
        | SessionCmd::Unlink { id, json } => {
            let s = c
                .call(
                    Method::DELETE,
                    &format!("/api/v1/sessions/{}/binding", encode(&id)),
                    None,
                )
                .await?;
            if json {
                print_json(&s);
            } else {
                println!(
                    "session {} is unbound; the next message runs with your user settings alone, in its scratch directory",
                    short(&s["id"])
                );
            }
            Ok(0)
        }
        SessionCmd::Link {
            id,
            path,
            mode,
            unlink: false,
            trust,
            json,
        } => {
            let dir = absolute(&path.unwrap_or_else(|| PathBuf::from(".")))?;
            worktree_needs_a_repository(&dir, mode)?;
            let body = json!({"dir": dir, "mode": mode.map(Mode::as_str)});
            let mut s = c
                .call(
                    Method::PUT,
                    &format!("/api/v1/sessions/{}/binding", encode(&id)),
                    Some(&body),
                )
                .await?;
            let trusted = settle_binding(c, &mut s, trust, json)?;
            if !json {
                println!(
                    "session {} is bound; it applies at the next message",
                    short(&s["id"])
                );
                bound_header(c, &s, trusted.as_ref()).await;
            }
            Ok(0)
        }
    }
}

/// `session new` (and `berth chat` without a session): creates it, with the settings'
/// `agent` when none is named. Returns the session and where its agent was named.
pub(super) async fn create_session(
    c: &Client,
    agent: Option<String>,
    title: Option<String>,
    dir: Option<&Path>,
    mode: Option<Mode>,
    project: Option<String>,
) -> Result<(Value, Option<String>), CliError> {
    if mode.is_some() && dir.is_none() {
        return Err(CliError::usage(
            "--mode needs --dir",
            "add --dir PATH, or drop --mode",
        ));
    }
    let dir = dir.map(absolute).transpose()?;
    if let Some(dir) = &dir {
        worktree_needs_a_repository(dir, mode)?;
    }
    // No --agent: the settings' `agent` (the directory's project layer may pick
    // one of the registered agents), else the server's default.
    let (agent, agent_from) = match agent {
        Some(a) => (Some(a), None),
        None => match settings_agent(c, dir.as_deref()) {
            Some((a, from)) => (Some(a), Some(from)),
            None => (None, None),
        },
    };
    let body = json!({
        "agent": agent, "title": title, "project": project,
        "dir": dir, "mode": mode.map(Mode::as_str),
    });
    let s = c
        .post("/api/v1/sessions", &body)
        .await
        .map_err(|e| match &agent_from {
            Some(from) if e.code == Some(ErrorCode::UnknownAgent) => CliError {
                message: format!("{} (the agent named at {from})", e.message),
                ..e
            },
            _ => e,
        })?;
    Ok((s, agent_from))
}

/// The `agent` the settings name for a session bound to `dir` (or unbound), and where
/// it is written. `None` when no layer names one or the settings cannot be read (the
/// run reports those).
fn settings_agent(c: &Client, dir: Option<&str>) -> Option<(String, String)> {
    let config = ExecutorConfig::from_env(Some(c.home().to_owned())).ok()?;
    let bound = match dir {
        Some(d) => Some(
            std::fs::canonicalize(d)
                .ok()
                .and_then(|p| p.into_os_string().into_string().ok())
                .and_then(|p| {
                    berth_core::LocalPath::parse(berth_core::Platform::native(), &p).ok()
                })?,
        ),
        None => None,
    };
    let trust = berth_local_agent::settings::trust::TrustStore::new(&config.berth_home);
    let explained = berth_local_agent::settings::explain(
        &config.context(),
        &config.config_dir,
        bound.as_ref(),
        &trust,
    )
    .ok()?;
    let v = explained.values.iter().find(|v| v.key == "agent")?;
    Some((
        v.value.as_str()?.to_owned(),
        format!("{}:{}:{}", v.file, v.line, v.column),
    ))
}

/// The canonical directory of a session's binding, when it is on this machine: only
/// there can its project layer be read, or trusted.
fn local_binding_dir(c: &Client, session: &Value) -> Option<String> {
    let b = &session["binding"];
    (b["daemon"].as_str() == Some(c.machine().as_str()))
        .then(|| b["dir"].as_str().map(str::to_owned))
        .flatten()
}

/// What follows a binding, at creation or later: the directory trusted if asked, the
/// project layer's report added to the session, and with `--json` the session printed.
/// Returns what was trusted.
fn settle_binding(
    c: &Client,
    s: &mut Value,
    trust: bool,
    json: bool,
) -> Result<Option<super::trust::Trusted>, CliError> {
    let trusted = if trust {
        Some(trust_bound(c, s)?)
    } else {
        None
    };
    add_project_layer(c, s);
    if json {
        if let Some(t) = &trusted {
            s["trusted"] = json!(t);
        }
        print_json(s);
    }
    Ok(trusted)
}

/// A bound session's header: what was trusted, then the header, then the project
/// layer's lines when nothing was trusted (a trust prints its own).
async fn bound_header(c: &Client, s: &Value, trusted: Option<&super::trust::Trusted>) {
    if let Some(t) = trusted {
        super::trust::print_trusted(t);
    }
    render::header(s, &c.machine(), agent_policy(c, s).await.as_deref());
    if trusted.is_none() {
        project_layer_lines(s);
    }
}

/// `--trust`: trusts, from this shell, the project layer the new binding reads.
fn trust_bound(c: &Client, session: &Value) -> Result<super::trust::Trusted, CliError> {
    let id = short(&session["id"]);
    let dir = local_binding_dir(c, session).ok_or_else(|| {
        CliError::new(
            format!("session {id} is bound, but not on this machine, so --trust cannot reach its directory"),
            "run berth trust PATH on the machine that holds the directory",
        )
    })?;
    let config = ExecutorConfig::from_env(Some(c.home().to_owned()))
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))?;
    super::trust::trust_binding(&config, &dir).map_err(|e| CliError {
        message: format!(
            "session {id} is bound, but trusting its directory failed: {}",
            e.message
        ),
        ..e
    })
}

/// Adds `project_layer` to a session's JSON: what the bound directory's project layer
/// does under the trust recorded now (`null` when it has none, or it is elsewhere).
pub(super) fn add_project_layer(c: &Client, session: &mut Value) {
    let Some(dir) = local_binding_dir(c, session) else {
        return;
    };
    let Ok(config) = ExecutorConfig::from_env(Some(c.home().to_owned())) else {
        return;
    };
    session["project_layer"] = match berth_local_agent::project_layer(&config, &dir) {
        Ok(report) => json!(report),
        Err(e) => json!({"error": e}),
    };
}

/// The header's lines about the project layer: its file and trust, what is ignored,
/// and the command that would apply it.
fn project_layer_lines(session: &Value) {
    let layer = &session["project_layer"];
    if let Some(e) = layer["error"].as_str() {
        println!("settings  cannot be used: {}", render::inert(e));
        return;
    }
    if let Ok(report) =
        serde_json::from_value::<berth_core::settings::trust::ProjectLayerReport>(layer.clone())
    {
        render::project_layer(&report, false);
    }
}

/// The directory the session's agent last worked in, to suggest (never to apply).
pub(super) async fn last_used_dir(c: &Client, new: &Value) -> Option<String> {
    let sessions = c.get("/api/v1/sessions").await.ok()?;
    let agent = new["agent"].as_str()?;
    let mut best: Option<(&str, String)> = None;
    for s in sessions.as_array()? {
        if s["id"] == new["id"] || s["agent"].as_str() != Some(agent) {
            continue;
        }
        let dir = s["binding"]["dir"]
            .as_str()
            .or_else(|| s["work_dir"].as_str());
        let Some(dir) = dir else { continue };
        if dir.contains("/scratch/") || dir.contains("/worktrees/") {
            continue;
        }
        let at = s["updated_at"]
            .as_str()
            .or_else(|| s["created_at"].as_str())
            .unwrap_or("");
        if best.as_ref().is_none_or(|(b, _)| at > *b) {
            best = Some((at, dir.to_owned()));
        }
    }
    best.map(|(_, d)| d)
}

/// The session's agent's permission policy as the header shows it: `edit`, or
/// `edit (default)` when the agent names none.
pub(super) async fn agent_policy(c: &Client, session: &Value) -> Option<String> {
    let name = session["agent"].as_str()?;
    let agents = c.get("/api/v1/agents").await.ok()?;
    let agent = agents.as_array()?.iter().find(|a| a["name"] == name)?;
    Some(
        match (agent["kind"].as_str(), agent["permissions"].as_str()) {
            (Some("command"), permissions) => {
                command_policy(session, permissions, super::agents::fences(c).await)
            }
            (_, Some(p)) => p.to_owned(),
            (_, None) => format!("{} (default)", berth_core::Permissions::DEFAULT),
        },
    )
}

/// What a command agent may do, said as what holds: it has no permission prompts, so
/// the fence is what keeps it (or nothing, unfenced). One story with the fence line.
fn command_policy(session: &Value, permissions: Option<&str>, fenced: bool) -> String {
    if !fenced {
        return String::from(
            "anything its command does (unfenced; a command agent asks no permissions)",
        );
    }
    let b = &session["binding"];
    let dir = b["display"].as_str().map_or_else(
        || String::from("its scratch directory"),
        |d| render::escape(d).into_owned(),
    );
    if permissions == Some("read-only") {
        format!("reads; writes nothing in {dir} (fenced; no permission prompts)")
    } else {
        format!("edits {dir} only (fenced; no permission prompts)")
    }
}

pub use super::render::short;

/// Whether a task document's status is final.
fn is_final(task: &Value) -> bool {
    serde_json::from_value::<berth_core::api::TaskStatus>(task["status"].clone())
        .is_ok_and(berth_core::api::TaskStatus::is_final)
}

/// A cancelled task, once it has ended: the cancel only asks (an agent gets its grace
/// period), so `task cancel` waits up to [`CANCEL_WAIT`] for the end instead of printing
/// "is running" and leaving the user to ask again. Says once that it waits.
async fn until_final(c: &Client, mut task: Value, json: bool) -> Result<Value, CliError> {
    let deadline = std::time::Instant::now() + CANCEL_WAIT;
    let id = task["id"].as_str().unwrap_or_default().to_owned();
    let mut said = false;
    while !is_final(&task) && std::time::Instant::now() < deadline {
        if !said && !json {
            eprintln!("cancelling task {}…", short(&task["id"]));
            said = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        task = c.get(&format!("/api/v1/tasks/{}", encode(&id))).await?;
    }
    Ok(task)
}

/// How long `task cancel` waits for the task to end: the agents' grace period is
/// shorter, so only a machine that does not answer is left waiting this long.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// `--mode worktree` on a directory that is in no git repository is refused when the
/// session is made or linked, not at its first message: a worktree needs a repository.
/// Judged here, on the machine that holds the directory (the CLI's), by looking for a
/// `.git` in it or above it, as git does.
fn worktree_needs_a_repository(dir: &str, mode: Option<Mode>) -> Result<(), CliError> {
    if !matches!(mode, Some(Mode::Worktree)) {
        return Ok(());
    }
    let path = Path::new(dir);
    if path.ancestors().any(|a| a.join(".git").exists()) || !path.exists() {
        // A missing directory is the server's to refuse, with its own code.
        return Ok(());
    }
    let not_a_repo = berth_local_agent::run::worktree::WorktreeError::NotARepo {
        dir: dir.to_owned(),
    };
    Err(not_a_repo.refusal(dir).map_or_else(
        || CliError::new(not_a_repo.to_string(), ""),
        CliError::from_refusal,
    ))
}
