//! Issue 33, the CLI's own boundaries, each tried as an attacker would:
//!
//! - Berth's state is its user's alone (files 0600, directories 0700) under umask
//!   0022 and a home that already existed as 0755, the change record's snapshot of a
//!   0600 `.env` included (break 9);
//! - the daemon token stays out of the command line other local users read in `ps`
//!   (break 8);
//! - a path with terminal escape sequences in it is printed escaped by every command
//!   that shows it, never acted on (break 10).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::steps::{add_command_agent, git, new_session, s, send_json, write_script};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Every entry under `root` (not following links) whose mode lets anyone but its
/// owner in, with its mode.
fn open_to_others(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue; // removed while we walked (a lock file, a journal)
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        if meta.mode() & 0o077 != 0 {
            out.push((p.clone(), format!("{:o}", meta.mode() & 0o7777)));
        }
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
                stack.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn berths_state_is_private_under_umask_0022_and_an_open_home() {
    let mut b = Berth::new("modes");
    b.umask("022");
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::set_permissions(&b.home, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A database an older version left readable: tightened at the next start.
    std::fs::write(b.home.join("berth.db"), "").unwrap();
    std::fs::set_permissions(
        b.home.join("berth.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    b.serve();

    let dir = b.user_home.join("code/app");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("README.md"), "app\n").unwrap();
    git(&dir, &["init", "-q"]);
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "start"]);
    // The user's secret, kept from other users in their own directory.
    std::fs::write(dir.join(".env"), "TOKEN=s3cret\n").unwrap();
    std::fs::set_permissions(dir.join(".env"), std::fs::Permissions::from_mode(0o600)).unwrap();

    let script = b.root.path().join("agent.sh");
    write_script(&script, "#!/bin/sh\necho changed >> README.md\necho done\n");
    add_command_agent(&b, "editor", s(&script));
    let session = new_session(&b, "editor", Some(&dir));
    b.ok(&["send", &session, "edit"]);
    b.ok(&["trust", s(&dir)]);

    // The change record's snapshots hold the .env: somewhere under the home.
    let snapshots = b.home.join("snapshots");
    assert!(
        std::fs::read_dir(&snapshots).is_ok_and(|mut d| d.next().is_some()),
        "the run took no snapshot: {snapshots:?}"
    );
    let wider = open_to_others(&b.home);
    assert_eq!(wider, Vec::new(), "Berth's files other users may open");
    let wider = open_to_others(&b.locks);
    assert_eq!(wider, Vec::new(), "Berth's lock files other users may open");
}

#[test]
fn the_daemon_token_stays_out_of_the_command_line() {
    let mut server = Berth::new("token-srv");
    server.serve_with(&["--allow-daemons"]);
    let (url, _) = server.serve_info();
    let out = server.run(&["daemon", "token", "create", "laptop"]);
    assert!(out.status.success(), "{out:?}");
    let token = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let advice = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        advice.contains(&format!(
            "BERTH_DAEMON_TOKEN={token} berth daemon --server {url}"
        )),
        "{advice}"
    );
    assert!(!advice.contains("--token "), "{advice}");

    // As advised: the token is in the environment, never in /proc/PID/cmdline.
    let mut laptop = Berth::new("token-env");
    laptop.daemon(&url, &token, "laptop");
    let pid = laptop.server_pid().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(&token),
        "the token is in the daemon's command line"
    );
    drop(laptop);

    // From a file: the same, and a file others can read is named in a warning.
    let token = server.daemon_token("desk");
    let mut desk = Berth::new("token-file");
    let file = desk.root.path().join("token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    desk.start(&[
        "daemon",
        "--server",
        &url,
        "--token-file",
        s(&file),
        "--name",
        "desk",
    ]);
    let log = desk.serve_log();
    assert!(
        log.contains(&format!(
            "warning: the token file {} can be read by other users",
            s(&file)
        )),
        "{log}"
    );
    assert!(log.contains("hint: chmod 600"), "{log}");
    drop(desk);

    // --token still works, with a warning that says why not and what instead.
    let token = server.daemon_token("old");
    let mut old = Berth::new("token-flag");
    old.start(&[
        "daemon", "--server", &url, "--token", &token, "--name", "old",
    ]);
    let log = old.serve_log();
    assert!(
        log.contains("warning: --token puts the daemon token in this process's command line"),
        "{log}"
    );
    assert!(log.contains("BERTH_DAEMON_TOKEN"), "{log}");
    // And the token is gone from the running daemon's command line, the rest kept.
    let pid = old.server_pid().unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline);
    assert!(
        !cmdline.contains(&token),
        "the token is in the daemon's command line: {cmdline:?}"
    );
    assert!(
        cmdline.contains(&format!(
            "\0--token\0{}\0--name\0old",
            "*".repeat(token.len())
        )),
        "{cmdline:?}"
    );

    // A token file that is not a regular file is refused before anything is sent.
    let out = old.run(&["daemon", "--server", &url, "--token-file", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: the token file /dev/zero is not a regular file"),
        "{err}"
    );
}

