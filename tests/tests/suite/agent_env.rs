//! What reaches an agent's process from Berth's environment, and the stable codes of
//! tasks that fail before or without the agent.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::steps::{add_command_agent, new_session, s, send_json};
use serde_json::Value;
use std::collections::BTreeMap;

#[test]
fn agents_get_the_proxy_and_ca_variables_and_nothing_unlisted() {
    let mut b = Berth::new("agent-env");
    let passed = [
        ("HTTPS_PROXY", "http://proxy.corp:3128"),
        ("https_proxy", "http://proxy.corp:3128"),
        ("HTTP_PROXY", "http://proxy.corp:3128"),
        ("http_proxy", "http://proxy.corp:3128"),
        ("NO_PROXY", "localhost,127.0.0.1"),
        ("no_proxy", "localhost,127.0.0.1"),
        ("NODE_EXTRA_CA_CERTS", "/etc/corp/ca.pem"),
        ("SSL_CERT_DIR", "/etc/corp/certs"),
        ("REQUESTS_CA_BUNDLE", "/etc/corp/ca.pem"),
    ];
    for (k, v) in passed {
        b.env(k, v);
    }
    b.env("SECRET_DEPLOY_TOKEN", "never-pass-me");
    b.env("LD_PRELOAD", "/nowhere/evil.so");
    b.serve();
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    add_command_agent(&b, "env", "env");
    let session = new_session(&b, "env", Some(&dir));
    let (code, events, task) = send_json(&b, &session, "go");
    assert_eq!(code, 0, "{task}");
    let seen: BTreeMap<String, String> = events
        .iter()
        .filter(|e| e["payload"]["type"] == "text")
        .filter_map(|e| e["payload"]["text"].as_str()?.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    for (k, v) in passed {
        assert_eq!(
            seen.get(k).map(String::as_str),
            Some(v),
            "{k} reaches the agent"
        );
    }
    for k in ["SECRET_DEPLOY_TOKEN", "LD_PRELOAD"] {
        assert!(
            !seen.contains_key(k),
            "{k} must not reach the agent: {seen:?}"
        );
    }
    assert_eq!(
        seen.get("BERTH_WORK_DIR").map(String::as_str),
        Some(s(&dir))
    );
}

#[test]
fn failed_tasks_carry_stable_codes() {
    let mut b = Berth::new("agent-codes");
    b.serve();
    b.ok(&[
        "agent",
        "add",
        "ghost",
        "--kind",
        "command",
        "--command",
        "/nonexistent/agent-binary",
    ]);
    add_command_agent(&b, "three", "exit 3");
    let ghost = new_session(&b, "ghost", None);
    let (code, _, task) = send_json(&b, &ghost, "go");
    assert_eq!(
        (code, &task["status"], &task["error_code"]),
        (1, &Value::from("failed"), &Value::from("agent_not_found")),
        "{task}"
    );
    let three = new_session(&b, "three", None);
    let (code, _, task) = send_json(&b, &three, "go");
    assert_eq!(
        (code, &task["error_code"], &task["exit_code"]),
        (1, &Value::from("agent_exited"), &Value::from(3)),
        "{task}"
    );
    // The same codes in every listing, and a human line that names the code.
    let listed = b.json(&["task", "list", "--json"]);
    let codes: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["error_code"])
        .collect();
    assert_eq!(codes, vec!["agent_not_found", "agent_exited"]);
    let out = b.run(&["send", &three, "again"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("failed (exit 3) [agent_exited]"), "{err}");
}
