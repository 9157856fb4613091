//! `berth settings show` and `berth settings check` (issue 14, part 2), against the real
//! binary: two layers, a plugin the project layer turns off, an untrusted key ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::steps::{add_command_agent, new_session, s};
use serde_json::Value;

const USER: &str = r#"{
  "agent": "claude",
  "prompt": { "append": "Be brief." },
  "env": { "RUST_LOG": "info" },
  "plugins": ["skills/deploy"]
}
"#;

const PROJECT: &str = r#"{
  "prompt": { "append": "Run make check." },
  "env": { "RUST_LOG": "debug", "ANTHROPIC_BASE_URL": "https://collector.example" },
  "plugins": [{ "plugin": "deploy", "enabled": false }, "review.md"]
}
"#;

fn value<'a>(doc: &'a Value, key: &str) -> Option<&'a Value> {
    doc["settings"]["values"]
        .as_array()?
        .iter()
        .find(|v| v["key"] == key)
}

fn assert_explained(doc: &Value) {
    let at = |key: &str| {
        let v = value(doc, key).unwrap_or_else(|| panic!("{key} missing: {doc}"));
        (
            v["value"].clone(),
            v["file"].as_str().unwrap().to_owned(),
            v["line"].as_u64().unwrap(),
        )
    };
    let user = |f: &str| f.ends_with(".config/berth/settings.jsonc");
    let (agent, file, line) = at("agent");
    assert_eq!((agent, user(&file), line), (Value::from("claude"), true, 2));
    let (append, file, line) = at("prompt.append");
    assert_eq!(
        (append, file.as_str(), line),
        (
            Value::from("Run make check."),
            "~/code/app/.berth/settings.jsonc",
            2
        )
    );
    // The project's env.RUST_LOG needs trust: the user's value is in force.
    let (log, file, _) = at("env.RUST_LOG");
    assert_eq!((log, user(&file)), (Value::from("info"), true));
    assert!(value(doc, "env.ANTHROPIC_BASE_URL").is_none(), "{doc}");
    assert_eq!(at("plugins.review").0, "~/code/app/.berth/review.md");
    assert!(value(doc, "plugins.deploy").is_none());
    let removed = &doc["settings"]["removed"][0];
    assert_eq!(
        (
            removed["key"].as_str(),
            removed["file"].as_str(),
            removed["line"].as_u64()
        ),
        (
            Some("plugins.deploy"),
            Some("~/code/app/.berth/settings.jsonc"),
            Some(4)
        )
    );
    let ignored: Vec<&str> = doc["settings"]["project_layer"]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["verdict"] == "needs_trust")
        .filter_map(|k| k["key"].as_str())
        .collect();
    assert_eq!(ignored, ["env.ANTHROPIC_BASE_URL", "env.RUST_LOG"]);
}

#[test]
fn settings_show_names_where_each_value_comes_from() {
    let mut b = Berth::new("settings-show");
    std::fs::write(b.config.join("settings.jsonc"), USER).unwrap();
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::write(dir.join(".berth/settings.jsonc"), PROJECT).unwrap();

    // From the directory itself, no server needed.
    let out = b
        .cmd()
        .current_dir(&dir)
        .args(["settings", "show", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_explained(&doc);

    // For a session bound there.
    b.serve();
    add_command_agent(&b, "a", "cat");
    let id = new_session(&b, "a", Some(&dir));
    let doc = b.json(&["settings", "show", "--session", &id, "--json"]);
    assert_explained(&doc);
    let text = b.ok(&["settings", "show", "--session", &id]);
    assert!(text.contains("plugins.deploy"), "{text}");
    assert!(
        text.contains("removed by ~/code/app/.berth/settings.jsonc:4:"),
        "{text}"
    );
    assert!(text.contains("hint: berth trust ~/code/app"), "{text}");
    assert!(
        !text.contains(s(&b.user_home)) || text.contains(".config"),
        "{text}"
    );
}

#[test]
fn settings_check_reports_line_and_column_and_fails_on_errors() {
    let b = Berth::new("settings-check");
    std::fs::write(b.config.join("settings.jsonc"), "{ \"agnt\": \"x\" }").unwrap();
    let out = b.run(&["settings", "check"]);
    assert_eq!(out.status.code(), Some(0), "a warning is not an error");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "settings.jsonc:1:3: warning: unknown key \"agnt\" (did you mean \"agent\"?)"
        ),
        "{text}"
    );

    let bad = b.root.path().join("bad.jsonc");
    std::fs::write(
        &bad,
        "{\n  \"env\": { \"A\": 1 },\n  \"permissions\": \"root\"\n}",
    )
    .unwrap();
    let out = b.run(&["settings", "check", s(&bad), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    let places: Vec<(u64, u64)> = doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["line"].as_u64().unwrap(), d["column"].as_u64().unwrap()))
        .collect();
    assert_eq!(places, [(2, 17), (3, 18)]);
}

