//! The lean `berth` front (issue 17): `send`, the lists and `--version` are answered
//! by `berth` alone, without a runtime, clap or SQLite linked in; every other command
//! line is `berth-full`'s, with clap's help and errors unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::{Berth, TempDir, berth_bin};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// `berth-full`, next to `berth`.
fn full_bin() -> PathBuf {
    berth_bin().with_file_name("berth-full")
}

/// `program ARGS` with `b`'s environment (its home, config, locks and user).
fn run_as(b: &Berth, program: &Path, args: &[&str]) -> Output {
    run_without(b, program, args, &[])
}

/// [`run_as`] with the variables `unset` removed.
fn run_without(b: &Berth, program: &Path, args: &[&str], unset: &[&str]) -> Output {
    let base = b.cmd();
    let mut c = Command::new(program);
    for (k, v) in base.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    for k in unset {
        c.env_remove(k);
    }
    c.args(args).stdin(Stdio::null());
    // A binary this test just copied may still be open for writing in a child another
    // test thread forked meanwhile (the descriptor closes only at that child's exec):
    // the kernel answers ETXTBSY until it has. Try again, briefly.
    for _ in 0..100 {
        match c.output() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.expect("run berth"),
        }
    }
    c.output().expect("run berth")
}

/// `ETXTBSY` ("Text file busy"), on Linux and macOS alike.
const ETXTBSY: i32 = 26;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// A served home with a `cat` agent and one session; returns the session id.
fn served(tag: &str) -> (Berth, String) {
    let mut b = Berth::new(tag);
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
    let s = b.json(&[
        "session", "new", "--agent", "cat", "--title", "lean", "--json",
    ]);
    let id = s["id"].as_str().expect("session id").to_owned();
    (b, id)
}

/// `berth` copied alone into a directory without `berth-full`: what it does there,
/// it does without the full CLI.
#[test]
fn send_and_the_lists_need_nothing_but_the_lean_front() {
    let (b, id) = served("lean-alone");
    let alone_dir = TempDir::new("lean-alone-bin");
    let alone = alone_dir.path().join("berth");
    std::fs::copy(berth_bin(), &alone).expect("copy berth");

    let out = run_as(&b, &alone, &["send", &id, "hello from the lean front"]);
    assert_eq!(ok(&out, "send"), "hello from the lean front\n");
    assert!(
        text(&out.stderr).contains("succeeded (exit 0)"),
        "{}",
        text(&out.stderr)
    );

    let out = run_as(&b, &alone, &["send", "--json", &id, "second"]);
    let lines: Vec<Value> = ok(&out, "send --json")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect();
    let last = lines.last().expect("events");
    assert_eq!(last["task"]["status"], "succeeded", "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|e| e["kind"] == "agent" && e["payload"]["text"] == "second"),
        "{lines:?}"
    );

    // The lists: the same documents the full CLI prints.
    for args in [
        &["session", "list", "--json"][..],
        &["agent", "list", "--json"],
        &["task", "list", "--session", &id[..8], "--json"],
    ] {
        let lean = ok(&run_as(&b, &alone, args), "lean list");
        let full = ok(&run_as(&b, &full_bin(), args), "full list");
        let doc: Value = serde_json::from_str(&lean).expect("a JSON list");
        assert!(doc.as_array().is_some_and(|a| !a.is_empty()), "{lean}");
        assert_eq!(lean, full, "berth {args:?}");
    }
    let table = ok(&run_as(&b, &alone, &["session", "list"]), "session list");
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.contains(&id[..8]) && table.contains("cat"), "{table}");
    let tasks = ok(&run_as(&b, &alone, &["task", "list"]), "task list");
    assert!(tasks.lines().count() >= 3, "{tasks}");

    // --version as clap prints it.
    let lean = ok(&run_as(&b, &alone, &["--version"]), "--version");
    assert_eq!(lean, ok(&run_as(&b, &full_bin(), &["--version"]), "full"));
    assert_eq!(lean, format!("berth {}\n", env!("CARGO_PKG_VERSION")));

    // Errors: the server's code, message and hint, as the full CLI reports them.
    for args in [
        &["send", "nosuch", "x"][..],
        &["send", "nosuch", "x", "--json"],
    ] {
        let lean = run_as(&b, &alone, args);
        let full = run_as(&b, &full_bin(), args);
        assert_eq!(lean.status.code(), Some(1), "{}", text(&lean.stderr));
        assert_eq!(
            (lean.status.code(), text(&lean.stdout), text(&lean.stderr)),
            (full.status.code(), text(&full.stdout), text(&full.stderr)),
        );
        assert!(text(&lean.stderr).contains("\nhint: "));
    }

    // Last, as the task it queues may still run: the lists above compare as they are.
    let out = run_as(
        &b,
        &alone,
        &[
            "--home",
            b.home.to_str().unwrap(),
            "send",
            &id,
            "queued",
            "--detach",
        ],
    );
    assert!(ok(&out, "send --detach").starts_with("task "));

    // Anything else needs berth-full, and says so.
    let out = run_as(&b, &alone, &["session", "show", &id]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("error: cannot run ")
            && err.contains("berth-full")
            && err.contains("\nhint: "),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Without --home, BERTH_HOME and HOME the home comes from the password database,
    // which only the full CLI reads (the lean one may be linked statically).
    let out = run_without(&b, &alone, &["session", "list"], &["BERTH_HOME", "HOME"]);
    assert!(
        text(&out.stderr).contains("berth-full"),
        "{}",
        text(&out.stderr)
    );
    let out = run_without(&b, &alone, &["session", "list"], &["HOME"]);
    assert_eq!(ok(&out, "session list without HOME").lines().count(), 2);
}

