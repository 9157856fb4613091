//! The client against a scripted ACP peer on an in-memory pipe: each test plays the
//! agent's side line by line and checks what Berth answered and recorded.

use super::*;
use serde_json::json;
use std::os::fd::AsFd;
use tokio::io::{
    AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf,
};

/// The agent's side.
struct Peer {
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    out: WriteHalf<DuplexStream>,
}

impl Peer {
    /// The next message Berth sent.
    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("Berth writes in time")
            .expect("read")
            .expect("a line");
        serde_json::from_str(&line).expect("Berth writes JSON")
    }

    async fn send(&mut self, v: Value) {
        self.raw(&v.to_string()).await;
    }

    async fn raw(&mut self, line: &str) {
        self.out.write_all(line.as_bytes()).await.expect("write");
        self.out.write_all(b"\n").await.expect("write");
    }

    /// Expects a request of `method` from Berth and answers it with `result`.
    async fn answer(&mut self, method: &str, result: Value) -> Value {
        let req = self.recv().await;
        assert_eq!(req["method"], method, "{req}");
        self.send(json!({"jsonrpc": "2.0", "id": req["id"], "result": result}))
            .await;
        req
    }

    async fn update(&mut self, update: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"sessionId": "s1", "update": update}}))
            .await;
    }

    /// Asks Berth `method` and returns its answer.
    async fn ask(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let a = self.recv().await;
        assert_eq!(a["id"], id, "{a}");
        a
    }

    async fn start(&mut self, caps: Value) {
        let init = self
            .answer(
                "initialize",
                json!({"protocolVersion": 1, "agentCapabilities": caps, "authMethods": []}),
            )
            .await;
        assert_eq!(
            init["params"]["clientCapabilities"]["fs"]["writeTextFile"],
            true
        );
        assert_eq!(init["params"]["clientCapabilities"]["terminal"], false);
    }
}

struct World {
    root: berth_test_support::TempDir,
    app: std::path::PathBuf,
    dir: rustix::fd::OwnedFd,
}

fn world() -> World {
    let root = berth_test_support::TempDir::new("acp");
    let app = root.path().join("app");
    std::fs::create_dir_all(&app).unwrap();
    let dir = rustix::fs::open(
        &app,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    World { root, app, dir }
}

/// Runs Berth's side of one turn against `agent`, the agent's side.
async fn turn<F, Fut>(
    w: &World,
    permissions: Permissions,
    resume_id: Option<&str>,
    cancel_after: Option<Duration>,
    agent: F,
) -> (Conversation, Vec<AgentEvent>)
where
    F: FnOnce(Peer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    turn_asking(w, permissions, None, resume_id, cancel_after, agent).await
}

/// [`turn`], with `asker` putting the `ask` policy's requests to a person. The live
/// deltas are left out: the events are what the transcript stores.
async fn turn_asking<F, Fut>(
    w: &World,
    permissions: Permissions,
    asker: Option<&crate::agent::ask::Asker>,
    resume_id: Option<&str>,
    cancel_after: Option<Duration>,
    agent: F,
) -> (Conversation, Vec<AgentEvent>)
where
    F: FnOnce(Peer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (conv, mut events) = turn_live(w, permissions, asker, resume_id, cancel_after, agent).await;
    events.retain(|e| !e.is_live_only());
    (conv, events)
}

/// [`turn_asking`] with every event the turn reported, the live deltas among them.
async fn turn_live<F, Fut>(
    w: &World,
    permissions: Permissions,
    asker: Option<&crate::agent::ask::Asker>,
    resume_id: Option<&str>,
    cancel_after: Option<Duration>,
    agent: F,
) -> (Conversation, Vec<AgentEvent>)
where
    F: FnOnce(Peer) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (berth, theirs) = tokio::io::duplex(1 << 20);
    let (r, wr) = tokio::io::split(berth);
    let (tr, tw) = tokio::io::split(theirs);
    let peer = Peer {
        lines: BufReader::new(tr).lines(),
        out: tw,
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (cancel_tx, mut cancel_rx) = watch::channel(false);
    let ctx = TurnCtx {
        turn: Turn {
            prompt: "write x.txt",
            brief: Some("the brief"),
            resume_id,
            work_dir: &w.app,
            permissions,
            fenced: true,
        },
        dir: w.dir.as_fd(),
        asker,
    };
    let canceller = async {
        if let Some(after) = cancel_after {
            tokio::time::sleep(after).await;
            let _ = cancel_tx.send(true);
        }
    };
    let client = converse(
        BufReader::new(r),
        wr,
        &ctx,
        &tx,
        &mut cancel_rx,
        Duration::from_secs(5),
    );
    let (conv, (), ()) = tokio::join!(client, agent(peer), canceller);
    drop(tx);
    let mut events = Vec::new();
    while let Ok(ExecEvent::Agent(ev)) = rx.try_recv() {
        events.push(ev);
    }
    (conv, events)
}

fn texts(events: &[AgentEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            if let AgentEvent::Text { text } = e {
                Some(text.clone())
            } else {
                None
            }
        })
        .collect()
}

