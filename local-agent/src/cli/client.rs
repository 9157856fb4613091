//! The CLI's way in: HTTP/1.1 over the control socket `$BERTH_HOME/berth.sock`.
//!
//! Trust on that socket equals the user's own shell (it is 0600), so no token is
//! sent. Every error the server returns keeps its stable code, message and hint.

use super::error::CliError;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::path::{Path, PathBuf};
use tokio::net::UnixStream;

/// A connection factory for one Berth home's control socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
    home: PathBuf,
}

impl Client {
    pub fn new(home: &Path) -> Client {
        Client {
            socket: home.join(berth_core::SOCKET_FILE),
            home: home.to_owned(),
        }
    }

    /// The id of the machine this home runs on, as bindings name it: `local` for
    /// `berth serve`'s executor (it writes `serve.json`), else a daemon's machine id
    /// (its `machine-id` file).
    /// The Berth home this client talks to.
    pub fn home(&self) -> &Path {
        &self.home
    }

    pub fn machine(&self) -> String {
        const LOCAL: &str = "local";
        if self.home.join(berth_web::server::SERVE_JSON).exists() {
            return LOCAL.to_owned();
        }
        std::fs::read_to_string(
            self.home
                .join(berth_local_agent::daemon::machine::MACHINE_ID_FILE),
        )
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| LOCAL.to_owned())
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, CliError> {
        let stream = UnixStream::connect(&self.socket)
            .await
            .map_err(|e| CliError::unreachable(&self.home, &self.socket, &e))?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(|e| {
            CliError::new(
                format!("the control socket did not answer: {e}"),
                "restart `berth serve`",
            )
        })?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
    ) -> Result<hyper::Response<Incoming>, CliError> {
        let mut sender = self.connect().await?;
        let bytes = match body {
            Some(v) => Bytes::from(v.to_string()),
            None => Bytes::new(),
        };
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", berth_core::SOCKET_FILE)
            .header("accept", "application/json");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let req = req.body(Full::new(bytes)).map_err(|e| {
            CliError::new(
                format!("cannot build the request: {e}"),
                "report this as a bug",
            )
        })?;
        sender.send_request(req).await.map_err(|e| {
            CliError::new(
                format!("the request to berth failed: {e}"),
                "check `berth serve`'s output",
            )
        })
    }

    /// Sends a request and returns the JSON body of a 2xx answer; anything else
    /// becomes a [`CliError`] carrying the server's code, message and hint.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let resp = self.send(method, path, body, &[]).await?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| CliError::new(format!("reading berth's answer failed: {e}"), "try again"))?
            .to_bytes();
        CliError::answer(status, &bytes)
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, CliError> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// Opens a session's event stream (SSE), resuming after `after` when given.
    pub async fn events(&self, session: &str, after: Option<i64>) -> Result<EventStream, CliError> {
        let headers: Vec<(&str, String)> = match after {
            Some(n) => vec![
                ("last-event-id", n.to_string()),
                ("accept", "text/event-stream".into()),
            ],
            None => vec![("accept", "text/event-stream".into())],
        };
        let path = format!("/api/v1/sessions/{}/events", encode(session));
        self.stream(Method::GET, &path, None, &headers).await
    }

    /// A request answered by an event stream (200), or the server's error.
    pub(super) async fn stream(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, String)],
    ) -> Result<EventStream, CliError> {
        let resp = self.send(method, path, body, headers).await?;
        if resp.status() != StatusCode::OK {
            let status = resp.status();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(CliError::from_body(status, &value));
        }
        Ok(EventStream {
            body: resp.into_body(),
            buf: Vec::new(),
        })
    }
}

/// Percent-encodes one path segment (ids are plain, but a prefix is user input).
pub use berth_local_agent::daemon::remote::encode;

pub use berth_local_agent::front::wire::SseEvent;
use berth_local_agent::front::wire::{find_blank_line, parse_block};

/// A live SSE body, parsed event by event.
#[derive(Debug)]
pub struct EventStream {
    body: Incoming,
    buf: Vec<u8>,
}

impl EventStream {
    /// The next event, or `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, CliError> {
        loop {
            if let Some(end) = find_blank_line(&self.buf) {
                let block: Vec<u8> = self.buf.drain(..end.0).collect();
                self.buf.drain(..end.1 - end.0);
                if let Some(ev) = parse_block(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(ev));
                }
                continue;
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(CliError::new(
                        format!("the event stream broke: {e}"),
                        "the task goes on; follow it with `berth task list`",
                    ));
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(encode("ab/c d"), "ab%2Fc%20d");
    }
}
