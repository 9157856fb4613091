//! HTTP/1.1 on a blocking socket, as the lean `berth` client speaks it to the control
//! socket (and the benchmarks to `berth serve` and `berth-server`): one request written
//! with one system call, a response framed by `Content-Length`, chunked encoding or the
//! end of the connection, and Server-Sent Events read as they arrive.
//!
//! No runtime, no client library: a command that makes one request should cost little
//! more than starting a process (issue 17). The other side is Berth's own server on a
//! socket only this user can open, but its answers are still read with bounds: a head
//! larger than [`MAX_HEAD`] or a malformed chunk is an error, never a panic.

use std::io::{self, BufRead, Read, Write};

/// The most a response's status line and headers may take.
pub const MAX_HEAD: usize = 64 * 1024;

/// How a response's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes (0 when the response has no body).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body runs to the end of the connection.
    Close,
}

/// A response's status line and the headers that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub framing: Framing,
    /// The server will close the connection after this response.
    pub close: bool,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// One line (through its `\n`), at most `limit` bytes; `Ok(0)` at the end of the stream.
fn read_line_within(r: &mut impl BufRead, out: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
    let n = Read::take(&mut *r, limit as u64 + 1).read_until(b'\n', out)?;
    if n > limit {
        return Err(invalid(format!("a line longer than {limit} bytes")));
    }
    Ok(n)
}

/// Reads a response's status line and headers. 1xx interim responses are skipped.
pub fn read_head(r: &mut impl BufRead) -> io::Result<Head> {
    loop {
        let head = read_one_head(r)?;
        if !(100..200).contains(&head.status) {
            return Ok(head);
        }
    }
}

fn read_one_head(r: &mut impl BufRead) -> io::Result<Head> {
    let mut budget = MAX_HEAD;
    let mut line = Vec::new();
    if read_line_within(r, &mut line, budget)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection before answering",
        ));
    }
    budget -= line.len();
    let text = String::from_utf8_lossy(&line);
    let mut parts = text.split_whitespace();
    let version = parts.next().unwrap_or("");
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..600).contains(s) && version.starts_with("HTTP/1."))
        .ok_or_else(|| {
            invalid(format!(
                "not an HTTP/1.1 status line: {:?}",
                text.trim_end()
            ))
        })?;
    let mut head = Head {
        status,
        framing: Framing::Close,
        close: version == "HTTP/1.0",
    };
    let mut length = None;
    let mut chunked = false;
    loop {
        line.clear();
        let n = read_line_within(r, &mut line, budget)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection inside the headers",
            ));
        }
        budget -= n;
        let text = String::from_utf8_lossy(&line);
        let l = text.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(invalid(format!("not a header line: {l:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .parse()
                .map_err(|_| invalid(format!("bad content-length {value:?}")))?;
            if length.is_some_and(|m| m != n) {
                return Err(invalid("two different content-lengths"));
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            head.close = value
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("close"));
        }
    }
    head.framing = if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else if matches!(status, 204 | 304) {
        Framing::Length(0)
    } else {
        Framing::Close
    };
    if head.framing == Framing::Close {
        head.close = true;
    }
    Ok(head)
}

/// A chunked body as a plain byte stream: reads return 0 after the last chunk (and
/// its trailers).
#[derive(Debug)]
pub struct Chunked<R> {
    inner: R,
    left: u64,
    done: bool,
}

impl<R: BufRead> Chunked<R> {
    pub fn new(inner: R) -> Chunked<R> {
        Chunked {
            inner,
            left: 0,
            done: false,
        }
    }
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut size = Vec::new();
            if read_line_within(&mut self.inner, &mut size, 1024)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            let size = String::from_utf8_lossy(&size);
            let hex = size.trim().split(';').next().unwrap_or("").trim();
            self.left = u64::from_str_radix(hex, 16)
                .map_err(|_| invalid(format!("bad chunk size line {size:?}")))?;
            if self.left == 0 {
                // The last chunk: trailers (none from Berth) up to an empty line.
                loop {
                    let mut line = Vec::new();
                    if read_line_within(&mut self.inner, &mut line, MAX_HEAD)? == 0 {
                        break;
                    }
                    if line.iter().all(|b| matches!(b, b'\r' | b'\n')) {
                        break;
                    }
                }
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = Vec::new();
            read_line_within(&mut self.inner, &mut crlf, 2)?;
            if crlf != b"\r\n" && crlf != b"\n" {
                return Err(invalid("a chunk not followed by its line end"));
            }
        }
        Ok(n)
    }
}