#[tokio::test]
async fn a_turn_writes_through_berth_and_reports_its_tools() {
    let w = world();
    let file = w.app.join("x.txt").display().to_string();
    let f = file.clone();
    let (conv, events) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        p.start(json!({"loadSession": true})).await;
        let new = p.answer("session/new", json!({"sessionId": "s1"})).await;
        assert_eq!(new["params"]["mcpServers"], json!([]));
        let prompt = p.recv().await;
        assert_eq!(prompt["method"], "session/prompt");
        assert_eq!(
            prompt["params"]["prompt"],
            json!([{"type": "text", "text": "the brief"}, {"type": "text", "text": "write x.txt"}])
        );
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "On "}}))
            .await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "it."}}))
            .await;
        p.update(json!({"sessionUpdate": "plan", "entries": [{"content": "write", "status": "pending", "priority": "high"}]}))
            .await;
        // Permission asked for a call never announced, as Gemini CLI does.
        let a = p
            .ask(0, "session/request_permission", json!({"sessionId": "s1",
                "toolCall": {"toolCallId": "t1", "kind": "edit", "title": "WriteFile", "status": "pending",
                    "locations": [{"path": f}]},
                "options": [{"optionId": "always", "kind": "allow_always"},
                            {"optionId": "once", "kind": "allow_once"},
                            {"optionId": "no", "kind": "reject_once"}]}))
            .await;
        assert_eq!(a["result"]["outcome"], json!({"outcome": "selected", "optionId": "once"}));
        let a = p
            .ask(1, "fs/write_text_file", json!({"sessionId": "s1", "path": f, "content": "hi\n"}))
            .await;
        assert_eq!(a["result"], Value::Null, "{a}");
        p.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
            "content": [{"type": "diff", "path": f, "oldText": null, "newText": "hi\n"},
                        {"type": "content", "content": {"type": "text", "text": "wrote it"}}]}))
            .await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Done."}}))
            .await;
        let a = p.ask(2, "terminal/create", json!({})).await;
        assert_eq!(a["error"]["code"], rpc::METHOD_NOT_FOUND);
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"],
            "result": {"stopReason": "end_turn", "_meta": {"quota": {"token_count": {"input_tokens": 10, "output_tokens": 4}}}}}))
            .await;
    })
    .await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hi\n");
    assert_eq!(conv.state.ok, Some(true), "{:?}", conv.state);
    assert_eq!(conv.state.resume_id.as_deref(), Some("s1"));
    assert_eq!(
        conv.state.usage,
        Some(berth_core::usage::Usage {
            input: 10,
            output: 4,
            cache_read: 0,
            cache_write: 0,
            cost_usd: None,
            raw: json!({"inputTokens": 10, "outputTokens": 4})
        })
    );
    assert!(conv.state.denials.is_empty());
    assert!(!conv.cancelled);
    assert_eq!(texts(&events), vec!["On it.", "Done."]);
    let tools: Vec<(&str, &str, &str)> = events
        .iter()
        .filter_map(|e| {
            if let AgentEvent::Tool {
                id, kind, status, ..
            } = e
            {
                Some((id.as_str(), kind.as_str(), status.as_str()))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(tools, vec![("t1", "edit", "completed")]);
    assert!(events.contains(&AgentEvent::Diff {
        path: file.clone(),
        old_text: None,
        new_text: "hi\n".into()
    }));
    assert!(events.contains(&AgentEvent::ToolResult {
        id: Some("t1".into()),
        output: "wrote it".into(),
        is_error: false
    }));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Plan { entries } if entries.len() == 1))
    );
    match events.last() {
        Some(AgentEvent::Result {
            ok: true,
            text,
            usage,
            ..
        }) => {
            assert_eq!(text.as_deref(), Some("Done."));
            assert_eq!(usage.as_ref().unwrap()["inputTokens"], 10);
        }
        other => panic!("the last event is not the result: {other:?}"),
    }
}

