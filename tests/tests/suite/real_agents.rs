//! The real `claude` and `codex` binaries (the pinned npm releases that
//! `scripts/test.sh` installs) working in place through Berth, against the fake model
//! APIs on loopback (`berth_tests::fake_models`): a default agent of each kind edits
//! the bound directory and resumes its conversation; a narrower policy's denials land
//! in the task's `denials` with `permission_denied`; nothing the web listener serves
//! names the user.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::fake_models::FakeModels;
use berth_tests::steps::{agent_cli, agent_events, new_session, s, send_json as send};
use berth_tests::{Berth, FAKE_USER};
use serde_json::Value;
use std::path::Path;

/// Registers the agent `name` of `kind` running `bin`, with `permissions` (else the
/// default policy).
fn add_agent(b: &Berth, name: &str, kind: &str, permissions: Option<&str>, bin: &Path) {
    let mut args = vec!["agent", "add", name, "--kind", kind];
    if let Some(p) = permissions {
        args.extend(["--permissions", p]);
    }
    args.extend(["--command", s(bin)]);
    b.ok(&args);
}

/// A Berth whose agents reach only `fake`: the credentials and switches go into the
/// server's environment, where the agents' pass-through takes them from.
fn berth_for(tag: &str, fake: &FakeModels) -> Berth {
    let mut b = Berth::new(tag);
    let mut env = fake.claude_env(&b.user_home).expect("claude's environment");
    env.extend(fake.codex_env(&b.user_home).expect("codex's configuration"));
    for (k, v) in env {
        if k != "HOME" {
            b.env(&k, &v);
        }
    }
    b.serve();
    b
}

/// The texts the fake's model turns carried, for asserting a resumed conversation.
fn turn_bodies(fake: &FakeModels) -> Vec<String> {
    fake.model_turns()
        .iter()
        .map(|r| r.raw_body.clone())
        .collect()
}

/// Nothing the web listener serves for `session` (the session, its tasks, its whole
/// transcript, the agents) names the user, though the agent printed paths under home.
fn assert_web_never_names_the_user(b: &Berth, session: &str) {
    for path in [
        format!("/api/v1/sessions/{session}"),
        format!("/api/v1/tasks?session={session}"),
        format!("/api/v1/sessions/{session}/events"),
        "/api/v1/agents".to_owned(),
    ] {
        let (status, body) = b.web_get(&path);
        assert_eq!(status, 200, "GET {path}: {body}");
        assert!(
            !body.contains(FAKE_USER),
            "GET {path} names the user {FAKE_USER}: {body}"
        );
    }
}

/// A second message in `session` resumes its conversation: every model turn it makes
/// carries the first message's text.
fn assert_second_message_resumes(b: &Berth, fake: &FakeModels, session: &str, first: &str) {
    let before = turn_bodies(fake).len();
    let (code, _, task) = send(b, session, "And now?\nberth-fake: say still here");
    assert_eq!(code, 0, "{task}");
    let later = turn_bodies(fake);
    assert!(later.len() > before, "the second message reached the model");
    assert!(
        later[before..].iter().all(|body| body.contains(first)),
        "the second turn carries the first: resumed"
    );
}

#[test]
fn real_claude_edits_in_place_resumes_and_reports_denials() {
    let fake = FakeModels::start();
    let b = berth_for("real-claude", &fake);
    let claude = agent_cli("claude");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();

    // A default agent: `edit`.
    add_agent(&b, "claude", "claude", None, &claude);
    let session = new_session(&b, "claude", Some(&app));
    let (code, events, task) = send(
        &b,
        &session,
        "Please write the greeting.\nberth-fake: write hello.txt hello from claude",
    );
    assert_eq!(
        (code, &task["status"]),
        (0, &Value::from("succeeded")),
        "{task}"
    );
    assert_eq!(task["denials"], serde_json::json!([]));
    assert_eq!(
        std::fs::read_to_string(app.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hello from claude")
    );
    let results = agent_events(&events, "result");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("done: hello.txt"),
        "the final text is shown: {results:?}"
    );

    assert_second_message_resumes(&b, &fake, &session, "Please write the greeting.");

    // A read-only agent is denied what it tries; the task says so with a stable code.
    add_agent(&b, "claude-ro", "claude", Some("read-only"), &claude);
    let ro = new_session(&b, "claude-ro", Some(&app));
    let (code, events, task) = send(&b, &ro, "Change it.\nberth-fake: run rm hello.txt");
    assert_eq!(code, 1, "{task}");
    assert_eq!(
        (&task["status"], &task["error_code"]),
        (&Value::from("failed"), &Value::from("permission_denied"))
    );
    assert_eq!(
        task["denials"],
        serde_json::json!([{"tool": "Bash", "target": "rm hello.txt"}])
    );
    assert_eq!(agent_events(&events, "denied").len(), 1);
    assert!(app.join("hello.txt").exists(), "nothing went through");
    let listed = b.json(&["task", "list", "--session", &ro, "--json"]);
    assert_eq!(listed[0]["denials"], task["denials"]);

    assert_web_never_names_the_user(&b, &session);
    assert_web_never_names_the_user(&b, &ro);
}

