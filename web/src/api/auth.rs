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
use std::sync::Arc;

/// The cookie that carries the token after `?token=` was presented once.
pub const TOKEN_COOKIE: &str = "berth_token";

#[derive(Debug)]
pub(crate) struct Guard {
    pub token: String,
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
        return ApiError::Unauthorized.into_response();
    };
    let mut req = req;
    match &g.members {
        None => {
            if !same(&token, &g.token) {
                return ApiError::Unauthorized.into_response();
            }
        }
        Some(store) => {
            let hash = token_hash(&token);
            // The first admin's token (serve.json's) is known without a lookup.
            let found = if same(&token, &g.token) {
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
                        name: m.name,
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
        let value = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/{secure}");
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

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