#[tokio::test]
async fn a_read_only_agent_is_refused_writes_by_policy_and_by_berths_files() {
    let w = world();
    let file = w.app.join("x.txt").display().to_string();
    let f = file.clone();
    let (conv, events) = turn(&w, Permissions::ReadOnly, None, None, |mut p| async move {
        p.start(json!({})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let prompt = p.recv().await;
        let a = p
            .ask(0, "session/request_permission", json!({"sessionId": "s1",
                "toolCall": {"toolCallId": "t1", "kind": "edit", "title": "WriteFile", "locations": [{"path": f}]},
                "options": [{"optionId": "once", "kind": "allow_once"}, {"optionId": "no", "kind": "reject_once"}]}))
            .await;
        assert_eq!(a["result"]["outcome"]["optionId"], "no");
        let a = p
            .ask(1, "session/request_permission", json!({"sessionId": "s1",
                "toolCall": {"toolCallId": "t2", "kind": "read", "title": "ReadFile"},
                "options": [{"optionId": "once", "kind": "allow_once"}]}))
            .await;
        assert_eq!(a["result"]["outcome"]["optionId"], "once");
        // Without a reject option, the answer is `cancelled`.
        let a = p
            .ask(2, "session/request_permission", json!({"sessionId": "s1",
                "toolCall": {"toolCallId": "t3", "kind": "execute", "title": "Shell", "rawInput": {"command": "rm -rf /"}},
                "options": [{"optionId": "once", "kind": "allow_once"}]}))
            .await;
        assert_eq!(a["result"]["outcome"], json!({"outcome": "cancelled"}));
        let a = p
            .ask(3, "fs/write_text_file", json!({"sessionId": "s1", "path": f, "content": "no"}))
            .await;
        assert!(a["error"]["message"].as_str().unwrap().contains("read-only"), "{a}");
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert!(!std::path::Path::new(&file).exists());
    let denied: Vec<(String, String)> = conv
        .state
        .denials
        .iter()
        .map(|d| (d.tool.clone(), d.target.clone()))
        .collect();
    assert_eq!(
        denied,
        vec![
            ("WriteFile".to_owned(), file.clone()),
            ("Shell".to_owned(), "rm -rf /".to_owned()),
            ("write".to_owned(), file.clone()),
        ]
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, AgentEvent::Denied { .. }))
            .count(),
        3
    );
    // Every change was denied: the turn does not read as a clean success.
    assert!(conv.state.all_denied());
}

#[tokio::test]
async fn files_outside_the_directory_are_refused_and_reported() {
    let w = world();
    let outside = w.root.path().join("other.txt");
    let o = outside.display().to_string();
    let up = format!("{}/../other.txt", w.app.display());
    let (conv, _) = turn(&w, Permissions::Full, None, None, |mut p| async move {
        p.start(json!({})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let prompt = p.recv().await;
        for (i, path) in [o.as_str(), up.as_str(), "/etc/passwd"]
            .into_iter()
            .enumerate()
        {
            let a = p
                .ask(
                    i as i64,
                    "fs/write_text_file",
                    json!({"sessionId": "s1", "path": path, "content": "x"}),
                )
                .await;
            assert!(a["error"].is_object(), "{a}");
        }
        let a = p
            .ask(
                9,
                "fs/read_text_file",
                json!({"sessionId": "s1", "path": "/etc/passwd"}),
            )
            .await;
        assert!(a["error"].is_object(), "{a}");
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert!(!outside.exists());
    assert_eq!(conv.state.denials.len(), 4, "{:?}", conv.state.denials);
}

#[tokio::test]
async fn lines_that_are_not_json_rpc_are_errors_not_stops() {
    let w = world();
    let (conv, events) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        p.raw("Loaded cached credentials.").await;
        p.start(json!({})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let prompt = p.recv().await;
        p.raw("{\"jsonrpc\":\"2.0\"").await;
        p.raw("[1,2,3]").await;
        p.raw("").await;
        p.update(json!({"sessionUpdate": "something_new", "x": 1})).await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "fine"}}))
            .await;
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert_eq!(conv.state.ok, Some(true));
    let errors = events
        .iter()
        .filter(|e| matches!(e, AgentEvent::Error { .. }))
        .count();
    assert_eq!(errors, 3, "{events:?}");
    assert_eq!(texts(&events), vec!["fine"]);
}

#[tokio::test]
async fn a_peer_that_dies_mid_turn_fails_the_turn() {
    let w = world();
    let (conv, events) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        p.start(json!({})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let _prompt = p.recv().await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "half"}}))
            .await;
        // Gone: both ends dropped.
    })
    .await;
    assert_eq!(conv.state.ok, Some(false));
    assert!(
        conv.state
            .error
            .as_deref()
            .unwrap()
            .contains("exited before")
    );
    assert_eq!(texts(&events), vec!["half"]);
}

#[tokio::test]
async fn a_peer_that_never_starts_is_a_start_failure() {
    let w = world();
    let (conv, _) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        let init = p.recv().await;
        assert_eq!(init["method"], "initialize");
        p.send(json!({"jsonrpc": "2.0", "id": init["id"], "result": {"protocolVersion": 2}}))
            .await;
    })
    .await;
    assert!(conv.state.start_failed.unwrap().contains("version 2"));
    let (conv, _) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        let _ = p.recv().await;
    })
    .await;
    assert!(
        conv.state
            .start_failed
            .unwrap()
            .contains("exited before it answered initialize")
    );
}

/// A peer that holds its pipe open and never answers `initialize`: the turn ends
/// `agent_start_failed` at [`INIT_TIMEOUT`] (time is paused: no test waits 30 s).
#[tokio::test(start_paused = true)]
async fn a_peer_that_never_answers_initialize_ends_within_the_bound() {
    let w = world();
    let (conv, _) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        let init = p.recv().await;
        assert_eq!(init["method"], "initialize");
        tokio::time::sleep(INIT_TIMEOUT * 2).await;
        drop(p);
    })
    .await;
    let why = conv.state.start_failed.unwrap_or_default();
    assert!(
        why.contains("did not answer initialize within 30 s"),
        "{why}"
    );
}

