//! Nothing a fenced agent plants in git runs outside the fence (issue 51): a fenced
//! command agent bound to `~/code/app` (a repository) plants seven traps, each a way
//! git finds a configuration or runs a program, and a second one `git init`s a plain
//! directory with a monitor. Then Berth's next message (its own git steps) and the
//! user's own `git status` and `git add -A` in every repository there run; no trap's
//! marker (outside the directories) may appear. The run is a denial by the fence and
//! fails `permission_denied`, naming each file put back.
//!
//! The control: the same agents with the user's `"fence": "off"` (no guard). Berth's
//! own next message still runs no trap (its git is walled off), and the user's git
//! then runs every one: each trap is live.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::steps::{add_command_agent, new_session, s, send_json};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The traps, in the repository `~/code/app` (`$M` is the markers' directory).
const TRAPS: &str = r#"
set -u
q() { git "$@" >/dev/null 2>&1; }
# t1: a new nested repository whose monitor is a command.
mkdir -p t1 && q -C t1 init -q && q -C t1 config core.fsmonitor "touch $M/t1"
# t2: the top repository's commondir, pointing at a git directory of the agent's.
mkdir -p c2 && cp -r .git/objects .git/refs .git/HEAD c2/ &&
  printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = touch %s/t2\n' "$M" > c2/config &&
  echo ../c2 > .git/commondir
# t4: a nested work tree whose .git file points at a git directory elsewhere in the tree.
q init -q --separate-git-dir="$PWD/g4" t4 && q -C t4 config core.fsmonitor "touch $M/t4"
# t5: an include of a file in the tree.
mkdir -p t5 && q -C t5 init -q && printf '[core]\n\tfsmonitor = touch %s/t5\n' "$M" > team.gitconfig &&
  q -C t5 config include.path ../../team.gitconfig
# t6: a hook that runs whenever git writes the index.
mkdir -p t6 && q -C t6 init -q && echo x > t6/f &&
  printf '#!/bin/sh\ntouch %s/t6\n' "$M" > t6/.git/hooks/post-index-change && chmod +x t6/.git/hooks/post-index-change
# t7: an attribute that selects a filter, and the filter a command.
mkdir -p t7 && q -C t7 init -q && echo x > t7/f && mkdir -p t7/.git/info &&
  echo '* filter=evil' > t7/.git/info/attributes &&
  q -C t7 config filter.evil.clean "sh -c 'touch $M/t7; cat'"
# t8: a linked worktree's own configuration (extensions.worktreeConfig).
mkdir -p t8 && q -C t8 init -q && q -C t8 config extensions.worktreeConfig true &&
  printf '[core]\n\tfsmonitor = touch %s/t8\n' "$M" > t8/.git/config.worktree
echo planted
"#;

/// The fresh repository in a plain directory.
const FRESH: &str = r#"
git init -q >/dev/null 2>&1 && git config core.fsmonitor "touch $M/t3" && echo planted
"#;

/// The traps' names: the markers each would leave.
const MARKS: [&str; 8] = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"];

/// Where the control proves the guard puts each trap back: the files named by the
/// fenced run's denials.
const PUT_BACK: [&str; 9] = [
    "~/code/app/t1/.git/config",
    "~/code/app/.git/commondir",
    "~/code/app/c2/config",
    "~/code/app/g4/config",
    "~/code/app/team.gitconfig",
    "~/code/app/t6/.git/hooks/post-index-change",
    "~/code/app/t7/.git/config",
    "~/code/app/t7/.git/info/attributes",
    "~/code/app/t8/.git/config.worktree",
];

struct World {
    app: PathBuf,
    plain: PathBuf,
    marks: PathBuf,
    app_session: String,
    plain_session: String,
}

fn world(b: &mut Berth, unprivileged: bool, fence_off: bool) -> World {
    let (app, plain, marks) = directories(b, fence_off);
    if unprivileged {
        b.as_user(65534);
    }
    b.serve();
    add_agents(b, &marks);
    World {
        app_session: new_session(b, "planter", Some(&app)),
        plain_session: new_session(b, "fresh", Some(&plain)),
        app,
        plain,
        marks,
    }
}

/// The project (a repository) and the plain directory in `b`'s home, and the marks
/// directory a trap that runs writes to.
fn directories(b: &Berth, fence_off: bool) -> (PathBuf, PathBuf, PathBuf) {
    let app = b.user_home.join("code/app");
    let plain = b.user_home.join("code/plain");
    let marks = b.root.path().join("marks");
    for d in [&app, &plain, &marks] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(plain.join("notes.txt"), "n\n").unwrap();
    std::fs::write(app.join("main.rs"), "fn main() {}\n").unwrap();
    git_as(None, &app, &["init", "-q"]);
    git_as(None, &app, &["add", "-A"]);
    git_as(None, &app, &["commit", "-q", "-m", "one"]);
    if fence_off {
        std::fs::write(b.config.join("settings.jsonc"), r#"{ "fence": "off" }"#).unwrap();
    }
    (app, plain, marks)
}

/// The two agents, registered on the server `b`.
fn add_agents(b: &Berth, marks: &Path) {
    let env = format!("export M='{}'\n", s(marks));
    add_command_agent(b, "planter", &format!("{env}{TRAPS}"));
    add_command_agent(b, "fresh", &format!("{env}{FRESH}"));
}

/// The user's own git, as the user Berth runs as (git refuses a repository another
/// user owns, which would prove nothing), with no global configuration.
fn git_as(uid: Option<u32>, dir: &Path, args: &[&str]) -> std::process::Output {
    let mut c = match uid {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "git",
            ]);
            c
        }
        None => Command::new("git"),
    };
    c.args(["-c", "user.name=T", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir);
    c.output().unwrap()
}

