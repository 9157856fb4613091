//! The route handlers. A route that names a session or task gets its full id as
//! [`NamedSession`] or [`NamedTask`], resolved by [`super::access::enforce`] among the caller's own; the
//! handlers answer the documents of [`super::views`].

use super::access::{Caller, NamedSession, NamedTask, Scope, SeenSession};
use super::daemons::Via;
use super::redact::Displays;
use super::state::{Ctx, Surface};
use super::views::{session_doc, task_doc};
use crate::executor::{AgentKind, AgentSpec};
use crate::http::{ApiError, JsonBody, QueryArgs};
use crate::store::{NewSessionRow, ProjectRow, TaskRow};
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use berth_core::SessionId;
use berth_core::api::{NewSession, Task, TaskStatus, WaitsFor};
use serde::{Deserialize, Serialize};

/// `GET health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub ok: bool,
    pub version: String,
    pub pid: u32,
}

/// `GET capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Whether this surface can bind sessions to local directories.
    pub local_binding: bool,
    /// `control`, `web` or `cloud`.
    pub surface: String,
    /// The server user's home directory, so the browser's binding preview can apply
    /// the home rules (`~` expansion, `home_directory`, credential folders) exactly as
    /// the native validator will. Only from a local server; never shown by the UI,
    /// which displays privacy-stripped forms only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// The local executor's machine id and name, the claimer the preview resolves for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineInfo>,
    /// How the local executor fences agents now (absent where there is none, and
    /// through a daemon).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<berth_core::api::FenceStatus>,
}

/// A machine as the preview needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineInfo {
    pub id: String,
    pub name: String,
}

/// `POST sessions/{id}/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMessage {
    pub text: String,
}

/// The answer to `POST sessions/{id}/messages` and `POST tasks/{id}/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskReply {
    pub task: Task,
    /// For a new message: the transcript `seq` of the message event; stream the
    /// session's events after `message_seq - 1` to see the whole turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_seq: Option<i64>,
}

/// `POST agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAgent {
    pub name: String,
    pub kind: AgentKind,
    #[serde(default)]
    pub command: Vec<String>,
    /// `read-only`, `ask`, `edit` or `full`; absent: the user settings' default, else `edit`.
    #[serde(default)]
    pub permissions: Option<berth_core::Permissions>,
}

/// `POST projects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewProject {
    pub name: String,
}

/// `GET tasks?session=ID`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskQuery {
    pub session: Option<String>,
}

pub(crate) async fn no_route(uri: Uri) -> ApiError {
    ApiError::NoRoute {
        path: uri.path().to_owned(),
    }
}

pub(crate) async fn health() -> Json<Health> {
    Json(Health {
        ok: true,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
    })
}

pub(crate) async fn capabilities(
    State(ctx): State<Ctx>,
    via: Option<axum::Extension<Via>>,
) -> Json<Capabilities> {
    if let Some(axum::Extension(via)) = via {
        // Through a daemon: that machine is the claimer; its home stays its own.
        return Json(Capabilities {
            local_binding: berth_core::LOCAL_BINDING,
            surface: ctx.surface.as_str().to_owned(),
            home: None,
            machine: Some(MachineInfo {
                id: via.machine.as_str().to_owned(),
                name: via.name,
            }),
            fence: None,
        });
    }
    let local = ctx.surface != Surface::Cloud;
    Json(Capabilities {
        local_binding: berth_core::LOCAL_BINDING && ctx.surface == Surface::Control,
        surface: ctx.surface.as_str().to_owned(),
        home: local
            .then(|| ctx.app.display.home.as_ref().map(|h| h.as_str().to_owned()))
            .flatten(),
        machine: ctx.app.scheduler.executor().map(|e| {
            let (id, name) = e.machine();
            MachineInfo {
                id: id.as_str().to_owned(),
                name,
            }
        }),
        fence: ctx.app.scheduler.executor().and_then(|e| e.fence()),
    })
}

