//! Signed webhooks: each event posted as a small JSON body to `notify.webhook.url`.
//!
//! Every request carries `X-Berth-Event`, `X-Berth-Delivery` (the event's id, the same
//! on each attempt), `X-Berth-Timestamp` (Unix seconds, when this attempt was signed)
//! and `X-Berth-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`
//! ([`berth_web::hooks::crypto::berth_signature`]). Nothing is ever sent unsigned:
//! without its secret the webhook is off.
//!
//! Delivery never holds a task up. [`Sender::send`] only queues (a bounded queue: when
//! it is full the oldest event is dropped, counted and logged), and one background task
//! delivers in order, each attempt within a timeout, trying again with backoff on a
//! connection failure, a timeout, 408, 429 or a 5xx, up to [`Schedule::attempts`]
//! attempts in all. A receiver that is down costs that task's time, never the
//! scheduler's.

use berth_web::backoff::Backoff;
use berth_web::hooks::Secret;
use berth_web::hooks::crypto::berth_signature;
use berth_web::net::client::full;
use berth_web::net::{HttpClient, SendError};
use http_body_util::{BodyExt, Limited};
use hyper::body::Bytes;
use hyper::{Request, header};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How many events wait for delivery at most.
pub const QUEUE_LEN: usize = 64;

/// The most of a receiver's answer that is read (then dropped): enough to keep the
/// connection for the next event.
const ANSWER_LIMIT: usize = 64 * 1024;

/// When to try again, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The wait before the first retry; each later one doubles, up to `max_retry`.
    pub first_retry: Duration,
    pub max_retry: Duration,
    /// The longest one attempt may take, connecting and the answer's head included.
    pub attempt_timeout: Duration,
}

impl Default for Schedule {
    /// Four attempts, about 0.5 s, 1 s and 2 s apart, 10 s each at most: an event is
    /// given up within a minute.
    fn default() -> Schedule {
        Schedule {
            attempts: 4,
            first_retry: Duration::from_millis(500),
            max_retry: Duration::from_secs(8),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

/// Where events go, and the secret they are signed with.
#[derive(Debug, Clone)]
pub struct Target {
    url: String,
    /// The URL's scheme and host alone, for messages: its path may hold a token.
    shown: String,
    secret: Secret,
}

impl Target {
    /// `url` was checked when the settings were read (`http(s)://host…`).
    pub fn new(url: &str, secret: Secret) -> Target {
        Target {
            url: url.to_owned(),
            shown: shown(url),
            secret,
        }
    }

    /// The URL's scheme and host, for messages.
    pub fn shown(&self) -> &str {
        &self.shown
    }
}

/// `scheme://host[:port]` of a URL, without its path, query or credentials.
fn shown(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or(authority);
    format!("{scheme}://{host}")
}

/// One event, ready to post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `X-Berth-Event`.
    pub event: &'static str,
    /// `X-Berth-Delivery`.
    pub id: String,
    /// The JSON body, signed as it is.
    pub body: Bytes,
}

/// Why an event could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// No connection, or it broke before the answer.
    #[error("{}", send_problem(.0))]
    Send(SendError),
    #[error("no answer within {0} s")]
    Timeout(u64),
    #[error("the receiver answered {0}")]
    Status(u16),
}

/// What went wrong in a send, without the URL (the messages name the host already).
fn send_problem(e: &SendError) -> String {
    match e {
        SendError::Tls { problem, .. } => problem.clone(),
        SendError::Connect { message, .. } => format!("could not connect: {message}"),
        SendError::Io { message, .. } => format!("the connection failed: {message}"),
        SendError::Request(message) => message.clone(),
    }
}

impl Failure {
    /// Whether another attempt may succeed: the receiver was unreachable, slow, or
    /// said so (408, 429, 5xx). A TLS failure or another answer will not change.
    fn worth_retrying(&self) -> bool {
        match self {
            Failure::Send(e) => matches!(e, SendError::Connect { .. } | SendError::Io { .. }),
            Failure::Timeout(_) => true,
            Failure::Status(code) => matches!(code, 408 | 429 | 500..=599),
        }
    }
}

/// The bounded queue between the observer and the delivering task.
#[derive(Debug, Default)]
struct Queue {
    items: Mutex<VecDeque<Delivery>>,
    dropped: AtomicU64,
    wake: tokio::sync::Notify,
}

impl Queue {
    /// Adds `d`; when full, drops the oldest first and returns how many were dropped
    /// so far.
    fn push(&self, d: Delivery) -> Option<u64> {
        let mut items = self.items.lock().unwrap_or_else(PoisonError::into_inner);
        let mut dropped = None;
        if items.len() >= QUEUE_LEN {
            items.pop_front();
            dropped = Some(self.dropped.fetch_add(1, Ordering::Relaxed) + 1);
        }
        items.push_back(d);
        drop(items);
        self.wake.notify_one();
        dropped
    }

