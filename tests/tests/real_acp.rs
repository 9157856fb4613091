//! A real ACP agent through `berth serve`: Gemini CLI (the pinned npm release that
//! `scripts/test.sh` installs, `gemini --acp`) against the fake Gemini API on loopback
//! (`berth_tests::fake_models`). With the default policy it writes a file in the bound
//! directory through Berth (`fs/write_text_file`) and the task succeeds with its final
//! text; the second message continues the conversation (`session/load`: the fake sees
//! both user turns); a read-only agent's write does not happen and the task carries
//! the denial; the transcript's tool events carry kind and status; a cancel mid-turn
//! stops it with nothing left running; nothing the web listener serves names the user.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::fake_models::FakeModels;
use berth_tests::steps::{new_session, s, send_detached, send_json as send, tasks, wait_final};
use berth_tests::{Berth, FAKE_USER, eventually};
use serde_json::Value;
use std::path::PathBuf;

/// The installed Gemini CLI: `$BERTH_AGENT_CLIS/node_modules/.bin/gemini`.
fn gemini() -> PathBuf {
    let dir = std::env::var_os("BERTH_AGENT_CLIS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/berth-agents")))
        .expect("BERTH_AGENT_CLIS or HOME");
    let bin = dir.join("node_modules/.bin/gemini");
    assert!(
        bin.exists(),
        "{} is not installed; run scripts/test.sh, which installs the pinned agent CLIs",
        bin.display()
    );
    bin
}

/// The processes whose working directory is `dir` (or below it).
fn in_directory(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
            && cwd.starts_with(dir)
        {
            let cmd = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            out.push(format!(
                "{pid}: {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    out
}

/// The wall clock's minute.
fn minute() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

fn agent_events<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "agent" && e["payload"]["type"] == kind)
        .map(|e| &e["payload"])
        .collect()
}

#[test]
fn real_gemini_over_acp_edits_in_place_continues_and_reports_denials() {
    let fake = FakeModels::start();
    let mut b = Berth::new("real-acp");
    for (k, v) in fake.gemini_env(&b.user_home).expect("gemini's environment") {
        if k != "HOME" {
            b.env(&k, &v);
        }
    }
    b.serve();
    let bin = gemini();
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();

    b.ok(&[
        "agent",
        "add",
        "gemini",
        "--kind",
        "acp",
        "--command",
        s(&bin),
        "--acp",
    ]);
    let session = new_session(&b, "gemini", Some(&app));
    let first = "Please write the greeting.";
    let started = minute();
    let (code, events, task) = send(
        &b,
        &session,
        &format!("{first}\nberth-fake: write hello.txt hello from gemini"),
    );
    assert_eq!(
        (code, &task["status"]),
        (0, &Value::from("succeeded")),
        "{task}\n{events:#?}"
    );
    assert_eq!(task["denials"], serde_json::json!([]));
    assert!(
        task["usage"]["inputTokens"].as_u64().is_some_and(|n| n > 0),
        "the task carries the agent's usage: {task}"
    );
    assert_eq!(
        std::fs::read_to_string(app.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hello from gemini")
    );
    let results = agent_events(&events, "result");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("done: hello.txt"),
        "the final text is shown: {results:?}"
    );
    let tools = agent_events(&events, "tool");
    assert!(
        tools
            .iter()
            .any(|t| t["kind"] == "edit" && t["status"] == "completed"),
        "tool events carry kind and status: {tools:?}"
    );
    assert!(
        !agent_events(&events, "diff").is_empty(),
        "the write's diff"
    );

    // The second message continues the conversation: the model sees both user turns.
    // Gemini CLI 0.61 names a session's record by the minute it (re)opens it, and
    // `session/load` first writes a fresh record: in the same minute as the session's
    // start, that overwrites the conversation it is about to load ("No previous sessions
    // found"; Berth then starts afresh and says so). A user's next message is seldom that
    // quick; the test waits for the next minute.
    while minute() == started {
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    let before = fake.model_turns().len();
    let (code, events2, task) = send(&b, &session, "And now?\nberth-fake: say still here");
    assert_eq!(code, 0, "{task}");
    let later = fake.model_turns();
    assert!(later.len() > before, "the second message reached the model");
    assert!(
        later[before..]
            .iter()
            .all(|r| r.raw_body.contains(first) && r.raw_body.contains("And now?")),
        "the second turn carries the first: {events2:#?}"
    );

    // A read-only agent's write does not happen; the task says so with a stable code.
    b.ok(&[
        "agent",
        "add",
        "gemini-ro",
        "--kind",
        "acp",
        "--permissions",
        "read-only",
        "--command",
        s(&bin),
        "--acp",
    ]);
    let ro = new_session(&b, "gemini-ro", Some(&app));
    let (code, events, task) = send(&b, &ro, "Change it.\nberth-fake: write ro.txt nope");
    assert_eq!(code, 1, "{task}");
    assert_eq!(
        (&task["status"], &task["error_code"]),
        (&Value::from("failed"), &Value::from("permission_denied")),
        "{task}"
    );
    let denials = task["denials"].as_array().unwrap();
    assert!(
        denials
            .iter()
            .any(|d| d["target"].as_str().unwrap_or("").ends_with("ro.txt")),
        "{task}"
    );
    assert!(!agent_events(&events, "denied").is_empty());
    assert!(!app.join("ro.txt").exists(), "nothing went through");

    // Cancel mid-turn stops it, and nothing is left running in the directory.
    let cmd = "echo started > started.txt; sleep 37; echo late > late.txt";
    let task = send_detached(&b, &session, &format!("Wait.\nberth-fake: run {cmd}"));
    let running = eventually(60, || app.join("started.txt").exists().then_some(()));
    assert!(
        running.is_some(),
        "the agent's command started: {:?}",
        tasks(&b, &session)
    );
    b.ok(&["task", "cancel", &task]);
    let done = wait_final(&b, &session, &task);
    assert_eq!(done["status"], "cancelled", "{done}");
    let left = eventually(10, || {
        let inside = in_directory(&app);
        inside.is_empty().then_some(()).or_else(|| {
            eprintln!("still running in {}: {inside:?}", app.display());
            None
        })
    });
    assert!(left.is_some(), "nothing is left running in the directory");
    assert!(!app.join("late.txt").exists());

    for path in [
        format!("/api/v1/sessions/{session}/events"),
        format!("/api/v1/tasks?session={session}"),
    ] {
        let (status, body) = b.web_get(&path);
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(
            !body.contains(FAKE_USER),
            "GET {path} names the user: {body}"
        );
    }
}
