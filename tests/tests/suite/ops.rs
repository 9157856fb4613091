//! Running Berth for real (issue 38). `berth service`: the unit `berth serve` runs under
//! at login, checked by systemd's own `systemd-analyze verify`; the launchd plist parsed
//! as a property list; install, status and uninstall against `systemctl --user` (faked:
//! there is no user manager on a test machine — the fake speaks its commands and exit
//! codes); the refusal, writing nothing, when no user manager answers. And logs for
//! machines: `BERTH_LOG_FORMAT=json`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_command_agent, new_session, write_script};
use berth_tests::{Berth, eventually};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Secrets in the installing shell: none may reach the unit.
const SECRETS: [(&str, &str); 3] = [
    ("BERTH_ADMIN_TOKEN", "admin-secret-4f1e"),
    ("BERTH_DAEMON_TOKEN", "daemon-secret-9c2d"),
    ("BERTH_DATABASE_URL", "postgres://u:pw-secret-77@db/x"),
];

fn with_secrets(tag: &str) -> Berth {
    let mut b = Berth::new(tag);
    for (k, v) in SECRETS {
        b.env(k, v);
    }
    b
}

fn assert_no_secret(text: &str) {
    for (_, v) in SECRETS {
        assert!(!text.contains(v), "the unit names a secret:\n{text}");
    }
}

#[test]
fn the_systemd_unit_is_one_systemd_accepts_and_names_no_secret() {
    let mut b = with_secrets("service-unit");
    b.serve();
    let unit = b.ok(&["service", "install", "--print"]);
    assert_no_secret(&unit);
    // The server's token, in its home, stays there.
    let token = std::fs::read_to_string(b.home.join("serve.json")).unwrap();
    let token: Value = serde_json::from_str(&token).unwrap();
    assert!(!unit.contains(token["token"].as_str().unwrap()));
    assert!(unit.contains("Restart=on-failure"), "{unit}");
    assert!(unit.contains("WantedBy=default.target"), "{unit}");
    // It runs this berth, on this home.
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let bin = b.bin();
    assert!(
        exec.starts_with(&format!("\"{}\" \"serve\"", bin.display())),
        "{exec}"
    );
    assert!(
        exec.ends_with(&format!("\"--home\" \"{}\"", b.home.display())),
        "{exec}"
    );
    assert!(
        unit.contains(&format!(
            "Environment=\"BERTH_CONFIG_DIR={}\"",
            b.config.display()
        )),
        "{unit}"
    );
    // systemd's own verdict (system mode: a test machine has no user manager).
    let dir = b.root.path().join("unit");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("berth.service");
    std::fs::write(&file, &unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .output()
        .expect("systemd-analyze (Debian's systemd package)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify refused it: {stderr}\n{unit}"
    );
    assert!(!stderr.contains("berth.service"), "{stderr}");
    // And the check can fail: a unit it must refuse.
    std::fs::write(
        &file,
        unit.replace("Restart=on-failure", "Restart=sometimes"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sometimes"),
        "{out:?}"
    );
}

#[test]
fn the_launchd_agent_is_a_property_list_that_parses() {
    let b = with_secrets("service-plist");
    let out = b.run(&["service", "install", "--print", "--manager", "launchd"]);
    assert!(out.status.success(), "{out:?}");
    let plist = String::from_utf8(out.stdout).unwrap();
    assert_no_secret(&plist);
    // Parsed by Python's plistlib, the reference reader of the format.
    let script =
        "import json, plistlib, sys; print(json.dumps(plistlib.loads(sys.stdin.buffer.read())))";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plist.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "not a property list:\n{plist}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["Label"], "dev.berth.serve");
    let args: Vec<&str> = doc["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let home = b.home.display().to_string();
    let bin = b.bin().display().to_string();
    assert_eq!(args, [bin.as_str(), "serve", "--home", home.as_str()]);
    assert_eq!(doc["RunAtLoad"], true);
    assert_eq!(doc["KeepAlive"]["SuccessfulExit"], false);
    assert_eq!(
        doc["EnvironmentVariables"]["BERTH_CONFIG_DIR"],
        b.config.display().to_string()
    );
    assert!(
        doc["StandardErrorPath"]
            .as_str()
            .unwrap()
            .ends_with("Library/Logs/Berth/serve.log")
    );
}

/// A `systemctl` that speaks `--user` as systemd's does, from a state file: what the
/// unit is (`enabled`/`disabled`, `active`/`inactive`), every call logged.
fn fake_systemctl(b: &mut Berth, manager_up: bool) -> (PathBuf, PathBuf) {
    let bin = b.root.path().join("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = b.root.path().join("systemctl.log");
    let state = b.root.path().join("systemctl.state");
    let up = if manager_up {
        ""
    } else {
        "echo 'Failed to connect to bus: No medium found' >&2; exit 1"
    };
    write_script(
        &bin.join("systemctl"),
        &format!(
            r#"#!/bin/sh
echo "$*" >> '{log}'
[ "$1" = --user ] || {{ echo "only --user here" >&2; exit 1; }}
shift
{up}
case "$1" in
  show-environment) echo "HOME=$HOME" ;;
  daemon-reload) ;;
  enable) echo "enabled active" > '{state}' ;;
  restart) ;;
  disable) echo "disabled inactive" > '{state}' ;;
  is-enabled) s=$(cut -d' ' -f1 '{state}' 2>/dev/null || echo disabled); echo "$s"; [ "$s" = enabled ] ;;
  is-active) s=$(cut -d' ' -f2 '{state}' 2>/dev/null || echo inactive); echo "$s"; [ "$s" = active ] ;;
  *) echo "Unknown command verb $1." >&2; exit 1 ;;
