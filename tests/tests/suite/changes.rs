//! What the agent changed (issue 18), against the real binary: the exact per-task
//! summary in a git repository and in a plain directory (added, modified, deleted,
//! renamed, binary, a large file skipped, an ignored one left out), `task diff`,
//! `task undo` byte for byte, its refusal after a later edit and `--force`, a crash
//! mid-undo finished at the next start, worktree mode's commit and revert, and the
//! refusals. Nothing appears in the user's directory or its `.git`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::rng::Rng;
use berth_tests::steps::{add_command_agent, git, new_session, s, write_script};
use berth_tests::{Berth, eventually};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `dir` (not `.git`), with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_name() == ".git" {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every entry under `.git` with its size and modification time.
fn git_state(dir: &Path) -> Vec<(String, u64, i128)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join(".git")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            let t = md
                .modified()
                .unwrap()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as i128;
            out.push((e.path().to_string_lossy().into_owned(), md.len(), t));
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// A project: three files and a `.gitignore`, committed when `repo`.
fn project(b: &Berth, name: &str, repo: bool) -> PathBuf {
    let dir = b.user_home.join("code").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("notes.md"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(dir.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(dir.join("keep.txt"), "same\nlines\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "*.log\n").unwrap();
    if repo {
        git(&dir, &["init", "-q"]);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "start"]);
    }
    dir
}

/// An agent that edits, deletes, renames, adds text, binary, large and ignored files.
const EDITOR: &str = r#"printf 'one\nTWO\nthree\nfour\n' > notes.md
rm gone.txt
mv keep.txt moved.txt
printf 'a\nb\n' > new.txt
printf 'bin\000ary' > blob.bin
head -c 2097152 /dev/zero > big.bin
echo noise > debug.log
"#;

fn setup(tag: &str) -> Berth {
    let mut b = Berth::new(tag);
    std::fs::write(
        b.config.join("settings.jsonc"),
        r#"{ "snapshots": { "max_file_mb": 1 } }"#,
    )
    .unwrap();
    b.serve();
    let script = b.root.path().join("editor.sh");
    write_script(&script, &format!("#!/bin/sh\n{EDITOR}"));
    add_command_agent(&b, "editor", s(&script));
    b
}

fn last_task(b: &Berth, session: &str) -> Value {
    let tasks = b.json(&["task", "list", "--session", session, "--json"]);
    tasks.as_array().unwrap().last().unwrap().clone()
}

/// A file change as (path, status, from, added, removed).
type Row = (String, String, Option<String>, Option<u64>, Option<u64>);

fn summary(task: &Value) -> Vec<Row> {
    task["changes"]["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {task}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["status"].as_str().unwrap().to_owned(),
                f["from"].as_str().map(str::to_owned),
                f["added"].as_u64(),
                f["removed"].as_u64(),
            )
        })
        .collect()
}