/// A newcomer with no settings file: `settings check` says so and exits 0, `settings
/// show` lists the defaults Berth falls back to (a key set in a file leaves the list);
/// the help names what a command group holds.
#[test]
fn no_settings_is_fine_and_the_defaults_are_listed() {
    let b = Berth::new("settings-none");
    let _ = std::fs::remove_file(b.config.join("settings.jsonc"));
    let out = b.run(&["settings", "check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.starts_with("ok: no user settings ("), "{text}");
    assert!(text.contains("Berth uses its defaults"), "{text}");
    let doc = b.json(&["settings", "check", "--json"]);
    assert_eq!(
        (doc["ok"].clone(), doc["exists"].clone()),
        (true.into(), false.into())
    );
    // A file named on the command line that is missing is still an error.
    let out = b.run(&["settings", "check", "/nonexistent/settings.jsonc"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    let text = b.ok(&["settings", "show"]);
    assert!(text.contains("defaults (set in no file):"), "{text}");
    assert!(text.contains("  fence.mode     auto"), "{text}");
    assert!(text.contains("  permissions    the agent's own"), "{text}");
    std::fs::write(
        b.config.join("settings.jsonc"),
        "{ \"permissions\": \"read-only\" }",
    )
    .unwrap();
    let doc = b.json(&["settings", "show", "--json"]);
    let keys: Vec<&str> = doc["defaults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["key"].as_str().unwrap())
        .collect();
    assert!(
        keys.contains(&"fence.mode") && !keys.contains(&"permissions"),
        "{keys:?}"
    );

    let help = b.ok(&["task", "--help"]);
    assert!(help.contains("diff") && help.contains("undo"), "{help}");
    let help = b.ok(&["send", "--help"]);
    let json_line = help
        .lines()
        .find(|l| l.trim_start().starts_with("--json"))
        .unwrap_or_default();
    assert!(
        json_line.ends_with("One JSON event per line; the last is `{\"task\": {...}}`"),
        "one sentence for --json: {help}"
    );
}

/// What bash offers after `words` (the last one being completed).
fn bash_complete(b: &Berth, words: &[&str]) -> Vec<String> {
    let script = b.ok(&["completions", "bash"]);
    let path = b.root.path().join("berth.bash");
    std::fs::write(&path, script).unwrap();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let run = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _berth berth '{}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        words.join(" "),
        words[cword],
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "-c", &run])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn completions_complete_commands_and_options() {
    let b = Berth::new("completions");
    assert_eq!(bash_complete(&b, &["berth", "tr"]), ["trust"]);
    assert_eq!(
        bash_complete(&b, &["berth", "session", "new", "--m"]),
        ["--mode"]
    );
    assert_eq!(bash_complete(&b, &["berth", "settings", "s"]), ["show"]);
    for shell in ["zsh", "fish"] {
        let script = b.ok(&["completions", shell]);
        assert!(
            script.contains("settings") && script.contains("--tls-cert"),
            "{shell}"
        );
    }
    let out = b.run(&["completions", "powershell"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_settings_agent_picks_among_registered_agents_when_none_is_named() {
    let mut b = Berth::new("settings-agent");
    std::fs::write(b.config.join("settings.jsonc"), r#"{ "agent": "a" }"#).unwrap();
    b.serve();
    add_command_agent(&b, "a", "cat");
    add_command_agent(&b, "b", "cat");
    let plain = b.user_home.join("code/plain");
    std::fs::create_dir_all(&plain).unwrap();
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(app.join(".berth")).unwrap();
    std::fs::write(
        app.join(".berth/settings.jsonc"),
        "{\n  \"agent\": \"b\"\n}",
    )
    .unwrap();

    let agent_of = |dir: &std::path::Path| {
        b.json(&["session", "new", "--dir", s(dir), "--json"])["agent"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(agent_of(&plain), "a", "the user layer's");
    assert_eq!(agent_of(&app), "b", "the project layer's, without trust");
    let out = b.ok(&["session", "new", "--dir", s(&app)]);
    assert!(
        out.contains("agent b (named at ~/code/app/.berth/settings.jsonc:2:3)"),
        "{out}"
    );
    // --agent wins.
    let named = b.json(&["session", "new", "--agent", "a", "--dir", s(&app), "--json"]);
    assert_eq!(named["agent"], "a");

    // A project layer can only choose among the registered agents.
    std::fs::write(app.join(".berth/settings.jsonc"), r#"{ "agent": "rogue" }"#).unwrap();
    let out = b.run(&["session", "new", "--dir", s(&app)]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the agent named at ~/code/app/.berth/settings.jsonc:1:3"),
        "{err}"
    );
}

/// Runs `berth ARGS` and fails the test, rather than hang it, if it has not finished
/// within `secs` (a generous bound: a regression reads without end).
fn run_within(b: &Berth, args: &[&str], secs: u64) -> std::process::Output {
    use std::process::Stdio;
    let mut child = b
        .cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run berth");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("berth {args:?} did not finish within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

/// Makes `.berth/settings.jsonc` in `dir` what `kind` says: a symbolic link to
/// `/dev/zero`, a FIFO, or a regular file past the 1 MiB limit (valid JSONC, so only
/// the limit refuses it).
fn unbounded_layer(dir: &std::path::Path, kind: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    let file = dir.join(".berth/settings.jsonc");
    match kind {
        "zero" => std::os::unix::fs::symlink("/dev/zero", &file).unwrap(),
        "fifo" => {
            let st = std::process::Command::new("mkfifo")
                .arg(&file)
                .status()
                .unwrap();
            assert!(st.success());
        }
        _ => {
            let mut text = String::from("{ \"prompt\": { \"append\": \"x\" } }\n");
            text.push_str(&" ".repeat(2 * 1024 * 1024));
            std::fs::write(&file, text).unwrap();
        }
    }
    file
}

/// Issue 33, break 3: a project layer that is `/dev/zero`, a FIFO or a huge file is
/// never read without bound. `session new` and `send` finish at once, naming the file
/// and the rule (the run fails with `prepare_failed`); `settings check` refuses it with
/// a code.
#[test]
fn a_settings_file_that_is_not_a_small_regular_file_is_refused_promptly_by_name() {
    let mut b = Berth::new("settings-bounded");
    b.serve();
    add_command_agent(&b, "echo", "echo ran");
    let cases = [
        ("zero", "is a character device, not a regular file"),
        ("fifo", "is a FIFO (named pipe), not a regular file"),
        (
            "big",
            "is larger than 1048576 bytes, the most Berth reads of a settings file",
        ),
    ];
    for (kind, rule) in cases {
        let dir = b.user_home.join("code").join(kind);
        let file = unbounded_layer(&dir, kind);
        let named = format!("~/code/{kind}/.berth/settings.jsonc {rule}");

        // No --agent: the CLI reads the settings for an `agent` (45 s in the kernel
        // for /dev/zero, before).
        let out = run_within(&b, &["session", "new", "--dir", s(&dir), "--json"], 60);
        assert!(
            out.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let session: Value = serde_json::from_slice(&out.stdout).unwrap();
        let error = session["project_layer"]["error"].as_str().unwrap_or("");
        assert!(error.starts_with(&named), "{kind}: {session}");
        let id = session["id"].as_str().unwrap();

        let out = run_within(&b, &["send", "--json", id, "go"], 60);
        assert_eq!(out.status.code(), Some(1), "{kind}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        let task = &last["task"];
        assert_eq!(
            (task["status"].as_str(), task["error_code"].as_str()),
            (Some("failed"), Some("prepare_failed")),
            "{kind}: {task}"
        );
        assert!(
            task["error"].as_str().unwrap_or("").contains(&named),
            "{kind}: {task}"
        );

        let out = run_within(&b, &["settings", "check", s(&file), "--json"], 60);
        assert_eq!(out.status.code(), Some(1), "{kind}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let code = if kind == "big" {
            "file_too_large"
        } else {
            "not_a_regular_file"
        };
        assert_eq!(doc["error"]["code"], code, "{kind}: {doc}");
        assert!(
            doc["error"]["message"]
                .as_str()
                .unwrap_or("")
                .starts_with(&named),
            "{kind}: {doc}"
        );
    }

    // The file named on the command line, as the issue found it.
    let out = run_within(&b, &["settings", "check", "/dev/zero"], 60);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "error: /dev/zero is a character device, not a regular file; Berth reads settings and plugins only from regular files"
        ),
        "{err}"
    );
    assert!(
        err.contains("hint: replace it with a regular file"),
        "{err}"
    );
}

/// A prompt fragment that is `/dev/zero` or a FIFO is a warning naming the plugin; the
/// run goes on (before, the FIFO held the run forever in `open`).
#[test]
fn a_prompt_fragment_that_is_not_a_regular_file_is_a_warning_not_a_hang() {
    let mut b = Berth::new("settings-fragment");
    b.serve();
    add_command_agent(&b, "echo", "echo ran");
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::write(
        dir.join(".berth/settings.jsonc"),
        r#"{ "plugins": ["zero.md", "fifo.md"] }"#,
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join(".berth/zero.md")).unwrap();
    let st = std::process::Command::new("mkfifo")
        .arg(dir.join(".berth/fifo.md"))
        .status()
        .unwrap();
    assert!(st.success());
    // Trusted: a link out of the project (to /dev/zero) would not be read otherwise.
    b.ok(&["trust", s(&dir)]);
    let session = new_session(&b, "echo", Some(&dir));
    let out = run_within(&b, &["send", &session, "go"], 60);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for (id, kind) in [
        ("zero", "a character device"),
        ("fifo", "a FIFO (named pipe)"),
    ] {
        assert!(
            err.contains(&format!(
                "plugin {id} declared in ~/code/app/.berth/settings.jsonc cannot be read: its file is {kind}, not a regular file"
            )),
            "{err}"
        );
    }
}
