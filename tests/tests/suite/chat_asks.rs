//! Approvals in Slack (issue 55), against a fake Slack on loopback over https (the
//! test CA in `BERTH_CA_FILE`) that answers the Web API as Slack does, and clicks
//! signed as Slack signs its interactivity requests: a channel session's request is
//! posted in its thread with its buttons; a signed click by the thread's user decides
//! it (`via: "slack"`) and the message says so; forged, stale and replayed clicks do
//! nothing; another user's click is "not yours"; a click after the deadline says it
//! expired; "always" makes the session rule.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_ask_peer, raw_http, s, slack_sign};
use berth_tests::tls::{HttpsFake, Pki, Received};
use berth_tests::{Berth, eventually};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

/// The fake Slack's answers: a message posted gets a `ts` (a request's card
/// `card-THREAD`, so a test knows which message a click is on).
fn slack_answer(r: &Received) -> String {
    static TS: AtomicU64 = AtomicU64::new(100);
    match r.path.as_str() {
        "/slack/chat.postMessage" => {
            let body: Value = serde_json::from_str(&r.body).unwrap_or_default();
            let ts = match (&body["blocks"], body["thread_ts"].as_str()) {
                (Value::Array(_), Some(thread)) => format!("card-{thread}"),
                (Value::Array(_), None) => "card-dm".to_owned(),
                _ => format!("{}.0", TS.fetch_add(1, Ordering::SeqCst)),
            };
            json!({"ok": true, "channel": "C1", "ts": ts})
        }
        "/slack/chat.update" | "/slack/chat.postEphemeral" => json!({"ok": true}),
        _ => json!({"ok": false, "error": "unknown_method"}),
    }
    .to_string()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// POSTs `body` to `path` on `b`'s web listener, signed at `ts` with `secret`.
fn signed_post(b: &Berth, path: &str, kind: &str, body: &str, secret: &str, ts: i64) -> u16 {
    let (url, _) = b.serve_info();
    let addr = url.trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let ts = ts.to_string();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {kind}\r\n\
         X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {}\r\n",
        slack_sign(secret, &ts, body.as_bytes())
    );
    raw_http(&mut stream, &head, body.as_bytes()).0
}

/// A user's message in channel C1, starting thread `ts`.
fn message(b: &Berth, id: &str, user: &str, text: &str, ts: &str) -> u16 {
    let body = json!({"type": "event_callback", "event_id": id, "event_time": 1, "team_id": "T1",
        "event": {"type": "message", "channel": "C1", "user": user, "text": text, "ts": ts,
                  "channel_type": "channel"}})
    .to_string();
    signed_post(b, "/hooks/slack", "application/json", &body, SECRET, now())
}

/// A `block_actions` click, as Slack sends it to the interactivity URL.
fn click_body(user: &str, trigger: &str, action: &str, approval: &str, message_ts: &str) -> String {
    let payload = json!({"type": "block_actions", "team": {"id": "T1"},
        "user": {"id": user, "username": user.to_lowercase()},
        "api_app_id": "A1", "token": "legacy", "trigger_id": trigger,
        "container": {"type": "message", "message_ts": message_ts, "channel_id": "C1",
                      "is_ephemeral": false},
        "channel": {"id": "C1", "name": "general"},
        "message": {"ts": message_ts},
        "response_url": "https://hooks.slack.invalid/actions/T1/1/x",
        "actions": [{"action_id": action, "block_id": "berth_approval", "value": approval,
                     "type": "button", "action_ts": "1.2"}]});
    form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

fn click(b: &Berth, body: &str, secret: &str, ts: i64) -> u16 {
    signed_post(
        b,
        "/hooks/slack/actions",
        "application/x-www-form-urlencoded",
        body,
        secret,
        ts,
    )
}

/// The calls to `method` the fake received, their bodies as JSON.
fn calls(fake: &HttpsFake, method: &str) -> Vec<Value> {
    fake.received()
        .into_iter()
        .filter(|r| r.path == format!("/slack/{method}"))
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect()
}

/// The `n`th request card posted (1-based), once it is there: its body.
fn card(fake: &HttpsFake, n: usize) -> Value {
    eventually(30, || {
        calls(fake, "chat.postMessage")
            .into_iter()
            .filter(|c| c["blocks"].is_array())
            .nth(n - 1)
    })
    .unwrap_or_else(|| panic!("no request card {n}: {:?}", fake.received()))
}

fn approval(b: &Berth, id: &str) -> Value {
    let all = b.json(&["approvals", "--all", "--json"]);
    all["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no request {id}: {all}"))
}

