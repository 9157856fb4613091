//! Review (issue 56): a task's lines wherever the task is seen. Against the real
//! binaries: `GET tasks/{id}/diff` on the control socket (real paths) and the web
//! listener (privacy-stripped, the agent's markup as text), `?format=json` per file,
//! the bounds on a 5 MB change with the command that shows all, `berth chat`'s
//! `/diff`, and a member's daemon task read on the team server by that member and the
//! admin alone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_command_agent, control, error_code, new_session, s, write_script};
use berth_tests::{Berth, eventually};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A project of three files, for an agent that edits, adds, renames and deletes.
fn project(b: &Berth, name: &str) -> PathBuf {
    let dir = b.user_home.join("code").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.md"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(dir.join("keep.txt"), "same\nlines\n").unwrap();
    std::fs::write(dir.join("old.txt"), "bye\n").unwrap();
    dir
}

/// The agent: a message `big` writes 5 MB of lines, any other edits, adds (markup and
/// the home's path inside), renames and deletes.
fn editor(root: &Path, home: &Path) -> PathBuf {
    let script = root.join("editor.sh");
    write_script(
        &script,
        &format!(
            r#"#!/bin/sh
read m
case "$m" in
big*) i=0; while [ $i -lt 50 ]; do awk -v f=$i 'BEGIN {{ for (n = 0; n < 1200; n++) printf "line %d of file %d, padded to a hundred bytes .........................................\n", n, f }}' > big$i.txt; i=$((i+1)); done ;;
*) printf 'one\nTWO\nthree\n' > notes.md
   rm old.txt
   mv keep.txt moved.txt
   printf '<script>alert(1)</script>\n{home}/secret\n' > page.html ;;
esac
echo done
"#,
            home = home.display()
        ),
    );
    script
}

fn last_task(b: &Berth, session: &str) -> Value {
    let tasks = b.json(&["task", "list", "--session", session, "--json"]);
    tasks.as_array().unwrap().last().unwrap().clone()
}

