//! Shared test fixtures: temp homes, a real `sh -c` executor, a raw HTTP client.
#![allow(dead_code)]

#[cfg(feature = "postgres")]
pub mod pg;

use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_core::event::AgentEvent;
use berth_web::executor::{BoxFuture, ExecEvent, Executor, Placement, TaskOutcome, TaskSpec};
use berth_web::server::{Server, ServerOptions};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

pub use berth_test_support::TempDir;

/// Runs the agent's command with `sh -c` (the command's words joined), the prompt on
/// stdin, in the placement's directory (scratch: `<scratch>/<session>`).
#[derive(Debug)]
pub struct ShExecutor {
    pub scratch: PathBuf,
}

impl Executor for ShExecutor {
    fn machine(&self) -> (MachineId, String) {
        (MachineId::parse("m-test").unwrap(), "testbox".into())
    }

    fn run(
        &self,
        task: TaskSpec,
        events: mpsc::UnboundedSender<ExecEvent>,
        mut cancel: watch::Receiver<bool>,
    ) -> BoxFuture<'static, TaskOutcome> {
        let scratch = self.scratch.clone();
        Box::pin(async move {
            let dir = match &task.placement {
                Placement::Scratch => scratch.join(&task.session.id),
                #[cfg(feature = "local-binding")]
                Placement::InPlace { dir, .. } | Placement::Worktree { dir, .. } => {
                    PathBuf::from(dir.as_str())
                }
            };
            let _ = std::fs::create_dir_all(&dir);
            let outcome = |status, exit_code, error: Option<String>| TaskOutcome {
                exit_code,
                error,
                work_dir: Some(dir.display().to_string()),
                resume_id: Some(format!("resume-{}", task.task_id)),
                ..TaskOutcome::new(status)
            };
            let _ = events.send(ExecEvent::Status {
                status: TaskStatus::Running,
                wait_reason: None,
            });
            let mut child = match tokio::process::Command::new("sh")
                .arg("-c")
                .arg(task.agent.command.join(" "))
                .current_dir(&dir)
                .env("BERTH_TASK_ID", &task.task_id)
                .env("BERTH_SESSION_ID", &task.session.id)
                .env(
                    "BERTH_RESUME_ID",
                    task.resume_id.clone().unwrap_or_default(),
                )
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
            {
                Ok(c) => c,
                Err(e) => return outcome(TaskStatus::Failed, None, Some(e.to_string())),
            };
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(task.prompt.as_bytes()).await;
            }
            let Some(stdout) = child.stdout.take() else {
                return outcome(TaskStatus::Failed, None, Some("no stdout".into()));
            };
            let mut lines = BufReader::new(stdout).lines();
            loop {
                tokio::select! {
                    line = lines.next_line() => match line {
                        Ok(Some(text)) => {
                            let _ = events.send(ExecEvent::Agent(AgentEvent::Text { text }));
                        }
                        Ok(None) | Err(_) => break,
                    },
                    true = async { cancel.wait_for(|c| *c).await.is_ok() } => {
                        let _ = child.kill().await;
                        return outcome(TaskStatus::Cancelled, None, Some("cancelled".into()));
                    }
                }
            }
            match child.wait().await {
                Ok(s) if s.success() => outcome(TaskStatus::Succeeded, Some(0), None),
                Ok(s) => outcome(TaskStatus::Failed, s.code(), Some(format!("exit {s}"))),
                Err(e) => outcome(TaskStatus::Failed, None, Some(e.to_string())),
            }
        })
    }

    #[cfg(feature = "local-binding")]
    fn validate(
        &self,
        dir: &str,
    ) -> Result<berth_web::executor::ValidatedDir, berth_core::Refusal> {
        use berth_core::{ErrorCode, LocalPath, Platform, Refusal};
        let p = LocalPath::parse(Platform::native(), dir)?;
        let canonical = std::fs::canonicalize(p.as_str()).map_err(|_| {
            Refusal::new(
                ErrorCode::NotFound,
                format!("{dir} does not exist"),
                "create it first",
            )
        })?;
        if !canonical.is_dir() {
            return Err(Refusal::new(
                ErrorCode::NotADirectory,
                format!("{dir} is not a directory"),
                "give a directory",
            ));
        }
        let canonical = LocalPath::parse(Platform::native(), &canonical.display().to_string())?;
        let display =
            berth_core::display::display(&berth_web::server::native_context(), &canonical);
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(canonical.as_str()).map_err(|e| {
            Refusal::new(
                ErrorCode::NotFound,
                format!("{dir}: {e}"),
                "create it first",
            )
        })?;
        let identity = berth_web::executor::DirIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        Ok(berth_web::executor::ValidatedDir {
            canonical,
            display,
            identity,
        })
    }
}

/// A display context whose home is `dir`.
pub fn home_context(dir: &Path) -> berth_core::Context {
    use berth_core::{Context, LocalPath, Platform};
    let home = LocalPath::parse(Platform::native(), &dir.display().to_string()).expect("home path");
    Context::new(Platform::native()).with_home(home)
}

/// A server on a temp home with the `sh` executor, serving its control socket.
pub struct TestServer {
    pub home: TempDir,
    pub server: Arc<Server>,
    pub socket: PathBuf,
}

impl TestServer {
    pub async fn start(max_parallel: usize) -> TestServer {
        TestServer::start_in(TempDir::new("w"), max_parallel).await
    }

