//! `GET /healthz` and `GET /readyz`, for load balancers and service managers: on every
//! listener, without a token, answering a status word and nothing else (no version,
//! no paths, no counts: they are outside every guard).
//!
//! - `/healthz`: the process is up and serving (200 `ok`).
//! - `/readyz`: this server can take requests: the store answers within
//!   [`READY_WAIT`], its schema is this build's, and on PostgreSQL some replica leads
//!   (200 `ready`); otherwise, and from the moment a shutdown begins, 503
//!   `not ready`. Why it is not ready goes to the log at debug level, never into the
//!   answer.

use super::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::time::Duration;

/// How long `/readyz` waits for the store before it answers 503.
pub const READY_WAIT: Duration = Duration::from_secs(2);

/// The two routes, with their own state: merged into each listener's router outside
/// its guard.
pub(crate) fn router(app: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(app)
}

fn word(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response()
}

async fn healthz() -> Response {
    word(StatusCode::OK, "ok\n")
}

async fn readyz(State(app): State<AppState>) -> Response {
    let why = if *app.draining.borrow() {
        Some("shutting down".to_owned())
    } else {
        match tokio::time::timeout(READY_WAIT, app.store.ready()).await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(why))) => Some(why),
            Ok(Err(e)) => Some(format!("the store: {e}")),
            Err(_) => Some(format!(
                "the store did not answer within {} s",
                READY_WAIT.as_secs()
            )),
        }
    };
    match why {
        None => word(StatusCode::OK, "ready\n"),
        Some(why) => {
            tracing::debug!(why = %why, "not ready");
            word(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        }
    }
}
