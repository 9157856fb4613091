//! The browser UI: one page, its modules and the wasm bundle, embedded in the binary so
//! `berth serve` works from any directory after `cargo install`.
//!
//! [`ui_router`] answers `/` and `/sessions/{id}` with the page (the page routes on the
//! client, so a bookmark or a reload lands on the same view) and `/ui/...` with the
//! assets. It carries no guard of its own: it is meant to be merged into the web
//! listener's router, behind the same `Host` allowlist and token. Every answer carries
//! a Content-Security-Policy without inline script, so text an agent printed can never
//! run even if it reached the DOM as markup.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use berth_core::ErrorCode;

/// The policy on every UI answer: scripts and styles only from this origin (no inline
/// script or style), wasm compilation allowed, requests only to this origin, no frames.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const WASM: &str = "application/wasm";

macro_rules! ui_file {
    ($name:literal) => {
        include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/ui/", $name))
    };
}

/// An [`Asset`] for `web/ui/<path>`, embedded at build time.
macro_rules! asset {
    ($path:literal, $mime:expr) => {
        Asset {
            path: $path,
            mime: $mime,
            body: ui_file!($path),
        }
    };
}

/// One embedded file under `/ui/`.
#[derive(Debug)]
struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static [u8],
}

const INDEX: &[u8] = ui_file!("index.html");

/// Every file under `/ui/`: the hand-written modules, and the wasm bundle that
/// `scripts/build-wasm.sh` generates from `core/` and `wasm/` into `web/ui/pkg/`. The
/// bundle is checked in (CI rebuilds it and fails if it differs), so every build of the
/// binary, `cargo install` included, serves a working binding preview.
const ASSETS: &[Asset] = &[
    asset!("app.js", JS),
    asset!("dom.js", JS),
    asset!("facts.js", JS),
    asset!("list.js", JS),
    asset!("session.js", JS),
    asset!("transcript.js", JS),
    asset!("preview.js", JS),
    asset!("style.css", CSS),
    asset!("pkg/berth_wasm.js", JS),
    asset!("pkg/berth_wasm_bg.wasm", WASM),
];

/// The routes of the UI; merge into the web listener's router behind its guard.
pub fn ui_router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/sessions/{id}", get(index))
        .route("/ui/{*path}", get(asset))
        .layer(axum::middleware::map_response(secure))
}

/// Headers every UI answer carries.
async fn secure(mut res: Response) -> Response {
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-cache"));
    res
}

async fn index() -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(HTML)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        INDEX,
    )
        .into_response()
}

async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => file(a),
        None => not_found(&path),
    }
}

fn file(a: &Asset) -> Response {
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(a.mime))],
        a.body,
    )
        .into_response()
}

fn error(status: StatusCode, code: ErrorCode, message: String, hint: &str) -> Response {
    let body = berth_core::api::ErrorBody::new(code, message, hint);
    (status, axum::Json(body)).into_response()
}