fn exact(repo: bool) {
    let b = setup(if repo {
        "changes-repo"
    } else {
        "changes-plain"
    });
    let dir = project(&b, "app", repo);
    let before = files(&dir);
    let git_before = repo.then(|| git_state(&dir));
    let id = new_session(&b, "editor", Some(&dir));

    let out = b.run(&["send", &id, "edit"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("5 files changed, +4 \u{2212}2 (1 not tracked: too large)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("renamed   keep.txt \u{2192} moved.txt"),
        "{stderr}"
    );
    let task = last_task(&b, &id);
    // Fenced, the record is all the agent wrote; unfenced, the summary says its limit.
    assert_eq!(
        stderr.contains("only the bound directory is tracked"),
        task["changes"]["fenced"] != true,
        "the limit is said exactly when the run was unfenced: {stderr}\n{task}"
    );
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        summary(&task),
        [
            ("blob.bin".into(), "added".into(), None, None, None),
            ("gone.txt".into(), "deleted".into(), None, Some(0), Some(1)),
            (
                "moved.txt".into(),
                "renamed".into(),
                some("keep.txt"),
                Some(0),
                Some(0)
            ),
            ("new.txt".into(), "added".into(), None, Some(2), Some(0)),
            ("notes.md".into(), "modified".into(), None, Some(2), Some(1)),
        ]
    );
    assert_eq!(task["changes"]["skipped"][0]["path"], "big.bin", "{task}");
    if let Some(g) = &git_before {
        assert_eq!(&git_state(&dir), g, "the user's .git was touched");
    }
    let tid = task["id"].as_str().unwrap().to_owned();

    // The diff, unified and --stat.
    let diff = b.ok(&["task", "diff", &tid]);
    assert!(diff.contains("+TWO") && diff.contains("-two"), "{diff}");
    assert!(diff.contains("rename from keep.txt"), "{diff}");
    assert!(
        !diff.contains("debug.log") && !diff.contains("big.bin"),
        "{diff}"
    );
    let stat = b.ok(&["task", "diff", &tid, "--stat"]);
    assert!(stat.contains("5 files changed"), "{stat}");

    // A later edit: undo refuses, naming the file; --force wins.
    std::fs::write(dir.join("new.txt"), "the user's own edit\n").unwrap();
    let out = b.run(&["task", "undo", &tid, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "changed_since", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("new.txt"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.join("new.txt")).unwrap(),
        b"the user's own edit\n"
    );
    let undid = b.ok(&["task", "undo", &tid, "--force"]);
    // Five changes, the rename one of them.
    assert!(
        undid.starts_with(&format!(
            "undid task {}: 5 files put back as before it\n",
            &tid[..8]
        )),
        "{undid}"
    );
    assert!(
        undid.contains("renamed back  moved.txt \u{2192} keep.txt"),
        "{undid}"
    );
    // The task says it was undone, in the list and in its document.
    let list = b.ok(&["task", "list"]);
    let row = list
        .lines()
        .find(|l| l.starts_with(&tid[..8]))
        .unwrap_or_default();
    assert!(row.ends_with("undone"), "{list}");
    assert!(last_task(&b, &id)["changes"]["undone_at"].is_string());
    // The log (as the chat) shows the undo.
    let log = b.ok(&["session", "log", &id]);
    assert!(
        log.contains(&format!("undone: task {}: 5 files put back", &tid[..8])),
        "{log}"
    );

    // Byte for byte as before; what was never tracked stays, and says so above.
    let mut now = files(&dir);
    assert_eq!(now.remove("big.bin").map(|b| b.len()), Some(2097152));
    assert_eq!(now.remove("debug.log").as_deref(), Some(&b"noise\n"[..]));
    assert_eq!(now, before);
    if let Some(g) = &git_before {
        assert_eq!(&git_state(&dir), g, "the user's .git was touched");
        // Only the file too large to record is left, as the summary said.
        assert_eq!(git(&dir, &["status", "--porcelain"]), "?? big.bin\n");
    }
    // The transcript records the undo; a second undo finds nothing to do.
    let (_, events) = b.web_get(&format!("/api/v1/sessions/{id}/events"));
    assert!(events.contains("event: undo"), "{events}");
    let out = b.run(&["task", "undo", &tid]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already undone"));
}

#[test]
fn the_summary_diff_and_undo_are_exact_in_a_git_repository() {
    exact(true);
}

#[test]
fn the_summary_diff_and_undo_are_exact_in_a_plain_directory() {
    exact(false);
}

#[test]
fn a_crash_mid_undo_is_finished_at_the_next_start() {
    let mut b = setup("changes-crash");
    let dir = project(&b, "app", false);
    let before = files(&dir);
    let id = new_session(&b, "editor", Some(&dir));
    b.ok(&["send", &id, "edit"]);
    let tid = last_task(&b, &id)["id"].as_str().unwrap().to_owned();
    let after = files(&dir);

    // The undo is SIGKILLed after putting back two files.
    let marker = b.root.path().join("undo-paused");
    let mut undo = b
        .cmd()
        .args(["task", "undo", &tid])
        .env(
            "BERTH_TEST_UNDO_PAUSE_AFTER",
            format!("2:{}", marker.display()),
        )
        .spawn()
        .unwrap();
    assert!(
        eventually(30, || marker.exists().then_some(())).is_some(),
        "the undo never reached its second file"
    );
    undo.kill().unwrap();
    let status = undo.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the undo did not die by SIGKILL");
    let halfway = files(&dir);
    assert_ne!(halfway, after, "nothing was undone before the crash");
    assert_ne!(
        halfway.keys().filter(|k| before.contains_key(*k)).count(),
        0
    );
    let journals: Vec<_> = std::fs::read_dir(b.home.join("journal"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "undo"))
        .collect();
    assert_eq!(journals.len(), 1, "the undo's plan is journaled");

    // Berth restarts: the undo is finished, and the journal goes.
    b.stop("-TERM");
    b.serve();
    let mut now = files(&dir);
    now.remove("big.bin");
    now.remove("debug.log");
    assert_eq!(now, before, "the directory is not fully undone");
    let left = eventually(5, || {
        let n = std::fs::read_dir(b.home.join("journal"))
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "undo"))
            .count();
        (n == 0).then_some(())
    });
    assert!(left.is_some(), "the undo journal stayed");
}

#[test]
fn worktree_mode_summarizes_the_commit_and_undoes_with_a_revert() {
    let mut b = Berth::new("changes-worktree");
    b.serve();
    let dir = project(&b, "app", true);
    add_command_agent(&b, "poet", "printf 'one\\nTWO\\n' > notes.md");
    let v = b.json(&[
        "session",
        "new",
        "--agent",
        "poet",
        "--dir",
        s(&dir),
        "--mode",
        "worktree",
        "--json",
    ]);
    let id = v["id"].as_str().unwrap().to_owned();
    b.ok(&["send", &id, "edit"]);
    let task = last_task(&b, &id);
    assert_eq!(
        summary(&task),
        [("notes.md".into(), "modified".into(), None, Some(1), Some(2))]
    );
    let commit = task["changes"]["commit"].as_str().unwrap().to_owned();
    let tid = task["id"].as_str().unwrap().to_owned();
    let diff = b.ok(&["task", "diff", &tid]);
    assert!(diff.contains("+TWO"), "{diff}");
    b.ok(&["task", "undo", &tid]);
    let branch = format!("berth/{}", &id[..8]);
    let log = git(&dir, &["log", "--format=%s", &branch]);
    let subjects: Vec<&str> = log.lines().collect();
    assert!(subjects[0].starts_with("Revert \"berth: task"), "{log}");
    assert_eq!(
        git(&dir, &["rev-parse", &format!("{branch}~1")]).trim(),
        commit
    );
    // The user's checkout is as it was.
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.md")).unwrap(),
        "one\ntwo\nthree\n"
    );
}