#[tokio::test]
async fn a_loaded_session_does_not_replay_into_the_transcript() {
    let w = world();
    let (conv, events) = turn(&w, Permissions::Edit, Some("s1"), None, |mut p| async move {
        p.start(json!({"loadSession": true})).await;
        let load = p.recv().await;
        assert_eq!(load["method"], "session/load");
        assert_eq!(load["params"]["sessionId"], "s1");
        p.update(json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "old question"}}))
            .await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "old answer"}}))
            .await;
        p.send(json!({"jsonrpc": "2.0", "id": load["id"], "result": null})).await;
        let prompt = p.recv().await;
        assert_eq!(prompt["params"]["sessionId"], "s1");
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "new answer"}}))
            .await;
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert_eq!(conv.state.ok, Some(true));
    assert_eq!(texts(&events), vec!["new answer"]);
    // Resume is preferred when offered; an agent with neither starts afresh, once said.
    let (_, events) = turn(
        &w,
        Permissions::Edit,
        Some("s1"),
        None,
        |mut p| async move {
            p.start(json!({"loadSession": true, "sessionCapabilities": {"resume": {}}}))
                .await;
            p.answer("session/resume", json!({})).await;
            let prompt = p.recv().await;
            p.send(
                json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}),
            )
            .await;
        },
    )
    .await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Started { resume_id: Some(s), .. } if s == "s1"))
    );
    // An agent that can continue nothing: said once, then each message starts afresh.
    let fresh = |resume: Option<&'static str>| {
        let w = &w;
        async move {
            turn(w, Permissions::Edit, resume, None, |mut p| async move {
                p.start(json!({})).await;
                p.answer("session/new", json!({"sessionId": "s2"})).await;
                let prompt = p.recv().await;
                let end = json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}});
                p.send(end).await;
            })
            .await
        }
    };
    let said = |events: &[AgentEvent]| {
        events.iter().any(
            |e| matches!(e, AgentEvent::Stderr { line } if line.contains("can continue no conversation")),
        )
    };
    for resume in [None, Some("s1")] {
        let (conv, events) = fresh(resume).await;
        assert_eq!(conv.state.resume_id.as_deref(), Some(NO_CONTINUATION));
        assert!(said(&events), "{resume:?}: {events:?}");
    }
    let (conv, events) = fresh(Some(NO_CONTINUATION)).await;
    assert_eq!(conv.state.resume_id.as_deref(), Some(NO_CONTINUATION));
    assert!(!said(&events), "said once only: {events:?}");
}

#[tokio::test]
async fn cancel_sends_session_cancel_and_the_turn_ends_cancelled() {
    let w = world();
    let (conv, _) = turn(
        &w,
        Permissions::Edit,
        None,
        Some(Duration::from_millis(200)),
        |mut p| async move {
            p.start(json!({})).await;
            p.answer(
                "session/new",
                json!({"sessionId": "s1", "modes": {"currentModeId": "read-only",
                    "availableModes": [{"id": "read-only"}, {"id": "auto"}, {"id": "full-access"}]}}),
            )
            .await;
            let mode = p.answer("session/set_mode", json!({})).await;
            assert_eq!(mode["params"]["modeId"], "auto");
            let prompt = p.recv().await;
            let cancel = p.recv().await;
            assert_eq!(cancel["method"], "session/cancel");
            assert!(cancel.get("id").is_none());
            // A permission asked after the cancel is answered `cancelled`.
            let a = p
                .ask(0, "session/request_permission", json!({"sessionId": "s1",
                    "toolCall": {"toolCallId": "t1", "kind": "edit"},
                    "options": [{"optionId": "once", "kind": "allow_once"}]}))
                .await;
            assert_eq!(a["result"]["outcome"]["outcome"], "cancelled");
            p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "cancelled"}}))
                .await;
        },
    )
    .await;
    assert!(conv.cancelled);
}

#[test]
fn modes_follow_the_policy() {
    let codex = ["read-only", "auto", "full-access"];
    assert_eq!(
        mode_for(Permissions::ReadOnly, Some("auto"), &codex).as_deref(),
        Some("read-only")
    );
    assert_eq!(mode_for(Permissions::Edit, Some("auto"), &codex), None);
    assert_eq!(
        mode_for(Permissions::Full, None, &codex).as_deref(),
        Some("full-access")
    );
    // Gemini CLI's modes: it stays in its asking mode, and Berth decides.
    assert_eq!(
        mode_for(
            Permissions::Edit,
            Some("default"),
            &["default", "autoEdit", "yolo"]
        ),
        None
    );
}

/// opencode offers its modes as a configuration option (`configOptions`, category
/// `mode`: `build`, `plan`), not as `modes`: read-only is its `plan`, every other
/// policy its `build`.
#[test]
fn opencodes_mode_option_follows_the_policy() {
    let opencode = ["build", "plan"];
    assert_eq!(
        config_mode_for(Permissions::ReadOnly, Some("build"), &opencode).as_deref(),
        Some("plan")
    );
    for p in [Permissions::Edit, Permissions::Ask, Permissions::Full] {
        assert_eq!(config_mode_for(p, Some("build"), &opencode), None, "{p}");
        assert_eq!(
            config_mode_for(p, Some("plan"), &opencode).as_deref(),
            Some("build"),
            "{p}"
        );
    }
    assert_eq!(config_mode_for(Permissions::ReadOnly, None, &["x"]), None);
}

