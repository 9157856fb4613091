//! The daemon's calls to the server: HTTP/1.1 over TCP, a fresh connection per call,
//! every one carrying the daemon token and the machine id.
//!
//! Failures come in two kinds the loops treat differently: the server could not be
//! reached or the answer was cut off ([`CallError::Unreachable`]: retry later, keep
//! buffering), or it answered with an error ([`CallError::Status`], carrying the
//! contract's `{error: {code, message, hint}}`).

use super::url::ServerUrl;
use berth_web::daemon::wire::{
    self, ClaimRequest, ClaimedTask, EventBatch, EventsReply, FinishReply, FinishRequest,
    Heartbeat, HeartbeatReply, Register, Registered,
};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;
use tokio::net::TcpStream;

/// A request body the daemon sends: buffered JSON, or a body streamed from the CLI.
pub type Body = BoxBody<Bytes, hyper::Error>;

/// The longest a call (other than a claim's wait) may take, answer included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest to wait for a TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How much longer than its wait a claim is given before it counts as lost.
pub const CLAIM_SLACK: Duration = Duration::from_secs(15);

/// A call that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No answer: connection refused or reset, a timeout, a body cut off.
    #[error("{0}")]
    Unreachable(String),
    /// An answer other than 2xx.
    #[error("{status}: {message}")]
    Status {
        status: StatusCode,
        code: Option<String>,
        message: String,
        hint: Option<String>,
    },
    /// A 2xx whose body is not the document the protocol names.
    #[error("the server's answer is not what this berth daemon expects: {0}")]
    Protocol(String),
}

impl CallError {
    /// The stable error code of an error answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            CallError::Status { code, .. } => code.as_deref(),
            CallError::Unreachable(_) | CallError::Protocol(_) => None,
        }
    }

    /// 401: the token is wrong, revoked or another machine's, or the server does not
    /// know this daemon process (it restarted).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, CallError::Status { status, .. } if *status == StatusCode::UNAUTHORIZED)
    }

    fn from_answer(status: StatusCode, bytes: &[u8]) -> CallError {
        let v: serde_json::Value = serde_json::from_slice(bytes).unwrap_or_default();
        let text = |k: &str| v["error"][k].as_str().map(str::to_owned);
        CallError::Status {
            status,
            code: text("code"),
            message: text("message").unwrap_or_else(|| {
                let body = String::from_utf8_lossy(bytes);
                let body: String = body.trim().chars().take(200).collect();
                if body.is_empty() {
                    format!("the server answered {status}")
                } else {
                    body
                }
            }),
            hint: text("hint"),
        }
    }
}

/// One server, as this daemon reaches it.
#[derive(Debug, Clone)]
pub struct Remote {
    url: ServerUrl,
    token: String,
    machine_id: String,
}

/// A JSON body for a request.
pub fn json_body<T: Serialize>(value: &T) -> Body {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Full::new(Bytes::from(bytes))
        .map_err(|never| match never {})
        .boxed()
}