    /// The oldest event, once there is one.
    async fn pop(&self) -> Delivery {
        loop {
            let next = self
                .items
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front();
            if let Some(d) = next {
                return d;
            }
            self.wake.notified().await;
        }
    }
}

/// The webhook's sending end: cheap to call from the scheduler's task.
#[derive(Debug, Clone)]
pub struct Sender {
    queue: Arc<Queue>,
}

impl Sender {
    /// Starts the task that delivers to `target` (on the current tokio runtime).
    pub fn start(target: Target, http: HttpClient, schedule: Schedule) -> Sender {
        let queue = Arc::new(Queue::default());
        let worker = queue.clone();
        tokio::spawn(async move {
            loop {
                let d = worker.pop().await;
                match deliver(&http, &target, schedule, &d).await {
                    Ok(attempts) => tracing::debug!(
                        event = d.event,
                        delivery = %d.id,
                        to = %target.shown,
                        attempts,
                        "webhook delivered"
                    ),
                    Err((attempts, e)) => tracing::warn!(
                        event = d.event,
                        delivery = %d.id,
                        to = %target.shown,
                        attempts,
                        error = %e,
                        "a webhook could not be delivered"
                    ),
                }
            }
        });
        Sender { queue }
    }

    /// Queues `d` for delivery; never waits.
    pub fn send(&self, d: Delivery) {
        if let Some(total) = self.queue.push(d) {
            tracing::warn!(
                dropped = total,
                "the webhook's queue is full (the receiver is slow or down): its oldest event was dropped"
            );
        }
    }
}

/// Posts `d` until it is taken, a failure is final, or the attempts run out: the
/// attempts made, and the last failure.
async fn deliver(
    http: &HttpClient,
    target: &Target,
    schedule: Schedule,
    d: &Delivery,
) -> Result<u32, (u32, Failure)> {
    let mut wait = Backoff::new(schedule.first_retry, schedule.max_retry);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = tokio::time::timeout(schedule.attempt_timeout, post(http, target, d))
            .await
            .unwrap_or(Err(Failure::Timeout(schedule.attempt_timeout.as_secs())));
        match outcome {
            Ok(()) => return Ok(attempt),
            Err(e) if e.worth_retrying() && attempt < schedule.attempts => {
                tracing::debug!(
                    event = d.event,
                    to = %target.shown,
                    attempt,
                    error = %e,
                    "webhook attempt failed; trying again"
                );
                tokio::time::sleep(wait.next_delay()).await;
            }
            Err(e) => return Err((attempt, e)),
        }
    }
}

