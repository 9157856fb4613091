//! Text as it comes (issue 56): an agent's message reaches a live client piece by
//! piece (`delta` events on the session's stream) while the agent is still writing it,
//! and the transcript stores it once, whole. A real `berth serve`, a scripted ACP peer
//! (`tests/src/peers/stream_peer.py`) and clients on real sockets: the web listener
//! over TCP on loopback, as the browser reads it, and `berth send`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::fake_models::FakeModels;
use berth_tests::steps::{
    add_stream_peer, agent_cli, agent_events, new_session, s, send_detached, send_json, wait_final,
    web_events,
};
use serde_json::Value;
use std::time::Duration;

/// A Berth serving a session of the streaming peer, with `permissions`, bound to
/// `~/code/app` (where the fenced peer may write its marks).
fn streaming(tag: &str, permissions: &str) -> (Berth, String) {
    let mut b = Berth::new(tag);
    b.serve();
    add_stream_peer(&b, "streamer", permissions);
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    let session = new_session(&b, "streamer", Some(&app));
    (b, session)
}

/// The whole texts the agent's `text` events carry, in order.
fn texts(events: &[Value]) -> Vec<String> {
    agent_events(events, "text")
        .iter()
        .map(|p| p["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// What a live client of the web listener saw of the message the peer streams in
/// `app` (`Hello, streamed world.`, pieces 200 ms apart), sent by `send`: whether the
/// first piece came before the peer wrote the last (the peer marks that moment with a
/// file, and waits for this client to have seen the first before it writes the last,
/// 30 s at most), the pieces, and the whole texts.
fn watch_a_streamed_message(
    web: &Berth,
    session: &str,
    app: &std::path::Path,
    send: impl FnOnce(&str) -> String,
) -> (Option<bool>, String, Vec<String>) {
    let (seen, last) = (app.join("seen"), app.join("last-sent"));
    let mut sse = web_events(web, session, true, Duration::from_secs(60));
    let task = send(&format!(
        "gap-ms: 200\ngate: {}\nstamp: {}\nchunks: Hello, |streamed |world.",
        s(&seen),
        s(&last)
    ));
    let mut first_before_last = None;
    let mut pieces = String::new();
    let mut wholes = Vec::new();
    loop {
        let ev = sse
            .next_event()
            .expect("the stream goes on")
            .expect("the stream is not closed");
        let doc = ev.json();
        if doc["task_id"].as_str() != Some(task.as_str()) {
            continue;
        }
        match ev.event.as_str() {
            "delta" => {
                assert_eq!(ev.id, None, "a delta has no id: it is never stored");
                if first_before_last.is_none() {
                    first_before_last = Some(!last.exists());
                    std::fs::write(&seen, "").unwrap();
                }
                assert!(wholes.is_empty(), "a piece after the whole message: {doc}");
                pieces.push_str(doc["payload"]["text"].as_str().unwrap());
            }
            "agent" if doc["payload"]["type"] == "text" => {
                wholes.push(doc["payload"]["text"].as_str().unwrap().to_owned());
            }
            "task" => {
                assert_eq!(doc["payload"]["task"]["status"], "succeeded", "{doc}");
                return (first_before_last, pieces, wholes);
            }
            _ => {}
        }
    }
}

/// The proof: a client on the web listener sees the first piece of a message before
/// the agent writes its last, and the whole message once, after its pieces. Gathered
/// per message, as before, no piece arrives before the whole.
#[test]
fn a_message_reaches_a_live_client_before_the_agent_finished_writing_it() {
    let (b, session) = streaming("stream-proof", "edit");
    let app = b.user_home.join("code/app");
    let (first_before_last, pieces, wholes) =
        watch_a_streamed_message(&b, &session, &app, |msg| send_detached(&b, &session, msg));
    assert_eq!(
        first_before_last,
        Some(true),
        "the first piece arrived before the agent wrote its last"
    );
    assert_eq!(
        wholes,
        ["Hello, streamed world."],
        "the whole message, once"
    );
    // On the web listener a piece is held back to its last blank (the display rule
    // sees whole words): the last one comes with the whole message.
    assert_eq!(pieces, "Hello, streamed ");
}

/// The same through a remote daemon: its events, pieces included, go to the server
/// as they come, and the server's live clients see them before the message is whole.
#[test]
fn a_message_streams_from_a_remote_daemon() {
    let mut srv = Berth::new("stream-srv");
    srv.serve_with(&["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    let token = srv.daemon_token("laptop");
    let mut laptop = Berth::new("stream-laptop");
    laptop.daemon(&url, &token, "laptop");
    add_stream_peer(&srv, "streamer", "edit");
    let app = laptop.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    let session = new_session(&laptop, "streamer", Some(&app));
    let (first_before_last, _, wholes) = watch_a_streamed_message(&srv, &session, &app, |msg| {
        send_detached(&laptop, &session, msg)
    });
    assert_eq!(
        first_before_last,
        Some(true),
        "a piece came before the last"
    );
    assert_eq!(wholes, ["Hello, streamed world."]);
}

/// A reader of the transcript after the fact (a replay, `?follow=false`, or a client
/// that connects late) gets the message once, whole, and none of its pieces.
#[test]
fn a_replay_shows_a_streamed_message_once_whole() {
    let (b, session) = streaming("stream-replay", "edit");
    let (code, events, task) = send_json(
        &b,
        &session,
        "gap-ms: 20\nthought: let me |see\nchunks: one |two |three",
    );
    assert_eq!(code, 0, "{task}");
    assert!(
        events.iter().all(|e| e["kind"] != "delta"),
        "--json prints the transcript's events: {events:?}"
    );
    let replay = web_events(&b, &session, false, Duration::from_secs(30))
        .until_quiet()
        .unwrap();
    let kinds: Vec<&str> = replay.iter().map(|e| e.event.as_str()).collect();
    assert!(!kinds.contains(&"delta"), "no piece is stored: {kinds:?}");
    let docs: Vec<Value> = replay
        .iter()
        .map(berth_test_support::http::SseEvent::json)
        .collect();
    assert_eq!(texts(&docs), ["one two three"]);
    let thinking: Vec<&Value> = agent_events(&docs, "thinking")
        .into_iter()
        .map(|p| &p["text"])
        .collect();
    assert_eq!(thinking, [&Value::from("let me see")]);
}

/// A denial comes after the text the agent said before it asked: the peer says
/// "I will write x.", then asks to edit a file, which the read-only policy denies,
/// then says "Refused.". (Gathered per message, the text waited behind the denial.)
#[test]
fn a_denial_comes_after_the_text_said_before_it() {
    let (b, session) = streaming("stream-denial", "read-only");
    let target = b.user_home.join("x.txt");
    let (_, events, task) = send_json(
        &b,
        &session,
        &format!(
            "gap-ms: 20\nchunks: I will |write x.\nedit: {}\nchunks: Refused.",
            s(&target)
        ),
    );
    let order: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "agent")
        .filter_map(|e| {
            let p = &e["payload"];
            match p["type"].as_str() {
                Some("text") => Some(format!("text {}", p["text"].as_str().unwrap())),
                Some("denied") => Some(format!("denied {}", p["target"].as_str().unwrap())),
                _ => None,
            }
        })
        .collect();
    assert_eq!(
        order,
        [
            "text I will write x.".to_owned(),
            format!("denied {}", s(&target)),
            "text Refused.".to_owned(),
        ],
        "{task}"
    );
}

/// The real `claude` (the pinned release) streams its partial messages: the fake
/// model API streams its answer in pieces, and they reach a live client as deltas
/// before the whole message, which is stored once.
#[test]
fn real_claude_streams_its_partial_messages() {
    let fake = FakeModels::start();
    let mut b = Berth::new("stream-claude");
    for (k, v) in fake.claude_env(&b.user_home).expect("claude's environment") {
        if k != "HOME" {
            b.env(&k, &v);
        }
    }
    b.serve();
    let claude = agent_cli("claude");
    b.ok(&[
        "agent",
        "add",
        "claude",
        "--kind",
        "claude",
        "--command",
        s(&claude),
    ]);
    let session = new_session(&b, "claude", None);
    let mut sse = web_events(&b, &session, true, Duration::from_secs(120));
    let said = "every piece of this answer comes as it is written, word by word";
    let task = send_detached(&b, &session, &format!("Talk.\nberth-fake: say {said}"));
    let mut deltas = Vec::new();
    let mut wholes = Vec::new();
    loop {
        let ev = sse.next_event().expect("the stream goes on").expect("open");
        let doc = ev.json();
        if doc["task_id"].as_str() != Some(task.as_str()) {
            continue;
        }
        match ev.event.as_str() {
            "delta" => {
                assert!(wholes.is_empty(), "a piece after its whole message: {doc}");
                deltas.push(doc["payload"].clone());
            }
            "agent" if doc["payload"]["type"] == "text" => {
                wholes.push(doc["payload"]["text"].as_str().unwrap().to_owned());
            }
            "task" => break,
            _ => {}
        }
    }
    assert_eq!(wait_final(&b, &session, &task)["status"], "succeeded");
    assert!(deltas.len() > 1, "the answer came in pieces: {deltas:?}");
    let streamed: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
    assert_eq!(wholes.len(), 1, "{wholes:?}");
    assert!(wholes[0].contains(said), "{wholes:?}");
    assert!(
        !streamed.is_empty() && wholes[0].starts_with(&streamed),
        "the pieces are the message's start: {streamed:?} of {wholes:?}"
    );
}

/// Runs `berth ARGS` (with `stdin` on its stdin) while the peer streams `alpha |beta
/// |gamma` in `app`, reading its stdout as it comes: whether `alpha beta ` showed
/// before the peer wrote its last piece (it waits for the test to have seen it, 30 s
/// at most), and the whole stdout.
fn printed_live(b: &Berth, app: &std::path::Path, args: &[&str], stdin: &[u8]) -> (bool, String) {
    use std::io::{Read, Write};
    let mut child = b
        .cmd()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (mut seen, mut buf, mut chunk) = (None, Vec::new(), [0u8; 4096]);
    loop {
        let n = stdout.read(&mut chunk).unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if seen.is_none() && String::from_utf8_lossy(&buf).contains("alpha beta ") {
            seen = Some(!app.join("last-sent").exists());
            std::fs::write(app.join("seen"), "").unwrap();
        }
    }
    let status = child.wait().unwrap();
    let out = String::from_utf8_lossy(&buf).into_owned();
    assert!(status.success(), "{out}");
    (seen == Some(true), out)
}

/// The message the peer streams for [`printed_live`]: its gate and its mark in `app`.
fn gated(app: &std::path::Path, sep: &str) -> String {
    format!(
        "gap-ms: 50{sep}gate: {}{sep}stamp: {}{sep}chunks: alpha |beta |gamma",
        s(&app.join("seen")),
        s(&app.join("last-sent"))
    )
}

/// `berth send` prints a message's pieces as they come (before the agent wrote its
/// last), and the message once.
#[test]
fn berth_send_prints_a_message_as_it_comes_and_once() {
    let (b, session) = streaming("stream-send", "edit");
    let app = b.user_home.join("code/app");
    let msg = gated(&app, "\n");
    let (live, out) = printed_live(&b, &app, &["send", &session, &msg], b"");
    assert!(
        live,
        "the first pieces showed before the last was written: {out}"
    );
    assert_eq!(out.matches("alpha").count(), 1, "{out}");
    assert!(out.contains("alpha beta gamma\n"), "{out}");
}

/// `berth chat` (its line mode, on a pipe) too.
#[test]
fn berth_chat_prints_a_message_as_it_comes_and_once() {
    let (b, session) = streaming("stream-chat", "edit");
    let app = b.user_home.join("code/app");
    let input = format!("{}\n", gated(&app, "\\\n"));
    let (live, out) = printed_live(&b, &app, &["chat", &session], input.as_bytes());
    assert!(
        live,
        "the first pieces showed before the last was written: {out}"
    );
    assert_eq!(out.matches("alpha").count(), 1, "{out}");
    assert!(out.contains("alpha beta gamma\n"), "{out}");
}
