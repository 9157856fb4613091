//! Berth on the open network (issue 13), against the real binaries on loopback, with a
//! throwaway CA and certificates made inside the test (`berth_tests::tls`):
//!
//! - Slack and Lark answers go out over https, verified with the test CA given by
//!   `BERTH_CA_FILE`; without it the certificate is refused and nothing is posted;
//! - a daemon over https registers, claims and streams; pointed at a certificate it
//!   does not trust it stops at once with the clear error; `--server http://` to a
//!   non-loopback address is refused;
//! - `berth-server --tls-cert/--tls-key` answers https and refuses plain http on that
//!   port; `berth serve --listen` off loopback needs TLS or `--insecure-http`.
//!
//! The daemon fault tests (cut connections, exactly-once events, a daemon killed or
//! stopped) run over https too: `tests/tests/suite/daemons.rs`, the `_over_https`
//! cases.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_command_agent, s, send_json, slack_sign};
use berth_tests::tls::{HttpsFake, Pki, https_get};
use berth_tests::{Berth, eventually, free_port};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::time::Duration;

const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const LARK_TOKEN: &str = "lark-verification-token";

/// The fake Slack and Lark APIs: what the real ones answer to the calls Berth makes.
fn platform_answer(path: &str) -> String {
    match path {
        "/slack/chat.postMessage" => json!({"ok": true, "channel": "C1", "ts": "9.9"}),
        "/lark/auth/v3/tenant_access_token/internal" => {
            json!({"code": 0, "msg": "ok", "tenant_access_token": "t-tenant", "expire": 7200})
        }
        "/lark/im/v1/messages?receive_id_type=chat_id" => {
            json!({"code": 0, "msg": "success", "data": {"message_id": "om_1"}})
        }
        _ => json!({"ok": false, "error": "unknown_method", "code": 404}),
    }
    .to_string()
}

/// `berth serve` with Slack and Lark pointed at `api` (https), the channel agent
/// `bot` answering "answer", and `ca` (if any) as `BERTH_CA_FILE`.
fn channel_server(tag: &str, api: &str, ca: Option<&Pki>) -> Berth {
    let mut b = Berth::new(tag);
    if let Some(pki) = ca {
        b.env("BERTH_CA_FILE", s(&pki.ca));
    }
    for (k, v) in [
        ("BERTH_SLACK_SIGNING_SECRET", SLACK_SECRET.to_owned()),
        ("BERTH_SLACK_BOT_TOKEN", "xoxb-test".to_owned()),
        ("BERTH_SLACK_API_URL", format!("{api}/slack")),
        ("BERTH_LARK_VERIFICATION_TOKEN", LARK_TOKEN.to_owned()),
        ("BERTH_LARK_APP_ID", "cli_app".to_owned()),
        ("BERTH_LARK_APP_SECRET", "app-secret".to_owned()),
        ("BERTH_LARK_API_URL", format!("{api}/lark")),
        ("BERTH_CHANNEL_AGENT", "bot".to_owned()),
    ] {
        b.env(k, &v);
    }
    b.serve();
    add_command_agent(&b, "bot", "cat >/dev/null; echo answer");
    b
}

/// POSTs a webhook to `b`'s web listener (plain http on loopback): the status.
fn hook(b: &Berth, path: &str, headers: &[(&str, String)], body: &str) -> u16 {
    let (url, _) = b.serve_info();
    let addr = url.trim_start_matches("http://").to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    let mut head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    berth_tests::steps::raw_http(&mut stream, &head, body.as_bytes()).0
}

fn slack_event(id: &str, text: &str) -> String {
    json!({"type": "event_callback", "event_id": id, "event_time": 1, "team_id": "T1",
           "event": {"type": "message", "channel": "C1", "user": "U1", "text": text,
                     "ts": format!("1.{id}"), "channel_type": "channel"}})
    .to_string()
}

fn lark_event(id: &str, text: &str) -> String {
    json!({"schema": "2.0",
           "header": {"event_id": id, "token": LARK_TOKEN, "event_type": "im.message.receive_v1"},
           "event": {"sender": {"sender_type": "user"},
                     "message": {"chat_id": "oc_chat", "message_type": "text",
                                 "content": json!({"text": text}).to_string()}}})
    .to_string()
}

fn post_slack(b: &Berth, id: &str) -> u16 {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let body = slack_event(id, "hello");
    let sig = slack_sign(SLACK_SECRET, &ts, body.as_bytes());
    hook(
        b,
        "/hooks/slack",
        &[
            ("X-Slack-Request-Timestamp", ts),
            ("X-Slack-Signature", sig),
        ],
        &body,
    )
}