/// One attempt, signed now.
async fn post(http: &HttpClient, target: &Target, d: &Delivery) -> Result<(), Failure> {
    let timestamp = berth_web::clock::now_secs().to_string();
    let signature = berth_signature(target.secret.expose().as_bytes(), &timestamp, &d.body);
    let req = Request::post(&target.url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::USER_AGENT,
            concat!("berth/", env!("CARGO_PKG_VERSION")),
        )
        .header("X-Berth-Event", d.event)
        .header("X-Berth-Delivery", &d.id)
        .header("X-Berth-Timestamp", &timestamp)
        .header("X-Berth-Signature", signature)
        .body(full(d.body.clone()))
        .map_err(|e| {
            Failure::Send(SendError::Request(format!(
                "the request cannot be made: {e}"
            )))
        })?;
    let res = http.send(req).await.map_err(Failure::Send)?;
    let status = res.status();
    // Read (and drop) the answer, so the connection can carry the next event.
    let _ = Limited::new(res.into_body(), ANSWER_LIMIT).collect().await;
    if status.is_success() {
        Ok(())
    } else {
        Err(Failure::Status(status.as_u16()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn delivery(n: usize) -> Delivery {
        Delivery {
            event: "task_finished",
            id: format!("d{n}"),
            body: Bytes::from(format!("{{\"n\":{n}}}")),
        }
    }

    fn quick() -> Schedule {
        Schedule {
            attempts: 3,
            first_retry: Duration::from_millis(1),
            max_retry: Duration::from_millis(4),
            attempt_timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn a_full_queue_drops_its_oldest_and_counts() {
        let q = Queue::default();
        for n in 0..QUEUE_LEN {
            assert_eq!(q.push(delivery(n)), None);
        }
        assert_eq!(q.push(delivery(QUEUE_LEN)), Some(1));
        assert_eq!(q.push(delivery(QUEUE_LEN + 1)), Some(2));
        let items = q.items.lock().unwrap();
        assert_eq!(items.len(), QUEUE_LEN);
        assert_eq!(items.front().unwrap().id, "d2");
        assert_eq!(items.back().unwrap().id, format!("d{}", QUEUE_LEN + 1));
    }

    #[test]
    fn messages_show_the_host_never_the_path() {
        assert_eq!(
            shown("https://discord.com/api/webhooks/1/TOKEN?wait=true"),
            "https://discord.com"
        );
        assert_eq!(shown("http://127.0.0.1:9/x#y"), "http://127.0.0.1:9");
    }

    /// A receiver on loopback that answers each request with the next of `statuses`
    /// and hands back each request's head and body.
    async fn receiver(
        statuses: Vec<u16>,
    ) -> (
        String,
        tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook/SECRET-PATH", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for status in statuses {
                let (mut s, _) = listener.accept().await.unwrap();
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = s.read(&mut chunk).await.unwrap();
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    if let Some((head, rest)) = text.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap();
                        if rest.len() >= len {
                            break (head.to_owned(), rest.as_bytes()[..len].to_vec());
                        }
                    }
                };
                tx.send((head, body)).unwrap();
                let answer = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                s.write_all(answer.as_bytes()).await.unwrap();
            }
        });
        (url, rx)
    }

    fn header<'h>(head: &'h str, name: &str) -> &'h str {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then_some(v.trim())
            })
            .unwrap_or_else(|| panic!("no {name} in {head}"))
    }

    /// A 503 is tried again, and the retry is signed afresh with the same delivery id;
    /// the receiver can check every attempt with the secret.
    #[tokio::test]
    async fn a_server_error_is_retried_and_every_attempt_is_signed() {
        let (url, mut got) = receiver(vec![503, 200]).await;
        let http = HttpClient::new(&Default::default()).unwrap();
        let target = Target::new(&url, Secret::new("s3cret"));
        let d = delivery(7);
        assert_eq!(deliver(&http, &target, quick(), &d).await.unwrap(), 2);
        for _ in 0..2 {
            let (head, body) = got.recv().await.unwrap();
            assert!(
                head.starts_with("POST /hook/SECRET-PATH HTTP/1.1"),
                "{head}"
            );
            assert_eq!(body, b"{\"n\":7}");
            let ts = header(&head, "X-Berth-Timestamp");
            assert_eq!(
                header(&head, "X-Berth-Signature"),
                berth_signature(b"s3cret", ts, &body)
            );
            assert_eq!(header(&head, "X-Berth-Event"), "task_finished");
            assert_eq!(header(&head, "X-Berth-Delivery"), "d7");
            assert_eq!(header(&head, "Content-Type"), "application/json");
        }
    }

    /// A refusal (a 4xx other than 408 and 429) is final: trying again would be
    /// refused again.
    #[tokio::test]
    async fn a_refusal_is_not_retried_and_attempts_are_bounded() {
        let http = HttpClient::new(&Default::default()).unwrap();
        let (url, _got) = receiver(vec![401, 200]).await;
        let target = Target::new(&url, Secret::new("s"));
        let (attempts, e) = deliver(&http, &target, quick(), &delivery(1))
            .await
            .unwrap_err();
        assert_eq!(
            (attempts, e.to_string()),
            (1, "the receiver answered 401".to_owned())
        );
        let (url, _got) = receiver(vec![500, 500, 500, 200]).await;
        let target = Target::new(&url, Secret::new("s"));
        let (attempts, e) = deliver(&http, &target, quick(), &delivery(2))
            .await
            .unwrap_err();
        assert_eq!(
            (attempts, e.to_string()),
            (3, "the receiver answered 500".to_owned())
        );
    }
}
