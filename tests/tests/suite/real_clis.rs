//! The real `claude` and `codex` binaries, run directly (no Berth), against the fake
//! model server of `berth_tests::fake_models` on loopback: proof that the fake speaks
//! their APIs well enough for them to write files, be denied, and resume.
//!
//! The binaries come from `$BERTH_AGENT_CLIS/node_modules/.bin` (default
//! `~/.cache/berth-agents`), where `scripts/test.sh` installs the pinned versions.
//!
//! With `BERTH_RECORD_FIXTURES=1` each test also writes what the binary printed to
//! `local-agent/tests/fixtures/real/` (see the README there), with its temporary paths
//! replaced by `/home/alice` and `/home/alice/code/app`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::fake_models::{FakeModels, Recorded};
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one CLI run may take before it is killed and its test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The home and working directory recorded fixtures show instead of the test's.
const FIXTURE_HOME: &str = "/home/alice";
const FIXTURE_WORK: &str = "/home/alice/code/app";
/// The fake's address recorded fixtures show instead of its random port.
const FIXTURE_ADDR: &str = "127.0.0.1:4000";

// ---------------------------------------------------------------------------------
// Binaries, places, runs
// ---------------------------------------------------------------------------------

/// A test's own directories: `home` (the CLI's HOME) and `work` (its working
/// directory), removed on drop.
#[derive(Debug)]
struct Place {
    root: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl Place {
    /// Under cargo's per-target temp dir rather than `/tmp`: codex refuses to set up its
    /// helper binaries under a temporary dir and says so on stderr, which a real user's
    /// `~/.codex` never does.
    fn new(tag: &str) -> Place {
        Place::under(Path::new(env!("CARGO_TARGET_TMPDIR")), tag)
    }

    /// Under `parent/real-clis/`.
    fn under(parent: &Path, tag: &str) -> Place {
        static N: AtomicU32 = AtomicU32::new(0);
        let root = parent.join("real-clis").join(format!(
            "{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["home", "work"] {
            std::fs::create_dir_all(root.join(d)).expect("create test directories");
        }
        // The CLIs see resolved paths; so must the assertions and the fixture rewriting.
        let root = root.canonicalize().expect("canonical test root");
        Place {
            home: root.join("home"),
            work: root.join("work"),
            root,
        }
    }

    fn work_str(&self) -> &str {
        self.work.to_str().expect("UTF-8 work path")
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
        // The shared parent, once the last test is done with it.
        if let Some(parent) = self.root.parent() {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// A finished CLI run.
#[derive(Debug)]
struct Run {
    what: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Every stdout line as JSON; panics with the whole output when one is not.
    fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!("{}: stdout line is not JSON ({e}): {l}\n{self}", self.what)
                })
            })
            .collect()
    }

    /// The events whose `type` is `kind`.
    fn of_type(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    /// The one event of type `kind`; panics (showing the output) unless there is one.
    fn one(&self, kind: &str) -> Value {
        let mut found = self.of_type(kind);
        assert_eq!(
            found.len(),
            1,
            "{}: expected one {kind:?} event\n{self}",
            self.what
        );
        found.remove(0)
    }

    /// Codex's `item.completed` items of item type `kind`.
    fn items(&self, kind: &str) -> Vec<Value> {
        self.of_type("item.completed")
            .into_iter()
            .map(|e| e["item"].clone())
            .filter(|i| i["type"] == kind)
            .collect()
    }

    fn assert_code(&self, code: i32) {
        assert_eq!(self.code, Some(code), "{}: exit code\n{self}", self.what);
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit code: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Reads a pipe to the end on a thread; the text arrives on the returned channel.
fn drain(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

/// Kills the process group `pgid` (the CLI and anything it started).
fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// Runs `cmd` in its own process group with `stdin` (or `/dev/null`), for at most
/// [`RUN_TIMEOUT`]. On timeout the group is killed and the test fails with the output.
/// Whatever the CLI left running in its group is killed when it exits.
fn run(what: &str, mut cmd: Command, stdin: Option<&str>) -> Run {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    let pgid = child.id();
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{what}: writing the prompt to stdin: {e}"));
        // Dropping the pipe closes it: the CLI sees the end of its input.
    }
    let out = drain(child.stdout.take().expect("piped stdout"));
    let err = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{what}: waiting for the CLI: {e}"),
        }
    };
    kill_group(pgid);
    let _ = child.wait();
    // The pipes close once nothing in the group holds them; a descendant that left the
    // group could hold them longer, so wait boundedly.
    let collect = |rx: mpsc::Receiver<String>| {
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| "<output still open after the CLI exited>".to_owned())
    };
    let run = Run {
        what: what.to_owned(),
        code: status.and_then(|s| s.code()),
        stdout: collect(out),
        stderr: collect(err),
    };
    assert!(
        status.is_some(),
        "{what}: still running after {RUN_TIMEOUT:?}, killed\n{run}"
    );
    run
}