/// Reads a whole body framed as `framing`, at most `limit` bytes.
pub fn read_body(r: &mut impl BufRead, framing: Framing, limit: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let too_big = || invalid(format!("an answer larger than {limit} bytes"));
    match framing {
        Framing::Length(n) => {
            if n > limit {
                return Err(too_big());
            }
            out.reserve(n as usize);
            Read::take(&mut *r, n).read_to_end(&mut out)?;
            if (out.len() as u64) < n {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection inside an answer",
                ));
            }
        }
        Framing::Chunked => {
            let mut body = Chunked::new(r);
            (&mut body).take(limit + 1).read_to_end(&mut out)?;
            if out.len() as u64 > limit {
                return Err(too_big());
            }
            // The terminating chunk, so the connection can be used again.
            let mut rest = [0u8; 1];
            if body.read(&mut rest)? != 0 {
                return Err(too_big());
            }
        }
        Framing::Close => {
            Read::take(&mut *r, limit + 1).read_to_end(&mut out)?;
            if out.len() as u64 > limit {
                return Err(too_big());
            }
        }
    }
    Ok(out)
}

/// A request, written with one `write` where the socket takes it whole.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub host: &'a str,
    pub accept: &'a str,
    /// A JSON body.
    pub body: Option<&'a [u8]>,
    /// Extra headers, `(name, value)`.
    pub headers: &'a [(&'a str, &'a str)],
}

impl Request<'_> {
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        for part in [self.method, self.path, self.host, self.accept] {
            if part.contains(['\r', '\n']) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a line break inside a request line or header",
                ));
            }
        }
        let mut out = Vec::with_capacity(256 + self.body.map_or(0, <[u8]>::len));
        write!(
            out,
            "{} {} HTTP/1.1\r\nhost: {}\r\naccept: {}\r\n",
            self.method, self.path, self.host, self.accept
        )?;
        for (name, value) in self.headers {
            if name.contains(['\r', '\n', ':']) || value.contains(['\r', '\n']) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a line break inside a header",
                ));
            }
            write!(out, "{name}: {value}\r\n")?;
        }
        if let Some(body) = self.body {
            write!(
                out,
                "content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )?;
            out.extend_from_slice(body);
        } else {
            out.extend_from_slice(b"\r\n");
        }
        w.write_all(&out)?;
        w.flush()
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: String,
    pub data: String,
}

/// The span of the first event terminator (`\n\n` or `\r\n\r\n`): (start, end).
pub fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2));
    let crlf = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// One event's block of lines (without its terminating blank line); `None` for a
