//! Running in place, in a worktree and in scratch: sidecars restored byte for byte,
//! swaps refused, settings read at every exchange, cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::ErrorCode;
use berth_core::api::TaskStatus;
use berth_local_agent::dir::lock::DirLocks;
use berth_web::executor::{AgentKind, ExecEvent, Placement};
use common::fakes::{self, calls};
use common::{Sandbox, agent, in_place, lp, run, task, tree};
use std::os::unix::fs::symlink;
use std::process::Command;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[tokio::test]
async fn sidecars_leave_the_directory_byte_identical_except_the_agents_changes() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    // The user's own CLAUDE.md (no final newline) and their own skill named like the plugin.
    std::fs::write(dir.join("CLAUDE.md"), "# My project\nBe terse.").unwrap();
    std::fs::create_dir_all(dir.join(".claude/skills/review")).unwrap();
    std::fs::write(dir.join(".claude/skills/review/SKILL.md"), "mine\n").unwrap();
    std::fs::write(dir.join("a.txt"), "data").unwrap();
    let skill = sb.dir("plugins/review");
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: review\n---\nReview well.\n",
    )
    .unwrap();
    std::fs::create_dir_all(skill.join("refs")).unwrap();
    std::fs::write(skill.join("refs/guide.md"), "guide").unwrap();
    let cfg_dir = sb.dir("berth-config");
    std::fs::write(
        cfg_dir.join("settings.jsonc"),
        format!(
            "{{ \"plugins\": [{:?}], {} }}",
            skill.display().to_string(),
            sb.fence()
        ),
    )
    .unwrap();
    let before = tree(&dir);
    let mut cfg = sb.cfg();
    cfg.brief_arg_limit = 0; // force the CLAUDE.md block
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let (bin, log) = fakes::claude(&sb);
    let (out, _) = run(
        &exec,
        task(
            "t1",
            "s1",
            agent(AgentKind::Claude, &[&bin]),
            "please write",
            in_place(&dir),
        ),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
    let seen = &calls(&log)[0];
    let md = seen["claude_md"].as_str().unwrap();
    assert!(
        md.starts_with("# My project\nBe terse.\n\n<!-- berth:begin t1"),
        "{md}"
    );
    assert!(
        md.contains("# Berth session") && md.contains(".claude/skills/review-berth"),
        "{md}"
    );
    assert_eq!(
        seen["skills"],
        serde_json::json!(["review", "review-berth"])
    );
    let argv: Vec<String> = serde_json::from_value(seen["argv"].clone()).unwrap();
    assert!(!argv.contains(&"--append-system-prompt".to_owned()));
    let mut expected = before.clone();
    expected.insert("agent-made.txt".into(), b"made by the agent\n".to_vec());
    assert_eq!(tree(&dir), expected);
    assert!(
        tree(&cfg.journal_dir())
            .values()
            .all(|content| content.is_empty()),
        "nothing is left in flight in the journal after cleanup"
    );
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_while_waiting_is_refused_and_never_run() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let elsewhere = sb.dir("work/elsewhere");
    let marker_log = sb.side().join("marker");
    let script = sb.script(
        "mark.sh",
        &format!(
            "#!/bin/sh\necho ran > marker-here\necho ran >> {}\n",
            marker_log.display()
        ),
    );
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    // Another holder (as another Berth process would) keeps the directory busy.
    let other = DirLocks::new(cfg.lock_dir.clone()).unwrap();
    let (_c, mut never) = watch::channel(false);
    let held = other
        .acquire(&lp(&dir), "other-task", |_| {}, &mut never)
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_cancel_tx, cancel) = watch::channel(false);
    let t = task(
        "t1",
        "s1",
        agent(AgentKind::Command, &[&script]),
        "x",
        in_place(&dir),
    );
    let running = tokio::spawn({
        let exec = exec.clone();
        async move { exec.run_task(t, tx, cancel).await }
    });
    let first = rx.recv().await.unwrap();
    assert_eq!(
        first,
        ExecEvent::Status {
            status: TaskStatus::WaitingLock,
            wait_reason: Some("waiting for the directory: in use by task other-task".to_owned()),
        }
    );
    std::fs::rename(&dir, sb.root.join("work/app-moved")).unwrap();
    symlink(&elsewhere, &dir).unwrap();
    drop(held);
    let out = running.await.unwrap();
    assert_eq!(out.status, TaskStatus::Refused);
    assert_eq!(out.code, Some(ErrorCode::PathChanged));
    assert!(!marker_log.exists(), "the agent never ran");
    assert!(tree(&elsewhere).is_empty());
    assert!(tree(&sb.root.join("work/app-moved")).is_empty());
}