/// `GET sessions?all=true`: archived sessions too; `?needs=approval`: only those a
/// request of the `ask` policy waits in ("needs you").
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    pub all: bool,
    #[serde(default)]
    pub needs: Option<String>,
}

/// Every session (not archived unless `?all=true`), serialized on the store's
/// blocking thread straight from the rows into one buffer: a long list costs the
/// async threads nothing.
pub(crate) async fn list_sessions(
    State(ctx): State<Ctx>,
    scope: Option<axum::Extension<Scope>>,
    QueryArgs(q): QueryArgs<ListQuery>,
) -> Result<Response, ApiError> {
    let surface = ctx.surface;
    let displays = Displays::of(&ctx.app);
    let items = displays.items();
    let owner = scope.and_then(|axum::Extension(s)| s.0);
    let needs = match q.needs.as_deref() {
        None => None,
        Some("approval") => Some(berth_core::api::Needs::Approval),
        Some(other) => {
            return Err(ApiError::BadRequest {
                message: format!(
                    "?needs={other:?} is not a need a session has; the one there is: ?needs=approval"
                ),
            });
        }
    };
    // The page flags a binding that no longer holds (the CLI's list does the same).
    #[cfg(feature = "local-binding")]
    let look = match surface {
        Surface::Web => super::binding::Look::of(&ctx),
        Surface::Control | Surface::Cloud => None,
    };
    let body = ctx
        .app
        .store
        // The surface names the documents; each is shown by its own machine's context
        // (see `super::redact`), on the web listener right here.
        .sessions_json(owner, q.all, needs, surface.as_str(), move |out, row| {
            #[cfg_attr(not(feature = "local-binding"), allow(unused_mut))]
            let mut row = *row;
            #[cfg(feature = "local-binding")]
            if let (Some(look), Some(b)) = (&look, &mut row.binding) {
                b.state = look.state(b.machine, b.dir, b.identity, b.state);
            }
            let bound = row.binding.map(|b| b.machine);
            let shown = displays.session(bound, row.owner);
            let start = out.len();
            super::views::write_session_doc(surface, &shown, out, &row)
                .and_then(|()| match surface {
                    Surface::Web => super::redact::redact_written(&shown, out, start),
                    Surface::Control | Surface::Cloud => Ok(()),
                })
                .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))
        })
        .await?;
    Ok((
        items,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

pub(crate) async fn get_session(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
) -> Result<Response, ApiError> {
    #[cfg_attr(not(feature = "local-binding"), allow(unused_mut))]
    let mut row = ctx.app.store.session(&id).await?;
    #[cfg(feature = "local-binding")]
    if ctx.surface == Surface::Web
        && let (Some(look), Some(b)) = (super::binding::Look::of(&ctx), row.binding.clone())
    {
        let state = tokio::task::spawn_blocking(move || {
            look.state(b.machine.as_str(), &b.dir, b.identity, b.state)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("the binding's look failed: {e}")))?;
        if let Some(b) = &mut row.binding {
            b.state = state;
        }
    }
    let shown = Displays::of(&ctx.app).of_row(&row);
    let doc = session_doc(ctx.surface, &shown, &row);
    Ok((Displays::shown_by(shown), Json(doc)).into_response())
}

/// The display context of one session's text (see [`super::redact`]); the control
/// socket's real text needs none, so it reads nothing for it.
pub(crate) async fn session_display(
    ctx: &Ctx,
    session: &SessionId,
) -> Result<std::sync::Arc<berth_core::Context>, ApiError> {
    match ctx.surface {
        Surface::Control => Ok(ctx.app.display.clone()),
        Surface::Web | Surface::Cloud => {
            let row = ctx.app.store.session(session).await?;
            Ok(Displays::of(&ctx.app).of_row(&row))
        }
    }
}

pub(crate) async fn create_session(
    State(ctx): State<Ctx>,
    via: Option<axum::Extension<Via>>,
    caller: Option<axum::Extension<Caller>>,
    JsonBody(req): JsonBody<NewSession>,
) -> Result<Response, ApiError> {
    // The caller owns it: a member, or their daemon; nobody on a one-user server.
    let owner = match caller.map(|axum::Extension(c)| c) {
        Some(Caller::Member { name, .. }) => Some(name.to_string()),
        Some(Caller::Local) | None => None,
    };
    #[cfg(feature = "local-binding")]
    let binding = match req.dir {
        Some(dir) => {
            let via = via.as_ref().map(|axum::Extension(v)| v);
            Some(super::binding::validated(&ctx, via, dir, req.mode.unwrap_or_default()).await?)
        }
        None if req.mode.is_some() => {
            return Err(ApiError::BadRequest {
                message: "`mode` was given without `dir`".into(),
            });
        }
        None => None,
    };
    #[cfg(not(feature = "local-binding"))]
    let binding = {
        let _ = via;
        None
    };
    let row = ctx
        .app
        .store
        .create_session(NewSessionRow {
            title: req.title,
            agent: req.agent,
            origin: ctx.surface.origin(),
            project: req.project,
            binding,
            owner,
        })
        .await?;
    let mut resp = (
        StatusCode::CREATED,
        Json(session_doc(ctx.surface, &ctx.app.display, &row)),
    )
        .into_response();
    resp.extensions_mut()
        .insert(super::access::AuditTarget(row.id.to_string()));
    Ok(resp)
}

/// `?stream=true` on a message: the answer is the turn itself, as Server-Sent Events.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SendQuery {
    #[serde(default)]
    stream: bool,
}

/// `POST sessions/{id}/messages`: 202 with the task; with `?stream=true`, 200 and the
/// session's events from this message on (`text/event-stream`), after a first
/// `accepted` event whose data is that same task document. One request for what a
/// client would otherwise do in two (the POST, then `GET events` from
/// `message_seq - 1`), for `berth send`.
pub(crate) async fn post_message(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
    seen: Option<axum::Extension<SeenSession>>,
    QueryArgs(q): QueryArgs<SendQuery>,
    JsonBody(req): JsonBody<NewMessage>,
) -> Result<Response, ApiError> {
    if req.text.trim().is_empty() {
        return Err(ApiError::BadRequest {
            message: "the message text is empty".into(),
        });
    }
    // The row the access check read a moment ago: its machine decides the display.
    let shown = match (ctx.surface, seen) {
        (Surface::Web | Surface::Cloud, Some(axum::Extension(SeenSession(row)))) => {
            Displays::of(&ctx.app).of_row(&row)
        }
        _ => session_display(&ctx, &id).await?,
    };
    let store = &ctx.app.store;
    let origin = ctx.surface.origin();
    let (task, seq, message) = if q.stream {
        store
            .add_message_with_event(id.into_string(), origin, req.text)
            .await?
    } else {
        let (task, seq) = store
            .add_message(id.into_string(), origin, req.text)
            .await?;
        (task, seq, None)
    };
    // A stream subscribes before the task can run, so each of its events is delivered
    // live; it starts with the message itself when the store handed it back (see
    // `sse::feed_from`).
    let events = q
        .stream
        .then(|| super::sse::stream_from(&ctx, &shown, task.session_id.clone(), seq - 1, message));
    ctx.app.scheduler.notify(&task.session_id);
    let reply = TaskReply {
        task: task_doc(ctx.surface, &shown, &task),
        message_seq: Some(seq),
    };
    let Some(events) = events else {
        return Ok((StatusCode::ACCEPTED, Json(reply)).into_response());
    };
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures_util::StreamExt;
    let accepted = Event::default()
        .event("accepted")
        .data(serde_json::to_string(&reply).unwrap_or_default());
    let stream = futures_util::stream::once(async move { Ok(accepted) }).chain(events);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(super::sse::KEEP_ALIVE))
        .into_response())
}

