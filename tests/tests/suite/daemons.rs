//! Remote daemons against the real binaries (issue 6): one `berth serve
//! --allow-daemons` and `berth daemon`s in their own homes, all on loopback.
//!
//! - a session bound on machine A runs only on A, whichever machine sends to it;
//! - A stopped: its tasks wait (`waiting_daemon`, naming A), nothing else runs them;
//!   A back: they run, in order;
//! - wrong, revoked and other machines' tokens get 401 and claim nothing;
//! - a daemon killed mid-task: the task ends `interrupted` within the window, and the
//!   agent's processes die with the daemon;
//! - the connection cut mid-task: the daemon reconnects and the transcript has every
//!   line once, in order.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{
    add_command_agent, alive, error_code, is_final, raw_http, s, send_detached, task, wait_final,
    write_script,
};
use berth_tests::{Berth, eventually};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The heartbeat window the server runs with: short, so offline shows quickly.
const WINDOW_MS: u64 = 1500;

/// An agent that says where it ran and what it was told.
const REPORTER: &str = r#"printf 'cwd=%s\n' "$PWD"; echo "prompt=$(cat)""#;

/// How daemons reach the server: plain http on loopback, or https with a CA made
/// for the test (the fault tests run both ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Net {
    Http,
    Https,
}

/// `berth serve --allow-daemons` with a short window; returns it and its URL.
fn server(tag: &str, window_ms: u64) -> (Berth, String) {
    let (srv, url, _) = server_on(tag, window_ms, Net::Http);
    (srv, url)
}

/// [`server`] over `net`; with https, also the CA file daemons must trust.
fn server_on(tag: &str, window_ms: u64, net: Net) -> (Berth, String, Option<PathBuf>) {
    let mut srv = Berth::new(tag);
    srv.env("BERTH_DAEMON_WINDOW_MS", &window_ms.to_string());
    srv.env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000");
    let ca = match net {
        Net::Http => {
            srv.serve_with(&["--allow-daemons"]);
            None
        }
        Net::Https => {
            let pki = berth_tests::tls::Pki::generate(&srv.root.path().join("pki"), tag);
            srv.serve_tls(&pki, &["--allow-daemons"]);
            Some(pki.ca)
        }
    };
    let (url, _) = srv.serve_info();
    (srv, url, ca)
}

/// A machine whose daemon trusts `ca` (when the server speaks https).
fn machine(tag: &str, ca: &Option<PathBuf>) -> Berth {
    let mut b = Berth::new(tag);
    if let Some(ca) = ca {
        b.env("BERTH_CA_FILE", s(ca));
    }
    b
}

fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A project directory in `b`'s home.
fn project(b: &Berth, name: &str) -> std::path::PathBuf {
    let dir = b.user_home.join("code").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn bound_session(b: &Berth, agent: &str, dir: &Path) -> Value {
    b.json(&[
        "session",
        "new",
        "--agent",
        agent,
        "--dir",
        s(dir),
        "--json",
    ])
}

fn session(b: &Berth, id: &str) -> Value {
    b.json(&["session", "show", id, "--json"])
}

/// `berth send --json` to the end: the agent's text lines and the final task.
fn send(b: &Berth, session: &str, msg: &str) -> (Vec<String>, Value) {
    let out = b.run(&["send", session, msg, "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let task = events.pop().map(|v| v["task"].clone()).unwrap_or_else(|| {
        panic!(
            "no output; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let texts = events
        .iter()
        .filter(|e| e["kind"] == "agent" && e["payload"]["type"] == "text")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    (texts, task)
}

/// Waits for a process to exit by itself; its exit code.
fn exit_code(child: &mut std::process::Child, secs: u64) -> Option<i32> {
    eventually(secs, || child.try_wait().ok().flatten()).and_then(|s| s.code())
}

#[test]
fn a_bound_session_runs_only_on_its_machine_and_waits_for_it() {
    a_bound_session_runs_only_on_its_machine_and_waits_for_it_on(Net::Http);
}

#[test]
fn a_bound_session_runs_only_on_its_machine_and_waits_for_it_over_https() {
    a_bound_session_runs_only_on_its_machine_and_waits_for_it_on(Net::Https);
}

fn a_bound_session_runs_only_on_its_machine_and_waits_for_it_on(net: Net) {
    let (srv, url, ca) = server_on("d-srv", WINDOW_MS, net);
    let (ta, tb) = (srv.daemon_token("a"), srv.daemon_token("b"));
    let mut a = machine("d-a", &ca);
    a.daemon(&url, &ta, "laptop-a");
    let mut b = machine("d-b", &ca);
    b.daemon(&url, &tb, "laptop-b");

    // Both machines are listed online on the server.
    let listed = srv.json(&["daemon", "token", "list", "--json"]);
    for name in ["a", "b"] {
        let t = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("token {name} not listed: {listed}"));
        assert_eq!(t["online"], true, "{t}");
    }

    let script = srv.root.path().join("reporter.sh");
    write_script(&script, REPORTER);
    // Agents are the server's to register (a daemon's token may not: it crosses the
    // network, and a command is the server's shell).
    add_command_agent(&srv, "rep", s(&script));

    // Bound through A's CLI: validated on A, bound on A.
    let app = project(&a, "app");
    let created = bound_session(&a, "rep", &app);
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["binding"]["daemon_name"], "laptop-a", "{created}");
    assert_eq!(created["binding"]["dir"], canonical(&app), "{created}");
    assert_eq!(created["binding"]["display"], "~/code/app", "{created}");

    // Sent from B's machine, it runs on A, in the directory.
    let seen_from_b = session(&b, &id);
    assert_eq!(seen_from_b["binding"]["daemon_name"], "laptop-a");
    let (texts, t1) = send(&b, &id, "one");
    assert_eq!(t1["status"], "succeeded", "{t1}");
    assert!(
        texts.contains(&format!("cwd={}", canonical(&app))),
        "{texts:?}"
    );

    // And a session bound on B runs on B, sent from A.
    let lib = project(&b, "lib");
    let on_b = bound_session(&b, "rep", &lib);
    let (texts, tb1) = send(&a, on_b["id"].as_str().unwrap(), "hi");
    assert_eq!(tb1["status"], "succeeded", "{tb1}");
    assert!(
        texts.contains(&format!("cwd={}", canonical(&lib))),
        "{texts:?}"
    );

    // A goes away. Its session's tasks wait for it, naming it; B never takes them.
    assert_eq!(a.stop("-TERM").and_then(|s| s.code()), Some(0));
    // A daemon that stops cleanly says so: offline at once, not after the window.
    let shown = session(&srv, &id);
    assert_eq!(shown["binding"]["state"], "machine_offline", "{shown}");
    let t2 = send_detached(&b, &id, "two");
    let t3 = send_detached(&b, &id, "three");
    let waiting = eventually(20, || {
        task(&b, &id, &t2).filter(|t| t["status"] == "waiting_daemon")
    })
    .unwrap_or_else(|| panic!("task did not wait: {:?}", task(&b, &id, &t2)));
    let reason = waiting["wait_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("laptop-a"), "{waiting}");
    let shown = session(&srv, &id);
    assert_eq!(shown["binding"]["state"], "machine_offline", "{shown}");
    let human =
        String::from_utf8_lossy(&srv.run(&["task", "list", "--session", &id]).stdout).into_owned();
    assert!(
        human.contains("waiting_daemon") && human.contains("laptop-a"),
        "{human}"
    );
    std::thread::sleep(Duration::from_millis(2 * WINDOW_MS));
    for t in [&t2, &t3] {
        let now = task(&srv, &id, t).unwrap();
        assert!(
            !is_final(&now) && now["status"] != "running",
            "ran without its machine: {now}"
        );
    }

    // A returns: they run there, in order.
    a.daemon(&url, &ta, "laptop-a");
    let done2 = wait_final(&srv, &id, &t2);
    let done3 = wait_final(&srv, &id, &t3);
    for d in [&done2, &done3] {
        assert_eq!(d["status"], "succeeded", "{d}");
        assert_eq!(d["work_dir"], canonical(&app), "{d}");
    }
    let list = srv.json(&["task", "list", "--session", &id, "--json"]);
    let order: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(order, [t1["id"].as_str().unwrap(), &t2, &t3]);
    let finished = |t: &Value| t["finished_at"].as_str().unwrap_or_default().to_owned();
    let started = |t: &Value| t["started_at"].as_str().unwrap_or_default().to_owned();
    let full: Vec<&Value> = list.as_array().unwrap().iter().collect();
    assert!(
        finished(full[1]) <= started(full[2]),
        "two ran before three ended: {list}"
    );
    assert_eq!(session(&srv, &id)["binding"]["state"], "ok");

    // Deleting a session bound on B from the server's machine: B keeps its task's
    // change record (pruned there in time), and the answer says so.
    let on_b_id = on_b["id"].as_str().unwrap();
    let tb1_id = tb1["id"].as_str().unwrap();
    let b_refs = |who: &Berth| {
        berth_tests::steps::shadow_refs(who)
            .into_iter()
            .filter(|r| r.contains(tb1_id))
            .count()
    };
    assert_eq!(b_refs(&b), 2, "tb1's record is on B");
    let gone = srv.json(&["session", "delete", on_b_id, "--yes", "--json"]);
    assert_eq!(
        (&gone["records_removed"], &gone["records_elsewhere"]),
        (&json!(0), &json!(1)),
        "{gone}"
    );
    assert_eq!(b_refs(&b), 2, "B's record stays");
    // Deleted through A's own CLI (its daemon's socket), A's records go with it.
    let mine = |who: &Berth| {
        berth_tests::steps::shadow_refs(who)
            .into_iter()
            .filter(|r| order.iter().any(|t| r.contains(t)))
            .count()
    };
    assert_eq!(mine(&a), 6, "three tasks' records on A");
    let gone = a.json(&["session", "delete", &id, "--yes", "--json"]);
    assert_eq!(
        (&gone["records_removed"], &gone["records_elsewhere"]),
        (&json!(3), &json!(0)),
        "{gone}"
    );
    assert_eq!(mine(&a), 0);
}

/// A raw daemon call to the server's listener.
fn daemon_call(url: &str, path: &str, token: &str, machine: &str, body: &str) -> (u16, Value) {
    let addr = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         x-berth-machine: {machine}\r\nContent-Type: application/json\r\n"
    );
    let (status, body) = raw_http(&mut stream, &head, body.as_bytes());
    let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
    (status, v)
}

#[test]
fn wrong_revoked_and_other_machines_tokens_are_refused() {
    let (srv, url) = server("d-tok", WINDOW_MS);
    let ta = srv.daemon_token("a");

    // A wrong token: the daemon stops with the token error; nothing registers.
    let x = Berth::new("d-x");
    let mut wrong = x
        .cmd()
        .args([
            "daemon",
            "--server",
            &url,
            "--token",
            "berthd_0000",
            "--name",
            "x",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        exit_code(&mut wrong, 30),
        Some(1),
        "a wrong token must stop the daemon"
    );
    let mut err = String::new();
    wrong
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        err.contains("error:") && err.contains("token") && err.contains("hint:"),
        "{err}"
    );

    let mut a = Berth::new("d-a");
    a.daemon(&url, &ta, "laptop-a");
    let machine_a = std::fs::read_to_string(a.home.join("machine-id"))
        .unwrap()
        .trim()
        .to_owned();

    // A's token from another machine (another home, so another machine id).
    let c = Berth::new("d-c");
    let mut other = c
        .cmd()
        .args(["daemon", "--server", &url, "--token", &ta, "--name", "c"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        exit_code(&mut other, 30),
        Some(1),
        "another machine's token"
    );
    let mut err = String::new();
    other
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("token"), "{err}");

    // The protocol itself: every call without the right token and machine is 401.
    let claim = r#"{"instance":"x","wait_ms":0}"#;
    for (tok, machine) in [
        ("berthd_bogus", machine_a.as_str()),
        (ta.as_str(), "another-machine"),
        ("", machine_a.as_str()),
    ] {
        let (status, v) = daemon_call(&url, "/api/v1/daemon/claim", tok, machine, claim);
        assert_eq!(status, 401, "{tok} {machine}: {v}");
        assert_eq!(error_code("claim", &v), "unauthorized");
    }
    let (status, _) = daemon_call(
        &url,
        "/api/v1/daemon/api/sessions",
        "berthd_bogus",
        &machine_a,
        "{}",
    );
    assert_eq!(
        status, 401,
        "the forwarded control API is behind the token too"
    );

    // A session bound on A, then A's token revoked: A stops, the task waits,
    // nothing is claimed.
    let script = srv.root.path().join("reporter.sh");
    write_script(&script, REPORTER);
    add_command_agent(&srv, "rep", s(&script));
    let app = project(&a, "app");
    let id = bound_session(&a, "rep", &app)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoked = srv.json(&["daemon", "token", "revoke", "a", "--json"]);
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let t = send_detached(&srv, &id, "after revoke");
    let waiting = eventually(20, || {
        task(&srv, &id, &t).filter(|t| t["status"] == "waiting_daemon")
    });
    assert!(waiting.is_some(), "{:?}", task(&srv, &id, &t));
    let (status, v) = daemon_call(&url, "/api/v1/daemon/claim", &ta, &machine_a, claim);
    assert_eq!(status, 401, "{v}");
    let stopped = eventually(30, || a.server_exit());
    assert_eq!(stopped, Some(1), "a daemon whose token is revoked stops");
    assert_eq!(task(&srv, &id, &t).unwrap()["status"], "waiting_daemon");
}

/// An agent that reports its pid, then sleeps for a long time.
const SLOW: &str = r#"echo "pid=$$"; sleep 60; echo done"#;

#[test]
fn a_daemon_killed_mid_task_leaves_the_task_interrupted() {
    a_daemon_killed_mid_task_leaves_the_task_interrupted_on(Net::Http);
}

#[test]
fn a_daemon_killed_mid_task_leaves_the_task_interrupted_over_https() {
    a_daemon_killed_mid_task_leaves_the_task_interrupted_on(Net::Https);
}

fn a_daemon_killed_mid_task_leaves_the_task_interrupted_on(net: Net) {
    let (srv, url, ca) = server_on("d-kill", WINDOW_MS, net);
    let ta = srv.daemon_token("a");
    let mut a = machine("d-a", &ca);
    a.daemon(&url, &ta, "laptop-a");
    let script = srv.root.path().join("slow.sh");
    write_script(&script, SLOW);
    add_command_agent(&srv, "slow", s(&script));
    let app = project(&a, "app");
    let id = bound_session(&a, "slow", &app)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = send_detached(&srv, &id, "work");
    // The agent started: its pid is in the transcript.
    let pid: u32 = eventually(20, || agent_pid(&srv, &id)).expect("the agent reported its pid");
    assert!(alive(pid));
    a.stop("-KILL");
    let ended = eventually(20, || task(&srv, &id, &t).filter(is_final))
        .unwrap_or_else(|| panic!("{:?}", task(&srv, &id, &t)));
    assert_eq!(ended["status"], "interrupted", "{ended}");
    assert!(
        ended["error"]
            .as_str()
            .unwrap_or_default()
            .contains("laptop-a"),
        "{ended}"
    );
    assert_eq!(session(&srv, &id)["binding"]["state"], "machine_offline");
    assert!(
        eventually(10, || (!alive(pid)).then_some(())).is_some(),
        "the agent outlived its daemon"
    );
}

/// The pid a `SLOW` agent printed, from the session's transcript.
fn agent_pid(b: &Berth, session: &str) -> Option<u32> {
    let (_, events) = transcript(b, session);
    events.iter().find_map(|e| {
        e["payload"]["text"]
            .as_str()?
            .strip_prefix("pid=")?
            .parse()
            .ok()
    })
}

/// A session's stored transcript over the control socket (SSE replay, read until
/// the stream goes quiet): (status line, events).
fn transcript(b: &Berth, session: &str) -> (String, Vec<Value>) {
    let mut sock = std::os::unix::net::UnixStream::connect(b.home.join("berth.sock")).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    write!(
        sock,
        "GET /api/v1/sessions/{session}/events HTTP/1.1\r\nHost: berth\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match sock.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let events = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    (status, events)
}

/// A TCP relay between a daemon and the server that can cut every connection and
/// refuse new ones for a while: a network outage on loopback.
struct Relay {
    port: u16,
    scheme: &'static str,
    down: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(upstream: String, scheme: &str) -> Relay {
        let scheme = if scheme == "https" { "https" } else { "http" };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let down = Arc::new(AtomicBool::new(false));
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, l) = (down.clone(), live.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { break };
                if d.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                {
                    let mut live = l.lock().unwrap();
                    live.push(client.try_clone().unwrap());
                    live.push(server.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Write);
                    });
                }
            }
        });
        Relay {
            port,
            scheme,
            down,
            live,
        }
    }

    fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", self.scheme, self.port)
    }

    /// Cuts every connection and refuses new ones for `d`.
    fn outage(&self, d: Duration) {
        self.down.store(true, Ordering::SeqCst);
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        std::thread::sleep(d);
        self.down.store(false, Ordering::SeqCst);
    }
}

