//! The daemon's control socket: the CLI on this machine works through it exactly as
//! against `berth serve`.
//!
//! Every `/api/v1/X?Q` is forwarded to the server's `/api/v1/daemon/api/X?Q` with the
//! daemon's credentials, both bodies streaming (a `berth send` stream stays live).
//! What needs this machine is answered here:
//!
//! - a request that carries a directory (`PUT sessions/{id}/binding`, `POST sessions`
//!   with `dir`, `PUT projects/{name}/dir`) is validated natively first; a refusal is
//!   answered here exactly as the server would, an accepted directory is forwarded with
//!   the result in `x-berth-validated`. Against a server that cannot bind (the cloud
//!   build) such requests are refused here with `origin_cannot_bind`.
//! - `POST check` is answered here.
//! - the server unreachable: 503 `server_unreachable`.

use super::remote::{Body, CallError, json_body};
use super::state::Daemon;
use berth_core::api::{CheckReport, ErrorBody};
use berth_core::{ErrorCode, Refusal};
use berth_web::api::{BODY_LIMIT, CheckReply, CheckRequest, refusal_status};
use berth_web::daemon::wire::{self, Validated};
use berth_web::executor::Executor;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UnixListener;

/// The longest the server may take to start answering a forwarded request.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(60);

/// What the daemon does with a request on its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Validated here, then forwarded: a binding, a session created with a
    /// directory (when the body has `dir`), a project's directory.
    Directory,
    /// `POST check`: answered here.
    Check,
    /// Daemon tokens live on the server's own socket, never behind a daemon.
    Tokens,
    /// Forwarded unchanged.
    Forward,
}

/// How the daemon treats `method path` (the path without its query).
pub fn route(method: &Method, path: &str) -> Route {
    let segments: Vec<&str> = path
        .strip_prefix("/api/v1/")
        .map(|rest| rest.split('/').collect())
        .unwrap_or_default();
    match (method, segments.as_slice()) {
        (&Method::POST, ["check"]) => Route::Check,
        (&Method::PUT, ["sessions", _, "binding"])
        | (&Method::POST, ["sessions"])
        | (&Method::PUT, ["projects", _, "dir"]) => Route::Directory,
        (_, ["daemon", ..]) => Route::Tokens,
        _ => Route::Forward,
    }
}

/// The server path of a control-socket path and query: `/api/v1/X?Q` becomes
/// `/api/v1/daemon/api/X?Q`. `None` for anything outside `/api/v1/` and for dot
/// segments, which could climb out of the forwarded prefix.
pub fn upstream_path(path_and_query: &str) -> Option<String> {
    let rest = path_and_query.strip_prefix("/api/v1/")?;
    let path = rest.split(['?', '#']).next().unwrap_or(rest);
    let climbs = path.split('/').any(|seg| {
        let seg = seg.to_ascii_lowercase().replace("%2e", ".");
        seg == "." || seg == ".."
    });
    if path.is_empty() || climbs {
        return None;
    }
    Some(format!("{}/api/{rest}", wire::PREFIX))
}

/// `v` as JSON with every non-ASCII character escaped, so it is a valid header value.
pub fn ascii_json<T: Serialize>(v: &T) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// Binds `path` with mode 0600. A leftover socket file is removed only after checking
/// that nothing answers on it.
pub async fn bind(path: &Path) -> Result<UnixListener, super::DaemonError> {
    let io = |source| super::DaemonError::Socket {
        path: path.to_owned(),
        source,
    };
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(super::DaemonError::SocketInUse {
                path: path.to_owned(),
            });
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    let listener = UnixListener::bind(path).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    Ok(listener)
}