/// `berth serve` with `settings` as the user settings, the test CA of a fake platform
/// on loopback (answering with `answer`), the variables `env` gives for the fake's URL,
/// and the scripted `asker` agent.
fn served(
    tag: &str,
    answer: fn(&Received) -> String,
    settings: &str,
    env: impl Fn(&str) -> Vec<(&'static str, String)>,
) -> (berth_tests::TempDir, HttpsFake, Berth) {
    let root = berth_tests::TempDir::new(&format!("{tag}-pki"));
    let pki = Pki::generate(&root.path().join("pki"), tag);
    let fake = HttpsFake::start(&pki, answer);
    let mut b = Berth::new(tag);
    std::fs::write(b.config.join("settings.jsonc"), settings).unwrap();
    b.env("BERTH_CA_FILE", s(&pki.ca));
    for (k, v) in env(&fake.url()) {
        b.env(k, &v);
    }
    b.serve();
    add_ask_peer(&b, "asker");
    (root, fake, b)
}

/// Slack's variables for a fake at `url`, channel sessions answered by `asker`.
fn slack_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("BERTH_SLACK_SIGNING_SECRET", SECRET.to_owned()),
        ("BERTH_SLACK_BOT_TOKEN", "xoxb-test".to_owned()),
        ("BERTH_SLACK_API_URL", format!("{url}/slack")),
        ("BERTH_CHANNEL_AGENT", "asker".to_owned()),
    ]
}