/// No server: the lean front says so as the full CLI does; a relative BERTH_HOME is
/// refused the same way.
#[test]
fn the_lean_front_refuses_as_the_full_cli_does() {
    let b = Berth::new("lean-refusals");
    for args in [&["session", "list"][..], &["session", "list", "--json"]] {
        let lean = b.run(args);
        let full = run_as(&b, &full_bin(), args);
        assert_eq!(lean.status.code(), Some(1));
        assert!(
            text(&lean.stderr)
                .starts_with("error: berth is not running\nhint: start it with `berth serve`"),
            "{}",
            text(&lean.stderr)
        );
        assert_eq!(
            (lean.status.code(), text(&lean.stdout), text(&lean.stderr)),
            (full.status.code(), text(&full.stdout), text(&full.stderr)),
        );
    }
    let mut lean = b.cmd();
    let lean = lean
        .env("BERTH_HOME", "relative/home")
        .args(["agent", "list"])
        .output()
        .unwrap();
    assert_eq!(lean.status.code(), Some(1));
    assert!(
        text(&lean.stderr)
            .contains("BERTH_HOME is set to \"relative/home\", which is not an absolute path"),
        "{}",
        text(&lean.stderr)
    );
}

/// Lines the lean front is not sure of reach clap: help, usage errors, and a
/// message that starts with `-` after `--`.
#[test]
fn clap_still_judges_every_other_line() {
    let (b, id) = served("lean-clap");
    let out = b.run(&["send", &id, "--", "-a message with a dash"]);
    assert_eq!(ok(&out, "send -- -m"), "-a message with a dash\n");

    let out = b.run(&["send"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("Usage: berth send"),
        "{}",
        text(&out.stderr)
    );
    let out = b.run(&["session", "list", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unexpected argument '--bogus'"),
        "{}",
        text(&out.stderr)
    );
    let out = b.run(&["--help"]);
    assert!(ok(&out, "--help").contains("Usage: berth"));
    let out = b.run(&["send", "--json", "--json", &id, "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// The lean front links no async runtime, no clap and no SQLite: the strings each of
/// them carries are in `berth-full` and not in `berth`.
#[test]
fn the_lean_front_links_no_runtime_clap_or_sqlite() {
    let lean = std::fs::read(berth_bin()).expect("read berth");
    let full = std::fs::read(full_bin()).expect("read berth-full");
    let has = |bin: &[u8], probe: &str| bin.windows(probe.len()).any(|w| w == probe.as_bytes());
    for probe in [
        // tokio's runtime
        "must be called from the context of a Tokio 1.x runtime",
        // SQLite's file header
        "SQLite format 3",
        // clap's parse errors
        "unexpected argument",
    ] {
        assert!(
            has(&full, probe),
            "the probe {probe:?} is not in berth-full"
        );
        assert!(!has(&lean, probe), "berth links what carries {probe:?}");
    }
}