/// block without data (a comment, a keep-alive).
pub fn parse_block(block: &str) -> Option<SseEvent> {
    let mut ev = SseEvent {
        id: None,
        event: String::from("message"),
        data: String::new(),
    };
    let mut has_data = false;
    for line in block.lines() {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => ev.id = Some(value.to_owned()),
            "event" => ev.event = value.to_owned(),
            "data" => {
                if has_data {
                    ev.data.push('\n');
                }
                ev.data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    has_data.then_some(ev)
}

/// The most one event may take before it is refused.
pub const MAX_EVENT: usize = 16 * 1024 * 1024;

/// Events read one by one from a blocking byte stream (an SSE body, unframed).
#[derive(Debug)]
pub struct Events<R> {
    inner: R,
    block: Vec<u8>,
}

impl<R: BufRead> Events<R> {
    pub fn new(inner: R) -> Events<R> {
        Events {
            inner,
            block: Vec::new(),
        }
    }

    /// The next event; `None` when the stream ended.
    pub fn next_event(&mut self) -> io::Result<Option<SseEvent>> {
        loop {
            let start = self.block.len();
            let n = read_line_within(&mut self.inner, &mut self.block, MAX_EVENT)?;
            if n == 0 {
                return Ok(None);
            }
            if self.block.len() > MAX_EVENT {
                return Err(invalid(format!("an event larger than {MAX_EVENT} bytes")));
            }
            let line = &self.block[start..];
            if line == b"\n" || line == b"\r\n" {
                let block = String::from_utf8_lossy(&self.block[..start]).into_owned();
                self.block.clear();
                if let Some(ev) = parse_block(&block) {
                    return Ok(Some(ev));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_give_status_framing_and_connection() {
        let mut r = &b"HTTP/1.1 202 Accepted\r\ncontent-length: 12\r\nx: y\r\n\r\n"[..];
        let head = read_head(&mut r).unwrap();
        assert_eq!(head.status, 202);
        assert_eq!(head.framing, Framing::Length(12));
        assert!(!head.close);
        let mut r = &b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"[..];
        let head = read_head(&mut r).unwrap();
        assert_eq!(
            (head.status, head.framing, head.close),
            (200, Framing::Chunked, true)
        );
        let mut r = &b"HTTP/1.1 200 OK\r\n\r\nbody"[..];
        assert_eq!(read_head(&mut r).unwrap().framing, Framing::Close);
    }

    #[test]
    fn malformed_heads_are_errors() {
        for wire in [
            &b""[..],
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n",
        ] {
            let mut r = wire;
            assert!(
                read_head(&mut r).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        let mut r = huge.as_bytes();
        let e = read_head(&mut r).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }

    #[test]
    fn chunked_bodies_decode_across_chunks() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\nNEXT";
        let mut r = &wire[..];
        let body = read_body(&mut r, Framing::Chunked, 100).unwrap();
        assert_eq!(body, b"hello, world");
        assert_eq!(r, b"NEXT", "the connection is left at the next answer");
        for bad in [
            &b"zz\r\nhello\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\r\nhel",
        ] {
            let mut r = bad;
            assert!(read_body(&mut r, Framing::Chunked, 100).is_err());
        }
        let mut r = &b"ffffffffffffffff\r\nab"[..];
        assert!(read_body(&mut r, Framing::Chunked, 100).is_err());
    }

    #[test]
    fn bodies_are_bounded() {
        let mut r = &b"0123456789"[..];
        assert!(read_body(&mut r, Framing::Length(10), 9).is_err());
        let mut r = &b"0123456789"[..];
        assert!(read_body(&mut r, Framing::Close, 9).is_err());
        let mut r = &b"0123456789"[..];
        assert_eq!(
            read_body(&mut r, Framing::Close, 10).unwrap(),
            b"0123456789"
        );
        let mut r = &b"01234"[..];
        assert!(read_body(&mut r, Framing::Length(10), 100).is_err());
    }

    #[test]
    fn requests_are_one_write_and_refuse_line_breaks() {
        let mut out = Vec::new();
        Request {
            method: "POST",
            path: "/api/v1/x",
            host: berth_core::SOCKET_FILE,
            accept: "application/json",
            body: Some(b"{}"),
            headers: &[("last-event-id", "7")],
        }
        .write_to(&mut out)
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /api/v1/x HTTP/1.1\r\nhost: berth.sock\r\naccept: application/json\r\nlast-event-id: 7\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        );
        let bad = Request {
            method: "GET",
            path: "/a\r\nx: y",
            host: "h",
            accept: "a",
            body: None,
            headers: &[],
        };
        assert!(bad.write_to(&mut Vec::new()).is_err());
    }

    #[test]
    fn sse_blocks_parse() {
        assert_eq!(
            parse_block("id: 7\nevent: agent\ndata: {\"a\":1}"),
            Some(SseEvent {
                id: Some("7".into()),
                event: "agent".into(),
                data: "{\"a\":1}".into()
            })
        );
        assert_eq!(parse_block(": keep-alive"), None);
        assert_eq!(find_blank_line(b"a\n\nb"), Some((1, 3)));
        let mut events = Events::new(
            &b": keep-alive\n\nid: 1\r\nevent: a\r\ndata: x\r\ndata: y\r\n\r\nevent: b\ndata: \xff\n\n"[..],
        );
        let a = events.next_event().unwrap().unwrap();
        assert_eq!(
            (a.id.as_deref(), a.event.as_str(), a.data.as_str()),
            (Some("1"), "a", "x\ny")
        );
        let b = events.next_event().unwrap().unwrap();
        assert_eq!((b.event.as_str(), b.data.as_str()), ("b", "\u{fffd}"));
        assert_eq!(events.next_event().unwrap(), None);
    }
}
