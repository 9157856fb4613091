//! The README's walk-through against the real binary: serve, add an agent, a bound
//! session, send, watch, link elsewhere, unlink, restart — and the scheduling
//! guarantees between sessions.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::{Berth, FAKE_USER, eventually};
use serde_json::Value;
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

/// An agent that reports where it ran and what it was told, then echoes the prompt.
const REPORTER: &str = r#"printf 'cwd=%s\n' "$PWD"; printf 'work_dir=%s\n' "$BERTH_WORK_DIR"; case "$BERTH_BRIEF" in *"$BERTH_SESSION_ID"*) echo brief=has-session ;; *) echo brief=missing ;; esac; echo "prompt=$(cat)""#;

fn texts(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["kind"] == "agent" && e["payload"]["type"] == "text")
        .map(|e| e["payload"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `berth send --json`: every event line, and the final task.
fn send(b: &Berth, session: &str, msg: &str) -> (Vec<Value>, Value) {
    let out = b.run(&["send", session, msg, "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let last = lines.pop().expect("a final line");
    let task = last["task"].clone();
    assert_eq!(
        out.status.success(),
        task["status"] == "succeeded",
        "exit status follows the task: {task}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (lines, task)
}

/// Reads a session's stored transcript over SSE from the web listener, resuming from
/// `last_id` when given: everything the server sends before the stream goes quiet.
fn sse(b: &Berth, session: &str, last_id: Option<u64>) -> Vec<(u64, Value)> {
    use berth_test_support::http::{Events, Request};
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(b.home.join("serve.json")).unwrap()).unwrap();
    let url = info["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .to_owned();
    let token = info["token"].as_str().unwrap();
    let s = TcpStream::connect(&url).unwrap();
    // The backlog arrives at once; a quiet second means it is all here.
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut req = Request::get(&format!("/api/v1/sessions/{session}/events?token={token}"));
    if let Some(n) = last_id {
        req = req.header("Last-Event-ID", &n.to_string());
    }
    let mut events = Events::open(s, &url, req).expect("SSE status 200");
    let all = events.until_quiet().unwrap();
    all.iter()
        .filter_map(|ev| {
            Some((
                ev.seq()?.try_into().ok()?,
                serde_json::from_str(&ev.data).ok()?,
            ))
        })
        .collect()
}

fn write_settings(dir: &Path, text: &str) {
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::write(dir.join(".berth/settings.jsonc"), text).unwrap();
}

#[test]
fn walk_through() {
    let mut b = Berth::new("walk");
    let app = b.user_home.join("code/app");
    let other = b.user_home.join("code/other");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    write_settings(
        &app,
        "// project settings\n{ \"prompt\": { \"append\": \"APP-RULES\" }, }\n",
    );

    // Before the server runs, clients say so with a hint.
    let out = b.run(&["session", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: berth is not running\nhint: "),
        "{err}"
    );
    assert!(err.contains("berth serve"), "{err}");

    b.serve();
    // A second server on the same home refuses, naming the running one.
    let mut second = b
        .cmd()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = eventually(20, || second.try_wait().ok().flatten());
    if status.is_none() {
        let _ = second.kill();
    }
    let mut err = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{err}");
    assert!(
        err.contains("already running") && err.contains("hint: "),
        "{err}"
    );
    b.ok(&[
        "agent",
        "add",
        "reporter",
        "--kind",
        "command",
        "--command",
        "sh",
        "-c",
        REPORTER,
    ]);
    let agents = b.json(&["agent", "list", "--json"]);
    assert_eq!(agents[0]["name"], "reporter");

    let s = b.json(&[
        "session",
        "new",
        "--agent",
        "reporter",
        "--title",
        "walk",
        "--dir",
        app.to_str().unwrap(),
        "--json",
    ]);
    let id = s["id"].as_str().unwrap().to_owned();
    let canonical = std::fs::canonicalize(&app).unwrap();
    assert_eq!(s["binding"]["dir"], canonical.to_str().unwrap());
    assert_eq!(s["binding"]["display"], "~/code/app");
    assert_eq!(s["binding"]["mode"], "in-place");
    assert_eq!(s["binding"]["state"], "ok");

    // The human header leads with the privacy-stripped directory.
    let show = b.ok(&["session", "show", &id[..8]]);
    assert!(show.contains("directory ~/code/app"), "{show}");
    assert!(!show.contains(FAKE_USER), "{show}");

    // Send: the agent ran in the directory, with the brief, and the prompt on stdin.
    let (events, task) = send(&b, &id[..8], "hello there");
    assert_eq!(task["status"], "succeeded", "{task}");
    assert_eq!(task["work_dir"], canonical.to_str().unwrap());
    let t = texts(&events);
    assert!(t.contains(&format!("cwd={}", canonical.display())), "{t:?}");
    assert!(t.contains(&"brief=has-session".to_owned()), "{t:?}");
    assert!(t.contains(&"prompt=hello there".to_owned()), "{t:?}");

    // The transcript over SSE on the web listener: complete and in order, and a
    // reconnect with Last-Event-ID resumes without gaps or duplicates.
    let all = sse(&b, &id, None);
    let seqs: Vec<u64> = all.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "contiguous"
    );
    assert!(
        all.iter().any(|(_, e)| e["kind"] == "task"),
        "final task event present"
    );
    let resumed = sse(&b, &id, Some(2));
    assert_eq!(resumed.first().map(|(i, _)| *i), Some(3));
    assert_eq!(
        resumed.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        seqs[2..].to_vec()
    );

    // Link elsewhere: applies at the next message, which runs there.
    let linked = b.json(&[
        "session",
        "link",
        &id[..8],
        other.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(linked["binding"]["display"], "~/code/other");
    let (events, task) = send(&b, &id[..8], "second");
    let other_canon = std::fs::canonicalize(&other).unwrap();
    assert_eq!(task["work_dir"], other_canon.to_str().unwrap());
    assert!(texts(&events).contains(&format!("cwd={}", other_canon.display())));

    // Unlink: the next message runs in the session's scratch directory.
    let unlinked = b.json(&["session", "unlink", &id[..8], "--json"]);
    assert!(unlinked["binding"].is_null());
    let (_, task) = send(&b, &id[..8], "third");
    let scratch = task["work_dir"].as_str().unwrap().to_owned();
    assert!(
        scratch.starts_with(b.home.to_str().unwrap()) && scratch.contains("scratch"),
        "{scratch}"
    );

    // The transcript records each binding change.
    let all = sse(&b, &id, None);
    let changes = all
        .iter()
        .filter(|(_, e)| e["kind"] == "binding_changed")
        .count();
    assert!(changes >= 2, "binding_changed events: {changes}");

    // Restart: everything is still there.
    let before_sessions = b.json(&["session", "list", "--json"]);
    let before_tasks = b.json(&["task", "list", "--json"]);
    b.stop("-TERM");
    b.serve();
    assert_eq!(b.json(&["session", "list", "--json"]), before_sessions);
    assert_eq!(b.json(&["task", "list", "--json"]), before_tasks);
}

#[test]
fn bad_input_is_refused_with_codes_and_loses_nothing() {
    let mut b = Berth::new("bad");
    b.serve();
    b.ok(&[
        "agent",
        "add",
        "echo",
        "--kind",
        "command",
        "--command",
        "cat",
    ]);
    let refused = |args: &[&str], code: &str| {
        let out = b.run(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert_eq!(
            v["error"]["code"],
            code,
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    };
    let home = b.user_home.to_str().unwrap().to_owned();
    refused(
        &[
            "session", "new", "--agent", "echo", "--dir", &home, "--json",
        ],
        "home_directory",
    );
    refused(
        &[
            "session", "new", "--agent", "echo", "--dir", "/etc", "--json",
        ],
        "system_root",
    );
    refused(
        &[
            "session",
            "new",
            "--agent",
            "echo",
            "--dir",
            &format!("{home}/.ssh"),
            "--json",
        ],
        "credential_directory",
    );
    refused(
        &[
            "session",
            "new",
            "--agent",
            "echo",
            "--dir",
            &format!("{home}/missing"),
            "--json",
        ],
        "not_found",
    );
    refused(&["session", "show", "zzzz", "--json"], "unknown_session");
    refused(
        &["session", "new", "--agent", "nobody", "--json"],
        "unknown_agent",
    );
    assert_eq!(
        b.json(&["session", "list", "--json"]),
        serde_json::json!([]),
        "nothing stored"
    );

    // A session whose agent binary is missing: the task fails naming the binary.
    b.ok(&[
        "agent",
        "add",
        "ghost",
        "--kind",
        "command",
        "--command",
        "/nonexistent/agent-bin",
    ]);
    let s = b.json(&["session", "new", "--agent", "ghost", "--json"]);
    let (_, task) = send(&b, s["id"].as_str().unwrap(), "hi");
    assert_eq!(task["status"], "failed");
    assert!(
        task["error"]
            .as_str()
            .unwrap_or("")
            .contains("/nonexistent/agent-bin"),
        "{task}"
    );
}

/// Start and end timestamps (ns) an agent wrote for each run, from one log file.
fn intervals(log: &Path) -> Vec<(String, u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for l in text.lines() {
        let parts: Vec<&str> = l.split_whitespace().collect();
        if let [what, who, at] = parts[..] {
            let at: u128 = at.parse().unwrap();
            match what {
                "start" => {
                    starts.insert(who.to_owned(), at);
                }
                "end" => out.push((who.to_owned(), starts[who], at)),
                _ => {}
            }
        }
    }
    out
}

#[test]
fn one_directory_serializes_two_directories_run_in_parallel() {
    let mut b = Berth::new("sched");
    // The agents log beside the test: a side channel the fence must allow.
    let log = berth_tests::steps::side_channel(&b).join("runs.log");
    let agent = format!(
        r#"echo "start $BERTH_TASK_ID $(date +%s%N)" >> {log}; sleep 0.6; echo "end $BERTH_TASK_ID $(date +%s%N)" >> {log}"#,
        log = log.display()
    );
    b.serve();
    b.ok(&[
        "agent",
        "add",
        "slow",
        "--kind",
        "command",
        "--command",
        "sh",
        "-c",
        &agent,
    ]);
    let dirs: Vec<_> = ["one", "two"]
        .iter()
        .map(|d| b.user_home.join("code").join(d))
        .collect();
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let new = |dir: &Path| {
        b.json(&[
            "session",
            "new",
            "--agent",
            "slow",
            "--dir",
            dir.to_str().unwrap(),
            "--json",
        ])["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    // Two sessions in one directory: never overlap.
    let (a, c) = (new(&dirs[0]), new(&dirs[0]));
    for s in [&a, &c] {
        b.ok(&["send", s, "go", "--detach"]);
    }
    let runs = eventually(30, || {
        let r = intervals(&log);
        (r.len() == 2).then_some(r)
    })
    .expect("both tasks ran");
    let (first, second) = if runs[0].1 <= runs[1].1 {
        (&runs[0], &runs[1])
    } else {
        (&runs[1], &runs[0])
    };
    assert!(
        first.2 <= second.1,
        "runs in one directory overlapped: {runs:?}"
    );

    // Two sessions in different directories: they run at the same time.
    std::fs::remove_file(&log).unwrap();
    let (x, y) = (new(&dirs[0]), new(&dirs[1]));
    for s in [&x, &y] {
        b.ok(&["send", s, "go", "--detach"]);
    }
    let runs = eventually(30, || {
        let r = intervals(&log);
        (r.len() == 2).then_some(r)
    })
    .expect("both tasks ran");
    let overlap = runs[0].1 < runs[1].2 && runs[1].1 < runs[0].2;
    assert!(
        overlap,
        "runs in different directories did not overlap: {runs:?}"
    );
}

#[test]
fn check_works_without_a_server() {
    let b = Berth::new("check");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    let link = b.user_home.join("code/link");
    std::os::unix::fs::symlink(&app, &link).unwrap();

    let out = b.run(&["check", link.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let canonical = std::fs::canonicalize(&app).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"ok": true, "code": null, "message": "~/code/app can be bound",
                           "canonical": canonical.to_str().unwrap(), "display": "~/code/app"})
    );

    for (path, code) in [
        (b.user_home.to_str().unwrap().to_owned(), "home_directory"),
        ("/etc/ssl".to_owned(), "system_root"),
        (
            format!("{}/.ssh", b.user_home.display()),
            "credential_directory",
        ),
        // Relative to the current directory (~/code/app): the parent of the home.
        ("../../..".to_owned(), "home_directory"),
        (format!("{}/nope", b.user_home.display()), "not_found"),
    ] {
        let out = b
            .cmd()
            .args(["check", &path, "--json"])
            .current_dir(&app)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{path}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["code"], code, "{path}: {v}");
        assert!(!v["message"].as_str().unwrap().contains(FAKE_USER), "{v}");
    }
    // Human output names the verdict and the hint.
    let out = b.run(&["check", b.user_home.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("refused [home_directory]: ~ is your home directory\nhint: "),
        "{text}"
    );
}

#[test]
fn sigterm_stops_agents_restores_and_marks_interrupted() {
    let mut b = Berth::new("term");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    // The agent writes its pid beside the test: a side channel the fence must allow.
    let pidfile = berth_tests::steps::side_channel(&b).join("agent.pid");
    let agent = format!(
        "echo $$ > {}; echo started; exec sleep 60",
        pidfile.display()
    );
    b.serve();
    b.ok(&[
        "agent",
        "add",
        "sleeper",
        "--kind",
        "command",
        "--command",
        "sh",
        "-c",
        &agent,
    ]);
    let s = b.json(&[
        "session",
        "new",
        "--agent",
        "sleeper",
        "--dir",
        app.to_str().unwrap(),
        "--json",
    ]);
    let id = s["id"].as_str().unwrap().to_owned();
    b.ok(&["send", &id, "go", "--detach"]);
    let pid: i32 = eventually(20, || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    })
    .expect("the agent started");
    let before: Vec<_> = std::fs::read_dir(&app)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    let status = b.stop("-TERM").expect("berth serve exited");
    assert!(
        status.success(),
        "clean exit on SIGTERM: {status}\n{}",
        b.serve_log()
    );
    // The agent's process is gone (its group was stopped), not orphaned.
    let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
    assert!(!alive, "agent {pid} outlived berth serve");
    let after: Vec<_> = std::fs::read_dir(&app)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "the directory is as it was");

    b.serve();
    let tasks = b.json(&["task", "list", "--session", &id, "--json"]);
    assert_eq!(tasks[0]["status"], "interrupted", "{tasks}");
}

/// A `~` the shell left alone (quoted, or after `--dir=`) is the home, in every
/// command that takes a directory, as in `berth check`: never `~/~/code/app`.
#[test]
fn a_tilde_the_shell_left_alone_is_the_home_everywhere() {
    let mut b = Berth::new("tilde");
    let app = b.user_home.join("code/app");
    let other = b.user_home.join("code/other");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    b.serve();
    b.ok(&[
        "agent",
        "add",
        "cat",
        "--kind",
        "command",
        "--command",
        "cat",
    ]);
    let real = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();
    for args in [
        &["--dir", "~/code/app"][..],
        &["--dir=~/code/app"][..],
        &["--dir", "~//code/app"][..],
    ] {
        let mut cmd = vec!["session", "new", "--agent", "cat", "--json"];
        cmd.extend_from_slice(args);
        let s = b.json(&cmd);
        assert_eq!(s["binding"]["dir"], real(&app), "{args:?}: {s}");
        // And linking elsewhere the same way.
        let id = s["id"].as_str().unwrap();
        let linked = b.json(&["session", "link", id, "~/code/other", "--json"]);
        assert_eq!(linked["binding"]["dir"], real(&other), "{linked}");
    }
    // Another user's `~name` is refused by name with a hint, not read as a relative
    // directory called `~nobody` here.
    let out = b.run(&["session", "new", "--agent", "cat", "--dir", "~nobody/x"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("~nobody/x") && err.contains("hint: "), "{err}");
}

/// Every failure a newcomer meets has a hint that names the next command: a worktree
/// asked for on a directory in no repository is refused when the session is made
/// (nothing is created), a directory replaced since it was linked says how to link it
/// again, and an agent whose program is missing says how to install or repoint it.
#[test]
fn every_failure_names_the_next_command() {
    let mut b = Berth::new("hints");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    b.serve();
    let added = b.ok(&[
        "agent",
        "add",
        "cat",
        "--kind",
        "command",
        "--command",
        "cat",
    ]);
    assert!(
        added.contains("where the fence is on it edits its directory only"),
        "{added}"
    );
    let list = b.ok(&["agent", "list"]);
    assert!(list.contains("edit (by the fence)"), "{list}");

    let out = b.run(&[
        "session",
        "new",
        "--agent",
        "cat",
        "--dir",
        "~/code/app",
        "--mode",
        "worktree",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is not inside a git repository"), "{err}");
    assert!(
        err.contains("hint: link it in place (--mode in-place)"),
        "{err}"
    );
    let sessions = b.json(&["session", "list", "--json"]);
    assert_eq!(sessions, serde_json::json!([]), "nothing was created");

    // A directory that is gone is flagged in the session list.
    let gone_dir = b.user_home.join("code/gone");
    std::fs::create_dir_all(&gone_dir).unwrap();
    let gone = b.json(&[
        "session",
        "new",
        "--agent",
        "cat",
        "--dir",
        "~/code/gone",
        "--json",
    ]);
    std::fs::remove_dir(&gone_dir).unwrap();
    let list = b.ok(&["session", "list"]);
    let row = list
        .lines()
        .find(|l| l.starts_with(&gone["id"].as_str().unwrap()[..8]))
        .unwrap_or_default()
        .to_owned();
    assert!(
        row.contains("~/code/gone (missing: link it again)"),
        "{list}"
    );

    // A directory replaced after it was linked.
    let id = b.json(&[
        "session",
        "new",
        "--agent",
        "cat",
        "--dir",
        "~/code/app",
        "--json",
    ]);
    let id = id["id"].as_str().unwrap().to_owned();
    std::fs::rename(&app, b.user_home.join("code/app-old")).unwrap();
    std::fs::create_dir_all(&app).unwrap();
    let out = b.run(&["send", &id, "hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "then link it again: berth session link {} DIR",
            &id[..8]
        )),
        "{err}"
    );

    // An agent whose program is not there: said at once, then at the first message.
    let out = b.run(&[
        "agent",
        "add",
        "gone",
        "--kind",
        "command",
        "--command",
        "/nonexistent/agent",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning: /nonexistent/agent is not installed here")
            && err.contains(
                "hint: install it, or point the agent at it: berth agent edit gone --command PATH"
            ),
        "{err}"
    );
    let s = b.json(&["session", "new", "--agent", "gone", "--json"]);
    let out = b.run(&["send", s["id"].as_str().unwrap(), "hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("[agent_not_found]"), "{err}");
    assert!(
        err.contains("berth agent edit NAME --command PATH"),
        "{err}"
    );
}

/// `berth ARGS` that must fail with `exit`: its `--json` error document's code, and
/// its stderr.
fn refused(b: &Berth, args: &[&str], exit: i32) -> (String, String) {
    let out = b.run(args);
    assert_eq!(
        out.status.code(),
        Some(exit),
        "berth {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let code = serde_json::from_str::<Value>(&stdout)
        .map(|v| v["error"]["code"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Issue 52, "mistakes can be mended": an option `--command` swallowed is refused with
/// the hint; `agent edit` applies at the next message; `agent remove` waits until no
/// session uses the agent; `session rename`, `archive` (left out of the list, `--all`
/// shows it, `unarchive` brings it back) and `delete`: refused without a terminal or
/// `--yes`, refused while a task runs, then gone with its tasks, transcript, change
/// records and scratch directory.
#[test]
fn mistakes_can_be_mended() {
    let mut b = Berth::new("mend");
    b.serve();

    // `--kind` after `--command` would be the agent's own argument: refused, nothing
    // registered; after `--` it is the agent's, as asked.
    let out = b.run(&["agent", "add", "x", "--command", "cat", "--kind", "command"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: --kind came after --command"), "{err}");
    assert!(err.contains("hint: put --command last"), "{err}");
    let swallowed = |args: &str| refused(&b, &args.split(' ').collect::<Vec<_>>(), 2);
    let (_, err) = swallowed("agent add x --kind command --command cat --json");
    assert!(err.contains("error: --json came after --command"), "{err}");
    let (code, _) = swallowed("agent add x --json --kind command --command cat --permissions=full");
    assert_eq!(code, "option_in_command");
    assert_eq!(b.json(&["agent", "list", "--json"]), serde_json::json!([]));
    let kept = b.json(&[
        "agent",
        "add",
        "literal",
        "--kind",
        "command",
        "--json",
        "--command",
        "--",
        "cat",
        "--json",
    ]);
    assert_eq!(kept["command"], serde_json::json!(["cat", "--json"]));
    b.ok(&["agent", "remove", "literal"]);

    // An agent that leaves a mark in its directory, then edited: the next message runs
    // the new command.
    let dir = b.user_home.join("code").join("mend");
    std::fs::create_dir_all(&dir).unwrap();
    b.ok(&[
        "agent",
        "add",
        "marker",
        "--kind",
        "command",
        "--command",
        "sh",
        "-c",
        "echo v1 > mark.txt; echo v1",
    ]);
    let bound = b.json(&[
        "session",
        "new",
        "--agent",
        "marker",
        "--title",
        "typo",
        "--dir",
        dir.to_str().unwrap(),
        "--json",
    ]);
    let bound = bound["id"].as_str().unwrap().to_owned();
    let (events, task) = send(&b, &bound, "go");
    assert_eq!(task["status"], "succeeded");
    assert_eq!(texts(&events), ["v1"]);
    let edited = b.json(&[
        "agent",
        "edit",
        "marker",
        "--permissions",
        "full",
        "--json",
        "--command",
        "sh",
        "-c",
        "echo v2 > mark.txt; echo v2",
    ]);
    assert_eq!(
        (&edited["command"][2], &edited["permissions"]),
        (
            &serde_json::json!("echo v2 > mark.txt; echo v2"),
            &serde_json::json!("full")
        )
    );
    let (events, _) = send(&b, &bound, "again");
    assert_eq!(texts(&events), ["v2"]);
    assert_eq!(
        std::fs::read_to_string(dir.join("mark.txt")).unwrap(),
        "v2\n"
    );
    let (code, _) = refused(&b, &["agent", "edit", "marker", "--json"], 2);
    assert_eq!(code, "");
    let (code, err) = refused(&b, &["agent", "remove", "marker", "--json"], 1);
    assert_eq!(code, "agent_in_use");
    assert!(err.contains(&bound), "names the session: {err}");
    assert!(err.contains("hint: delete those sessions first"), "{err}");

    // Rename and archive.
    let renamed = b.json(&["session", "rename", &bound[..8], "the real title", "--json"]);
    assert_eq!(renamed["title"], "the real title");
    assert_eq!(renamed["archived"], false);
    let archived = b.json(&["session", "archive", &bound[..8], "--json"]);
    assert_eq!(archived["archived"], true);
    let listed = |all: bool| -> Vec<(String, bool)> {
        let mut args = vec!["session", "list", "--json"];
        if all {
            args.push("--all");
        }
        b.json(&args)
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["title"].as_str().unwrap().to_owned(),
                    s["archived"] == true,
                )
            })
            .collect()
    };
    assert_eq!(listed(false), []);
    assert_eq!(listed(true), [("the real title".to_owned(), true)]);
    assert!(
        b.ok(&["session", "list", "--all"])
            .contains("the real title (archived)"),
        "the human list marks it"
    );
    let (status, body) = b.web_get("/api/v1/sessions");
    assert_eq!(
        (status, body.as_str()),
        (200, "[]"),
        "the web list leaves it out"
    );
    b.ok(&["session", "unarchive", &bound[..8]]);
    assert_eq!(listed(false), [("the real title".to_owned(), false)]);

    // Delete: never without asking, never under a running task.
    assert_eq!(
        berth_tests::steps::shadow_refs(&b).len(),
        4,
        "two tasks' before and after"
    );
    let (code, err) = refused(&b, &["session", "delete", &bound[..8], "--json"], 2);
    assert_eq!(code, "confirmation_needed");
    assert!(err.contains("hint: pass --yes"), "{err}");
    b.ok(&[
        "agent",
        "add",
        "slow",
        "--kind",
        "command",
        "--command",
        "sleep",
        "30",
    ]);
    let busy = berth_tests::steps::new_session(&b, "slow", None);
    let running = berth_tests::steps::send_detached(&b, &busy, "wait");
    eventually(10, || {
        (berth_tests::steps::task(&b, &busy, &running)?["status"] == "running").then_some(())
    })
    .expect("the slow task runs");
    assert!(b.home.join("scratch").join(&busy).is_dir());
    let (code, err) = refused(&b, &["session", "delete", &busy, "--yes", "--json"], 1);
    assert_eq!(code, "session_busy");
    assert!(
        err.contains(&format!(
            "hint: cancel it first: berth task cancel {}",
            &running[..8]
        )),
        "{err}"
    );
    b.ok(&["task", "cancel", &running]);
    let gone = b.json(&["session", "delete", &busy, "--yes", "--json"]);
    assert_eq!(gone["tasks"], serde_json::json!([running]));
    assert_eq!(gone["scratch_removed"], true);
    assert!(!b.home.join("scratch").join(&busy).exists());

    let gone = b.json(&["session", "delete", &bound, "--yes", "--json"]);
    assert_eq!(gone["session"]["title"], "the real title");
    assert_eq!(gone["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(
        (&gone["records_removed"], &gone["records_elsewhere"]),
        (&serde_json::json!(2), &serde_json::json!(0))
    );
    assert_eq!(berth_tests::steps::shadow_refs(&b), Vec::<String>::new());
    let (code, _) = refused(&b, &["session", "show", &bound, "--json"], 1);
    assert_eq!(code, "unknown_session");
    let (code, _) = refused(&b, &["task", "list", "--session", &bound, "--json"], 1);
    assert_eq!(code, "unknown_session");
    assert_eq!(listed(true), []);
    assert_eq!(
        std::fs::read_to_string(dir.join("mark.txt")).unwrap(),
        "v2\n"
    );

    // No session uses it now.
    b.ok(&["agent", "remove", "marker"]);
    let names: Vec<Value> = b
        .json(&["agent", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].clone())
        .collect();
    assert_eq!(names, [serde_json::json!("slow")]);
}

/// `berth session delete` on a terminal asks first: "n" keeps the session, "y"
/// deletes it.
#[test]
fn session_delete_asks_on_a_terminal() {
    use berth_tests::tmux::Tmux;
    let mut b = Berth::new("mend-tty");
    b.serve();
    b.ok(&["agent", "add", "a", "--kind", "command", "--command", "cat"]);
    let id = berth_tests::steps::new_session(&b, "a", None);
    let ask = |answer: &str| {
        // A directory per terminal: it names the terminal's tmux server.
        let dir = b.root.path().join(format!("tty-{answer}"));
        std::fs::create_dir_all(&dir).unwrap();
        let t = Tmux::berth(&b, &dir, &["session", "delete", &id[..8]], 120, 10);
        let screen = t.wait(20, "the question", |s| s.contains("[y/N]"));
        assert!(
            screen.contains(&format!(
                "delete session {} (session {}) with its 0 tasks",
                &id[..8],
                &id[..8]
            )),
            "{screen}"
        );
        t.type_text(answer);
        t.keys(&["Enter"]);
        t.wait(20, "the end", |s| s.contains("EXIT="))
    };
    let screen = ask("n");
    assert!(
        screen.contains("was not deleted") && screen.contains("EXIT=1"),
        "{screen}"
    );
    b.ok(&["session", "show", &id]);
    let screen = ask("y");
    assert!(
        screen.contains("deleted session") && screen.contains("EXIT=0"),
        "{screen}"
    );
    let out = b.run(&["session", "show", &id]);
    assert_eq!(out.status.code(), Some(1));
}