/// Every repository in the two directories (work trees with a `.git`).
fn repositories(w: &World) -> Vec<PathBuf> {
    let mut out = vec![w.app.clone(), w.plain.clone()];
    for e in std::fs::read_dir(&w.app).unwrap() {
        let p = e.unwrap().path();
        if p.join(".git").symlink_metadata().is_ok() {
            out.push(p);
        }
    }
    out
}

fn fired(w: &World) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(&w.marks)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn plant(b: &Berth, w: &World) -> (Value, Value) {
    let (_, events, app) = send_json(b, &w.app_session, "plant");
    assert!(
        events.iter().any(|e| e["payload"]["text"] == "planted"),
        "the agent planted its traps: {events:?}"
    );
    let (_, _, plain) = send_json(b, &w.plain_session, "plant");
    (app, plain)
}

/// Berth's next message in each session, then the user's `git status` and
/// `git add -A` in every repository.
fn then_git_runs(b: &Berth, w: &World) -> Vec<String> {
    for session in [&w.app_session, &w.plain_session] {
        let (_, _, task) = send_json(b, session, "next");
        assert!(task["status"].is_string(), "{task}");
    }
    assert_eq!(
        fired(w),
        Vec::<String>::new(),
        "Berth's own git steps ran a trap"
    );
    for repo in repositories(w) {
        let _ = git_as(b.uid(), &repo, &["status"]);
        let _ = git_as(b.uid(), &repo, &["add", "-A"]);
    }
    fired(w)
}

fn denied(task: &Value) -> Vec<String> {
    let mut out: Vec<String> = task["denials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            assert_eq!(d["by"], "fence", "{d}");
            d["target"].as_str().unwrap().to_owned()
        })
        .collect();
    out.sort();
    out
}

fn fenced_battery(unprivileged: bool) {
    let mut b = Berth::new(if unprivileged {
        "traps-nobody"
    } else {
        "traps"
    });
    let w = world(&mut b, unprivileged, false);
    all_put_back_and_none_runs(&b, &w);
}

/// The traps planted through `b` (a server, or a daemon's machine) are put back, and
/// neither Berth's next message nor the user's git runs one.
fn all_put_back_and_none_runs(b: &Berth, w: &World) {
    let (app, plain) = plant(b, w);
    assert_eq!(app["status"], "failed", "{app}");
    assert_eq!(app["error_code"], "permission_denied", "{app}");
    let got = denied(&app);
    for want in PUT_BACK {
        assert!(
            got.iter().any(|g| g == want),
            "{want} not put back: {got:?}\n{app}"
        );
    }
    assert_eq!(plain["error_code"], "permission_denied", "{plain}");
    assert_eq!(denied(&plain), ["~/code/plain/.git/config"], "{plain}");
    assert_eq!(then_git_runs(b, w), Vec::<String>::new(), "a trap ran");
    // What the agent did that runs nothing stays: its repositories and files.
    assert!(w.app.join("t1/.git/HEAD").exists());
    assert!(w.app.join("t6/f").exists());
    assert!(w.plain.join(".git/HEAD").exists());
}

#[test]
fn no_trap_a_fenced_agent_plants_in_git_runs_through_berth_or_the_users_git() {
    fenced_battery(false);
}

#[test]
fn no_trap_runs_through_berth_serve_run_by_an_unprivileged_user() {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        // Not root: the test above already runs unprivileged.
        return;
    }
    fenced_battery(true);
}

/// On a daemon's machine, as on the server's: the agent runs there, and so do the
/// guard and Berth's own git steps.
#[test]
fn no_trap_runs_through_a_daemon() {
    let mut srv = Berth::new("traps-srv");
    srv.env("BERTH_DAEMON_CLAIM_WAIT_MS", "3000");
    srv.serve_with(&["--allow-daemons"]);
    let (url, _) = srv.serve_info();
    let token = srv.daemon_token("laptop");
    let mut laptop = Berth::new("traps-laptop");
    let (app, plain, marks) = directories(&laptop, false);
    laptop.daemon(&url, &token, "laptop");
    add_agents(&srv, &marks);
    let w = World {
        app_session: new_session(&laptop, "planter", Some(&app)),
        plain_session: new_session(&laptop, "fresh", Some(&plain)),
        app,
        plain,
        marks,
    };
    all_put_back_and_none_runs(&laptop, &w);
}

#[test]
fn with_the_fence_off_every_trap_is_live_but_berths_own_git_runs_none() {
    let mut b = Berth::new("traps-off");
    let w = world(&mut b, false, true);
    let (app, plain) = plant(&b, &w);
    assert_eq!(app["status"], "succeeded", "{app}");
    assert_eq!(plain["status"], "succeeded", "{plain}");
    assert_eq!(then_git_runs(&b, &w), MARKS, "each trap is live");
}