#[tokio::test]
async fn a_project_plugin_is_in_the_brief_only_while_bound_there() {
    let sb = Sandbox::new();
    let bound = sb.dir("work/app");
    let other = sb.dir("work/other");
    std::fs::create_dir_all(bound.join(".berth")).unwrap();
    std::fs::write(bound.join(".berth/frag.md"), "PROJECT-FRAGMENT-7\n").unwrap();
    std::fs::write(
        bound.join(".berth/settings.jsonc"),
        "// project\n{ \"plugins\": [\"frag.md\"], \"env\": {\"FROM_PROJECT\": \"yes\"} }",
    )
    .unwrap();
    std::fs::write(
        sb.dir("berth-config").join("settings.jsonc"),
        format!(
            "{{ \"prompt\": {{ \"append\": \"USER-APPEND-3\" }}, {} }}",
            sb.fence()
        ),
    )
    .unwrap();
    let briefs = sb.side().join("briefs");
    let script = sb.script(
        "brief.sh",
        &format!(
            "#!/bin/sh\nprintf '%s\\n' \"$BERTH_BRIEF\" | grep -o -e PROJECT-FRAGMENT-7 -e USER-APPEND-3 | tr '\\n' ' ' >> {b}\necho \"env=${{FROM_PROJECT:-no}}\" >> {b}\n",
            b = briefs.display()
        ),
    );
    let exec = sb.executor();
    // The project's env applies once the user trusts its directory
    // (tests/tests/suite/trust.rs covers the untrusted side).
    let real = std::fs::canonicalize(&bound).unwrap();
    let real = real.to_str().unwrap();
    berth_local_agent::settings::trust::TrustStore::new(&sb.cfg().berth_home)
        .trust(
            real,
            berth_local_agent::settings::trust::identity_of(real).unwrap(),
        )
        .unwrap();
    let spec = agent(AgentKind::Command, &[&script]);
    for (id, dir) in [("t1", &bound), ("t2", &other), ("t3", &bound)] {
        let (out, _) = run(&exec, task(id, "s1", spec.clone(), "x", in_place(dir))).await;
        assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
    }
    assert_eq!(
        std::fs::read_to_string(&briefs).unwrap(),
        "USER-APPEND-3 PROJECT-FRAGMENT-7 env=yes\nUSER-APPEND-3 env=no\nUSER-APPEND-3 PROJECT-FRAGMENT-7 env=yes\n"
    );
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=T", "-c", "user.email=t@t"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn worktree_runs_commit_on_a_session_branch_and_plain_dirs_are_refused() {
    let sb = Sandbox::new();
    let repo = sb.dir("work/repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "hi\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let script = sb.script(
        "wt.sh",
        "#!/bin/sh\necho \"turn $BERTH_TASK_ID\" >> notes.txt\n",
    );
    let exec = sb.executor();
    let spec = agent(AgentKind::Command, &[&script]);
    let session = "0199abcd-ef01-7000-8000-000000000001";
    let place = Placement::Worktree {
        dir: lp(&repo),
        identity: None,
    };
    let wt = sb.cfg().berth_home.join("worktrees").join(session);
    for id in ["t1", "t2"] {
        let (out, _) = run(&exec, task(id, session, spec.clone(), "x", place.clone())).await;
        assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
        assert_eq!(out.branch.as_deref(), Some("berth/0199abcd"));
        assert_eq!(out.work_dir.as_deref(), Some(wt.to_str().unwrap()));
    }
    assert_eq!(
        git(&repo, &["log", "--format=%s", "berth/0199abcd"]),
        "berth: task t2\nberth: task t1\ninit"
    );
    assert!(
        !repo.join("notes.txt").exists(),
        "the user's checkout is untouched"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    let plain = sb.dir("work/plain");
    let (out, _) = run(
        &exec,
        task(
            "t3",
            session,
            spec,
            "x",
            Placement::Worktree {
                dir: lp(&plain),
                identity: None,
            },
        ),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Refused);
    assert_eq!(out.code, Some(ErrorCode::NotAGitRepo));
}

#[tokio::test]
async fn scratch_runs_in_a_per_session_directory_kept_across_turns() {
    let sb = Sandbox::new();
    let script = sb.script("s.sh", "#!/bin/sh\necho x >> turns\nwc -l < turns\n");
    let exec = sb.executor();
    let spec = agent(AgentKind::Command, &[&script]);
    let scratch = sb.cfg().berth_home.join("scratch/s1");
    for (id, n) in [("t1", "1"), ("t2", "2")] {
        let (out, events) = run(&exec, task(id, "s1", spec.clone(), "x", Placement::Scratch)).await;
        assert_eq!(out.work_dir.as_deref(), Some(scratch.to_str().unwrap()));
        assert!(
            events.contains(&ExecEvent::Agent(berth_core::event::AgentEvent::Text {
                text: n.into()
            }))
        );
    }
    // A session id that could leave the scratch directory cannot reach the executor:
    // it is not a session id at all.
    drop(spec);
    assert!(berth_core::SessionId::parse("../evil").is_err());
}

fn alive(pid: i32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .status()
        .unwrap()
        .success()
}

#[tokio::test]
async fn cancelling_a_running_task_stops_its_whole_process_group_and_restores() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let pidfile = sb.side().join("pid");
    let script = sb.script(
        "long.sh",
        &format!(
            "#!/bin/sh\nsleep 60 &\necho $! > {}\necho started\nwait\n",
            pidfile.display()
        ),
    );
    let exec = sb.executor();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (cancel_tx, cancel) = watch::channel(false);
    let t = task(
        "t1",
        "s1",
        agent(AgentKind::Command, &[&script]),
        "x",
        in_place(&dir),
    );
    let running = tokio::spawn({
        let exec = exec.clone();
        async move { exec.run_task(t, tx, cancel).await }
    });
    while let Some(e) = rx.recv().await {
        if matches!(&e, ExecEvent::Agent(berth_core::event::AgentEvent::Text { text }) if text == "started")
        {
            break;
        }
    }
    let grandchild: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(grandchild));
    cancel_tx.send(true).unwrap();
    let out = tokio::time::timeout(Duration::from_secs(10), running)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status, TaskStatus::Cancelled);
    // Reaped by init eventually; it must at least be gone or a zombie soon.
    let mut gone = false;
    for _ in 0..50 {
        let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the agent's grandchild was killed with its group");
    assert!(tree(&dir).is_empty());
}