#[test]
fn a_tasks_lines_are_served_per_file_bounded_and_as_text() {
    let mut b = Berth::new("review-lines");
    b.serve();
    let script = editor(b.root.path(), &b.user_home);
    add_command_agent(&b, "editor", s(&script));
    let dir = project(&b, "app");
    let id = new_session(&b, "editor", Some(&dir));
    b.ok(&["send", &id, "edit"]);
    let task = last_task(&b, &id);
    assert_eq!(task["status"], "succeeded", "{task}");
    let tid = task["id"].as_str().unwrap().to_owned();

    // Per file, on the control socket: statuses, paths, the lines as written.
    let (st, doc) = control(
        &b,
        "GET",
        &format!("/api/v1/tasks/{tid}/diff?format=json"),
        b"",
    );
    assert_eq!(st, 200, "{doc}");
    let mut files: Vec<(String, String, Option<String>)> = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["status"].as_str().unwrap().to_owned(),
                f["from"].as_str().map(str::to_owned),
            )
        })
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            (
                "moved.txt".into(),
                "renamed".into(),
                Some("keep.txt".into())
            ),
            ("notes.md".into(), "modified".into(), None),
            ("old.txt".into(), "deleted".into(), None),
            ("page.html".into(), "added".into(), None),
        ],
        "the diff: {doc}\nthe task: {task}"
    );
    let text_of = |p: &str| {
        doc["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p)
            .map(|f| f["text"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert!(text_of("notes.md").contains("\n-two\n+TWO\n"), "{doc}");
    let real_home = format!("+{}/secret\n", b.user_home.display());
    assert!(
        text_of("page.html").contains(&real_home),
        "the control socket keeps the real text: {doc}"
    );
    assert_eq!(doc["whole"], format!("berth task diff {tid}"));
    assert!(doc.get("cut").is_none(), "{doc}");

    // Unified, on the web listener: the markup as text, the home as ~, no user name.
    let (st, text) = b.web_get(&format!("/api/v1/tasks/{tid}/diff"));
    assert_eq!(st, 200, "{text}");
    assert!(text.contains("+<script>alert(1)</script>\n"), "{text}");
    assert!(text.contains("+~/secret\n"), "{text}");
    assert!(
        text.contains("rename from keep.txt\nrename to moved.txt"),
        "{text}"
    );
    assert!(!text.contains(s(&b.user_home)), "{text}");
    assert!(!text.contains(berth_tests::FAKE_USER), "{text}");
    // The same text as the machine's own `berth task diff`, but for the home.
    let local = b.ok(&["task", "diff", &tid]);
    assert_eq!(
        text,
        local.replace(s(&b.user_home), "~"),
        "the served lines are the record's"
    );

    // A format nobody knows is a clear refusal.
    let (st, v) = control(
        &b,
        "GET",
        &format!("/api/v1/tasks/{tid}/diff?format=html"),
        b"",
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(error_code("?format=html", &v), "bad_request");

    // 5 MB of lines: cut to the bound, every file still listed, the command said.
    b.ok(&["send", &id, "big"]);
    let big = last_task(&b, &id);
    assert_eq!(big["status"], "succeeded", "{big}");
    let bid = big["id"].as_str().unwrap().to_owned();
    let (st, doc) = control(
        &b,
        "GET",
        &format!("/api/v1/tasks/{bid}/diff?format=json"),
        b"",
    );
    assert_eq!(st, 200);
    assert_eq!(
        doc["files"].as_array().unwrap().len(),
        50,
        "every file listed"
    );
    let shown: usize = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["text"].as_str().unwrap().len())
        .sum();
    assert!(shown <= berth_core::patch::MAX_BYTES, "{shown} bytes shown");
    assert!(
        doc["cut"]["bytes"].as_u64().unwrap() > 5_000_000,
        "{}",
        doc["cut"]
    );
    let note = doc["note"].as_str().unwrap();
    assert!(
        note.starts_with("this diff is cut: ")
            && note.ends_with(&format!("all of it: berth task diff {bid}")),
        "{note}"
    );
    let (st, text) = b.web_get(&format!("/api/v1/tasks/{bid}/diff"));
    assert_eq!(st, 200);
    assert!(
        text.len() < berth_core::patch::MAX_BYTES + 64 * 1024,
        "{}",
        text.len()
    );
    assert!(
        text.ends_with(&format!("all of it: berth task diff {bid}\n")),
        "{}",
        &text[text.len() - 300..]
    );
    // The machine itself still has every line.
    assert!(b.ok(&["task", "diff", &bid]).len() > 5_000_000);

    // berth chat's /diff: the last task's lines, and task 1's by its number.
    let mut child = b
        .cmd()
        .current_dir(&dir)
        .args(["chat", &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"/diff 1\n/diff 9\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("+<script>alert(1)</script>"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("── renamed keep.txt → moved.txt"),
        "{stdout}"
    );
    assert!(
        format!("{stdout}{stderr}").contains("this session has no task 9 (it has 2)"),
        "{stdout}\n{stderr}"
    );
}

/// A member's laptop daemon runs the task; its lines travel with the task's end and
/// are read on the team server by that member and the admin, never by another member.
#[test]
fn a_daemons_task_lines_are_read_by_its_member_and_the_admin_alone() {
    use berth_tests::team::Team;
    let team = Team::start();
    let alice = team.member("alice");
    let bob = team.member("bob");
    let mut laptop = Berth::new("review-team");
    let script = editor(laptop.root.path(), &laptop.user_home);
    let agent = json!({"name": "editor", "kind": "command", "command": ["sh", s(&script)]});
    let (st, v) = team.api(&team.admin, "POST", "/api/v1/agents", &agent.to_string());
    assert_eq!(st, 201, "{v}");
    let (st, v) = team.api(
        &alice,
        "POST",
        "/api/v1/daemon/tokens",
        r#"{"name":"alice-laptop"}"#,
    );
    assert_eq!(st, 201, "{v}");
    laptop.daemon(&team.url, v["token"].as_str().unwrap(), "laptop-alice");
    let dir = project(&laptop, "app");
    let session = new_session(&laptop, "editor", Some(&dir));
    let (st, v) = team.api(
        &alice,
        "POST",
        &format!("/api/v1/sessions/{session}/messages"),
        &json!({"text": "edit"}).to_string(),
    );
    assert_eq!(st, 202, "{v}");
    let tid = v["task"]["id"].as_str().unwrap().to_owned();
    let t = team.wait_status(&alice, &tid, &["succeeded", "failed"]);
    assert_eq!(t["status"], "succeeded", "{t}");

    let path = format!("/api/v1/tasks/{tid}/diff");
    let (st, text) = team.api(&alice, "GET", &path, "");
    assert_eq!(st, 200, "{text}");
    let text = text.as_str().unwrap_or_default().to_owned();
    assert!(
        text.contains("+TWO\n") && text.contains("+<script>alert(1)</script>"),
        "{text}"
    );
    assert!(
        text.contains("+~/secret"),
        "the laptop's home shows as ~: {text}"
    );
    assert!(!text.contains(s(&laptop.user_home)), "{text}");
    let (st, doc) = team.api(&team.admin, "GET", &format!("{path}?format=json"), "");
    assert_eq!(st, 200, "{doc}");
    assert_eq!(doc["files"].as_array().unwrap().len(), 4, "{doc}");
    let (st, v) = team.api(&bob, "GET", &path, "");
    assert_eq!(st, 404, "bob reads alice's lines: {v}");
    assert_eq!(error_code("bob's read", &v), "unknown_task");
    let (st, v) = team.api(&bob, "GET", &format!("{path}?format=json"), "");
    assert_eq!(st, 404, "{v}");
    // Undo stays on the laptop, where the record is.
    assert!(
        eventually(10, || {
            let out = laptop.run(&["task", "diff", &tid]);
            out.status.success().then_some(())
        })
        .is_some(),
        "the laptop keeps its own record"
    );
}
