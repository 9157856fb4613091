//! `berth chat` (issue 14), driven through a real pseudo-terminal (tmux) at 80×24 and
//! through a pipe: the header shows `~/…` and never the user name, `/link` binds the
//! shell's directory, a relink from another terminal turns the header, Ctrl-C cancels a
//! long task and the directory is restored, a lock wait shows who holds the directory,
//! and the line mode serves scripts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_command_agent, s, send_detached, task, wait_final, write_script};
use berth_tests::tmux::Tmux;
use berth_tests::{Berth, FAKE_USER, eventually};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

/// An agent that answers `got: <first line>`; a message starting with `slow` makes it
/// record its pid in `$PIDFILE_DIR/pid` and sleep a minute.
fn add_agent(b: &Berth, name: &str) {
    let pid = b.root.path().join("side/pid");
    let script = b.root.path().join("agent.sh");
    write_script(
        &script,
        &format!(
            "#!/bin/sh\nread m\necho \"got: $m\"\ncase \"$m\" in slow*) echo $$ > {}; exec sleep 60;; esac\n",
            pid.display()
        ),
    );
    add_command_agent(b, name, s(&script));
}

/// `berth ARGS` in `dir` with `input` on a pipe for stdin (the line mode), to its end.
fn piped(b: &Berth, dir: &std::path::Path, args: &[&str], input: &str) -> std::process::Output {
    let mut child = b
        .cmd()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn header(screen: &str) -> Vec<&str> {
    screen.lines().take(3).collect()
}

fn session_id(b: &Berth) -> String {
    let list = b.json(&["session", "list", "--json"]);
    list.as_array()
        .and_then(|a| a.last())
        .and_then(|s| s["id"].as_str())
        .expect("a session")
        .to_owned()
}

/// The colour escapes that start the header's first row.
fn header_colours(t: &Tmux) -> String {
    let styled = t.screen_styled();
    let first = styled.lines().next().unwrap_or("");
    first.split("session").next().unwrap_or("").to_owned()
}

#[test]
fn chat_links_from_where_you_stand_and_follows_a_relink_from_elsewhere() {
    let mut b = Berth::new("chat-link");
    let app = b.user_home.join("code/app");
    let api = b.user_home.join("code/api");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&api).unwrap();
    b.serve();
    add_agent(&b, "echo");

    let t = Tmux::berth(
        &b,
        &app,
        &["chat", "--agent", "echo", "--title", "work", "--no-dir"],
        80,
        24,
    );
    let screen = t.wait(20, "an unbound header", |s| s.contains("not bound"));
    assert!(header(&screen)[0].starts_with("session "), "{screen}");
    let id = session_id(&b);

    // `/link` without a path binds the shell's directory; Tab completes the command.
    t.type_text("/li");
    t.keys(&["Tab"]);
    t.wait(5, "the completed command", |s| {
        s.lines().any(|l| l.trim_end() == "› /link")
    });
    t.keys(&["Enter"]);
    let screen = t.wait(10, "the header on ~/code/app", |s| {
        header(s)[1].starts_with("dir ~/code/app · in-place")
    });
    assert!(
        !screen.contains(FAKE_USER),
        "the user name shows:\n{screen}"
    );
    let session = b.json(&["session", "show", &id, "--json"]);
    assert_eq!(
        session["binding"]["dir"].as_str(),
        Some(s(&std::fs::canonicalize(&app).unwrap())),
        "{session}"
    );
    let bound_colours = header_colours(&t);

    // A message goes to the agent in that directory; its answer streams in.
    t.type_text("hello there");
    t.keys(&["Enter"]);
    t.wait(20, "the agent's answer", |s| s.contains("got: hello there"));
    t.wait(20, "the task's end", |s| s.contains("succeeded"));

    // Another terminal relinks the session: the header follows, in another colour.
    b.ok(&["session", "link", &id, s(&api)]);
    let screen = t.wait(10, "the header on ~/code/api", |s| {
        header(s)[1].starts_with("dir ~/code/api")
    });
    assert!(
        header(&screen)[2].contains("relinked from another terminal"),
        "{screen}"
    );
    let relinked_colours = header_colours(&t);
    assert_ne!(
        bound_colours, relinked_colours,
        "the header did not change colour"
    );
    assert!(!screen.contains(FAKE_USER), "{screen}");

    // Paths complete too, `~` kept as typed.
    t.type_text("/link ~/code/a");
    t.keys(&["Tab"]);
    t.wait(5, "both candidates and their common prefix", |s| {
        s.contains("~/code/api/  ~/code/app/") && s.contains("› /link ~/code/ap")
    });
    t.type_text("p");
    t.keys(&["Tab"]);
    t.wait(5, "the completed path", |s| {
        s.contains("› /link ~/code/app/")
    });
    t.keys(&["Enter"]);
    t.wait(10, "the header back on ~/code/app", |s| {
        header(s)[1].starts_with("dir ~/code/app")
    });

    // A multi-line message: Ctrl-J breaks the line, Enter sends both.
    t.type_text("first line");
    t.keys(&["C-j"]);
    t.type_text("second line");
    t.wait(5, "two input rows", |s| {
        s.contains("› first line\n  second line")
    });
    t.keys(&["Enter"]);
    t.wait(20, "the agent's answer", |s| s.contains("got: first line"));

    // A paste keeps its line breaks and is not sent until Enter.
    t.keys(&["C-c"]);
    t.paste("pasted one\npasted two");
    t.wait(5, "the pasted rows", |s| {
        s.contains("› pasted one\n  pasted two")
    });
    t.keys(&["C-c"]);

    // History: Up brings the last message back.
    t.keys(&["Up"]);
    t.wait(5, "the recalled message", |s| {
        s.contains("› first line\n  second line")
    });
    // Ctrl-C on a typed line clears it.
    t.keys(&["C-c"]);
    t.wait(5, "an empty input", |s| {
        s.lines().any(|l| l.trim_end() == "›")
    });

    // Resizes: the header stays on top, the input at the bottom.
    t.resize(60, 16);
    let screen = t.wait(5, "a 60×16 layout", |s| {
        let rows: Vec<&str> = s.lines().filter(|r| !r.trim().is_empty()).collect();
        rows.iter().all(|r| r.chars().count() <= 60)
            && rows.first().is_some_and(|r| r.starts_with("session "))
            && rows.last().is_some_and(|r| r.starts_with("›"))
    });
    assert!(
        screen.lines().nth(1).unwrap().starts_with("dir ~/code/app"),
        "{screen}"
    );
    t.resize(80, 24);
    t.wait(5, "the 80×24 layout again", |s| s.lines().count() >= 20);

    // Two Ctrl-C on an idle, empty prompt quit; the session stays.
    t.keys(&["C-c"]);
    t.wait(5, "the quit prompt", |s| {
        s.contains("press Ctrl-C again to quit")
    });
    t.keys(&["C-c"]);
    t.wait(10, "berth chat's exit", |s| s.contains("EXIT=0"));
    b.ok(&["session", "show", &id]);
}