#[tokio::test]
async fn cancelling_a_waiting_task_leaves_no_lock() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let script = sb.script("ok.sh", "#!/bin/sh\ntrue\n");
    let cfg = sb.cfg();
    let exec = berth_local_agent::NativeExecutor::new(cfg.clone()).unwrap();
    let other = DirLocks::new(cfg.lock_dir.clone()).unwrap();
    let (_c, mut never) = watch::channel(false);
    let held = other
        .acquire(&lp(&dir), "holder", |_| {}, &mut never)
        .await
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (cancel_tx, cancel) = watch::channel(false);
    let t = task(
        "t1",
        "s1",
        agent(AgentKind::Command, &[&script]),
        "x",
        in_place(&dir),
    );
    let running = tokio::spawn({
        let exec = exec.clone();
        async move { exec.run_task(t, tx, cancel).await }
    });
    assert!(matches!(
        rx.recv().await,
        Some(ExecEvent::Status {
            status: TaskStatus::WaitingLock,
            ..
        })
    ));
    cancel_tx.send(true).unwrap();
    let out = running.await.unwrap();
    assert_eq!(out.status, TaskStatus::Cancelled);
    drop(held);
    // The directory is free at once, for this executor and for another process.
    let (out, _) = run(
        &exec,
        task(
            "t2",
            "s1",
            agent(AgentKind::Command, &[&script]),
            "x",
            in_place(&dir),
        ),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Succeeded);
    let again = tokio::time::timeout(
        Duration::from_secs(1),
        other.acquire(&lp(&dir), "holder", |_| {}, &mut never),
    )
    .await;
    assert!(again.is_ok_and(|r| r.is_ok()));
}

#[tokio::test]
async fn a_broken_settings_file_fails_the_task_at_its_place_before_the_agent_runs() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    std::fs::create_dir_all(dir.join(".berth")).unwrap();
    std::fs::write(dir.join(".berth/settings.jsonc"), "{ \"agent\": 3 }").unwrap();
    let marker = sb.side().join("ran");
    let script = sb.script("m.sh", &format!("#!/bin/sh\ntouch {}\n", marker.display()));
    let (out, _) = run(
        &sb.executor(),
        task(
            "t1",
            "s1",
            agent(AgentKind::Command, &[&script]),
            "x",
            in_place(&dir),
        ),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Failed);
    assert_eq!(
        out.error,
        Some(format!(
            "the settings file {}/.berth/settings.jsonc:1:12: \"agent\" must be a string, found a number",
            dir.display()
        ))
    );
    assert!(!marker.exists());
}

#[tokio::test]
async fn a_worktree_of_a_subdirectory_works_in_its_counterpart() {
    let sb = Sandbox::new();
    let repo = sb.dir("work/repo");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(repo.join("pkg/app")).unwrap();
    std::fs::write(repo.join("pkg/app/x"), "x").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "init"]);
    let script = sb.script("pwd.sh", "#!/bin/sh\npwd\n");
    let session = "sub1";
    let (out, events) = run(
        &sb.executor(),
        task(
            "t1",
            session,
            agent(AgentKind::Command, &[&script]),
            "x",
            Placement::Worktree {
                dir: lp(&repo.join("pkg/app")),
                identity: None,
            },
        ),
    )
    .await;
    let expected = sb.cfg().berth_home.join("worktrees/sub1/pkg/app");
    assert_eq!(out.work_dir.as_deref(), Some(expected.to_str().unwrap()));
    assert!(
        events.contains(&ExecEvent::Agent(berth_core::event::AgentEvent::Text {
            text: expected.display().to_string()
        }))
    );
}
