//! A team server for end-to-end tests: `berth-server` on a free loopback port with its
//! own home, a short daemon heartbeat window, its first admin's token, and calls to its
//! listener as any member. Killed when dropped.

use crate::steps::{raw_http, s};
use crate::{TempDir, eventually, free_port, server_bin};
use serde_json::Value;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One running `berth-server`.
#[derive(Debug)]
pub struct Team {
    pub root: TempDir,
    /// Its `--home`.
    pub home: PathBuf,
    /// Its listener, `http://127.0.0.1:PORT`.
    pub url: String,
    /// The same, `127.0.0.1:PORT`.
    pub addr: String,
    /// The first admin's token.
    pub admin: String,
    child: Child,
}

impl Drop for Team {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Team {
    /// Starts it (logging to `server.log` in its root) and waits for its `serve.json`.
    pub fn start() -> Team {
        let root = TempDir::new("team");
        let home = root.path().join("server");
        let port = free_port();
        let log = std::fs::File::create(root.path().join("server.log")).unwrap();
        let child = Command::new(server_bin())
            .args(["--listen", &format!("127.0.0.1:{port}"), "--home", s(&home)])
            .env("BERTH_DAEMON_WINDOW_MS", "1500")
            .env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let info = eventually(30, || std::fs::read_to_string(home.join("serve.json")).ok())
            .expect("serve.json");
        let info: Value = serde_json::from_str(&info).unwrap();
        let url = info["url"].as_str().unwrap().to_owned();
        Team {
            addr: url.trim_start_matches("http://").to_owned(),
            url,
            admin: info["token"].as_str().unwrap().to_owned(),
            home,
            root,
            child,
        }
    }

    /// `berth-server ARGS --home HOME`.
    pub fn admin_cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new(server_bin())
            .args(args)
            .args(["--home", s(&self.home)])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `berth-server ARGS --json --home HOME`, which must succeed: its JSON.
    pub fn admin_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.admin_cmd(&all);
        assert!(
            out.status.success(),
            "berth-server {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// A new member `name` (by the admin's command): their token.
    pub fn member(&self, name: &str) -> String {
        self.admin_json(&["member", "add", name])["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// One request to the listener with extra headers; (status, JSON body or text).
    pub fn http(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        let (status, bytes) = raw_http(&mut stream, &head, body.as_bytes());
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, v)
    }

    /// One API call with `token` as the bearer.
    pub fn api(&self, token: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
        let auth = format!("Bearer {token}");
        self.http(method, path, &[("Authorization", &auth)], body)
    }

    /// Waits (up to 30 s) until `task`, as `token` reads it, has one of the statuses
    /// `want`; returns it.
    pub fn wait_status(&self, token: &str, task: &str, want: &[&str]) -> Value {
        let path = format!("/api/v1/tasks/{task}");
        eventually(30, || {
            let (st, t) = self.api(token, "GET", &path, "");
            (st == 200 && want.contains(&t["status"].as_str().unwrap_or(""))).then_some(t)
        })
        .unwrap_or_else(|| {
            panic!(
                "task {task} never became {want:?}: {:?}",
                self.api(token, "GET", &path, "")
            )
        })
    }
}
