//! `berth-server healthcheck [URL]`: one plain HTTP/1.1 `GET` of a health route, for a
//! container's health check where there is no curl (the image is `FROM scratch`).
//!
//! Std only, no runtime: a `TcpStream` with one deadline (3 s by default) over the
//! connect, the request and the answer. Exit 0 on a `200`, 1 on anything else (another
//! status, no answer, a refused connection, a URL it cannot take), with one line saying
//! which: on stdout when healthy, on stderr otherwise. `https://` is refused: inside the
//! container the check talks to the plain listener on loopback.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// What `berth-server healthcheck` asks without a URL: the default listener's liveness.
pub const DEFAULT_URL: &str = "http://127.0.0.1:4733/healthz";
/// The whole probe's time: connect, send, read.
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// The most of an answer read; a health answer is a few hundred bytes.
const MAX_ANSWER: u64 = 64 * 1024;

pub const USAGE: &str = "usage: berth-server healthcheck [URL]
  GET URL (default http://127.0.0.1:4733/healthz; plain http only), 3 s at most;
  exit 0 on a 200, 1 otherwise, with one line saying what it got";

/// An `http://` URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port` as connected to (and sent as `Host`).
    pub authority: String,
    /// The path and query, `/` at least.
    pub path: String,
}

/// `http://HOST[:PORT][/PATH]` (port 80 by default; `[::1]` for IPv6).
pub fn parse_url(url: &str) -> Result<Target, String> {
    let rest = match url.split_once("://") {
        Some(("http", rest)) => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "{url}: only http:// is supported (got {scheme}://); probe the plain listener on loopback"
            ));
        }
        None => return Err(format!("{url}: not a URL (want http://HOST:PORT/PATH)")),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
        return Err(format!("{url}: no usable host"));
    }
    if path.contains(char::is_whitespace) {
        return Err(format!("{url}: a path cannot hold whitespace"));
    }
    let bad_port = |port: &str| format!("{url}: bad port {port:?}");
    let valid = |port: &str| !port.is_empty() && port.parse::<u16>().is_ok();
    let has_port = match authority.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(v6) => match v6.split_once(']') {
            Some((addr, "")) if !addr.is_empty() => false,
            Some((addr, rest)) if !addr.is_empty() => match rest.strip_prefix(':') {
                Some(port) if valid(port) => true,
                Some(_) | None => return Err(bad_port(rest)),
            },
            Some(_) | None => return Err(format!("{url}: no usable host")),
        },
        None => match authority.rsplit_once(':') {
            Some(("", _)) => return Err(format!("{url}: no usable host")),
            Some((_, port)) if valid(port) => true,
            Some((_, port)) => return Err(bad_port(port)),
            None => false,
        },
    };
    let authority = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok(Target {
        authority,
        path: path.to_owned(),
    })
}

/// An answer: its status and body (de-chunked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

/// `GET target` with `timeout` over the whole exchange.
pub fn get(target: &Target, timeout: Duration) -> Result<Answer, String> {
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer from {} within {timeout:?}", target.authority))
    };
    let addrs: Vec<SocketAddr> = target
        .authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", target.authority))?
        .collect();
    let mut stream = None;
    let mut last = format!("{} resolves to no address", target.authority);
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = format!("cannot connect to {addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or(last)?;
    let io = |e: std::io::Error| format!("{}: {e}", target.authority);
    stream.set_write_timeout(Some(left()?)).map_err(io)?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: berth-server-healthcheck\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        target.path, target.authority
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    let mut limited = (&mut stream).take(MAX_ANSWER);
    let mut buf = [0u8; 4096];
    loop {
        limited
            .get_mut()
            .set_read_timeout(Some(left()?))
            .map_err(io)?;
        match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if raw.is_empty() => return Err(io(e)),
            // The head and body may be in already (a server that keeps the line open).
            Err(_) => break,
        }
        if let Some(answer) = complete(&raw) {
            return answer;
        }
    }
    complete(&raw)
        .unwrap_or_else(|| parse_answer(&raw, true))
        .map_err(|e| format!("{}: {e}", target.authority))
}

