//! The HTTP API under `/api/v1`, as routers for each surface.
//!
//! - [`control_router`]: every route, for the Unix control socket (trust = the user's
//!   shell). Tasks it creates have origin `desktop`.
//! - [`web_router`]: the read routes only, behind a `Host` allowlist and a token, for
//!   the loopback web listener. Anything but `GET`/`HEAD` answers 405 before routing,
//!   so no write handler is reachable. **Contract extension:** session and task JSON on
//!   this surface never carry a real path: `binding` is the read view
//!   (`{display, daemon, daemon_name, mode, state}`, no `dir`) and `work_dir` is the
//!   privacy-stripped display form, by the home of the machine the path is on
//!   (`redact`).
//! - [`cloud_router`]: every route, on `berth-server`'s TCP listener; writes need
//!   `Authorization: Bearer <token>`, reads the token as bearer or cookie. Origin `api`.
//!   **Contract extension:** `work_dir` here is the display form too, as the machine
//!   that ran the task made it, and in a session's event text the home of the
//!   machine it runs on shows as `~` (no other machine's: see `redact`).
//!
//! The web listener and `berth-server`'s listener also serve the chat webhooks
//! `POST /hooks/slack` and `POST /hooks/lark` ([`crate::hooks`]) *outside* the guard:
//! they are authenticated by the platforms' signatures, not by the token. They are
//! the web listener's only writes; everything else on it stays read-only.

mod access;
pub mod approvals;
mod auth;
#[cfg(feature = "local-binding")]
mod binding;
mod daemons;
mod forward;
mod handlers;
pub mod health;
mod lifecycle;
mod members;
mod redact;
mod review;
mod sse;
mod state;
mod tokens;
mod usage;
mod views;

pub use crate::http::{ApiError, BODY_LIMIT, JsonBody, refusal_status};
pub use access::{AuditTarget, Caller, Scope};
pub use auth::{COOKIE_MAX_AGE_SECS, TOKEN_COOKIE, WebToken, loopback_hosts, one_target};
#[cfg(feature = "local-binding")]
pub use binding::{CheckReply, CheckRequest, ProjectDirRequest};
pub use daemons::Via;
pub use handlers::{Capabilities, Health, NewAgent, NewMessage, NewProject, TaskReply};
pub use lifecycle::{AgentPatch, DeletedReply, SessionPatch};
pub use members::{Me, MemberToken, NewMember};
pub(crate) use state::Ctx;
pub use state::{AppState, Surface};
pub use views::{SessionDoc, WebSession, strip_path};

use auth::Guard;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use std::sync::Arc;

fn read_routes() -> Router<Ctx> {
    Router::new()
        .route("/api/v1/health", get(handlers::health))
        .route("/api/v1/capabilities", get(handlers::capabilities))
        .route("/api/v1/me", get(members::me))
        .route("/api/v1/sessions", get(handlers::list_sessions))
        .route("/api/v1/sessions/{id}", get(handlers::get_session))
        .route("/api/v1/sessions/{id}/events", get(sse::events))
        .route("/api/v1/tasks", get(handlers::list_tasks))
        .route("/api/v1/tasks/{id}", get(handlers::get_task))
        .route("/api/v1/tasks/{id}/diff", get(review::task_diff))
        .route("/api/v1/agents", get(handlers::list_agents))
        .route("/api/v1/projects", get(handlers::list_projects))
        .route("/api/v1/approvals", get(approvals::list))
        .route("/api/v1/sessions/{id}/rules", get(approvals::rules))
        .route("/api/v1/usage", get(usage::report))
        .route("/api/v1/sessions/{id}/usage", get(usage::session))
}

