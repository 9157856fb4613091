//! One HTTP client for every outgoing call: the daemon's link to its server, and the
//! answers posted to Slack and Lark.
//!
//! hyper-util's pooled client over hyper-rustls: connections are kept alive and reused
//! (per scheme, host and port), `https://` is verified against the system's roots plus
//! an optional private CA ([`super::tls`]), `http://` goes over plain TCP. Each call
//! has a timeout chosen by its caller; a request that never left (no connection could
//! be made) is tried again with backoff by [`HttpClient::send_retrying`]. A TLS failure
//! is never retried: it is a [`SendError::Tls`], with the problem in one line.

use super::tls::{self, TlsError};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A request body: buffered bytes, or a body streamed from elsewhere.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// A buffered body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// How the client connects.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// A private CA (PEM) trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The longest wait for a TCP connection.
    pub connect_timeout: Duration,
    /// How long an idle connection is kept for reuse; zero keeps none (a connection
    /// per call, for comparison in benchmarks).
    pub idle: Duration,
}

impl Default for ClientOptions {
    fn default() -> ClientOptions {
        ClientOptions {
            ca_file: None,
            connect_timeout: Duration::from_secs(5),
            idle: Duration::from_secs(60),
        }
    }
}

impl ClientOptions {
    /// The defaults, with the CA from `BERTH_CA_FILE`, else `settings_ca` (the user
    /// settings' `ca_file`).
    pub fn from_env(settings_ca: Option<&Path>) -> ClientOptions {
        let env = std::env::var_os(tls::CA_FILE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        ClientOptions {
            ca_file: env.or_else(|| settings_ca.map(Path::to_owned)),
            ..ClientOptions::default()
        }
    }
}

/// The pooled client. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct HttpClient {
    inner: Client<HttpsConnector<HttpConnector>, Body>,
    ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("ca_file", &self.ca_file)
            .finish_non_exhaustive()
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The TLS handshake failed: most often a certificate that is not trusted.
    #[error("{url}: {problem}")]
    Tls { url: String, problem: String },
    /// No connection could be made (refused, unreachable, no such host, timeout).
    #[error("could not connect to {url}: {message}")]
    Connect { url: String, message: String },
    /// The connection broke before the answer's head arrived.
    #[error("{url}: the connection failed: {message}")]
    Io { url: String, message: String },
    /// The request cannot be made (a bad URL or header).
    #[error("{0}")]
    Request(String),
}

impl SendError {
    /// Whether the request certainly never reached the server, so sending it again
    /// cannot do anything twice.
    pub fn never_sent(&self) -> bool {
        matches!(self, SendError::Connect { .. })
    }

    /// What the user can do about a TLS failure.
    pub fn tls_hint(&self) -> Option<&'static str> {
        match self {
            SendError::Tls { .. } => Some(
                "if the server uses a private CA, pass it with --ca-file FILE or set BERTH_CA_FILE (PEM); check the URL's host name is the one in the certificate",
            ),
            SendError::Connect { .. } | SendError::Io { .. } | SendError::Request(_) => None,
        }
    }
}

impl HttpClient {
    pub fn new(opts: &ClientOptions) -> Result<HttpClient, TlsError> {
        let config = tls::client_config(opts.ca_file.as_deref())?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(opts.connect_timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let mut builder = Client::builder(TokioExecutor::new());
        if opts.idle.is_zero() {
            builder.pool_max_idle_per_host(0);
        } else {
            builder.pool_idle_timeout(opts.idle);
        }
        Ok(HttpClient {
            inner: builder.build(https),
            ca_file: opts.ca_file.clone(),
        })
    }

    /// The private CA this client trusts besides the system's roots.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Sends `req` (its URI absolute: `https://host:port/path`) once and returns the
    /// answer once its head arrived; the body streams.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, SendError> {
        let url = shown(req.uri());
        self.inner
            .request(req)
            .await
            .map_err(|e| classify(&url, &e))
    }

    /// Sends the request `make` builds, again (up to `attempts` in all, with backoff
    /// from 100 ms doubling) while no connection can be made. A request that went out
    /// is never sent twice.
    pub async fn send_retrying(
        &self,
        make: impl Fn() -> Result<Request<Body>, SendError>,
        attempts: u32,
    ) -> Result<Response<Incoming>, SendError> {
        let mut wait =
            crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            match self.send(make()?).await {
                Err(e) if e.never_sent() && wait.attempts() + 1 < attempts.max(1) => {
                    tokio::time::sleep(wait.next_delay()).await;
                }
                other => return other,
            }
        }
    }

    /// `POST url` with a JSON body (and a bearer token), within `timeout`: the JSON
    /// answer of a 2xx response. Used for the chat platforms' APIs.
    pub async fn post_json(
        &self,
        url: &str,
        bearer: Option<&str>,
        body: &serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError> {
        self.json_call(hyper::Method::POST, url, bearer, body, timeout)
            .await
    }

    /// [`HttpClient::post_json`] with another method (Lark updates a message with
    /// `PATCH`).
    pub async fn json_call(
        &self,
        method: hyper::Method,
        url: &str,
        bearer: Option<&str>,
        body: &serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, CallError> {
        let call = async {
            let make = || {
                let mut req = Request::builder()
                    .method(method.clone())
                    .uri(url)
                    .header(header::CONTENT_TYPE, "application/json; charset=utf-8");
                if let Some(token) = bearer {
                    req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
                }
                req.body(full(body.to_string()))
                    .map_err(|e| SendError::Request(format!("{url} is not usable: {e}")))
            };
            let res = self.send_retrying(make, 3).await?;
            let status = res.status();
            let bytes = Limited::new(res.into_body(), ANSWER_LIMIT)
                .collect()
                .await
                .map_err(|e| {
                    CallError::Send(SendError::Io {
                        url: url.to_owned(),
                        message: format!("the answer was cut off: {e}"),
                    })
                })?
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
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| CallError::Timeout {
                url: url.to_owned(),
                secs: timeout.as_secs(),
            })?
    }
}

/// The largest JSON answer read from a platform.
const ANSWER_LIMIT: usize = 1024 * 1024;

/// Why a JSON call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Send(#[from] SendError),
    #[error("{url} took longer than {secs} s")]
    Timeout { url: String, secs: u64 },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} answered something that is not JSON: {body}")]
    NotJson { url: String, body: String },
}

/// The URL as messages show it: scheme, host and port (never a query's secrets).
fn shown(uri: &hyper::Uri) -> String {
    match (uri.scheme_str(), uri.authority()) {
        (Some(s), Some(a)) => format!("{s}://{a}"),
        _ => uri.to_string(),
    }
}

fn classify(url: &str, e: &hyper_util::client::legacy::Error) -> SendError {
    if let Some(problem) = tls::tls_problem(e) {
        return SendError::Tls {
            url: url.to_owned(),
            problem,
        };
    }
    let message = chain(e);
    if e.is_connect() {
        SendError::Connect {
            url: url.to_owned(),
            message,
        }
    } else {
        SendError::Io {
            url: url.to_owned(),
            message,
        }
    }
}

/// An error and its causes, as one line (hyper's own message is only the outermost).
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}