/// The answer, once `raw` holds all of it by its own framing (`Content-Length` or the
/// last chunk); `None` while more is to come (or it is framed by the end of the stream).
fn complete(raw: &[u8]) -> Option<Result<Answer, String>> {
    let end = find(raw, b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end + 4..];
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let done = match (length, chunked) {
        (_, true) => {
            find(body, b"0\r\n\r\n").is_some_and(|i| i == 0 || body[..i].ends_with(b"\r\n"))
        }
        (Some(n), false) => body.len() >= n,
        (None, false) => false,
    };
    done.then(|| parse_answer(raw, false))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Status and body from a whole answer; `eof` says the stream ended (a body without
/// framing runs to there).
fn parse_answer(raw: &[u8], eof: bool) -> Result<Answer, String> {
    if raw.is_empty() {
        return Err("the connection closed without an answer".to_owned());
    }
    let (head, body) = match find(raw, b"\r\n\r\n") {
        Some(end) => (&raw[..end], &raw[end + 4..]),
        None if eof => (raw, &[][..]),
        None => return Err("an incomplete answer".to_owned()),
    };
    let head = String::from_utf8_lossy(head);
    let status_line = head.lines().next().unwrap_or_default();
    let mut words = status_line.split_whitespace();
    let status = match (words.next(), words.next().map(str::parse::<u16>)) {
        (Some(v), Some(Ok(code))) if v.starts_with("HTTP/") => code,
        _ => {
            return Err(format!(
                "not an HTTP answer: {:?}",
                truncate(status_line, 80)
            ));
        }
    };
    let lower = head.to_ascii_lowercase();
    let body = if lower
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"))
    {
        dechunk(body)
    } else {
        let n = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(body.len());
        body[..n.min(body.len())].to_vec()
    };
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A chunked body joined (as far as it goes).
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = find(rest, b"\r\n") {
        let size = String::from_utf8_lossy(&rest[..eol]);
        let size = size.split(';').next().unwrap_or_default().trim();
        let Ok(n) = usize::from_str_radix(size, 16) else {
            break;
        };
        let start = eol + 2;
        if n == 0 || start >= rest.len() {
            break;
        }
        let stop = (start + n).min(rest.len());
        out.extend_from_slice(&rest[start..stop]);
        rest = rest.get(stop + 2..).unwrap_or_default();
    }
    out
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The probe's verdict: whether it is healthy, and its one line.
pub fn check(url: &str, timeout: Duration) -> (bool, String) {
    let answer = parse_url(url).and_then(|t| get(&t, timeout));
    match answer {
        Ok(a) => {
            let word = truncate(a.body.lines().next().unwrap_or_default().trim(), 80);
            if a.status == 200 {
                (true, format!("ok: {url} answered 200 {word}"))
            } else {
                (false, format!("error: {url} answered {} {word}", a.status))
            }
        }
        Err(e) => (false, format!("error: {e}")),
    }
}

/// `berth-server healthcheck [URL]`; `args` are what follows `healthcheck`.
pub fn main(args: &[String]) -> ExitCode {
    let url = match args {
        [] => DEFAULT_URL,
        [a] if a == "-h" || a == "--help" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        [url] if !url.starts_with('-') => url.as_str(),
        [..] => {
            eprintln!("error: unexpected arguments {args:?}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (healthy, line) = check(url, TIMEOUT);
    if healthy {
        println!("{line}");
        ExitCode::SUCCESS
    } else {
        eprintln!("{line}");
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // A panic is a failed test.
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:4733/healthz").unwrap();
        assert_eq!(t.authority, "127.0.0.1:4733");
        assert_eq!(t.path, "/healthz");
        assert_eq!(
            parse_url("http://localhost").unwrap().authority,
            "localhost:80"
        );
        assert_eq!(parse_url("http://localhost").unwrap().path, "/");
        assert_eq!(
            parse_url("http://[::1]:9/readyz?x=1").unwrap().authority,
            "[::1]:9"
        );
        assert_eq!(parse_url("http://[::1]/").unwrap().authority, "[::1]:80");
        assert!(parse_url("https://example.com/healthz").is_err());
        assert!(parse_url("127.0.0.1:4733").is_err());
        assert!(parse_url("http://host:xx/").is_err());
        assert!(parse_url("http:///healthz").is_err());
    }

    /// One connection on loopback answered with `answer`; the probe's verdict.
    fn probe_against(answer: &'static [u8]) -> (bool, String) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/healthz", l.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            s.write_all(answer).unwrap();
            req
        });
        let verdict = check(&url, Duration::from_secs(3));
        let req = server.join().unwrap();
        assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("\r\nHost: 127.0.0.1:"), "{req}");
        verdict
    }

    #[test]
    fn a_200_is_healthy() {
        let (ok, line) = probe_against(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok",
        );
        assert!(ok, "{line}");
        assert!(line.ends_with("answered 200 ok"), "{line}");
    }

    #[test]
    fn a_chunked_200_is_read_whole() {
        let (ok, line) = probe_against(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        );
        assert!(ok, "{line}");
        assert!(line.ends_with("answered 200 ok"), "{line}");
    }

    #[test]
    fn a_503_is_not() {
        let (ok, line) = probe_against(
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\n\r\nnot ready",
        );
        assert!(!ok);
        assert!(line.ends_with("answered 503 not ready"), "{line}");
    }

    #[test]
    fn garbage_is_not() {
        let (ok, line) = probe_against(b"SSH-2.0-OpenSSH\r\n\r\n");
        assert!(!ok);
        assert!(line.contains("not an HTTP answer"), "{line}");
    }

    #[test]
    fn a_refused_connection_is_not() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (ok, line) = check(&format!("http://127.0.0.1:{port}/healthz"), TIMEOUT);
        assert!(!ok);
        assert!(line.starts_with("error: cannot connect"), "{line}");
    }

    #[test]
    fn a_silent_server_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/healthz", l.local_addr().unwrap());
        let started = Instant::now();
        let (ok, line) = check(&url, Duration::from_millis(300));
        assert!(!ok, "{line}");
        assert!(started.elapsed() < Duration::from_secs(2), "{line}");
        drop(l);
    }
}
