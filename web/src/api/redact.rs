//! The display rule on everything the web listener serves.
//!
//! Every JSON answer of the web listener's API (documents, lists, errors) and every
//! transcript event it streams has each string value passed through
//! [`berth_core::display::redact_text`]: the server user's home shows as `~`, other
//! users' names as `…`. It is applied to the whole answer as a layer of the web
//! router, not per route, so a route added later cannot forget it. The control socket
//! keeps the real text.
//!
//! One field is let through: `home` of `GET capabilities`, which the browser's binding
//! preview needs to apply the home rules to what the user types (it is never shown).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use berth_core::Context;
use std::sync::Arc;

/// The largest JSON answer the layer rewrites; the web listener serves nothing near
/// it (session lists are capped far below), and a larger one is refused rather than
/// served unredacted.
const MAX_JSON: usize = 64 * 1024 * 1024;

/// The route whose `home` the preview needs as it is.
const CAPABILITIES: &str = "/api/v1/capabilities";

/// The layer: runs the request, then redacts its answer.
pub(crate) async fn redact_layer(
    State(ctx): State<Arc<Context>>,
    req: Request,
    next: Next,
) -> Response {
    let keep_home = req.uri().path() == CAPABILITIES;
    let res = next.run(req).await;
    redact_answer(&ctx, res, keep_home).await
}

/// Rewrites a JSON answer with every string redacted; other answers (the UI's assets,
/// the event stream, which redacts per event) pass unchanged.
async fn redact_answer(ctx: &Context, res: Response, keep_home: bool) -> Response {
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_JSON).await else {
        return withheld(parts);
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return withheld(parts);
    };
    let home = keep_home.then(|| value.get("home").cloned()).flatten();
    berth_core::display::redact_json(ctx, &mut value);
    if let (Some(home), Some(obj)) = (home, value.as_object_mut()) {
        obj.insert("home".to_owned(), home);
    }
    let Ok(out) = serde_json::to_vec(&value) else {
        return withheld(parts);
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

/// An answer that could not be checked is not served.
fn withheld(mut parts: axum::http::response::Parts) -> Response {
    parts.status = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = serde_json::json!({"error": {
        "code": "internal",
        "message": "the answer could not be checked for private paths, so it was not sent",
        "hint": "see the server's log"
    }});
    Response::from_parts(parts, Body::from(body.to_string()))
}