/// Serves the socket until the task is aborted.
pub(super) async fn serve(d: Arc<Daemon>, listener: UnixListener) {
    // A fenced agent is refused at accept, as on the server's own control socket.
    let mut listener = berth_web::peer::Checked::new(listener, "the daemon's control socket");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let d = d.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let d = d.clone();
                async move { Ok::<_, Infallible>(handle(&d, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer<T: Serialize>(status: StatusCode, body: &T) -> Response<Body> {
    let mut resp = Response::new(json_body(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn error(status: StatusCode, code: ErrorCode, message: String, hint: &str) -> Response<Body> {
    answer(status, &ErrorBody::new(code, message, hint))
}

fn refused(r: &Refusal) -> Response<Body> {
    answer(refusal_status(r.code), &ErrorBody::from(r))
}

async fn handle(d: &Daemon, req: Request<Incoming>) -> Response<Body> {
    let path_q = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".to_owned());
    let Some(upstream) = upstream_path(&path_q) else {
        return error(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFoundRoute,
            format!("no route for {}", req.uri().path()),
            "see docs/api.md for the routes under /api/v1",
        );
    };
    match route(req.method(), req.uri().path()) {
        Route::Forward => forward(d, req.map(BodyExt::boxed), upstream, None).await,
        Route::Tokens => error(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFoundRoute,
            "daemon tokens are not managed through a daemon".to_owned(),
            "run `berth daemon token ...` on the server's machine, against its `berth serve`",
        ),
        Route::Check => check(d, req).await,
        Route::Directory => directory(d, req, upstream).await,
    }
}

async fn read_body(body: Incoming) -> Result<Bytes, Box<Response<Body>>> {
    match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Box::new(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than {BODY_LIMIT} bytes"),
            "send a smaller body",
        ))),
        Err(e) => Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            ErrorCode::BadRequest,
            format!("could not read the request body: {e}"),
            "fix the request body; it must be a JSON object with the documented fields",
        ))),
    }
}

/// Native validation off the async threads; `Err` is an internal failure, answered
/// 500.
async fn validate(d: &Daemon, dir: String) -> Result<Result<Validated, Refusal>, Response<Body>> {
    let exec = d.executor.clone();
    let asked = dir.clone();
    let checked = tokio::task::spawn_blocking(move || exec.validate(&asked))
        .await
        .map_err(|e| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                format!("validating {dir} failed: {e}"),
                "see berth daemon's output",
            )
        })?;
    Ok(checked.map(|v| Validated {
        dir,
        canonical: v.canonical.as_str().to_owned(),
        display: v.display,
        dev: v.identity.dev,
        ino: v.identity.ino,
    }))
}

async fn check(d: &Daemon, req: Request<Incoming>) -> Response<Body> {
    let bytes = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let asked: CheckRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                format!("invalid request body: {e}"),
                "fix the request body; it must be a JSON object with the documented fields",
            );
        }
    };
    let checked = match validate(d, asked.dir).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    match checked {
        Ok(v) => answer(
            StatusCode::OK,
            &CheckReply {
                report: CheckReport::accepted(v.canonical, v.display),
                error: None,
            },
        ),
        Err(r) => answer(
            refusal_status(r.code),
            &CheckReply {
                report: CheckReport::refused(&r, None, None),
                error: Some(ErrorBody::from(&r).error),
            },
        ),
    }
}

/// A directory-carrying request: validated here, then forwarded with the result.
async fn directory(d: &Daemon, req: Request<Incoming>, upstream: String) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let bytes = match read_body(body).await {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    // Anything without a string `dir` goes as it is (the server answers a malformed
    // body), except that a session created without a directory loses its null `dir`
    // and `mode`: a cloud build knows no such fields and refuses them even empty.
    let Some(dir) = value.get("dir").and_then(|v| v.as_str()).map(str::to_owned) else {
        let bytes = without_null_binding(&value).unwrap_or(bytes);
        return forward(d, Request::from_parts(parts, full(bytes)), upstream, None).await;
    };
    if d.local_binding() == Some(false) {
        return refused(&Refusal::new(
            ErrorCode::OriginCannotBind,
            format!(
                "the server at {} cannot bind directories, so {dir} cannot be bound",
                d.remote.url()
            ),
            "that server is a cloud build: its sessions run in scratch directories and worktrees; \
             bind directories with `berth serve` on this machine instead",
        ));
    }
    let checked = match validate(d, dir).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    match checked {
        Ok(v) => {
            let header = ascii_json(&v);
            forward(
                d,
                Request::from_parts(parts, full(bytes)),
                upstream,
                Some(header),
            )
            .await
        }
        Err(r) => refused(&r),
    }
}

