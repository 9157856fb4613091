//! Fault injection against the real binary (issue 7, part 2): `berth serve` killed
//! mid-run and restarted, the bound directory swapped under a run, two Berth
//! processes sharing a directory, and a battery of bad inputs.
//!
//! Counts are bounded so the file runs in about a minute and a half on two cores;
//! `BERTH_FAULT_ROUNDS=N` raises the rounds of the randomized tests (never lowers
//! them). Randomness comes from a xorshift generator seeded by the round number, so a
//! failing round can be replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::rng::Rng;
use berth_tests::steps::{
    add_command_agent, alive, control, error_code, new_session, raw_http, s, send_detached,
    wait_final, write_script,
};
use berth_tests::{Berth, TempDir, eventually};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `default`, or `BERTH_FAULT_ROUNDS` when that is larger.
fn rounds(default: u64) -> u64 {
    std::env::var("BERTH_FAULT_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(default, |n: u64| n.max(default))
}

/// Every entry under `dir`: relative path → file bytes, `None` for a directory,
/// `Some(target)` prefixed with `->` for a symlink.
fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
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
            } else {
                out.insert(rel, Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The names directly in `dir`.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Every regular file under `dir` (recursively), for "nothing left behind".
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn session_ids(b: &Berth) -> Vec<String> {
    let mut ids: Vec<String> = b
        .json(&["session", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

// ---------------------------------------------------------------------------------
// 1. SIGKILL during a run, then restart.

/// A fake `claude` speaking stream-json: writes its pid outside the directory and a
/// marker inside it, checks that Berth's sidecars are in place (the skill folder and
/// the brief's block in CLAUDE.md; it fails otherwise), then sleeps the number of
/// milliseconds the prompt names.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
prompt=$(cat)
echo $$ >> "$PIDS"
echo "ran $BERTH_TASK_ID" > agent-marker.txt
test -f .claude/skills/demo/SKILL.md || { echo "no skill" >&2; exit 3; }
grep -q "berth:begin $BERTH_TASK_ID" CLAUDE.md || { echo "no brief block" >&2; exit 4; }
echo '{"type":"system","subtype":"init","session_id":"fake-sess","model":"fake"}'
ms=${prompt#sleep }
sleep "$(printf '0.%03d' "$ms")"
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"fake-sess","num_turns":1}'
"#;

#[test]
fn sigkill_mid_run_then_restart_restores_the_directory() {
    let mut b = Berth::new("kill");
    let outside = TempDir::new("kill-outside");
    let pids = outside.path().join("pids");
    let fake = outside.path().join("claude");
    write_script(&fake, &FAKE_CLAUDE.replace("$PIDS", s(&pids)));
    // A skill in the user settings: the claude adapter copies it into
    // `.claude/skills/demo` (journaled) for every run, so there is something to undo.
    std::fs::create_dir_all(b.config.join("skills/demo")).unwrap();
    std::fs::write(
        b.config.join("skills/demo/SKILL.md"),
        "---\nname: demo\n---\nA demo skill.\n",
    )
    .unwrap();
    // And a `prompt.append` long enough (past config.rs's 96 KiB `brief_arg_limit`)
    // that the brief cannot travel as an argument and goes into a block appended to
    // the user's own CLAUDE.md, which must come back byte for byte.
    let long_rules = "Keep every change small and reviewed. ".repeat(3000);
    std::fs::write(
        b.config.join("settings.jsonc"),
        // The fake agent records its pids outside its directory: a side channel the
        // fence must allow (else the check below would see no pid at all).
        format!(
            "{{ \"plugins\": [\"./skills/demo\"], \"prompt\": {{ \"append\": \"{long_rules}\" }}, \"fence\": {{ \"write\": [{}] }} }}\n",
            serde_json::to_string(s(outside.path())).unwrap()
        ),
    )
    .unwrap();

    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    std::fs::write(dir.join("CLAUDE.md"), "# House rules\nno trailing newline").unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(dir.join(".claude/settings.json"), "{}\n").unwrap();
    std::fs::write(dir.join("data.bin"), [0u8, 255, 10, 13, 0]).unwrap();
    let before = snapshot(&dir);

    b.serve();
    b.ok(&[
        "agent",
        "add",
        "fake",
        "--kind",
        "claude",
        "--command",
        s(&fake),
    ]);
    let session = new_session(&b, "fake", Some(&dir));

    let n = rounds(8);
    let (mut interrupted, mut succeeded, mut dirty) = (0, 0, 0);
    for round in 0..n {
        let mut rng = Rng::new(round + 1);
        let sleep_ms = 100 + rng.below(400);
        let kill_after = rng.below(sleep_ms + 150);
        let id = send_detached(&b, &session, &format!("sleep {sleep_ms}"));
        std::thread::sleep(Duration::from_millis(kill_after));
        b.stop("-KILL");
        // The agent dies with the server (parent-death signal); wait until it has,
        // so nothing writes into the directory after this point.
        let agent_pids: Vec<u32> = std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        assert!(
            eventually(10, || agent_pids.iter().all(|p| !alive(*p)).then_some(())).is_some(),
            "round {round}: an agent outlived SIGKILL of berth serve: {agent_pids:?}"
        );
        // What the kill left behind, before the restart replays the journal.
        let mut left = snapshot(&dir);
        left.remove("agent-marker.txt");
        if left != before {
            dirty += 1;
        }
        b.serve();
        let t = wait_final(&b, &session, &id);
        match t["status"].as_str() {
            Some("interrupted") => interrupted += 1,
            Some("succeeded") => succeeded += 1,
            other => {
                panic!("round {round} (kill after {kill_after} ms): task ended {other:?}: {t}")
            }
        }
        let mut after = snapshot(&dir);
        after.remove("agent-marker.txt");
        assert_eq!(
            after,
            before,
            "round {round} (sleep {sleep_ms} ms, kill after {kill_after} ms): the directory was not restored\n{}",
            b.serve_log()
        );
        let left = files_under(&b.home.join("journal"));
        assert!(left.is_empty(), "round {round}: journals left: {left:?}");
    }
    eprintln!(
        "kill/restart: {n} rounds, {interrupted} interrupted, {succeeded} succeeded, \
         {dirty} left Berth's files behind that the restart restored"
    );
    assert_eq!(interrupted + succeeded, n);
}

// ---------------------------------------------------------------------------------
// 2. The bound directory swapped between link and run.

const SWAP_BUG: &str = "the agent ran somewhere other than the linked directory: a bound \
    path replaced by a symlink or by another directory must be refused with path_changed";

/// The whole guarantee as issue 7 states it: the agent runs only in the directory
/// that was linked (its original inode), whatever the swap's timing.
#[test]
fn swapped_directory_never_hosts_the_agent() {
    let report = swap_rounds(rounds(20));
    assert_eq!(report.wrong, Vec::<String>::new(), "{SWAP_BUG}");
}

/// The deterministic reproduction: link `code/app`, move it away, put a symlink to
/// another directory of the user's at its path, send. Expected `refused` with
/// `path_changed` (the binding's canonical path no longer is canonical). Before the
/// executor compared canonical paths, the agent ran in the symlink's target.
#[test]
fn a_bound_dir_replaced_by_a_symlink_is_refused() {
    let mut b = Berth::new("swap-repro");
    b.serve();
    add_command_agent(&b, "pwd", "pwd");
    let app = b.user_home.join("code/app");
    let other = b.user_home.join("code/other");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let session = new_session(&b, "pwd", Some(&app));
    std::fs::rename(&app, b.user_home.join("code/app.away")).unwrap();
    std::os::unix::fs::symlink(&other, &app).unwrap();
    let id = send_detached(&b, &session, "where are you");
    let t = wait_final(&b, &session, &id);
    assert_eq!(
        (t["status"].as_str(), t["work_dir"].as_str()),
        (Some("refused"), None),
        "{SWAP_BUG}: {t}"
    );
    assert!(
        t["error"]
            .as_str()
            .is_some_and(|e| e.contains("changed since it was checked")),
        "{t}"
    );
}

/// The part of the swap guarantee that holds today: once a run has been validated,
/// a swap ends it `refused` with `path_changed` rather than running elsewhere, and
/// every run that did start ran in one directory that existed at the bound path.
#[test]
fn swapped_directory_runs_only_where_validated() {
    let report = swap_rounds(rounds(20));
    eprintln!(
        "swap: {} rounds, {} ran in the original, {} refused path_changed, {} ran in the replacement",
        report.rounds,
        report.in_original,
        report.refused,
        report.wrong.len()
    );
}

#[derive(Debug, Default)]
struct SwapReport {
    rounds: u64,
    in_original: u64,
    refused: u64,
    /// Rounds whose agent ran in the replacement, described.
    wrong: Vec<String>,
}

/// Runs `n` rounds: link, send, swap at a seeded delay of 0–50 ms. Asserts what holds
/// today: every run was in the original directory or in the replacement (never a
/// third place, never both), a run that did not start was refused with
/// `path_changed`, and the original got nothing but the agent's marker. Returns the
/// runs in the replacement in `wrong`.
fn swap_rounds(n: u64) -> SwapReport {
    let mut b = Berth::new("swap");
    let outside = TempDir::new("swap-outside");
    let log = outside.path().join("cwd.log");
    // The agent logs outside its directory: a side channel the fence must allow.
    berth_tests::steps::fence_write(&b, &[outside.path()]);
    b.serve();
    add_command_agent(
        &b,
        "where",
        &format!(
            "echo \"$BERTH_TASK_ID $(stat -c %d:%i .) $PWD\" >> {}; echo marker > agent-marker.txt; cat >/dev/null",
            s(&log)
        ),
    );
    let mut report = SwapReport {
        rounds: n,
        ..SwapReport::default()
    };
    let other = b.user_home.join("code/elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    for round in 0..n {
        let mut rng = Rng::new(1000 + round);
        let dir = b.user_home.join(format!("code/swap-{round}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine\n").unwrap();
        let meta = std::fs::metadata(&dir).unwrap();
        let original = format!("{}:{}", meta.dev(), meta.ino());
        let session = new_session(&b, "where", Some(&dir));
        let delay = rng.below(51);
        let by_symlink = rng.below(2) == 0;
        let child = b
            .cmd()
            .args(["send", &session, "go", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let away = b.user_home.join(format!("code/swap-{round}.away"));
        std::fs::rename(&dir, &away).unwrap();
        let replacement = if by_symlink {
            std::os::unix::fs::symlink(&other, &dir).unwrap();
            other.clone()
        } else {
            std::fs::create_dir(&dir).unwrap();
            dir.clone()
        };
        let rmeta = std::fs::metadata(&replacement).unwrap();
        let replaced = format!("{}:{}", rmeta.dev(), rmeta.ino());
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last: Value = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| {
                panic!(
                    "round {round}: no final line: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let t = &last["task"];
        let id = t["id"].as_str().unwrap();
        let ran: Vec<String> = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(id))
            .map(str::to_owned)
            .collect();
        let what = format!(
            "round {round} (delay {delay} ms, {}): task {t}, ran {ran:?}",
            if by_symlink { "symlink" } else { "new dir" }
        );
        assert!(ran.len() <= 1, "{what}");
        match ran.first() {
            Some(line) => {
                let ino = line.split(' ').nth(1).unwrap_or_default();
                if ino == original {
                    report.in_original += 1;
                    assert!(!replacement.join("agent-marker.txt").exists(), "{what}");
                } else {
                    assert_eq!(ino, replaced, "ran in neither directory: {what}");
                    report.wrong.push(what.clone());
                    // Clean the replacement for the next round using `other`.
                    let _ = std::fs::remove_file(replacement.join("agent-marker.txt"));
                }
            }
            None => {
                assert!(
                    matches!(t["status"].as_str(), Some("refused" | "failed")),
                    "{what}"
                );
                let err = t["error"].as_str().unwrap_or_default();
                assert!(
                    err.contains("changed since it was checked"),
                    "not path_changed: {what}"
                );
                let shown = b.json(&["session", "show", &session, "--json"]);
                assert_eq!(shown["binding"]["state"], "changed", "{what}: {shown}");
                report.refused += 1;
            }
        }
        // The original directory got nothing but the agent's marker.
        let mut names = listing(&away);
        names.retain(|n| n != "agent-marker.txt");
        assert_eq!(names, vec!["keep.txt".to_owned()], "{what}");
        if by_symlink {
            std::fs::remove_file(&dir).unwrap();
        } else {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    report
}

// ---------------------------------------------------------------------------------
// 3. Two Berth processes sharing one directory.

#[test]
fn two_berth_processes_never_overlap_in_one_directory() {
    const N: usize = 10;
    let locks = TempDir::new("shared-locks");
    let shared = TempDir::new("shared-dir");
    let outside = TempDir::new("shared-outside");
    let log = outside.path().join("intervals.log");
    let agent = format!(
        "a=$(date +%s%N); sleep 0.0$(( $$ % 5 )); z=$(date +%s%N); echo \"$a $z $BERTH_TASK_ID\" >> {}",
        s(&log)
    );
    let mut one = Berth::with_locks("share1", Some(locks.path()));
    let mut two = Berth::with_locks("share2", Some(locks.path()));
    let mut sent = Vec::new();
    for b in [&mut one, &mut two] {
        // The agents log outside their directory: a side channel the fence must allow.
        berth_tests::steps::fence_write(b, &[outside.path()]);
        b.serve();
        add_command_agent(b, "span", &agent);
    }
    let s1 = new_session(&one, "span", Some(shared.path()));
    let s2 = new_session(&two, "span", Some(shared.path()));
    for i in 0..N {
        sent.push((0, send_detached(&one, &s1, &format!("one {i}"))));
        sent.push((1, send_detached(&two, &s2, &format!("two {i}"))));
    }
    for (which, id) in &sent {
        let (b, sess) = if *which == 0 {
            (&one, &s1)
        } else {
            (&two, &s2)
        };
        let t = wait_final(b, sess, id);
        assert_eq!(t["status"], "succeeded", "{t}");
    }
    let mut spans: Vec<(u128, u128, String)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            let a = f.next().unwrap().parse().unwrap();
            let z = f.next().unwrap().parse().unwrap();
            (a, z, f.next().unwrap_or_default().to_owned())
        })
        .collect();
    assert_eq!(spans.len(), 2 * N);
    spans.sort();
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "overlapping runs: {:?} and {:?}",
            w[0],
            w[1]
        );
    }
}

// ---------------------------------------------------------------------------------
// 4. The bad-input battery.

use berth_tests::steps::slack_sign;

/// One webhook request: the timestamp and signature headers (absent when `None`),
/// the body, and the status it must get.
type HookCase = (Option<String>, Option<String>, Vec<u8>, u16);

/// Undoes `chattr +i` even when the test panics.
#[derive(Debug)]
struct Immutable(PathBuf);

impl Drop for Immutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn bad_input_battery() {
    const SECRET: &str = "battery-signing-secret";
    let mut b = Berth::new("battery");
    b.env("BERTH_SLACK_SIGNING_SECRET", SECRET);
    let home = b.user_home.clone();
    let code = home.join("code");
    std::fs::create_dir_all(code.join("app")).unwrap();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(code.join("file.txt"), "a file\n").unwrap();
    std::os::unix::fs::symlink("/etc", code.join("to-etc")).unwrap();
    std::os::unix::fs::symlink(&home, code.join("to-home")).unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::os::unix::fs::symlink(home.join(".ssh"), code.join("to-ssh")).unwrap();
    std::os::unix::fs::symlink(code.join("gone"), code.join("dangling")).unwrap();
    std::os::unix::fs::symlink(code.join("file.txt"), code.join("to-file")).unwrap();
    std::os::unix::fs::symlink(&b.home, code.join("to-state")).unwrap();
    let foreign = code.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("theirs.txt"), "x").unwrap();
    // Giving a directory away needs root; without it, not_owner is not exercised.
    let chowned = std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).is_ok();
    let frozen = code.join("frozen");
    std::fs::create_dir_all(&frozen).unwrap();
    std::fs::write(frozen.join("a.txt"), "x").unwrap();
    let chattr = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&frozen)
        .status()
        .is_ok_and(|s| s.success());
    let _undo = Immutable(frozen.clone());

    let p = |rel: &str| s(&home.join(rel)).to_owned();
    let mut table: Vec<(String, &str)> = vec![
        ("/".into(), "system_root"),
        ("/etc".into(), "system_root"),
        ("/etc/ssh".into(), "system_root"),
        ("/usr".into(), "system_root"),
        ("/usr/bin".into(), "system_root"),
        ("/bin".into(), "system_root"),
        ("/var".into(), "system_root"),
        ("/proc".into(), "system_root"),
        ("/sys".into(), "system_root"),
        ("/dev".into(), "system_root"),
        ("/boot".into(), "system_root"),
        ("/tmp".into(), "system_root"),
        (s(&home).into(), "home_directory"),
        (s(home.parent().unwrap()).into(), "home_directory"),
        (format!("{}/.", s(&home)), "home_directory"),
        (p(".ssh"), "credential_directory"),
        (p(".ssh/keys"), "credential_directory"),
        (p(".gnupg"), "credential_directory"),
        (p(".aws"), "credential_directory"),
        (p(".kube"), "credential_directory"),
        (p(".docker"), "credential_directory"),
        (s(&b.home).into(), "berth_state"),
        (s(&b.home.join("journal")).into(), "berth_state"),
        (s(&b.config).into(), "berth_state"),
        (s(&b.config.join("skills")).into(), "berth_state"),
        (s(&b.locks).into(), "berth_state"),
        (p("code/nope"), "not_found"),
        (p("code/nope/deeper"), "not_found"),
        (p("code/dangling"), "not_found"),
        (p("code/file.txt"), "not_a_directory"),
        (p("code/to-file"), "not_a_directory"),
        (p("code/to-etc"), "system_root"),
        (p("code/to-home"), "home_directory"),
        (p("code/to-ssh"), "credential_directory"),
        (p("code/to-state"), "berth_state"),
        (p("code/app/../to-etc"), "system_root"),
        (p("code/file.txt/sub"), "not_found"),
    ];
    if chowned {
        table.push((s(&foreign).into(), "not_owner"));
    } else {
        eprintln!("cannot chown to 65534 here: not_owner is not exercised");
    }
    if chattr {
        table.push((s(&frozen).into(), "not_writable"));
    } else {
        eprintln!("chattr +i is not available here: not_writable is not exercised");
    }
    // Codes the CLI cannot produce (it makes paths absolute, and clap refuses an
    // empty argument): through the API's `check` and `sessions`.
    let api_only: Vec<(&str, &str)> = vec![
        ("", "path_empty"),
        ("   ", "path_not_absolute"),
        ("relative/dir", "path_not_absolute"),
        ("./here", "path_not_absolute"),
        ("code/app", "path_not_absolute"),
        ("/tmp/a\u{0}b", "path_invalid"),
    ];
    let refused_dirs = [code.clone(), foreign, frozen, home.join(".ssh")];
    let listings_before: Vec<Vec<String>> = refused_dirs.iter().map(|d| listing(d)).collect();

    // `check` needs no server.
    for (path, want) in &table {
        let out = b.run(&["check", path, "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("check {path:?}: not JSON ({e})"));
        assert_eq!(
            (v["ok"].clone(), v["code"].as_str(), out.status.code()),
            (json!(false), Some(*want), Some(1)),
            "check {path:?}: {v}"
        );
    }

    b.serve();
    add_command_agent(&b, "echo", "cat");
    let app = code.join("app");
    let linked = new_session(&b, "echo", Some(&app));
    let sessions_before = session_ids(&b);
    let mut cases = 0;
    for (path, want) in &table {
        for args in [
            vec!["session", "new", "--agent", "echo", "--dir", path, "--json"],
            vec!["session", "link", &linked[..8], path, "--json"],
        ] {
            let out = b.run(&args);
            let v: Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"));
            assert_eq!(out.status.code(), Some(1), "{args:?}: {v}");
            assert_eq!(error_code(&format!("{args:?}"), &v), *want, "{args:?}: {v}");
            cases += 1;
        }
    }
    for (path, want) in &api_only {
        let body = json!({ "dir": path }).to_string();
        let (st, v) = control(&b, "POST", "/api/v1/check", body.as_bytes());
        assert_eq!(
            (st, error_code("check", &v)),
            (400, (*want).to_owned()),
            "{path:?}: {v}"
        );
        let body = json!({ "agent": "echo", "dir": path }).to_string();
        let (st, v) = control(&b, "POST", "/api/v1/sessions", body.as_bytes());
        assert_eq!(
            (st, error_code("new", &v)),
            (400, (*want).to_owned()),
            "{path:?}: {v}"
        );
        let (st, v) = control(
            &b,
            "PUT",
            &format!("/api/v1/sessions/{linked}/binding"),
            json!({ "dir": path }).to_string().as_bytes(),
        );
        assert_eq!(
            (st, error_code("link", &v)),
            (400, (*want).to_owned()),
            "{path:?}: {v}"
        );
        cases += 3;
    }
    assert_eq!(
        session_ids(&b),
        sessions_before,
        "a refused path was stored"
    );
    let shown = b.json(&["session", "show", &linked, "--json"]);
    assert_eq!(
        shown["binding"]["dir"],
        s(&std::fs::canonicalize(&app).unwrap())
    );
    let listings_after: Vec<Vec<String>> = refused_dirs.iter().map(|d| listing(d)).collect();
    assert_eq!(listings_after, listings_before, "something was written");
    assert_eq!(
        listing(&app),
        Vec::<String>::new(),
        "probe left in the bound dir"
    );

    // Malformed user settings: the task fails naming file:line:column.
    let settings = b.config.join("settings.jsonc");
    for (text, what) in [
        ("{\n  \"plugins\": [\n}\n", "syntax error"),
        ("{\n  \"agent\": 3\n}\n", "wrong type"),
        ("{ \"prompt\": { \"append\": [1] } }", "wrong nested type"),
        ("{\n  \"plugins\": [\"\"]\n}\n", "empty plugin path"),
        ("[1, 2]", "not an object"),
    ] {
        std::fs::write(&settings, text).unwrap();
        let id = send_detached(&b, &linked, "hello");
        let t = wait_final(&b, &linked, &id);
        let err = t["error"].as_str().unwrap_or_default();
        let located = err.split("settings.jsonc:").nth(1).is_some_and(|rest| {
            let mut f = rest.split(':');
            f.next().is_some_and(|l| l.parse::<u32>().is_ok())
                && f.next().is_some_and(|c| c.parse::<u32>().is_ok())
        });
        assert!(
            t["status"] == "failed" && located,
            "{what}: want a failure at settings.jsonc:L:C, got {t}"
        );
        cases += 1;
    }
    std::fs::remove_file(&settings).unwrap();

    // Malformed API bodies over the control socket.
    let big = format!("{{\"text\": \"{}\"}}", "x".repeat(1024 * 1024 + 16));
    let msgs = format!("/api/v1/sessions/{linked}/messages");
    let binding = format!("/api/v1/sessions/{linked}/binding");
    let api_cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        (
            "POST",
            "/api/v1/sessions",
            b"not json".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/sessions",
            b"{\"title\": 5}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/sessions",
            b"{\"bogus\": 1}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/sessions",
            b"\"a string\"".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/sessions",
            b"{\"agent\": \"nobody\"}".to_vec(),
            404,
            "unknown_agent",
        ),
        (
            "POST",
            "/api/v1/sessions",
            b"{\"mode\": \"sideways\"}".to_vec(),
            400,
            "bad_request",
        ),
        ("POST", &msgs, b"".to_vec(), 400, "bad_request"),
        (
            "POST",
            &msgs,
            b"{\"text\": \"\"}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            &msgs,
            b"{\"text\": \"  \\n \"}".to_vec(),
            400,
            "bad_request",
        ),
        ("POST", &msgs, b"{\"text\": 5}".to_vec(), 400, "bad_request"),
        (
            "POST",
            &msgs,
            b"{\"text\": \"hi\", \"extra\": 1}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            &msgs,
            b"{\"text\": \"\\ud800\"}".to_vec(),
            400,
            "bad_request",
        ),
        ("POST", &msgs, big.into_bytes(), 413, "payload_too_large"),
        (
            "POST",
            "/api/v1/sessions/nope-nope/messages",
            b"{\"text\": \"hi\"}".to_vec(),
            404,
            "unknown_session",
        ),
        (
            "PUT",
            &binding,
            b"{\"dir\": 7}".to_vec(),
            400,
            "bad_request",
        ),
        ("PUT", &binding, b"{}".to_vec(), 400, "bad_request"),
        (
            "PUT",
            &binding,
            b"{\"dir\": \"/x\", \"mode\": 1}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/check",
            b"{\"path\": \"/x\"}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/agents",
            b"{\"name\": 1}".to_vec(),
            400,
            "bad_request",
        ),
        (
            "POST",
            "/api/v1/agents",
            b"{\"name\": \"a\", \"kind\": \"robot\"}".to_vec(),
            400,
            "bad_request",
        ),
        ("POST", "/api/v1/tasks/nope/cancel", b"".to_vec(), 404, ""),
    ];
    for (method, path, body, want_status, want_code) in &api_cases {
        let (st, v) = control(&b, method, path, body);
        let what = format!(
            "{method} {path} {:?}",
            String::from_utf8_lossy(&body[..body.len().min(60)])
        );
        let got = error_code(&what, &v);
        assert_eq!(st, *want_status, "{what}: {v}");
        if !want_code.is_empty() {
            assert_eq!(got, *want_code, "{what}: {v}");
        }
        cases += 1;
    }
    assert_eq!(
        session_ids(&b),
        sessions_before,
        "a malformed body was stored"
    );

    // Webhooks on the web listener: forged, stale, malformed.
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(b.home.join("serve.json")).unwrap()).unwrap();
    let addr = info["url"]
        .as_str()
        .unwrap()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let event = json!({"type": "event_callback", "event_id": "Ev1", "event": {"type": "message", "channel": "C1", "user": "U1", "text": "run rm -rf", "ts": "1.1"}}).to_string();
    let ts = now.to_string();
    let stale = (now - 600).to_string();
    let future = (now + 600).to_string();
    let good = slack_sign(SECRET, &ts, event.as_bytes());
    let hook_cases: Vec<HookCase> = vec![
        (None, None, event.clone().into_bytes(), 401),
        (Some(ts.clone()), None, event.clone().into_bytes(), 401),
        (None, Some(good.clone()), event.clone().into_bytes(), 401),
        (
            Some(ts.clone()),
            Some(format!("v0={}", "0".repeat(64))),
            event.clone().into_bytes(),
            401,
        ),
        (
            Some(ts.clone()),
            Some(slack_sign("wrong-secret", &ts, event.as_bytes())),
            event.clone().into_bytes(),
            401,
        ),
        (
            Some(ts.clone()),
            Some("garbage".into()),
            event.clone().into_bytes(),
            401,
        ),
        (
            Some(ts.clone()),
            Some(good),
            format!("{event} ").into_bytes(),
            401,
        ),
        (
            Some(stale.clone()),
            Some(slack_sign(SECRET, &stale, event.as_bytes())),
            event.clone().into_bytes(),
            401,
        ),
        (
            Some(future.clone()),
            Some(slack_sign(SECRET, &future, event.as_bytes())),
            event.clone().into_bytes(),
            401,
        ),
        (
            Some("soon".into()),
            Some(slack_sign(SECRET, "soon", event.as_bytes())),
            event.clone().into_bytes(),
            401,
        ),
        (
            Some(ts.clone()),
            Some(slack_sign(SECRET, &ts, b"not json")),
            b"not json".to_vec(),
            400,
        ),
        (
            Some(ts.clone()),
            Some(slack_sign(SECRET, &ts, b"{\"type\": 3}")),
            b"{\"type\": 3}".to_vec(),
            400,
        ),
        {
            let empty = json!({"type": "event_callback", "event_id": "", "event": {"type": "message", "channel": "C1", "text": "hi", "ts": "1.2"}}).to_string();
            (
                Some(ts.clone()),
                Some(slack_sign(SECRET, &ts, empty.as_bytes())),
                empty.into_bytes(),
                400,
            )
        },
    ];
    for (i, (ts_h, sig_h, body, want)) in hook_cases.iter().enumerate() {
        let mut head = format!(
            "POST /hooks/slack HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n"
        );
        if let Some(t) = ts_h {
            head.push_str(&format!("X-Slack-Request-Timestamp: {t}\r\n"));
        }
        if let Some(sg) = sig_h {
            head.push_str(&format!("X-Slack-Signature: {sg}\r\n"));
        }
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (st, body) = raw_http(&mut tcp, &head, body);
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "hook case {i}: not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        });
        error_code(&format!("hook case {i}"), &v);
        assert_eq!(st, *want, "hook case {i}: {v}");
        cases += 1;
    }
    assert_eq!(
        session_ids(&b),
        sessions_before,
        "a webhook created a session"
    );
    eprintln!(
        "battery: {} paths, {cases} cases",
        table.len() + api_only.len()
    );
    assert!(table.len() + api_only.len() >= 40);

    b.stop("-TERM");
    let db = rusqlite::Connection::open(b.home.join("berth.db")).unwrap();
    let check: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(db);
    b.serve();
    assert_eq!(session_ids(&b), sessions_before);
}

/// A request body that is not a JSON object must be refused (body.rs: "it must be a
/// JSON object with the documented fields"). serde reads a struct from a JSON array
/// too, so `[]` is taken for `NewSession` with every field absent and a session is
/// stored.
#[test]
fn api_refuses_a_json_array_for_an_object() {
    let mut b = Berth::new("array-body");
    b.serve();
    add_command_agent(&b, "echo", "cat");
    let before = session_ids(&b);
    let (st, v) = control(&b, "POST", "/api/v1/sessions", b"[]");
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("bad_request")),
        "{v}"
    );
    assert_eq!(session_ids(&b), before, "a session was stored from []");
}

/// Everything an agent started dies with a SIGKILLed `berth serve`, not only the
/// agent itself: a survivor could write into the directory after the restart
/// restored it.
///
/// `PR_SET_PDEATHSIG` reaches only the agent; its children die through the watcher
/// of its process group, without waiting for a restart.
#[test]
fn an_agents_children_die_with_a_killed_server() {
    let mut b = Berth::new("orphans");
    let outside = TempDir::new("orphans-outside");
    let pids = outside.path().join("pids");
    // The agent writes its pids outside its directory: a side channel to allow.
    berth_tests::steps::fence_write(&b, &[outside.path()]);
    b.serve();
    add_command_agent(
        &b,
        "spawner",
        &format!("sleep 30 & echo \"$$ $!\" > {}; wait", s(&pids)),
    );
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    let session = new_session(&b, "spawner", Some(&dir));
    send_detached(&b, &session, "go");
    let line = eventually(30, || {
        std::fs::read_to_string(&pids)
            .ok()
            .filter(|l| l.ends_with('\n'))
    })
    .expect("the agent started");
    let both: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    b.stop("-KILL");
    let dead = eventually(10, || both.iter().all(|p| !alive(*p)).then_some(()));
    let survivors: Vec<u32> = both.iter().copied().filter(|p| alive(*p)).collect();
    for p in &survivors {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &p.to_string()])
            .status();
    }
    assert!(
        dead.is_some(),
        "still running 10 s after berth serve was killed (agent, its child): {survivors:?} of {both:?}"
    );
}
