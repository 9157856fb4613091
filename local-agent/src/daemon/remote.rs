//! The daemon's calls to the server, every one carrying the daemon token and the
//! machine id, through the one pooled client ([`berth_web::net::HttpClient`]): kept-alive
//! connections, TLS for `https://`, a call that could not connect tried again.
//!
//! Failures come in two kinds the loops treat differently: the server could not be
//! reached or the answer was cut off ([`CallError::Unreachable`]: retry later, keep
//! buffering), or it answered with an error ([`CallError::Status`], carrying the
//! contract's `{error: {code, message, hint}}`).

use super::url::ServerUrl;
use berth_core::api::ErrorBody;
use berth_core::{ErrorCode, MachineId, TaskId};
use berth_web::daemon::wire::{
    self, ClaimRequest, ClaimedTask, EventBatch, EventsReply, FinishReply, FinishRequest,
    Heartbeat, HeartbeatReply, Register, Registered,
};
use berth_web::net::{HttpClient, SendError};
use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode, header};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// A request body the daemon sends: buffered JSON, or a body streamed from the CLI.
pub type Body = berth_web::net::Body;

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
        /// The answer's code, when this build knows it (an unknown one is kept at the
        /// end of `message`, see [`ErrorCode::decode`]).
        code: Option<ErrorCode>,
        message: String,
        hint: Option<String>,
    },
    /// A 2xx whose body is not the document the protocol names.
    #[error("the server's answer is not what this berth daemon expects: {0}")]
    Protocol(String),
    /// TLS failed (most often a certificate that is not trusted): retrying cannot help.
    #[error("{0}")]
    Tls(String),
}

impl From<SendError> for CallError {
    fn from(e: SendError) -> CallError {
        match e {
            SendError::Tls { problem, .. } => CallError::Tls(problem),
            SendError::Request(m) => CallError::Protocol(m),
            SendError::Connect { message, .. } | SendError::Io { message, .. } => {
                CallError::Unreachable(message)
            }
        }
    }
}

impl CallError {
    /// The stable error code of an error answer.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            CallError::Status { code, .. } => *code,
            CallError::Unreachable(_) | CallError::Protocol(_) | CallError::Tls(_) => None,
        }
    }

    /// 401: the token is wrong, revoked or another machine's, or the server does not
    /// know this daemon process (it restarted).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, CallError::Status { status, .. } if *status == StatusCode::UNAUTHORIZED)
    }

    fn from_answer(status: StatusCode, bytes: &[u8]) -> CallError {
        match ErrorBody::parse(bytes) {
            Some(body) => {
                let (code, message, hint) = body.error.decoded();
                CallError::Status {
                    status,
                    code,
                    message,
                    hint: Some(hint),
                }
            }
            None => {
                let body = String::from_utf8_lossy(bytes);
                let body: String = body.trim().chars().take(200).collect();
                CallError::Status {
                    status,
                    code: None,
                    message: if body.is_empty() {
                        format!("the server answered {status}")
                    } else {
                        body
                    },
                    hint: None,
                }
            }
        }
    }
}

/// One server, as this daemon reaches it.
#[derive(Debug, Clone)]
pub struct Remote {
    url: ServerUrl,
    token: String,
    machine_id: MachineId,
    http: HttpClient,
}

/// A JSON body for a request.
pub fn json_body<T: Serialize>(value: &T) -> Body {
    berth_web::net::client::full(serde_json::to_vec(value).unwrap_or_default())
}

pub use berth_web::net::encode;

impl Remote {
    pub fn new(url: ServerUrl, token: String, machine_id: MachineId, http: HttpClient) -> Remote {
        Remote {
            url,
            token,
            machine_id,
            http,
        }
    }

    pub fn url(&self) -> &ServerUrl {
        &self.url
    }

    pub fn machine_id(&self) -> &MachineId {
        &self.machine_id
    }

    /// `req` (its URI a path and query) aimed at the server, with the daemon's
    /// credentials.
    fn aimed(&self, mut req: Request<Body>) -> Result<Request<Body>, CallError> {
        let path = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        *req.uri_mut() = format!("{}{path}", self.url)
            .parse()
            .map_err(|e| CallError::Protocol(format!("bad request path {path}: {e}")))?;
        let headers = req.headers_mut();
        let bearer = header::HeaderValue::from_str(&format!("Bearer {}", self.token))
            .map_err(|e| CallError::Protocol(format!("bad token: {e}")))?;
        headers.insert(header::AUTHORIZATION, bearer);
        let machine = header::HeaderValue::from_str(self.machine_id.as_str())
            .map_err(|e| CallError::Protocol(format!("bad machine id: {e}")))?;
        headers.insert(wire::MACHINE_HEADER, machine);
        Ok(req)
    }

    /// Sends `req` (its URI is a path and query) with the daemon's credentials and
    /// returns the answer once its head arrived; the body streams. Sent once: its body
    /// may be a stream.
    pub async fn send(&self, req: Request<Body>) -> Result<Response<Incoming>, CallError> {
        let req = self.aimed(req)?;
        Ok(self.http.send(req).await?)
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
            let bytes = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
            let make = || {
                let req = Request::builder()
                    .method(Method::POST)
                    .uri(format!("{}{path}", wire::PREFIX))
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::ACCEPT, "application/json")
                    .body(berth_web::net::client::full(bytes.clone()))
                    .map_err(|e| SendError::Request(e.to_string()))?;
                self.aimed(req)
                    .map_err(|e| SendError::Request(e.to_string()))
            };
            // A call that could not connect is tried twice more before the loops'
            // own backoff takes over; one that went out is never sent twice.
            let resp = self.http.send_retrying(make, 3).await?;
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
        seq: Option<u64>,
    ) -> Result<Option<ClaimedTask>, CallError> {
        let body = ClaimRequest {
            instance: instance.to_owned(),
            wait_ms: Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
            seq,
        };
        self.post("/claim", &body, wait + CLAIM_SLACK).await
    }

    pub async fn events(
        &self,
        task: &TaskId,
        batch: &EventBatch,
    ) -> Result<EventsReply, CallError> {
        self.post_doc(&format!("/tasks/{}/events", encode(task.as_str())), batch)
            .await
    }

    pub async fn finish(
        &self,
        task: &TaskId,
        body: &FinishRequest,
    ) -> Result<FinishReply, CallError> {
        self.post_doc(&format!("/tasks/{}/finish", encode(task.as_str())), body)
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
                code: Some(ErrorCode::TaskGone),
                message: "gone".into(),
                hint: Some("h".into()),
            }
        );
        let newer = br#"{"error":{"code":"from_a_newer_server","message":"no","hint":"h"}}"#;
        let e = CallError::from_answer(StatusCode::CONFLICT, newer);
        assert_eq!(e.code(), None);
        assert_eq!(e.to_string(), "409 Conflict: no [from_a_newer_server]");
        let plain = CallError::from_answer(StatusCode::BAD_GATEWAY, b"upstream down\n");
        assert_eq!(plain.code(), None);
        assert_eq!(plain.to_string(), "502 Bad Gateway: upstream down");
        assert!(CallError::from_answer(StatusCode::UNAUTHORIZED, b"").is_unauthorized());
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
    }
}
