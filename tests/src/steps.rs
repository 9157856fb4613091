//! The CLI and HTTP steps end-to-end tests share: agents, sessions, tasks, raw
//! requests to the control socket, process checks.

use crate::{Berth, eventually};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `git ARGS` in `dir` as a test's user (name and email set), asserts success
/// and returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=T", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Declares side channels: `b`'s user settings let agents write `paths`, which the
/// fence refuses otherwise (a test's markers and logs outside the agent's directory).
/// Replaces the user settings.
pub fn fence_write(b: &Berth, paths: &[&Path]) {
    let list: Vec<String> = paths
        .iter()
        .map(|p| serde_json::to_string(s(p)).expect("a JSON string"))
        .collect();
    std::fs::write(
        b.config.join("settings.jsonc"),
        format!(r#"{{ "fence": {{ "write": [{}] }} }}"#, list.join(", ")),
    )
    .expect("write the user settings");
}

/// A folder beside the test (outside Berth's home and config, which the fence hides)
/// that `b`'s agents may write: created, declared with [`fence_write`], returned.
pub fn side_channel(b: &Berth) -> std::path::PathBuf {
    let side = b.root.path().join("side");
    std::fs::create_dir_all(&side).expect("create the side channel");
    fence_write(b, &[&side]);
    side
}

pub fn add_command_agent(b: &Berth, name: &str, script: &str) {
    b.ok(&[
        "agent",
        "add",
        name,
        "--kind",
        "command",
        "--command",
        "sh",
        "-c",
        script,
    ]);
}

pub fn new_session(b: &Berth, agent: &str, dir: Option<&Path>) -> String {
    let mut args = vec!["session", "new", "--agent", agent, "--json"];
    if let Some(d) = dir {
        args.extend(["--dir", s(d)]);
    }
    b.json(&args)["id"].as_str().unwrap().to_owned()
}

pub fn tasks(b: &Berth, session: &str) -> Vec<Value> {
    let v = b.json(&["task", "list", "--session", session, "--json"]);
    v.as_array().cloned().unwrap_or_default()
}

pub fn task(b: &Berth, session: &str, id: &str) -> Option<Value> {
    tasks(b, session).into_iter().find(|t| t["id"] == id)
}

pub fn is_final(t: &Value) -> bool {
    matches!(
        t["status"].as_str(),
        Some("succeeded" | "failed" | "cancelled" | "interrupted" | "refused")
    )
}

/// Sends without waiting; returns the task id.
pub fn send_detached(b: &Berth, session: &str, msg: &str) -> String {
    let out = b.ok(&["send", session, msg, "--detach", "--json"]);
    let last = out.lines().last().expect("a line");
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["task"]["id"]
        .as_str()
        .or_else(|| v["id"].as_str())
        .unwrap_or_else(|| panic!("no task id in {out}"))
        .to_owned()
}

/// Waits for a task to end and returns it.
pub fn wait_final(b: &Berth, session: &str, id: &str) -> Value {
    eventually(60, || task(b, session, id).filter(is_final))
        .unwrap_or_else(|| panic!("task {id} did not end: {:?}", task(b, session, id)))
}

/// Whether a process still exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| {
            st.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// One raw HTTP/1.1 request over a stream: `head` (the request line and headers,
/// each ending in CRLF), then the body's length, `Connection: close` and the body.
/// Returns the answer's status and body (a chunked one joined).
pub fn raw_http(stream: &mut (impl Read + Write), head: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let req = format!(
        "{head}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(req.as_bytes()).unwrap();
    // A server may answer (413) before reading all of a large body.
    let _ = stream.write_all(body);
    let answer = berth_test_support::http::read_answer(&mut std::io::BufReader::new(stream))
        .unwrap_or_else(|e| panic!("no answer to {head:?}: {e}"));
    (answer.status, answer.body)
}

pub fn control(b: &Berth, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let mut sock = UnixStream::connect(b.home.join("berth.sock")).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head =
        format!("{method} {path} HTTP/1.1\r\nHost: berth\r\nContent-Type: application/json\r\n");
    let (status, body) = raw_http(&mut sock, &head, body);
    let v = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "{method} {path}: not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    });
    (status, v)
}

/// Asserts the contract's error shape and returns its code.
pub fn error_code(what: &str, v: &Value) -> String {
    let e = &v["error"];
    for k in ["code", "message", "hint"] {
        assert!(
            e[k].as_str().is_some_and(|s| !s.is_empty()),
            "{what}: error.{k} missing: {v}"
        );
    }
    e["code"].as_str().unwrap().to_owned()
}

/// `berth send --json SESSION TEXT`: the exit code, the transcript events it printed,
/// and the final task document (its last line).
pub fn send_json(b: &Berth, session: &str, text: &str) -> (i32, Vec<Value>, Value) {
    let out = b.run(&["send", "--json", session, text]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let last = lines.pop().expect("the final task line");
    let task = last["task"].clone();
    assert!(
        task.is_object(),
        "the last line is the task: {last}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), lines, task)
}

/// Slack's v0 signature of `body` sent at `ts`: `v0=` and hex HMAC-SHA256 over
/// `v0:ts:body` with the signing secret.
pub fn slack_sign(secret: &str, ts: &str, body: &[u8]) -> String {
    format!(
        "v0={}",
        hmac_hex(secret.as_bytes(), &[format!("v0:{ts}:").as_bytes(), body])
    )
}

/// HMAC-SHA256 of `parts` (one after the other) with `key`, in lowercase hex: as a
/// platform or a receiver computes it, with the `hmac` crate, not Berth's code.
pub fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
    use hmac::{Hmac, KeyInit, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The installed agent CLI `name`: `$BERTH_AGENT_CLIS/node_modules/.bin/NAME`, by
/// default under `~/.cache/berth-agents` (`scripts/test.sh` installs the pinned ones).
pub fn agent_cli(name: &str) -> std::path::PathBuf {
    let dir = std::env::var_os("BERTH_AGENT_CLIS")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| std::path::PathBuf::from(h).join(".cache/berth-agents"))
        })
        .expect("BERTH_AGENT_CLIS or HOME");
    let bin = dir.join("node_modules/.bin").join(name);
    assert!(
        bin.exists(),
        "{} is not installed; run scripts/test.sh, which installs the pinned agent CLIs",
        bin.display()
    );
    bin
}

/// The payloads of a transcript's agent events of `kind` (`text`, `tool`, `denied`…).
pub fn agent_events<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "agent" && e["payload"]["type"] == kind)
        .map(|e| &e["payload"])
        .collect()
}

