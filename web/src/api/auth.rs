//! The guard in front of the web listener and `berth-server`'s listener, and the
//! check before everything on them that a request names one server only.

use super::access::Caller;
use crate::http::ApiError;
use crate::secret::{same, token_hash};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

/// The cookie that carries the token after `?token=` was presented once.
pub const TOKEN_COOKIE: &str = "berth_token";

/// How long the browser keeps that cookie: a month, so the web UI is easy to come
/// back to (the token itself stays until `berth ui --rotate`).
pub const COOKIE_MAX_AGE_SECS: u64 = 30 * 24 * 3600;

/// A listener's token. `berth serve`'s lives in a file (`$BERTH_HOME/web-token`) so it
/// outlasts a restart; `berth ui --rotate` writes a new one there, and the listener
/// takes it at its next request (the file's identity and times are checked on each:
/// one `stat`), so the old token, cookies included, stops working at once. A file
/// that cannot be read keeps the token in force: never none, never an empty one.
#[derive(Debug)]
pub struct WebToken {
    file: Option<PathBuf>,
    current: RwLock<(String, Option<[i64; 4]>)>,
}

impl From<String> for WebToken {
    /// A token for the listener's whole life.
    fn from(token: String) -> WebToken {
        WebToken {
            file: None,
            current: RwLock::new((token, None)),
        }
    }
}

impl WebToken {
    /// `token`, as read from `file`, followed there.
    pub fn in_file(token: String, file: PathBuf) -> WebToken {
        let stamp = stamp(&file);
        WebToken {
            file: Some(file),
            current: RwLock::new((token, stamp)),
        }
    }

    /// The token in force now.
    pub fn current(&self) -> String {
        let (token, seen) = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(file) = &self.file else {
            return token;
        };
        let now = stamp(file);
        if now == seen {
            return token;
        }
        match std::fs::read_to_string(file) {
            Ok(text) if crate::secret::is_token(text.trim()) => {
                let fresh = text.trim().to_owned();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    (fresh.clone(), now);
                fresh
            }
            _ => token,
        }
    }
}

/// A file's device, inode and modification time (seconds, nanoseconds).
fn stamp(path: &std::path::Path) -> Option<[i64; 4]> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(path).ok()?;
    #[allow(clippy::cast_possible_wrap)]
    Some([
        md.dev() as i64,
        md.ino() as i64,
        md.mtime(),
        md.mtime_nsec(),
    ])
}

#[derive(Debug)]
pub(crate) struct Guard {
    pub token: WebToken,
    /// `Some`: the `Host` header must be one of these (DNS rebinding defence).
    pub allowed_hosts: Option<Vec<String>>,
    /// Whether writes exist on this listener (they then need the bearer token).
    pub writes: bool,
    /// Served over TLS: the session cookie is `Secure`, never sent over plain http.
    pub tls: bool,
    /// A team server: tokens are members' (hashed in the store), and each request
    /// carries its [`Caller`]. `None`: the one `token`, and the caller is local.
    pub members: Option<crate::store::Store>,
}

/// How a request presented its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presented {
    Bearer,
    Cookie,
    Query,
}

/// The `Host` values a browser sends for a loopback listener on `addr`.
pub fn loopback_hosts(addr: SocketAddr) -> Vec<String> {
    let port = addr.port();
    let mut hosts = vec![addr.to_string()];
    if addr.ip().is_loopback() {
        for h in [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ] {
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
    }
    hosts
}

fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

fn cookie(req: &Request) -> Option<&str> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|kv| kv.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('='))
}

fn query_token(req: &Request) -> Option<&str> {
    req.uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
}

/// In front of every route of a TCP listener (the guarded API and UI, the webhooks, the
/// daemon routes): a request must name its server exactly one way. Two `Host` headers,
/// or an absolute-form target (`GET http://evil/api/v1/... HTTP/1.1`, whose authority
/// would otherwise be ignored beside a valid `Host`), answer 400 `bad_request`: the
/// `Host` allowlist can only defend what it unambiguously sees.
pub async fn one_target(req: Request, next: Next) -> Response {
    let hosts = req.headers().get_all(header::HOST).iter().count();
    let what = if hosts > 1 {
        Some(format!("it has {hosts} Host headers"))
    } else if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        Some(format!(
            "its target names a server ({}) besides the Host header",
            req.uri()
                .authority()
                .map_or_else(|| String::from("a scheme"), |a| a.as_str().to_owned())
        ))
    } else {
        None
    };
    match what {
        Some(what) => ApiError::AmbiguousTarget { what }.into_response(),
        None => next.run(req).await,
    }
}

