//! `berth-server --database postgres://…` end to end (issue 16): the real server binary
//! on a real PostgreSQL server (a throwaway cluster run as a non-root user, see
//! `scripts/pg-cluster.sh`), a real daemon on a machine of its own, tasks through the
//! API. Nothing is kept in the server's home: a server SIGKILLed mid-task and started
//! again from another, empty home finds every session, task and transcript event, and
//! the task it was running `interrupted`. A second server on the same database is
//! refused while the first serves it.

#[path = "../../web/tests/common/pg.rs"]
mod pg;

use berth_tests::steps::{raw_http, s, write_script};
use berth_tests::{Berth, TempDir, berth_bin, eventually, free_port};
use serde_json::{Value, json};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An agent that echoes its prompt; a prompt starting `slow` sleeps a minute.
const ECHO: &str = r#"p=$(cat); echo "got=$p"; case "$p" in slow*) exec sleep 60;; esac"#;

fn server_bin() -> PathBuf {
    let bin = berth_bin().with_file_name("berth-server");
    if !bin.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "berth-web", "--bin", "berth-server"])
            .status()
            .unwrap();
        assert!(status.success());
    }
    bin
}

struct Replica {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(home: &Path, port: u16, database: &str, admin: &str, log: PathBuf) -> Child {
    let out = std::fs::File::create(&log).unwrap();
    Command::new(server_bin())
        .args(["--listen", &format!("127.0.0.1:{port}"), "--home", s(home)])
        .args(["--database", database])
        .env("BERTH_ADMIN_TOKEN", admin)
        .env("BERTH_DAEMON_WINDOW_MS", "1500")
        .env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap()
}

impl Replica {
    fn start(root: &Path, tag: &str, port: u16, database: &str, admin: &str) -> Replica {
        let home = root.join(tag);
        let log = root.join(format!("{tag}.log"));
        let child = start(&home, port, database, admin, log.clone());
        eventually(30, || std::fs::read_to_string(home.join("serve.json")).ok()).unwrap_or_else(
            || {
                panic!(
                    "{tag} did not start: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            },
        );
        Replica {
            child,
            addr: format!("127.0.0.1:{port}"),
            log,
        }
    }

    fn api(&self, token: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n",
            self.addr
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        let (status, bytes) = raw_http(&mut stream, &head, body.as_bytes());
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, v)
    }

    fn wait_status(&self, token: &str, task: &str, want: &[&str]) -> Value {
        eventually(30, || {
            let (st, t) = self.api(token, "GET", &format!("/api/v1/tasks/{task}"), "");
            (st == 200 && want.contains(&t["status"].as_str().unwrap_or(""))).then_some(t)
        })
        .unwrap_or_else(|| {
            panic!(
                "task {task} never became {want:?}: {:?}\n{}",
                self.api(token, "GET", &format!("/api/v1/tasks/{task}"), ""),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )
        })
    }

    fn send(&self, token: &str, session: &str, text: &str) -> String {
        let (st, v) = self.api(
            token,
            "POST",
            &format!("/api/v1/sessions/{session}/messages"),
            &json!({ "text": text }).to_string(),
        );
        assert_eq!(st, 202, "{v}");
        v["task"]["id"].as_str().unwrap().to_owned()
    }
}

/// The statuses of a session's tasks, oldest first.
fn statuses(r: &Replica, token: &str, session: &str) -> Vec<String> {
    let (st, tasks) = r.api(
        token,
        "GET",
        &format!("/api/v1/tasks?session={session}"),
        "",
    );
    assert_eq!(st, 200, "{tasks}");
    tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_server_on_postgres_keeps_nothing_in_its_home_and_survives_a_sigkill() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let database = rt.block_on(pg::fresh_database());
    let root = TempDir::new("pg-e2e");
    let admin = format!("{:064x}", 0xbe27_u64);
    let port = free_port();
    let first = Replica::start(root.path(), "one", port, &database, &admin);

    let script = root.path().join("echo.sh");
    write_script(&script, &format!("#!/bin/sh\n{ECHO}\n"));
    let agent = json!({"name": "echo", "kind": "command", "command": [s(&script)]}).to_string();
    assert_eq!(first.api(&admin, "POST", "/api/v1/agents", &agent).0, 201);
    let (st, v) = first.api(
        &admin,
        "POST",
        "/api/v1/daemon/tokens",
        r#"{"name":"laptop"}"#,
    );
    assert_eq!(st, 201, "{v}");
    let mut machine = Berth::new("pg-machine");
    machine.daemon(
        &format!("http://{}", first.addr),
        v["token"].as_str().unwrap(),
        "laptop",
    );
    let (st, v) = first.api(&admin, "POST", "/api/v1/sessions", r#"{"agent":"echo"}"#);
    assert_eq!(st, 201, "{v}");
    let session = v["id"].as_str().unwrap().to_owned();
    for i in 0..3 {
        let task = first.send(&admin, &session, &format!("hello {i}"));
        first.wait_status(&admin, &task, &["succeeded"]);
    }
    assert!(
        !root.path().join("one/berth.db").exists(),
        "on PostgreSQL the home holds no database"
    );

    // A second server on the same database is refused, and says why.
    let mut other = start(
        &root.path().join("two"),
        free_port(),
        &database,
        &admin,
        root.path().join("two.log"),
    );
    let status =
        eventually(30, || other.try_wait().ok().flatten()).expect("the second server exits");
    assert!(!status.success());
    let said = std::fs::read_to_string(root.path().join("two.log")).unwrap();
    assert!(
        said.contains("another berth-server is serving the database"),
        "{said}"
    );
    assert!(
        !said.contains(&database),
        "the password is never printed: {said}"
    );

    // SIGKILL mid-task; a new server from an empty home, on the same address.
    let slow = first.send(&admin, &session, "slow one");
    first.wait_status(&admin, &slow, &["running"]);
    drop(first);
    let second = Replica::start(root.path(), "three", port, &database, &admin);
    let t = second.wait_status(&admin, &slow, &["interrupted"]);
    assert_eq!(t["error_code"], "interrupted", "{t}");
    assert_eq!(
        statuses(&second, &admin, &session),
        ["succeeded", "succeeded", "succeeded", "interrupted"]
    );
    // The daemon reconnects to the new server and runs the next task.
    let after = second.send(&admin, &session, "after the restart");
    second.wait_status(&admin, &after, &["succeeded"]);
}