fn all_routes() -> Router<Ctx> {
    let r = read_routes()
        .route("/api/v1/sessions", post(handlers::create_session))
        .route(
            "/api/v1/sessions/{id}/messages",
            post(handlers::post_message),
        )
        .route("/api/v1/tasks/{id}/cancel", post(handlers::cancel_task))
        .route("/api/v1/tasks/{id}/undone", post(handlers::task_undone))
        .route("/api/v1/approvals/{id}", post(approvals::answer))
        .route(
            "/api/v1/sessions/{id}/rules/{n}",
            axum::routing::delete(approvals::remove_rule),
        )
        .route(
            "/api/v1/sessions/{id}",
            axum::routing::patch(lifecycle::patch_session).delete(lifecycle::delete_session),
        )
        .route("/api/v1/agents", post(handlers::add_agent))
        .route(
            "/api/v1/agents/{name}",
            axum::routing::patch(lifecycle::edit_agent).delete(lifecycle::remove_agent),
        )
        .route("/api/v1/projects", post(handlers::add_project))
        .route(
            crate::daemon::wire::TOKENS,
            post(tokens::create).get(tokens::list),
        )
        .route(
            &format!("{}/{{name}}", crate::daemon::wire::TOKENS),
            axum::routing::delete(tokens::revoke),
        );
    #[cfg(feature = "local-binding")]
    let r = r
        .route(
            "/api/v1/sessions/{id}/binding",
            axum::routing::put(binding::link).delete(binding::unlink),
        )
        .route("/api/v1/check", post(binding::check))
        .route(
            "/api/v1/projects/{name}/dir",
            axum::routing::put(binding::set_project_dir),
        );
    r
}

/// A team server's own routes: members and the audit trail.
fn member_routes() -> Router<Ctx> {
    Router::new()
        .route("/api/v1/members", post(members::add).get(members::list))
        .route(
            "/api/v1/members/{name}",
            axum::routing::delete(members::remove),
        )
        .route("/api/v1/members/{name}/token", post(members::rotate))
        .route("/api/v1/audit", get(members::audit))
}

fn finish(routes: Router<Ctx>, app: AppState, surface: Surface) -> Router {
    let ctx = Ctx { app, surface };
    routes
        // Every route, every surface: who may do what is decided in one place.
        .route_layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            access::enforce,
        ))
        .fallback(handlers::no_route)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(ctx)
}

/// Every route, for the control socket, and the health checks.
pub fn control_router(app: AppState) -> Router {
    let health = health::router(app.clone());
    finish(all_routes(), app, Surface::Control).merge(health)
}

/// The daemon routes ([`crate::daemon::wire`]), when the server accepts daemons:
/// authenticated by daemon tokens, outside the listener's guard.
fn daemon_routes(app: &AppState) -> Router {
    if app.daemons.accepts() {
        daemons::router(app.clone(), control_router(app.clone()))
    } else {
        Router::new()
    }
}

/// The read routes and the browser UI ([`crate::ui`]), for the web listener: `Host`
/// must be one of `allowed_hosts` (`host:port` as the browser sends it, see
/// [`loopback_hosts`]), and the token must come as `?token=` (answered with an
/// HttpOnly SameSite=Strict cookie, `Secure` when `tls`) or that cookie. Writes answer
/// 405.
pub fn web_router(
    app: AppState,
    token: impl Into<auth::WebToken>,
    allowed_hosts: Vec<String>,
    tls: bool,
) -> Router {
    let guard = Arc::new(Guard {
        token: token.into(),
        allowed_hosts: Some(allowed_hosts),
        writes: false,
        tls,
        members: None,
    });
    let hooks = crate::hooks::hooks_router(app.channels.clone());
    let daemons = daemon_routes(&app);
    let health = health::router(app.clone());
    let display = app.display.clone();
    finish(read_routes(), app, Surface::Web)
        .layer(axum::middleware::from_fn_with_state(
            display,
            redact::redact_layer,
        ))
        .merge(crate::ui::ui_router())
        .layer(axum::middleware::from_fn_with_state(guard, auth::guard))
        .merge(hooks)
        .merge(daemons)
        .merge(health)
}

/// Every route, for `berth-server`, a team's server: each request is a member's, by
/// their token (`Authorization: Bearer <token>`; reads also by the cookie `?token=`
/// sets), and [`access`] keeps each member to their own sessions. The web UI shows
/// the member's sessions (all of them to an admin).
pub fn cloud_router(app: AppState, token: String, tls: bool) -> Router {
    let guard = Arc::new(Guard {
        token: token.into(),
        allowed_hosts: None,
        writes: true,
        tls,
        members: Some(app.store.clone()),
    });
    let hooks = crate::hooks::hooks_router(app.channels.clone());
    let daemons = daemon_routes(&app);
    let health = health::router(app.clone());
    let leader = app.clone();
    finish(all_routes().merge(member_routes()), app, Surface::Cloud)
        .merge(crate::ui::ui_router())
        .layer(axum::middleware::from_fn_with_state(guard, auth::guard))
        .merge(hooks)
        .merge(daemons)
        .layer(axum::middleware::from_fn_with_state(
            leader,
            forward::to_leader,
        ))
        // This replica's own health, never the leader's.
        .merge(health)
}
