//! Chat channels end to end: signed webhooks on the web listener (and `berth-server`'s
//! listener) over loopback, real SQLite, a `sh -c` agent, and a fake Slack/Lark API
//! that records the answers posted back. Runs in both feature sets.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use aes::Aes256;
use axum::extract::State;
use axum::http::HeaderMap;
use berth_web::api::ApiError;
use berth_web::hooks::{
    ChannelConfig, ChannelMessage, Intake, LarkConfig, Platform, Secret, SlackConfig, Thread,
    crypto, read_request,
};
use berth_web::server::{Server, ServerOptions};
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockModeEncrypt, KeyIvInit};
use common::{Reply, ShExecutor, TempDir, TestServer, add_agent, request};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const BOT_TOKEN: &str = "xoxb-test-token";
const LARK_TOKEN: &str = "lark-verification-token";
const LARK_KEY: &str = "lark encrypt key";

/// One call the fake platform API received.
#[derive(Debug, Clone, PartialEq)]
struct Call {
    path: String,
    auth: Option<String>,
    body: Value,
}

/// A fake Slack + Lark API: answers like the real ones and records every call.
#[derive(Debug, Clone, Default)]
struct Fake {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl Fake {
    async fn start() -> (SocketAddr, Fake) {
        let fake = Fake::default();
        let app = axum::Router::new()
            .fallback(fake_api)
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, fake)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Waits until `n` calls arrived (10 s at most).
    async fn wait_for(&self, n: usize) -> Vec<Call> {
        for _ in 0..1000 {
            let calls = self.calls();
            if calls.len() >= n {
                return calls;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the fake API got {:?}, not {n} calls", self.calls());
    }
}

async fn fake_api(
    State(fake): State<Fake>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> axum::Json<Value> {
    let path = uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    fake.calls.lock().unwrap().push(Call {
        path: path.clone(),
        auth: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned()),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    axum::Json(match path.as_str() {
        "/slack/chat.postMessage" => json!({"ok": true, "channel": "C1", "ts": "9.9"}),
        "/lark/auth/v3/tenant_access_token/internal" => {
            json!({"code": 0, "msg": "ok", "tenant_access_token": "t-tenant", "expire": 7200})
        }
        "/lark/im/v1/messages?receive_id_type=chat_id" => {
            json!({"code": 0, "msg": "success", "data": {"message_id": "om_1"}})
        }
        _ => json!({"ok": false, "error": "unknown_method", "code": 404}),
    })
}

fn config(fake: SocketAddr) -> ChannelConfig {
    ChannelConfig {
        slack: Some(SlackConfig {
            signing_secret: Secret::new(SLACK_SECRET),
            bot_token: Some(Secret::new(BOT_TOKEN)),
            api_url: format!("http://{fake}/slack"),
        }),
        lark: Some(LarkConfig {
            verification_token: Some(Secret::new(LARK_TOKEN)),
            encrypt_key: Some(Secret::new(LARK_KEY)),
            app: Some(("cli_app".into(), Secret::new("app-secret"))),
            api_url: format!("http://{fake}/lark"),
        }),
        agent: Some("bot".into()),
        member: None,
        asks: Default::default(),
    }
}

/// A server with the `sh` executor, its control socket, and its web listener (or
/// `berth-server`'s listener) on loopback.
struct Rig {
    t: TestServer,
    addr: SocketAddr,
    fake: Fake,
}

impl Rig {
    async fn start(cloud: bool, channels: Option<ChannelConfig>) -> Rig {
        Rig::start_full(cloud, channels, "echo answer").await
    }

    /// A rig whose channel agent, `bot`, runs `sh -c BOT` (with `HOME_DIR`, the server
    /// user's home, in its environment).
    async fn start_with_bot(cloud: bool, bot: &str) -> Rig {
        Rig::start_full(cloud, None, bot).await
    }

    async fn start_full(cloud: bool, channels: Option<ChannelConfig>, bot: &str) -> Rig {
        let (fake_addr, fake) = Fake::start().await;
        let home = TempDir::new("w");
        let opts = ServerOptions {
            executor: Some(Arc::new(ShExecutor {
                scratch: home.path().join("scratch"),
            })),
            display: Some(common::home_context(home.path())),
            channels: Some(channels.unwrap_or_else(|| config(fake_addr))),
            ..ServerOptions::default()
        };
        let server = Arc::new(Server::open(home.path(), opts).await.unwrap());
        let socket = server.socket_path();
        let control = server.bind_control(&socket).await.unwrap();
        let s = server.clone();
        tokio::spawn(async move { s.serve_control(control).await });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = server.clone();
        let token = "web-token".to_owned();
        if cloud {
            tokio::spawn(async move {
                s.serve_cloud(
                    berth_web::net::listener::WebListener::Plain(listener),
                    token,
                )
                .await
            });
        } else {
            let hosts = berth_web::api::loopback_hosts(addr);
            tokio::spawn(async move {
                s.serve_web(
                    berth_web::net::listener::WebListener::Plain(listener),
                    token,
                    hosts,
                )
                .await
            });
        }
        let t = TestServer {
            home,
            server,
            socket,
        };
        let bot = format!("HOME_DIR='{}'; {bot}", t.home.path().display());
        add_agent(&t, "bot", &bot).await;
        Rig { t, addr, fake }
    }

    /// A POST to a hook with a `Host` the web listener's guard would refuse: the hooks
    /// are outside the guard.
    async fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let mut h = vec![("host", "hooks.example.com")];
        h.extend_from_slice(headers);
        request(stream, "POST", path, &h, Some(body.to_owned())).await
    }

    async fn sessions(&self) -> Vec<Value> {
        let r = self.t.call("GET", "/api/v1/sessions", None).await;
        r.json.as_array().expect("a list").clone()
    }

    async fn tasks(&self) -> Vec<Value> {
        let r = self.t.call("GET", "/api/v1/tasks", None).await;
        r.json.as_array().expect("a list").clone()
    }
}

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Signs like Slack: `v0=` + hex(HMAC-SHA256(secret, "v0:ts:body")).
fn slack_sig(secret: &str, ts: i64, body: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{ts}:{body}").as_bytes());
    format!("v0={}", hex(&mac.finalize().into_bytes()))
}

async fn slack(rig: &Rig, ts: i64, sig: &str, body: &str) -> Reply {
    let ts = ts.to_string();
    rig.post(
        "/hooks/slack",
        &[
            ("x-slack-request-timestamp", &ts),
            ("x-slack-signature", sig),
        ],
        body,
    )
    .await
}

async fn slack_signed(rig: &Rig, body: &str) -> Reply {
    let ts = now();
    slack(rig, ts, &slack_sig(SLACK_SECRET, ts, body), body).await
}

fn slack_message(event_id: &str, text: &str, ts: &str, thread_ts: Option<&str>) -> String {
    let mut event = json!({"type": "message", "channel": "C1", "user": "U1", "text": text,
                           "ts": ts, "channel_type": "channel"});
    if let Some(t) = thread_ts {
        event["thread_ts"] = json!(t);
    }
    json!({"token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
           "event_id": event_id, "event_time": 1, "event": event})
    .to_string()
}

fn code(r: &Reply) -> &str {
    r.json["error"]["code"]
        .as_str()
        .unwrap_or("<no error code>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_slack_message_runs_in_scratch_and_the_answer_goes_to_its_thread() {
    let rig = Rig::start(false, None).await;
    let body = slack_message(
        "Ev1",
        "please work in /home/x/code",
        "1700000000.000100",
        None,
    );
    let r = slack_signed(&rig, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.json["session"].as_str().expect("a session").to_owned();
    let task = r.json["task"].as_str().expect("a task").to_owned();

    let mut done = rig.t.wait_task(&task).await;
    for stamp in ["created_at", "started_at", "finished_at"] {
        let at = done.as_object_mut().and_then(|o| o.remove(stamp));
        assert!(at.is_some_and(|a| a.is_string()), "{stamp}");
    }
    let scratch = rig.t.home.path().join("scratch").join(&session);
    assert_eq!(
        done,
        json!({"id": task, "session_id": session, "status": "succeeded", "wait_reason": null,
               "error_code": null, "denials": [],
               "work_dir": scratch.display().to_string(), "exit_code": 0, "error": null})
    );
    let s = rig
        .t
        .call("GET", &format!("/api/v1/sessions/{session}"), None)
        .await;
    assert_eq!(s.json["origin"], "channel");
    assert_eq!(s.json["agent"], "bot");
    if cfg!(feature = "local-binding") {
        assert_eq!(
            s.json["binding"],
            Value::Null,
            "a path in the text binds nothing"
        );
    }

    let calls = rig.fake.wait_for(1).await;
    assert_eq!(
        calls,
        vec![Call {
            path: "/slack/chat.postMessage".into(),
            auth: Some(format!("Bearer {BOT_TOKEN}")),
            body: json!({"channel": "C1", "thread_ts": "1700000000.000100", "text": "answer"}),
        }]
    );

    // Slack retries the same event: nothing new.
    let r = slack_signed(&rig, &body).await;
    assert_eq!(
        (r.status, &r.json),
        (200, &json!({"ok": true, "duplicate": true}))
    );
    assert_eq!(rig.tasks().await.len(), 1);

    // A reply in the thread goes to the same session.
    let more = slack_message(
        "Ev2",
        "and again",
        "1700000001.000200",
        Some("1700000000.000100"),
    );
    let r = slack_signed(&rig, &more).await;
    assert_eq!(
        r.json["session"].as_str(),
        Some(session.as_str()),
        "{}",
        r.text
    );
    rig.t.wait_task(r.json["task"].as_str().unwrap()).await;
    assert_eq!(
        rig.fake.wait_for(2).await[1].body["thread_ts"],
        "1700000000.000100"
    );

    // The bot's own answer comes back as an event: ignored.
    let own = json!({"type": "event_callback", "event_id": "Ev3", "event": {
        "type": "message", "channel": "C1", "text": "answer", "ts": "2.0",
        "thread_ts": "1700000000.000100", "bot_id": "B1"}})
    .to_string();
    let r = slack_signed(&rig, &own).await;
    assert_eq!(
        (r.status, r.json["ignored"].as_str()),
        (200, Some("a bot's message"))
    );
    assert_eq!(
        (rig.sessions().await.len(), rig.tasks().await.len()),
        (1, 2)
    );
}

#[cfg(feature = "local-binding")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_session_cannot_be_linked() {
    let rig = Rig::start(false, None).await;
    let body = slack_message("Ev1", "hello", "1.1", None);
    let r = slack_signed(&rig, &body).await;
    let session = r.json["session"].as_str().expect("a session").to_owned();
    let dir = TempDir::new("w");
    let r = rig
        .t
        .call(
            "PUT",
            &format!("/api/v1/sessions/{session}/binding"),
            Some(json!({"dir": dir.path().display().to_string()})),
        )
        .await;
    assert_eq!(
        (r.status, code(&r)),
        (403, "origin_cannot_bind"),
        "{}",
        r.text
    );
    let s = rig
        .t
        .call("GET", &format!("/api/v1/sessions/{session}"), None)
        .await;
    assert_eq!(s.json["binding"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_stale_and_malformed_slack_requests_do_nothing() {
    let rig = Rig::start(false, None).await;
    let body = slack_message("Ev1", "hello", "1.1", None);
    let t = now();

    let forged = slack(&rig, t, &slack_sig("not the secret", t, &body), &body).await;
    assert_eq!((forged.status, code(&forged)), (401, "bad_signature"));
    let tampered = slack(
        &rig,
        t,
        &slack_sig(SLACK_SECRET, t, &body),
        &body.replace("hello", "rm"),
    )
    .await;
    assert_eq!(tampered.status, 401);
    let stale = slack(
        &rig,
        t - 301,
        &slack_sig(SLACK_SECRET, t - 301, &body),
        &body,
    )
    .await;
    assert_eq!(
        (stale.status, code(&stale)),
        (401, "bad_signature"),
        "{}",
        stale.text
    );
    let future = slack(
        &rig,
        t + 400,
        &slack_sig(SLACK_SECRET, t + 400, &body),
        &body,
    )
    .await;
    assert_eq!(future.status, 401);
    let unsigned = rig.post("/hooks/slack", &[], &body).await;
    assert_eq!(unsigned.status, 401);

    let malformed = slack_signed(&rig, "{\"type\": \"event_callback\", ").await;
    assert_eq!((malformed.status, code(&malformed)), (400, "bad_request"));

    let challenge =
        json!({"token": "x", "challenge": "3eZbrw1a", "type": "url_verification"}).to_string();
    let r = rig.post("/hooks/slack", &[], &challenge).await;
    assert_eq!(r.status, 401, "an unsigned challenge is not answered");
    let r = slack(&rig, t, "v0=00", &challenge).await;
    assert_eq!(r.status, 401);
    let r = slack_signed(&rig, &challenge).await;
    assert_eq!(
        (r.status, r.json.clone()),
        (200, json!({"challenge": "3eZbrw1a"}))
    );

    assert_eq!((rig.sessions().await, rig.tasks().await), (vec![], vec![]));
    assert_eq!(rig.fake.calls(), vec![]);
}

/// Found by `fuzz/fuzz_targets/webhook_parse.rs`: a conversation is stored as
/// `channel:thread_ts`, so a channel id holding ':' read back as another conversation
/// (`C1:X` + `1.1` as `C1` + `X:1.1`), and the answer went there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_channel_id_with_a_colon_is_not_taken_in() {
    let rig = Rig::start(false, None).await;
    let body = slack_message("Ev1", "hello", "1.1", None).replace("\"C1\"", "\"C1:X\"");
    assert!(body.contains("C1:X"));
    let r = slack_signed(&rig, &body).await;
    assert_eq!(
        (r.status, r.json),
        (200, json!({"ok": true, "ignored": "a channel id with ':'"}))
    );
    assert_eq!((rig.sessions().await, rig.tasks().await), (vec![], vec![]));
}

/// The handlers' intake as a pure function: what a signed request asks, read at a
/// given time without a server.
#[test]
fn read_request_authenticates_and_reads_without_a_server() {
    let cfg = ChannelConfig {
        slack: Some(SlackConfig {
            signing_secret: Secret::new(SLACK_SECRET),
            bot_token: None,
            api_url: "http://127.0.0.1:9/slack".into(),
        }),
        lark: None,
        agent: None,
        member: None,
        asks: Default::default(),
    };
    let at = 1_700_000_000;
    let body = slack_message("Ev1", "hello", "1.1", Some("1.0"));
    let mut headers = HeaderMap::new();
    headers.insert("x-slack-request-timestamp", at.to_string().parse().unwrap());
    headers.insert(
        "x-slack-signature",
        slack_sig(SLACK_SECRET, at, &body).parse().unwrap(),
    );
    assert_eq!(
        read_request(Platform::Slack, &cfg, &headers, body.as_bytes(), at).unwrap(),
        Intake::Message(ChannelMessage {
            thread: Thread::Slack {
                channel: "C1".into(),
                thread_ts: "1.0".into(),
            },
            text: "hello".into(),
            event_id: "Ev1".into(),
            user: Some("U1".into()),
        })
    );
    let late = read_request(Platform::Slack, &cfg, &headers, body.as_bytes(), at + 301);
    assert!(
        matches!(
            late,
            Err(ApiError::BadSignature {
                platform: "slack",
                ..
            })
        ),
        "{late:?}"
    );
    let lark = read_request(Platform::Lark, &cfg, &headers, b"{}", at);
    assert!(
        matches!(
            lark,
            Err(ApiError::ChannelNotConfigured { platform: "lark" })
        ),
        "{lark:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_without_its_secret_answers_404() {
    let rig = Rig::start(false, Some(ChannelConfig::default())).await;
    let body = slack_message("Ev1", "hello", "1.1", None);
    let t = now();
    let r = slack(&rig, t, &slack_sig(SLACK_SECRET, t, &body), &body).await;
    assert_eq!((r.status, code(&r)), (404, "channel_not_configured"));
    let r = rig.post("/hooks/lark", &[], "{}").await;
    assert_eq!((r.status, code(&r)), (404, "channel_not_configured"));
    assert_eq!(rig.sessions().await, Vec::<Value>::new());
}

/// Encrypts like Lark: base64(IV + AES-256-CBC(SHA-256(key), IV, PKCS#7(plaintext))).
fn lark_encrypt(plaintext: &str) -> String {
    let key: [u8; 32] = Sha256::digest(LARK_KEY.as_bytes()).into();
    let iv = *b"0123456789abcdef";
    let mut buf = plaintext.as_bytes().to_vec();
    buf.resize(plaintext.len() + 16, 0);
    let ct = cbc::Encryptor::<Aes256>::new_from_slices(&key, &iv)
        .unwrap()
        .encrypt_padded::<Pkcs7>(&mut buf, plaintext.len())
        .unwrap()
        .to_vec();
    crypto::base64_encode(&[iv.as_slice(), &ct].concat())
}

fn lark_sig(ts: &str, nonce: &str, body: &str) -> String {
    hex(&Sha256::digest(
        format!("{ts}{nonce}{LARK_KEY}{body}").as_bytes(),
    ))
}

async fn lark(rig: &Rig, body: &str, sig: Option<String>) -> Reply {
    let ts = now().to_string();
    let sig = sig.unwrap_or_else(|| lark_sig(&ts, "nonce-1", body));
    rig.post(
        "/hooks/lark",
        &[
            ("x-lark-request-timestamp", &ts),
            ("x-lark-request-nonce", "nonce-1"),
            ("x-lark-signature", &sig),
        ],
        body,
    )
    .await
}

fn lark_event(event_id: &str, token: &str, text: &str) -> String {
    let plain = json!({
        "schema": "2.0",
        "header": {"event_id": event_id, "token": token, "create_time": "1",
                   "event_type": "im.message.receive_v1", "tenant_key": "tk", "app_id": "cli_app"},
        "event": {
            "sender": {"sender_id": {"open_id": "ou_1"}, "sender_type": "user", "tenant_key": "tk"},
            "message": {"message_id": "om_in", "chat_id": "oc_chat", "chat_type": "group",
                        "message_type": "text",
                        "content": json!({"text": text}).to_string()}
        }
    });
    json!({"encrypt": lark_encrypt(&plain.to_string())}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_signed_lark_message_gets_an_answer_in_its_chat() {
    let rig = Rig::start(false, None).await;
    let challenge = json!({"encrypt": lark_encrypt(&json!({
        "challenge": "ajls384kdjx98XX", "token": LARK_TOKEN, "type": "url_verification"
    }).to_string())})
    .to_string();
    let r = rig.post("/hooks/lark", &[], &challenge).await;
    assert_eq!(
        (r.status, r.json.clone()),
        (200, json!({"challenge": "ajls384kdjx98XX"})),
        "{}",
        r.text
    );

    let body = lark_event("ev-1", LARK_TOKEN, "@_user_1 please work in /home/x/code");
    let r = lark(&rig, &body, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.json["session"].as_str().expect("a session").to_owned();
    let done = rig.t.wait_task(r.json["task"].as_str().unwrap()).await;
    assert_eq!(done["status"], "succeeded");
    let scratch = rig.t.home.path().join("scratch").join(&session);
    assert_eq!(done["work_dir"], scratch.display().to_string());

    let calls = rig.fake.wait_for(2).await;
    assert_eq!(
        calls,
        vec![
            Call {
                path: "/lark/auth/v3/tenant_access_token/internal".into(),
                auth: None,
                body: json!({"app_id": "cli_app", "app_secret": "app-secret"}),
            },
            Call {
                path: "/lark/im/v1/messages?receive_id_type=chat_id".into(),
                auth: Some("Bearer t-tenant".into()),
                body: json!({"receive_id": "oc_chat", "msg_type": "text",
                             "content": "{\"text\":\"answer\"}"}),
            },
        ]
    );

    let r = lark(&rig, &body, None).await;
    assert_eq!(
        (r.status, &r.json),
        (200, &json!({"ok": true, "duplicate": true}))
    );
    assert_eq!(rig.tasks().await.len(), 1);

    // The next message in the chat reuses the cached tenant token.
    let r = lark(&rig, &lark_event("ev-2", LARK_TOKEN, "again"), None).await;
    assert_eq!(r.json["session"].as_str(), Some(session.as_str()));
    rig.t.wait_task(r.json["task"].as_str().unwrap()).await;
    let calls = rig.fake.wait_for(3).await;
    assert_eq!(
        calls[2].path,
        "/lark/im/v1/messages?receive_id_type=chat_id"
    );
    assert_eq!(rig.sessions().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_lark_requests_do_nothing() {
    let rig = Rig::start(false, None).await;
    let wrong_token = lark(&rig, &lark_event("ev-1", "not the token", "hi"), None).await;
    assert_eq!(
        (wrong_token.status, code(&wrong_token)),
        (401, "bad_signature")
    );
    let body = lark_event("ev-2", LARK_TOKEN, "hi");
    let bad_sig = lark(&rig, &body, Some(lark_sig("1", "other", &body))).await;
    assert_eq!((bad_sig.status, code(&bad_sig)), (401, "bad_signature"));
    let unsigned = rig.post("/hooks/lark", &[], &body).await;
    assert_eq!(
        unsigned.status, 401,
        "events must be signed when an encrypt key is set"
    );
    let challenge = json!({"challenge": "c", "token": "wrong", "type": "url_verification"});
    let r = rig.post("/hooks/lark", &[], &challenge.to_string()).await;
    assert_eq!(r.status, 401);

    let malformed = lark(&rig, "{\"encrypt\": ", None).await;
    assert_eq!((malformed.status, code(&malformed)), (400, "bad_request"));
    let garbage = json!({"encrypt": "bm90IGEgcmVhbCBwYXlsb2Fk"}).to_string();
    let r = lark(&rig, &garbage, None).await;
    assert_eq!((r.status, code(&r)), (400, "bad_request"));

    assert_eq!((rig.sessions().await, rig.tasks().await), (vec![], vec![]));
    assert_eq!(rig.fake.calls(), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hooks_are_on_berth_servers_listener_without_its_token() {
    let rig = Rig::start(true, None).await;
    let body = slack_message("Ev1", "hello", "1.1", None);
    let r = slack_signed(&rig, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let task = r.json["task"].as_str().expect("a task").to_owned();
    assert_eq!(rig.t.wait_task(&task).await["status"], "succeeded");
    let stream = tokio::net::TcpStream::connect(rig.addr).await.unwrap();
    let r = request(
        stream,
        "GET",
        "/api/v1/sessions",
        &[("host", "x"), ("authorization", "Bearer web-token")],
        None,
    )
    .await;
    assert_eq!(r.json[0]["origin"], "channel");
    // The rest of the listener still wants the token.
    let r = rig.post("/api/v1/agents", &[], "{}").await;
    assert_eq!(r.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_is_refused_before_anything_is_read() {
    let rig = Rig::start(false, None).await;
    let body = "x".repeat(berth_web::api::BODY_LIMIT + 1);
    let stream = tokio::net::TcpStream::connect(rig.addr).await.unwrap();
    let head = format!(
        "POST /hooks/slack HTTP/1.1\r\nhost: x\r\nx-slack-request-timestamp: {}\r\n\
         x-slack-signature: v0=00\r\ncontent-length: {}\r\n\r\n",
        now(),
        body.len()
    );
    let raw = common::oversized(stream, head, body).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains(r#""code":"payload_too_large""#), "{text}");
    assert_eq!(rig.sessions().await, Vec::<Value>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_encrypt_key_lark_events_are_plain_and_checked_by_token() {
    let (fake_addr, _) = Fake::start().await;
    let mut cfg = config(fake_addr);
    if let Some(lark) = cfg.lark.as_mut() {
        lark.encrypt_key = None;
    }
    let rig = Rig::start(false, Some(cfg)).await;
    let event = |token: &str| {
        json!({
            "schema": "2.0",
            "header": {"event_id": "ev-plain", "token": token,
                       "event_type": "im.message.receive_v1"},
            "event": {"sender": {"sender_type": "user"},
                      "message": {"chat_id": "oc_plain", "message_type": "text",
                                  "content": "{\"text\":\"hi\"}"}}
        })
        .to_string()
    };
    let r = rig.post("/hooks/lark", &[], &event("wrong")).await;
    assert_eq!((r.status, code(&r)), (401, "bad_signature"));
    assert_eq!(rig.sessions().await, Vec::<Value>::new());
    let r = rig.post("/hooks/lark", &[], &event(LARK_TOKEN)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json["task"].is_string(), "{}", r.text);
    let encrypted = json!({"encrypt": lark_encrypt("{}")}).to_string();
    let r = rig.post("/hooks/lark", &[], &encrypted).await;
    assert_eq!(
        (r.status, code(&r)),
        (400, "bad_request"),
        "no key to decrypt with"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_agent_a_message_is_refused_whole_and_its_retry_succeeds_later() {
    let (fake_addr, _) = Fake::start().await;
    let mut cfg = config(fake_addr);
    cfg.agent = Some("later".into());
    let rig = Rig::start(false, Some(cfg)).await;
    let body = slack_message("Ev1", "hello", "1.1", None);
    let r = slack_signed(&rig, &body).await;
    assert_eq!((r.status, code(&r)), (404, "unknown_agent"), "{}", r.text);
    assert_eq!(rig.sessions().await, Vec::<Value>::new());

    // The event id was not recorded: Slack's retry goes through once the agent exists.
    add_agent(&rig.t, "later", "echo answer").await;
    let r = slack_signed(&rig, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let task = r.json["task"].as_str().expect("a task").to_owned();
    assert_eq!(rig.t.wait_task(&task).await["status"], "succeeded");
    let s = rig.sessions().await;
    assert_eq!((s.len(), &s[0]["agent"]), (1, &json!("later")));
}

/// A channel reply passes the display rule: the agent printed where it worked (its
/// scratch directory, under the server user's home) and the user's name; the post
/// shows `~` and `…`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_reply_never_names_the_user() {
    let rig = Rig::start_with_bot(false, "pwd; echo \"I am $(basename $HOME_DIR)\"").await;
    let body = slack_message("Ev9", "where are you?", "1700000000.000900", None);
    let r = slack_signed(&rig, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let session = r.json["session"].as_str().expect("a session").to_owned();
    let calls = rig.fake.wait_for(1).await;
    let name = rig.t.home.path().file_name().unwrap().to_str().unwrap();
    assert_eq!(
        calls[0].body["text"],
        format!("~/scratch/{session}\nI am …"),
        "the home and the name ({name}) never reach the channel"
    );
}