/// The body without its `dir` and `mode` keys when `dir` is null or absent and
/// `mode` null or absent; `None` when there is nothing to remove.
pub fn without_null_binding(value: &serde_json::Value) -> Option<Bytes> {
    let obj = value.as_object()?;
    let null_or_absent = |k: &str| obj.get(k).is_none_or(serde_json::Value::is_null);
    if !(null_or_absent("dir") && null_or_absent("mode")) {
        return None;
    }
    if !obj.contains_key("dir") && !obj.contains_key("mode") {
        return None;
    }
    let mut obj = obj.clone();
    obj.remove("dir");
    obj.remove("mode");
    serde_json::to_vec(&obj).ok().map(Bytes::from)
}

fn full(bytes: Bytes) -> Body {
    http_body_util::Full::new(bytes)
        .map_err(|never| match never {})
        .boxed()
}

/// Headers that belong to one connection, never forwarded.
fn hop_by_hop(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
    )
}

/// The largest request body forwarded (and kept to send again after registering).
const REPLAY_LIMIT: usize = 4 * 1024 * 1024;

/// Forwards `req` to `upstream` on the server, with `validated` in
/// `x-berth-validated`; the answer streams back as it comes.
async fn forward(
    d: &Daemon,
    req: Request<Body>,
    upstream: String,
    validated: Option<String>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let mut out = Request::builder().method(parts.method).uri(upstream);
    for (name, value) in &parts.headers {
        // The client never speaks for the daemon: credentials and the validation
        // result are set here only. The length is the body's own (it may have been
        // rewritten), set by the connection.
        let ours = name == header::AUTHORIZATION
            || name == header::CONTENT_LENGTH
            || name.as_str() == wire::MACHINE_HEADER
            || name.as_str() == wire::VALIDATED_HEADER;
        if !hop_by_hop(name) && !ours {
            out = out.header(name, value);
        }
    }
    if let Some(v) = validated {
        out = out.header(wire::VALIDATED_HEADER, v);
    }
    // The CLI's requests are small documents: kept, so a request the server refused
    // because it no longer knows this daemon (it restarted) can go again once the
    // daemon registered again.
    let bytes = match http_body_util::Limited::new(body, REPLAY_LIMIT)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                format!("the request could not be read: {e}"),
                "send a smaller request",
            );
        }
    };
    let template = out;
    let build = |b: Bytes| {
        let mut req = Request::builder()
            .method(template.method_ref().cloned().unwrap_or(hyper::Method::GET))
            .uri(template.uri_ref().cloned().unwrap_or_default());
        if let Some(h) = template.headers_ref() {
            for (name, value) in h {
                req = req.header(name, value);
            }
        }
        req.body(full(b))
    };
    let req = match build(bytes.clone()) {
        Ok(r) => r,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                ErrorCode::BadRequest,
                format!("cannot forward the request: {e}"),
                "check the request's headers",
            );
        }
    };
    let seen = d.generation();
    let mut sent = tokio::time::timeout(FORWARD_TIMEOUT, d.remote.send(req)).await;
    if let Ok(Ok(resp)) = &sent
        && resp.status() == StatusCode::UNAUTHORIZED
        && let Ok(again) = build(bytes)
    {
        let refusal = CallError::Status {
            status: StatusCode::UNAUTHORIZED,
            code: Some(ErrorCode::Unauthorized),
            message: "the server no longer knows this daemon".to_owned(),
            hint: None,
        };
        d.reregister(seen, &refusal).await;
        if d.generation() != seen {
            sent = tokio::time::timeout(FORWARD_TIMEOUT, d.remote.send(again)).await;
        }
    }
    let resp = match sent {
        Ok(Ok(resp)) => resp,
        Ok(Err(CallError::Unreachable(why))) => return unreachable(d, &why),
        Err(_) => return unreachable(d, "no answer within 60s"),
        Ok(Err(e)) => {
            return error(
                StatusCode::BAD_GATEWAY,
                ErrorCode::BadGateway,
                format!("forwarding to the server at {} failed: {e}", d.remote.url()),
                "check the server's log",
            );
        }
    };
    let (parts, body) = resp.into_parts();
    let mut back = Response::new(body.boxed());
    *back.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            back.headers_mut().append(name, value.clone());
        }
    }
    back
}

