//! The benchmarks' HTTP/1.1 client, over the control socket or TCP: keep-alive
//! requests with JSON bodies, and Server-Sent Events read as they arrive. Built on
//! the tests' hand-written HTTP ([`berth_test_support::http`]), so the figures hold
//! no client library's own costs.

use anyhow::{Context as _, Result, bail};
use berth_test_support::http::{self as h, Events, Request};
use serde_json::Value;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

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
        let mut req = Request::new(method, path).header("Accept", "application/json");
        if let Some(token) = &self.bearer {
            req = req.bearer(token);
        }
        req = match body {
            Some(b) => req.json(b),
            // A POST always says JSON, as the API expects (its length is 0).
            None if method == "POST" => req.header("Content-Type", "application/json"),
            None => req,
        };
        req.write_to(self.r.get_mut(), &self.host)?;
        let answer = h::read_answer(&mut self.r)
            .with_context(|| format!("{method} {path} on {}", self.host))?;
        Ok((answer.status, answer.body))
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

pub use h::SseEvent;

/// A session's transcript stream, `GET /api/v1/sessions/{id}/events`.
#[derive(Debug)]
pub struct Sse {
    events: Events<BufReader<UnixStream>>,
}

impl Sse {
    /// Opens the stream of events after `after` (0: the whole transcript).
    pub fn open(socket: &Path, session: &str, after: i64, timeout: Duration) -> Result<Sse> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("connect to {}", socket.display()))?;
        s.set_read_timeout(Some(timeout))?;
        let req = Request::get(&format!("/api/v1/sessions/{session}/events?after={after}"));
        let events =
            Events::open(s, "berth", req).with_context(|| format!("SSE for session {session}"))?;
        Ok(Sse { events })
    }

    /// The next event; `None` when the server ends the stream. Keep-alive comments are
    /// skipped.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>> {
        Ok(self.events.next_event()?)
    }

    /// Reads until the `task` event of `task_id` and returns its final task document.
    pub fn until_task(&mut self, task_id: &str) -> Result<Value> {
        while let Some(ev) = self.next_event()? {
            if ev.event != "task" {
                continue;
            }
            let doc = ev.json();
            if doc["task_id"].as_str() == Some(task_id) {
                return Ok(doc["payload"]["task"].clone());
            }
        }
        bail!("the event stream ended before task {task_id} finished")
    }
}