#[test]
fn slack_and_lark_answers_go_out_over_https_verified_with_the_ca_file() {
    let root = berth_tests::TempDir::new("tls-platforms");
    let pki = Pki::generate(&root.path().join("pki"), "platform");
    let fake = HttpsFake::start(&pki, |r| platform_answer(&r.path));
    let b = channel_server("tls-channels", &fake.url(), Some(&pki));
    let log = b.serve_log();
    assert!(!log.contains("TLS"), "no TLS caveat at start-up: {log}");

    assert_eq!(post_slack(&b, "1"), 200);
    let slack = eventually(20, || {
        fake.received()
            .into_iter()
            .find(|r| r.path == "/slack/chat.postMessage")
    })
    .unwrap_or_else(|| panic!("no Slack answer: {:?}\n{}", fake.received(), b.serve_log()));
    assert_eq!(slack.authorization.as_deref(), Some("Bearer xoxb-test"));
    let body: Value = serde_json::from_str(&slack.body).unwrap();
    assert_eq!(
        (body["channel"].as_str(), body["thread_ts"].as_str()),
        (Some("C1"), Some("1.1"))
    );
    assert!(body["text"].as_str().unwrap().contains("answer"), "{body}");

    // Lark: a tenant access token from the app id and secret, then the message; the
    // token is cached for the next answer.
    for (i, id) in ["ev-1", "ev-2"].into_iter().enumerate() {
        assert_eq!(hook(&b, "/hooks/lark", &[], &lark_event(id, "hi")), 200);
        eventually(20, || {
            let n = fake
                .received()
                .iter()
                .filter(|r| r.path.starts_with("/lark/im/v1/messages"))
                .count();
            (n == i + 1).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "no Lark answer {i}: {:?}\n{}",
                fake.received(),
                b.serve_log()
            )
        });
    }
    let lark: Vec<_> = fake
        .received()
        .into_iter()
        .filter(|r| r.path.starts_with("/lark/"))
        .collect();
    assert_eq!(
        lark.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(),
        [
            "/lark/auth/v3/tenant_access_token/internal",
            "/lark/im/v1/messages?receive_id_type=chat_id",
            "/lark/im/v1/messages?receive_id_type=chat_id",
        ]
    );
    let token_call: Value = serde_json::from_str(&lark[0].body).unwrap();
    assert_eq!(
        token_call,
        json!({"app_id": "cli_app", "app_secret": "app-secret"})
    );
    assert_eq!(lark[1].authorization.as_deref(), Some("Bearer t-tenant"));
    assert_eq!(lark[2].authorization.as_deref(), Some("Bearer t-tenant"));
}

#[test]
fn without_the_ca_the_platforms_certificate_is_refused_and_nothing_is_posted() {
    let root = berth_tests::TempDir::new("tls-untrusted");
    let pki = Pki::generate(&root.path().join("pki"), "platform");
    let fake = HttpsFake::start(&pki, |r| platform_answer(&r.path));
    let b = channel_server("tls-nochannel", &fake.url(), None);
    assert_eq!(post_slack(&b, "1"), 200);
    let log = eventually(20, || {
        let log = b.serve_log();
        log.contains("could not be posted back").then_some(log)
    })
    .unwrap_or_else(|| panic!("no failure logged:\n{}", b.serve_log()));
    assert!(
        log.contains("the server's certificate is not trusted"),
        "{log}"
    );
    assert!(fake.received().is_empty(), "{:?}", fake.received());
}