#[test]
fn undo_refuses_what_it_cannot_undo() {
    let mut b = Berth::new("changes-refuse");
    b.serve();
    add_command_agent(&b, "idle", "true");
    add_command_agent(&b, "touch", "echo x > made.txt");
    let dir = project(&b, "app", false);
    let fail = |args: &[&str], want: &str| {
        let out = b.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(stderr.contains("hint: "), "{stderr}");
    };

    // A scratch run has no record.
    let scratch = new_session(&b, "touch", None);
    b.ok(&["send", &scratch, "go"]);
    let t = last_task(&b, &scratch)["id"].as_str().unwrap().to_owned();
    fail(&["task", "undo", &t], "scratch directory");

    // A task that changed nothing.
    let idle = new_session(&b, "idle", Some(&dir));
    b.ok(&["send", &idle, "go"]);
    let t = last_task(&b, &idle)["id"].as_str().unwrap().to_owned();
    fail(&["task", "undo", &t], "changed no files");

    // A session bound elsewhere since.
    let s1 = new_session(&b, "touch", Some(&dir));
    b.ok(&["send", &s1, "go"]);
    let t = last_task(&b, &s1)["id"].as_str().unwrap().to_owned();
    let other = b.user_home.join("code/other");
    std::fs::create_dir_all(&other).unwrap();
    b.ok(&["session", "link", &s1, s(&other)]);
    fail(&["task", "undo", &t], "is now bound to ~/code/other");

    // The directory swapped for another at the same path.
    b.ok(&["session", "link", &s1, s(&dir)]);
    std::fs::rename(&dir, b.user_home.join("code/app-old")).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("made.txt"), "x\n").unwrap();
    let out = b.run(&["task", "undo", &t, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["code"], "path_changed", "{err}");
    assert!(
        dir.join("made.txt").exists(),
        "a refused undo wrote into the directory"
    );
}

