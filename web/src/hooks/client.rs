//! The one outgoing call the server makes: a JSON `POST` to a chat platform's API, over
//! plain HTTP/1.1 on TCP. No TLS is linked; see [`super::config::http_base`].

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header;
use hyper_util::rt::TokioIo;
use std::time::Duration;

/// How long one call may take, connection included.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// The largest answer read from a platform.
const ANSWER_LIMIT: usize = 1024 * 1024;

/// Why a call to a platform failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Url(String),
    #[error("could not reach {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{url} took longer than {} s", CALL_TIMEOUT.as_secs())]
    Timeout { url: String },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} answered something that is not JSON: {body}")]
    NotJson { url: String, body: String },
}

/// `POST url` with a JSON body (and a bearer token), returning the JSON answer of a
/// 2xx response.
pub async fn post_json(
    url: &str,
    bearer: Option<&str>,
    body: &serde_json::Value,
) -> Result<serde_json::Value, CallError> {
    tokio::time::timeout(CALL_TIMEOUT, call(url, bearer, body))
        .await
        .map_err(|_| CallError::Timeout {
            url: url.to_owned(),
        })?
}

async fn call(
    url: &str,
    bearer: Option<&str>,
    body: &serde_json::Value,
) -> Result<serde_json::Value, CallError> {
    super::config::http_base(url).map_err(CallError::Url)?;
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| CallError::Url(format!("{url} is not a URL: {e}")))?;
    let authority = uri
        .authority()
        .ok_or_else(|| CallError::Url(format!("{url} has no host")))?
        .clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(80);
    let http = |message: String| CallError::Http {
        url: url.to_owned(),
        message,
    };
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|source| CallError::Connect {
            url: url.to_owned(),
            source,
        })?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "platform connection ended");
        }
    });
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut req = hyper::Request::post(path)
        .header(header::HOST, authority.as_str())
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8");
    if let Some(token) = bearer {
        req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| http(e.to_string()))?;
    let res = send
        .send_request(req)
        .await
        .map_err(|e| http(e.to_string()))?;
    let status = res.status();
    let bytes = Limited::new(res.into_body(), ANSWER_LIMIT)
        .collect()
        .await
        .map_err(|e| http(e.to_string()))?
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if !status.is_success() {
        return Err(CallError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body: text,
        });
    }
    serde_json::from_str(&text).map_err(|_| CallError::NotJson {
        url: url.to_owned(),
        body: text,
    })
}
