//! Usage that adds up (issue 56, part 3), end to end: the real Claude Code, Codex and
//! codex-acp (the pinned releases) against the fake model APIs, whose answers report
//! usage (cache tokens too); each task's usage in one shape, the sessions' totals in
//! `berth session show --json`, the totals across sessions in `berth usage --json`,
//! and `berth_tokens_total` on the metrics listener, all equal to what the fake
//! reported. On a team server each member's `berth usage` (and the API) counts their
//! own tasks alone, and the admin's counts everyone's.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::fake_models::{FakeModels, Reported};
use berth_tests::steps::{agent_cli, new_session, raw_http, s, send_json as send, write_script};
use berth_tests::team::Team;
use berth_tests::{Berth, free_port};
use serde_json::{Value, json};
use std::net::TcpStream;
use std::time::Duration;

/// What the fake reported for `turns`, added up.
fn sum(turns: &[Reported]) -> Reported {
    turns.iter().fold(Reported::default(), |a, t| Reported {
        input: a.input + t.input,
        output: a.output + t.output,
        cache_read: a.cache_read + t.cache_read,
        cache_write: a.cache_write + t.cache_write,
    })
}

/// Usage totals as the API gives them: `tasks` tasks adding up to `r`, with `cost`.
fn totals(tasks: u64, r: Reported, cost: &Value) -> Value {
    let mut v = json!({
        "tasks": tasks,
        "input": r.input,
        "output": r.output,
        "cache_read": r.cache_read,
        "cache_write": r.cache_write,
    });
    if !cost.is_null() {
        v["cost_usd"] = cost.clone();
    }
    v
}

/// The metrics listener's text.
fn scrape(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n");
    let (status, body) = raw_http(&mut stream, &head, b"");
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
}

