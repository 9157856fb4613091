//! The cloud build (`--no-default-features`): no binding anywhere, a token on every
//! request, writes only with the bearer token.
#![cfg(not(feature = "local-binding"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use common::{TempDir, request};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

async fn cloud() -> (TempDir, Arc<berth_web::server::Server>, SocketAddr, String) {
    let home = TempDir::new("w");
    let server = Arc::new(
        berth_web::server::Server::open(home.path(), Default::default())
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = berth_web::server::new_token().unwrap();
    let (s, tok) = (server.clone(), token.clone());
    tokio::spawn(async move {
        s.serve_cloud(berth_web::net::listener::WebListener::Plain(listener), tok)
            .await
    });
    (home, server, addr, token)
}

async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<serde_json::Value>,
) -> common::Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let bearer = auth.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("host", "cloud.example")];
    if let Some(b) = &bearer {
        headers.push(("authorization", b.as_str()));
    }
    request(stream, method, path, &headers, body.map(|b| b.to_string())).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cloud_api_has_no_binding_and_wants_the_token() {
    let (_home, _server, addr, token) = cloud().await;
    let tok = Some(token.as_str());
    let r = call(addr, "GET", "/api/v1/sessions", None, None).await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let agent = json!({"name": "cat", "kind": "command", "command": ["cat"]});
    let r = call(addr, "POST", "/api/v1/agents", None, Some(agent.clone())).await;
    assert_eq!(r.status, 401, "writes need the bearer token");
    let r = call(addr, "POST", "/api/v1/agents", tok, Some(agent)).await;
    assert_eq!(r.status, 201, "{}", r.text);

    let r = call(
        addr,
        "POST",
        "/api/v1/sessions",
        tok,
        Some(json!({"dir": "/home/u/app"})),
    )
    .await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `dir`"),
        "{}",
        r.text
    );
    let r = call(
        addr,
        "POST",
        "/api/v1/sessions",
        tok,
        Some(json!({"binding": null})),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);

    let r = call(
        addr,
        "POST",
        "/api/v1/sessions",
        tok,
        Some(json!({"title": "t"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.json.get("binding").is_none(), "{}", r.text);
    assert_eq!(r.json["origin"], "api");
    let id = r.json["id"].as_str().unwrap().to_owned();
    for path in [
        "/api/v1/sessions".to_owned(),
        format!("/api/v1/sessions/{id}"),
    ] {
        let r = call(addr, "GET", &path, tok, None).await;
        assert!(!r.text.contains("binding"), "{}", r.text);
    }
    for (method, path) in [
        ("PUT", format!("/api/v1/sessions/{id}/binding")),
        ("POST", "/api/v1/check".into()),
    ] {
        let r = call(addr, method, &path, tok, Some(json!({"dir": "/x"}))).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text);
    }
    let r = call(addr, "GET", "/api/v1/capabilities", tok, None).await;
    assert_eq!(r.json, json!({"local_binding": false, "surface": "cloud"}));

    // No machine is attached: the task waits, visibly.
    let r = call(
        addr,
        "POST",
        &format!("/api/v1/sessions/{id}/messages"),
        tok,
        Some(json!({"text": "hi"})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let task = r.json["task"]["id"].as_str().unwrap().to_owned();
    let mut status = String::new();
    for _ in 0..500 {
        let r = call(addr, "GET", &format!("/api/v1/tasks/{task}"), tok, None).await;
        status = r.json["status"].as_str().unwrap_or("").to_owned();
        if status == "waiting_daemon" {
            assert!(r.json["wait_reason"].is_string());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status, "waiting_daemon");
}

/// A daemon attached to the cloud server: it registers with a token made through the
/// guarded API, learns the server cannot bind, and is only ever handed scratch work;
/// a forwarded binding request has no route to reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_on_the_cloud_server_never_run_in_place() {
    use berth_web::daemon::DaemonConfig;
    use std::time::Duration;
    let home = TempDir::new("w");
    let opts = berth_web::server::ServerOptions {
        daemons: Some(DaemonConfig {
            window: Duration::from_secs(5),
            claim_wait: Duration::from_secs(2),
        }),
        ..Default::default()
    };
    let server = Arc::new(
        berth_web::server::Server::open(home.path(), opts)
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let admin = berth_web::server::new_token().unwrap();
    let (s, tok) = (server.clone(), admin.clone());
    tokio::spawn(async move {
        s.serve_cloud(berth_web::net::listener::WebListener::Plain(listener), tok)
            .await
    });

    let r = call(
        addr,
        "POST",
        "/api/v1/daemon/tokens",
        None,
        Some(json!({"name": "m1"})),
    )
    .await;
    assert_eq!(r.status, 401, "tokens are made with the server's own token");
    let r = call(
        addr,
        "POST",
        "/api/v1/daemon/tokens",
        Some(&admin),
        Some(json!({"name": "m1"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let daemon_token = r.json["token"].as_str().unwrap().to_owned();

    let daemon = |method: &'static str, path: String, body: serde_json::Value| {
        let bearer = format!("Bearer {daemon_token}");
        async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let headers = [
                ("host", "cloud.example"),
                ("authorization", bearer.as_str()),
                ("x-berth-machine", "machine-1"),
            ];
            request(stream, method, &path, &headers, Some(body.to_string())).await
        }
    };
    let r = daemon(
        "POST",
        "/api/v1/daemon/register".into(),
        json!({"machine_id": "machine-1", "name": "m1", "instance": "i1", "version": "t"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["local_binding"], false);

    // Through the daemon's forwarded control API: no binding to reach.
    let r = daemon(
        "POST",
        "/api/v1/daemon/api/sessions".into(),
        json!({"dir": "/home/u/app"}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let agent = json!({"name": "cat", "kind": "command", "command": ["cat"]});
    // Agents are the server's settings: a daemon (never an admin) may not add one.
    let r = daemon("POST", "/api/v1/daemon/api/agents".into(), agent.clone()).await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json["error"]["code"], "admin_only");
    let r = call(addr, "POST", "/api/v1/agents", Some(&admin), Some(agent)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = daemon(
        "POST",
        "/api/v1/daemon/api/sessions".into(),
        json!({"title": "t"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap().to_owned();
    let r = daemon(
        "PUT",
        format!("/api/v1/daemon/api/sessions/{id}/binding"),
        json!({"dir": "/home/u/app"}),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text);

    // The message is handed to the daemon, in scratch.
    let r = call(
        addr,
        "POST",
        &format!("/api/v1/sessions/{id}/messages"),
        Some(&admin),
        Some(json!({"text": "hello"})),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let task = r.json["task"]["id"].as_str().unwrap().to_owned();
    let r = daemon(
        "POST",
        "/api/v1/daemon/claim".into(),
        json!({"instance": "i1", "wait_ms": 2000}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["task_id"], task.as_str());
    assert_eq!(r.json["placement"], json!({"kind": "scratch"}));
    let events = json!({"first": 0, "events": [
        {"type": "status", "status": "running"},
        {"type": "agent", "event": {"type": "text", "text": "hello"}},
    ]});
    let r = daemon(
        "POST",
        format!("/api/v1/daemon/tasks/{task}/events"),
        events.clone(),
    )
    .await;
    assert_eq!(
        (r.status, r.json["received"].as_u64()),
        (200, Some(2)),
        "{}",
        r.text
    );
    // The same batch again (its answer lost): nothing is stored twice.
    let r = daemon(
        "POST",
        format!("/api/v1/daemon/tasks/{task}/events"),
        events,
    )
    .await;
    assert_eq!(r.json["received"], 2, "{}", r.text);
    let finish = json!({"events": 3, "outcome": {"status": "succeeded", "exit_code": 0}});
    let r = daemon(
        "POST",
        format!("/api/v1/daemon/tasks/{task}/finish"),
        finish,
    )
    .await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (409, Some("events_missing")),
        "{}",
        r.text
    );
    let finish = json!({"events": 2, "outcome": {"status": "succeeded", "exit_code": 0}});
    let r = daemon(
        "POST",
        format!("/api/v1/daemon/tasks/{task}/finish"),
        finish.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = daemon(
        "POST",
        format!("/api/v1/daemon/tasks/{task}/finish"),
        finish,
    )
    .await;
    assert_eq!(
        r.status, 200,
        "a repeated finish is acknowledged: {}",
        r.text
    );
    let mut done = serde_json::Value::Null;
    for _ in 0..100 {
        let r = call(
            addr,
            "GET",
            &format!("/api/v1/tasks/{task}"),
            Some(&admin),
            None,
        )
        .await;
        if r.json["status"] == "succeeded" {
            done = r.json;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(done["status"], "succeeded", "{done}");
    let events = server
        .state()
        .store
        .events_after(id.parse().unwrap(), 0, 100)
        .await
        .unwrap();
    let texts = events
        .iter()
        .filter(|e| serde_json::to_string(e).unwrap().contains("\"hello\""))
        .count();
    assert_eq!(texts, 2, "the message and one agent line: {events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balancer_checks_health_without_a_token_and_the_api_still_wants_one() {
    let (_home, _server, addr, _token) = cloud().await;
    for (path, want) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let r = call(addr, "GET", path, None, None).await;
        assert_eq!((r.status, r.text.as_str()), (200, want), "{path}");
    }
    for path in ["/api/v1/health", "/api/v1/sessions", "/api/v1/capabilities"] {
        let r = call(addr, "GET", path, None, None).await;
        assert_eq!(r.status, 401, "{path}: {}", r.text);
    }
}
