//! HTTP/1.1 as the tests speak it: one request written by hand on any stream (the
//! control socket, TCP, TLS), its answer read whole whatever its framing, and
//! Server-Sent Events read one at a time as they arrive.
//!
//! Hand-written on purpose. A test sees exactly what the server sent, a malformed
//! answer included, and a benchmark measures the server rather than a client library.
//! [`Request`] builds the bytes; [`read_answer`] reads an answer (`Content-Length`,
//! chunked, or until the server closes); [`Events`] reads an event stream.
//!
//! With the `tokio` feature, [`tokio`](mod@crate::http::tokio) has the same for async
//! tests, on hyper's client.

use serde_json::Value;
use std::io::{self, BufRead, BufReader, Read, Write};

#[cfg(feature = "tokio")]
pub mod tokio;

/// A request's bytes: the method and path, then headers, then an optional body.
/// `Content-Length` is written for every body, and for a bodiless `POST` (0).
#[derive(Debug, Clone)]
pub struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

impl Request {
    pub fn new(method: &str, path: &str) -> Request {
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub fn get(path: &str) -> Request {
        Request::new("GET", path)
    }

    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// `Authorization: Bearer TOKEN`.
    pub fn bearer(self, token: &str) -> Request {
        self.header("Authorization", &format!("Bearer {token}"))
    }

    /// `Connection: close`: the server ends the connection after its answer.
    pub fn close(self) -> Request {
        self.header("Connection", "close")
    }

    /// A JSON body (with its `Content-Type`).
    pub fn json(self, body: &Value) -> Request {
        self.header("Content-Type", "application/json")
            .body(body.to_string().into_bytes())
    }

    /// A body as it is; the caller names its type, if any.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Request {
        self.body = Some(body.into());
        self
    }

    /// The request's bytes on `w`; `host` is the `Host` header's value.
    pub fn write_to(&self, w: &mut impl Write, host: &str) -> io::Result<()> {
        let mut head = format!("{} {} HTTP/1.1\r\nHost: {host}\r\n", self.method, self.path);
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        match &self.body {
            Some(b) => head.push_str(&format!("Content-Length: {}\r\n", b.len())),
            None if self.method == "POST" => head.push_str("Content-Length: 0\r\n"),
            None => {}
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        let body = self.body.as_deref().unwrap_or_default();
        // One write for a request of common size (a benchmark counts system calls).
        if body.len() <= 64 * 1024 {
            out.extend_from_slice(body);
            w.write_all(&out)?;
            return w.flush();
        }
        w.write_all(&out)?;
        // A server may answer (413) before it reads all of a large body: the answer
        // is what the test wants, so a write it refused is not an error here.
        if let Err(e) = w.write_all(body)
            && e.kind() != io::ErrorKind::BrokenPipe
            && e.kind() != io::ErrorKind::ConnectionReset
        {
            return Err(e);
        }
        w.flush()
    }
}

/// An answer read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Names lowercased, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; `null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How an answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
    /// Until the server closes the connection.
    Close,
}

/// An answer's status line and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub framing: Framing,
}

/// Reads a status line and headers. A stream that ends (or times out) before the
/// blank line is an error that quotes what came.
pub fn read_head(r: &mut impl BufRead) -> io::Result<Head> {
    let mut raw = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        let n = r.read_line(&mut line)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the answer ended in its head: {raw:?}"),
            ));
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        raw.push_str(&line);
    }
    let mut lines = raw.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("no status in {raw:?}"))
        })?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let value = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let framing = if value("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        Framing::Chunked
    } else if let Some(n) = value("content-length").and_then(|v| v.parse().ok()) {
        Framing::Length(n)
    } else if matches!(status, 204 | 304) || (100..200).contains(&status) {
        Framing::Length(0)
    } else {
        Framing::Close
    };
    Ok(Head {
        status,
        headers,
        framing,
    })
}

/// Reads one answer whole. A body read until the server closes (or, for a stream,
/// until a read times out) keeps what came.
pub fn read_answer(r: &mut impl BufRead) -> io::Result<Answer> {
    let head = read_head(r)?;
    let mut body = Vec::new();
    match head.framing {
        Framing::Length(n) => {
            r.take(n).read_to_end(&mut body)?;
        }
        Framing::Chunked => {
            until_quiet(Dechunk::new(r).read_to_end(&mut body))?;
        }
        Framing::Close => {
            until_quiet(r.read_to_end(&mut body))?;
        }
    }
    Ok(Answer {
        status: head.status,
        headers: head.headers,
        body,
    })
}