/// The task records (`refs/berth/<task>/{before,after}`) in every shadow repository of
/// `b`'s home: the change records `berth task diff` and `undo` read.
pub fn shadow_refs(b: &Berth) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(b.home.join("snapshots")) else {
        return out;
    };
    for d in dirs.flatten() {
        let refs = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(d.path())
            .args(["for-each-ref", "--format=%(refname)", "refs/berth/"])
            .output()
            .expect("run git");
        out.extend(
            String::from_utf8_lossy(&refs.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    out.sort();
    out
}

/// A scripted ACP agent (`tests/src/peers/ask_peer.py`), registered as `name` with
/// `--permissions ask`: each prompt line `run: CMD` asks Berth's permission to run
/// CMD, and runs it if allowed.
pub fn add_ask_peer(b: &Berth, name: &str) {
    let peer = write_peer(b.root.path(), "ask_peer.py");
    add_ask_agent(b, name, &["python3", s(&peer)]);
}

/// Writes the scripted peer `file` (`ask_peer.py` or `stream_peer.py`) into `dir`,
/// next to the JSON-RPC module the peers share (`peers/acp_rpc.py`), and returns its
/// path.
pub fn write_peer(dir: &std::path::Path, file: &str) -> std::path::PathBuf {
    let source = match file {
        "ask_peer.py" => include_str!("peers/ask_peer.py"),
        "stream_peer.py" => include_str!("peers/stream_peer.py"),
        other => panic!("no scripted peer {other}"),
    };
    std::fs::write(dir.join("acp_rpc.py"), include_str!("peers/acp_rpc.py")).unwrap();
    let peer = dir.join(file);
    std::fs::write(&peer, source).unwrap();
    peer
}

/// A scripted ACP agent that streams (`tests/src/peers/stream_peer.py`: each prompt
/// line a step, `chunks: A|B|C` its message's pieces), registered as `name` with
/// `permissions`.
pub fn add_stream_peer(b: &Berth, name: &str, permissions: &str) {
    let peer = write_peer(b.root.path(), "stream_peer.py");
    add_acp_agent(b, name, permissions, &["python3", s(&peer)]);
}

/// A session's transcript stream on the running `berth serve`'s web listener (TCP on
/// loopback, as the browser reads it), from its start; reads wait at most `timeout`.
pub fn web_events(
    b: &Berth,
    session: &str,
    follow: bool,
    timeout: Duration,
) -> berth_test_support::http::Events<std::io::BufReader<std::net::TcpStream>> {
    use berth_test_support::http::{Events, Request};
    let (url, token) = b.serve_info();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let s = std::net::TcpStream::connect(&addr).expect("connect to the web listener");
    s.set_read_timeout(Some(timeout)).expect("read timeout");
    let follow = if follow { "" } else { "&follow=false" };
    let req = Request::get(&format!(
        "/api/v1/sessions/{session}/events?token={token}{follow}"
    ));
    Events::open(s, &addr, req).expect("the event stream")
}

/// Registers `command` as ACP agent `name` under the `ask` policy.
pub fn add_ask_agent(b: &Berth, name: &str, command: &[&str]) {
    add_acp_agent(b, name, "ask", command);
}

/// Registers `command` as ACP agent `name` with `permissions`.
pub fn add_acp_agent(b: &Berth, name: &str, permissions: &str, command: &[&str]) {
    let mut args = vec![
        "agent",
        "add",
        name,
        "--kind",
        "acp",
        "--permissions",
        permissions,
        "--command",
    ];
    args.extend_from_slice(command);
    b.ok(&args);
}

/// The requests `berth approvals --json` lists as waiting, once there are `n`.
pub fn waiting_approvals(b: &Berth, n: usize) -> Vec<Value> {
    eventually(30, || {
        let v = b.json(&["approvals", "--json"]);
        let list = v["approvals"].as_array()?.clone();
        (list.len() >= n).then_some(list)
    })
    .unwrap_or_else(|| panic!("{n} requests never waited: {}", b.ok(&["approvals"])))
}