/// `claude -p --output-format stream-json --verbose EXTRA…` in `place.work`, talking only
/// to `fake`.
fn claude(place: &Place, fake: &FakeModels, extra: &[&str]) -> Command {
    let mut cmd = Command::new(berth_tests::steps::agent_cli("claude"));
    cmd.current_dir(&place.work);
    fake.configure_claude(&mut cmd, &place.home)
        .expect("set up claude's home");
    cmd.args(["-p", "--output-format", "stream-json", "--verbose"])
        .args(extra);
    cmd
}

/// `codex exec --json --skip-git-repo-check ARGS…` in `place.work`, talking only to
/// `fake`.
fn codex(place: &Place, fake: &FakeModels, args: &[&str]) -> Command {
    let mut cmd = Command::new(berth_tests::steps::agent_cli("codex"));
    cmd.current_dir(&place.work);
    fake.configure_codex(&mut cmd, &place.home)
        .expect("write the codex configuration");
    cmd.args(["exec", "--json", "--skip-git-repo-check"])
        .args(args);
    cmd
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The model turns whose request body contains `needle`.
fn turns_with(fake: &FakeModels, needle: &str) -> Vec<Recorded> {
    fake.model_turns()
        .into_iter()
        .filter(|r| r.raw_body.contains(needle))
        .collect()
}

/// Turn two's requests (a tool call and the final answer) carry the first exchange in
/// their conversation field (`messages` for claude, `input` for codex): resumed.
fn assert_turn_two_carries(fake: &FakeModels, field: &str, earlier: &[&str]) {
    let turns = turns_with(fake, "turn two");
    assert_eq!(turns.len(), 2, "a tool call and the final answer");
    let conversation = turns[0].body[field].to_string();
    for e in earlier {
        assert!(
            conversation.contains(e),
            "turn two lacks {e:?}: {conversation}"
        );
    }
}

fn assert_no_unknown_routes(fake: &FakeModels) {
    let unknown: Vec<String> = fake
        .unknown_requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        unknown.is_empty(),
        "requests to routes the fake does not know: {unknown:?}"
    );
}

// ---------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------