/// Every task (of one session with `?session=`), each shown by its own session's
/// machine (see [`super::redact`]).
pub(crate) async fn list_tasks(
    State(ctx): State<Ctx>,
    scope: Option<axum::Extension<Scope>>,
    QueryArgs(q): QueryArgs<TaskQuery>,
) -> Result<Response, ApiError> {
    let owner = scope.and_then(|axum::Extension(s)| s.0);
    let rows = ctx.app.store.list_tasks(q.session, owner.clone()).await?;
    let displays = Displays::of(&ctx.app);
    let mut shown: std::collections::HashMap<String, std::sync::Arc<berth_core::Context>> =
        std::collections::HashMap::new();
    let mut docs = Vec::with_capacity(rows.len());
    for t in &rows {
        let session = &t.session_id;
        let display = match (ctx.surface, shown.get(session.as_str())) {
            (Surface::Control, _) => ctx.app.display.clone(),
            (Surface::Web | Surface::Cloud, Some(display)) => display.clone(),
            (Surface::Web | Surface::Cloud, None) => {
                let row = ctx.app.store.session(session).await?;
                let display = displays.of_row(&row);
                shown.insert(session.to_string(), display.clone());
                display
            }
        };
        let mut task = task_doc(ctx.surface, &display, t);
        name_holder(&ctx, owner.as_deref(), t, &mut task).await;
        let mut doc = serde_json::to_value(task)
            .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
        if ctx.surface == Surface::Web {
            berth_core::display::redact_json(&display, &mut doc);
        }
        docs.push(doc);
    }
    Ok((displays.items(), Json(docs)).into_response())
}