#[test]
fn ctrl_c_cancels_the_running_task_and_lock_waits_show_the_holder() {
    let mut b = Berth::new("chat-cancel");
    // The agent writes its pid beside the test (a side channel the fence must allow).
    berth_tests::steps::side_channel(&b);
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("README"), "hello\n").unwrap();
    b.serve();
    add_agent(&b, "echo");
    let id = b.json(&[
        "session",
        "new",
        "--agent",
        "echo",
        "--dir",
        s(&app),
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // An earlier exchange, replayed when the chat opens.
    b.ok(&["send", &id, "earlier question"]);
    let before: Vec<_> = std::fs::read_dir(&app)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();

    let t = Tmux::berth(&b, &app, &["chat", &id[..8]], 80, 24);
    let screen = t.wait(20, "the replayed transcript", |s| {
        s.contains("you › earlier question") && s.contains("got: earlier question")
    });
    assert!(header(&screen)[1].starts_with("dir ~/code/app"), "{screen}");
    // At 80 columns, the fence comes before anything that may be cut.
    let first = header(&screen)[0].to_owned();
    assert!(
        first.starts_with(&format!("session {} · fenced · agent echo", &id[..8])),
        "{screen}"
    );

    // A long task; Ctrl-C cancels it.
    t.type_text("slow work please");
    t.keys(&["Enter"]);
    let pidfile = b.root.path().join("side/pid");
    let pid: u32 = eventually(20, || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    })
    .expect("the agent started");
    t.wait(10, "the running task in the header", |s| {
        header(s)[2].contains("running")
    });
    t.keys(&["C-c"]);
    let screen = t.wait(20, "the cancelled task", |s| s.contains("cancelled"));
    assert!(screen.contains("cancelling task"), "{screen}");
    let tasks = b.json(&["task", "list", "--session", &id, "--json"]);
    let last = tasks.as_array().unwrap().last().unwrap().clone();
    let last = wait_final(&b, &id, last["id"].as_str().unwrap());
    assert_eq!(last["status"], "cancelled", "{last}");
    assert!(
        eventually(10, || (!berth_tests::steps::alive(pid)).then_some(())).is_some(),
        "the agent {pid} outlived the cancel"
    );
    let after: Vec<_> = std::fs::read_dir(&app)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "the directory is as it was");
    t.wait(10, "an idle header", |s| header(s)[2].starts_with("idle"));

    // Another session holds the directory: this one's task waits, and says for whom.
    std::fs::remove_file(&pidfile).unwrap();
    let other = b.json(&[
        "session",
        "new",
        "--agent",
        "echo",
        "--dir",
        s(&app),
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let holder = send_detached(&b, &other, "slow holder");
    eventually(20, || std::fs::read_to_string(&pidfile).ok()).expect("the holder started");
    let idle_colours = header_colours(&t);
    t.type_text("after the lock");
    t.keys(&["Enter"]);
    let screen = t.wait(20, "the lock wait in the header", |s| {
        header(s)[2].contains("waits for the directory") && header(s)[2].contains(&holder[..8])
    });
    assert!(!screen.contains(FAKE_USER), "{screen}");
    assert_ne!(
        idle_colours,
        header_colours(&t),
        "a wait changes the colour"
    );
    b.ok(&["task", "cancel", &holder]);
    t.wait(20, "the answer once the lock is free", |s| {
        s.contains("got: after the lock")
    });
    assert_eq!(task(&b, &other, &holder).unwrap()["status"], "cancelled");
}

#[test]
fn the_line_mode_serves_a_pipe() {
    let mut b = Berth::new("chat-line");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    b.serve();
    add_agent(&b, "echo");

    let run = |args: &[&str], input: &str| piped(&b, &app, args, input);

    let out = run(
        &["chat", "--agent", "echo"],
        "hello\n/link\ncontinued \\\nline\n/tasks\n/nonsense\n/settings\n/mode worktree\n/unlink\n/new second\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("got: hello"), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("bound to ~/code/app (in-place)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("directory ~/code/app"),
        "the header again: {stdout}"
    );
    assert!(stdout.contains("got: continued"), "{stdout}");
    assert_eq!(
        stdout.matches("succeeded").count(),
        2,
        "the /tasks table lists both: {stdout}"
    );
    assert!(stderr.contains("unknown command /nonsense"), "{stderr}");
    assert!(
        stdout.contains("settings the next message of session"),
        "{stdout}"
    );
    assert!(stdout.contains("(worktree); it applies"), "{stdout}");
    assert!(
        stdout.contains("unbound: the next message runs"),
        "{stdout}"
    );
    assert!(stdout.contains("new session "), "{stdout}");
    let sessions = b.json(&["session", "list", "--json"]);
    assert_eq!(sessions.as_array().unwrap().len(), 2, "{sessions}");
    assert_eq!(sessions[1]["title"], "second", "{sessions}");
    assert!(!stdout.contains(FAKE_USER) && !stderr.contains(FAKE_USER));
    assert_eq!(out.status.code(), Some(1), "a failed command fails the run");

    // --json: one document per line, the session first, each task's last.
    let id = b.json(&["session", "list", "--json"])[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = run(&["chat", &id, "--json"], "again\n");
    assert_eq!(out.status.code(), Some(0));
    let docs: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(docs[0]["session"]["id"], id.as_str());
    assert!(docs.iter().any(|d| d["payload"]["text"] == "got: again"));
    assert_eq!(docs.last().unwrap()["task"]["status"], "succeeded");
}

/// On a daemon's machine `berth chat` goes through the daemon's socket: `/link` binds
/// there and the agent runs there. Seen from the server's machine, the header turns
/// when that machine goes offline, and a message waits for it, naming it.
#[test]
fn chat_through_a_daemon_and_a_machine_going_offline() {
    let mut srv = Berth::new("chat-srv");
    srv.env("BERTH_DAEMON_WINDOW_MS", "1500");
    srv.serve_with(&["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    let token = srv.daemon_token("a");
    let mut laptop = Berth::new("chat-laptop");
    laptop.daemon(&url, &token, "laptop-a");
    add_agent(&srv, "echo");
    let app = laptop.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();

    let out = piped(
        &laptop,
        &app,
        &["chat", "--agent", "echo"],
        "/link\nfrom the laptop\n",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("machine   laptop-a"), "{stdout}");
    assert!(stdout.contains("got: from the laptop"), "{stdout}");
    let id = session_id(&srv);

    // From the server's machine: the binding is the laptop's, shown as recorded.
    let t = Tmux::berth(&srv, srv.root.path(), &["chat", &id], 80, 24);
    t.wait(20, "the laptop's binding", |s| {
        header(s)[1].starts_with("dir ~/code/app · in-place · on laptop-a · ok")
    });
    let online = header_colours(&t);
    assert_eq!(laptop.stop("-TERM").and_then(|s| s.code()), Some(0));
    t.wait(10, "the machine offline", |s| {
        header(s)[1].contains("MACHINE OFFLINE")
    });
    assert_ne!(online, header_colours(&t), "offline changes the colour");
    t.type_text("are you there");
    t.keys(&["Enter"]);
    t.wait(20, "the wait for the machine", |s| {
        header(s)[2].contains("waits for machine laptop-a")
    });
}

/// A newcomer's first chat: started in their project, a new session is bound there
/// (the agent edits the checkout, as `claude` and `codex` would); started in the home,
/// which the rules refuse, it stays unbound and says why; `--no-dir` keeps it unbound.
#[test]
fn a_new_chat_binds_the_directory_it_was_started_in() {
    let mut b = Berth::new("chat-here");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    b.serve();
    add_agent(&b, "echo");
    let real = std::fs::canonicalize(&app).unwrap();

    let out = piped(&b, &app, &["chat", "--agent", "echo"], "hello\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("binding the current directory ~/code/app"),
        "{stderr}"
    );
    assert!(
        stdout.contains("directory ~/code/app"),
        "the header: {stdout}"
    );
    // What the agent may do, told as what holds: the fence, not "not restricted".
    assert!(
        stdout.contains("edits ~/code/app only (fenced; no permission prompts)"),
        "the header: {stdout}"
    );
    let sessions = b.json(&["session", "list", "--json"]);
    assert_eq!(sessions[0]["binding"]["dir"], s(&real), "{sessions}");
    let tasks = b.json(&["task", "list", "--json"]);
    assert_eq!(
        tasks[0]["work_dir"],
        s(&real),
        "the agent ran there: {tasks}"
    );

    // In the home: refused by the rules, so unbound, saying so.
    let out = piped(&b, &b.user_home, &["chat", "--agent", "echo"], "hi\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stderr.contains("not bound: "), "{stderr}");
    assert!(stderr.contains("scratch directory"), "{stderr}");
    // --no-dir, in the project: unbound.
    let out = piped(&b, &app, &["chat", "--agent", "echo", "--no-dir"], "hi\n");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let sessions = b.json(&["session", "list", "--json"]);
    let sessions = sessions.as_array().unwrap();
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    assert!(sessions[1]["binding"].is_null(), "{:?}", sessions[1]);
    assert!(sessions[2]["binding"].is_null(), "{:?}", sessions[2]);
    // --mode asks for the binding: in the home it is the command's error.
    let out = piped(
        &b,
        &b.user_home,
        &["chat", "--agent", "echo", "--mode", "in-place"],
        "hi\n",
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("hint: "),
        "{out:?}"
    );
}

/// Ctrl-C on `berth send` cancels its task and says so (the agent stops, the task ends
/// `cancelled`, exit 130) instead of leaving the agent running; `--detach` prints how
/// to follow and cancel; `task cancel` waits for the end and says it once.
#[test]
fn ctrl_c_on_send_cancels_its_task_and_detach_says_how_to_follow() {
    let mut b = Berth::new("send-cancel");
    berth_tests::steps::side_channel(&b);
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    b.serve();
    add_agent(&b, "echo");
    let id = b.json(&["session", "new", "--agent", "echo", "--json"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pid_file = b.root.path().join("side/pid");

    let child = b
        .cmd()
        .args(["send", &id, "slow one"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent: i32 = eventually(20, || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    })
    .expect("the agent started");
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(stderr.contains("berth: cancelling task "), "{stderr}");
    assert!(stderr.contains(" cancelled"), "{stdout}\n{stderr}");
    let tasks = b.json(&["task", "list", "--json"]);
    assert_eq!(tasks[0]["status"], "cancelled", "{tasks}");
    // Gone (a zombie on its way to being reaped counts as gone).
    let gone = eventually(20, || {
        let stat = std::fs::read_to_string(format!("/proc/{agent}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        matches!(state, None | Some('Z')).then_some(())
    });
    assert!(gone.is_some(), "the agent {agent} still runs");

    // --detach: the id, and the commands to follow and cancel it.
    std::fs::remove_file(&pid_file).unwrap();
    let out = b.ok(&["send", &id, "slow two", "--detach"]);
    let task_id = out
        .split_whitespace()
        .nth(1)
        .expect("task ID queued …")
        .to_owned();
    assert!(
        out.contains(&format!("berth task cancel {task_id}")),
        "{out}"
    );
    assert!(out.contains("berth session log "), "{out}");
    eventually(20, || pid_file.exists().then_some(())).expect("the agent started");
    // `task cancel` waits for the end: one line, the final status.
    let out = b.ok(&["task", "cancel", &task_id]);
    assert_eq!(out, format!("task {task_id} is cancelled\n"));
}

/// `berth session log` prints the transcript as the chat shows it and ends; `--json`
/// prints the session, then one event a line; `--follow` prints what comes next.
#[test]
fn session_log_prints_the_transcript_and_follows_it() {
    let mut b = Berth::new("session-log");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    b.serve();
    add_agent(&b, "echo");
    let id = b.json(&[
        "session",
        "new",
        "--agent",
        "echo",
        "--dir",
        s(&app),
        "--json",
    ])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    b.ok(&["send", &id, "first question"]);
    b.ok(&["send", &id, "second question"]);

    let out = b.ok(&["session", "log", &id[..8]]);
    assert!(out.contains("directory ~/code/app"), "the header: {out}");
    let first = out.find("you › first question").expect(&out);
    let answer = out.find("got: first question").expect(&out);
    let second = out.find("you › second question").expect(&out);
    assert!(first < answer && answer < second, "in order: {out}");
    assert!(out.contains("got: second question"), "{out}");
    assert_eq!(
        out.matches(" succeeded").count(),
        2,
        "each task's end: {out}"
    );
    assert!(!out.contains(FAKE_USER), "{out}");

    let out = b.ok(&["session", "log", &id, "--json"]);
    let docs: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(docs[0]["session"]["id"], id.as_str());
    let kinds: Vec<&str> = docs[1..]
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "message").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "task").count(),
        2,
        "{kinds:?}"
    );
    let seqs: Vec<i64> = docs[1..]
        .iter()
        .map(|d| d["seq"].as_i64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    // --follow: the stored transcript, then a message sent meanwhile.
    let mut follower = b
        .cmd()
        .args(["session", "log", &id, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(&mut stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |needle: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => {}
                Err(e) => panic!("no line with {needle:?}: {e}"),
            }
        }
    };
    wait_for("got: second question");
    b.ok(&["send", &id, "third question"]);
    wait_for("you › third question");
    wait_for("got: third question");
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow ended by itself"
    );
    follower.kill().unwrap();
    let _ = follower.wait();
}

/// `/undo` in the chat puts back what the last task changed and says so, a file a line.
#[test]
fn undo_in_the_chat_puts_back_the_last_task() {
    let mut b = Berth::new("chat-undo");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(app.join("notes.md"), "before\n").unwrap();
    b.serve();
    add_command_agent(
        &b,
        "writer",
        "read m; echo \"$m\" > notes.md; echo new > added.txt",
    );
    let out = piped(&b, &app, &["chat", "--agent", "writer"], "after\n/undo\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(": 2 files put back as before it"),
        "{stdout}"
    );
    assert!(stdout.contains("  restored      notes.md"), "{stdout}");
    assert!(stdout.contains("  removed       added.txt"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(app.join("notes.md")).unwrap(),
        "before\n"
    );
    assert!(!app.join("added.txt").exists());
    // Nothing left to undo: said, not a crash.
    let out = piped(&b, &app, &["chat", &session_id(&b), "--line"], "/undo\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already undone"), "{stderr}");
}