/// A read-only turn of an agent with a mode option sets it with
/// `session/set_config_option` (the option's own id), and never `session/set_mode`.
#[tokio::test]
async fn a_mode_option_is_set_with_set_config_option() {
    let w = world();
    let (conv, _) = turn(&w, Permissions::ReadOnly, None, None, |mut p| async move {
        p.start(json!({})).await;
        p.answer(
            "session/new",
            json!({"sessionId": "s1", "configOptions": [
                {"id": "model", "category": "model", "type": "select", "currentValue": "m",
                 "options": [{"value": "m", "name": "m"}, {"value": "plan", "name": "x"}]},
                {"id": "mode", "name": "Session Mode", "category": "mode", "type": "select",
                 "currentValue": "build",
                 "options": [{"value": "build", "name": "build"}, {"value": "plan", "name": "plan"}]}]}),
        )
        .await;
        let set = p.answer("session/set_config_option", json!({"configOptions": []})).await;
        assert_eq!(
            set["params"],
            json!({"sessionId": "s1", "configId": "mode", "value": "plan"})
        );
        let prompt = p.recv().await;
        assert_eq!(prompt["method"], "session/prompt");
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert_eq!(conv.state.ok, Some(true));
}

/// Under `ask` only, an opencode command (its program, or the package `npx` starts)
/// is told to ask for commands, edits, fetches and paths outside
/// (`OPENCODE_PERMISSION`); other agents and policies get nothing.
#[test]
fn opencode_is_told_to_ask_under_ask_only() {
    use crate::agent::adapter::is_opencode;
    let inv = |command: &[&str], permissions| acp_invocation(command, permissions).env;
    let asked = inv(&["/opt/bin/opencode", "acp"], Permissions::Ask);
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, "OPENCODE_PERMISSION");
    let v: Value = serde_json::from_str(&asked[0].1).unwrap();
    assert_eq!(
        v,
        json!({"bash": "ask", "edit": "ask", "webfetch": "ask", "external_directory": "ask"})
    );
    assert_eq!(
        inv(
            &["npx", "-y", "opencode-ai@1.18.33", "acp"],
            Permissions::Ask
        )
        .len(),
        1
    );
    for p in [Permissions::ReadOnly, Permissions::Edit, Permissions::Full] {
        assert!(inv(&["opencode", "acp"], p).is_empty(), "{p}");
    }
    assert!(inv(&["gemini", "--acp"], Permissions::Ask).is_empty());
    assert!(inv(&["codex-acp"], Permissions::Ask).is_empty());
    // A project directory named like it is not the program.
    assert!(!is_opencode(
        "gemini",
        &["--acp".into(), "acp".into(), "opencode".into()]
    ));
}

/// Berth's `OPENCODE_PERMISSION` laid over the user's own: the user's text is kept,
/// Berth's keys follow (and so win), a key the user denies stays denied; a value that
/// is not a JSON object is replaced.
#[test]
fn berths_permission_is_laid_over_the_users() {
    use crate::agent::process::lay_over;
    let ours = r#"{"bash":"ask","edit":"ask"}"#;
    assert_eq!(lay_over(None, ours), ours);
    assert_eq!(lay_over(Some("not json"), ours), ours);
    assert_eq!(lay_over(Some("{}"), ours), r#"{"bash":"ask","edit":"ask"}"#);
    let theirs = r#"{"read": {"*.env": "deny", "*": "allow"}, "bash": "allow"}"#;
    let laid = lay_over(Some(theirs), ours);
    assert_eq!(
        laid,
        r#"{"read": {"*.env": "deny", "*": "allow"}, "bash": "allow","bash":"ask","edit":"ask"}"#
    );
    let denied = lay_over(Some(r#"{"bash": "deny"}"#), ours);
    assert_eq!(denied, r#"{"bash": "deny","edit":"ask"}"#);
    assert_eq!(
        lay_over(Some(r#"{"bash":"deny","edit":"deny"}"#), ours),
        r#"{"bash":"deny","edit":"deny"}"#
    );
}

/// opencode's refusals, as `opencode acp` 1.18 reports them when the fence stops it: a
/// failed `write` (`PermissionDenied: FileSystem.writeFile (…)`) and a bash call it
/// reports *completed* whose output is `touch`'s refusal. Each is a denial by the
/// fence. A completed read that returns a file quoting a refusal, and the agent's
/// own message repeating one, are not.
#[tokio::test]
async fn opencodes_refusals_are_the_fences_denials_and_its_prose_is_not() {
    let w = world();
    let file = w.app.join("tool.txt").display().to_string();
    let f = file.clone();
    let dir = w.app.display().to_string();
    let d = dir.clone();
    let (conv, events) = turn(&w, Permissions::ReadOnly, None, None, |mut p| async move {
        p.start(json!({"loadSession": true})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let prompt = p.recv().await;
        p.update(json!({"sessionUpdate": "tool_call", "toolCallId": "w1", "kind": "edit",
            "title": "write", "status": "pending", "locations": [{"path": f}],
            "rawInput": {"filePath": f, "content": "nope"}}))
            .await;
        p.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "w1", "status": "failed",
            "content": [{"type": "content", "content": {"type": "text",
                "text": format!("PermissionDenied: FileSystem.writeFile ({f})")}}]}))
            .await;
        p.update(json!({"sessionUpdate": "tool_call", "toolCallId": "b1", "kind": "execute",
            "title": "touch touched.txt", "status": "in_progress", "locations": [{"path": d}],
            "rawInput": {"command": "touch touched.txt"}}))
            .await;
        p.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "b1", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text",
                "text": "touch: cannot touch 'touched.txt': Permission denied\n"}}]}))
            .await;
        p.update(json!({"sessionUpdate": "tool_call", "toolCallId": "r1", "kind": "read",
            "title": "read", "status": "in_progress", "locations": [{"path": "notes.txt"}]}))
            .await;
        p.update(json!({"sessionUpdate": "tool_call_update", "toolCallId": "r1", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text",
                "text": "1: touch: cannot touch 'x': Permission denied"}}]}))
            .await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text",
            "text": "failed: tool.txt\nPermissionDenied: FileSystem.writeFile (x)\ntouch: cannot touch 'touched.txt': Permission denied\n"}}))
            .await;
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert_eq!(
        conv.state.denials,
        vec![
            Denial {
                tool: "write".into(),
                target: file.clone(),
                by: Some("fence".into()),
            },
            Denial {
                tool: "touch touched.txt".into(),
                target: dir,
                by: Some("fence".into()),
            },
        ]
    );
    let messages: Vec<Option<String>> = events
        .iter()
        .filter_map(|e| {
            if let AgentEvent::Denied { message, .. } = e {
                Some(message.clone())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        messages,
        vec![
            Some(format!("PermissionDenied: FileSystem.writeFile ({file})")),
            Some("touch: cannot touch 'touched.txt': Permission denied".into()),
        ]
    );
    assert!(conv.state.all_denied());
}

/// opencode's own rules refusing a call without asking (its `plan` mode's edits, a
/// `deny` rule): a failed call saying so is a denial by the agent's own permission
/// system, fenced or not; a completed one quoting the words is not.
#[tokio::test]
async fn opencodes_own_rule_refusal_is_a_denial_by_the_agent() {
    let w = world();
    let file = w.app.join("tool.txt").display().to_string();
    let f = file.clone();
    let said = "The user has specified a rule which prevents you from using this specific tool call. Here are some of the relevant rules [{\"permission\":\"edit\",\"pattern\":\"*\",\"action\":\"deny\"}]";
    let (conv, events) = turn(&w, Permissions::ReadOnly, None, None, |mut p| async move {
        p.start(json!({})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let prompt = p.recv().await;
        p.update(
            json!({"sessionUpdate": "tool_call", "toolCallId": "w1", "kind": "edit",
            "title": "write", "status": "pending", "locations": [{"path": f}],
            "rawInput": {"filePath": f, "content": "nope"}}),
        )
        .await;
        p.update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "w1", "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": said}}]}),
        )
        .await;
        p.update(
            json!({"sessionUpdate": "tool_call", "toolCallId": "r1", "kind": "read",
            "title": "read", "status": "completed", "locations": [{"path": "notes.txt"}]}),
        )
        .await;
        p.update(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "r1", "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": said}}]}),
        )
        .await;
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    assert_eq!(
        conv.state.denials,
        vec![Denial {
            tool: "write".into(),
            target: file,
            by: None,
        }]
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Denied { message: Some(m), .. } if m == said)),
        "{events:?}"
    );
    assert!(conv.state.all_denied());
}

