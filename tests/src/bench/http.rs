//! A minimal HTTP/1.1 client over the control socket, for measuring the API without
//! a client library's own costs in the figures: keep-alive requests with JSON bodies,
//! and Server-Sent Events read as they arrive.
//!
//! It speaks only what `berth serve` answers: `Content-Length` or chunked bodies, no
//! redirects, no compression.

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How a response's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Length(usize),
    Chunked,
}

/// A status line and the headers that matter here.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) framing: Framing,
}

/// Reads a response's status line and headers (also over TCP: `postgres.rs`).
pub(super) fn read_head(r: &mut impl BufRead) -> Result<Head> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        bail!("the server closed the connection");
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("not an HTTP status line: {line:?}"))?;
    let mut framing = Framing::Length(0);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("the server closed the connection inside the headers");
        }
        let l = line.trim_end();
        if l.is_empty() {
            return Ok(Head { status, framing });
        }
        let Some((name, value)) = l.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            framing = Framing::Length(value.parse().context("content-length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.eq_ignore_ascii_case("chunked")
        {
            framing = Framing::Chunked;
        }
    }
}

/// A chunked body as a plain byte stream; reads return 0 after the last chunk.
#[derive(Debug)]
pub(super) struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    pub(super) fn new(inner: R) -> Chunked<R> {
        Chunked {
            inner,
            left: 0,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = String::new();
            self.inner.read_line(&mut size)?;
            let hex = size.trim().split(';').next().unwrap_or("");
            self.left = usize::from_str_radix(hex, 16).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("bad chunk size line {size:?}"),
                )
            })?;
            if self.left == 0 {
                // The last chunk, then trailers (none here) and an empty line.
                let mut end = String::new();
                self.inner.read_line(&mut end)?;
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

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
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        if let Some(token) = &self.bearer {
            req.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        self.r.get_mut().write_all(req.as_bytes())?;
        let head = read_head(&mut self.r)?;
        let mut out = Vec::new();
        match head.framing {
            Framing::Length(n) => {
                out.resize(n, 0);
                self.r.read_exact(&mut out)?;
            }
            Framing::Chunked => {
                Chunked::new(&mut self.r).read_to_end(&mut out)?;
            }
        }
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
    r: BufReader<Chunked<BufReader<UnixStream>>>,
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
            r: BufReader::with_capacity(64 * 1024, Chunked::new(r)),
        })
    }

    /// The next event; `None` when the server ends the stream. Keep-alive comments are
    /// skipped.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>> {
        let mut ev = SseEvent::default();
        let mut any = false;
        let mut line = String::new();
        loop {
            line.clear();
            if self.r.read_line(&mut line)? == 0 {
                return Ok(None);
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                if any {
                    return Ok(Some(ev));
                }
                continue;
            }
            let (field, value) = l.split_once(':').unwrap_or((l, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => ev.id = value.parse().ok(),
                "event" => ev.event = value.to_owned(),
                "data" => {
                    if !ev.data.is_empty() {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(value);
                }
                _ => continue,
            }
            any = true;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode_across_chunks() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";
        let mut out = String::new();
        Chunked::new(&wire[..]).read_to_string(&mut out).unwrap();
        assert_eq!(out, "hello, world");
    }

    #[test]
    fn heads_give_status_and_framing() {
        let mut r = &b"HTTP/1.1 202 Accepted\r\ncontent-length: 12\r\nx: y\r\n\r\n"[..];
        let head = read_head(&mut r).unwrap();
        assert_eq!(
            (head.status, head.framing),
            (202, Framing::Length(12)),
            "status and framing"
        );
    }
}