fn unreachable(d: &Daemon, why: &str) -> Response<Body> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::ServerUnreachable,
        format!(
            "the berth server at {} does not answer: {why}",
            d.remote.url()
        ),
        "check that the server runs and that this machine reaches it; berth daemon keeps retrying, try again in a moment",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_move_under_the_daemon_prefix_with_their_query() {
        let cases = [
            ("/api/v1/sessions", Some("/api/v1/daemon/api/sessions")),
            (
                "/api/v1/tasks?session=ab%20c",
                Some("/api/v1/daemon/api/tasks?session=ab%20c"),
            ),
            (
                "/api/v1/sessions/0192/events",
                Some("/api/v1/daemon/api/sessions/0192/events"),
            ),
            ("/api/v1/health", Some("/api/v1/daemon/api/health")),
            ("/api/v1/", None),
            ("/api/v1", None),
            ("/api/v2/sessions", None),
            ("/", None),
            ("/hooks/slack", None),
            ("/api/v1/../daemon/register", None),
            ("/api/v1/sessions/%2E%2e/x", None),
            ("/api/v1/./tasks", None),
        ];
        for (input, want) in cases {
            assert_eq!(upstream_path(input).as_deref(), want, "{input}");
        }
    }

    #[test]
    fn directory_requests_are_recognized() {
        let cases = [
            (
                Method::PUT,
                "/api/v1/sessions/abc/binding",
                Route::Directory,
            ),
            (
                Method::DELETE,
                "/api/v1/sessions/abc/binding",
                Route::Forward,
            ),
            (Method::POST, "/api/v1/sessions", Route::Directory),
            (Method::GET, "/api/v1/sessions", Route::Forward),
            (Method::PUT, "/api/v1/projects/web/dir", Route::Directory),
            (Method::POST, "/api/v1/projects", Route::Forward),
            (Method::POST, "/api/v1/check", Route::Check),
            (Method::GET, "/api/v1/check", Route::Forward),
            (Method::POST, "/api/v1/daemon/tokens", Route::Tokens),
            (Method::DELETE, "/api/v1/daemon/tokens/a", Route::Tokens),
            (
                Method::POST,
                "/api/v1/sessions/abc/messages",
                Route::Forward,
            ),
        ];
        for (method, path, want) in cases {
            assert_eq!(route(&method, path), want, "{method} {path}");
        }
    }

    #[test]
    fn a_session_without_a_directory_loses_its_empty_binding_fields() {
        let strip = |v: serde_json::Value| {
            without_null_binding(&v).map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        };
        let agent = serde_json::json!({"agent": "cat"});
        assert_eq!(
            strip(serde_json::json!({"agent": "cat", "dir": null, "mode": null})),
            Some(Some(agent.clone()))
        );
        assert_eq!(
            strip(serde_json::json!({"agent": "cat", "dir": null})),
            Some(Some(agent))
        );
        assert_eq!(strip(serde_json::json!({"agent": "cat"})), None);
        // A mode without a directory is the server's to refuse.
        assert_eq!(
            strip(serde_json::json!({"dir": null, "mode": "worktree"})),
            None
        );
        assert_eq!(strip(serde_json::json!(["dir"])), None);
    }

    #[test]
    fn validated_header_is_ascii_and_round_trips() {
        let v = Validated {
            dir: "/home/zoë/code/app 🚀".into(),
            canonical: "/home/zoë/code/app 🚀".into(),
            display: "~/code/app 🚀".into(),
            dev: 2049,
            ino: 42,
        };
        let text = ascii_json(&v);
        assert!(text.is_ascii(), "{text}");
        assert!(header::HeaderValue::from_str(&text).is_ok());
        let back: Validated = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, v);
    }
}
