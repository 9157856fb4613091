//! A team on one server (issue 15), end to end: `berth-server` with two members, ann
//! and bob, each with a daemon on a machine of their own (separate `BERTH_HOME`s, on
//! loopback). Bob tries to reach ann's sessions every way there is — the API with his
//! token, his daemon's forwarded control socket, the web listener by cookie — and gets
//! 404s; his daemon never runs her tasks. The first admin reads her session but cannot
//! make it run. Removing ann takes her machine offline, leaves her queued task
//! `waiting_daemon`, and the audit trail shows each step.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{s, write_script};
use berth_tests::team::Team;
use berth_tests::{Berth, eventually};
use serde_json::{Value, json};
use std::net::TcpStream;
use std::time::Duration;

/// An agent that says where it ran; a prompt starting `slow` sleeps a minute.
const REPORTER: &str =
    r#"p=$(cat); printf 'cwd=%s\n' "$PWD"; case "$p" in slow*) exec sleep 60;; esac"#;

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str().map(str::to_owned))
        .collect()
}

/// The `cwd=` an agent reported in a session's transcript, per task.
fn cwds(b: &Berth, session: &str) -> Vec<String> {
    let out = b.run(&["task", "list", "--session", session, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks: Value = serde_json::from_slice(&out.stdout).unwrap();
    tasks
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["work_dir"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn members_reach_only_their_own_sessions_and_machines() {
    let team = Team::start();
    let admin = team.admin.clone();

    // Members, made by the admin's command; tokens shown once, stored hashed.
    let ann = team.admin_json(&["member", "add", "ann"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let bob = team.admin_json(&["member", "add", "bob"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let db = std::fs::read(team.home.join("berth.db")).unwrap();
    assert!(
        !db.windows(ann.len()).any(|w| w == ann.as_bytes()),
        "a member token is stored in clear"
    );
    let listed = team.admin_json(&["member", "list"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert_eq!(names, ["admin", "ann", "bob"]);
    let (st, v) = team.api(&bob, "POST", "/api/v1/members", r#"{"name":"eve"}"#);
    assert_eq!((st, code(&v)), (403, "admin_only"), "{v}");

    // The admin registers the agent; a member may not.
    let script = team.root.path().join("reporter.sh");
    write_script(&script, &format!("#!/bin/sh\n{REPORTER}\n"));
    let agent = json!({"name": "rep", "kind": "command", "command": [s(&script)]}).to_string();
    let (st, v) = team.api(&bob, "POST", "/api/v1/agents", &agent);
    assert_eq!((st, code(&v)), (403, "admin_only"), "{v}");
    assert_eq!(team.api(&admin, "POST", "/api/v1/agents", &agent).0, 201);

    // Each member makes a daemon token for their own machine; bob cannot make one for ann.
    let (st, v) = team.api(
        &bob,
        "POST",
        "/api/v1/daemon/tokens",
        r#"{"name":"x","member":"ann"}"#,
    );
    assert_eq!((st, code(&v)), (403, "admin_only"), "{v}");
    let token = |who: &str, name: &str| {
        let (st, v) = team.api(
            who,
            "POST",
            "/api/v1/daemon/tokens",
            &json!({ "name": name }).to_string(),
        );
        assert_eq!(st, 201, "{v}");
        v["token"].as_str().unwrap().to_owned()
    };
    let ann_daemon_token = token(&ann, "ann-laptop");
    let bob_daemon_token = token(&bob, "bob-laptop");
    let mut ann_m = Berth::new("team-ann");
    ann_m.daemon(&team.url, &ann_daemon_token, "laptop-ann");
    let mut bob_m = Berth::new("team-bob");
    bob_m.daemon(&team.url, &bob_daemon_token, "laptop-bob");
    let (_, tokens) = team.api(&bob, "GET", "/api/v1/daemon/tokens", "");
    let names: Vec<&str> = tokens
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["bob-laptop"], "bob sees only his own tokens");

    // Ann's sessions: one made on her machine (through her daemon), one through the API.
    let on_laptop = ann_m.json(&["session", "new", "--agent", "rep", "--json"]);
    let s1 = on_laptop["id"].as_str().unwrap().to_owned();
    let (st, v) = team.api(&ann, "POST", "/api/v1/sessions", r#"{"agent":"rep"}"#);
    assert_eq!(st, 201, "{v}");
    let s2 = v["id"].as_str().unwrap().to_owned();
    let (st, v) = team.api(&bob, "POST", "/api/v1/sessions", r#"{"agent":"rep"}"#);
    assert_eq!(st, 201, "{v}");
    let bob_s = v["id"].as_str().unwrap().to_owned();

    // Her tasks run on her machine, never on bob's (both are online, equally idle).
    for i in 0..3 {
        let out = ann_m.run(&["send", &s1, &format!("hello {i}")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (st, v) = team.api(
            &ann,
            "POST",
            &format!("/api/v1/sessions/{s2}/messages"),
            &json!({ "text": format!("api {i}") }).to_string(),
        );
        assert_eq!(st, 202, "{v}");
        team.wait_status(&ann, v["task"]["id"].as_str().unwrap(), &["succeeded"]);
    }
    let ann_home = s(&ann_m.user_home).to_owned();
    for sid in [&s1, &s2] {
        let dirs = cwds(&ann_m, sid);
        assert_eq!(dirs.len(), 3, "{dirs:?}");
        assert!(
            dirs.iter().all(|d| d.starts_with(&ann_home)),
            "ann's tasks ran off her machine: {dirs:?}"
        );
    }
    let out = bob_m.run(&["send", &bob_s, "mine"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bob_dirs = cwds(&bob_m, &bob_s);
    assert!(bob_dirs[0].starts_with(s(&bob_m.user_home)), "{bob_dirs:?}");
    let (_, ann_tasks) = team.api(&ann, "GET", &format!("/api/v1/tasks?session={s1}"), "");
    let ann_task = ann_tasks[0]["id"].as_str().unwrap().to_owned();

    // Bob, by the API: lists without her sessions, 404 for each of hers, prefixes too.
    let (_, list) = team.api(&bob, "GET", "/api/v1/sessions", "");
    assert_eq!(ids(&list), vec![bob_s.clone()]);
    let (_, tasks) = team.api(&bob, "GET", "/api/v1/tasks", "");
    assert!(
        tasks
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["session_id"] == bob_s.as_str()),
        "{tasks}"
    );
    for (method, path, body) in [
        ("GET", format!("/api/v1/sessions/{s1}"), ""),
        ("GET", format!("/api/v1/sessions/{}", &s1[..4]), ""),
        ("GET", format!("/api/v1/sessions/{s1}/events"), ""),
        (
            "POST",
            format!("/api/v1/sessions/{s1}/messages"),
            r#"{"text":"hi"}"#,
        ),
        ("GET", format!("/api/v1/tasks?session={s1}"), ""),
        ("GET", format!("/api/v1/tasks/{ann_task}"), ""),
        ("POST", format!("/api/v1/tasks/{ann_task}/cancel"), "{}"),
    ] {
        let (st, v) = team.api(&bob, method, &path, body);
        assert_eq!(st, 404, "{method} {path}: {v}");
        assert!(
            matches!(code(&v), "unknown_session" | "unknown_task"),
            "{method} {path}: {v}"
        );
    }

    // Bob, through his daemon's forwarded control socket.
    let out = bob_m.run(&["session", "show", &s1]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no session matches"));
    let out = bob_m.run(&["send", &s1, "from bob's laptop"]);
    assert_eq!(out.status.code(), Some(1));
    let out = bob_m.run(&["task", "cancel", &ann_task]);
    assert_eq!(out.status.code(), Some(1));
    let listed = bob_m.json(&["session", "list", "--json"]);
    assert_eq!(ids(&listed), vec![bob_s.clone()]);

    // Bob, on the web listener by cookie: his sessions only, and the page is his.
    let cookie = format!("berth_token={bob}");
    let (st, list) = team.http("GET", "/api/v1/sessions", &[("Cookie", &cookie)], "");
    assert_eq!((st, ids(&list)), (200, vec![bob_s.clone()]));
    let (st, me) = team.http("GET", "/api/v1/me", &[("Cookie", &cookie)], "");
    assert_eq!((st, me["member"].as_str()), (200, Some("bob")), "{me}");
    let (st, page) = team.http("GET", &format!("/?token={bob}"), &[], "");
    assert_eq!(st, 200);
    assert!(page.as_str().unwrap_or("").contains("id=\"who\""));
    let (st, _) = team.http(
        "GET",
        &format!("/api/v1/sessions/{s1}/events"),
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(st, 404);
    let (st, v) = team.http(
        "GET",
        "/api/v1/sessions",
        &[("Cookie", "berth_token=berthm_forged")],
        "",
    );
    assert_eq!((st, code(&v)), (401, "unauthorized"));
    // Signing in with `?token=` wins over a cookie another token left behind.
    let (st, me) = team.http(
        "GET",
        &format!("/api/v1/me?token={bob}"),
        &[("Cookie", "berth_token=berthm_stale")],
        "",
    );
    assert_eq!((st, me["member"].as_str()), (200, Some("bob")), "{me}");
    // A cookie cannot write.
    let (st, _) = team.http(
        "POST",
        &format!("/api/v1/sessions/{bob_s}/messages"),
        &[("Cookie", &cookie)],
        r#"{"text":"x"}"#,
    );
    assert_eq!(st, 401);

    // Bob's daemon token on ann's machine id: 401.
    let ann_machine = std::fs::read_to_string(ann_m.home.join("machine-id")).unwrap();
    let (st, v) = team.http(
        "POST",
        "/api/v1/daemon/heartbeat",
        &[
            ("Authorization", &format!("Bearer {bob_daemon_token}")),
            ("x-berth-machine", ann_machine.trim()),
        ],
        r#"{"instance":"x","running":[]}"#,
    );
    assert_eq!(st, 401, "{v}");

    // The admin reads ann's session, but cannot make her agent run.
    let (st, v) = team.api(&admin, "GET", &format!("/api/v1/sessions/{s1}"), "");
    assert_eq!((st, v["id"].as_str()), (200, Some(s1.as_str())));
    let (st, all) = team.api(&admin, "GET", "/api/v1/sessions", "");
    assert_eq!((st, ids(&all).len()), (200, 3));
    let (st, v) = team.api(
        &admin,
        "POST",
        &format!("/api/v1/sessions/{s1}/messages"),
        r#"{"text":"run for ann"}"#,
    );
    assert_eq!((st, code(&v)), (403, "owner_only"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("ann"),
        "{v}"
    );

    // Ann starts a long task, and queues another behind it.
    let (_, v) = team.api(
        &ann,
        "POST",
        &format!("/api/v1/sessions/{s2}/messages"),
        r#"{"text":"slow one"}"#,
    );
    let long = v["task"]["id"].as_str().unwrap().to_owned();
    team.wait_status(&ann, &long, &["running"]);
    let (_, v) = team.api(
        &ann,
        "POST",
        &format!("/api/v1/sessions/{s2}/messages"),
        r#"{"text":"after it"}"#,
    );
    let queued = v["task"]["id"].as_str().unwrap().to_owned();
    let (st, v) = team.api(
        &admin,
        "POST",
        &format!("/api/v1/tasks/{long}/cancel"),
        "{}",
    );
    assert_eq!((st, code(&v)), (403, "owner_only"), "{v}");

    // Rotating bob's token: the old one stops working at once, the new one works; the
    // first admin's token is serve.json's and cannot be rotated.
    let rotated = team.admin_json(&["member", "token", "rotate", "bob"]);
    let bob_new = rotated["token"].as_str().unwrap().to_owned();
    assert_eq!(team.api(&bob, "GET", "/api/v1/sessions", "").0, 401);
    let (st, list) = team.api(&bob_new, "GET", "/api/v1/sessions", "");
    assert_eq!((st, ids(&list)), (200, vec![bob_s]));
    let out = team.admin_cmd(&["member", "token", "rotate", "admin", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(code(&v), "member_protected", "{v}");
    let out = team.admin_cmd(&["member", "remove", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no member is named"));
    // An admin makes a daemon token for a member; it is that member's.
    let (st, v) = team.api(
        &admin,
        "POST",
        "/api/v1/daemon/tokens",
        r#"{"name":"bob-desktop","member":"bob"}"#,
    );
    assert_eq!(st, 201, "{v}");
    let (_, tokens) = team.api(&bob_new, "GET", "/api/v1/daemon/tokens", "");
    let mine: Vec<(&str, &str)> = tokens
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["member"].as_str().unwrap()))
        .collect();
    assert_eq!(mine, [("bob-desktop", "bob"), ("bob-laptop", "bob")]);

    // Removing ann: her token stops working, her machine goes offline at once, her
    // daemon stops with a clear error, and her queued task waits for a machine of hers.
    let out = team.admin_cmd(&["member", "remove", "ann"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (st, _) = team.api(&ann, "GET", "/api/v1/sessions", "");
    assert_eq!(st, 401);
    let (_, tokens) = team.api(&admin, "GET", "/api/v1/daemon/tokens", "");
    let ann_tok = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ann-laptop")
        .unwrap()
        .clone();
    assert_eq!(ann_tok["online"], false, "{ann_tok}");
    assert!(!ann_tok["revoked_at"].is_null(), "{ann_tok}");
    let exited = eventually(20, || ann_m.server_exit());
    assert_eq!(exited, Some(1), "ann's daemon did not stop");
    assert!(
        ann_m.serve_log().contains("revoked"),
        "no clear error: {}",
        ann_m.serve_log()
    );
    team.wait_status(&admin, &long, &["interrupted"]);
    let waiting = team.wait_status(&admin, &queued, &["waiting_daemon"]);
    std::thread::sleep(Duration::from_millis(1500));
    let still = team.wait_status(&admin, &queued, &["waiting_daemon"]);
    assert_eq!(waiting["status"], still["status"], "bob's machine took it");

    // The audit trail: each change, who, and from where.
    let trail = team.admin_json(&["audit"]);
    let steps: Vec<(String, String, String)> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["member"].as_str().unwrap().to_owned(),
                a["action"].as_str().unwrap().to_owned(),
                a["via"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let has = |member: &str, action: &str, via: &str| {
        assert!(
            steps
                .iter()
                .any(|(m, a, v)| m == member && a == action && v == via),
            "no {member} {action} via {via} in {steps:?}"
        );
    };
    has("admin", "member.add", "api");
    has("admin", "agent.add", "api");
    has("ann", "token.create", "api");
    has("ann", "session.create", "machine laptop-ann");
    has("ann", "send", "machine laptop-ann");
    has("ann", "send", "api");
    has("bob", "send", "machine laptop-bob");
    has("admin", "member.remove", "api");
    has("admin", "member.rotate", "api");
    assert!(
        !steps.iter().any(|(m, a, _)| m == "bob" && a == "cancel"),
        "a refused request is no change: {steps:?}"
    );
    let only_ann = team.admin_json(&["audit", "--member", "ann"]);
    assert!(
        only_ann
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["member"] == "ann")
    );
    let text = String::from_utf8_lossy(&team.admin_cmd(&["audit"]).stdout).into_owned();
    assert!(
        text.contains("member.remove") && text.contains("VIA"),
        "{text}"
    );
}

/// `berth serve` stays single-user: no member to give a token to, and the control
/// socket's caller is the user themself.
#[test]
fn a_desktop_server_has_no_members() {
    let mut b = Berth::new("team-desktop");
    b.serve();
    let out = b.run(&[
        "daemon", "token", "create", "t", "--member", "ann", "--json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(code(&v), "unknown_member", "{v}");
    let (st, me) = berth_tests::steps::control(&b, "GET", "/api/v1/me", b"");
    assert_eq!(
        (st, me["member"].clone(), me["admin"].clone()),
        (200, Value::Null, json!(true))
    );
    let (st, v) = berth_tests::steps::control(&b, "GET", "/api/v1/members", b"");
    assert_eq!((st, code(&v)), (404, "not_found_route"), "{v}");
    b.ok(&["daemon", "token", "create", "t"]);
}

/// A prefix resolves among the caller's own ids only (issue 33, break 1): bob's
/// one-character prefix also matches ann's session and task, and every route that
/// resolves an id answers for bob's own, never `ambiguous_id` listing ann's ids. A
/// prefix that matches only ann's is a 404, as her full id is. (Ids are random, so
/// ann makes sessions and tasks until one shares bob's first character.)
#[test]
fn a_members_prefix_resolves_among_their_own_ids_only() {
    let team = Team::start();
    let admin = team.admin.clone();
    let member = |name: &str| {
        team.admin_json(&["member", "add", name])["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (ann, bob) = (member("ann"), member("bob"));
    let agent = json!({"name": "rep", "kind": "command", "command": ["true"]}).to_string();
    assert_eq!(team.api(&admin, "POST", "/api/v1/agents", &agent).0, 201);
    let new_session = |token: &str| {
        let (st, v) = team.api(token, "POST", "/api/v1/sessions", r#"{"agent":"rep"}"#);
        assert_eq!(st, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    };
    // No machine is online: every task waits, and stays bob's or ann's.
    let new_task = |token: &str, session: &str| {
        let (st, v) = team.api(
            token,
            "POST",
            &format!("/api/v1/sessions/{session}/messages"),
            r#"{"text":"hi"}"#,
        );
        assert_eq!(st, 202, "{v}");
        v["task"]["id"].as_str().unwrap().to_owned()
    };
    let bob_s = new_session(&bob);
    let bob_t = new_task(&bob, &bob_s);
    let (sp, tp) = (&bob_s[..1], &bob_t[..1]);
    let mut ann_ids = Vec::new();
    let ann_s = (0..400)
        .map(|_| new_session(&ann))
        .inspect(|id| ann_ids.push(id.clone()))
        .find(|id| id.starts_with(sp))
        .expect("no session of ann's shares bob's first character");
    (0..400)
        .map(|_| new_task(&ann, &ann_s))
        .inspect(|id| ann_ids.push(id.clone()))
        .find(|id| id.starts_with(tp))
        .expect("no task of ann's shares bob's first character");
    // An admin sees both: the prefixes really are ambiguous across members.
    for (path, code_) in [
        (format!("/api/v1/sessions/{sp}"), "ambiguous_id"),
        (format!("/api/v1/tasks/{tp}"), "ambiguous_id"),
    ] {
        let (st, v) = team.api(&admin, "GET", &path, "");
        assert_eq!((st, code(&v)), (400, code_), "{path}: {v}");
    }
    let leaks = |text: &str| {
        ann_ids
            .iter()
            .find(|id| text.contains(id.as_str()))
            .cloned()
    };

    // Every route that resolves an id, bob's prefix: bob's own, and nothing of ann's.
    let routes: &[(&str, String, &str, u16, Option<&str>)] = &[
        // method, path, body, status, the id the answer is about
        (
            "GET",
            format!("/api/v1/tasks/{tp}"),
            "",
            200,
            Some(bob_t.as_str()),
        ),
        (
            "GET",
            format!("/api/v1/tasks?session={sp}"),
            "",
            200,
            Some(bob_t.as_str()),
        ),
        (
            "POST",
            format!("/api/v1/tasks/{tp}/undone"),
            r#"{"files":[]}"#,
            200,
            None,
        ),
        (
            "POST",
            format!("/api/v1/tasks/{tp}/cancel"),
            "{}",
            200,
            Some(bob_t.as_str()),
        ),
        (
            "GET",
            format!("/api/v1/sessions/{sp}"),
            "",
            200,
            Some(bob_s.as_str()),
        ),
        (
            "GET",
            format!("/api/v1/sessions/{sp}/events"),
            "",
            200,
            None,
        ),
        (
            "DELETE",
            format!("/api/v1/sessions/{sp}/binding"),
            "",
            200,
            Some(bob_s.as_str()),
        ),
        (
            "PUT",
            format!("/api/v1/sessions/{sp}/binding"),
            r#"{"dir":"/tmp"}"#,
            503, // no_executor: berth-server binds through daemons only
            None,
        ),
        (
            "POST",
            format!("/api/v1/sessions/{sp}/messages"),
            r#"{"text":"again"}"#,
            202,
            Some(bob_s.as_str()),
        ),
    ];
    for (method, path, body, want, about) in routes {
        let (st, text) = stream_head(&team, &bob, method, path, body);
        assert_eq!(st, *want, "{method} {path}: {text}");
        assert_eq!(leaks(&text), None, "{method} {path} names ann's id: {text}");
        assert!(!text.contains("ambiguous_id"), "{method} {path}: {text}");
        if let Some(id) = about {
            assert!(
                text.contains(id),
                "{method} {path} is not about {id}: {text}"
            );
        }
    }

    // A prefix of ann's alone (longer than bob's shares) is as unknown as her full id.
    let ann_only = (2..ann_s.len())
        .map(|n| &ann_s[..n])
        .find(|p| !bob_s.starts_with(p))
        .unwrap();
    for path in [
        format!("/api/v1/sessions/{ann_only}"),
        format!("/api/v1/sessions/{ann_s}"),
    ] {
        let (st, v) = team.api(&bob, "GET", &path, "");
        assert_eq!((st, code(&v)), (404, "unknown_session"), "{path}: {v}");
    }
}

/// One request with bob's token; its status and as much of the answer as came before
/// the server went quiet for two seconds (an event stream never ends by itself).
fn stream_head(team: &Team, token: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use berth_test_support::http::{self, Request};
    let mut stream = TcpStream::connect(&team.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    Request::new(method, path)
        .bearer(token)
        .header("Content-Type", "application/json")
        .body(body)
        .close()
        .write_to(&mut stream, &team.addr)
        .unwrap();
    http::status_and_body(&http::read_all(&mut stream, Duration::from_secs(30)))
}

/// A member's view shows a daemon's paths by that machine's own home (issue 33,
/// break 7): ann's machine has its home under a temporary directory, not `/home`, and
/// where her task worked, and her agent's text, show `~/…`, never the real path. Her
/// machine's own CLI keeps the real one.
#[test]
fn a_members_view_shows_a_daemons_paths_by_its_own_home() {
    let team = Team::start();
    let ann = team.admin_json(&["member", "add", "ann"])["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let script = team.root.path().join("reporter.sh");
    write_script(&script, &format!("#!/bin/sh\n{REPORTER}\n"));
    let agent = json!({"name": "rep", "kind": "command", "command": [s(&script)]}).to_string();
    assert_eq!(
        team.api(&team.admin, "POST", "/api/v1/agents", &agent).0,
        201
    );
    let (st, v) = team.api(
        &ann,
        "POST",
        "/api/v1/daemon/tokens",
        r#"{"name":"ann-laptop"}"#,
    );
    assert_eq!(st, 201, "{v}");
    let mut laptop = Berth::new("team-home");
    laptop.daemon(&team.url, v["token"].as_str().unwrap(), "laptop-ann");
    let home = s(&laptop.user_home).to_owned();
    assert!(!home.starts_with("/home/"), "{home}");

    let (st, v) = team.api(&ann, "POST", "/api/v1/sessions", r#"{"agent":"rep"}"#);
    assert_eq!(st, 201, "{v}");
    let session = v["id"].as_str().unwrap().to_owned();
    let (st, v) = team.api(
        &ann,
        "POST",
        &format!("/api/v1/sessions/{session}/messages"),
        r#"{"text":"where"}"#,
    );
    assert_eq!(st, 202, "{v}");
    let task = v["task"]["id"].as_str().unwrap().to_owned();
    let done = team.wait_status(&ann, &task, &["succeeded"]);
    let scratch = format!("~/.local/share/berth/scratch/{session}");
    assert_eq!(done["work_dir"], scratch.as_str(), "{done}");
    let cookie = format!("berth_token={ann}");
    let (_, sessions) = team.http("GET", "/api/v1/sessions", &[("Cookie", &cookie)], "");
    assert_eq!(sessions[0]["work_dir"], scratch.as_str(), "{sessions}");
    let (st, events) = stream_head(
        &team,
        &ann,
        "GET",
        &format!("/api/v1/sessions/{session}/events"),
        "",
    );
    assert_eq!(st, 200, "{events}");
    assert!(events.contains(&format!("cwd={scratch}")), "{events}");
    for text in [&events, &sessions.to_string(), &done.to_string()] {
        assert!(!text.contains(&home), "ann's home is shown: {text}");
    }
    // Her machine's own CLI (its forwarded control socket) keeps the real path.
    assert_eq!(
        cwds(&laptop, &session),
        [format!("{home}/.local/share/berth/scratch/{session}")]
    );
}

/// Issue 52's mending on a team server: a member renames, archives and deletes only
/// their own sessions (another's answers 404, to an admin `owner_only`); editing and
/// removing agents is an admin's, like adding one; each change is in the audit trail.
#[test]
fn a_member_mends_only_their_own_sessions_and_an_admin_the_agents() {
    let team = Team::start();
    let admin = team.admin.clone();
    let member = |name: &str| {
        team.admin_json(&["member", "add", name])["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (ann, bob) = (member("ann"), member("bob"));
    let agent = json!({"name": "rep", "kind": "command", "command": ["true"]}).to_string();
    assert_eq!(team.api(&admin, "POST", "/api/v1/agents", &agent).0, 201);
    let new_session = |token: &str| {
        let (st, v) = team.api(token, "POST", "/api/v1/sessions", r#"{"agent":"rep"}"#);
        assert_eq!(st, 201, "{v}");
        v["id"].as_str().unwrap().to_owned()
    };
    let (ann_s, bob_s) = (new_session(&ann), new_session(&bob));
    let path = format!("/api/v1/sessions/{ann_s}");
    let rename = r#"{"title":"renamed"}"#;

    // Bob: as if it did not exist. The admin: seen, not changed.
    for (token, method, body, want) in [
        (&bob, "PATCH", rename, (404, "unknown_session")),
        (&bob, "DELETE", "", (404, "unknown_session")),
        (&admin, "PATCH", rename, (403, "owner_only")),
        (&admin, "DELETE", "", (403, "owner_only")),
    ] {
        let (st, v) = team.api(token, method, &path, body);
        assert_eq!((st, code(&v)), want, "{method} {v}");
    }
    let (_, v) = team.api(&ann, "GET", &path, "");
    assert_eq!(v["title"], format!("session {}", &ann_s[..8]), "unchanged");

    // Ann: her own.
    let (st, v) = team.api(&ann, "PATCH", &path, rename);
    assert_eq!((st, &v["title"]), (200, &json!("renamed")), "{v}");
    let (st, v) = team.api(&ann, "PATCH", &path, r#"{"archived":true}"#);
    assert_eq!((st, &v["archived"]), (200, &json!(true)), "{v}");
    let (_, listed) = team.api(&ann, "GET", "/api/v1/sessions", "");
    assert_eq!(ids(&listed), Vec::<String>::new());
    let (_, listed) = team.api(&ann, "GET", "/api/v1/sessions?all=true", "");
    assert_eq!(ids(&listed), vec![ann_s.clone()]);
    let (_, listed) = team.api(&bob, "GET", "/api/v1/sessions?all=true", "");
    assert_eq!(ids(&listed), vec![bob_s.clone()]);
    let (_, listed) = team.api(&admin, "GET", "/api/v1/sessions?all=true", "");
    assert_eq!(ids(&listed), [ann_s, bob_s.clone()]);
    let (st, v) = team.api(&ann, "PATCH", &path, r#"{"title":"  "}"#);
    assert_eq!((st, code(&v)), (400, "bad_request"), "{v}");

    // No machine is online, so her message waits: the session is busy.
    let (st, v) = team.api(
        &ann,
        "POST",
        &format!("{path}/messages"),
        r#"{"text":"hi"}"#,
    );
    assert_eq!(st, 202, "{v}");
    let waiting = v["task"]["id"].as_str().unwrap().to_owned();
    let (st, v) = team.api(&ann, "DELETE", &path, "");
    assert_eq!((st, code(&v)), (409, "session_busy"), "{v}");
    assert_eq!(
        v["error"]["hint"],
        format!("cancel it first: berth task cancel {}", &waiting[..8])
    );
    let (st, _) = team.api(
        &ann,
        "POST",
        &format!("/api/v1/tasks/{waiting}/cancel"),
        "{}",
    );
    assert_eq!(st, 200);
    let (st, v) = team.api(&ann, "DELETE", &path, "");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tasks"], json!([waiting]));
    let (st, v) = team.api(&ann, "GET", &path, "");
    assert_eq!((st, code(&v)), (404, "unknown_session"));

    // Agents: an admin's to change.
    let agent_path = "/api/v1/agents/rep";
    for (method, body) in [("PATCH", r#"{"permissions":"read-only"}"#), ("DELETE", "")] {
        for token in [&ann, &bob] {
            let (st, v) = team.api(token, method, agent_path, body);
            assert_eq!((st, code(&v)), (403, "admin_only"), "{method} {v}");
        }
    }
    let (st, v) = team.api(
        &admin,
        "PATCH",
        agent_path,
        r#"{"permissions":"read-only"}"#,
    );
    assert_eq!((st, &v["permissions"]), (200, &json!("read-only")), "{v}");
    let (st, v) = team.api(&admin, "DELETE", agent_path, "");
    assert_eq!(
        (st, code(&v)),
        (409, "agent_in_use"),
        "bob's session uses it: {v}"
    );
    let (st, _) = team.api(&bob, "DELETE", &format!("/api/v1/sessions/{bob_s}"), "");
    assert_eq!(st, 200);
    let (st, v) = team.api(&admin, "DELETE", agent_path, "");
    assert_eq!((st, &v["name"]), (200, &json!("rep")), "{v}");

    let trail = team.admin_json(&["audit"]);
    let steps: Vec<(String, String)> = trail
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            let action = a["action"].as_str().unwrap();
            action.starts_with("session.") && action != "session.create"
                || action.starts_with("agent.") && action != "agent.add"
        })
        .map(|a| {
            (
                a["member"].as_str().unwrap().to_owned(),
                a["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let step = |m: &str, a: &str| (m.to_owned(), a.to_owned());
    assert_eq!(
        steps,
        [
            step("ann", "session.change"),
            step("ann", "session.change"),
            step("ann", "session.delete"),
            step("admin", "agent.edit"),
            step("bob", "session.delete"),
            step("admin", "agent.remove"),
        ],
        "refused requests are no changes"
    );
}