/// The shadow repositories under Berth's home (issue 37).
fn shadows(b: &Berth) -> Vec<PathBuf> {
    std::fs::read_dir(b.home.join("snapshots"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Issue 37: binding a directory takes its first snapshot in the background, seeded
/// from the repository's own index, before any message; the first run then finds it
/// done, and its summary is exact.
#[test]
fn linking_takes_the_first_snapshot_at_once_in_the_background() {
    let b = setup("changes-warm");
    let dir = project(&b, "warm", true);
    let git_before = git_state(&dir);
    assert!(shadows(&b).is_empty());
    let id = new_session(&b, "editor", Some(&dir));
    // No message sent: the record is there, seeded from the repository's index.
    let shadow = eventually(30, || {
        shadows(&b)
            .into_iter()
            .find(|s| s.join("berth-last").exists())
    })
    .expect("no first snapshot after the link");
    assert!(
        shadow.join("berth-seed").exists(),
        "not seeded from the index"
    );
    assert_eq!(git_state(&dir), git_before, "the user's .git was touched");
    let out = b.run(&["send", &id, "edit"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("5 files changed, +4 \u{2212}2 (1 not tracked: too large)"),
        "{stderr}"
    );
    assert_eq!(git_state(&dir), git_before, "the user's .git was touched");
}

/// Issue 37: a first snapshot that takes a while is said, with how far it is, in
/// `send --json` (a plain directory of 10,000 files: every one is read). The files are
/// 32 KB of noise each: small files of text were recorded before the first progress
/// line (300 ms) once the plain first record became parallel (issue 57).
#[test]
fn a_long_first_snapshot_reports_its_progress() {
    let mut b = Berth::new("changes-progress");
    b.serve();
    let script = b.root.path().join("quick.sh");
    write_script(&script, "#!/bin/sh\necho done\n");
    add_command_agent(&b, "quick", s(&script));
    let dir = b.user_home.join("code").join("big");
    for i in 0..10_000 {
        let sub = dir.join(format!("d{}", i % 50));
        if i < 50 {
            std::fs::create_dir_all(&sub).unwrap();
        }
        std::fs::write(sub.join(format!("f{i}.bin")), Rng::new(i).bytes(32 * 1024)).unwrap();
    }
    let id = new_session(&b, "quick", Some(&dir));
    let out = b.run(&["send", &id, "go", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let progress: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["payload"]["type"] == "progress")
        .map(|e| e["payload"].clone())
        .collect();
    assert!(!progress.is_empty(), "no progress event:\n{stdout}");
    for p in &progress {
        let text = p["text"].as_str().unwrap();
        // Privacy-stripped, as everywhere the directory is shown.
        assert!(text.starts_with("recording ~/code/big: "), "{p}");
        let total = p["total"].as_u64().unwrap();
        assert!(total == 0 || total == 10_000, "{p}");
        assert!(p["done"].as_u64().unwrap() <= total, "{p}");
    }
    // The agent ran after the record was taken, and it was whole.
    let said: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["payload"]["type"] == "text")
        .collect();
    assert_eq!(said.len(), 1, "{stdout}");
    assert_eq!(said[0]["payload"]["text"], "done", "{stdout}");
    let task = last_task(&b, &id);
    assert_eq!(task["status"], "succeeded", "{task}");
}

/// Issue 37: a directory past the watch limit is scanned whole at each run instead,
/// exactly, and the user is told so once (the limit lowered for the test with
/// `BERTH_WATCH_MAX_DIRS`; the kernel's own limit takes the same way).
#[test]
fn past_the_watch_limit_runs_stay_exact_and_it_is_said_once() {
    let mut b = Berth::new("changes-watch-limit");
    std::fs::write(
        b.config.join("settings.jsonc"),
        r#"{ "snapshots": { "max_file_mb": 1 } }"#,
    )
    .unwrap();
    b.env("BERTH_WATCH_MAX_DIRS", "2");
    b.serve();
    let script = b.root.path().join("editor.sh");
    write_script(&script, &format!("#!/bin/sh\n{EDITOR}"));
    add_command_agent(&b, "editor", s(&script));
    let dir = project(&b, "limited", true);
    for d in ["a", "b", "c/d"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        std::fs::write(dir.join(d).join("f.txt"), d).unwrap();
    }
    let id = new_session(&b, "editor", Some(&dir));
    let out = b.run(&["send", &id, "edit"]);
    let first = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{first}");
    assert_eq!(
        first
            .matches("not watching this directory for changes: it has more than 2 directories")
            .count(),
        1,
        "{first}"
    );
    assert!(first.contains("hint: raise the limit"), "{first}");
    assert!(
        first.contains("5 files changed, +4 \u{2212}2 (1 not tracked: too large)"),
        "{first}"
    );
    // A later run: the same full scan, exact, and nothing said again.
    std::fs::write(dir.join("a/f.txt"), "the user's edit").unwrap();
    std::fs::write(dir.join("notes.md"), "reset\n").unwrap();
    let out = b.run(&["send", &id, "again"]);
    let second = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{second}");
    assert!(!second.contains("not watching"), "{second}");
    // notes.md rewritten by the agent; big.bin and blob.bin rewritten as they were.
    assert!(second.contains("1 file changed"), "{second}");
}
