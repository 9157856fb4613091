//! `berth-server --metrics-listen ADDR` end to end (issue 38): the real server binary
//! with one daemon on loopback. A task run through the daemon moves the
//! `berth_tasks_finished_total{status="succeeded"}` counter from 0 to 1; the daemon
//! shows online, the single SQLite server leads; `/metrics` needs no token, is served
//! on the metrics listener only, and that listener serves nothing else.
//!
//! `BERTH_DEPLOYED_SERVER=PATH` runs the same test against another `berth-server`
//! binary (the deployed build) instead of the one cargo builds.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{raw_http, s, write_script};
use berth_tests::{Berth, TempDir, eventually, free_port, server_bin};
use serde_json::{Value, json};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::time::Duration;

const PREFIX: &str = "berth-server metrics on http://";

struct Server {
    root: TempDir,
    /// The main listener, `127.0.0.1:PORT`.
    addr: String,
    /// The metrics listener, as the server's start-up line says.
    metrics: String,
    admin: String,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Server {
        let root = TempDir::new("metrics");
        let home = root.path().join("server");
        let log_path = root.path().join("server.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let child = Command::new(server_bin())
            .args([
                "--listen",
                &format!("127.0.0.1:{}", free_port()),
                "--home",
                s(&home),
                // Port 0: the server says which port it got.
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .env("BERTH_DAEMON_WINDOW_MS", "1500")
            .env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000")
            .env_remove("BERTH_METRICS_LISTEN")
            .env_remove("BERTH_DATABASE_URL")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let metrics = eventually(30, || {
            let text = std::fs::read_to_string(&log_path).ok()?;
            let line = text.lines().find_map(|l| l.strip_prefix(PREFIX))?;
            Some(line.strip_suffix("/metrics")?.to_owned())
        })
        .unwrap_or_else(|| {
            panic!(
                "no metrics line: {}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            )
        });
        let info: Value =
            serde_json::from_str(&std::fs::read_to_string(home.join("serve.json")).unwrap())
                .unwrap();
        let url = info["url"].as_str().unwrap();
        Server {
            addr: url.trim_start_matches("http://").to_owned(),
            metrics,
            admin: info["token"].as_str().unwrap().to_owned(),
            root,
            child,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// One request to `addr`; the status and the body as text.
    fn http(
        addr: &str,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
        if let Some(t) = token {
            head.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        let (status, bytes) = raw_http(&mut stream, &head, body.as_bytes());
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn api(&self, method: &str, path: &str, body: &str) -> (u16, Value) {
        let (status, text) = Server::http(&self.addr, method, path, Some(&self.admin), body);
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `GET /metrics` on the metrics listener, without a token.
    fn scrape(&self) -> String {
        let (status, text) = Server::http(&self.metrics, "GET", "/metrics", None, "");
        assert_eq!(status, 200, "{text}");
        text
    }
}

/// The value of `series` (`name{labels}`) in a scrape.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

const SUCCEEDED: &str = r#"berth_tasks_finished_total{status="succeeded"}"#;

#[test]
fn a_task_through_a_daemon_moves_the_metrics() {
    let server = Server::start();

    // Before anything ran: every family there, at zero; the only server leads.
    let before = server.scrape();
    assert_eq!(value(&before, SUCCEEDED), Some(0.0), "{before}");
    assert_eq!(
        value(&before, "berth_daemons_online"),
        Some(0.0),
        "{before}"
    );
    assert_eq!(value(&before, "berth_leader"), Some(1.0), "{before}");
    assert!(before.ends_with("# EOF\n"), "{before}");
    for line in before.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.starts_with("berth_"), "{line}");
    }

    // An agent, a daemon for the first admin, a session, a message.
    let script = server.root.path().join("echo.sh");
    write_script(&script, "#!/bin/sh\necho \"got $(cat)\"\n");
    let agent = json!({"name": "echo", "kind": "command", "command": [s(&script)]});
    let (st, v) = server.api("POST", "/api/v1/agents", &agent.to_string());
    assert_eq!(st, 201, "{v}");
    let (st, v) = server.api("POST", "/api/v1/daemon/tokens", r#"{"name":"laptop"}"#);
    assert_eq!(st, 201, "{v}");
    let mut laptop = Berth::new("metrics-laptop");
    laptop.daemon(&server.url(), v["token"].as_str().unwrap(), "laptop");
    let online = eventually(30, || {
        let text = server.scrape();
        (value(&text, "berth_daemons_online") == Some(1.0)).then_some(text)
    });
    assert!(online.is_some(), "the daemon never showed online");
    let (st, v) = server.api("POST", "/api/v1/sessions", r#"{"agent":"echo"}"#);
    assert_eq!(st, 201, "{v}");
    let session = v["id"].as_str().unwrap().to_owned();
    let (st, v) = server.api(
        "POST",
        &format!("/api/v1/sessions/{session}/messages"),
        r#"{"text":"hello"}"#,
    );
    assert_eq!(st, 202, "{v}");
    let task = v["task"]["id"].as_str().unwrap().to_owned();
    let finals = ["succeeded", "failed", "cancelled", "interrupted", "refused"];
    let done = eventually(60, || {
        let (st, t) = server.api("GET", &format!("/api/v1/tasks/{task}"), "");
        (st == 200 && finals.contains(&t["status"].as_str().unwrap_or(""))).then_some(t)
    })
    .expect("the task never ended");
    assert_eq!(done["status"], "succeeded", "{done}");

    // The counter moved by one; the daemon claimed it (one claim, one hand-over).
    let after = server.scrape();
    assert_eq!(value(&after, SUCCEEDED), Some(1.0), "{after}");
    assert_eq!(
        value(&after, r#"berth_tasks_finished_total{status="failed"}"#),
        Some(0.0),
        "{after}"
    );
    assert_eq!(value(&after, "berth_daemons_online"), Some(1.0), "{after}");
    assert_eq!(value(&after, "berth_leader"), Some(1.0), "{after}");
    assert_eq!(
        value(&after, "berth_dispatch_latency_seconds_count"),
        Some(1.0),
        "{after}"
    );
    assert_eq!(
        value(&after, "berth_claim_latency_seconds_count"),
        Some(1.0),
        "{after}"
    );
    for reason in ["queued", "directory_lock", "machine_offline", "no_machine"] {
        let series = format!("berth_tasks_waiting{{reason=\"{reason}\"}}");
        assert_eq!(value(&after, &series), Some(0.0), "{after}");
    }
    // No session id, path or name in any label.
    assert!(!after.contains(&session[..8]), "{after}");
    assert!(!after.contains("laptop"), "{after}");

    // Not on the main listener, with the admin's token or without.
    let (st, text) = Server::http(&server.addr, "GET", "/metrics", None, "");
    assert!(st == 401 || st == 404, "{st}: {text}");
    let (st, text) = Server::http(&server.addr, "GET", "/metrics", Some(&server.admin), "");
    assert_eq!(st, 404, "{text}");
    // And the metrics listener serves nothing else.
    for path in [
        "/",
        "/healthz",
        "/api/v1/health",
        "/api/v1/sessions",
        "/metrics/x",
    ] {
        let (st, text) = Server::http(&server.metrics, "GET", path, Some(&server.admin), "");
        assert_eq!(st, 404, "{path}: {text}");
    }
    let (st, _) = Server::http(&server.metrics, "POST", "/metrics", None, "");
    assert_eq!(st, 405);
}