/// A directory name that clears the screen and retitles the terminal if printed raw.
const HOSTILE: &str = "app\u{1b}[2J\u{1b}]0;owned\u{7}\u{202e}txt";
/// How every command shows it.
const SHOWN: &str = "app\\x1b[2J\\x1b]0;owned\\x07\\u{202e}txt";

fn assert_inert(what: &str, text: &str) {
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\u{202e}'),
        "{what} printed a control character raw: {text:?}"
    );
    assert!(
        text.contains(SHOWN),
        "{what} does not show the name escaped: {text:?}"
    );
}

#[test]
fn control_characters_in_a_path_are_printed_escaped() {
    let mut b = Berth::new("escapes");
    let dir = b.user_home.join("code").join(HOSTILE);
    std::fs::create_dir_all(&dir).unwrap();

    // `check`, accepted and refused.
    let out = b.run(&["check", s(&dir)]);
    assert!(out.status.success(), "{out:?}");
    assert_inert("check", &String::from_utf8_lossy(&out.stdout));
    let missing = dir.join(HOSTILE);
    let out = b.run(&["check", s(&missing)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_inert(
        "check of a missing path",
        &String::from_utf8_lossy(&out.stdout),
    );

    // An error naming it (`error:` on stderr).
    let out = b.run(&["trust", s(&missing)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_inert("trust's error", &String::from_utf8_lossy(&out.stderr));

    // The session's header and the lists.
    b.serve();
    let script = b.root.path().join("agent.sh");
    write_script(&script, "#!/bin/sh\necho ok\n");
    add_command_agent(&b, "echo", s(&script));
    let session = new_session(&b, "echo", Some(&dir));
    let show = b.ok(&["session", "show", &session]);
    assert_inert("session show", &show);
    b.ok(&["send", &session, "hi"]);
    assert_inert("session list", &b.ok(&["session", "list"]));
    assert_inert(
        "session show after a run",
        &b.ok(&["session", "show", &session]),
    );
    b.ok(&["trust", s(&dir)]);
    assert_inert("trust list", &b.ok(&["trust", "list"]));
}

/// A title and an agent's words are untrusted text too: escape sequences and a
/// right-to-left override in them print escaped wherever a person reads them (the
/// session's creation, its header, the list, `berth send`'s stream); `--json` keeps
/// them as they are (JSON escapes them its own way).
#[test]
fn control_and_bidi_characters_in_a_title_and_an_agents_text_are_printed_escaped() {
    let mut b = Berth::new("escapes-text");
    b.serve();
    // The agent answers with the same characters (as octal escapes for printf).
    add_command_agent(
        &b,
        "echo",
        r"printf 'app\033[2J\033]0;owned\007\342\200\256txt\n'",
    );
    let out = b.ok(&["session", "new", "--agent", "echo", "--title", HOSTILE]);
    assert_inert("session new", &out);
    let id = out.split_whitespace().nth(2).unwrap().to_owned();
    let show = b.ok(&["session", "show", &id]);
    assert_inert("session show", &show);
    assert_inert("session list", &b.ok(&["session", "list"]));
    let listed = b.json(&["session", "list", "--json"]);
    assert_eq!(listed[0]["title"], HOSTILE, "--json keeps the title raw");

    let out = b.run(&["send", &id, "hi"]);
    assert!(out.status.success(), "{out:?}");
    assert_inert("send", &String::from_utf8_lossy(&out.stdout));
    let (_, events, _) = send_json(&b, &id, "hi");
    let raw = events
        .iter()
        .filter_map(|e| e["payload"]["text"].as_str())
        .any(|t| t.contains(HOSTILE));
    assert!(raw, "--json keeps the agent's text raw: {events:?}");
}

/// What a command agent reports of itself and of the server that started it: its
/// capability sets (`CapInh: 0000000000000000`, …) and whether it could read the
/// server's environment (`environ: read` / `environ: refused`). The message is the
/// server's pid, and optionally a second pid whose environment is tried the same way
/// (`other: …`).
const PROBE_SERVER: &str = r#"read -r pid other
grep '^Cap' /proc/self/status
try() { if tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | grep -q '^BERTH_TEST_SECRET=s3cret-env-7f'; then echo "$2: read"; else echo "$2: refused"; fi; }
try "$pid" environ
if [ -n "$other" ]; then try "$other" other; fi"#;

/// The agent's lines of one run through `b` (a server, or a daemon's CLI): what
/// [`PROBE_SERVER`] printed of `b`'s long-running process (and of `other`), as
/// `key: value` pairs.
fn probe_server(b: &Berth, agent: &str, other: Option<u32>) -> BTreeMap<String, String> {
    let session = new_session(b, agent, None);
    let mut message = b.server_pid().unwrap().to_string();
    if let Some(other) = other {
        message.push_str(&format!(" {other}"));
    }
    let (_, events, task) = send_json(b, &session, &message);
    assert_eq!(task["status"], "succeeded", "{task} {events:?}");
    events
        .iter()
        .filter(|e| e["payload"]["type"] == "text")
        .filter_map(|e| e["payload"]["text"].as_str())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

/// Every capability set of the probe, as its `/proc/self/status` said.
fn caps(seen: &BTreeMap<String, String>) -> Vec<(String, String)> {
    ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
        .iter()
        .map(|k| (k.to_string(), seen.get(*k).cloned().unwrap_or_default()))
        .collect()
}

const NO_CAPS: &str = "0000000000000000";

/// Whether the suite runs as root (its own `/proc` entry is root's).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// What `seen` says of the server's environment (`read` or `refused`).
fn environ(seen: &BTreeMap<String, String>) -> &str {
    seen.get("environ").map_or("", String::as_str)
}

/// A server (root's, allowing daemons) with a probe agent, and a daemon token for it.
fn daemons_server(name: &str) -> (Berth, String, String) {
    let mut srv = Berth::new(name);
    srv.serve_with(&["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    let token = srv.daemon_token("laptop");
    add_command_agent(&srv, "probe", PROBE_SERVER);
    (srv, url, token)
}

/// A fenced agent of `berth serve` run as root holds no capability, so the kernel's
/// ptrace rules on `/proc` hold for it as for a user's: the server's environment (a
/// secret in it) is unreadable; so is a root daemon's (its token in it) to the agents
/// it runs. The control: the same agent with the user's `"fence": "off"` holds root's
/// capabilities (`CAP_SYS_PTRACE` among them) and reads it, of the server and of the
/// daemon.
#[test]
fn an_agent_of_root_holds_no_capability_and_cannot_read_the_servers_environment() {
    if !is_root() {
        // Not root: the unprivileged test below covers this machine.
        return;
    }
    let mut b = Berth::new("root-caps");
    b.env("BERTH_TEST_SECRET", "s3cret-env-7f");
    b.serve();
    add_command_agent(&b, "probe", PROBE_SERVER);

    let fenced = probe_server(&b, "probe", None);
    let none: Vec<(String, String)> = caps(&fenced)
        .into_iter()
        .map(|(k, _)| (k, NO_CAPS.to_owned()))
        .collect();
    assert_eq!(caps(&fenced), none, "{fenced:?}");
    assert_eq!(environ(&fenced), "refused", "{fenced:?}");

    std::fs::write(b.config.join("settings.jsonc"), r#"{ "fence": "off" }"#).unwrap();
    let open = probe_server(&b, "probe", None);
    assert_eq!(environ(&open), "read", "{open:?}");
    assert_ne!(
        open.get("CapEff").map(String::as_str),
        Some(NO_CAPS),
        "{open:?}"
    );

    // A daemon run as root: its agents, fenced, hold nothing either.
    let (_srv, url, token) = daemons_server("root-caps-srv");
    let mut laptop = Berth::new("root-caps-laptop");
    laptop.env("BERTH_TEST_SECRET", "s3cret-env-7f");
    laptop.daemon(&url, &token, "laptop");
    let fenced = probe_server(&laptop, "probe", None);
    assert_eq!(caps(&fenced), none, "{fenced:?}");
    assert_eq!(environ(&fenced), "refused", "{fenced:?}");
    std::fs::write(
        laptop.config.join("settings.jsonc"),
        r#"{ "fence": "off" }"#,
    )
    .unwrap();
    let open = probe_server(&laptop, "probe", None);
    assert_eq!(environ(&open), "read", "{open:?}");
}

/// A process of `uid` that holds the probe's secret in its environment and is
/// dumpable, as any program the user runs: what an unfenced agent of that user can
/// read, the control for Berth's own processes, which it cannot.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn new(uid: u32) -> Sleeper {
        let child = std::process::Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
                "sleep",
                "600",
            ])
            .env("BERTH_TEST_SECRET", "s3cret-env-7f")
            .spawn()
            .unwrap();
        // Until setpriv has become sleep, its environment is root's to read.
        berth_tests::eventually(30, || {
            let exe = std::fs::read_link(format!("/proc/{}/exe", child.id())).ok()?;
            exe.ends_with("sleep").then_some(())
        })
        .unwrap();
        Sleeper(child)
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// As an unprivileged user: `berth serve`'s and `berth daemon`'s environments are
/// unreadable to the user's agents, fenced or not, and the fenced agent holds no
/// capability. Fenced, Landlock refuses it ptrace access to a process outside its
/// domain; unfenced, the server and the daemon are not dumpable, so the user's own
/// processes need `CAP_SYS_PTRACE` to read them. The control: the unfenced agent
/// reads the environment of another process of the same user, one not Berth's.
#[test]
fn the_servers_environment_is_unreadable_to_an_unprivileged_users_agents() {
    if !is_root() {
        return;
    }
    let sleeper = Sleeper::new(65534);
    let mut b = Berth::new("user-environ");
    b.env("BERTH_TEST_SECRET", "s3cret-env-7f");
    b.as_user(65534);
    b.serve();
    add_command_agent(&b, "probe", PROBE_SERVER);
    let fenced = probe_server(&b, "probe", Some(sleeper.0.id()));
    assert_eq!(environ(&fenced), "refused", "{fenced:?}");
    assert_eq!(
        fenced.get("other").map(String::as_str),
        Some("refused"),
        "{fenced:?}"
    );
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(
            fenced.get(set).map(String::as_str),
            Some(NO_CAPS),
            "{fenced:?}"
        );
    }
    std::fs::write(b.config.join("settings.jsonc"), r#"{ "fence": "off" }"#).unwrap();
    let open = probe_server(&b, "probe", Some(sleeper.0.id()));
    assert_eq!(environ(&open), "refused", "{open:?}");
    assert_eq!(
        open.get("other").map(String::as_str),
        Some("read"),
        "{open:?}"
    );

    // A daemon of the same user: its token is in its environment.
    let (_srv, url, token) = daemons_server("user-environ-srv");
    let mut laptop = Berth::new("user-environ-laptop");
    laptop.env("BERTH_TEST_SECRET", "s3cret-env-7f");
    laptop.as_user(65534);
    laptop.daemon(&url, &token, "laptop");
    let fenced = probe_server(&laptop, "probe", Some(sleeper.0.id()));
    assert_eq!(environ(&fenced), "refused", "{fenced:?}");
    std::fs::write(
        laptop.config.join("settings.jsonc"),
        r#"{ "fence": "off" }"#,
    )
    .unwrap();
    let open = probe_server(&laptop, "probe", Some(sleeper.0.id()));
    assert_eq!(environ(&open), "refused", "{open:?}");
    assert_eq!(
        open.get("other").map(String::as_str),
        Some("read"),
        "{open:?}"
    );
}

/// `berth serve` under a service manager writes to a journal, not a terminal: the web
/// token stays out of it, and `berth ui` prints the address with the token for a
/// script. On a terminal `berth serve` still shows it.
#[test]
fn the_web_token_is_printed_only_to_a_terminal_and_by_berth_ui() {
    let mut b = Berth::new("ui-token");
    // No server yet: `berth ui` says so, as every client command does.
    let out = b.run(&["ui"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("error: berth is not running"), "{err}");
    assert!(err.contains("hint: "), "{err}");

    b.serve();
    let (url, token) = b.serve_info();
    let log = b.serve_log();
    assert!(
        !log.contains(&token),
        "the token is in serve's output: {log}"
    );
    assert!(log.contains("`berth ui`"), "{log}");

    assert_eq!(b.ok(&["ui"]), format!("{url}/?token={token}\n"));
    let v = b.json(&["ui", "--json"]);
    assert_eq!(
        v,
        serde_json::json!({"url": url, "token": token, "open": format!("{url}/?token={token}")})
    );
    let (status, _) = b.web_get("/api/v1/health");
    assert_eq!(
        status, 200,
        "the token `berth ui` printed is the listener's"
    );
    drop(b);

    // On a terminal: the address with its token, as before.
    let b = Berth::new("ui-terminal");
    let listen = format!("127.0.0.1:{}", berth_tests::free_port());
    let t =
        berth_tests::tmux::Tmux::berth(&b, b.root.path(), &["serve", "--listen", &listen], 200, 40);
    let screen = t.wait(30, "the web UI's line", |s| s.contains("web UI"));
    let token = berth_tests::eventually(30, || {
        let text = std::fs::read_to_string(b.home.join("serve.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["token"].as_str().map(str::to_owned)
    })
    .unwrap();
    assert!(
        screen.contains(&format!("http://{listen}/?token={token}")),
        "{screen}"
    );
}

/// One request to `berth serve`'s web listener with these headers; the whole answer.
fn web_request(
    b: &Berth,
    path: &str,
    headers: &[(&str, &str)],
) -> berth_test_support::http::Answer {
    use berth_test_support::http::{Request, read_answer};
    let (url, _) = b.serve_info();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    let mut req = Request::get(path).close();
    for (k, v) in headers {
        req = req.header(k, v);
    }
    req.write_to(&mut s, &addr).unwrap();
    read_answer(&mut std::io::BufReader::new(s)).unwrap()
}

/// The web UI is easy to come back to: the token outlasts a restart until `berth ui
/// --rotate`, which the running listener takes at once (the old token and its cookie
/// stop working); the cookie lasts a month; a browser without the token gets a page
/// saying how to get in, the API its JSON 401; `--open` hands the address to the
/// desktop's opener.
#[test]
fn the_web_token_lasts_until_rotated_and_a_browser_without_it_is_told_how_to_get_in() {
    let mut b = Berth::new("ui-rotate");
    b.serve();
    let (_, first) = b.serve_info();
    let signed_in = web_request(&b, &format!("/?token={first}"), &[]);
    assert_eq!(signed_in.status, 200);
    let cookie = signed_in
        .header("set-cookie")
        .unwrap_or_default()
        .to_owned();
    assert!(cookie.contains("Max-Age=2592000"), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    // A restart keeps the token: the browser's cookie still works.
    b.stop("-TERM");
    b.serve();
    let (_, again) = b.serve_info();
    assert_eq!(again, first, "a restart made a new token");
    let with_cookie = format!("berth_token={first}");
    let a = web_request(&b, "/api/v1/sessions", &[("Cookie", &with_cookie)]);
    assert_eq!(a.status, 200, "{}", a.text());

    // Without a token: a page for a browser, JSON for the API.
    let page = web_request(&b, "/", &[("Accept", "text/html,application/xhtml+xml")]);
    assert_eq!(page.status, 401);
    assert!(
        page.header("content-type")
            .unwrap_or_default()
            .starts_with("text/html")
    );
    assert!(
        page.text().contains("<code>berth ui</code>"),
        "{}",
        page.text()
    );
    assert!(!page.text().contains("<script"), "{}", page.text());
    let api = web_request(&b, "/api/v1/sessions", &[("Accept", "text/html")]);
    assert_eq!(api.status, 401);
    assert_eq!(
        api.json()["error"]["code"],
        "unauthorized",
        "{}",
        api.text()
    );

    // --rotate: a new token, in force at once; the old one and its cookie no longer.
    let rotated = b.json(&["ui", "--rotate", "--json"]);
    let second = rotated["token"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(b.serve_info().1, second, "serve.json names the new token");
    let a = web_request(&b, "/api/v1/sessions", &[("Cookie", &with_cookie)]);
    assert_eq!(a.status, 401, "the old cookie still works");
    let a = web_request(&b, &format!("/api/v1/sessions?token={second}"), &[]);
    assert_eq!(a.status, 200, "{}", a.text());
    // And the next start keeps the rotated one.
    b.stop("-TERM");
    b.serve();
    assert_eq!(b.serve_info().1, second);

    // --open: the address goes to the desktop's opener.
    let bin = b.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opened = b.root.path().join("opened");
    let opener = bin.join("xdg-open");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\necho \"$1\" > {}\n", opened.display()),
    )
    .unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    b.env("PATH", &path);
    let printed = b.ok(&["ui", "--open"]);
    // The opener's `echo >` makes the file, then writes it: read it once written.
    let got = berth_tests::eventually(10, || {
        std::fs::read_to_string(&opened)
            .ok()
            .filter(|s| !s.is_empty())
    })
    .unwrap();
    assert_eq!(got, printed, "the opener got the printed address");
}
