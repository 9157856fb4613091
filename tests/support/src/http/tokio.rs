//! The async side, for tests on a tokio runtime: a request on a fresh connection with
//! hyper's client (any stream: a Unix socket, TCP, TLS), and event streams parsed by
//! the same [`SseParser`] as the blocking [`Events`](super::Events).

use super::SseParser;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// An answer read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub text: String,
    /// The body as JSON; `null` when it is not JSON.
    pub json: serde_json::Value,
}

/// One event of a transcript stream, its data parsed. An event without an id
/// (`accepted`) has id 0.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: i64,
    pub event: String,
    pub data: serde_json::Value,
}

async fn send<S>(
    stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> hyper::Response<hyper::body::Incoming>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .expect("request");
    send.send_request(req).await.expect("response")
}

/// One HTTP/1.1 request on a fresh connection; a body is sent as JSON.
pub async fn request<S>(
    stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Reply
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let res = send(stream, method, path, headers, body).await;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.expect("body").to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    Reply {
        status,
        headers,
        text,
        json,
    }
}

/// Opens an event stream and reads events until `done` says so (or 30 s pass).
pub async fn sse<S>(
    stream: S,
    path: &str,
    headers: &[(&str, &str)],
    done: impl FnMut(&[SseEvent]) -> bool,
) -> Vec<SseEvent>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    sse_request(stream, "GET", path, headers, None, done).await
}

/// [`sse`] for any request: a POST with a JSON body answered as a stream, too.
pub async fn sse_request<S>(
    stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
    mut done: impl FnMut(&[SseEvent]) -> bool,
) -> Vec<SseEvent>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let res = send(stream, method, path, headers, body.map(|v| v.to_string())).await;
    assert_eq!(res.status().as_u16(), 200, "SSE status");
    let mut body = res.into_body();
    let mut parser = SseParser::default();
    let mut pending = String::new();
    let mut out = Vec::new();
    let read = async {
        while !done(&out) {
            let Some(frame) = body.frame().await else {
                break;
            };
            let Ok(data) = frame.expect("frame").into_data() else {
                continue;
            };
            pending.push_str(&String::from_utf8_lossy(&data));
            // Whole lines only: the rest waits for the next frame.
            let Some(end) = pending.rfind('\n') else {
                continue;
            };
            let lines: String = pending.drain(..=end).collect();
            for ev in parser.feed(&lines) {
                let id = match ev.seq() {
                    Some(id) => id,
                    None if !ev.event.is_empty() => 0,
                    None => continue,
                };
                out.push(SseEvent {
                    id,
                    data: serde_json::from_str(&ev.data).expect("event data is JSON"),
                    event: ev.event,
                });
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("SSE events arrive in time");
    out
}

/// Sends a request with a body the server may refuse before reading it (413): the
/// head and body are written on their own task, ignoring a broken pipe, while the
/// answer is read. Returns the status and the JSON body.
pub async fn raw_oversized(socket: &Path, path: &str, body: String) -> (u16, serde_json::Value) {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let raw = oversized(stream, head, body).await;
    let answer = super::read_answer(&mut raw.as_slice()).expect("an answer");
    (answer.status, answer.json())
}

/// Writes `head` and `body` on `stream` from a task of their own (a write the server
/// refused is not an error: it may answer first), and returns the answer's bytes as
/// they came, once whole. The writer stays open until then: a half-closed connection
/// may be dropped by the server without an answer.
pub async fn oversized<S>(stream: S, head: String, body: String) -> Vec<u8>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (read_done, keep_open) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(body.as_bytes()).await;
        let _ = keep_open.await;
    });
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = rd.read(&mut chunk).await.unwrap_or(0);
            buf.extend_from_slice(&chunk[..n]);
            if n == 0 || whole(&buf) {
                return buf;
            }
        }
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer in time");
    let _ = read_done.send(());
    raw
}

/// Whether `raw` holds a whole answer (its head, and its body by its framing).
fn whole(raw: &[u8]) -> bool {
    let mut r = raw;
    let Ok(head) = super::read_head(&mut r) else {
        return false;
    };
    match head.framing {
        super::Framing::Length(n) => r.len() as u64 >= n,
        super::Framing::Chunked => r.ends_with(b"0\r\n\r\n"),
        super::Framing::Close => false,
    }
}