/// An asker for task `t1` whose requests go to `events` (the test answers them through
/// the returned [`crate::agent::ask::Waiting`]).
fn asker() -> (
    crate::agent::ask::Asker,
    crate::agent::ask::Waiting,
    mpsc::UnboundedReceiver<ExecEvent>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let waiting = crate::agent::ask::Waiting::default();
    let a = crate::agent::ask::Asker::new(
        berth_core::TaskId::parse("t1").unwrap(),
        berth_core::approval::AskRules::default(),
        waiting.clone(),
        tx,
    );
    (a, waiting, rx)
}

/// Answers request `id` as soon as the run waits on it.
async fn decide(waiting: &crate::agent::ask::Waiting, id: &str, allow: bool) {
    use berth_core::approval::{Answer, DecidedBy, Verdict};
    let answer = Answer {
        verdict: if allow { Verdict::Allow } else { Verdict::Deny },
        by: DecidedBy::Human,
        reason: (!allow).then(|| "not this one".to_owned()),
        always: false,
    };
    for _ in 0..500 {
        if waiting.answer(id, answer.clone()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no run waited on {id}");
}

const OPTIONS: &str = r#"[{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
    {"optionId": "always", "name": "Always", "kind": "allow_always"},
    {"optionId": "no", "name": "Reject", "kind": "reject_once"}]"#;

async fn prompt_started(p: &mut Peer) -> Value {
    p.start(json!({})).await;
    p.answer("session/new", json!({"sessionId": "s1"})).await;
    p.recv().await
}

#[tokio::test]
async fn under_ask_a_request_is_held_while_the_agent_talks_on_and_answered_with_its_option() {
    let w = world();
    let (asker, waiting, mut asked) = asker();
    let (conv, events) = turn_asking(
        &w,
        Permissions::Ask,
        Some(&asker),
        None,
        None,
        |mut p| async move {
            let prompt = prompt_started(&mut p).await;
            let options: Value = serde_json::from_str(OPTIONS).unwrap();
            p.send(
                json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission",
            "params": {"sessionId": "s1", "options": options,
                "toolCall": {"toolCallId": "c1", "title": "Run the check", "kind": "execute",
                    "rawInput": {"command": ["bash", "-lc", "sh ./check.sh"]}}}}),
            )
            .await;
            // Held: the agent's other messages are read meanwhile.
            p.update(json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "while you decide"}}))
                .await;
            decide(&waiting, "t1-1", true).await;
            let a = p.recv().await;
            assert_eq!(a["id"], 7, "{a}");
            assert_eq!(
                a["result"]["outcome"],
                json!({"outcome": "selected", "optionId": "yes"})
            );
            p.send(
                json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}),
            )
            .await;
        },
    )
    .await;
    assert_eq!(conv.state.ok, Some(true));
    assert!(
        texts(&events).iter().any(|t| t == "while you decide"),
        "{events:?}"
    );
    let Ok(ExecEvent::Approval(req)) = asked.try_recv() else {
        panic!("the request was put to a person");
    };
    assert_eq!(
        (req.id.as_str(), req.kind.as_str(), req.command.as_deref()),
        ("t1-1", "execute", Some("sh ./check.sh")),
        "a shell's script is the command shown: {req:?}"
    );
    assert_eq!(req.options.len(), 3);
    assert_eq!(
        req.input["rawInput"]["command"][2], "sh ./check.sh",
        "the full input"
    );
}

