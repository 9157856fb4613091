//! The `ask` policy with the real ACP agents (issue 54): codex-acp, Gemini CLI and
//! opencode, each the pinned release, on a fake of its model's API. In a bound (fenced)
//! directory holding `check.sh`, a turn whose model runs `sh ./check.sh` waits for a
//! person (`waiting_approval`, the command listed by `berth approvals --json`): approved,
//! the script runs; denied, it does not, and the task carries the denial `by: "human"`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::fake_models::FakeModels;
use berth_tests::steps::{
    agent_cli, control, new_session, s, send_detached, task, wait_final, waiting_approvals,
    write_script,
};
use serde_json::json;
use std::path::Path;

const RUN: &str = "Run the check.\nberth-fake: run sh ./check.sh";

/// How many times `check.sh` ran.
fn runs(app: &Path) -> usize {
    std::fs::read_to_string(app.join("ran.txt")).map_or(0, |s| s.lines().count())
}

/// A Berth whose agents reach only the fake (the variables `env` gives, in the
/// server's environment), serving a bound session of `command` under `ask` in a
/// directory holding `check.sh`.
fn asking(
    tag: &str,
    env: impl FnOnce(&Path) -> std::io::Result<Vec<(String, String)>>,
    command: &[&str],
) -> (Berth, String, std::path::PathBuf) {
    let mut b = Berth::new(tag);
    for (k, v) in env(&b.user_home).expect("the agent's environment") {
        if k != "HOME" {
            b.env(&k, &v);
        }
    }
    b.serve();
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    write_script(&app.join("check.sh"), "echo ran >> ran.txt\n");
    let mut args = vec![
        "agent",
        "add",
        "asker",
        "--kind",
        "acp",
        "--permissions",
        "ask",
    ];
    args.push("--command");
    args.extend(command);
    b.ok(&args);
    let session = new_session(&b, "asker", Some(&app));
    (b, session, app)
}

/// One approval (from the CLI: the script runs) and one denial (over the API: it does
/// not run, and the task carries a denial by a person). The request is listed with
/// the command in its `field` (`command`, from the call's input; Gemini CLI sends no
/// input, and its title is the command), and with the agent's `options` by id.
fn approve_then_deny(b: &Berth, session: &str, app: &Path, field: &str, options: &[&str]) {
    let t1 = send_detached(b, session, RUN);
    let waiting = waiting_approvals(b, 1);
    let a = &waiting[0];
    assert_eq!(
        (&a["kind"], &a[field]),
        (&json!("execute"), &json!("sh ./check.sh")),
        "the command is visible: {a}"
    );
    let offered: Vec<&str> = a["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["id"].as_str())
        .collect();
    assert_eq!(offered, options, "{a}");
    assert_eq!(a["task_id"], json!(t1), "{a}");
    let t = task(b, session, &t1).unwrap();
    assert_eq!(t["status"], "waiting_approval", "{t}");
    assert_eq!(runs(app), 0, "nothing runs before the answer");
    b.ok(&["approve", a["id"].as_str().unwrap()]);
    let done = wait_final(b, session, &t1);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(runs(app), 1, "approved, the script ran: {done}");
    let d = &done["approvals"][0]["decision"];
    assert_eq!(
        (&d["decision"], &d["by"]),
        (&json!("allow"), &json!("human")),
        "{done}"
    );

    let t2 = send_detached(b, session, RUN);
    let waiting = waiting_approvals(b, 1);
    let id = waiting[0]["id"].as_str().unwrap().to_owned();
    let (status, said) = control(
        b,
        "POST",
        &format!("/api/v1/approvals/{id}"),
        json!({"decision": "deny", "reason": "not today"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(status, 200, "{said}");
    let done = wait_final(b, session, &t2);
    assert_eq!(runs(app), 1, "denied, it did not run: {done}");
    let denials = done["denials"].as_array().unwrap();
    assert!(
        denials.iter().any(|d| d["by"] == "human"),
        "the task carries a denial by a person: {done}"
    );
    let d = &done["approvals"][0]["decision"];
    assert_eq!(
        (&d["decision"], &d["by"]),
        (&json!("deny"), &json!("human")),
        "{done}"
    );
}

/// codex-acp with its own sandbox off (it cannot start inside Berth's fence), as a
/// user registers it: with its default approval (`on-request`) it runs `sh ./check.sh`
/// without asking, so under `ask` Berth adds `-c approval_policy="untrusted"` and it
/// asks before each command. With those overrides it offers no modes (0.16.0), so
/// Berth sets none.
#[test]
fn real_codex_acp_asks_a_person() {
    let fake = FakeModels::start();
    let bin = agent_cli("codex-acp");
    let command = [s(&bin), "-c", "sandbox_mode=\"danger-full-access\""];
    let (b, session, app) = asking("ask-codex-acp", |h| fake.codex_env(h), &command);
    approve_then_deny(&b, &session, &app, "command", &CODEX_OPTIONS);
}

/// The options codex-acp 0.16.0 offers for a command.
const CODEX_OPTIONS: [&str; 3] = ["approved", "approved-execpolicy-amendment", "abort"];

/// Gemini CLI in its default approval mode (`default`, "Prompts for approval"; Berth
/// sets no other under `ask`) asks before `run_shell_command`.
#[test]
fn real_gemini_cli_asks_a_person() {
    let fake = FakeModels::start();
    let gemini = agent_cli("gemini");
    let (b, session, app) = asking("ask-gemini", |h| fake.gemini_env(h), &[s(&gemini), "--acp"]);
    approve_then_deny(
        &b,
        &session,
        &app,
        "title",
        &["proceed_always", "proceed_once", "cancel"],
    );
}

/// opencode asks nothing by default; under `ask` Berth sets `OPENCODE_PERMISSION` so it
/// asks before bash (and edits, fetches, paths outside), with `once`/`always`/`reject`.
#[test]
fn real_opencode_asks_a_person() {
    let fake = FakeModels::start();
    let opencode = agent_cli("opencode");
    let (b, session, app) = asking(
        "ask-opencode",
        |h| fake.opencode_env(h),
        &[s(&opencode), "acp"],
    );
    approve_then_deny(&b, &session, &app, "command", &["once", "always", "reject"]);
}
