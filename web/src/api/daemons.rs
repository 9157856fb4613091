//! The daemon routes on the server's listener (see [`crate::daemon::wire`] for the
//! protocol): what a daemon calls with its token, and its control socket forwarded
//! into the control API.

use super::state::AppState;
use crate::daemon::wire::{
    self, ClaimRequest, EventBatch, FinishReply, FinishRequest, Heartbeat, Register, Validated,
};
use crate::daemon::{AuthError, Caller, Finished, Gone, TaskCallError};
use crate::http::{ApiError, BODY_LIMIT, JsonBody};
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use berth_core::TaskId;
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

/// A control-API request forwarded by a daemon: the machine it came from, and the
/// directory the daemon validated natively, if the request names one. Handlers that
/// bind a directory bind it on that machine, with the daemon's validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    pub machine: MachineId,
    pub name: String,
    pub validated: Option<Validated>,
}

/// What the daemon routes share.
#[derive(Clone)]
struct DaemonCtx {
    app: AppState,
    /// The whole control API, for the daemon's forwarded control socket.
    control: Router,
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn machine(headers: &HeaderMap) -> Option<&str> {
    headers.get(wire::MACHINE_HEADER)?.to_str().ok()
}

fn caller(ctx: &DaemonCtx, headers: &HeaderMap) -> Result<Caller, ApiError> {
    Ok(ctx.app.daemons.caller(bearer(headers), machine(headers))?)
}

/// The routes a daemon calls, authenticated by its token (not by the listener's
/// guard). `control` is the control API the daemon's own socket forwards to; through
/// it a daemon acts for its token's member, never as the server's own user.
pub(super) fn router(app: AppState, control: Router) -> Router {
    let p = wire::PREFIX;
    Router::new()
        .route(&format!("{p}/register"), post(register))
        .route(&format!("{p}/heartbeat"), post(heartbeat))
        .route(&format!("{p}/claim"), post(claim))
        .route(&format!("{p}/leave"), post(leave))
        .route(&format!("{p}/tasks/{{id}}/events"), post(events))
        .route(&format!("{p}/tasks/{{id}}/finish"), post(finish))
        .route(&format!("{p}/api/{{*rest}}"), any(forward))
        .route_layer(axum::middleware::from_fn_with_state(
            app.draining.clone(),
            turn_away_while_draining,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(DaemonCtx { app, control })
}

/// A server shutting down hears no more from daemons: what they report (events, a
/// finish, a claim) goes to whoever leads next, so that only one process records a
/// task. 503 `unavailable` with `Retry-After`: the daemon retries, through the
/// balancer, and reaches the next leader.
async fn turn_away_while_draining(
    State(draining): State<tokio::sync::watch::Receiver<bool>>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    if *draining.borrow() {
        return ApiError::from(crate::store::StoreError::Unavailable(
            "this berth-server is shutting down; another one carries on".to_owned(),
        ))
        .into_response();
    }
    next.run(req).await
}

async fn register(
    State(ctx): State<DaemonCtx>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<Register>,
) -> Result<Json<wire::Registered>, ApiError> {
    if machine(&headers) != Some(req.machine_id.as_str()) {
        return Err(AuthError::Missing.into());
    }
    let name = req.name.trim().to_owned();
    if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
        return Err(ApiError::BadRequest {
            message: format!("the machine name {name:?} must be 1 to 64 printable characters"),
        });
    }
    let home = match req.home {
        None => None,
        Some(home) => Some(
            berth_core::LocalPath::parse(ctx.app.display.platform, &home)
                .ok()
                .filter(|h| !h.parts().is_empty())
                .ok_or_else(|| ApiError::BadRequest {
                    message: format!(
                        "the machine's home {home:?} must be an absolute path below the root"
                    ),
                })?,
        ),
    };
    let out = ctx
        .app
        .daemons
        .register(
            bearer(&headers),
            machine(&headers),
            name,
            req.instance,
            home,
        )
        .await??;
    Ok(Json(out))
}

async fn heartbeat(
    State(ctx): State<DaemonCtx>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<Heartbeat>,
) -> Result<Json<wire::HeartbeatReply>, ApiError> {
    let caller = caller(&ctx, &headers)?;
    Ok(Json(ctx.app.daemons.heartbeat(
        &caller,
        &req.instance,
        &req.running,
        req.claimed_through,
    )?))
}

async fn leave(
    State(ctx): State<DaemonCtx>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<wire::Leave>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let caller = caller(&ctx, &headers)?;
    ctx.app.daemons.leave(&caller, &req.instance).await?;
    Ok(Json(serde_json::json!({})))
}

/// The long poll: answers the moment a task waits for this machine, or 204 after the
/// wait.
async fn claim(
    State(ctx): State<DaemonCtx>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ClaimRequest>,
) -> Result<Response, ApiError> {
    let caller = caller(&ctx, &headers)?;
    let daemons = &ctx.app.daemons;
    let cap = daemons.config().claim_wait;
    let wait = req
        .wait_ms
        .map_or(cap, |ms| Duration::from_millis(ms).min(cap));
    let deadline = Instant::now() + wait;
    // Shutting down: nothing more is handed out here (the next leader does).
    let mut draining = ctx.app.draining.clone();
    loop {
        if *draining.borrow() {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        let wake = daemons.claim_wake(&caller, &req.instance)?;
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(task) = daemons.take(&caller, &req.instance, req.seq) {
            // Before the daemon has it: whoever leads next must know it may have run.
            // Not recorded (the database is away), the daemon does not get it, and the
            // registry puts it back in line after the window, as a lost claim answer.
            ctx.app
                .store
                .mark_handed(
                    task.task_id.clone(),
                    caller.machine.clone(),
                    req.instance.clone(),
                )
                .await?;
            return Ok(Json(task).into_response());
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => return Ok(StatusCode::NO_CONTENT.into_response()),
            _ = draining.wait_for(|c| *c) => return Ok(StatusCode::NO_CONTENT.into_response()),
        }
    }
}

async fn events(
    State(ctx): State<DaemonCtx>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(batch): JsonBody<EventBatch>,
) -> Result<Json<wire::EventsReply>, ApiError> {
    let caller = caller(&ctx, &headers)?;
    // A daemon names only tasks it was handed: anything else is not running there.
    let id = TaskId::parse(&id).map_err(|_| Gone::of(&caller, &id))?;
    match ctx.app.daemons.events(&caller, &id, batch).await {
        Ok(reply) => Ok(Json(reply)),
        Err(TaskCallError::Gone(g)) => Err(g.into()),
        Err(TaskCallError::Store(e)) => Err(e.into()),
    }
}

async fn finish(
    State(ctx): State<DaemonCtx>,
    headers: HeaderMap,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<FinishRequest>,
) -> Result<Json<FinishReply>, ApiError> {
    let caller = caller(&ctx, &headers)?;
    if !req.outcome.status.is_final() && req.outcome.status != TaskStatus::WaitingDaemon {
        return Err(ApiError::BadRequest {
            message: format!(
                "a task cannot finish as {}; give a final status",
                req.outcome.status.as_str()
            ),
        });
    }
    let id = TaskId::parse(&id).map_err(|_| Gone::of(&caller, &id))?;
    match ctx.app.daemons.finish(&caller, &id, req).await {
        Ok(Finished::Done(status)) => Ok(Json(FinishReply { status })),
        Ok(Finished::Missing { received }) => Err(ApiError::EventsMissing { received }),
        Err(TaskCallError::Gone(g)) => Err(g.into()),
        Err(TaskCallError::Store(e)) => Err(e.into()),
    }
}

/// The daemon's control socket, forwarded: the request goes through the whole
/// control API, marked with the machine it came from (and the directory the daemon
/// validated, if any), and made by its token's member ([`super::Caller::daemon`]),
/// on `berth serve` as on `berth-server`: the token crosses the network, so it is
/// never the server user's own socket. It reaches the sessions its member owns (a
/// token without one, as every token of `berth serve`, is the first admin's), never
/// the desktop user's, and registers no agent (`403 admin_only`).
async fn forward(
    State(ctx): State<DaemonCtx>,
    Path(rest): Path<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let caller = caller(&ctx, req.headers())?;
    if rest == "daemon" || rest.starts_with("daemon/") {
        return Err(ApiError::NoRoute {
            path: format!("/api/v1/{rest}"),
        });
    }
    let validated = match req.headers().get(wire::VALIDATED_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| serde_json::from_str::<Validated>(s).ok())
                .ok_or_else(|| ApiError::BadRequest {
                    message: format!("the {} header is not valid", wire::VALIDATED_HEADER),
                })?,
        ),
    };
    let (mut parts, body) = req.into_parts();
    let uri = match parts.uri.query() {
        Some(q) => format!("/api/v1/{rest}?{q}"),
        None => format!("/api/v1/{rest}"),
    };
    parts.uri = uri
        .parse()
        .map_err(|_| ApiError::NoRoute { path: uri.clone() })?;
    parts.headers.remove(header::AUTHORIZATION);
    // A fresh request for the inner router: the outer route's matched parameters
    // must not reach its extractors.
    parts.extensions = axum::http::Extensions::new();
    let member = crate::store::owner_name(caller.member.as_deref()).to_owned();
    parts
        .extensions
        .insert(super::Caller::daemon(member, &caller.name));
    parts.extensions.insert(Via {
        machine: caller.machine,
        name: caller.name,
        validated,
    });
    let resp = ctx
        .control
        .oneshot(Request::from_parts(parts, Body::new(body)))
        .await;
    match resp {
        Ok(r) => Ok(r),
        Err(never) => match never {},
    }
}
