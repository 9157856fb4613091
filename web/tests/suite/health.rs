//! `GET /healthz` and `GET /readyz` (issue 38): on every listener, without a token, a
//! status word and nothing else; and what a shutdown does, in order: `/readyz` turns
//! 503 while the server still answers (here while an agent is being stopped), live
//! streams end with a `retry:` hint, then the listeners close.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_web::executor::{BoxFuture, ExecEvent, Executor, TaskOutcome, TaskSpec};
use berth_web::server::{Server, ServerOptions};
use common::TempDir;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, watch};

/// An executor whose runs last until cancelled, and whose stopping then lasts until
/// the test releases it: the window in which a shutting-down server still answers.
#[derive(Debug, Default)]
struct Holding {
    release: Arc<Notify>,
}

impl Executor for Holding {
    fn machine(&self) -> (MachineId, String) {
        (MachineId::parse("m-hold").unwrap(), "holdbox".into())
    }

    fn run(
        &self,
        _task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        mut cancel: watch::Receiver<bool>,
    ) -> BoxFuture<'static, TaskOutcome> {
        let release = self.release.clone();
        Box::pin(async move {
            let _ = events.send(ExecEvent::Status {
                status: TaskStatus::Running,
                wait_reason: None,
            });
            let _ = cancel.wait_for(|c| *c).await;
            release.notified().await;
            TaskOutcome::new(TaskStatus::Cancelled)
        })
    }

    #[cfg(feature = "local-binding")]
    fn validate(
        &self,
        dir: &str,
    ) -> Result<berth_web::executor::ValidatedDir, berth_core::Refusal> {
        Err(berth_core::Refusal::new(
            berth_core::ErrorCode::NotFound,
            format!("{dir}: this test binds nothing"),
            "none",
        ))
    }
}

/// A GET on the control socket; `None` when nothing listens there any more.
async fn get(socket: &std::path::Path, path: &str) -> Option<common::Reply> {
    let stream = tokio::net::UnixStream::connect(socket).await.ok()?;
    Some(common::request(stream, "GET", path, &[("host", "x")], None).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_first_streams_end_with_a_retry_hint_then_the_socket_closes() {
    let home = TempDir::new("health");
    let exec = Arc::new(Holding::default());
    let release = exec.release.clone();
    let opts = ServerOptions {
        executor: Some(exec),
        display: Some(common::home_context(home.path())),
        channels: Some(Default::default()),
        ..ServerOptions::default()
    };
    let server = Arc::new(Server::open(home.path(), opts).await.unwrap());
    let socket = server.socket_path();
    let listener = server.bind_control(&socket).await.unwrap();
    let s = server.clone();
    let served = tokio::spawn(async move { s.serve_control(listener).await });

    for (path, word) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let r = get(&socket, path).await.unwrap();
        assert_eq!((r.status, r.text.as_str()), (200, word), "{path}");
        let kind = r.headers.get("content-type").and_then(|v| v.to_str().ok());
        assert!(
            kind.is_some_and(|k| k.starts_with("text/plain")),
            "{path}: {kind:?}"
        );
    }

    // A task that runs until stopped, and a stream watching its session.
    let t = common::TestServer {
        home,
        server: server.clone(),
        socket: socket.clone(),
    };
    common::add_agent(&t, "held", "true").await;
    let session = common::new_session(&t, "held").await;
    let task = common::send(&t, &session, "hold").await;
    for _ in 0..500 {
        let r = t.call("GET", &format!("/api/v1/tasks/{task}"), None).await;
        if r.json["status"] == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /api/v1/sessions/{session}/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let watcher = tokio::spawn(async move {
        let mut text = Vec::new();
        let _ = stream.read_to_end(&mut text).await;
        String::from_utf8_lossy(&text).into_owned()
    });

    let stop = server.shutdown_handle();
    let stopping = tokio::spawn(async move { stop.shutdown().await });
    // The agent is being stopped: the server answers, but is no longer ready.
    let mut seen = None;
    for _ in 0..500 {
        if let Some(r) = get(&socket, "/readyz").await
            && r.status == 503
        {
            seen = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answer = seen.expect("/readyz answers 503 once the shutdown began");
    assert_eq!(answer.text, "not ready\n", "nothing but the word");
    let status = get(&socket, "/healthz").await.unwrap().status;
    assert_eq!(status, 200, "the process is still up");
    assert!(!stopping.is_finished());

    release.notify_one();
    stopping.await.unwrap();
    let text = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("the stream ends at shutdown")
        .unwrap();
    assert!(text.contains("retry: 500"), "a retry hint ends it: {text}");
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .expect("the socket closes")
        .unwrap()
        .unwrap();
    assert!(
        get(&socket, "/healthz").await.is_none(),
        "nothing answers once closed"
    );
    let done = server
        .state()
        .store
        .resolve_task(task.as_str())
        .await
        .unwrap();
    assert_eq!(
        done.status,
        TaskStatus::Interrupted,
        "the local task, as today"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_listener_answers_health_without_token_or_allowed_host() {
    let (t, addr) = common::TestServer::with_daemons(Default::default()).await;
    for (path, want) in [("/healthz", (200, "ok\n")), ("/readyz", (200, "ready\n"))] {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A balancer's probe names the address it dialled, not an allowed host.
        let r = common::request(stream, "GET", path, &[("host", "10.1.2.3:80")], None).await;
        assert_eq!((r.status, r.text.as_str()), want, "{path}");
    }
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let r = common::request(
        stream,
        "GET",
        "/api/v1/health",
        &[("host", "10.1.2.3:80")],
        None,
    )
    .await;
    assert_eq!(r.status, 403, "the API keeps its guard: {}", r.text);
    drop(t);
}