/// The fence gives `edit` its shell: the real Claude Code, with Berth's default policy,
/// runs the project's own script with its Bash tool and the script's file appears; the
/// same agent's shell command that appends to `~/.bashrc` leaves it unchanged.
#[cfg(target_os = "linux")]
#[test]
fn real_claude_runs_the_projects_script_in_the_fence_and_cannot_reach_the_home() {
    let fake = FakeModels::start();
    let b = berth_for("real-claude-bash", &fake);
    let claude = agent_cli("claude");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(
        app.join("check.sh"),
        "echo checked > checked.txt\necho all good\n",
    )
    .unwrap();
    let bashrc = b.user_home.join(".bashrc");
    std::fs::write(&bashrc, "# mine\n").unwrap();
    add_agent(&b, "claude", "claude", None, &claude);
    let session = new_session(&b, "claude", Some(&app));
    let (code, events, task) = send(
        &b,
        &session,
        "Run the checks.\nberth-fake: run sh ./check.sh",
    );
    assert_eq!(
        (code, &task["status"]),
        (0, &Value::from("succeeded")),
        "{task}\n{events:?}"
    );
    assert_eq!(task["denials"], serde_json::json!([]), "{task}");
    assert_eq!(
        std::fs::read_to_string(app.join("checked.txt"))
            .ok()
            .as_deref(),
        Some("checked\n"),
        "the script ran in the directory: {events:?}"
    );
    let fence = agent_events(&events, "fence");
    assert_eq!(fence.len(), 1, "{events:?}");
    assert_eq!(fence[0]["fenced"], true, "{fence:?}");
    let results = agent_events(&events, "result");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("done: sh ./check.sh"),
        "{results:?}"
    );

    // Out of the directory, the same shell is stopped by the kernel.
    let attempt = format!(
        "Add to my shell setup.\nberth-fake: run sh -c 'echo pwned >> {}'",
        bashrc.display()
    );
    let (_, events, task) = send(&b, &session, &attempt);
    assert_eq!(
        std::fs::read_to_string(&bashrc).unwrap(),
        "# mine\n",
        "{task}\n{events:?}"
    );
    let results = agent_events(&events, "result");
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("failed: sh -c"),
        "the shell command failed: {results:?}"
    );
    // The kernel's refusal, named in the tool's result, is the fence's denial, and the
    // turn in which nothing went through says so.
    assert_eq!(
        (&task["status"], &task["error_code"]),
        (&Value::from("failed"), &Value::from("permission_denied")),
        "{task}"
    );
    let denials = task["denials"].as_array().unwrap();
    assert_eq!(denials.len(), 1, "{task}");
    assert_eq!(
        (&denials[0]["tool"], &denials[0]["by"]),
        (&Value::from("Bash"), &Value::from("fence"))
    );
    assert!(
        denials[0]["target"].as_str().unwrap().contains(".bashrc"),
        "{task}"
    );
    assert_web_never_names_the_user(&b, &session);
}

#[test]
fn real_codex_edits_in_place_resumes_and_reports_denials() {
    let fake = FakeModels::start();
    let b = berth_for("real-codex", &fake);
    let codex = agent_cli("codex");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();

    add_agent(&b, "codex", "codex", None, &codex);
    let session = new_session(&b, "codex", Some(&app));
    let (code, events, task) = send(
        &b,
        &session,
        "Please write the greeting.\nberth-fake: write hello.txt hello from codex",
    );
    assert_eq!(
        (code, &task["status"]),
        (0, &Value::from("succeeded")),
        "{task}"
    );
    // apply_patch writes one line per line, newline included.
    assert_eq!(
        std::fs::read_to_string(app.join("hello.txt"))
            .ok()
            .as_deref(),
        Some("hello from codex\n")
    );
    let texts = agent_events(&events, "text");
    assert!(
        texts.iter().any(|t| t["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("done: hello.txt")),
        "the final text is shown: {texts:?}"
    );
    // Codex's chatter on stderr is a diagnostic, never the agent's words.
    assert!(
        texts.iter().all(|t| !t["text"]
            .as_str()
            .unwrap_or("")
            .contains("Reading additional input")),
        "{texts:?}"
    );

    assert_second_message_resumes(&b, &fake, &session, "Please write the greeting.");

    add_agent(&b, "codex-ro", "codex", Some("read-only"), &codex);
    let ro = new_session(&b, "codex-ro", Some(&app));
    let (code, events, task) = send(&b, &ro, "Write.\nberth-fake: write other.txt nope");
    assert_eq!(code, 1, "{task}");
    assert_eq!(task["error_code"], "permission_denied", "{task}");
    assert_eq!(task["denials"][0]["tool"], "apply_patch", "{task}");
    assert_eq!(agent_events(&events, "denied").len(), 1);
    assert!(!app.join("other.txt").exists());

    assert_web_never_names_the_user(&b, &session);
    assert_web_never_names_the_user(&b, &ro);
}