pub(crate) async fn get_task(
    State(ctx): State<Ctx>,
    scope: Option<axum::Extension<Scope>>,
    NamedTask(id): NamedTask,
) -> Result<Response, ApiError> {
    let owner = scope.and_then(|axum::Extension(s)| s.0);
    let row = ctx.app.store.task(&id).await?;
    let shown = session_display(&ctx, &row.session_id).await?;
    let mut doc = task_doc(ctx.surface, &shown, &row);
    name_holder(&ctx, owner.as_deref(), &row, &mut doc).await;
    Ok((Displays::shown_by(shown), Json(doc)).into_response())
}

/// Names whom `task`, the document of `row`, waits for while another task holds its
/// directory (read from its `wait_reason`): that task and its session when the caller,
/// whose sessions are `owner`'s (everyone's with `None`), may see it. Else only the
/// task's short id, and a member's reason shows no more of it: as [`super::access`]
/// answers, what a caller may not see does not leak, its ids neither.
async fn name_holder(ctx: &Ctx, owner: Option<&str>, row: &TaskRow, task: &mut Task) {
    if row.status != TaskStatus::WaitingLock {
        return;
    }
    let Some(reason) = row.wait_reason.as_deref() else {
        return;
    };
    let Some(holder) = berth_core::wait::holder_task(reason) else {
        return;
    };
    let seen = match ctx
        .app
        .store
        .resolve_task_of(holder.as_str(), owner.map(berth_core::Member::new))
        .await
    {
        Ok(t) => ctx.app.store.session(&t.session_id).await.ok(),
        Err(_) => None,
    };
    task.waits_for = Some(match seen {
        Some(session) => WaitsFor {
            task_id: holder.into_string(),
            session_id: Some(session.id),
            session_title: Some(session.title),
        },
        None => {
            let short: String = holder.as_str().chars().take(8).collect();
            if owner.is_some() {
                task.wait_reason = Some(reason.replace(holder.as_str(), &short));
            }
            WaitsFor {
                task_id: short,
                session_id: None,
                session_title: None,
            }
        }
    });
}

pub(crate) async fn cancel_task(
    State(ctx): State<Ctx>,
    NamedTask(id): NamedTask,
) -> Result<Json<TaskReply>, ApiError> {
    let row = ctx.app.scheduler.cancel(id.as_str()).await?;
    let shown = session_display(&ctx, &row.session_id).await?;
    Ok(Json(TaskReply {
        task: task_doc(ctx.surface, &shown, &row),
        message_seq: None,
    }))
}