/// A read that ended because the stream went quiet past its timeout ended well.
fn until_quiet(read: io::Result<usize>) -> io::Result<()> {
    match read {
        Err(e) if !is_quiet(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Sends `req` on a fresh stream and reads the answer whole: one exchange per
/// connection, as `Connection: close` clients make them.
pub fn exchange<S: Read + Write>(stream: S, host: &str, req: &Request) -> io::Result<Answer> {
    let mut r = BufReader::new(stream);
    req.write_to(r.get_mut(), host)?;
    read_answer(&mut r)
}

/// Everything `r` sends until it closes, fails, or goes quiet past its read timeout,
/// for at most `limit`: an answer whose connection stays open (an event stream) as
/// far as it has come.
pub fn read_all(r: &mut impl Read, limit: std::time::Duration) -> Vec<u8> {
    let deadline = std::time::Instant::now() + limit;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    while std::time::Instant::now() < deadline {
        match r.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    raw
}

/// An answer's status (0 when it has none) and body as text, from its bytes as they
/// came: a chunked body is joined, and one cut short keeps what came.
pub fn status_and_body(raw: &[u8]) -> (u16, String) {
    let mut r = raw;
    let Ok(head) = read_head(&mut r) else {
        return (0, String::new());
    };
    let mut body = Vec::new();
    let _ = match head.framing {
        Framing::Chunked => Dechunk::new(r).read_to_end(&mut body),
        Framing::Length(n) => r.take(n).read_to_end(&mut body),
        Framing::Close => r.read_to_end(&mut body),
    };
    (head.status, String::from_utf8_lossy(&body).into_owned())
}

/// A chunked body's data, chunk after chunk, until the last (empty) chunk.
#[derive(Debug)]
pub struct Dechunk<R> {
    inner: R,
    left: u64,
    done: bool,
}

impl<R: BufRead> Dechunk<R> {
    pub fn new(inner: R) -> Dechunk<R> {
        Dechunk {
            inner,
            left: 0,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Dechunk<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            if self.inner.read_line(&mut line)? == 0 {
                self.done = true;
                return Ok(0);
            }
            let size = line.trim().split(';').next().unwrap_or("");
            self.left = u64::from_str_radix(size, 16).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, format!("chunk size {line:?}"))
            })?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = String::new();
            self.inner.read_line(&mut crlf)?;
        }
        Ok(n)
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `id:` field, when the event has one.
    pub id: Option<String>,
    /// The `event:` field (`message` when absent is the browser's reading; here
    /// it stays empty).
    pub event: String,
    /// The `data:` lines, joined with newlines.
    pub data: String,
}

impl SseEvent {
    /// The event's id as a number (Berth numbers a transcript's events).
    pub fn seq(&self) -> Option<i64> {
        self.id.as_deref().and_then(|id| id.trim().parse().ok())
    }

    /// The event's data as JSON; `null` when it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Gathers an event stream's lines into events: a blank line ends an event;
/// comments (keep-alives) and events with no field are skipped.
#[derive(Debug, Default)]
pub struct SseParser {
    at: SseEvent,
    any: bool,
}

impl SseParser {
    /// One line (without its line ending); an event when the line ends one.
    pub fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let any = std::mem::take(&mut self.any);
            let ev = std::mem::take(&mut self.at);
            return any.then_some(ev);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => self.at.id = Some(value.to_owned()),
            "event" => self.at.event = value.to_owned(),
            "data" => {
                if !self.at.data.is_empty() {
                    self.at.data.push('\n');
                }
                self.at.data.push_str(value);
            }
            _ => return None,
        }
        self.any = true;
        None
    }

    /// Every event that ends in `text` (whole lines); a trailing partial event waits
    /// for more.
    pub fn feed(&mut self, text: &str) -> Vec<SseEvent> {
        text.split('\n')
            .filter_map(|l| self.line(l.strip_suffix('\r').unwrap_or(l)))
            .collect()
    }
}

/// An event stream, read as it arrives.
#[derive(Debug)]
pub struct Events<R> {
    body: BufReader<Body<R>>,
    parser: SseParser,
}

#[derive(Debug)]
enum Body<R> {
    Chunked(Dechunk<R>),
    Plain(R),
}

impl<R: BufRead> Read for Body<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Body::Chunked(d) => d.read(buf),
            Body::Plain(r) => r.read(buf),
        }
    }
}

