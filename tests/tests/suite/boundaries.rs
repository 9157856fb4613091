//! Server-side boundaries that broke when someone tried to cross them (issue 33), end
//! to end against the real binaries: a desktop server (`berth serve --allow-daemons`)
//! and a daemon on a machine of its own, whose home is not under `/home` (every test
//! home lies under a temporary directory: `/tmp/…/home/NAME`).
//!
//! - break 2: a daemon's token is not the server's shell: its forwarded control socket
//!   registers no agent and reaches only its own sessions;
//! - break 7: the daemon's paths show by its own home on the web listener;
//! - issue 51: and by no other home: a daemon's path that lies under the server
//!   user's home (outside the daemon's) shows raw, never as `~/…`;
//! - break 11b: a query value that does not parse answers the JSON error;
//! - break 11c: two `Host` headers, or an absolute-form target, are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_command_agent, control, error_code, s, send_json};
use berth_tests::{Berth, FAKE_USER};
use serde_json::{Value, json};
use std::io::Write;
use std::time::Duration;

/// `berth serve --allow-daemons`, a daemon token for `laptop`, and the laptop's daemon
/// running in a home of its own.
fn desktop_and_laptop(tag: &str) -> (Berth, Berth) {
    let mut srv = Berth::new(&format!("{tag}-srv"));
    srv.env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000");
    srv.serve_with(&["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    let token = srv.daemon_token("laptop");
    let mut laptop = Berth::new(&format!("{tag}-laptop"));
    laptop.daemon(&url, &token, "laptop");
    (srv, laptop)
}

fn ids(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str())
        .collect()
}

#[test]
fn a_desktop_daemons_token_is_not_the_servers_shell() {
    let (srv, laptop) = desktop_and_laptop("shell");
    add_command_agent(&srv, "rep", r#"cat >/dev/null; printf 'cwd=%s\n' "$PWD""#);
    let mine = srv.json(&["session", "new", "--agent", "rep", "--json"]);
    let mine = mine["id"].as_str().unwrap().to_owned();

    // Through the laptop's socket (forwarded to the server with the daemon's token):
    // no agent registration, whatever the command.
    let marker = srv.root.path().join("ran-on-the-server");
    let evil = json!({"name": "evil", "kind": "command",
                      "command": ["sh", "-c", format!("touch {}", s(&marker))]});
    let (st, v) = control(
        &laptop,
        "POST",
        "/api/v1/agents",
        evil.to_string().as_bytes(),
    );
    assert_eq!(
        (st, error_code("POST agents", &v).as_str()),
        (403, "admin_only"),
        "{v}"
    );
    let out = laptop.run(&[
        "agent",
        "add",
        "evil2",
        "--kind",
        "command",
        "--command",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let agents = srv.json(&["agent", "list", "--json"]);
    let names: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(names, ["rep"], "{agents}");
    // Nor reading them: the server's agents (their commands) and projects (their
    // directories) are the server's settings.
    for path in ["/api/v1/agents", "/api/v1/projects"] {
        let (st, v) = control(&laptop, "GET", path, b"");
        assert_eq!(
            (st, error_code(path, &v).as_str()),
            (403, "admin_only"),
            "GET {path}: {v}"
        );
    }
    let out = laptop.run(&["agent", "list", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("printf"),
        "{out:?}"
    );
    // Nor project settings.
    let (st, v) = control(&laptop, "POST", "/api/v1/projects", br#"{"name":"p"}"#);
    assert_eq!(
        (st, error_code("POST projects", &v).as_str()),
        (403, "admin_only")
    );

    // The desktop user's sessions are not the daemon's: not listed, not found, not
    // sent to (a full id or a prefix).
    let (st, list) = control(&laptop, "GET", "/api/v1/sessions", b"");
    assert_eq!((st, ids(&list)), (200, vec![]), "{list}");
    for (method, path, body) in [
        ("GET", format!("/api/v1/sessions/{mine}"), ""),
        ("GET", format!("/api/v1/sessions/{}", &mine[..6]), ""),
        ("GET", format!("/api/v1/tasks?session={mine}"), ""),
        (
            "POST",
            format!("/api/v1/sessions/{mine}/messages"),
            r#"{"text":"run this on the server"}"#,
        ),
    ] {
        let (st, v) = control(&laptop, method, &path, body.as_bytes());
        assert_eq!(
            (st, error_code(&path, &v).as_str()),
            (404, "unknown_session"),
            "{method} {path}: {v}"
        );
    }
    assert!(
        srv.json(&["task", "list", "--session", &mine, "--json"])
            .as_array()
            .unwrap()
            .is_empty(),
        "a task was queued in the desktop user's session"
    );

    // What the daemon may do, it does: a session of its own, bound on its machine,
    // runs there; the desktop user sees it too.
    let dir = laptop.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    let own = laptop.json(&[
        "session",
        "new",
        "--agent",
        "rep",
        "--dir",
        s(&dir),
        "--json",
    ]);
    let own = own["id"].as_str().unwrap().to_owned();
    let (code, _, task) = send_json(&laptop, &own, "hi");
    assert_eq!(
        (code, task["status"].as_str()),
        (0, Some("succeeded")),
        "{task}"
    );
    let (_, list) = control(&laptop, "GET", "/api/v1/sessions", b"");
    assert_eq!(ids(&list), vec![own.as_str()]);
    let all = srv.json(&["session", "list", "--json"]);
    let mut seen = ids(&all);
    seen.sort_unstable();
    let mut want = vec![mine.as_str(), own.as_str()];
    want.sort_unstable();
    assert_eq!(seen, want);
    let (st, me) = control(&laptop, "GET", "/api/v1/me", b"");
    assert_eq!((st, me["admin"].clone()), (200, json!(false)), "{me}");

    // An unbound session of the daemon's runs on its own machines, in a scratch
    // directory there, never on the server's host with the server's agents.
    let loose = laptop.json(&["session", "new", "--agent", "rep", "--json"]);
    let loose = loose["id"].as_str().unwrap().to_owned();
    let (code, _, task) = send_json(&laptop, &loose, "where am I?");
    assert_eq!(
        (code, task["status"].as_str()),
        (0, Some("succeeded")),
        "{task}"
    );
    let ran_in = srv.json(&["task", "list", "--session", &loose, "--json"])[0]["work_dir"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        ran_in.starts_with(s(&laptop.home)),
        "the daemon's unbound session ran in {ran_in:?}, not on the laptop ({:?})",
        laptop.home
    );
    assert!(!marker.exists(), "a daemon's command ran on the server");
}

#[test]
fn a_daemons_paths_show_by_its_own_home_on_the_web_listener() {
    let (srv, laptop) = desktop_and_laptop("home");
    let home = s(&laptop.user_home).to_owned();
    assert!(
        !home.starts_with("/home/"),
        "the test needs a home outside /home: {home}"
    );
    add_command_agent(&srv, "rep", r#"cat >/dev/null; printf 'cwd=%s\n' "$PWD""#);
    let dir = laptop.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    let id = laptop.json(&[
        "session",
        "new",
        "--agent",
        "rep",
        "--dir",
        s(&dir),
        "--json",
    ]);
    let id = id["id"].as_str().unwrap().to_owned();
    let (code, _, task) = send_json(&laptop, &id, "where");
    assert_eq!(code, 0, "{task}");
    let canonical = std::fs::canonicalize(&dir).unwrap();
    assert_eq!(
        task["work_dir"],
        s(&canonical),
        "the laptop's CLI keeps real paths"
    );

    let (st, t) = srv.web_get(&format!("/api/v1/tasks/{}", task["id"].as_str().unwrap()));
    assert_eq!(st, 200, "{t}");
    let t: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(t["work_dir"], "~/code/app", "{t}");
    let (st, events) = srv.web_get(&format!("/api/v1/sessions/{id}/events"));
    assert_eq!(st, 200, "{events}");
    assert!(events.contains("cwd=~/code/app"), "{events}");
    let (_, sessions) = srv.web_get("/api/v1/sessions");
    for text in [&events, &sessions] {
        assert!(!text.contains(&home), "the laptop's home is shown: {text}");
    }
}

/// A session on `on` (the laptop through its daemon, or the desktop itself) bound to
/// `dir`, after one message to `rep`: its id and its task's id.
fn worked_in(on: &Berth, dir: &std::path::Path) -> (String, String) {
    std::fs::create_dir_all(dir).unwrap();
    let id = on.json(&[
        "session",
        "new",
        "--agent",
        "rep",
        "--dir",
        s(dir),
        "--json",
    ]);
    let id = id["id"].as_str().unwrap().to_owned();
    let (code, _, task) = send_json(on, &id, "where");
    assert_eq!(code, 0, "{task}");
    let canonical = std::fs::canonicalize(dir).unwrap();
    assert_eq!(task["work_dir"], s(&canonical), "the CLI keeps real paths");
    (id, task["id"].as_str().unwrap().to_owned())
}

#[test]
fn a_daemons_path_outside_its_home_shows_raw_never_by_the_servers_home() {
    let (srv, laptop) = desktop_and_laptop("raw");
    add_command_agent(&srv, "rep", r#"cat >/dev/null; printf 'cwd=%s\n' "$PWD""#);
    // On the laptop, a directory under the desktop user's home: a path of the laptop,
    // outside the laptop's home, which the desktop's home rule must not shorten.
    let outside = std::fs::canonicalize(&srv.user_home).unwrap().join("proj");
    let inside = laptop.user_home.join("code/app");
    let (far, far_task) = worked_in(&laptop, &outside);
    let (near, near_task) = worked_in(&laptop, &inside);
    // And a desktop session in a directory under the laptop's home: a path of the
    // desktop, which the laptop's home rule must not shorten either.
    let theirs = std::fs::canonicalize(&laptop.user_home)
        .unwrap()
        .join("shared");
    let (mine, _) = worked_in(&srv, &theirs);
    // Raw: no home rule, only the account name masked (as on every path served).
    let raw = |p: &std::path::Path| s(p).replace(FAKE_USER, "…");
    let (far_shown, theirs_shown) = (raw(&outside), raw(&theirs));
    let laptop_home = std::fs::canonicalize(&laptop.user_home).unwrap();
    assert!(
        !outside.starts_with(&laptop_home) && !far_shown.starts_with('~'),
        "{outside:?}"
    );

    // The task documents.
    for (task, want) in [(&far_task, far_shown.as_str()), (&near_task, "~/code/app")] {
        let (st, t) = srv.web_get(&format!("/api/v1/tasks/{task}"));
        assert_eq!(st, 200, "{t}");
        let t: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(t["work_dir"], want, "{t}");
    }
    let (st, tasks) = srv.web_get("/api/v1/tasks");
    assert_eq!(st, 200, "{tasks}");
    let tasks: Value = serde_json::from_str(&tasks).unwrap();
    let work_dirs: std::collections::BTreeMap<&str, &str> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), t["work_dir"].as_str().unwrap()))
        .filter(|(id, _)| *id == far_task || *id == near_task)
        .collect();
    let want = [
        (far_task.as_str(), far_shown.as_str()),
        (near_task.as_str(), "~/code/app"),
    ];
    assert_eq!(work_dirs, want.into_iter().collect(), "{tasks}");

    // The session documents, one by one and in the list.
    let (st, list) = srv.web_get("/api/v1/sessions");
    assert_eq!(st, 200, "{list}");
    let list: Value = serde_json::from_str(&list).unwrap();
    for (id, want) in [
        (&far, far_shown.as_str()),
        (&near, "~/code/app"),
        (&mine, theirs_shown.as_str()),
    ] {
        let (st, one) = srv.web_get(&format!("/api/v1/sessions/{id}"));
        assert_eq!(st, 200, "{one}");
        let one: Value = serde_json::from_str(&one).unwrap();
        let listed = list
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} is not listed: {list}"));
        for doc in [&one, listed] {
            let shown = (doc["work_dir"].as_str(), doc["binding"]["display"].as_str());
            assert_eq!(shown, (Some(want), Some(want)), "{doc}");
        }
    }

    // The events: what the agent printed, and the finished task's `work_dir`.
    for (id, want) in [
        (&far, far_shown.as_str()),
        (&near, "~/code/app"),
        (&mine, theirs_shown.as_str()),
    ] {
        let (st, events) = srv.web_get(&format!("/api/v1/sessions/{id}/events"));
        assert_eq!(st, 200, "{events}");
        assert!(events.contains(&format!("cwd={want}")), "{want}: {events}");
        assert!(
            events.contains(&format!(r#""work_dir":"{want}""#)),
            "{want}: {events}"
        );
        assert!(
            !events.contains("cwd=~/proj") && !events.contains("cwd=~/shared"),
            "{events}"
        );
    }
}

#[test]
fn a_query_value_that_does_not_parse_answers_the_json_error() {
    let mut b = Berth::new("query");
    b.serve();
    add_command_agent(&b, "rep", "cat >/dev/null");
    let id = b.json(&["session", "new", "--agent", "rep", "--json"]);
    let id = id["id"].as_str().unwrap();
    let events = format!("/api/v1/sessions/{id}/events?after=18446744073709551616");
    // The web listener and the control socket answer alike.
    let (st, body) = b.web_get(&events);
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!((st, error_code(&events, &v).as_str()), (400, "bad_request"));
    assert!(
        v["error"]["message"].as_str().unwrap().contains("after"),
        "{v}"
    );
    for (method, path, body) in [
        ("GET", events, ""),
        (
            "POST",
            format!("/api/v1/sessions/{id}/messages?stream=maybe"),
            r#"{"text":"hi"}"#,
        ),
    ] {
        let (st, v) = control(&b, method, &path, body.as_bytes());
        assert_eq!(
            (st, error_code(&path, &v).as_str()),
            (400, "bad_request"),
            "{v}"
        );
    }
}

/// One raw request to the web listener; its status and body.
fn raw(addr: &str, request: &str) -> (u16, String) {
    use berth_test_support::http;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    http::status_and_body(&http::read_all(&mut s, Duration::from_secs(30)))
}

#[test]
fn a_request_naming_its_server_twice_is_refused() {
    let mut b = Berth::new("host");
    b.serve();
    let (url, token) = b.serve_info();
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let path = format!("/api/v1/health?token={token}");
    let end = "Connection: close\r\n\r\n";
    // As a browser sends it: served.
    let (st, body) = raw(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{end}"),
    );
    assert_eq!(st, 200, "{body}");
    for request in [
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nHost: evil.example\r\n{end}"),
        format!("GET http://evil.example{path} HTTP/1.1\r\nHost: {addr}\r\n{end}"),
        format!("GET http://{addr}{path} HTTP/1.1\r\nHost: {addr}\r\n{end}"),
    ] {
        let (st, body) = raw(addr, &request);
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(
            (st, error_code(&request, &v).as_str()),
            (400, "bad_request"),
            "{request:?}: {v}"
        );
    }
}
