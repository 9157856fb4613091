//! Several `berth-server`s on one PostgreSQL database: what only the leader serves.
//!
//! Every process serves the API from the database, and live event streams from its
//! notifications. The leader alone runs tasks and holds the daemons' connections (their
//! long-poll claims, heartbeat windows and running tasks are live state). A process that
//! does not lead forwards those requests to the leader's advertised address, unchanged
//! (the leader authenticates them itself), and streams the answer back: a daemon behind
//! a load balancer may reach any process.
//!
//! Forwarded: everything under `/api/v1/daemon/` (daemons, and daemon tokens, which the
//! leader's registry caches), cancelling a task (the leader holds the running ones), and
//! removing a member (their machines go offline in the leader's registry).

use super::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

/// The largest request body forwarded (daemons send event batches; the API limit).
const FORWARD_LIMIT: usize = super::BODY_LIMIT;

/// Marks a forwarded request: a process that does not lead answers it 503 rather than
/// forwarding it again.
const FORWARDED: &str = "x-berth-forwarded";

fn leader_only(method: &Method, path: &str) -> bool {
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    under(crate::daemon::wire::PREFIX)
        || (method == Method::POST
            && path.starts_with("/api/v1/tasks/")
            && path.ends_with("/cancel"))
        || (method == Method::DELETE && under("/api/v1/members"))
}

fn unavailable(message: String) -> Response {
    let body = berth_core::api::ErrorBody::new(
        berth_core::ErrorCode::Unavailable,
        message,
        "the servers are electing a leader; try again in a few seconds",
    );
    let mut res = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    res
}

pub(crate) async fn to_leader(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if !leader_only(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    if app.store.leads() {
        // Led from here: served once the last leader's work is taken over (a daemon
        // asking about its task before then would be told to stop it).
        if app.scheduler.leads() {
            return next.run(req).await;
        }
        return unavailable("this berth-server is taking over as the leader".to_owned());
    }
    if req.headers().contains_key(FORWARDED) {
        // Sent here as to the leader, which this process no longer is (or never was):
        // never served here, never forwarded in a loop.
        return unavailable("the leader changed while the request was on its way".to_owned());
    }
    let base = match app.store.leader_url().await {
        Ok(Some(url)) if !url.is_empty() => url,
        Ok(_) => return unavailable("no berth-server leads the database yet".to_owned()),
        Err(e) => return unavailable(format!("the leader's address cannot be read: {e}")),
    };
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let bytes = match http_body_util::Limited::new(body, FORWARD_LIMIT)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response();
        }
    };
    let uri = match format!("{}{path}", base.trim_end_matches('/')).parse() {
        Ok(u) => u,
        Err(e) => return unavailable(format!("the leader's address {base:?} is not usable: {e}")),
    };
    parts.uri = uri;
    for h in [header::HOST, header::CONNECTION, header::CONTENT_LENGTH] {
        parts.headers.remove(h);
    }
    parts
        .headers
        .insert(FORWARDED, HeaderValue::from_static("1"));
    let out = axum::http::Request::from_parts(parts, crate::net::client::full(bytes));
    match app.http.send(out).await {
        Ok(res) => {
            let (parts, body) = res.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => unavailable(format!("the leader at {base} cannot be reached: {e}")),
    }
}
