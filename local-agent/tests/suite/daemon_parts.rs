//! `berth daemon` against a fake server: events survive lost answers in order and
//! without duplicates, the control socket validates directories here and streams the
//! rest live, and a refused token or an absent server is reported as such.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common::TempDir;
use berth_core::api::TaskStatus;
use berth_core::event::AgentEvent;
use berth_local_agent::ExecutorConfig;
use berth_local_agent::daemon::url::ServerUrl;
use berth_local_agent::daemon::{self, DaemonError, DaemonOptions};
use berth_web::daemon::wire::{
    self, ClaimedTask, EventBatch, EventsReply, FinishReply, FinishRequest, Registered, Validated,
    WireEvent, WirePlacement,
};
use berth_web::executor::{AgentKind, AgentSpec};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

const TOKEN: &str = "berthd_test";

/// A fresh directory tree, removed at drop: Berth's dirs and a user home with a
/// project in it.
struct Sandbox {
    root: PathBuf,
    _dir: TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let dir = TempDir::new("daemon");
        std::fs::create_dir_all(dir.path().join("u9x/proj")).expect("sandbox");
        Sandbox {
            root: dir.path().to_owned(),
            _dir: dir,
        }
    }

    fn project(&self) -> String {
        self.root.join("u9x/proj").display().to_string()
    }

    fn config(&self) -> ExecutorConfig {
        let mut cfg = ExecutorConfig::isolated(&self.root, Some(self.root.join("u9x")));
        cfg.grace = Duration::from_millis(300);
        cfg
    }

    fn home(&self) -> PathBuf {
        self.config().berth_home
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// A body fed chunk by chunk by the test.
struct Chunks(mpsc::UnboundedReceiver<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

/// What the fake server saw and will answer.
#[derive(Default)]
struct Fake {
    /// Register answers 401.
    refuse: bool,
    registers: usize,
    claims: VecDeque<ClaimedTask>,
    /// Events stored, by number.
    stored: Vec<WireEvent>,
    event_calls: usize,
    /// Of every three events calls, the first is stored but its answer is lost, the
    /// second is lost before it is stored (the connection drops either way).
    lose_answers: bool,
    lost: usize,
    finished: Option<FinishRequest>,
    /// Tasks handed out and finishes recorded, and the most handed out but not
    /// finished at any claim.
    handed: usize,
    finishes: usize,
    max_outstanding: usize,
    /// Forwarded control requests: method, path and query, headers, body.
    forwarded: Vec<(Method, String, HeaderMap, Bytes)>,
    /// The live body of a forwarded `.../events` request.
    stream: Option<mpsc::UnboundedReceiver<Bytes>>,
}

fn json_answer(status: StatusCode, v: &impl serde::Serialize) -> Response<Body> {
    let mut r =
        Response::new(Full::new(Bytes::from(serde_json::to_vec(v).unwrap_or_default())).boxed());
    *r.status_mut() = status;
    r
}

async fn fake_handle(
    fake: Arc<Mutex<Fake>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, String> {
    let method = req.method().clone();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let headers = req.headers().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    let rest = path.strip_prefix(wire::PREFIX).unwrap_or(&path).to_owned();
    if let Some(api) = rest.strip_prefix("/api/") {
        let mut f = fake.lock().map_err(|e| e.to_string())?;
        f.forwarded.push((method, path.clone(), headers, body));
        if api.ends_with("/events") {
            let rx = f.stream.take().ok_or("no stream")?;
            return Ok(Response::new(BodyExt::boxed(Chunks(rx))));
        }
        return Ok(json_answer(StatusCode::OK, &json!({"forwarded": api})));
    }
    if rest == "/register" {
        let mut f = fake.lock().map_err(|e| e.to_string())?;
        f.registers += 1;
        if f.refuse {
            let e = json!({"error": {"code": "unauthorized", "message": "the daemon token was revoked", "hint": "h"}});
            return Ok(json_answer(StatusCode::UNAUTHORIZED, &e));
        }
        let reg: wire::Register = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        return Ok(json_answer(
            StatusCode::OK,
            &Registered {
                machine_id: reg.machine_id,
                name: reg.name,
                heartbeat_ms: 200,
                window_ms: 5000,
                claim_wait_ms: 200,
                local_binding: true,
                claim_numbers: true,
            },
        ));
    }
    if rest == "/heartbeat" {
        return Ok(json_answer(
            StatusCode::OK,
            &wire::HeartbeatReply::default(),
        ));
    }
    if rest == "/claim" {
        let task = {
            let mut f = fake.lock().map_err(|e| e.to_string())?;
            let task = f.claims.pop_front();
            if task.is_some() {
                f.handed += 1;
                f.max_outstanding = f.max_outstanding.max(f.handed - f.finishes);
            }
            task
        };
        return Ok(match task {
            Some(t) => json_answer(StatusCode::OK, &t),
            None => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Response::builder()
                    .status(StatusCode::NO_CONTENT)
                    .body(Full::new(Bytes::new()).boxed())
                    .map_err(|e| e.to_string())?
            }
        });
    }
    if rest.ends_with("/events") {
        let batch: EventBatch = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let mut f = fake.lock().map_err(|e| e.to_string())?;
        f.event_calls += 1;
        if f.lose_answers && f.event_calls % 3 == 2 {
            f.lost += 1;
            return Err("request lost".into());
        }
        let have = f.stored.len() as u64;
        if batch.first <= have {
            let skip = (have - batch.first) as usize;
            f.stored.extend(batch.events.into_iter().skip(skip));
        }
        if f.lose_answers && f.event_calls % 3 == 1 {
            f.lost += 1;
            return Err("answer lost".into());
        }
        let received = f.stored.len() as u64;
        return Ok(json_answer(
            StatusCode::OK,
            &EventsReply {
                received,
                ..EventsReply::default()
            },
        ));
    }
    if rest.ends_with("/finish") {
        let req: FinishRequest = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        let mut f = fake.lock().map_err(|e| e.to_string())?;
        if (f.stored.len() as u64) < req.events {
            let e = json!({"error": {"code": berth_core::ErrorCode::EventsMissing, "message": "m", "hint": "h"}});
            return Ok(json_answer(StatusCode::CONFLICT, &e));
        }
        let status = req.outcome.status;
        f.finishes += 1;
        f.finished = Some(req);
        return Ok(json_answer(StatusCode::OK, &FinishReply { status }));
    }
    Ok(json_answer(
        StatusCode::NOT_FOUND,
        &json!({"error": {"code": "not_found_route", "message": path, "hint": ""}}),
    ))
}

/// Serves the fake on a loopback port; returns its URL.
async fn serve_fake(fake: Arc<Mutex<Fake>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let fake = fake.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| fake_handle(fake.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

struct Running {
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<Result<(), DaemonError>>,
}

fn start_daemon(sandbox: &Sandbox, url: &str) -> Running {
    let (tx, rx) = oneshot::channel::<()>();
    let opts = DaemonOptions {
        server: ServerUrl::parse(url).expect("url"),
        token: TOKEN.into(),
        name: Some("laptop-a".into()),
        poll: None,
        max_tasks: 2,
        http: berth_web::net::HttpClient::new(&berth_web::net::ClientOptions::default())
            .expect("client"),
    };
    let done = tokio::spawn(daemon::run(sandbox.config(), opts, async move {
        let _ = rx.await;
    }));
    Running {
        stop: Some(tx),
        done,
    }
}

impl Running {
    async fn stop(mut self) -> Result<(), DaemonError> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(20), self.done)
            .await
            .expect("the daemon stops")
            .expect("the daemon task")
    }
}

async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One request over the daemon's control socket; returns status and body.
async fn socket_call(
    sock: &Path,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let resp = socket_send(sock, method, path, body).await;
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn socket_send(
    sock: &Path,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Response<Incoming> {
    let stream = tokio::net::UnixStream::connect(sock)
        .await
        .expect("connect");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "berth.sock")
        .header("authorization", "Bearer forged")
        .header(wire::VALIDATED_HEADER, "{\"forged\":true}")
        .body(Full::new(Bytes::from(bytes)))
        .expect("request");
    sender.send_request(req).await.expect("answer")
}

fn texts(events: &[WireEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            WireEvent::Agent {
                event: AgentEvent::Text { text },
            } => Some(text.clone()),
            WireEvent::Agent { .. } | WireEvent::Status { .. } | WireEvent::Approval { .. } => None,
        })
        .collect()
}

/// A task of a `command` agent running `script` in a scratch directory.
fn scratch_task(n: &str, script: &str) -> ClaimedTask {
    ClaimedTask {
        task_id: format!("task-{n}").parse().unwrap(),
        session_id: format!("session-{n}").parse().unwrap(),
        title: "count".into(),
        display: None,
        agent: AgentSpec {
            name: "count".into(),
            kind: AgentKind::Command,
            command: vec!["sh".into(), "-c".into(), script.into()],
            permissions: None,
        },
        prompt: "count".into(),
        placement: WirePlacement::Scratch,
        resume_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_more_tasks_run_at_once_than_allowed() {
    let sandbox = Sandbox::new();
    let fake = Arc::new(Mutex::new(Fake::default()));
    for n in ["1", "2", "3", "4"] {
        fake.lock()
            .expect("fake")
            .claims
            .push_back(scratch_task(n, "sleep 0.3"));
    }
    let url = serve_fake(fake.clone()).await;
    let daemon = start_daemon(&sandbox, &url);
    until("four finishes", || {
        fake.lock().is_ok_and(|f| f.finishes == 4)
    })
    .await;
    daemon.stop().await.expect("a clean stop");
    assert_eq!(fake.lock().expect("fake").max_outstanding, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_survive_lost_answers_in_order_and_once() {
    let sandbox = Sandbox::new();
    let fake = Arc::new(Mutex::new(Fake {
        lose_answers: true,
        ..Fake::default()
    }));
    fake.lock().expect("fake").claims.push_back(scratch_task(
        "1",
        "for i in $(seq 1 30); do echo $i; sleep 0.01; done",
    ));
    let url = serve_fake(fake.clone()).await;
    let daemon = start_daemon(&sandbox, &url);
    until("the finish", || {
        fake.lock().is_ok_and(|f| f.finished.is_some())
    })
    .await;
    daemon.stop().await.expect("a clean stop");

    let f = fake.lock().expect("fake");
    let finished = f.finished.clone().expect("finished");
    assert_eq!(finished.outcome.status, TaskStatus::Succeeded);
    assert_eq!(finished.events, f.stored.len() as u64);
    let want: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
    assert_eq!(texts(&f.stored), want);
    assert!(f.lost >= 2, "no call was lost, so nothing was resent");
    assert!(!sandbox.home().join("berth.sock").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_validates_here_and_forwards_the_rest_live() {
    let sandbox = Sandbox::new();
    let fake = Arc::new(Mutex::new(Fake::default()));
    let (chunks, rx) = mpsc::unbounded_channel();
    fake.lock().expect("fake").stream = Some(rx);
    let url = serve_fake(fake.clone()).await;
    let daemon = start_daemon(&sandbox, &url);
    until("registration", || {
        fake.lock().is_ok_and(|f| f.registers == 1)
    })
    .await;
    let sock = sandbox.home().join("berth.sock");
    let home_dir = sandbox.root.join("u9x").display().to_string();

    // Refused here, never forwarded.
    let (status, body) = socket_call(
        &sock,
        Method::POST,
        "/api/v1/check",
        Some(json!({"dir": home_dir})),
    )
    .await;
    assert_eq!(
        (status, body["ok"].clone(), body["code"].clone()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!(false),
            json!("home_directory")
        )
    );
    let (status, body) = socket_call(
        &sock,
        Method::PUT,
        "/api/v1/sessions/s1/binding",
        Some(json!({"dir": home_dir})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("home_directory"))
    );
    assert!(fake.lock().expect("fake").forwarded.is_empty());

    // Accepted here, forwarded with the validation and the daemon's own credentials.
    let project = sandbox.project();
    let (status, body) = socket_call(
        &sock,
        Method::PUT,
        "/api/v1/sessions/s1/binding",
        Some(json!({"dir": project, "mode": "worktree"})),
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"forwarded": "sessions/s1/binding"}))
    );
    let (status, _) = socket_call(&sock, Method::GET, "/api/v1/tasks?session=s%201", None).await;
    assert_eq!(status, StatusCode::OK);
    {
        let f = fake.lock().expect("fake");
        let (method, path, headers, body) = &f.forwarded[0];
        assert_eq!(
            (method, path.as_str()),
            (&Method::PUT, "/api/v1/daemon/api/sessions/s1/binding")
        );
        let body: Value = serde_json::from_slice(body).expect("json body");
        assert_eq!(body, json!({"dir": project, "mode": "worktree"}));
        let validated: Validated = serde_json::from_str(
            headers[wire::VALIDATED_HEADER]
                .to_str()
                .expect("ascii header"),
        )
        .expect("validated header");
        let meta = std::fs::metadata(&project).expect("project");
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            validated,
            Validated {
                dir: project.clone(),
                canonical: project.clone(),
                display: "~/proj".into(),
                dev: meta.dev(),
                ino: meta.ino(),
            }
        );
        let machine = std::fs::read_to_string(sandbox.home().join("machine-id")).expect("id");
        assert_eq!(
            headers[wire::MACHINE_HEADER].to_str().ok(),
            Some(machine.trim())
        );
        assert_eq!(
            headers["authorization"].to_str().ok(),
            Some("Bearer berthd_test")
        );
        let (method, path, headers, _) = &f.forwarded[1];
        assert_eq!(
            (method, path.as_str()),
            (&Method::GET, "/api/v1/daemon/api/tasks?session=s%201")
        );
        assert!(headers.get(wire::VALIDATED_HEADER).is_none());
    }

    // A session without a directory goes without the empty binding fields (a cloud
    // build refuses them), its length matching the rewritten body.
    let (status, _) = socket_call(
        &sock,
        Method::POST,
        "/api/v1/sessions",
        Some(json!({"agent": "cat", "dir": null, "mode": null})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    {
        let f = fake.lock().expect("fake");
        let (method, path, _, body) = &f.forwarded[2];
        assert_eq!(
            (method, path.as_str()),
            (&Method::POST, "/api/v1/daemon/api/sessions")
        );
        let body: Value = serde_json::from_slice(body).expect("json body");
        assert_eq!(body, json!({"agent": "cat"}));
    }

    // A stream comes through as it is written, not when it ends.
    let resp = socket_send(&sock, Method::GET, "/api/v1/sessions/s1/events", None).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    chunks
        .send(Bytes::from_static(b"data: one\n\n"))
        .expect("chunk");
    let first = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the first chunk arrives while the stream is open")
        .and_then(|f| f.ok())
        .and_then(|f| f.into_data().ok());
    assert_eq!(first, Some(Bytes::from_static(b"data: one\n\n")));
    chunks
        .send(Bytes::from_static(b"data: two\n\n"))
        .expect("chunk");
    drop(chunks);
    let rest = body.collect().await.expect("rest").to_bytes();
    assert_eq!(rest, Bytes::from_static(b"data: two\n\n"));

    // Token routes are the server's own, never reached through a daemon.
    let (status, body) = socket_call(&sock, Method::GET, "/api/v1/daemon/tokens", None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (StatusCode::NOT_FOUND, json!("not_found_route"))
    );
    daemon.stop().await.expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_stops_the_daemon() {
    let sandbox = Sandbox::new();
    let fake = Arc::new(Mutex::new(Fake {
        refuse: true,
        ..Fake::default()
    }));
    let url = serve_fake(fake.clone()).await;
    let daemon = start_daemon(&sandbox, &url);
    let out = tokio::time::timeout(Duration::from_secs(20), daemon.done)
        .await
        .expect("the daemon stops by itself")
        .expect("the daemon task");
    match out {
        Err(DaemonError::TokenRefused { url: u, message }) => {
            assert_eq!(
                (u, message),
                (url, "the daemon token was revoked".to_owned())
            );
        }
        other => panic!("expected a refused token, got {other:?}"),
    }
    assert!(!sandbox.home().join("berth.sock").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_server_the_socket_says_so() {
    let sandbox = Sandbox::new();
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let url = format!("http://127.0.0.1:{port}");
    let daemon = start_daemon(&sandbox, &url);
    let sock = sandbox.home().join("berth.sock");
    until("the socket", || sock.exists()).await;
    let (status, body) = socket_call(&sock, Method::GET, "/api/v1/sessions", None).await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("server_unreachable"))
    );
    // Checking a directory needs no server.
    let (status, body) = socket_call(
        &sock,
        Method::POST,
        "/api/v1/check",
        Some(json!({"dir": sandbox.project()})),
    )
    .await;
    assert_eq!((status, body["ok"].clone()), (StatusCode::OK, json!(true)));
    daemon
        .stop()
        .await
        .expect("a clean stop while still waiting for the server");
}