impl<S: Read + Write> Events<BufReader<S>> {
    /// Sends `req` (with `Accept: text/event-stream`) and reads the answer's head: an
    /// error unless it is `200` with a stream.
    pub fn open(stream: S, host: &str, req: Request) -> io::Result<Events<BufReader<S>>> {
        let mut r = BufReader::with_capacity(64 * 1024, stream);
        req.header("Accept", "text/event-stream")
            .write_to(r.get_mut(), host)?;
        let head = read_head(&mut r)?;
        if head.status != 200 {
            let mut rest = String::new();
            let _ = r.read_to_string(&mut rest);
            return Err(io::Error::other(format!(
                "event stream: HTTP {}: {rest}",
                head.status
            )));
        }
        Ok(Events::new(r, head.framing))
    }
}

impl<R: BufRead> Events<R> {
    /// The stream that follows a head with `framing`.
    pub fn new(r: R, framing: Framing) -> Events<R> {
        let body = match framing {
            Framing::Chunked => Body::Chunked(Dechunk::new(r)),
            Framing::Length(_) | Framing::Close => Body::Plain(r),
        };
        Events {
            body: BufReader::with_capacity(64 * 1024, body),
            parser: SseParser::default(),
        }
    }

    /// The next event; `None` when the stream ends. A read that times out is an
    /// error whose kind [`is_quiet`] recognizes.
    pub fn next_event(&mut self) -> io::Result<Option<SseEvent>> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.body.read_line(&mut line)? == 0 {
                return Ok(None);
            }
            let l = line.strip_suffix('\n').unwrap_or(&line);
            if let Some(ev) = self.parser.line(l.strip_suffix('\r').unwrap_or(l)) {
                return Ok(Some(ev));
            }
        }
    }

    /// Every event until the stream ends or goes quiet past its read timeout (a
    /// stored backlog arrives at once).
    pub fn until_quiet(&mut self) -> io::Result<Vec<SseEvent>> {
        let mut out = Vec::new();
        loop {
            match self.next_event() {
                Ok(Some(ev)) => out.push(ev),
                Ok(None) => return Ok(out),
                Err(e) if is_quiet(&e) => return Ok(out),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a read failed only because the stream went quiet past its timeout.
pub fn is_quiet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_framing() {
        let cases: [(&str, &str); 3] = [
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloextra",
                "hello",
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
                "hello",
            ),
            ("HTTP/1.0 404 Not Found\r\n\r\nhello", "hello"),
        ];
        for (raw, body) in cases {
            let a = read_answer(&mut raw.as_bytes()).unwrap();
            assert_eq!(a.text(), body, "{raw:?}");
        }
        let a = read_answer(&mut "HTTP/1.1 413 Too Large\r\nX-A: b\r\n\r\n".as_bytes()).unwrap();
        assert_eq!((a.status, a.header("x-a")), (413, Some("b")));
        assert!(read_answer(&mut "HTTP/1.1 200 OK\r\n".as_bytes()).is_err());
    }

    #[test]
    fn writes_what_it_was_given() {
        let mut out = Vec::new();
        Request::new("POST", "/api/v1/x")
            .bearer("t")
            .json(&serde_json::json!({"a": 1}))
            .write_to(&mut out, "berth")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /api/v1/x HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer t\r\n\
             Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
        );
    }

    #[test]
    fn parses_events_across_chunks_and_skips_comments() {
        let chunks = [
            ":k\n\n",
            "id: 7\nevent: task\ndata: {}\n\n",
            "data: a\ndata: b\n",
            "\n",
        ];
        let mut raw = String::from("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for c in chunks {
            raw.push_str(&format!("{:x}\r\n{c}\r\n", c.len()));
        }
        raw.push_str("0\r\n\r\n");
        let mut r = raw.as_bytes();
        let head = read_head(&mut r).unwrap();
        let mut ev = Events::new(r, head.framing);
        let first = ev.next_event().unwrap().unwrap();
        assert_eq!((first.seq(), first.event.as_str()), (Some(7), "task"));
        assert_eq!(first.json(), serde_json::json!({}));
        let second = ev.next_event().unwrap().unwrap();
        assert_eq!((second.id, second.data.as_str()), (None, "a\nb"));
        assert_eq!(ev.next_event().unwrap(), None);
    }
}
