//! Proofs across OS processes: two Berth processes never overlap in one directory,
//! a Berth killed mid-task leaves a journal that restores the directory, and its one
//! process-group watcher takes down what every running agent started.
//!
//! The test binary re-executes itself (`child_runner`) to be the other processes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::api::TaskStatus;
use berth_local_agent::agent::groups::{members, stop_leftovers};
use berth_local_agent::{ExecutorConfig, NativeExecutor};
use berth_web::executor::AgentKind;
use common::{Sandbox, agent, assert_no_overlap, in_place, run, stamping_agent, task, tree};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const CHILD: &str = "BERTH_TEST_CHILD";

fn child_cfg(root: &Path, which: &str) -> ExecutorConfig {
    let mut cfg = ExecutorConfig::isolated(&root.join(which), Some(root.join("usr7q")));
    // One lock directory for both processes, whatever their BERTH_HOME.
    cfg.lock_dir = root.join("shared-locks");
    // The agents log into the sandbox's side folder: declared to the fence.
    std::fs::create_dir_all(&cfg.config_dir).unwrap();
    std::fs::write(
        cfg.config_dir.join("settings.jsonc"),
        format!("{{ {} }}", common::fence_for(&root.join("side"))),
    )
    .unwrap();
    cfg
}

fn spawn_child(
    mode: &str,
    root: &Path,
    which: &str,
    dir: &Path,
    extra: &[(&str, String)],
) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name(module_path!(), "child_runner"),
        ])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .env("BERTH_TEST_ROOT", root)
        .env("BERTH_TEST_WHICH", which)
        .env("BERTH_TEST_DIR", dir)
        .envs(extra.iter().map(|(k, v)| (*k, v.clone())))
        .spawn()
        .unwrap()
}

/// Not a test on its own: the body of the child processes.
#[test]
fn child_runner() {
    let Ok(mode) = std::env::var(CHILD) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap();
    let root = PathBuf::from(var("BERTH_TEST_ROOT"));
    let which = var("BERTH_TEST_WHICH");
    let dir = PathBuf::from(var("BERTH_TEST_DIR"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        match mode.as_str() {
            "contend" => {
                let mut cfg = child_cfg(&root, &which);
                cfg.brief_arg_limit = usize::MAX;
                let exec = NativeExecutor::new(cfg).unwrap();
                let script = PathBuf::from(var("BERTH_TEST_SCRIPT"));
                let mut joins = Vec::new();
                for lane in 0..3 {
                    let (exec, script, dir, which) =
                        (exec.clone(), script.clone(), dir.clone(), which.clone());
                    joins.push(tokio::spawn(async move {
                        for n in 0..5 {
                            let id = format!("{which}-{lane}-{n}");
                            let spec = agent(AgentKind::Command, &[&script]);
                            let (out, _) =
                                run(&exec, task(&id, "s1", spec, "x", in_place(&dir))).await;
                            assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
                        }
                    }));
                }
                for j in joins {
                    j.await.unwrap();
                }
            }
            "crash" => {
                let mut cfg = child_cfg(&root, &which);
                cfg.brief_arg_limit = 0;
                cfg.config_dir = root.join("config");
                let exec = NativeExecutor::new(cfg).unwrap();
                let claude = PathBuf::from(var("BERTH_TEST_SCRIPT"));
                let spec = agent(AgentKind::Claude, &[&claude]);
                let _ = run(&exec, task("crashing", "s1", spec, "sleep", in_place(&dir))).await;
                panic!("the parent should have killed this process");
            }
            "two_agents" => {
                let exec = NativeExecutor::new(child_cfg(&root, &which)).unwrap();
                let script = PathBuf::from(var("BERTH_TEST_SCRIPT"));
                let mut joins = Vec::new();
                for lane in ["a", "b"] {
                    let (exec, script) = (exec.clone(), script.clone());
                    let dir = dir.join(lane);
                    joins.push(tokio::spawn(async move {
                        let spec = agent(AgentKind::Command, &[&script]);
                        run(&exec, task(lane, lane, spec, "x", in_place(&dir))).await
                    }));
                }
                for j in joins {
                    let _ = j.await;
                }
                panic!("the parent should have killed this process");
            }
            other => panic!("unknown child mode {other}"),
        }
    });
}

#[test]
fn two_processes_never_overlap_in_one_directory() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let log = sb.side().join("stamps.log");
    let script = stamping_agent(&sb, &log);
    let extra = [("BERTH_TEST_SCRIPT", script.display().to_string())];
    let mut a = spawn_child("contend", &sb.root, "a", &dir, &extra);
    let mut b = spawn_child("contend", &sb.root, "b", &dir, &extra);
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    assert_no_overlap(&log, 30);
    // The agents' markers, and nothing of Berth's.
    let names: Vec<String> = tree(&dir).into_keys().collect();
    assert_eq!(names.len(), 30);
    assert!(names.iter().all(|n| n.starts_with("ran-")), "{names:?}");
}