fn not_found(path: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFoundRoute,
        format!("no UI file /ui/{path}"),
        "open the page at / and let it load its own files",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{HeaderName, Request};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    struct Answer {
        status: StatusCode,
        content_type: String,
        csp: Option<String>,
        cache: Option<String>,
        body: Vec<u8>,
    }

    async fn get(uri: &str) -> Answer {
        let res = ui_router()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let header = |name: &HeaderName| {
            res.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        let status = res.status();
        let content_type = header(&header::CONTENT_TYPE).unwrap_or_default();
        let csp = header(&header::CONTENT_SECURITY_POLICY);
        let cache = header(&header::CACHE_CONTROL);
        let body = res.into_body().collect().await.unwrap().to_bytes().to_vec();
        Answer {
            status,
            content_type,
            csp,
            cache,
            body,
        }
    }

    #[tokio::test]
    async fn the_page_answers_for_the_list_and_any_session() {
        for uri in ["/", "/sessions/abc", "/sessions/0193-unknown"] {
            let a = get(uri).await;
            assert_eq!(
                (
                    a.status,
                    a.content_type.as_str(),
                    a.cache.as_deref(),
                    a.body.as_slice()
                ),
                (StatusCode::OK, HTML, Some("no-store"), INDEX),
                "{uri}"
            );
        }
    }

    #[tokio::test]
    async fn every_answer_carries_the_policy() {
        for uri in [
            "/",
            "/sessions/abc",
            "/ui/app.js",
            "/ui/style.css",
            "/ui/nope.js",
        ] {
            let a = get(uri).await;
            assert_eq!(a.csp.as_deref(), Some(CONTENT_SECURITY_POLICY), "{uri}");
        }
    }

    #[tokio::test]
    async fn the_page_has_no_inline_script_or_style() {
        let page = String::from_utf8(INDEX.to_vec()).unwrap();
        let inline = [
            "<script>",
            "style=",
            "<style",
            "onload=",
            "onclick=",
            "javascript:",
        ];
        let found: Vec<&str> = inline
            .iter()
            .copied()
            .filter(|s| page.contains(s))
            .collect();
        assert_eq!(found, Vec::<&str>::new());
    }

    #[tokio::test]
    async fn assets_have_their_types() {
        let a = get("/ui/app.js").await;
        assert_eq!((a.status, a.content_type.as_str()), (StatusCode::OK, JS));
        let a = get("/ui/style.css").await;
        assert_eq!((a.status, a.content_type.as_str()), (StatusCode::OK, CSS));
    }

    /// Every file the page or a hand-written module names is embedded: a module added
    /// to `web/ui` but not to [`ASSETS`] would load nowhere. (The generated bundle is
    /// not read: its glue quotes the wasm's import namespace, `"./berth_wasm_bg.js"`,
    /// which is no file.)
    #[tokio::test]
    async fn every_file_the_page_names_is_served() {
        let mut named = Vec::new();
        let written = ASSETS.iter().filter(|a| !a.path.starts_with("pkg/"));
        let texts = std::iter::once(INDEX).chain(written.map(|a| a.body));
        for text in texts.map(|t| String::from_utf8_lossy(t).into_owned()) {
            for quote in text.split('"').skip(1).step_by(2) {
                if let Some(file) = quote.strip_prefix("/ui/").or(quote.strip_prefix("./")) {
                    named.push(format!("/ui/{file}"));
                }
            }
        }
        named.sort();
        named.dedup();
        let mut missing = Vec::new();
        for uri in &named {
            if get(uri).await.status != StatusCode::OK {
                missing.push(uri.clone());
            }
        }
        assert!(named.len() >= 8, "{named:?}");
        assert_eq!(missing, Vec::<String>::new());
    }

    #[tokio::test]
    async fn an_unknown_file_is_a_json_404() {
        let a = get("/ui/../Cargo.toml").await;
        assert_eq!(a.status, StatusCode::NOT_FOUND);
        let a = get("/ui/secret.js").await;
        let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(
            (a.status, body["error"]["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("not_found_route"))
        );
    }

    /// The bundle is embedded in every build (no build flag, no generated-file check):
    /// the binding preview must work in a binary from `cargo install --path local-agent`.
    #[tokio::test]
    async fn the_wasm_bundle_is_always_served() {
        let a = get("/ui/pkg/berth_wasm_bg.wasm").await;
        assert_eq!(
            (a.status, a.content_type.as_str(), a.body.get(..4)),
            (StatusCode::OK, WASM, Some(b"\0asm".as_slice()))
        );
        let a = get("/ui/pkg/berth_wasm.js").await;
        assert_eq!((a.status, a.content_type.as_str()), (StatusCode::OK, JS));
        let glue = String::from_utf8(a.body).unwrap();
        assert!(
            glue.contains("berth_wasm_bg.wasm"),
            "the glue does not load the bundle"
        );
        let a = get("/ui/pkg/other.wasm").await;
        assert_eq!(a.status, StatusCode::NOT_FOUND);
    }
}