pub(crate) async fn guard(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if let Some(allowed) = &g.allowed_hosts {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !allowed.iter().any(|a| a.eq_ignore_ascii_case(host)) {
            return ApiError::ForbiddenHost {
                host: host.to_owned(),
            }
            .into_response();
        }
    }
    let read = req.method() == Method::GET || req.method() == Method::HEAD;
    if !read && !g.writes {
        return ApiError::MethodNotAllowed {
            method: req.method().to_string(),
        }
        .into_response();
    }
    // Writes only with the bearer token (a cookie would make them forgeable across
    // sites); reads also with `?token=` (an explicit sign-in: it wins over a cookie
    // left by another token, and replaces it) or the cookie.
    let presented = match (bearer(&req), read) {
        (Some(t), _) => Some((Presented::Bearer, t.to_owned())),
        (None, false) => None,
        (None, true) => query_token(&req)
            .map(|t| (Presented::Query, t.to_owned()))
            .or_else(|| cookie(&req).map(|t| (Presented::Cookie, t.to_owned()))),
    };
    let Some((how, token)) = presented else {
        return signed_out(&req);
    };
    let mut req = req;
    match &g.members {
        None => {
            if !same(&token, g.token.current()) {
                return signed_out(&req);
            }
        }
        Some(store) => {
            let hash = token_hash(&token);
            // The first admin's token (serve.json's) is known without a lookup.
            let found = if same(&token, g.token.current()) {
                Ok(Some(crate::store::MemberRow {
                    name: crate::store::FIRST_ADMIN.to_owned(),
                    admin: true,
                    created_at: String::new(),
                    removed_at: None,
                }))
            } else {
                store.member_by_hash(hash).await
            };
            match found {
                Ok(Some(m)) => {
                    req.extensions_mut().insert(Caller::Member {
                        name: m.name.into(),
                        admin: m.admin,
                        via: match how {
                            Presented::Bearer => "api",
                            Presented::Cookie | Presented::Query => "web",
                        }
                        .to_owned(),
                    });
                }
                Ok(None) => return ApiError::Unauthorized.into_response(),
                Err(e) => return ApiError::from(e).into_response(),
            }
        }
    }
    let mut res = next.run(req).await;
    if how == Presented::Query {
        let secure = if g.tls { "; Secure" } else { "" };
        let value = format!(
            "{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={COOKIE_MAX_AGE_SECS}{secure}"
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

/// The answer to a request without a valid token: the API's JSON 401, but a browser
/// opening a page gets a short page saying how to get in (a sign-in is `berth ui`).
fn signed_out(req: &Request) -> Response {
    let wants_page = !req.uri().path().starts_with("/api/")
        && req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
    if !wants_page {
        return ApiError::Unauthorized.into_response();
    }
    let mut res = (axum::http::StatusCode::UNAUTHORIZED, SIGN_IN_PAGE).into_response();
    let headers = res.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// What a browser without the token sees: no script, nothing from the server's state.
const SIGN_IN_PAGE: &str = "<!doctype html>
<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Berth: sign in</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em}code{background:#eee;padding:.1em .3em}</style>
</head><body>
<h1>Berth's web UI</h1>
<p>This page needs the web UI's token. On the machine where <code>berth serve</code> runs, run</p>
<p><code>berth ui</code></p>
<p>and open the address it prints (<code>berth ui --open</code> opens it for you). Your browser then keeps you signed in for 30 days, until the token is rotated with <code>berth ui --rotate</code>.</p>
</body></html>
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_in_a_file_follows_the_file_and_never_becomes_nothing() {
        let dir = std::env::temp_dir().join(format!("berth-webtoken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("web-token");
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        std::fs::write(&file, format!("{a}\n")).unwrap();
        let t = WebToken::in_file(a.clone(), file.clone());
        assert_eq!(t.current(), a);
        // Replaced (a new inode, as an atomic write makes): the new one at once.
        let next = dir.join("next");
        std::fs::write(&next, format!("{b}\n")).unwrap();
        std::fs::rename(&next, &file).unwrap();
        assert_eq!(t.current(), b);
        // Not a token, or gone: the one in force stays.
        std::fs::write(&next, "").unwrap();
        std::fs::rename(&next, &file).unwrap();
        assert_eq!(t.current(), b);
        std::fs::remove_file(&file).unwrap();
        assert_eq!(t.current(), b);
        assert_eq!(WebToken::from(a.clone()).current(), a);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn loopback_hosts_cover_the_names_a_browser_sends() {
        let hosts = loopback_hosts("127.0.0.1:4733".parse().unwrap());
        assert_eq!(
            hosts,
            vec!["127.0.0.1:4733", "localhost:4733", "[::1]:4733"]
        );
        let hosts = loopback_hosts("192.168.1.5:80".parse().unwrap());
        assert_eq!(hosts, vec!["192.168.1.5:80"]);
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }
}