#[tokio::test]
async fn a_persons_deny_is_the_agents_reject_and_a_denial_by_a_human() {
    let w = world();
    let (asker, waiting, _asked) = asker();
    let (conv, events) = turn_asking(
        &w,
        Permissions::Ask,
        Some(&asker),
        None,
        None,
        |mut p| async move {
            let prompt = prompt_started(&mut p).await;
            let options: Value = serde_json::from_str(OPTIONS).unwrap();
            p.send(
                json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission",
            "params": {"sessionId": "s1", "options": options,
                "toolCall": {"toolCallId": "c1", "title": "rm", "kind": "delete",
                    "locations": [{"path": "/w/app/build"}]}}}),
            )
            .await;
            decide(&waiting, "t1-1", false).await;
            let a = p.recv().await;
            assert_eq!(a["result"]["outcome"]["optionId"], "no", "{a}");
            p.send(
                json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}),
            )
            .await;
        },
    )
    .await;
    assert_eq!(conv.state.denials.len(), 1, "{:?}", conv.state.denials);
    assert_eq!(conv.state.denials[0].by.as_deref(), Some("human"));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::Denied { .. })),
        "{events:?}"
    );
}

#[tokio::test]
async fn cancel_answers_a_held_request_cancelled() {
    let w = world();
    let (asker, _waiting, _asked) = asker();
    let (conv, _) = turn_asking(
        &w,
        Permissions::Ask,
        Some(&asker),
        None,
        Some(Duration::from_millis(300)),
        |mut p| async move {
            let prompt = prompt_started(&mut p).await;
            let options: Value = serde_json::from_str(OPTIONS).unwrap();
            p.send(json!({"jsonrpc": "2.0", "id": 7, "method": "session/request_permission",
                "params": {"sessionId": "s1", "options": options,
                    "toolCall": {"toolCallId": "c1", "kind": "execute",
                        "rawInput": {"command": "git push"}}}}))
                .await;
            let cancel = p.recv().await;
            assert_eq!(cancel["method"], "session/cancel", "{cancel}");
            let a = p.recv().await;
            assert_eq!((&a["id"], &a["result"]["outcome"]["outcome"]), (&json!(7), &json!("cancelled")), "{a}");
            p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "cancelled"}}))
                .await;
        },
    )
    .await;
    assert!(conv.cancelled);
}

