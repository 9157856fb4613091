//! Real ACP agents through `berth serve`, each the pinned npm release that
//! `scripts/test.sh` installs, against a fake of its model's API on loopback
//! (`berth_tests::fake_models`): Gemini CLI (`gemini --acp`, the fake Gemini API; it
//! writes through Berth's `fs/write_text_file`) and Zed's Codex adapter (`codex-acp`,
//! the fake Responses API; it asks Berth before each patch and command), and opencode
//! (`opencode acp`, the fake Messages API; it writes and runs commands itself, asking
//! nothing unless told to, as under `ask`; read-only, it is in its `plan` mode, whose
//! own rules refuse its writes, and the fence stops the rest). Each passes
//! [`battery`]. The `ask` policy with each: `real_acp_ask`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::fake_models::FakeModels;
use berth_tests::steps::{
    agent_cli, agent_events, new_session, s, send_detached, send_json as send, tasks, wait_final,
};
use berth_tests::{Berth, FAKE_USER, eventually};
use serde_json::Value;
use std::path::Path;

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

/// A Berth whose agents reach only the fake, through the variables `env` gives for the
/// user's home (in the server's environment, where the agents' pass-through takes them).
fn berth_with(
    tag: &str,
    env: impl FnOnce(&Path) -> std::io::Result<Vec<(String, String)>>,
) -> Berth {
    let mut b = Berth::new(tag);
    for (k, v) in env(&b.user_home).expect("the agent's environment") {
        if k != "HOME" {
            b.env(&k, &v);
        }
    }
    b.serve();
    b
}

