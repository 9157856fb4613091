//! Shared test fixtures: temp homes, a real `sh -c` executor, a server to call (the
//! HTTP helpers are `berth-test-support`'s).
#![allow(dead_code)]

#[cfg(feature = "postgres")]
pub mod pg;

use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_core::event::AgentEvent;
use berth_web::executor::{BoxFuture, ExecEvent, Executor, Placement, TaskOutcome, TaskSpec};
use berth_web::server::{Server, ServerOptions};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

pub use berth_test_support::TempDir;
#[allow(unused_imports)] // Each suite uses some.
pub use berth_test_support::http::tokio::{
    Reply, SseEvent, oversized, raw_oversized, request, sse, sse_request,
};

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
        TestServer::open(home, max_parallel, None, None).await
    }

    /// A server whose tasks `executor` runs, rather than the `sh` one.
    pub async fn with_executor(executor: Arc<dyn Executor>, max_parallel: usize) -> TestServer {
        TestServer::open(TempDir::new("w"), max_parallel, None, Some(executor)).await
    }

    /// A server that also accepts daemons on a loopback listener; returns it and the
    /// listener's address.
    pub async fn with_daemons(
        config: berth_web::daemon::DaemonConfig,
    ) -> (TestServer, std::net::SocketAddr) {
        let t = TestServer::open(TempDir::new("w"), 4, Some(config), None).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = t.server.clone();
        tokio::spawn(async move {
            s.serve_web(
                berth_web::net::listener::WebListener::Plain(listener),
                String::from("web-token"),
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
        executor: Option<Arc<dyn Executor>>,
    ) -> TestServer {
        let executor = executor.unwrap_or_else(|| {
            Arc::new(ShExecutor {
                scratch: home.path().join("scratch"),
            })
        });
        let opts = ServerOptions {
            executor: Some(executor),
            scheduler: berth_web::scheduler::SchedulerConfig { max_parallel },
            display: Some(home_context(home.path())),
            channels: Some(Default::default()),
            daemons,
            http: None,
            database: None,
            observers: Vec::new(),
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