/// A `tool_call_update`'s `locations` replace the ones announced before (the ACP
/// schema): a request for a path inside the directory is judged on that path, not
/// refused for a stale one outside.
#[tokio::test]
async fn an_updates_locations_replace_the_earlier_ones() {
    let w = world();
    let inside = w.app.join("src/x.rs").display().to_string();
    let (_, _) = turn(&w, Permissions::Edit, None, None, |mut p| async move {
        let prompt = prompt_started(&mut p).await;
        p.update(json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "kind": "edit",
            "title": "edit", "locations": [{"path": "/etc/passwd"}]}))
            .await;
        let a = p
            .ask(7, "session/request_permission", json!({"sessionId": "s1",
                "options": [{"optionId": "yes", "kind": "allow_once"}, {"optionId": "no", "kind": "reject_once"}],
                "toolCall": {"toolCallId": "c1", "locations": [{"path": inside}]}}))
            .await;
        assert_eq!(a["result"]["outcome"]["optionId"], "yes", "{a}");
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
}

/// codex-acp runs commands unasked with its default approval: under `ask` (only) Berth
/// adds `-c approval_policy="untrusted"`, unless the user's arguments set one.
#[test]
fn codex_acp_is_told_to_ask_under_ask_only() {
    let args = |command: &[&str], permissions| acp_invocation(command, permissions).args;
    let untrusted = ["-c".to_owned(), "approval_policy=\"untrusted\"".to_owned()];
    let asked = args(
        &[
            "/opt/codex-acp",
            "-c",
            "sandbox_mode=\"danger-full-access\"",
        ],
        Permissions::Ask,
    );
    assert!(asked.ends_with(&untrusted), "{asked:?}");
    let npx = args(
        &["npx", "@zed-industries/codex-acp@0.16.0"],
        Permissions::Ask,
    );
    assert!(npx.ends_with(&untrusted), "{npx:?}");
    for p in [Permissions::Edit, Permissions::Full, Permissions::ReadOnly] {
        assert!(!args(&["codex-acp"], p).ends_with(&untrusted), "{p}");
    }
    let own = args(
        &["codex-acp", "-c", "approval_policy=\"on-failure\""],
        Permissions::Ask,
    );
    assert_eq!(
        own.iter().filter(|a| a.contains("approval_policy")).count(),
        1,
        "{own:?}"
    );
    assert!(!args(&["gemini", "--acp"], Permissions::Ask).ends_with(&untrusted));
}

/// The invocation of an ACP agent started by `command`, for a fenced turn under
/// `permissions`.
fn acp_invocation(command: &[&str], permissions: Permissions) -> crate::agent::adapter::Invocation {
    use crate::agent::adapter::{Adapter, Turn};
    use berth_core::exec::{AgentKind, AgentSpec};
    let spec = AgentSpec {
        name: "a".into(),
        kind: AgentKind::Acp,
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        permissions: None,
    };
    let turn = Turn {
        prompt: "p",
        brief: None,
        resume_id: None,
        work_dir: std::path::Path::new("/w"),
        permissions,
        fenced: true,
    };
    Adapter::Acp.invocation(&spec, &turn).unwrap()
}

/// Message and thought chunks go out as they arrive, each a delta counting its
/// message's pieces; the whole message follows its last piece, and text said before a
/// permission request comes before the request's denial (it used to wait behind it).
#[tokio::test]
async fn chunks_stream_as_deltas_and_text_comes_before_a_denial() {
    let w = world();
    let file = w.app.join("x.txt").display().to_string();
    let f = file.clone();
    let (_, events) = turn_live(&w, Permissions::ReadOnly, None, None, None, |mut p| async move {
        p.start(json!({})).await;
        p.answer("session/new", json!({"sessionId": "s1"})).await;
        let prompt = p.recv().await;
        p.update(json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}}))
            .await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "I will "}}))
            .await;
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "write."}}))
            .await;
        let a = p
            .ask(0, "session/request_permission", json!({"sessionId": "s1",
                "toolCall": {"toolCallId": "t1", "kind": "edit", "title": "WriteFile", "locations": [{"path": f}]},
                "options": [{"optionId": "no", "kind": "reject_once"}]}))
            .await;
        assert_eq!(a["result"]["outcome"]["optionId"], "no");
        p.update(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Refused."}}))
            .await;
        p.send(json!({"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "end_turn"}}))
            .await;
    })
    .await;
    let delta = |text: &str, thought: bool, part: u32| AgentEvent::Delta {
        text: text.into(),
        thought,
        part,
    };
    let text = |t: &str| AgentEvent::Text { text: t.into() };
    let said: Vec<AgentEvent> = events
        .into_iter()
        .filter(|e| {
            matches!(
                e,
                AgentEvent::Delta { .. }
                    | AgentEvent::Text { .. }
                    | AgentEvent::Thinking { .. }
                    | AgentEvent::Denied { .. }
            )
        })
        .collect();
    assert_eq!(
        said,
        vec![
            delta("hm", true, 0),
            AgentEvent::Thinking { text: "hm".into() },
            delta("I will ", false, 0),
            delta("write.", false, 1),
            text("I will write."),
            AgentEvent::Denied {
                tool: "WriteFile".into(),
                target: file,
                message: Some("the agent's policy is read-only: no edit actions".into()),
                by: None,
            },
            delta("Refused.", false, 0),
            text("Refused."),
        ]
    );
}