/// The battery every real ACP agent passes through `berth serve`, the agent started by
/// `command`: with the default policy it writes a file in the bound directory with its
/// own tool and the task succeeds with its final text and usage; the second message
/// continues the conversation (the fake sees both user turns); a read-only agent's
/// write does not happen and the task carries the denial; the transcript's tool events
/// carry kind and status; cancel mid-turn stops it with nothing left running; nothing
/// the web listener serves names the user. `settle` runs before the second message.
fn battery(b: &Berth, fake: &FakeModels, command: &[&str], settle: impl Fn()) {
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    let add = |name: &str, policy: Option<&str>| {
        let mut args = vec!["agent", "add", name, "--kind", "acp"];
        if let Some(p) = policy {
            args.extend(["--permissions", p]);
        }
        args.push("--command");
        args.extend(command);
        b.ok(&args);
    };
    add("acp", None);
    let session = new_session(b, "acp", Some(&app));
    let first = "Please write the greeting.";
    let (code, events, task) = send(
        b,
        &session,
        &format!("{first}\nberth-fake: write hello.txt hello from acp"),
    );
    assert_eq!(
        (code, &task["status"]),
        (0, &Value::from("succeeded")),
        "{task}\n{events:#?}"
    );
    assert_eq!(task["denials"], serde_json::json!([]));
    assert_eq!(
        std::fs::read_to_string(app.join("hello.txt"))
            .ok()
            .as_deref()
            .map(str::trim_end),
        Some("hello from acp")
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

    // The second message continues the conversation: the model sees both user turns.
    settle();
    let before = fake.model_turns().len();
    let (code, events2, task) = send(b, &session, "And now?\nberth-fake: say still here");
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
    add("acp-ro", Some("read-only"));
    let ro = new_session(b, "acp-ro", Some(&app));
    let (code, events, task) = send(b, &ro, "Change it.\nberth-fake: write ro.txt nope");
    assert_eq!(code, 1, "{task}");
    assert_eq!(
        (&task["status"], &task["error_code"]),
        (&Value::from("failed"), &Value::from("permission_denied")),
        "{task}\n{events:#?}"
    );
    assert!(!task["denials"].as_array().unwrap().is_empty(), "{task}");
    assert!(!agent_events(&events, "denied").is_empty());
    assert!(!app.join("ro.txt").exists(), "nothing went through");

    // Cancel mid-turn stops it, and nothing is left running in the directory.
    let cmd = "echo started > started.txt; sleep 37; echo late > late.txt";
    let task = send_detached(b, &session, &format!("Wait.\nberth-fake: run {cmd}"));
    let running = eventually(60, || app.join("started.txt").exists().then_some(()));
    assert!(
        running.is_some(),
        "the agent's command started: {:?}",
        tasks(b, &session)
    );
    b.ok(&["task", "cancel", &task]);
    let done = wait_final(b, &session, &task);
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

#[test]
fn real_gemini_cli_over_acp() {
    let fake = FakeModels::start();
    let b = berth_with("real-gemini", |home| fake.gemini_env(home));
    let gemini = agent_cli("gemini");
    battery(&b, &fake, &[s(&gemini), "--acp"], || {
        // Gemini CLI 0.61 names a session's record by the minute it (re)opens it, and
        // `session/load` first writes a fresh record: in the same minute as the
        // session's start, that overwrites the conversation it is about to load ("No
        // previous sessions found"; Berth then starts afresh and says so). A user's next
        // message is seldom that quick; the test waits for the minute after the first
        // turn ended (the session's record may be named by any minute up to now: one
        // taken before the first message is not enough when its turn crossed a minute).
        let ended = minute();
        while minute() == ended {
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    });
}

/// Zed's Codex adapter, its own sandbox off (it cannot start inside Berth's fence) and
/// asking Berth for every command and patch (`approval_policy="untrusted"`).
#[test]
fn real_codex_acp() {
    let fake = FakeModels::start();
    let b = berth_with("real-codex-acp", |home| fake.codex_env(home));
    let bin = agent_cli("codex-acp");
    let command = [
        s(&bin),
        "-c",
        "sandbox_mode=\"danger-full-access\"",
        "-c",
        "approval_policy=\"untrusted\"",
    ];
    battery(&b, &fake, &command, || {});
}

/// opencode 1.18 (`opencode acp`), on the fake Messages API through its configuration;
/// read-only, in its `plan` mode (its own rules refuse the write).
#[test]
fn real_opencode_over_acp() {
    let fake = FakeModels::start();
    let b = berth_with("real-opencode", |home| fake.opencode_env(home));
    let opencode = agent_cli("opencode");
    battery(&b, &fake, &[s(&opencode), "acp"], || {});
}

/// A read-only opencode is in its `plan` mode (Berth sets it through its mode
/// configuration option) and asks no permission: its own rules refuse its `write`
/// call (`The user has specified a rule which prevents you from using this specific
/// tool call…`: a denial by the agent's own permission system), and it runs `touch` in
/// its own shell, which the kernel refuses (`touch: cannot touch '…': Permission
/// denied` in a bash call it reports *completed*: a denial by the fence). The task
/// fails `permission_denied`. The final text quoting those words (the fake repeats
/// each result) adds none. (A `write` the fence refuses, `PermissionDenied:
/// FileSystem.writeFile (…)`, is read as the fence's: `acp::tests`.)
#[test]
fn real_opencode_fence_refusals_are_denials() {
    let fake = FakeModels::start();
    let b = berth_with("real-opencode-fence", |home| fake.opencode_env(home));
    let opencode = agent_cli("opencode");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    b.ok(&[
        "agent",
        "add",
        "oc-ro",
        "--kind",
        "acp",
        "--permissions",
        "read-only",
        "--command",
        s(&opencode),
        "acp",
    ]);
    let session = new_session(&b, "oc-ro", Some(&app));
    let (code, events, task) = send(
        &b,
        &session,
        "Write both.\nberth-fake: write tool.txt nope\nberth-fake: run touch touched.txt",
    );
    assert_eq!(code, 1, "{task}\n{events:#?}");
    assert_eq!(
        (&task["status"], &task["error_code"]),
        (&Value::from("failed"), &Value::from("permission_denied")),
        "{task}\n{events:#?}"
    );
    assert!(!app.join("tool.txt").exists(), "nothing went through");
    assert!(!app.join("touched.txt").exists(), "nothing went through");
    let denials = task["denials"].as_array().unwrap();
    assert_eq!(denials.len(), 2, "{task}\n{events:#?}");
    assert_eq!(
        (&denials[0]["tool"], &denials[0]["by"]),
        (&Value::from("write"), &Value::Null),
        "opencode's own rule (plan mode): {task}"
    );
    assert!(
        denials[0]["target"].as_str().unwrap().ends_with("tool.txt"),
        "{task}"
    );
    assert_eq!(denials[1]["by"], "fence", "{task}");
    // The shell call's name is its command; its target, the directory it ran in.
    assert_eq!(denials[1]["tool"], "touch touched.txt", "{task}");
    assert_eq!(agent_events(&events, "denied").len(), 2, "{events:#?}");
    let results = agent_events(&events, "result");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("Permission denied"),
        "the agent's own text quotes the refusal: {results:?}"
    );
}