esac
"#,
            log = log.display(),
            state = state.display(),
        ),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    b.env("PATH", &path);
    b.env(
        "XDG_CONFIG_HOME",
        b.user_home.join(".config").to_str().unwrap(),
    );
    (log, b.user_home.join(".config/systemd/user/berth.service"))
}

fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn install_status_and_uninstall_drive_the_user_manager() {
    let mut b = with_secrets("service-install");
    let (log, unit) = fake_systemctl(&mut b, true);
    let status = b.json(&["service", "status", "--json"]);
    assert_eq!(status["installed"], false, "{status}");

    let printed = b.ok(&["service", "install", "--print"]);
    let done = b.json(&["service", "install", "--json"]);
    assert_eq!(done["installed"], true, "{done}");
    assert_eq!(done["file"], unit.display().to_string());
    assert_eq!(std::fs::read_to_string(&unit).unwrap(), printed);
    assert_eq!(
        calls(&log),
        [
            "--user show-environment",
            "--user daemon-reload",
            "--user enable --now berth.service",
            "--user restart berth.service",
        ]
    );
    let status = b.json(&["service", "status", "--json"]);
    assert_eq!(status["installed"], true, "{status}");
    assert_eq!(status["current"], true, "{status}");
    assert_eq!(status["enabled"], "enabled", "{status}");
    assert_eq!(status["active"], "active", "{status}");
    let text = b.ok(&["service", "status"]);
    assert!(
        text.contains("enabled   enabled") && text.contains("running   active"),
        "{text}"
    );

    let gone = b.json(&["service", "uninstall", "--json"]);
    assert_eq!(gone["removed"], true, "{gone}");
    assert!(!unit.exists());
    assert!(calls(&log).contains(&"--user disable --now berth.service".to_owned()));
    let again = b.ok(&["service", "uninstall"]);
    assert!(again.contains("not installed"), "{again}");
}

#[test]
fn without_a_user_manager_install_says_why_and_writes_nothing() {
    let mut b = Berth::new("service-no-manager");
    let (log, unit) = fake_systemctl(&mut b, false);
    let out = b.run(&["service", "install"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("systemd's user manager did not answer"),
        "{stderr}"
    );
    assert!(stderr.contains("Failed to connect to bus"), "{stderr}");
    assert!(
        stderr.contains("hint: ") && stderr.contains("enable-linger"),
        "{stderr}"
    );
    assert!(!unit.exists(), "a unit was written");
    assert!(
        !unit.parent().unwrap().exists()
            || std::fs::read_dir(unit.parent().unwrap())
                .unwrap()
                .next()
                .is_none()
    );
    assert_eq!(calls(&log), ["--user show-environment"]);
}

#[test]
fn json_logs_are_one_object_a_line() {
    let mut b = Berth::new("ops-json-log");
    b.env("BERTH_LOG", "info");
    b.env("BERTH_LOG_FORMAT", "json");
    b.serve();
    add_command_agent(&b, "idle", "true");
    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.txt"), "a").unwrap();
    new_session(&b, "idle", Some(&dir));
    // The link's first snapshot is logged, at info.
    let line = eventually(30, || {
        b.serve_log()
            .lines()
            .find(|l| l.contains("first snapshot taken"))
            .map(str::to_owned)
    })
    .expect("no log line for the first snapshot");
    let doc: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(doc["level"], "INFO", "{doc}");
    assert_eq!(doc["target"], "berth_local_agent::run::executor", "{doc}");
    assert_eq!(doc["message"], "first snapshot taken", "{doc}");
    assert_eq!(doc["fields"]["dir"], "~/code/app", "{doc}");
    assert!(doc["fields"]["took_ms"].is_u64(), "{doc}");
    assert!(doc["time"].as_str().unwrap().ends_with('Z'), "{doc}");
    // Every log line is one object; the banner on stdout is the only other text.
    for l in b.serve_log().lines().filter(|l| l.starts_with('{')) {
        let _: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
}

#[test]
fn an_unknown_log_format_is_refused_with_a_hint() {
    let mut b = Berth::new("ops-bad-log");
    b.env("BERTH_LOG_FORMAT", "yaml");
    let out = b.run(&["serve"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("BERTH_LOG_FORMAT=\"yaml\" is not a format"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: use text or json"), "{stderr}");
}