/// `path` as claude names its project directory: every character but ASCII letters and
/// digits replaced by `-`.
fn dashed(path: &str) -> String {
    path.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// Writes `text` to `local-agent/tests/fixtures/real/NAME` when `BERTH_RECORD_FIXTURES`
/// is set, with `place`'s paths and the fake's port replaced by stable ones.
fn record(name: &str, place: &Place, fake: &FakeModels, home_as: &str, work_as: &str, text: &str) {
    if std::env::var_os("BERTH_RECORD_FIXTURES").is_none() {
        return;
    }
    let work = place.work_str();
    let home = place.home.to_str().expect("UTF-8 home path");
    let addr = fake.base_url().trim_start_matches("http://").to_owned();
    let text = text
        .replace(work, work_as)
        .replace(&dashed(work), &dashed(work_as))
        .replace(home, home_as)
        .replace(&addr, FIXTURE_ADDR);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../local-agent/tests/fixtures/real");
    std::fs::create_dir_all(&dir).expect("create the fixtures directory");
    std::fs::write(dir.join(name), text).expect("write a fixture");
}

/// Records a run's stdout as `STEM.jsonl` and, when it printed any, stderr as
/// `STEM.stderr`.
fn record_run(stem: &str, place: &Place, fake: &FakeModels, run: &Run) {
    record(
        &format!("{stem}.jsonl"),
        place,
        fake,
        FIXTURE_HOME,
        FIXTURE_WORK,
        &run.stdout,
    );
    if !run.stderr.is_empty() {
        record(
            &format!("{stem}.stderr"),
            place,
            fake,
            FIXTURE_HOME,
            FIXTURE_WORK,
            &run.stderr,
        );
    }
}

// ---------------------------------------------------------------------------------
// claude
// ---------------------------------------------------------------------------------

const CLAUDE_WRITE: &str =
    "Please write the greeting (turn one).\nberth-fake: write hello.txt hello from claude\n";

#[test]
fn claude_accept_edits_writes_the_file() {
    let fake = FakeModels::start();
    let place = Place::new("claude-write-ok");
    let cmd = claude(&place, &fake, &["--permission-mode", "acceptEdits"]);
    let run = run("claude acceptEdits", cmd, Some(CLAUDE_WRITE));
    record_run("claude-write-ok", &place, &fake, &run);

    run.assert_code(0);
    assert_eq!(
        read(&place.work.join("hello.txt")).as_deref(),
        Some("hello from claude"),
        "{run}"
    );
    let init = run.events().into_iter().next().expect("an init event");
    assert_eq!(
        (&init["type"], &init["subtype"]),
        (&"system".into(), &"init".into()),
        "{run}"
    );
    assert_eq!(init["cwd"], place.work_str());
    assert_eq!(init["permissionMode"], "acceptEdits");
    let tool_use = run
        .of_type("assistant")
        .into_iter()
        .flat_map(|e| {
            e["message"]["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use\n{run}"));
    assert_eq!(tool_use["name"], "Write");
    assert_eq!(
        tool_use["input"]["file_path"],
        format!("{}/hello.txt", place.work_str())
    );
    let result = run.one("result");
    assert_eq!(result["subtype"], "success", "{run}");
    assert_eq!(result["is_error"], false, "{run}");
    assert_eq!(result["permission_denials"], serde_json::json!([]));
    let text = result["result"].as_str().expect("result text");
    assert!(
        text.starts_with("done: hello.txt\nFile created successfully"),
        "{run}"
    );

    // Nothing but model turns: no probes, no token counting, no model listing.
    let turns = fake.requests();
    assert_eq!(turns.len(), 2, "a tool call and the final answer");
    assert!(
        turns
            .iter()
            .all(|t| t.method == "POST" && t.path == "/v1/messages?beta=true")
    );
    assert_eq!(turns[0].header("x-api-key"), Some("sk-ant-fake-key"));
    assert_no_unknown_routes(&fake);
}

#[test]
fn claude_without_a_permission_flag_is_denied() {
    let fake = FakeModels::start();
    let place = Place::new("claude-write-denied");
    let run = run(
        "claude default mode",
        claude(&place, &fake, &[]),
        Some(CLAUDE_WRITE),
    );
    record_run("claude-write-denied", &place, &fake, &run);

    run.assert_code(0);
    assert!(
        !place.work.join("hello.txt").exists(),
        "denied, yet written\n{run}"
    );
    let denied: Vec<Value> = run
        .of_type("system")
        .into_iter()
        .filter(|e| e["subtype"] == "permission_denied")
        .collect();
    assert_eq!(denied.len(), 1, "{run}");
    assert_eq!(denied[0]["tool_name"], "Write");
    let message = denied[0]["message"].as_str().expect("a denial message");
    assert!(message.contains("haven't granted it yet"), "{message}");
    let result = run.one("result");
    assert_eq!(
        result["is_error"], false,
        "a denial is not an error result\n{run}"
    );
    let denials = result["permission_denials"]
        .as_array()
        .expect("permission_denials");
    assert_eq!(denials.len(), 1, "{run}");
    assert_eq!(denials[0]["tool_name"], "Write");
    assert_eq!(denials[0]["tool_use_id"], denied[0]["tool_use_id"]);
    assert_eq!(denials[0]["tool_input"]["content"], "hello from claude");
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|t| t.starts_with("failed: hello.txt")),
        "{run}"
    );
}