/// Percent-encodes one path segment.
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Remote {
    pub fn new(url: ServerUrl, token: String, machine_id: String) -> Remote {
        Remote {
            url,
            token,
            machine_id,
        }
    }

    pub fn url(&self) -> &ServerUrl {
        &self.url
    }

    pub fn machine_id(&self) -> &str {
        &self.machine_id
    }

    async fn connect(&self) -> Result<SendRequest<Body>, CallError> {
        let (host, port) = self.url.connect_to();
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((host, port)))
            .await
            .map_err(|_| CallError::Unreachable("no connection within 5s".into()))?
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| CallError::Unreachable(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Sends `req` (its URI is a path and query) with the daemon's credentials and
    /// returns the answer once its head arrived; the body streams.
    pub async fn send(&self, mut req: Request<Body>) -> Result<Response<Incoming>, CallError> {
        let headers = req.headers_mut();
        let values = [
            (header::HOST, self.url.authority()),
            (header::AUTHORIZATION, format!("Bearer {}", self.token)),
        ];
        for (name, value) in values {
            let value = header::HeaderValue::from_str(&value)
                .map_err(|e| CallError::Protocol(format!("bad header {name}: {e}")))?;
            headers.insert(name, value);
        }
        let machine = header::HeaderValue::from_str(&self.machine_id)
            .map_err(|e| CallError::Protocol(format!("bad machine id: {e}")))?;
        headers.insert(wire::MACHINE_HEADER, machine);
        let mut sender = self.connect().await?;
        sender
            .send_request(req)
            .await
            .map_err(|e| CallError::Unreachable(e.to_string()))
    }

    /// `POST {PREFIX}{path}` with a JSON body, within `timeout`: the parsed answer,
    /// `None` for 204.
    pub async fn post<T: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<Option<R>, CallError> {
        let call = async {
            let req = Request::builder()
                .method(Method::POST)
                .uri(format!("{}{path}", wire::PREFIX))
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json")
                .body(json_body(body))
                .map_err(|e| CallError::Protocol(e.to_string()))?;
            let resp = self.send(req).await?;
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| CallError::Unreachable(format!("the answer was cut off: {e}")))?
                .to_bytes();
            if status == StatusCode::NO_CONTENT {
                return Ok(None);
            }
            if !status.is_success() {
                return Err(CallError::from_answer(status, &bytes));
            }
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| CallError::Protocol(format!("{path}: {e}")))
        };
        match tokio::time::timeout(timeout, call).await {
            Ok(out) => out,
            Err(_) => Err(CallError::Unreachable(format!(
                "no answer within {}",
                super::backoff::human(timeout)
            ))),
        }
    }

    /// A 2xx answer that must have a body.
    async fn post_doc<T: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<R, CallError> {
        self.post(path, body, CALL_TIMEOUT)
            .await?
            .ok_or_else(|| CallError::Protocol(format!("{path}: an empty answer")))
    }

    pub async fn register(&self, body: &Register) -> Result<Registered, CallError> {
        self.post_doc("/register", body).await
    }

    pub async fn heartbeat(&self, body: &Heartbeat) -> Result<HeartbeatReply, CallError> {
        self.post_doc("/heartbeat", body).await
    }

    /// Says this process stops: the server takes the machine offline at once.
    pub async fn leave(&self, body: &berth_web::daemon::wire::Leave) -> Result<(), CallError> {
        self.post_doc::<_, serde_json::Value>("/leave", body)
            .await
            .map(drop)
    }

    /// A claim held open up to `wait` (plus slack for the answer to travel).
    pub async fn claim(
        &self,
        instance: &str,
        wait: Duration,
    ) -> Result<Option<ClaimedTask>, CallError> {
        let body = ClaimRequest {
            instance: instance.to_owned(),
            wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
        };
        self.post("/claim", &body, wait + CLAIM_SLACK).await
    }

    pub async fn events(&self, task: &str, batch: &EventBatch) -> Result<EventsReply, CallError> {
        self.post_doc(&format!("/tasks/{}/events", encode(task)), batch)
            .await
    }

    pub async fn finish(&self, task: &str, body: &FinishRequest) -> Result<FinishReply, CallError> {
        self.post_doc(&format!("/tasks/{}/finish", encode(task)), body)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_answers_keep_the_contract_fields() {
        let body = br#"{"error":{"code":"task_gone","message":"gone","hint":"h"}}"#;
        assert_eq!(
            CallError::from_answer(StatusCode::CONFLICT, body),
            CallError::Status {
                status: StatusCode::CONFLICT,
                code: Some("task_gone".into()),
                message: "gone".into(),
                hint: Some("h".into()),
            }
        );
        let plain = CallError::from_answer(StatusCode::BAD_GATEWAY, b"upstream down\n");
        assert_eq!(plain.code(), None);
        assert_eq!(plain.to_string(), "502 Bad Gateway: upstream down");
        assert!(CallError::from_answer(StatusCode::UNAUTHORIZED, b"").is_unauthorized());
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }
}
