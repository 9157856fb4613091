//! The cloud build (`--no-default-features`): no binding anywhere, a token on every
//! request, writes only with the bearer token.
#![cfg(not(feature = "local-binding"))]

mod common;

use common::{TempDir, request};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

async fn cloud() -> (TempDir, Arc<berth_web::server::Server>, SocketAddr, String) {
    let home = TempDir::new();
    let server = Arc::new(
        berth_web::server::Server::open(home.path(), Default::default())
            .await
            .unwrap(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = berth_web::server::new_token().unwrap();
    let (s, tok) = (server.clone(), token.clone());
    tokio::spawn(async move { s.serve_cloud(listener, tok).await });
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