/// `berth serve --allow-daemons` over TLS on loopback with `pki`'s certificate.
fn tls_server(tag: &str, pki: &Pki) -> (Berth, String) {
    let mut srv = Berth::new(tag);
    srv.env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000");
    srv.serve_tls(pki, &["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    (srv, url)
}

/// A test CA, a TLS `berth serve` using its certificate, its URL, a daemon token for
/// `laptop`, and a fresh installation for the laptop.
fn tls_rig(tag: &str) -> (berth_tests::TempDir, Pki, Berth, String, String, Berth) {
    let root = berth_tests::TempDir::new(tag);
    let pki = Pki::generate(&root.path().join("pki"), "server");
    let (srv, url) = tls_server(&format!("{tag}-srv"), &pki);
    let token = srv.daemon_token("laptop");
    let laptop = Berth::new(&format!("{tag}-laptop"));
    (root, pki, srv, url, token, laptop)
}

/// The agent `name` running `script`, registered on the server (a daemon registers
/// none), and a session of it bound to `~/code/app` on the laptop; the directory and
/// the session id.
fn bound_on(srv: &Berth, laptop: &Berth, name: &str, script: &str) -> (std::path::PathBuf, String) {
    add_command_agent(srv, name, script);
    let dir = laptop.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    let session = laptop.json(&[
        "session",
        "new",
        "--agent",
        name,
        "--dir",
        s(&dir),
        "--json",
    ]);
    assert_eq!(session["binding"]["daemon_name"], "laptop", "{session}");
    (dir, session["id"].as_str().unwrap().to_owned())
}

/// Starts the laptop's daemon, named `laptop`, for the server at `url`.
fn start_daemon(laptop: &mut Berth, url: &str, token: &str, extra: &[&str]) {
    let mut args = vec![
        "daemon", "--server", url, "--token", token, "--name", "laptop",
    ];
    args.extend_from_slice(extra);
    laptop.start(&args);
}

#[test]
fn a_daemon_over_https_registers_claims_and_streams() {
    let (_root, pki, srv, url, token, mut laptop) = tls_rig("tls-daemon");
    start_daemon(&mut laptop, &url, &token, &["--ca-file", s(&pki.ca)]);
    let (_dir, id) = bound_on(
        &srv,
        &laptop,
        "count",
        "cat >/dev/null; for i in 1 2 3; do echo line-$i; done",
    );
    let id = id.as_str();
    let (code, events, task) = send_json(&laptop, id, "go");
    assert_eq!(code, 0, "{task}\n{}", laptop.serve_log());
    let lines: Vec<&str> = events
        .iter()
        .filter(|e| e["payload"]["type"] == "text")
        .filter_map(|e| e["payload"]["text"].as_str())
        .collect();
    assert_eq!(lines, ["line-1", "line-2", "line-3"]);
    // The server holds the same transcript: it streamed over TLS.
    let tasks = srv.json(&["task", "list", "--json"]);
    assert_eq!(tasks[0]["status"], "succeeded", "{tasks}");

    // The listener speaks TLS only: https answers, plain http gets a 400 saying so.
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let (_, web_token) = srv.serve_info();
    let (status, body) = https_get(&pki, port, "/api/v1/health", &web_token);
    assert_eq!(status, 200, "{body}");
    // The browser's session cookie never travels over plain http.
    let page = berth_tests::tls::https_request(
        &pki,
        port,
        &format!(
            "GET /?token={web_token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        ),
    );
    let cookie = page
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap_or_else(|| panic!("no cookie: {page}"));
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    let plain = plain_http(port);
    assert!(plain.starts_with("HTTP/1.1 400"), "{plain}");
    assert!(plain.contains("https://"), "{plain}");
}

/// A plain-http GET to loopback `port`: the raw answer.
fn plain_http(port: u16) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

#[test]
fn a_daemon_refuses_an_untrusted_certificate_and_plain_http_off_loopback() {
    let (root, _pki, _srv, url, token, laptop) = tls_rig("tls-refuse");

    // No CA: the certificate is not trusted. A clear error at once, no retry loop.
    let started = std::time::Instant::now();
    let out = laptop.run(&["daemon", "--server", &url, "--token", &token]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error: the server's certificate is not trusted: it is signed by an unknown issuer"
        ),
        "{err}"
    );
    assert!(err.contains("hint: ") && err.contains("--ca-file"), "{err}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("attempt 2"),
        "no retries"
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    // Another CA's file does not help either.
    let other = Pki::generate(&root.path().join("other"), "other");
    let with_ca = |ca: &std::path::Path| {
        laptop.run(&[
            "daemon",
            "--server",
            &url,
            "--token",
            &token,
            "--ca-file",
            s(ca),
        ])
    };
    let out = with_ca(&other.ca);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not trusted"));

    // Plain http to an address off loopback: refused before anything is sent.
    for server in ["http://10.0.0.5:4733", "http://berth.example.com"] {
        let out = laptop.run(&["daemon", "--server", server, "--token", &token]);
        assert_eq!(out.status.code(), Some(1), "{server}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is not a loopback address"), "{err}");
        assert!(err.contains("hint: ") && err.contains("https://"), "{err}");
    }
    // A CA file that is not one is named.
    let bogus = root.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate").unwrap();
    let out = with_ca(&bogus);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no PEM certificate"));
}

#[test]
fn berth_server_serves_https_and_refuses_plain_http_on_that_port() {
    let root = berth_tests::TempDir::new("tls-cloud");
    let pki = Pki::generate(&root.path().join("pki"), "cloud");
    let bin = berth_tests::berth_bin().with_file_name("berth-server");
    if !bin.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "berth-web", "--bin", "berth-server"])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let home = root.path().join("home");
    let port = free_port();
    let mut child = std::process::Command::new(&bin)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--home", s(&home)])
        .args(["--tls-cert", s(&pki.cert), "--tls-key", s(&pki.key)])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let info = eventually(20, || std::fs::read_to_string(home.join("serve.json")).ok())
        .expect("serve.json");
    let info: Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["url"], format!("https://127.0.0.1:{port}"));
    let token = info["token"].as_str().unwrap();
    let (status, body) = https_get(&pki, port, "/api/v1/sessions", token);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.trim(), "[]");
    let plain = plain_http(port);
    assert!(plain.starts_with("HTTP/1.1 400"), "{plain}");
    let _ = child.kill();
    let _ = child.wait();

    // Off loopback without TLS it does not start (refused before binding).
    let out = std::process::Command::new(&bin)
        .args(["--listen", "10.255.255.1:4733", "--home", s(&home)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a loopback address"));
}

#[test]
fn berth_serve_off_loopback_needs_tls_or_insecure_http() {
    let b = Berth::new("tls-serve-refuse");
    let out = b.run(&["serve", "--listen", "10.255.255.1:4733"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a loopback address"), "{err}");
    assert!(err.contains("--tls-cert FILE --tls-key FILE"), "{err}");
    assert!(!b.home.join("serve.json").exists());
}

#[test]
fn the_user_settings_ca_file_is_trusted_and_a_projects_is_not() {
    let (_root, pki, srv, url, token, mut laptop) = tls_rig("tls-ca");
    std::fs::copy(&pki.ca, laptop.user_home.join("company-ca.pem")).unwrap();
    std::fs::write(
        laptop.config.join("settings.jsonc"),
        r#"{ "ca_file": "~/company-ca.pem" }"#,
    )
    .unwrap();
    start_daemon(&mut laptop, &url, &token, &[]);
    let (dir, id) = bound_on(&srv, &laptop, "hi", "cat >/dev/null; echo hello");
    // A project layer naming a CA is ignored, and says so.
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::write(
        dir.join(".berth/settings.jsonc"),
        r#"{ "ca_file": "/tmp/evil-ca.pem" }"#,
    )
    .unwrap();
    let (code, events, task) = send_json(&laptop, &id, "go");
    assert_eq!(code, 0, "{task}\n{}", laptop.serve_log());
    let ignored = events
        .iter()
        .find(|e| e["payload"]["type"] == "ignored")
        .expect("the project's ca_file is reported");
    assert_eq!(ignored["payload"]["keys"][0]["key"], "ca_file");
    assert_eq!(ignored["payload"]["keys"][0]["verdict"], "user_layer_only");
}

#[test]
fn a_daemon_over_https_comes_back_after_the_server_restarts() {
    let (_root, pki, mut srv, url, token, mut laptop) = tls_rig("tls-restart");
    start_daemon(&mut laptop, &url, &token, &["--ca-file", s(&pki.ca)]);
    let (_dir, id) = bound_on(&srv, &laptop, "hi", "cat >/dev/null; echo hello");
    assert_eq!(send_json(&laptop, &id, "one").0, 0);

    // The server stops and starts again on the same address, with the same certificate.
    assert!(srv.stop("-TERM").is_some());
    let listen = url.trim_start_matches("https://").to_owned();
    srv.start(&[
        "serve",
        "--listen",
        &listen,
        "--allow-daemons",
        "--tls-cert",
        s(&pki.cert),
        "--tls-key",
        s(&pki.key),
    ]);
    // At once, before the daemon noticed: the request it forwards is refused (the new
    // server does not know it), so it registers again and sends it again.
    let (code, _, task) = send_json(&laptop, &id, "two");
    assert_eq!(code, 0, "{task}\n{}", laptop.serve_log());
    assert_eq!(task["status"], "succeeded");
}

#[test]
fn the_web_ui_over_tls_answers_the_host_names_it_is_given() {
    let root = berth_tests::TempDir::new("tls-webhost");
    let pki = Pki::generate(&root.path().join("pki"), "web");
    let mut srv = Berth::new("tls-webhost");
    srv.serve_tls(&pki, &["--web-host", "Berth.Test"]);
    let (url, token) = srv.serve_info();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let get = |host: &str| {
        let answer = berth_tests::tls::https_request(
            &pki,
            port,
            &format!(
                "GET /api/v1/health?token={token} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            ),
        );
        berth_tests::status_and_body(&answer).0
    };
    assert_eq!(get(&format!("berth.test:{port}")), 200);
    assert_eq!(get(&format!("127.0.0.1:{port}")), 200);
    assert_eq!(
        get(&format!("evil.example:{port}")),
        403,
        "DNS rebinding stays refused"
    );
}