#[test]
fn a_daemon_reconnects_without_losing_or_repeating_events() {
    a_daemon_reconnects_without_losing_or_repeating_events_on(Net::Http);
}

#[test]
fn a_daemon_reconnects_without_losing_or_repeating_events_over_https() {
    a_daemon_reconnects_without_losing_or_repeating_events_on(Net::Https);
}

fn a_daemon_reconnects_without_losing_or_repeating_events_on(net: Net) {
    let window = 4000;
    let (srv, url, ca) = server_on("d-net", window, net);
    let ta = srv.daemon_token("a");
    let (scheme, upstream) = url.split_once("://").unwrap();
    let relay = Relay::start(upstream.to_owned(), scheme);
    let mut a = machine("d-a", &ca);
    a.daemon(&relay.url(), &ta, "laptop-a");
    let script = srv.root.path().join("count.sh");
    write_script(
        &script,
        "cat >/dev/null; i=1; while [ $i -le 400 ]; do echo line-$i; i=$((i+1)); sleep 0.005; done",
    );
    add_command_agent(&srv, "count", s(&script));
    let app = project(&a, "app");
    let id = bound_session(&a, "count", &app)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let t = send_detached(&srv, &id, "count");
    eventually(20, || {
        let (_, events) = transcript(&srv, &id);
        events
            .iter()
            .any(|e| e["payload"]["text"] == "line-20")
            .then_some(())
    })
    .expect("the agent runs");
    relay.outage(Duration::from_millis(800));
    let done = wait_final(&srv, &id, &t);
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, events) = transcript(&srv, &id);
    let lines: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "agent")
        .filter_map(|e| e["payload"]["text"].as_str())
        .filter(|t| t.starts_with("line-"))
        .collect();
    let want: Vec<String> = (1..=400).map(|i| format!("line-{i}")).collect();
    assert_eq!(lines, want, "every line once, in order");
}