/// The value of `series` (`name{labels}`) in a scrape.
fn metric(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn real_claude_codex_and_codex_acp_usage_adds_up() {
    let fake = FakeModels::start();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut b = Berth::new("usage-real");
    let mut env = fake.claude_env(&b.user_home).expect("claude's environment");
    env.extend(fake.codex_env(&b.user_home).expect("codex's configuration"));
    for (k, v) in env {
        if k != "HOME" {
            b.env(&k, &v);
        }
    }
    b.serve_with(&["--metrics-listen", &metrics]);
    let claude = agent_cli("claude");
    let codex_acp = agent_cli("codex-acp");
    b.ok(&[
        "agent",
        "add",
        "claude",
        "--kind",
        "claude",
        "--command",
        s(&claude),
    ]);
    b.ok(&[
        "agent",
        "add",
        "codex-acp",
        "--kind",
        "acp",
        "--command",
        s(&codex_acp),
        "-c",
        "sandbox_mode=\"danger-full-access\"",
    ]);
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();

    // A Claude Code task: two model turns (the write, then the answer).
    let cs = new_session(&b, "claude", Some(&app));
    let (code, _, task) = send(
        &b,
        &cs,
        "Please write the greeting.\nberth-fake: write hello.txt hello",
    );
    assert_eq!(code, 0, "{task}");
    let claude_turns = fake.reported_usage();
    assert!(claude_turns.len() >= 2, "{claude_turns:?}");
    let by_claude = sum(&claude_turns);
    assert!(
        by_claude.cache_read > 0 && by_claude.cache_write > 0,
        "{by_claude:?}"
    );
    // The task's usage, in the one shape: the fake's numbers, Claude Code's own cost,
    // its own object under `raw`.
    let usage = &task["usage"];
    let cost = usage["cost_usd"].clone();
    assert!(cost.is_f64(), "Claude Code reports its cost: {usage}");
    assert_eq!(
        (
            &usage["input"],
            &usage["output"],
            &usage["cache_read"],
            &usage["cache_write"]
        ),
        (
            &json!(by_claude.input),
            &json!(by_claude.output),
            &json!(by_claude.cache_read),
            &json!(by_claude.cache_write)
        ),
        "{usage}"
    );
    assert_eq!(usage["raw"]["input_tokens"], json!(by_claude.input));

    // A codex-acp task, in another session: it reports only how full its context is
    // (`usage_update`), so it counts no tokens; `raw` keeps what it said, which is the
    // last model turn's whole input and output.
    let ks = new_session(&b, "codex-acp", Some(&app));
    let (code, _, task) = send(&b, &ks, "Please say hi.\nberth-fake: say hi");
    assert_eq!(code, 0, "{task}");
    let all_turns = fake.reported_usage();
    let last = all_turns.last().unwrap();
    assert!(all_turns.len() > claude_turns.len());
    assert_eq!(
        (
            &task["usage"]["input"],
            &task["usage"]["output"],
            &task["usage"]["raw"]["used"]
        ),
        (
            &json!(0),
            &json!(0),
            &json!(last.input + last.cache_read + last.output)
        ),
        "{}",
        task["usage"]
    );

    // Codex (`codex exec`), two turns of one session: it reports the thread's running
    // total, so the second turn counts what it added.
    let codex = agent_cli("codex");
    b.ok(&[
        "agent",
        "add",
        "codex",
        "--kind",
        "codex",
        "--command",
        s(&codex),
    ]);
    let xs = new_session(&b, "codex", Some(&app));
    let before = fake.reported_usage().len();
    for text in [
        "First.\nberth-fake: say one",
        "Second.\nberth-fake: say two",
    ] {
        let (code, _, task) = send(&b, &xs, text);
        assert_eq!(code, 0, "{task}");
    }
    let codex_turns = fake.reported_usage()[before..].to_vec();
    assert_eq!(codex_turns.len(), 2, "{codex_turns:?}");
    let by_codex = sum(&codex_turns);
    let listed = b.json(&["task", "list", "--session", &xs, "--json"]);
    let second = &listed[1]["usage"];
    assert_eq!(
        (&second["input"], &second["cache_read"], &second["output"]),
        (
            &json!(codex_turns[1].input),
            &json!(codex_turns[1].cache_read),
            &json!(codex_turns[1].output)
        ),
        "{second}"
    );
    assert_eq!(
        b.json(&["session", "show", &xs, "--json"])["usage"],
        totals(2, by_codex, &Value::Null)
    );

    // The sessions' totals.
    let show = b.json(&["session", "show", &cs, "--json"]);
    assert_eq!(show["usage"], totals(1, by_claude, &cost));
    let show = b.json(&["session", "show", &ks, "--json"]);
    assert_eq!(show["usage"], totals(1, Reported::default(), &Value::Null));
    // And as text: `session show`, and the chat's header (its line mode, on a pipe).
    let line =
        serde_json::from_value::<berth_core::usage::UsageTotals>(totals(1, by_claude, &cost))
            .unwrap()
            .line();
    let mut chat = b
        .cmd()
        .current_dir(&app)
        .args(["chat", &cs, "--line"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    chat.stdout.extend_from_slice(&chat.stderr);
    let said = String::from_utf8_lossy(&chat.stdout);
    assert!(
        said.lines().any(|l| l == format!("usage     {line}")),
        "{line}\n{said}"
    );
    let text = b.ok(&["session", "show", &cs]);
    assert!(
        text.lines().any(|l| l == format!("usage     {line}")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("usage ") && l.contains(" in · ") && l.ends_with("(1 task)")),
        "{text}"
    );

    // Across sessions: by agent (the default), by session, by day.
    let report = b.json(&["usage", "--json"]);
    let everything = totals(4, sum(&[by_claude, by_codex]), &cost);
    assert_eq!(
        report,
        json!({
            "since": null,
            "by": "agent",
            "groups": [
                group("claude", totals(1, by_claude, &cost)),
                group("codex", totals(2, by_codex, &Value::Null)),
                group("codex-acp", totals(1, Reported::default(), &Value::Null)),
            ],
            "total": everything,
        })
    );
    let by_session = b.json(&["usage", "--by", "session", "--json"]);
    let mut keys: Vec<&str> = by_session["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["key"].as_str().unwrap())
        .collect();
    keys.sort_unstable();
    let mut want = vec![cs.as_str(), ks.as_str(), xs.as_str()];
    want.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(by_session["total"], everything);
    let by_day = b.json(&["usage", "--by", "day", "--since", "2026-01-01", "--json"]);
    assert_eq!(by_day["groups"].as_array().unwrap().len(), 1, "{by_day}");
    assert_eq!(by_day["total"], everything);
    let later = b.json(&["usage", "--since", "2999-01-01", "--json"]);
    assert_eq!(
        later["total"],
        json!({"tasks": 0, "input": 0, "output": 0, "cache_read": 0, "cache_write": 0})
    );

    // The browser's listener reads the same totals.
    let (status, body) = b.web_get(&format!("/api/v1/sessions/{cs}/usage"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        totals(1, by_claude, &cost)
    );

    // Bad values: refused before any request, with what they take.
    let out = b.run(&["usage", "--since", "last week"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("error: --since \"last week\" is not a date")
            && err.contains("hint: give a UTC date"),
        "{err}"
    );
    let out = b.run(&["usage", "--by", "month"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("hint: group by agent, session or day"),
        "{err}"
    );

    // And Prometheus counted the same tokens, by direction and agent kind.
    let text = scrape(&metrics);
    let tokens = |direction: &str, kind: &str| {
        metric(
            &text,
            &format!("berth_tokens_total{{direction=\"{direction}\",agent_kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(
        [
            tokens("input", "claude"),
            tokens("output", "claude"),
            tokens("cache_read", "claude"),
            tokens("cache_write", "claude"),
            tokens("input", "codex"),
            tokens("output", "codex"),
            tokens("cache_read", "codex"),
            tokens("input", "acp"),
            tokens("output", "acp"),
        ],
        [
            Some(by_claude.input),
            Some(by_claude.output),
            Some(by_claude.cache_read),
            Some(by_claude.cache_write),
            Some(by_codex.input),
            Some(by_codex.output),
            Some(by_codex.cache_read),
            Some(0),
            Some(0),
        ],
        "{text}"
    );
}

/// A group of a usage report: its key and its totals.
fn group(key: &str, mut totals: Value) -> Value {
    totals["key"] = json!(key);
    totals
}

/// A stand-in `claude` (kind claude, stream-json) that reports the usage its prompt
/// names (`usage INPUT OUTPUT`), one token read from the cache, and a cost of a quarter.
const REPORTING_CLAUDE: &str = r#"#!/bin/sh
p=$(cat)
set -- $(printf '%s\n' "$p" | sed -n 's/.*usage \([0-9]*\) \([0-9]*\).*/\1 \2/p' | head -n 1)
echo '{"type":"system","subtype":"init","session_id":"s-1","model":"fake"}'
printf '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s-1","total_cost_usd":0.25,"usage":{"input_tokens":%s,"output_tokens":%s,"cache_read_input_tokens":1,"cache_creation_input_tokens":0}}\n' "$1" "$2"
"#;

#[test]
fn members_see_their_own_usage_and_the_admin_everyones() {
    let team = Team::start();
    let admin = team.admin.clone();
    let ann = team.member("ann");
    let bob = team.member("bob");
    let script = team.root.path().join("claude");
    write_script(&script, REPORTING_CLAUDE);
    let agent = json!({"name": "rc", "kind": "claude", "command": [s(&script)]}).to_string();
    assert_eq!(team.api(&admin, "POST", "/api/v1/agents", &agent).0, 201);
    let daemon = |who: &str, name: &str, tag: &str| {
        let (st, v) = team.api(
            who,
            "POST",
            "/api/v1/daemon/tokens",
            &json!({ "name": name }).to_string(),
        );
        assert_eq!(st, 201, "{v}");
        let mut m = Berth::new(tag);
        m.daemon(&team.url, v["token"].as_str().unwrap(), name);
        m
    };
    let ann_m = daemon(&ann, "ann-laptop", "usage-ann");
    let bob_m = daemon(&bob, "bob-laptop", "usage-bob");
    let new = |m: &Berth| {
        m.json(&["session", "new", "--agent", "rc", "--json"])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let send = |m: &Berth, session: &str, text: &str| {
        let out = m.run(&["send", session, text]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let (ann_s, bob_s) = (new(&ann_m), new(&bob_m));
    send(&ann_m, &ann_s, "usage 100 10");
    send(&ann_m, &ann_s, "usage 200 20");
    send(&bob_m, &bob_s, "usage 5000 500");

    let total = |tasks: u64, input: u64, output: u64| {
        json!({"tasks": tasks, "input": input, "output": output, "cache_read": tasks,
            "cache_write": 0, "cost_usd": 0.25 * tasks as f64})
    };
    // Each member's own, through their machine's CLI and with their token.
    let anns = ann_m.json(&["usage", "--json"]);
    assert_eq!(anns["total"], total(2, 300, 30), "{anns}");
    assert_eq!(anns["groups"].as_array().unwrap().len(), 1, "{anns}");
    let bobs = bob_m.json(&["usage", "--by", "session", "--json"]);
    assert_eq!(bobs["total"], total(1, 5000, 500), "{bobs}");
    assert_eq!(bobs["groups"][0]["key"], json!(bob_s));
    let (st, v) = team.api(&bob, "GET", "/api/v1/usage?by=session", "");
    assert_eq!((st, &v["total"]), (200, &total(1, 5000, 500)), "{v}");
    // Another's session's totals are not there to see.
    let (st, v) = team.api(&bob, "GET", &format!("/api/v1/sessions/{ann_s}/usage"), "");
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (404, Some("unknown_session")),
        "{v}"
    );
    // The admin sees everyone's, and any session's.
    let (st, v) = team.api(&admin, "GET", "/api/v1/usage?by=session", "");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["total"], total(3, 5300, 530));
    assert_eq!(v["groups"].as_array().unwrap().len(), 2, "{v}");
    let (st, v) = team.api(
        &admin,
        "GET",
        &format!("/api/v1/sessions/{ann_s}/usage"),
        "",
    );
    assert_eq!((st, v), (200, total(2, 300, 30)));
    // A bad value is refused with its code and what it takes.
    let (st, v) = team.api(&ann, "GET", "/api/v1/usage?since=yesterday", "");
    assert_eq!(
        (st, v["error"]["code"].as_str(), v["error"]["hint"].as_str()),
        (
            400,
            Some("bad_request"),
            Some(berth_core::usage::SINCE_HINT)
        ),
        "{v}"
    );
    let (st, v) = team.api(&ann, "GET", "/api/v1/usage?by=week", "");
    assert_eq!(
        (st, v["error"]["hint"].as_str()),
        (400, Some(berth_core::usage::BY_HINT)),
        "{v}"
    );
}
