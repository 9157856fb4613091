//! A minimal HTTP/1.1 client over the control socket, for measuring the API without
//! a client library's own costs in the figures: keep-alive requests with JSON bodies,
//! and Server-Sent Events read as they arrive. The wire format is the lean `berth`
//! client's ([`berth_local_agent::front::wire`]).

use anyhow::{Context as _, Result, bail};
use berth_local_agent::front::wire;
pub(super) use berth_local_agent::front::wire::{Chunked, Events, Framing, read_head};
use serde_json::Value;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The largest answer a benchmark reads (a list of 10,000 sessions is about 2 MB).
const MAX_ANSWER: u64 = 1 << 30;

/// One keep-alive connection: to the control socket, or over TCP with a bearer
/// token (`berth-server`, see `postgres.rs`).
#[derive(Debug)]
pub struct Conn<S = UnixStream> {
    r: BufReader<S>,
    /// The `Host` header, and where errors say the request went.
    host: String,
    bearer: Option<String>,
}

impl Conn {
    pub fn connect(socket: &Path) -> Result<Conn> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("connect to {}", socket.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            r: BufReader::with_capacity(64 * 1024, s),
            host: "berth".to_owned(),
            bearer: None,
        })
    }
}

impl Conn<std::net::TcpStream> {
    /// A connection to `addr` (`host:port`) whose requests carry `bearer`.
    pub fn tcp(addr: &str, bearer: &str) -> Result<Self> {
        let s = std::net::TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            r: BufReader::with_capacity(64 * 1024, s),
            host: addr.to_owned(),
            bearer: Some(bearer.to_owned()),
        })
    }
}

impl<S: Read + Write> Conn<S> {
    /// Sends one request and reads the whole answer: (status, body).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>)> {
        let body = body.map(Value::to_string);
        let auth = self.bearer.as_ref().map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        // A POST always carries a body (`{}` at least), as the API expects JSON.
        let body = match (body, method) {
            (None, "POST") => Some(String::new()),
            (b, _) => b,
        };
        wire::Request {
            method,
            path,
            host: &self.host,
            accept: "application/json",
            body: body.as_deref().map(str::as_bytes),
            headers: &headers,
        }
        .write_to(self.r.get_mut())?;
        let head = read_head(&mut self.r)?;
        let out = wire::read_body(&mut self.r, head.framing, MAX_ANSWER)?;
        Ok((head.status, out))
    }

    /// A request whose answer must be a 2xx JSON document.
    pub fn json(&mut self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let (status, bytes) = self.request(method, path, body)?;
        if !(200..300).contains(&status) {
            bail!(
                "{method} {path} on {}: HTTP {status}: {}",
                self.host,
                String::from_utf8_lossy(&bytes)
            );
        }
        serde_json::from_slice(&bytes).with_context(|| format!("{method} {path}: not JSON"))
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub id: Option<i64>,
    pub event: String,
    pub data: String,
}

impl SseEvent {
    /// The event's JSON document (`{seq, task_id, kind, at, payload}`).
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.data).context("SSE data is not JSON")
    }
}

/// A session's transcript stream, `GET /api/v1/sessions/{id}/events`.
#[derive(Debug)]
pub struct Sse {
    events: Events<BufReader<Chunked<BufReader<UnixStream>>>>,
}

impl Sse {
    /// Opens the stream of events after `after` (0: the whole transcript).
    pub fn open(socket: &Path, session: &str, after: i64, timeout: Duration) -> Result<Sse> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("connect to {}", socket.display()))?;
        s.set_read_timeout(Some(timeout))?;
        let mut r = BufReader::with_capacity(64 * 1024, s);
        write!(
            r.get_mut(),
            "GET /api/v1/sessions/{session}/events?after={after} HTTP/1.1\r\nHost: berth\r\nAccept: text/event-stream\r\n\r\n"
        )?;
        let head = read_head(&mut r)?;
        if head.status != 200 || head.framing != Framing::Chunked {
            bail!(
                "SSE for session {session}: HTTP {} ({:?})",
                head.status,
                head.framing
            );
        }
        Ok(Sse {
            events: Events::new(BufReader::with_capacity(64 * 1024, Chunked::new(r))),
        })
    }

    /// The next event; `None` when the server ends the stream. Keep-alive comments are
    /// skipped.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>> {
        Ok(self.events.next_event()?.map(|ev| SseEvent {
            id: ev.id.and_then(|id| id.parse().ok()),
            event: ev.event,
            data: ev.data,
        }))
    }

    /// Reads until the `task` event of `task_id` and returns its final task document.
    pub fn until_task(&mut self, task_id: &str) -> Result<Value> {
        while let Some(ev) = self.next_event()? {
            if ev.event != "task" {
                continue;
            }
            let doc = ev.json()?;
            if doc["task_id"].as_str() == Some(task_id) {
                return Ok(doc["payload"]["task"].clone());
            }
        }
        bail!("the event stream ended before task {task_id} finished")
    }
}