#[test]
fn a_berth_killed_mid_task_is_restored_by_replay() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    std::fs::write(dir.join("CLAUDE.md"), "# Mine\n").unwrap();
    std::fs::create_dir_all(dir.join(".claude/skills/review")).unwrap();
    std::fs::write(dir.join(".claude/skills/review/SKILL.md"), "mine").unwrap();
    let skill = sb.dir("plugins/review");
    std::fs::write(skill.join("SKILL.md"), "Review.\n").unwrap();
    let config = sb.dir("config");
    std::fs::write(
        config.join("settings.jsonc"),
        format!(
            "{{ \"plugins\": [{:?}], {} }}",
            skill.display().to_string(),
            sb.fence()
        ),
    )
    .unwrap();
    let before = tree(&dir);
    let (claude, log) = common::fakes::claude(&sb);
    let extra = [("BERTH_TEST_SCRIPT", claude.display().to_string())];
    let mut child = spawn_child("crash", &sb.root, "crashy", &dir, &extra);
    // Wait until the agent runs, with Berth's files in place.
    let start = Instant::now();
    while !log.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the agent never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let during = tree(&dir);
    assert!(during.contains_key(".claude/skills/review-berth/SKILL.md"));
    assert!(String::from_utf8_lossy(&during["CLAUDE.md"]).contains("berth:begin crashing"));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Berth starts again: replay restores the directory.
    let cfg = child_cfg(&sb.root, "crashy");
    let exec = NativeExecutor::new(cfg.clone()).unwrap();
    let report = exec.replay_leftovers();
    assert_eq!(report.restored, vec![dir.display().to_string()]);
    assert_eq!(report.skipped, vec![]);
    assert_eq!(tree(&dir), before);
    assert!(tree(&cfg.journal_dir()).is_empty());
    // And the agent did not outlive its Berth (parent-death signal).
    let agent_alive = Command::new("pgrep")
        .args(["-f", &claude.display().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    let start = Instant::now();
    let mut alive = agent_alive;
    while alive && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
        alive = Command::new("pgrep")
            .args(["-f", &claude.display().to_string()])
            .status()
            .is_ok_and(|s| s.success());
    }
    assert!(!alive, "the agent outlived the killed Berth");
}

/// The watcher processes whose parent is `pid`.
fn watchers_of(pid: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            parent == Some(pid) && String::from_utf8_lossy(&cmdline).contains("read -r line")
        })
        .collect()
}

#[test]
fn one_watcher_takes_down_every_running_agents_group_when_berth_dies() {
    let sb = Sandbox::new();
    let dir = sb.dir("work");
    // Outside the agents' directories: in the side folder the fence is told about.
    let pids = sb.dir("side/pids");
    for lane in ["a", "b"] {
        sb.dir(&format!("work/{lane}"));
    }
    // The agent (its group's leader) and a `sleep` it leaves in its group, which no
    // parent-death signal reaches.
    let script = sb.script(
        "leaver",
        &format!(
            "#!/bin/sh\nsleep 30 &\necho \"$$ $!\" > {0}/$BERTH_TASK_ID.tmp\n\
             mv {0}/$BERTH_TASK_ID.tmp {0}/$BERTH_TASK_ID\nwait\n",
            pids.display()
        ),
    );
    let extra = [("BERTH_TEST_SCRIPT", script.display().to_string())];
    let mut child = spawn_child("two_agents", &sb.root, "owner", &dir, &extra);
    let read = |lane: &str| -> Option<(i32, i32)> {
        let text = std::fs::read_to_string(pids.join(lane)).ok()?;
        let (leader, sleep) = text.trim().split_once(' ')?;
        Some((leader.parse().ok()?, sleep.parse().ok()?))
    };
    let records = child_cfg(&sb.root, "owner").agents_dir();
    let recorded = || std::fs::read_dir(&records).map_or(0, Iterator::count);
    let start = Instant::now();
    let (a, b) = loop {
        if let (Some(a), Some(b), 2) = (read("a"), read("b"), recorded()) {
            break (a, b);
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the agents never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_ne!(a.0, b.0, "the two agents share a group");
    for (leader, _) in [a, b] {
        assert_eq!(members(leader).len(), 2, "agent {leader} is not running");
    }
    // One watcher for both agents.
    assert_eq!(watchers_of(child.id()).len(), 1);

    child.kill().unwrap(); // SIGKILL: no cleanup, no drop
    child.wait().unwrap();
    let start = Instant::now();
    while !(members(a.0).is_empty() && members(b.0).is_empty()) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "left running: {:?} and {:?}",
            members(a.0),
            members(b.0)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The watcher stopped them, not recovery: both records are left, naming groups
    // that are gone.
    assert_eq!(recorded(), 2);
    let report = stop_leftovers(&records);
    assert_eq!(report.stopped, Vec::<(String, usize)>::new());
    assert_eq!(report.in_use, Vec::<PathBuf>::new());
    assert_eq!(recorded(), 0);
}