/// `POST tasks/{id}/undone`: the CLI undid the task's changes on the machine that
/// holds its directory; the transcript records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Undone {
    pub files: Vec<String>,
    #[serde(default)]
    pub forced: bool,
    /// In worktree mode, the revert commit.
    #[serde(default)]
    pub commit: Option<String>,
}

pub(crate) async fn task_undone(
    State(ctx): State<Ctx>,
    NamedTask(id): NamedTask,
    JsonBody(req): JsonBody<Undone>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let task = ctx.app.store.task(&id).await?;
    let seq = ctx
        .app
        .store
        .record_undo(
            task.id.clone(),
            serde_json::json!({
                "task_id": task.id, "files": req.files,
                "forced": req.forced, "commit": req.commit,
            }),
        )
        .await?;
    Ok(Json(serde_json::json!({"seq": seq})))
}

pub(crate) async fn list_agents(State(ctx): State<Ctx>) -> Result<Json<Vec<AgentSpec>>, ApiError> {
    Ok(Json(ctx.app.store.list_agents().await?))
}

/// A name of something the API stores (agent, project, daemon token): 1 to 64 ASCII
/// letters, digits, `-`, `_` or `.`.
pub(super) fn valid_name(what: &str, name: &str) -> Result<(), ApiError> {
    let ok = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::BadRequest {
            message: format!(
                "{what} name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
            ),
        })
    }
}

pub(crate) async fn add_agent(
    State(ctx): State<Ctx>,
    JsonBody(req): JsonBody<NewAgent>,
) -> Result<(StatusCode, Json<AgentSpec>), ApiError> {
    valid_name("the agent", &req.name)?;
    let needs_command = match req.kind {
        AgentKind::Command => Some("command"),
        AgentKind::Acp => Some("acp"),
        AgentKind::Claude | AgentKind::Codex => None,
    };
    if let Some(kind) = needs_command
        && req.command.first().is_none_or(|c| c.is_empty())
    {
        return Err(ApiError::BadRequest {
            message: format!("a `{kind}` agent needs `command`: the program and its arguments"),
        });
    }
    let spec = AgentSpec {
        name: req.name,
        kind: req.kind,
        command: req.command,
        permissions: req.permissions,
    };
    Ok((
        StatusCode::CREATED,
        Json(ctx.app.store.add_agent(spec).await?),
    ))
}

/// `GET projects`: real directories on the control socket only, and through a
/// daemon's forwarded socket only that machine's own (another machine's, the server's
/// included, show their display form alone, on the web listener by that machine's
/// home: see [`super::redact`]).
pub(crate) async fn list_projects(
    State(ctx): State<Ctx>,
    via: Option<axum::Extension<Via>>,
) -> Result<Response, ApiError> {
    let mut projects = ctx.app.store.list_projects().await?;
    let shown = |machine: &berth_core::binding::MachineId| match (ctx.surface, &via) {
        (Surface::Web | Surface::Cloud, _) => false,
        (Surface::Control, Some(axum::Extension(via))) => *machine == via.machine,
        (Surface::Control, None) => true,
    };
    let displays = Displays::of(&ctx.app);
    let redact = |ctx: &berth_core::Context, text: &mut String| {
        if let std::borrow::Cow::Owned(r) = berth_core::display::redact_text(ctx, text) {
            *text = r;
        }
    };
    for p in &mut projects {
        if ctx.surface == Surface::Web {
            redact(&ctx.app.display, &mut p.name);
        }
        for d in &mut p.dirs {
            if !shown(&d.machine) {
                d.dir.clear();
            }
            if ctx.surface == Surface::Web {
                redact(&displays.machine(d.machine.as_str()), &mut d.display);
            }
        }
    }
    Ok((displays.items(), Json(projects)).into_response())
}

pub(crate) async fn add_project(
    State(ctx): State<Ctx>,
    JsonBody(req): JsonBody<NewProject>,
) -> Result<(StatusCode, Json<ProjectRow>), ApiError> {
    valid_name("the project", &req.name)?;
    Ok((
        StatusCode::CREATED,
        Json(ctx.app.store.add_project(req.name).await?),
    ))
}
