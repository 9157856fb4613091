//! Issue 33, what Berth writes into the user's directory, against the real binary:
//!
//! - a `CLAUDE.md` that is a hard link (to `~/.bashrc`), a symlink out of the
//!   directory or a FIFO never carries the brief: a run whose brief is too long for
//!   the argument is refused with `sidecar_blocked`, a message naming the file and the
//!   rule and a hint, and nothing is written into the directory (break 5);
//! - cleanup removes exactly what Berth wrote: a file the agent wrote inside a skill
//!   folder Berth installed stays, with the folders that hold it, and the run's change
//!   summary lists it; crash recovery at the next start follows the same rule
//!   (break 6).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{alive, new_session, s, send_detached, task, wait_final, write_script};
use berth_tests::{Berth, TempDir, eventually};
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Every entry under `dir`: a file's bytes, a symlink's target, `None` for a
/// directory.
fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, Some(format!("->{}", t.display()).into_bytes()));
            } else if meta.is_dir() {
                out.insert(rel, None);
                walk(root, &p, out);
            } else if meta.file_type().is_file() {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            } else {
                out.insert(rel, Some(b"<special>".to_vec()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A user settings file whose `prompt.append` is longer than the brief's argument
/// limit (96 KiB), so the brief needs the `CLAUDE.md` channel; `plugins` as given.
fn long_brief_settings(b: &Berth, plugins: &str) {
    let long_rules = "Keep every change small and reviewed. ".repeat(3000);
    std::fs::write(
        b.config.join("settings.jsonc"),
        format!("{{ \"plugins\": [{plugins}], \"prompt\": {{ \"append\": \"{long_rules}\" }} }}\n"),
    )
    .unwrap();
}

/// A skill folder in the user's config: `skills/deploy` with `SKILL.md` and
/// `refs/guide.md`.
fn deploy_skill(b: &Berth) {
    std::fs::create_dir_all(b.config.join("skills/deploy/refs")).unwrap();
    std::fs::write(
        b.config.join("skills/deploy/SKILL.md"),
        "---\nname: deploy\n---\nDeploy with care.\n",
    )
    .unwrap();
    std::fs::write(b.config.join("skills/deploy/refs/guide.md"), "the guide\n").unwrap();
}

/// A fake `claude` speaking stream-json that first runs `body` (in the directory).
fn fake_claude(path: &Path, body: &str) {
    write_script(
        path,
        &format!(
            "#!/bin/sh\ncat > /dev/null\n{body}\n\
             echo '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"fake-sess\",\"model\":\"fake\"}}'\n\
             echo '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"done\",\"session_id\":\"fake-sess\",\"num_turns\":1}}'\n"
        ),
    );
}

fn add_claude_agent(b: &Berth, name: &str, program: &Path) {
    b.ok(&[
        "agent",
        "add",
        name,
        "--kind",
        "claude",
        "--command",
        s(program),
    ]);
}

/// Runs one message to its end: the task and what `berth send` printed.
fn send(b: &Berth, session: &str, msg: &str) -> (Value, String) {
    let out = b.run(&["send", session, msg]);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tasks = b.json(&["task", "list", "--session", session, "--json"]);
    let last = tasks.as_array().unwrap().last().unwrap().clone();
    (last, printed)
}

/// Journal files with anything in them: a journal is created at Berth's first write
/// into a directory, so none at all means nothing was written.
fn journals(b: &Berth) -> Vec<String> {
    std::fs::read_dir(b.home.join("journal"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The outcome fields a refusal is judged by.
fn refusal(task: &Value) -> (Option<&str>, Option<&str>) {
    (task["status"].as_str(), task["error_code"].as_str())
}

// ---------------------------------------------------------------------------------
// Break 5.

/// The break as reported: `CLAUDE.md` hard-linked to `~/.bashrc`, a brief over the
/// argument limit. The agent copies `~/.bashrc` while it runs: had the brief gone
/// into `CLAUDE.md`, the copy would hold it. Expected: refused `sidecar_blocked` (the
/// agent never starts), the message naming the file and the rule, a hint; `~/.bashrc`
/// the same bytes and links before, during and after; nothing written into the
/// directory, not even for a moment (no journal was ever needed).
#[test]
fn a_hard_linked_claude_md_never_carries_a_long_brief() {
    let mut b = Berth::new("sidecar-hardlink");
    let outside = TempDir::new("sidecar-hardlink-seen");
    let seen = outside.path().join("bashrc-during-run");
    deploy_skill(&b);
    long_brief_settings(&b, "\"./skills/deploy\"");
    let bashrc = b.user_home.join(".bashrc");
    let original = b"export PATH=$HOME/bin:$PATH\nalias ll='ls -l'\n".to_vec();
    std::fs::write(&bashrc, &original).unwrap();
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::hard_link(&bashrc, dir.join("CLAUDE.md")).unwrap();
    std::fs::write(dir.join("main.rs"), "fn main() {}\n").unwrap();
    let before = snapshot(&dir);

    let fake = outside.path().join("claude");
    fake_claude(&fake, &format!("cp {} {}", s(&bashrc), s(&seen)));
    b.serve();
    add_claude_agent(&b, "fake", &fake);
    let session = new_session(&b, "fake", Some(&dir));
    let (task, printed) = send(&b, &session, "hello");

    if let Ok(during) = std::fs::read(&seen) {
        assert_eq!(
            String::from_utf8_lossy(&during),
            String::from_utf8_lossy(&original),
            "~/.bashrc changed during the run (Berth wrote the brief through the hard link)"
        );
    }
    assert_eq!(
        refusal(&task),
        (Some("refused"), Some("sidecar_blocked")),
        "{task}\n{printed}"
    );
    let error = task["error"].as_str().unwrap_or_default();
    assert_eq!(
        error,
        "CLAUDE.md in ~/code/app is a hard link (2 links): Berth writes the brief only into \
         a regular file with one link, never through a link or into a special file",
        "{task}"
    );
    assert!(
        printed.contains(
            "hint: give CLAUDE.md a copy of its own (cp CLAUDE.md CLAUDE.md.own && mv CLAUDE.md.own CLAUDE.md)"
        ),
        "no hint in what send printed: {printed}"
    );
    assert!(!seen.exists(), "the agent ran: {printed}");
    assert_eq!(std::fs::read(&bashrc).unwrap(), original);
    assert_eq!(std::fs::metadata(&bashrc).unwrap().nlink(), 2);
    assert_eq!(snapshot(&dir), before);
    assert_eq!(
        journals(&b),
        Vec::<String>::new(),
        "Berth wrote into the directory"
    );
}

/// A short brief travels as an argument: a hard-linked `CLAUDE.md` is then no
/// obstacle, and is left alone.
#[test]
fn a_hard_linked_claude_md_with_a_short_brief_runs() {
    let mut b = Berth::new("sidecar-hardlink-short");
    let outside = TempDir::new("sidecar-hardlink-short-seen");
    let bashrc = b.user_home.join(".bashrc");
    std::fs::write(&bashrc, "alias ll='ls -l'\n").unwrap();
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::hard_link(&bashrc, dir.join("CLAUDE.md")).unwrap();
    let before = snapshot(&dir);
    let fake = outside.path().join("claude");
    fake_claude(&fake, "true");
    b.serve();
    add_claude_agent(&b, "fake", &fake);
    let session = new_session(&b, "fake", Some(&dir));
    let (task, printed) = send(&b, &session, "hello");
    assert_eq!(task["status"], "succeeded", "{task}\n{printed}");
    assert_eq!(std::fs::read(&bashrc).unwrap(), b"alias ll='ls -l'\n");
    assert_eq!(snapshot(&dir), before);
}

/// A `CLAUDE.md` that is a symlink out of the directory, or a FIFO (which a write
/// would block on), is refused the same way, naming what it is; the link's target
/// never changes.
#[test]
fn a_claude_md_that_is_a_symlink_or_a_fifo_is_refused() {
    let mut b = Berth::new("sidecar-special");
    let outside = TempDir::new("sidecar-special-out");
    long_brief_settings(&b, "");
    let target = outside.path().join("profile");
    std::fs::write(&target, "outside\n").unwrap();
    let linked = b.user_home.join("code/linked");
    let fifo = b.user_home.join("code/fifo");
    for d in [&linked, &fifo] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(&target, linked.join("CLAUDE.md")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(fifo.join("CLAUDE.md"))
        .status()
        .unwrap();
    assert!(made.success());
    let fake = outside.path().join("claude");
    fake_claude(&fake, "true");
    b.serve();
    add_claude_agent(&b, "fake", &fake);
    for (dir, what) in [
        (&linked, "CLAUDE.md in ~/code/linked is a symbolic link"),
        (&fifo, "CLAUDE.md in ~/code/fifo is a FIFO"),
    ] {
        let before = snapshot(dir);
        let session = new_session(&b, "fake", Some(dir));
        let (task, printed) = send(&b, &session, "hello");
        assert_eq!(
            refusal(&task),
            (Some("refused"), Some("sidecar_blocked")),
            "{task}\n{printed}"
        );
        let error = task["error"].as_str().unwrap_or_default();
        assert!(error.starts_with(&format!("{what}: ")), "{task}");
        assert!(
            printed.contains("hint: replace CLAUDE.md with a regular file"),
            "{printed}"
        );
        assert_eq!(snapshot(dir), before);
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"outside\n");
    assert_eq!(journals(&b), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------
// Break 6.

/// The break as reported: the agent writes `MY_NOTES.md` inside the skill folder
/// Berth installed. After the run the note is there with its bytes, every file Berth
/// copied is gone (and the folders only it needed), and the summary lists the note
/// instead of "no files changed".
#[test]
fn an_agents_file_in_a_skill_folder_survives_cleanup_and_is_listed() {
    let mut b = Berth::new("sidecar-notes");
    let outside = TempDir::new("sidecar-notes-out");
    deploy_skill(&b);
    std::fs::write(
        b.config.join("settings.jsonc"),
        "{ \"plugins\": [\"./skills/deploy\"] }\n",
    )
    .unwrap();
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.rs"), "fn main() {}\n").unwrap();
    let before = snapshot(&dir);
    let fake = outside.path().join("claude");
    fake_claude(
        &fake,
        "test -f .claude/skills/deploy/refs/guide.md || exit 3\n\
         printf 'remember the staging step\\n' > .claude/skills/deploy/MY_NOTES.md",
    );
    b.serve();
    add_claude_agent(&b, "fake", &fake);
    let session = new_session(&b, "fake", Some(&dir));
    let (task, printed) = send(&b, &session, "deploy");
    assert_eq!(task["status"], "succeeded", "{task}\n{printed}");

    let mut expected = before;
    for d in [".claude", ".claude/skills", ".claude/skills/deploy"] {
        expected.insert(d.into(), None);
    }
    expected.insert(
        ".claude/skills/deploy/MY_NOTES.md".into(),
        Some(b"remember the staging step\n".to_vec()),
    );
    assert_eq!(snapshot(&dir), expected, "{printed}");
    let files: Vec<(&str, &str)> = task["changes"]["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes: {task}"))
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        files,
        [(".claude/skills/deploy/MY_NOTES.md", "added")],
        "{task}"
    );
    assert!(
        printed.contains("kept .claude/skills/deploy/MY_NOTES.md: not Berth's"),
        "{printed}"
    );
    assert!(!printed.contains("no files changed"), "{printed}");
}

/// Crash recovery follows the same rule: the server is killed while the agent runs,
/// after it wrote its note into the skill folder; the next start removes Berth's files
/// and keeps the note.
#[test]
fn recovery_after_a_crash_keeps_the_agents_file_in_a_skill_folder() {
    let mut b = Berth::new("sidecar-notes-crash");
    let outside = TempDir::new("sidecar-notes-crash-out");
    let pids = outside.path().join("pids");
    deploy_skill(&b);
    // The fake agent records its pid outside its directory: a side channel the fence
    // must allow (else the check below would see no pid at all).
    std::fs::write(
        b.config.join("settings.jsonc"),
        format!(
            "{{ \"plugins\": [\"./skills/deploy\"], \"fence\": {{ \"write\": [{}] }} }}\n",
            serde_json::to_string(s(outside.path())).unwrap()
        ),
    )
    .unwrap();
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("main.rs"), "fn main() {}\n").unwrap();
    let before = snapshot(&dir);
    let fake = outside.path().join("claude");
    fake_claude(
        &fake,
        &format!(
            "echo $$ >> {}\n\
             printf 'half done\\n' > .claude/skills/deploy/MY_NOTES.md\n\
             printf 'edited' >> .claude/skills/deploy/SKILL.md\n\
             sleep 600",
            s(&pids)
        ),
    );
    b.serve();
    add_claude_agent(&b, "fake", &fake);
    let session = new_session(&b, "fake", Some(&dir));
    let id = send_detached(&b, &session, "deploy");
    let notes = dir.join(".claude/skills/deploy/MY_NOTES.md");
    let skill = dir.join(".claude/skills/deploy/SKILL.md");
    eventually(30, || {
        std::fs::read(&skill)
            .ok()
            .filter(|b| b.ends_with(b"edited"))
            .map(drop)
    })
    .unwrap_or_else(|| panic!("the agent did not write: {:?}", task(&b, &session, &id)));
    b.stop("-KILL");
    let agent_pids: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        eventually(10, || agent_pids.iter().all(|p| !alive(*p)).then_some(())).is_some(),
        "the agent outlived SIGKILL of berth serve: {agent_pids:?}"
    );
    b.serve();
    let t = wait_final(&b, &session, &id);
    assert_eq!(t["status"], "interrupted", "{t}");

    let mut expected = before;
    for d in [".claude", ".claude/skills", ".claude/skills/deploy"] {
        expected.insert(d.into(), None);
    }
    expected.insert(
        ".claude/skills/deploy/MY_NOTES.md".into(),
        Some(b"half done\n".to_vec()),
    );
    // The agent changed Berth's SKILL.md: no longer what Berth wrote, so it stays.
    expected.insert(
        ".claude/skills/deploy/SKILL.md".into(),
        Some(b"---\nname: deploy\n---\nDeploy with care.\nedited".to_vec()),
    );
    assert_eq!(snapshot(&dir), expected, "{}", b.serve_log());
    assert!(notes.exists());
    let log = b.serve_log();
    assert!(
        log.contains(".claude/skills/deploy/MY_NOTES.md: written by an interrupted task's agent"),
        "{log}"
    );
}