#[test]
fn a_channel_sessions_request_is_answered_with_its_buttons_in_the_thread() {
    let (_pki, fake, b) = served(
        "chat-asks",
        slack_answer,
        r#"{"ask": {"deadline_secs": 3},
            "notify": {"desktop": false, "answerers": {"slack": ["U0CAT"]}}}"#,
        slack_env,
    );

    // 1. Ann (U0ANN) asks in a thread; the request comes to the thread with buttons.
    assert_eq!(message(&b, "Ev1", "U0ANN", "run: echo one", "1.1"), 200);
    let posted = card(&fake, 1);
    assert_eq!(posted["channel"], "C1");
    assert_eq!(posted["thread_ts"], "1.1", "in the thread: {posted}");
    let actions = posted["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "actions")
        .unwrap()
        .clone();
    let ids: Vec<&str> = actions["elements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["berth_allow", "berth_deny", "berth_always"]);
    let id = actions["elements"][0]["value"].as_str().unwrap().to_owned();
    assert!(
        posted["blocks"].to_string().contains("echo one"),
        "{posted}"
    );
    let ts1 = "card-1.1";

    // 2. Forged (another secret), stale (six minutes old): refused, nothing decided.
    let allow = click_body("U0ANN", "tr-1", "berth_allow", &id, ts1);
    assert_eq!(click(&b, &allow, "not-the-secret", now()), 401);
    assert_eq!(click(&b, &allow, SECRET, now() - 360), 401);
    assert!(approval(&b, &id)["decision"].is_null());

    // 3. Bob's click: not his thread, told so alone; still waiting.
    let bob = click_body("U0BOB", "tr-bob", "berth_allow", &id, ts1);
    assert_eq!(click(&b, &bob, SECRET, now()), 200);
    let told = eventually(20, || calls(&fake, "chat.postEphemeral").into_iter().next())
        .expect("Bob is told");
    assert_eq!(told["user"], "U0BOB");
    assert!(
        told["text"].as_str().unwrap().contains("Not yours"),
        "{told}"
    );
    assert!(approval(&b, &id)["decision"].is_null());

    // 4. Ann's signed click allows it, once; the message says who, what and when.
    let at = now();
    assert_eq!(click(&b, &allow, SECRET, at), 200);
    let d = eventually(20, || {
        let a = approval(&b, &id);
        (!a["decision"].is_null()).then(|| a["decision"].clone())
    })
    .unwrap();
    assert_eq!(
        (&d["decision"], &d["by"], &d["who"], &d["via"]),
        (
            &json!("allow"),
            &json!("human"),
            &json!("U0ANN"),
            &json!("slack")
        ),
        "{d}"
    );
    let updated = eventually(20, || {
        calls(&fake, "chat.update")
            .into_iter()
            .find(|u| u["ts"] == ts1)
    })
    .unwrap();
    assert!(
        updated["text"]
            .as_str()
            .unwrap()
            .starts_with("Allowed by <@U0ANN> via slack"),
        "{updated}"
    );
    assert!(
        !updated["blocks"].to_string().contains("berth_allow"),
        "no buttons left: {updated}"
    );
    // The agent went on: its answer comes to the thread.
    eventually(30, || {
        calls(&fake, "chat.postMessage").into_iter().find(|m| {
            m["text"]
                .as_str()
                .is_some_and(|t| t.contains("ran echo one"))
        })
    })
    .unwrap_or_else(|| panic!("no answer after the allow: {:?}", fake.received()));

    // 5. The same click again (a replay, inside the window): nothing at all; a fresh
    //    click on the decided request is told it is decided.
    assert_eq!(click(&b, &allow, SECRET, at), 200);
    let again = click_body("U0ANN", "tr-2", "berth_deny", &id, ts1);
    assert_eq!(click(&b, &again, SECRET, now()), 200);
    let told = eventually(20, || {
        let t = calls(&fake, "chat.postEphemeral");
        (t.len() == 2).then(|| t[1].clone())
    })
    .unwrap_or_else(|| panic!("{:?}", calls(&fake, "chat.postEphemeral")));
    assert!(
        told["text"].as_str().unwrap().contains("already decided"),
        "{told}"
    );
    assert_eq!(approval(&b, &id)["decision"]["decision"], "allow");

    // 6. "Always for this session" allows it and makes the session's rule; Cat, whom
    //    the settings name as an answerer, may answer in Ann's thread.
    assert_eq!(message(&b, "Ev2", "U0ANN", "run: echo two", "1.2"), 200);
    let second = card(&fake, 2);
    let id2 = second["blocks"][2]["elements"][2]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let ts2 = "card-1.2";
    let always = click_body("U0CAT", "tr-3", "berth_always", &id2, ts2);
    assert_eq!(click(&b, &always, SECRET, now()), 200);
    let d = eventually(20, || {
        let a = approval(&b, &id2);
        (!a["decision"].is_null()).then(|| a["decision"].clone())
    })
    .unwrap();
    assert_eq!(
        (&d["decision"], &d["always"], &d["who"]),
        (&json!("allow"), &json!(true), &json!("U0CAT"))
    );
    let session = approval(&b, &id2)["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rules = b.json(&["session", "rules", &session, "--json"]);
    assert_eq!(rules["rules"][0]["rule"], "execute: echo two", "{rules}");

    // 7. A click after the deadline: the message says it expired, and so is the user.
    assert_eq!(message(&b, "Ev3", "U0ANN", "run: echo three", "1.3"), 200);
    let third = card(&fake, 3);
    let id3 = third["blocks"][2]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    eventually(30, || {
        let a = approval(&b, &id3);
        (a["decision"]["by"] == "timeout").then_some(())
    })
    .expect("the request times out");
    let late = click_body("U0ANN", "tr-4", "berth_allow", &id3, "card-1.3");
    assert_eq!(click(&b, &late, SECRET, now()), 200);
    let told = eventually(20, || {
        calls(&fake, "chat.postEphemeral")
            .into_iter()
            .find(|t| t["text"].as_str().is_some_and(|t| t.contains("expired")))
    })
    .unwrap_or_else(|| panic!("{:?}", calls(&fake, "chat.postEphemeral")));
    assert_eq!(told["user"], "U0ANN");
    eventually(20, || {
        calls(&fake, "chat.update").into_iter().find(|u| {
            u["ts"] == "card-1.3" && u["text"].as_str().is_some_and(|t| t.starts_with("Expired"))
        })
    })
    .expect("the message says it expired");
    assert_eq!(approval(&b, &id3)["decision"]["decision"], "deny");
}

const LARK_TOKEN: &str = "lark-verification-token";

/// The fake Lark's answers: the tenant token, a card posted (`om_card_N`), updated.
fn lark_answer(r: &Received) -> String {
    static N: AtomicU64 = AtomicU64::new(1);
    match (r.method.as_str(), r.path.as_str()) {
        (_, "/lark/auth/v3/tenant_access_token/internal") => {
            json!({"code": 0, "msg": "ok", "tenant_access_token": "t-tenant", "expire": 7200})
        }
        ("POST", p) if p.starts_with("/lark/im/v1/messages?receive_id_type=") => {
            let n = N.fetch_add(1, Ordering::SeqCst);
            json!({"code": 0, "msg": "success", "data": {"message_id": format!("om_{n}")}})
        }
        ("PATCH", p) if p.starts_with("/lark/im/v1/messages/") => {
            json!({"code": 0, "msg": "success", "data": {}})
        }
        _ => json!({"code": 99991663, "msg": "unknown"}),
    }
    .to_string()
}

/// POSTs a Lark callback to `b`'s web listener (verified by its token): status, body.
fn lark_post(b: &Berth, body: &Value) -> (u16, Value) {
    lark_post_with(b, body, &[])
}

/// [`lark_post`] with more headers (a signature).
fn lark_post_with(b: &Berth, body: &Value, headers: &[(&str, String)]) -> (u16, Value) {
    let (url, _) = b.serve_info();
    let addr = url.trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let mut head =
        format!("POST /hooks/lark HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    let (status, answer) = raw_http(&mut stream, &head, body.to_string().as_bytes());
    (
        status,
        serde_json::from_slice(&answer).unwrap_or(Value::Null),
    )
}

fn lark_message(id: &str, user: &str, chat: &str, text: &str) -> Value {
    json!({"schema": "2.0",
           "header": {"event_id": id, "token": LARK_TOKEN, "event_type": "im.message.receive_v1"},
           "event": {"sender": {"sender_type": "user", "sender_id": {"open_id": user}},
                     "message": {"chat_id": chat, "message_type": "text",
                                 "content": json!({"text": text}).to_string()}}})
}

/// A click on a card's button, as Lark's `card.action.trigger` callback carries it.
fn lark_click(id: &str, token: &str, user: &str, action: &str, approval: &str) -> Value {
    json!({"schema": "2.0",
           "header": {"event_id": id, "token": token, "create_time": "1700000000000",
                      "event_type": "card.action.trigger", "tenant_key": "tk", "app_id": "cli_app"},
           "event": {"operator": {"tenant_key": "tk", "open_id": user, "user_id": "u1"},
                     "token": "c-update-token", "host": "im_message",
                     "action": {"tag": "button", "value": {"berth": action, "approval": approval}},
                     "context": {"open_message_id": "om_1", "open_chat_id": "oc_chat"}}})
}

#[test]
fn a_lark_chats_request_is_answered_on_its_card() {
    let (_pki, fake, b) = served(
        "lark-asks",
        lark_answer,
        r#"{"ask": {"deadline_secs": 3}}"#,
        |url| {
            vec![
                ("BERTH_LARK_VERIFICATION_TOKEN", LARK_TOKEN.to_owned()),
                ("BERTH_LARK_APP_ID", "cli_app".to_owned()),
                ("BERTH_LARK_APP_SECRET", "app-secret".to_owned()),
                ("BERTH_LARK_API_URL", format!("{url}/lark")),
                ("BERTH_CHANNEL_AGENT", "asker".to_owned()),
            ]
        },
    );

    // The request comes to the chat as an interactive card with three buttons.
    let (code, _) = lark_post(
        &b,
        &lark_message("e1", "ou_ann", "oc_chat", "run: echo one"),
    );
    assert_eq!(code, 200);
    let card = eventually(30, || {
        fake.received().into_iter().find(|r| {
            r.path == "/lark/im/v1/messages?receive_id_type=chat_id"
                && r.body.contains("interactive")
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no card: {:?}\n{}\n{}",
            fake.received(),
            b.serve_log(),
            b.json(&["approvals", "--all", "--json"])
        )
    });
    let body: Value = serde_json::from_str(&card.body).unwrap();
    assert_eq!(body["receive_id"], "oc_chat");
    let content: Value = serde_json::from_str(body["content"].as_str().unwrap()).unwrap();
    let buttons = content["elements"][2]["actions"]
        .as_array()
        .unwrap()
        .clone();
    let names: Vec<&str> = buttons
        .iter()
        .map(|b| b["value"]["berth"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["allow", "deny", "always"]);
    let id = buttons[0]["value"]["approval"].as_str().unwrap().to_owned();

    // A forged callback (another token) is refused; another user is "not yours".
    let (code, _) = lark_post(&b, &lark_click("c0", "forged", "ou_ann", "allow", &id));
    assert_eq!(code, 401);
    let (code, answer) = lark_post(&b, &lark_click("c1", LARK_TOKEN, "ou_bob", "allow", &id));
    assert_eq!(code, 200);
    assert_eq!(answer["toast"]["type"], "error", "{answer}");
    assert!(
        answer["toast"]["content"]
            .as_str()
            .unwrap()
            .contains("Not yours")
    );
    assert!(approval(&b, &id)["decision"].is_null());

    // Ann's click allows it: the answer's toast and card say who, what and when.
    let (code, answer) = lark_post(&b, &lark_click("c2", LARK_TOKEN, "ou_ann", "allow", &id));
    assert_eq!(code, 200);
    assert_eq!(answer["toast"]["type"], "success", "{answer}");
    let title = answer["card"]["data"]["header"]["title"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(title.starts_with("Allowed by ou_ann via lark"), "{answer}");
    let d = approval(&b, &id)["decision"].clone();
    assert_eq!(
        (&d["who"], &d["via"]),
        (&json!("ou_ann"), &json!("lark")),
        "{d}"
    );
    // The same callback again: nothing; a later one is told it is decided.
    let (_, again) = lark_post(&b, &lark_click("c2", LARK_TOKEN, "ou_ann", "deny", &id));
    assert_eq!(again, json!({}), "a replay does nothing");
    let (_, later) = lark_post(&b, &lark_click("c3", LARK_TOKEN, "ou_ann", "deny", &id));
    assert_eq!(later["toast"]["type"], "warning", "{later}");
    assert!(
        later["toast"]["content"]
            .as_str()
            .unwrap()
            .contains("already decided")
    );

    // A request nobody answers: its card is updated to say it expired (PATCH).
    let (code, _) = lark_post(&b, &lark_message("e2", "ou_ann", "oc_two", "run: echo two"));
    assert_eq!(code, 200);
    let waiting = eventually(30, || {
        let all = b.json(&["approvals", "--all", "--json"]);
        all["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["command"] == "echo two" && a["decision"]["by"] == "timeout")
            .cloned()
    })
    .expect("the second request times out");
    let patched = eventually(20, || {
        fake.received()
            .into_iter()
            .find(|r| r.method == "PATCH" && r.body.contains("Expired"))
    })
    .unwrap_or_else(|| panic!("no card update: {:?}", fake.received()));
    assert!(
        patched.path.starts_with("/lark/im/v1/messages/om_"),
        "{}",
        patched.path
    );
    let late = waiting["id"].as_str().unwrap();
    let (_, told) = lark_post(&b, &lark_click("c4", LARK_TOKEN, "ou_ann", "allow", late));
    assert!(
        told["toast"]["content"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{told}"
    );
}

/// A desktop session's request, for the user `notify.slack` names: a direct message
/// with the buttons; a click approves, and the agent on "the laptop" goes on. Someone
/// else's click is not theirs.
#[test]
fn a_desktop_sessions_request_comes_as_a_direct_message_and_a_click_answers_it() {
    let (_pki, fake, b) = served(
        "dm-asks",
        slack_answer,
        r#"{"notify": {"slack": "U0ANN", "desktop": false}}"#,
        |url| {
            let mut env = slack_env(url);
            env.retain(|(k, _)| *k != "BERTH_CHANNEL_AGENT");
            env
        },
    );
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    let session = berth_tests::steps::new_session(&b, "asker", Some(&app));
    let task = berth_tests::steps::send_detached(&b, &session, "run: echo laptop > done.txt");

    let dm = eventually(30, || {
        calls(&fake, "chat.postMessage")
            .into_iter()
            .find(|m| m["blocks"].is_array())
    })
    .unwrap_or_else(|| panic!("no direct message: {:?}", fake.received()));
    assert_eq!(dm["channel"], "U0ANN", "a direct message to the user: {dm}");
    assert!(dm["thread_ts"].is_null(), "{dm}");
    let text = dm["blocks"].to_string();
    assert!(
        !text.contains(&b.user_home.display().to_string()),
        "no real home: {text}"
    );
    let id = dm["blocks"][2]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_owned();
    let ts = "card-dm";
    let bob = click_body("U0BOB", "dm-1", "berth_allow", &id, ts);
    assert_eq!(click(&b, &bob, SECRET, now()), 200);
    eventually(20, || {
        calls(&fake, "chat.postEphemeral")
            .into_iter()
            .find(|t| t["user"] == "U0BOB")
    })
    .expect("Bob is told it is not his");
    let ann = click_body("U0ANN", "dm-2", "berth_allow", &id, ts);
    assert_eq!(click(&b, &ann, SECRET, now()), 200);
    let done = berth_tests::steps::wait_final(&b, &session, &task);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(
        std::fs::read_to_string(app.join("done.txt")).unwrap(),
        "laptop\n"
    );
    let d = &done["approvals"][0]["decision"];
    assert_eq!(
        (&d["who"], &d["via"]),
        (&json!("U0ANN"), &json!("slack")),
        "{d}"
    );
}

/// With an encrypt key, Lark signs every callback: a card click is taken only signed
/// (hex SHA-256 of timestamp, nonce, key and body, computed here as Lark does) and
/// within the five-minute window; an unsigned, a stale or an altered one does nothing.
#[test]
fn a_lark_click_is_taken_only_when_signed_in_time() {
    const KEY: &str = "lark-encrypt-key";
    let (_pki, fake, b) = served(
        "lark-signed",
        lark_answer,
        r#"{"ask": {"deadline_secs": 60}}"#,
        |url| {
            vec![
                ("BERTH_LARK_ENCRYPT_KEY", KEY.to_owned()),
                ("BERTH_LARK_APP_ID", "cli_app".to_owned()),
                ("BERTH_LARK_APP_SECRET", "app-secret".to_owned()),
                ("BERTH_LARK_API_URL", format!("{url}/lark")),
                ("BERTH_CHANNEL_AGENT", "asker".to_owned()),
            ]
        },
    );
    let signed = |body: &Value, ts: i64| {
        use sha2::{Digest, Sha256};
        let ts = ts.to_string();
        let digest = Sha256::new()
            .chain_update(ts.as_bytes())
            .chain_update(b"nonce-1")
            .chain_update(KEY.as_bytes())
            .chain_update(body.to_string().as_bytes())
            .finalize();
        let sig: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        vec![
            ("X-Lark-Request-Timestamp", ts),
            ("X-Lark-Request-Nonce", "nonce-1".to_owned()),
            ("X-Lark-Signature", sig),
        ]
    };
    let msg = lark_message("e1", "ou_ann", "oc_chat", "run: echo signed");
    assert_eq!(lark_post_with(&b, &msg, &signed(&msg, now())).0, 200);
    let id = eventually(30, || {
        let all = b.json(&["approvals", "--json"]);
        all["approvals"][0]["id"].as_str().map(str::to_owned)
    })
    .expect("the request waits");
    eventually(30, || {
        fake.received()
            .into_iter()
            .find(|r| r.body.contains("interactive"))
    })
    .expect("its card is posted");
    let click = lark_click("c1", "", "ou_ann", "allow", &id);
    assert_eq!(lark_post(&b, &click).0, 401, "unsigned");
    assert_eq!(
        lark_post_with(&b, &click, &signed(&click, now() - 360)).0,
        401,
        "stale"
    );
    let other = lark_click("c1", "", "ou_ann", "deny", &id);
    assert_eq!(
        lark_post_with(&b, &other, &signed(&click, now())).0,
        401,
        "altered after signing"
    );
    assert!(approval(&b, &id)["decision"].is_null());
    let (code, answer) = lark_post_with(&b, &click, &signed(&click, now()));
    assert_eq!(code, 200);
    assert_eq!(answer["toast"]["type"], "success", "{answer}");
    assert_eq!(approval(&b, &id)["decision"]["via"], "lark");
}