    pub async fn start_in(home: TempDir, max_parallel: usize) -> TestServer {
        TestServer::open(home, max_parallel, None).await
    }

    /// A server that also accepts daemons on a loopback listener; returns it and the
    /// listener's address.
    pub async fn with_daemons(
        config: berth_web::daemon::DaemonConfig,
    ) -> (TestServer, std::net::SocketAddr) {
        let t = TestServer::open(TempDir::new("w"), 4, Some(config)).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = t.server.clone();
        tokio::spawn(async move {
            s.serve_web(
                berth_web::net::listener::WebListener::Plain(listener),
                "web-token".into(),
                vec![addr.to_string()],
            )
            .await
        });
        (t, addr)
    }

    async fn open(
        home: TempDir,
        max_parallel: usize,
        daemons: Option<berth_web::daemon::DaemonConfig>,
    ) -> TestServer {
        let exec = ShExecutor {
            scratch: home.path().join("scratch"),
        };
        let opts = ServerOptions {
            executor: Some(Arc::new(exec)),
            scheduler: berth_web::scheduler::SchedulerConfig { max_parallel },
            display: Some(home_context(home.path())),
            channels: Some(Default::default()),
            daemons,
            http: None,
            database: None,
        };
        let server = Arc::new(Server::open(home.path(), opts).await.expect("server opens"));
        let socket = server.socket_path();
        let listener = server.bind_control(&socket).await.expect("socket binds");
        let s = server.clone();
        tokio::spawn(async move { s.serve_control(listener).await });
        TestServer {
            home,
            server,
            socket,
        }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> Reply {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .expect("socket connects");
        let body = body.map(|b| b.to_string());
        request(stream, method, path, &[("host", "localhost")], body).await
    }

    /// Polls a task (by id) until it is final; returns its document.
    pub async fn wait_task(&self, id: &str) -> serde_json::Value {
        for _ in 0..3000 {
            let r = self.call("GET", &format!("/api/v1/tasks/{id}"), None).await;
            let status = r.json["status"].as_str().unwrap_or("").to_owned();
            if ["succeeded", "failed", "cancelled", "interrupted", "refused"]
                .contains(&status.as_str())
            {
                return r.json;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} did not finish");
    }
}

/// A response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub text: String,
    pub json: serde_json::Value,
}

/// One HTTP/1.1 request on a fresh connection.
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
    let res = send.send_request(req).await.expect("response");
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

/// One parsed SSE event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: i64,
    pub event: String,
    pub data: serde_json::Value,
}

/// Opens an SSE stream and reads events until `done` says so (or 30 s pass).
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

/// [`sse`] for any request: a POST with a JSON body answered as a stream, too. An
/// event without an id (`accepted`) comes with id 0.
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
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut req = hyper::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let bytes = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Bytes::from(v.to_string())
        }
        None => Bytes::new(),
    };
    let res = send
        .send_request(req.body(Full::new(bytes)).expect("request"))
        .await
        .expect("response");
    assert_eq!(res.status().as_u16(), 200, "SSE status");
    let mut body = res.into_body();
    let mut buf = String::new();
    let mut out = Vec::new();
    let read = async {
        while !done(&out) {
            let Some(frame) = body.frame().await else {
                break;
            };
            let Ok(data) = frame.expect("frame").into_data() else {
                continue;
            };
            buf.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = v.parse().ok();
                    } else if let Some(v) = line.strip_prefix("event: ") {
                        event = v.to_owned();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push_str(v);
                    }
                }
                let id = id.or_else(|| (!event.is_empty()).then_some(0));
                if let Some(id) = id {
                    out.push(SseEvent {
                        id,
                        event,
                        data: serde_json::from_str(&data).expect("event data is JSON"),
                    });
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("SSE events arrive in time");
    out
}

/// Adds a `command` agent running `sh -c CMD`.
pub async fn add_agent(t: &TestServer, name: &str, cmd: &str) {
    let r = t
        .call(
            "POST",
            "/api/v1/agents",
            Some(serde_json::json!({"name": name, "kind": "command", "command": [cmd]})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// Creates a session for `agent`; returns its id.
pub async fn new_session(t: &TestServer, agent: &str) -> String {
    let r = t
        .call(
            "POST",
            "/api/v1/sessions",
            Some(serde_json::json!({"agent": agent})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json["id"].as_str().expect("id").to_owned()
}

/// Sends a message; returns the task id.
pub async fn send(t: &TestServer, session: &str, text: &str) -> String {
    let r = t
        .call(
            "POST",
            &format!("/api/v1/sessions/{session}/messages"),
            Some(serde_json::json!({"text": text})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.json["task"]["id"].as_str().expect("task id").to_owned()
}

/// Sends a request with a body the server may refuse before reading it (413): the
/// body is written on its own task, ignoring a broken pipe, while the response is
/// read. Returns the status and the JSON body.
pub async fn raw_oversized(socket: &Path, path: &str, body: String) -> (u16, serde_json::Value) {
    use tokio::io::AsyncReadExt;
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tokio::spawn(async move {
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(body.as_bytes()).await;
    });
    let mut buf = Vec::new();
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = rd.read(&mut chunk).await.unwrap_or(0);
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_owned)
                    })
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len || n == 0 {
                    let status = text[9..12].parse().expect("status");
                    let json =
                        serde_json::from_str(&text[end + 4..]).unwrap_or(serde_json::Value::Null);
                    return (status, json);
                }
            }
            assert!(n > 0, "connection closed before a response: {text}");
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response in time")
}
