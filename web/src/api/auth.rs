//! The guard in front of the web listener and `berth-server`'s listener.

use super::error::ApiError;
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

/// Compares without an early exit, so timing does not reveal a prefix of the token.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
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
    if bearer(&req).is_some_and(|t| same(t, &g.token)) {
        return next.run(req).await;
    }
    if !read {
        return ApiError::Unauthorized.into_response();
    }
    if cookie(&req).is_some_and(|t| same(t, &g.token)) {
        return next.run(req).await;
    }
    if query_token(&req).is_some_and(|t| same(t, &g.token)) {
        let mut res = next.run(req).await;
        let secure = if g.tls { "; Secure" } else { "" };
        let value = format!(
            "{TOKEN_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/{secure}",
            g.token
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            res.headers_mut().append(header::SET_COOKIE, v);
        }
        return res;
    }
    ApiError::Unauthorized.into_response()
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
