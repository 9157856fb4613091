//! The HTTP API on the control socket and the web listener, over real sockets.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use common::{Reply, TempDir, TestServer, add_agent, new_session, request, send, sse};
use serde_json::json;

fn error_code(r: &Reply) -> &str {
    r.json["error"]["code"]
        .as_str()
        .unwrap_or("<no error shape>")
}

fn assert_error_shape(r: &Reply) {
    let e = &r.json["error"];
    assert!(
        e["code"].is_string() && e["message"].is_string() && e["hint"].is_string(),
        "not the error shape: {}",
        r.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_socket_basics() {
    let t = TestServer::start(8).await;
    let r = t.call("GET", "/api/v1/health", None).await;
    assert_eq!(
        r.json,
        json!({"ok": true, "version": env!("CARGO_PKG_VERSION"), "pid": std::process::id()})
    );
    let r = t.call("GET", "/api/v1/capabilities", None).await;
    let mut caps = r.json.clone();
    let home = caps.as_object_mut().and_then(|o| o.remove("home"));
    assert!(
        home.is_some_and(|h| h.is_string()),
        "the preview gets the home"
    );
    assert_eq!(
        caps,
        json!({"local_binding": cfg!(feature = "local-binding"), "surface": "control",
               "machine": {"id": "m-test", "name": "testbox"}})
    );

    // No agent yet: a clear unknown_agent with a hint.
    let r = t.call("POST", "/api/v1/sessions", Some(json!({}))).await;
    assert_eq!(
        (r.status, error_code(&r)),
        (404, "unknown_agent"),
        "{}",
        r.text
    );
    assert_error_shape(&r);

    add_agent(&t, "cat", "cat").await;
    let r = t
        .call(
            "POST",
            "/api/v1/agents",
            Some(json!({"name": "cat", "kind": "command", "command": ["x"]})),
        )
        .await;
    assert_eq!((r.status, error_code(&r)), (409, "agent_exists"));
    let r = t.call("GET", "/api/v1/agents", None).await;
    assert_eq!(
        r.json,
        json!([{"name": "cat", "kind": "command", "command": ["cat"], "permissions": null}])
    );

    let r = t
        .call("POST", "/api/v1/sessions", Some(json!({"title": "demo"})))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap().to_owned();
    let created = r.json.clone();
    assert_eq!(created["title"], "demo");
    assert_eq!(created["origin"], "desktop");
    #[cfg(feature = "local-binding")]
    assert_eq!(created["binding"], serde_json::Value::Null);
    let r = t
        .call("GET", &format!("/api/v1/sessions/{}", &id[..20]), None)
        .await;
    assert_eq!(r.json, created);
    let r = t.call("GET", "/api/v1/sessions", None).await;
    assert_eq!(r.json, json!([created]));

    let r = t.call("GET", "/api/v1/sessions/ffff", None).await;
    assert_eq!((r.status, error_code(&r)), (404, "unknown_session"));
    assert_error_shape(&r);
    // Ids are random: among 17 sessions two share at least their first character.
    let mut made = vec![id.clone()];
    let (id, other, shared) = loop {
        let next = new_session(&t, "cat").await;
        let pair = made.iter().find_map(|m| {
            let shared = m
                .chars()
                .zip(next.chars())
                .take_while(|(a, b)| a == b)
                .count();
            (shared > 0).then(|| (m.clone(), next.clone(), shared))
        });
        if let Some(p) = pair {
            break p;
        }
        made.push(next);
    };
    let r = t
        .call("GET", &format!("/api/v1/sessions/{}", &id[..shared]), None)
        .await;
    assert_eq!((r.status, error_code(&r)), (400, "ambiguous_id"));
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&other),
        "{}",
        r.text
    );

    let task = send(&t, &id, "hello").await;
    let done = t.wait_task(&task).await;
    assert_eq!(done["status"], "succeeded");
    let r = t
        .call("GET", &format!("/api/v1/tasks?session={}", &id[..20]), None)
        .await;
    assert_eq!(r.json, json!([done]));
    let r = t.call("GET", "/api/v1/nowhere", None).await;
    assert_eq!((r.status, error_code(&r)), (404, "not_found_route"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_get_the_error_shape() {
    let t = TestServer::start(8).await;
    add_agent(&t, "cat", "cat").await;
    let s = new_session(&t, "cat").await;
    let path = format!("/api/v1/sessions/{s}/messages");
    let stream = tokio::net::UnixStream::connect(&t.socket).await.unwrap();
    let r = request(
        stream,
        "POST",
        &path,
        &[("host", "x")],
        Some("{\"text\": ".into()),
    )
    .await;
    assert_eq!(
        (r.status, error_code(&r)),
        (400, "bad_request"),
        "{}",
        r.text
    );
    assert_error_shape(&r);

    let r = t
        .call("POST", &path, Some(json!({"text": "x", "dir": "/tmp"})))
        .await;
    assert_eq!((r.status, error_code(&r)), (400, "bad_request"));
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `dir`"),
        "{}",
        r.text
    );

    let big = json!({"text": "x".repeat(2 * 1024 * 1024)}).to_string();
    let (status, body) = common::raw_oversized(&t.socket, &path, big).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    assert!(body["error"]["hint"].is_string());
    // Nothing was stored by the refused requests.
    let r = t
        .call("GET", &format!("/api/v1/tasks?session={s}"), None)
        .await;
    assert_eq!(r.json, json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_replays_after_last_event_id_without_gaps_or_duplicates() {
    let t = TestServer::start(8).await;
    add_agent(&t, "cat", "cat").await;
    let s = new_session(&t, "cat").await;
    let path = format!("/api/v1/sessions/{s}/events");

    // Live: subscribe, then send; the stream shows the whole turn.
    let sock = t.socket.clone();
    let p = path.clone();
    let live = tokio::spawn(async move {
        let stream = tokio::net::UnixStream::connect(&sock).await.unwrap();
        sse(stream, &p, &[("host", "x")], |evs| {
            evs.iter().filter(|e| e.event == "task").count() == 3
        })
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let mut tasks = Vec::new();
    for text in ["one", "two", "three"] {
        tasks.push(send(&t, &s, text).await);
    }
    let all = live.await.unwrap();
    let ids: Vec<i64> = all.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>());
    for e in &all {
        assert_eq!(e.data["seq"], e.id);
        assert_eq!(e.data["kind"], e.event.as_str());
    }
    let last = all.last().unwrap();
    assert_eq!(
        (last.event.as_str(), &last.data["payload"]["task"]["id"]),
        ("task", &json!(tasks[2]))
    );

    // Replay from the middle with Last-Event-ID: exactly the tail.
    let k = 4;
    let stream = tokio::net::UnixStream::connect(&t.socket).await.unwrap();
    let n = all.len();
    let tail = sse(
        stream,
        &path,
        &[("host", "x"), ("last-event-id", &k.to_string())],
        |evs| evs.len() >= n - k as usize,
    )
    .await;
    assert_eq!(tail, all[k as usize..].to_vec());
    // And with ?after=.
    let stream = tokio::net::UnixStream::connect(&t.socket).await.unwrap();
    let tail = sse(
        stream,
        &format!("{path}?after={}", n - 1),
        &[("host", "x")],
        |evs| !evs.is_empty(),
    )
    .await;
    assert_eq!(tail, all[n - 1..].to_vec());
}

/// `berth send`'s one request: the message, answered by its turn as a stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_message_is_answered_by_its_turn() {
    let t = TestServer::start(8).await;
    add_agent(&t, "cat", "cat").await;
    let s = new_session(&t, "cat").await;
    // Earlier turns are not replayed: the stream starts at this message.
    let first = send(&t, &s, "before").await;
    t.wait_task(&first).await;
    let stream = tokio::net::UnixStream::connect(&t.socket).await.unwrap();
    let evs = common::sse_request(
        stream,
        "POST",
        &format!("/api/v1/sessions/{s}/messages?stream=true"),
        &[("host", "x"), ("accept", "text/event-stream")],
        Some(json!({"text": "streamed"})),
        |evs| evs.iter().any(|e| e.event == "task"),
    )
    .await;
    assert_eq!(evs[0].event, "accepted");
    let task = evs[0].data["task"]["id"].as_str().unwrap().to_owned();
    assert_ne!(task, first);
    assert_eq!(evs[1].event, "message");
    assert_eq!(evs[1].id, evs[0].data["message_seq"].as_i64().unwrap());
    // The stream begins with the message event the store handed back instead of
    // reading it again: it is the stored one.
    let stream = tokio::net::UnixStream::connect(&t.socket).await.unwrap();
    let stored = sse(
        stream,
        &format!("/api/v1/sessions/{s}/events?after={}", evs[1].id - 1),
        &[("host", "x")],
        |evs| !evs.is_empty(),
    )
    .await;
    assert_eq!(stored[0], evs[1]);
    // Every event after it is this turn's, in order, through its end.
    for pair in evs[1..].windows(2) {
        assert_eq!(pair[1].id, pair[0].id + 1);
    }
    assert!(evs[1..].iter().all(|e| e.data["task_id"] == json!(task)));
    let end = evs.last().unwrap();
    assert_eq!(end.data["payload"]["task"]["status"], "succeeded");
    let said: Vec<&str> = evs
        .iter()
        .filter(|e| e.event == "agent")
        .filter_map(|e| e.data["payload"]["text"].as_str())
        .collect();
    assert!(said.concat().contains("streamed"), "{said:?}");
    // A refused message is refused before any stream starts.
    let r = t
        .call(
            "POST",
            &format!("/api/v1/sessions/{s}/messages?stream=true"),
            Some(json!({"text": "  "})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let r = t
        .call(
            "POST",
            "/api/v1/sessions/nope/messages?stream=true",
            Some(json!({"text": "x"})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
}

async fn web(t: &TestServer) -> (std::net::SocketAddr, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = berth_web::server::new_token().unwrap();
    let hosts = berth_web::api::loopback_hosts(addr);
    let server = t.server.clone();
    let tok = token.clone();
    tokio::spawn(async move {
        server
            .serve_web(
                berth_web::net::listener::WebListener::Plain(listener),
                tok,
                hosts,
            )
            .await
    });
    (addr, token)
}

async fn web_call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    request(stream, method, path, headers, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_listener_is_read_only_guarded_and_path_free() {
    let t = TestServer::start(8).await;
    add_agent(&t, "cat", "cat").await;
    let s = new_session(&t, "cat").await;
    let task = send(&t, &s, "hi").await;
    t.wait_task(&task).await;
    #[cfg(feature = "local-binding")]
    let project = {
        let project = TempDir::new("w");
        let r = t
            .call(
                "PUT",
                &format!("/api/v1/sessions/{s}/binding"),
                Some(json!({"dir": project.path()})),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        project
    };
    let (addr, token) = web(&t).await;
    let host = format!("localhost:{}", addr.port());
    let h = host.as_str();
    let sessions = "/api/v1/sessions";

    let r = web_call(addr, "GET", sessions, &[("host", "evil.example:80")]).await;
    assert_eq!((r.status, error_code(&r)), (403, "forbidden_host"));
    let r = web_call(addr, "GET", sessions, &[("host", h)]).await;
    assert_eq!((r.status, error_code(&r)), (401, "unauthorized"));
    let r = web_call(
        addr,
        "GET",
        &format!("{sessions}?token=wrong"),
        &[("host", h)],
    )
    .await;
    assert_eq!((r.status, error_code(&r)), (401, "unauthorized"));

    let r = web_call(
        addr,
        "GET",
        &format!("{sessions}?token={token}"),
        &[("host", h)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let cookie = r.headers["set-cookie"].to_str().unwrap().to_owned();
    assert_eq!(
        cookie,
        format!("berth_token={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age=2592000")
    );
    let jar = format!("berth_token={token}");
    let with_cookie = [("host", h), ("cookie", jar.as_str())];
    let r = web_call(addr, "GET", sessions, &with_cookie).await;
    assert_eq!(r.status, 200);
    let session = &r.json[0];
    // work_dir is the display form: the server user's home is `~`.
    assert_eq!(session["work_dir"], format!("~/scratch/{s}"));
    assert!(
        !r.text.contains(t.home.path().to_str().unwrap()),
        "a real path leaked: {}",
        r.text
    );
    #[cfg(feature = "local-binding")]
    {
        let control = t.call("GET", &format!("/api/v1/sessions/{s}"), None).await;
        assert_eq!(
            control.json["binding"]["dir"],
            project.path().display().to_string()
        );
        assert_eq!(
            session["binding"]["display"],
            control.json["binding"]["display"]
        );
        let b = session["binding"].as_object().unwrap();
        let keys: Vec<&str> = b.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec!["daemon", "daemon_name", "display", "mode", "state"]
        );
    }
    // The UI is behind the same guard.
    let r = web_call(addr, "GET", "/", &[("host", h)]).await;
    assert_eq!(r.status, 401);
    let r = web_call(addr, "GET", &format!("/?token={token}"), &[("host", h)]).await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers.contains_key("set-cookie") && r.headers.contains_key("content-security-policy")
    );
    let r = web_call(addr, "GET", "/api/v1/capabilities", &with_cookie).await;
    let mut caps = r.json.clone();
    let home = caps.as_object_mut().and_then(|o| o.remove("home"));
    assert!(
        home.is_some_and(|h| h.is_string()),
        "the preview gets the home"
    );
    assert_eq!(
        caps,
        json!({"local_binding": false, "surface": "web", "machine": {"id": "m-test", "name": "testbox"}})
    );

    for (method, path) in [
        ("POST", sessions.to_owned()),
        ("POST", format!("/api/v1/sessions/{s}/messages")),
        ("PUT", format!("/api/v1/sessions/{s}/binding")),
        ("DELETE", format!("/api/v1/sessions/{s}/binding")),
        ("POST", "/api/v1/check".to_owned()),
    ] {
        let r = web_call(addr, method, &path, &with_cookie).await;
        assert_eq!(
            (r.status, error_code(&r)),
            (405, "method_not_allowed"),
            "{method} {path}"
        );
    }
    // The transcript streams on the web listener too, without real paths.
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let evs = sse(
        stream,
        &format!("/api/v1/sessions/{s}/events"),
        &with_cookie,
        |e| e.iter().any(|e| e.event == "task"),
    )
    .await;
    let t_ev = evs.iter().find(|e| e.event == "task").unwrap();
    assert!(
        !t_ev
            .data
            .to_string()
            .contains(t.home.path().to_str().unwrap()),
        "{:?}",
        t_ev.data
    );
}

#[cfg(feature = "local-binding")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_refusals_surface_the_validator_code() {
    let t = TestServer::start(8).await;
    add_agent(&t, "cat", "cat").await;
    let missing = t.home.path().join("missing");
    let r = t
        .call("POST", "/api/v1/sessions", Some(json!({"dir": missing})))
        .await;
    assert_eq!((r.status, error_code(&r)), (422, "not_found"), "{}", r.text);
    let r = t
        .call(
            "POST",
            "/api/v1/sessions",
            Some(json!({"dir": "relative/x"})),
        )
        .await;
    assert_eq!(
        (r.status, error_code(&r)),
        (400, "path_not_absolute"),
        "{}",
        r.text
    );
    let r = t.call("GET", "/api/v1/sessions", None).await;
    assert_eq!(r.json, json!([]), "a refused create stores nothing");

    let r = t
        .call("POST", "/api/v1/check", Some(json!({"dir": missing})))
        .await;
    assert_eq!(
        (r.status, r.json["ok"].as_bool(), r.json["code"].as_str()),
        (422, Some(false), Some("not_found"))
    );
    let dir = TempDir::new("w");
    let r = t
        .call("POST", "/api/v1/check", Some(json!({"dir": dir.path()})))
        .await;
    assert_eq!(
        (r.status, r.json["ok"].as_bool()),
        (200, Some(true)),
        "{}",
        r.text
    );
    assert_eq!(r.json["canonical"], dir.path().display().to_string());

    let r = t
        .call(
            "POST",
            "/api/v1/sessions",
            Some(json!({"dir": dir.path(), "mode": "worktree"})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["binding"]["mode"], "worktree");
    let s = r.json["id"].as_str().unwrap();
    let r = t
        .call(
            "PUT",
            &format!("/api/v1/sessions/{s}/binding"),
            Some(json!({"dir": missing})),
        )
        .await;
    assert_eq!((r.status, error_code(&r)), (422, "not_found"));
    let r = t.call("GET", &format!("/api/v1/sessions/{s}"), None).await;
    assert_eq!(
        r.json["binding"]["dir"],
        dir.path().display().to_string(),
        "a refused link changes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_per_home_and_stale_sockets_are_replaced() {
    let t = TestServer::start(8).await;
    let opts = berth_web::server::ServerOptions::default();
    match berth_web::server::Server::open(t.home.path(), opts.clone()).await {
        Err(e @ berth_web::server::ServerError::AlreadyRunning { .. }) => {
            assert!(
                e.to_string()
                    .contains(&format!("pid {}", std::process::id())),
                "{e}"
            );
        }
        other => panic!("a second server opened: {other:?}"),
    }
    // A socket someone answers on is never removed.
    let err = t.server.bind_control(&t.socket).await.unwrap_err();
    assert!(
        matches!(err, berth_web::server::ServerError::SocketInUse { .. }),
        "{err}"
    );

    // A stale socket file (nobody listening) is replaced.
    let other = TempDir::new("w");
    let stale = other.path().join("berth.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let t2 = TestServer::start_in(other, 1).await;
    let r = t2.call("GET", "/api/v1/health", None).await;
    assert_eq!(r.status, 200);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&t2.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// Whatever an agent prints, and whatever names a path under the home (an agent's
/// command, a task's error, an unknown id), the web listener serves it with the home
/// as `~`: documents, lists, errors and the event stream alike. The control socket
/// keeps the real text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_web_listener_answer_passes_the_display_rule() {
    let t = TestServer::start(8).await;
    let home = t.home.path().to_str().unwrap().to_owned();
    let name = t
        .home
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    // The agent's command names the home; its output names it three ways.
    let cmd = format!(
        "{home}/bin/x 2>/dev/null; pwd; echo \"HOME is {home}\"; echo \"I am {name}\"; exit 3"
    );
    add_agent(&t, "leaky", &cmd).await;
    let s = new_session(&t, "leaky").await;
    let task = send(&t, &s, "hi").await;
    let done = t.wait_task(&task).await;
    assert_eq!(done["status"], "failed");

    let control = t.call("GET", "/api/v1/agents", None).await;
    assert!(
        control.text.contains(&home),
        "the control socket keeps real text"
    );
    let control = t.call("GET", &format!("/api/v1/tasks/{task}"), None).await;
    assert!(control.text.contains(&home), "{}", control.text);

    let (addr, token) = web(&t).await;
    let host = format!("localhost:{}", addr.port());
    let jar = format!("berth_token={token}");
    let with_cookie = [("host", host.as_str()), ("cookie", jar.as_str())];
    let leaks = |text: &str| text.contains(&home) || text.contains(&name);
    for path in [
        "/api/v1/agents".to_owned(),
        "/api/v1/tasks".to_owned(),
        format!("/api/v1/tasks/{task}"),
        "/api/v1/sessions".to_owned(),
        format!("/api/v1/sessions/{s}"),
        format!("/api/v1/sessions/{}", home.replace('/', "%2F")),
    ] {
        let r = web_call(addr, "GET", &path, &with_cookie).await;
        assert!(!leaks(&r.text), "GET {path} leaked the home: {}", r.text);
        assert!(
            r.json.is_object() || r.json.is_array(),
            "GET {path}: {}",
            r.text
        );
    }
    let r = web_call(addr, "GET", "/api/v1/agents", &with_cookie).await;
    assert_eq!(
        r.json[0]["command"][0].as_str().unwrap(),
        cmd.replace(&home, "~").replace(&name, "…")
    );
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let evs = sse(
        stream,
        &format!("/api/v1/sessions/{s}/events"),
        &with_cookie,
        |e| e.iter().any(|e| e.event == "task"),
    )
    .await;
    let texts: Vec<String> = evs
        .iter()
        .filter(|e| e.event == "agent")
        .map(|e| e.data["payload"]["text"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        texts,
        vec![
            format!("~/scratch/{s}"),
            "HOME is ~".to_owned(),
            "I am …".to_owned()
        ]
    );
    for e in &evs {
        assert!(!leaks(&e.data.to_string()), "{:?}", e.data);
    }
}

/// Runs every task in one directory, as the native executor's lock does: a task that
/// finds it held says so (`waiting_lock`, the reason naming the holder, in core's
/// words) and waits; the holder keeps it until cancelled.
#[derive(Debug, Default)]
struct OneDirectory {
    lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    holder: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl berth_web::executor::Executor for OneDirectory {
    fn machine(&self) -> (berth_core::MachineId, String) {
        (
            berth_core::MachineId::parse("m-test").unwrap(),
            "testbox".into(),
        )
    }

    fn run(
        &self,
        task: berth_web::executor::TaskSpec,
        events: tokio::sync::mpsc::UnboundedSender<berth_web::executor::ExecEvent>,
        mut cancel: tokio::sync::watch::Receiver<bool>,
    ) -> berth_web::executor::BoxFuture<'static, berth_web::executor::TaskOutcome> {
        use berth_core::api::TaskStatus;
        use berth_core::wait::{Holder, directory_wait};
        use berth_web::executor::{ExecEvent, TaskOutcome};
        let (lock, holder) = (self.lock.clone(), self.holder.clone());
        Box::pin(async move {
            let held = match lock.clone().try_lock_owned() {
                Ok(held) => held,
                Err(_) => {
                    let by = holder.lock().unwrap().clone().unwrap_or_default();
                    let reason = directory_wait(Holder::Task {
                        id: &by,
                        process: None,
                    });
                    let _ = events.send(ExecEvent::Status {
                        status: TaskStatus::WaitingLock,
                        wait_reason: Some(reason),
                    });
                    tokio::select! {
                        held = lock.clone().lock_owned() => held,
                        _ = cancel.wait_for(|c| *c) => return TaskOutcome::new(TaskStatus::Cancelled),
                    }
                }
            };
            *holder.lock().unwrap() = Some(task.task_id.as_str().to_owned());
            let _ = events.send(ExecEvent::Status {
                status: TaskStatus::Running,
                wait_reason: None,
            });
            let _ = cancel.wait_for(|c| *c).await;
            drop(held);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_names_the_session_it_waits_for_to_whoever_may_see_it() {
    use berth_core::api::TaskStatus;
    use berth_core::wait::{Holder, directory_wait};
    let t = TestServer::with_executor(std::sync::Arc::new(OneDirectory::default()), 4).await;
    let reached = |task: String, status: &'static str| {
        let t = &t;
        async move {
            for _ in 0..500 {
                let r = t.call("GET", &format!("/api/v1/tasks/{task}"), None).await;
                if r.json["status"] == status {
                    return r.json;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            panic!("task {task} never reached {status}");
        }
    };

    // The local user's two sessions in one directory: the second's task waits for the
    // first's, and is told which session holds it.
    add_agent(&t, "w", "true").await;
    let first = new_session(&t, "w").await;
    let r = t
        .call(
            "PATCH",
            &format!("/api/v1/sessions/{first}"),
            Some(json!({"title": "Fix login"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let holder = send(&t, &first, "fix the login form").await;
    let holding = reached(holder.clone(), "running").await;
    assert!(
        holding.get("waits_for").is_none(),
        "a running task waits for nobody: {holding}"
    );
    let second = new_session(&t, "w").await;
    let waiter = send(&t, &second, "go").await;
    let waiting = reached(waiter.clone(), "waiting_lock").await;
    let named = json!({"task_id": holder, "session_id": first, "session_title": "Fix login"});
    assert_eq!(waiting["waits_for"], named, "{waiting}");
    let listed = t
        .call("GET", &format!("/api/v1/tasks?session={second}"), None)
        .await;
    assert_eq!(listed.json[0]["waits_for"], named, "{}", listed.text);
    assert_eq!(
        listed.json[0]["wait_reason"],
        format!("waiting for the directory: in use by task {holder}")
    );
    for task in [&holder, &waiter] {
        let r = t
            .call("POST", &format!("/api/v1/tasks/{task}/cancel"), None)
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }

    // Members, on berth-server's listener: each sees only their own sessions.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = berth_web::server::new_token().unwrap();
    let (s, tok) = (t.server.clone(), admin.clone());
    tokio::spawn(async move {
        s.serve_cloud(berth_web::net::listener::WebListener::Plain(listener), tok)
            .await
    });
    let call =
        |token: &str, method: &'static str, path: String, body: Option<serde_json::Value>| {
            let bearer = format!("Bearer {token}");
            async move {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                let headers = [("host", "team.example"), ("authorization", bearer.as_str())];
                request(stream, method, &path, &headers, body.map(|b| b.to_string())).await
            }
        };
    let mut tokens = Vec::new();
    for name in ["ann", "bob"] {
        let r = call(
            &admin,
            "POST",
            "/api/v1/members".into(),
            Some(json!({"name": name})),
        )
        .await;
        assert_eq!(r.status, 201, "{}", r.text);
        tokens.push(r.json["token"].as_str().unwrap().to_owned());
    }
    let (ann, bob) = (&tokens[0], &tokens[1]);
    // A member's session and its task, which waits for one of the member's machines
    // (this server's own runs only the local user's).
    let start = |who: &str, title: &'static str| {
        let (call, reached) = (&call, &reached);
        let who = who.to_owned();
        async move {
            let r = call(
                &who,
                "POST",
                "/api/v1/sessions".into(),
                Some(json!({"agent": "w", "title": title})),
            )
            .await;
            assert_eq!(r.status, 201, "{}", r.text);
            let session = r.json["id"].as_str().unwrap().to_owned();
            let r = call(
                &who,
                "POST",
                format!("/api/v1/sessions/{session}/messages"),
                Some(json!({"text": "go"})),
            )
            .await;
            assert_eq!(r.status, 202, "{}", r.text);
            let task = r.json["task"]["id"].as_str().unwrap().to_owned();
            reached(task.clone(), "waiting_daemon").await;
            (session, task)
        }
    };
    let (bob_session, bob_task) = start(bob, "Bob's build").await;
    let (ann_session, ann_task) = start(ann, "Ann's fix").await;
    let (ann_next_session, ann_next) = start(ann, "Ann's next").await;
    // On a machine of theirs, Ann's first task would wait for Bob's, her next for her
    // first: as that machine's executor reports it.
    let store = &t.server.state().store;
    for (task, by) in [(&ann_task, &bob_task), (&ann_next, &ann_task)] {
        let reason = directory_wait(Holder::Task {
            id: by,
            process: None,
        });
        store
            .set_status(
                berth_core::TaskId::parse(task).unwrap(),
                TaskStatus::WaitingLock,
                Some(reason),
            )
            .await
            .unwrap();
    }

    // Ann may not see Bob's session: its task's short id only, in the reason too.
    let short = &bob_task[..8];
    let listed = call(
        ann,
        "GET",
        format!("/api/v1/tasks?session={ann_session}"),
        None,
    )
    .await;
    let one = call(ann, "GET", format!("/api/v1/tasks/{ann_task}"), None).await;
    for doc in [&listed.json[0], &one.json] {
        assert_eq!(doc["waits_for"], json!({"task_id": short}), "{doc}");
        assert_eq!(
            doc["wait_reason"],
            format!("waiting for the directory: in use by task {short}"),
            "{doc}"
        );
    }
    // Her own session, she sees named.
    let mine = call(
        ann,
        "GET",
        format!("/api/v1/tasks?session={ann_next_session}"),
        None,
    )
    .await;
    assert_eq!(
        mine.json[0]["waits_for"],
        json!({"task_id": ann_task, "session_id": ann_session, "session_title": "Ann's fix"}),
        "{}",
        mine.text
    );
    // The admin and the local user see every session: named, whole ids.
    let named =
        json!({"task_id": bob_task, "session_id": bob_session, "session_title": "Bob's build"});
    let by_admin = call(&admin, "GET", format!("/api/v1/tasks/{ann_task}"), None).await;
    let local = t
        .call("GET", &format!("/api/v1/tasks/{ann_task}"), None)
        .await;
    for doc in [&by_admin.json, &local.json] {
        assert_eq!(doc["waits_for"], named, "{doc}");
        assert_eq!(
            doc["wait_reason"],
            format!("waiting for the directory: in use by task {bob_task}"),
            "{doc}"
        );
    }
}