#[test]
fn claude_resume_continues_the_conversation() {
    let fake = FakeModels::start();
    let place = Place::new("claude-resume");
    let first = run(
        "claude turn one",
        claude(&place, &fake, &["--permission-mode", "acceptEdits"]),
        Some(CLAUDE_WRITE),
    );
    first.assert_code(0);
    let session = first.one("result")["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();

    let prompt = "Now read it back (turn two).\nberth-fake: run cat hello.txt\n";
    let args = [
        "--permission-mode",
        "acceptEdits",
        "--resume",
        session.as_str(),
    ];
    let second = run(
        "claude turn two",
        claude(&place, &fake, &args),
        Some(prompt),
    );
    record_run("claude-resume", &place, &fake, &second);

    second.assert_code(0);
    let result = second.one("result");
    assert_eq!(result["session_id"], session.as_str(), "{second}");
    assert_eq!(
        result["result"], "done: cat hello.txt\nhello from claude",
        "{second}"
    );
    // The second turn's requests carry the first exchange: the same conversation.
    assert_turn_two_carries(
        &fake,
        "messages",
        &["turn one", "File created successfully", "done: hello.txt"],
    );
}

#[test]
fn claude_stale_resume_fails() {
    let fake = FakeModels::start();
    let place = Place::new("claude-stale-resume");
    let stale = "0b5c9a6e-1111-4222-8333-944455556666";
    let cmd = claude(&place, &fake, &["--resume", stale]);
    let run = run("claude stale resume", cmd, Some("hello again\n"));
    record_run("claude-stale-resume", &place, &fake, &run);

    run.assert_code(1);
    let result = run.one("result");
    assert_eq!(result["subtype"], "error_during_execution", "{run}");
    assert_eq!(result["is_error"], true);
    let expected = format!("No conversation found with session ID: {stale}");
    assert_eq!(result["errors"], serde_json::json!([expected]), "{run}");
    assert!(run.stderr.contains(&expected), "{run}");
    assert!(
        fake.model_turns().is_empty(),
        "no model turn for a stale resume"
    );
}

// ---------------------------------------------------------------------------------
// codex
// ---------------------------------------------------------------------------------

const CODEX_WRITE: &str =
    "Please write the greeting (turn one).\nberth-fake: write hello.txt hello from codex";

/// The one `file_change` item of a run, checked to add `place.work/hello.txt`.
fn assert_adds_hello(run: &Run, place: &Place) {
    let changes = run.items("file_change");
    assert_eq!(changes.len(), 1, "{run}");
    assert_eq!(changes[0]["status"], "completed", "{run}");
    assert_eq!(
        changes[0]["changes"],
        serde_json::json!([{"path": format!("{}/hello.txt", place.work_str()), "kind": "add"}])
    );
}

#[test]
fn codex_workspace_write_writes_the_file() {
    let fake = FakeModels::start();
    let place = Place::new("codex-write-ok");
    let args = [
        "--sandbox",
        "workspace-write",
        "-C",
        place.work_str(),
        CODEX_WRITE,
    ];
    let run = run("codex workspace-write", codex(&place, &fake, &args), None);
    record_run("codex-write-ok", &place, &fake, &run);

    run.assert_code(0);
    // apply_patch writes whole lines.
    assert_eq!(
        read(&place.work.join("hello.txt")).as_deref(),
        Some("hello from codex\n"),
        "{run}"
    );
    let events = run.events();
    assert_eq!(events[0]["type"], "thread.started", "{run}");
    assert!(
        events[0]["thread_id"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    assert_adds_hello(&run, &place);
    let messages = run.items("agent_message");
    assert_eq!(messages.len(), 1, "{run}");
    assert!(
        messages[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("done: hello.txt\n")),
        "{run}"
    );
    assert!(
        run.items("error").is_empty(),
        "a catalogued model reports no error item\n{run}"
    );
    let usage = &run.one("turn.completed")["usage"];
    assert!(
        usage["input_tokens"].as_u64().is_some_and(|n| n > 0),
        "{run}"
    );
    assert!(
        run.stderr
            .contains("Reading additional input from stdin..."),
        "{run}"
    );

    // Nothing but model turns: no model listing, no WebSocket attempt.
    let turns = fake.requests();
    assert_eq!(turns.len(), 2, "a tool call and the final answer");
    assert!(
        turns
            .iter()
            .all(|t| t.method == "POST" && t.path == "/v1/responses")
    );
    assert_eq!(turns[0].header("authorization"), Some("Bearer sk-fake-key"));
    let apply_patch = turns[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == "apply_patch")
        .cloned();
    assert_eq!(
        apply_patch.map(|t| t["type"].clone()),
        Some("custom".into())
    );
    assert_no_unknown_routes(&fake);
}

#[test]
fn codex_danger_full_access_writes_the_file() {
    let fake = FakeModels::start();
    let place = Place::new("codex-full-access");
    let args = [
        "--sandbox",
        "danger-full-access",
        "-C",
        place.work_str(),
        CODEX_WRITE,
    ];
    let run = run(
        "codex danger-full-access",
        codex(&place, &fake, &args),
        None,
    );
    record_run("codex-full-access", &place, &fake, &run);

    run.assert_code(0);
    assert_eq!(
        read(&place.work.join("hello.txt")).as_deref(),
        Some("hello from codex\n"),
        "{run}"
    );
    assert_adds_hello(&run, &place);
}

#[test]
fn codex_read_only_cannot_write() {
    let fake = FakeModels::start();
    let place = Place::new("codex-read-only");
    let args = [
        "--sandbox",
        "read-only",
        "-C",
        place.work_str(),
        CODEX_WRITE,
    ];
    let run = run("codex read-only", codex(&place, &fake, &args), None);
    record_run("codex-read-only", &place, &fake, &run);

    // The turn completes and codex exits 0; only the tool output tells.
    run.assert_code(0);
    assert!(
        !place.work.join("hello.txt").exists(),
        "read-only, yet written\n{run}"
    );
    assert!(
        run.items("file_change").is_empty(),
        "a rejected patch is no file change\n{run}"
    );
    let messages = run.items("agent_message");
    assert_eq!(messages.len(), 1, "{run}");
    let text = messages[0]["text"].as_str().expect("message text");
    assert!(
        text.starts_with(
            "failed: hello.txt\npatch rejected: writing is blocked by read-only sandbox"
        ),
        "{run}"
    );
    run.one("turn.completed");
}

#[test]
fn codex_unknown_model_reports_an_error_item_and_falls_back_to_exec_command() {
    let fake = FakeModels::start();
    let place = Place::new("codex-unknown-model");
    let args = [
        "-m",
        "gpt-fake",
        "--sandbox",
        "read-only",
        "-C",
        place.work_str(),
        CODEX_WRITE,
    ];
    let run = run("codex unknown model", codex(&place, &fake, &args), None);
    record_run("codex-unknown-model-read-only", &place, &fake, &run);

    run.assert_code(0);
    assert!(
        !place.work.join("hello.txt").exists(),
        "read-only, yet written\n{run}"
    );
    let errors = run.items("error");
    assert_eq!(errors.len(), 1, "{run}");
    assert_eq!(
        errors[0]["message"],
        "Model metadata for `gpt-fake` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."
    );
    let text = run.items("agent_message")[0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.starts_with("failed: hello.txt\n"), "{run}");
    assert!(text.contains("Process exited with code 1"), "{run}");
    assert!(text.contains("Read-only file system"), "{run}");
    let tools = fake.model_turns()[0].body["tools"].to_string();
    assert!(
        tools.contains("\"exec_command\"") && !tools.contains("\"apply_patch\""),
        "{tools}"
    );
}

#[test]
fn codex_resume_continues_the_conversation() {
    let fake = FakeModels::start();
    let place = Place::new("codex-resume");
    let args = [
        "--sandbox",
        "workspace-write",
        "-C",
        place.work_str(),
        CODEX_WRITE,
    ];
    let first = run("codex turn one", codex(&place, &fake, &args), None);
    first.assert_code(0);
    let thread = first.one("thread.started")["thread_id"]
        .as_str()
        .expect("thread id")
        .to_owned();

    let prompt = "Now read it back (turn two).\nberth-fake: run cat hello.txt";
    let args = [
        "--sandbox",
        "workspace-write",
        "-C",
        place.work_str(),
        "resume",
        thread.as_str(),
        prompt,
    ];
    let second = run("codex turn two", codex(&place, &fake, &args), None);
    record_run("codex-resume", &place, &fake, &second);

    second.assert_code(0);
    assert_eq!(
        second.one("thread.started")["thread_id"],
        thread.as_str(),
        "{second}"
    );
    let commands = second.items("command_execution");
    assert_eq!(commands.len(), 1, "{second}");
    assert_eq!(commands[0]["exit_code"], 0, "{second}");
    assert_eq!(
        commands[0]["aggregated_output"], "hello from codex\n",
        "{second}"
    );
    assert_turn_two_carries(
        &fake,
        "input",
        &["turn one", "*** Add File:", "done: hello.txt"],
    );
}

#[test]
fn codex_stale_resume_fails() {
    let fake = FakeModels::start();
    let place = Place::new("codex-stale-resume");
    let stale = "01a22f60-0000-7000-8000-000000000000";
    let args = [
        "--sandbox",
        "workspace-write",
        "-C",
        place.work_str(),
        "resume",
        stale,
        "hello again",
    ];
    let run = run("codex stale resume", codex(&place, &fake, &args), None);
    record_run("codex-stale-resume", &place, &fake, &run);
    // Recorded even when empty: that stdout has no JSON at all is the point.
    record(
        "codex-stale-resume.jsonl",
        &place,
        &fake,
        FIXTURE_HOME,
        FIXTURE_WORK,
        &run.stdout,
    );

    run.assert_code(1);
    assert!(run.events().is_empty(), "{run}");
    assert!(
        run.stderr.contains(&format!(
            "Error: thread/resume: thread/resume failed: no rollout found for thread id {stale}"
        )),
        "{run}"
    );
    assert!(
        !run.stderr.contains("Stack backtrace"),
        "RUST_BACKTRACE leaked in\n{run}"
    );
    assert!(
        fake.model_turns().is_empty(),
        "no model turn for a stale resume"
    );
}

#[test]
fn codex_websocket_fallback_is_an_error_item() {
    let fake = FakeModels::start();
    let place = Place::new("codex-ws-fallback");
    let args = [
        "-c",
        "model_providers.berth_fake.supports_websockets=true",
        "-C",
        place.work_str(),
        "hello over websockets",
    ];
    let run = run("codex websockets", codex(&place, &fake, &args), None);
    record_run("codex-ws-fallback", &place, &fake, &run);

    run.assert_code(0);
    let errors = run.items("error");
    assert_eq!(errors.len(), 1, "{run}");
    let message = errors[0]["message"].as_str().expect("error message");
    assert!(
        message.starts_with("Falling back from WebSockets to HTTPS transport."),
        "{run}"
    );
    assert_eq!(
        run.items("agent_message")[0]["text"],
        "fake reply: hello over websockets",
        "{run}"
    );
    // The fake speaks no WebSocket: the upgrade is an unknown route, answered 404.
    let upgrades = fake.unknown_requests();
    assert!(!upgrades.is_empty(), "{run}");
    assert!(upgrades.iter().all(|r| r.method == "GET"
        && r.route() == "/v1/responses"
        && r.header("upgrade") == Some("websocket")));
}

#[test]
fn codex_home_under_tmp_warns_on_stderr() {
    let fake = FakeModels::start();
    // A CODEX_HOME under the system temp dir, as a HOME under /tmp gives: codex checks
    // it against the temp dir, so the fake's TMPDIR inside HOME must go too.
    let place = Place::under(Path::new("/tmp"), "codex-tmp-home");
    let args = [
        "--sandbox",
        "workspace-write",
        "-C",
        place.work_str(),
        "hello from /tmp",
    ];
    let mut cmd = codex(&place, &fake, &args);
    cmd.env_remove("TMPDIR");
    let run = run("codex home under /tmp", cmd, None);
    let (home_as, work_as) = ("/tmp/alice", "/tmp/alice/app");
    record(
        "codex-tmp-home.stderr",
        &place,
        &fake,
        home_as,
        work_as,
        &run.stderr,
    );

    run.assert_code(0);
    assert!(
        run.stderr.contains(
            "WARNING: proceeding, even though we could not create PATH aliases: Refusing to \
             create helper binaries under temporary dir \"/tmp\""
        ),
        "{run}"
    );
    assert_eq!(
        run.items("agent_message")[0]["text"],
        "fake reply: hello from /tmp",
        "{run}"
    );
}
