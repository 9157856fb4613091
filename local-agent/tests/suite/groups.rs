//! The records of agents' process groups: a group left by a Berth that is gone is
//! stopped at the next start; a live Berth's group, a group that is gone and a pgid
//! that now leads another process are left alone; a finished run leaves nothing. And
//! the watcher: it kills the groups registered with it when its owner dies, except
//! those unregistered as gone, and is started again if it died.
//!
//! The test binary re-executes itself (`watcher_owner`) to be the owner that dies.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::api::TaskStatus;
use berth_local_agent::agent::groups::{
    Group, GroupRecord, Line, StopReport, Watcher, members, start_time, stop_leftovers,
};
use berth_web::executor::{AgentKind, Executor};
use common::{Sandbox, agent, in_place, run, task};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A process group of two: `sh` leading it and its `sleep`.
fn group_of_two() -> (Child, i32) {
    let child = Command::new("sh")
        .args(["-c", "sleep 30 & wait"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(10);
    while members(pgid).len() < 2 {
        assert!(Instant::now() < deadline, "the group never had two members");
        std::thread::sleep(Duration::from_millis(10));
    }
    (child, pgid)
}

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn record(dir: &Path, pgid: i32, start: u64) -> GroupRecord {
    GroupRecord::create(
        dir,
        &Group {
            pgid,
            start,
            dir: "~/code/app".into(),
        },
    )
    .unwrap()
}

/// `stop_leftovers` once no record is held by a process that only borrowed it:
/// another test of this binary spawning a process can hold a copy of a record's
/// descriptor between its fork and its exec (microseconds), so a record seen in use
/// is looked at again, for up to two seconds.
fn settled(dir: &Path) -> StopReport {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut report = stop_leftovers(dir);
    while !report.in_use.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        report = stop_leftovers(dir);
    }
    report
}

#[test]
fn a_left_group_is_stopped_unless_its_berth_still_holds_it() {
    let sb = Sandbox::new();
    let dir = sb.root.join("run/agents");
    let (mut child, pgid) = group_of_two();
    let held = record(&dir, pgid, start_time(pgid).unwrap());

    // Its Berth is alive (holds the record): nothing is touched.
    let report = stop_leftovers(&dir);
    assert_eq!(report.in_use.len(), 1);
    assert_eq!(report.stopped, Vec::<(String, usize)>::new());
    assert_eq!(members(pgid).len(), 2);

    // Its Berth died: the whole group is stopped, the record deleted.
    drop(held);
    assert_eq!(
        settled(&dir),
        StopReport {
            stopped: vec![("~/code/app".into(), 2)],
            in_use: vec![],
        }
    );
    assert_eq!(members(pgid), Vec::<i32>::new());
    assert_eq!(files(&dir), Vec::<String>::new());
    let _ = child.wait();
}

#[test]
fn a_reused_or_vanished_pgid_and_a_torn_record_are_only_deleted() {
    let sb = Sandbox::new();
    let dir = sb.root.join("run/agents");
    // The pgid now leads a process that started at another time.
    let (mut other, pgid) = group_of_two();
    let start = start_time(pgid).unwrap();
    drop(record(&dir, pgid, start + 1));
    // A group that is gone.
    let mut gone = Command::new("true").process_group(0).spawn().unwrap();
    let gone_pgid = gone.id() as i32;
    gone.wait().unwrap();
    drop(record(&dir, gone_pgid, 1));
    // A record torn by a crash while it was written.
    std::fs::write(dir.join("1-2.json"), "{\"pgid\":").unwrap();

    assert_eq!(settled(&dir), StopReport::default());
    assert_eq!(members(pgid).len(), 2, "another process's group was killed");
    assert_eq!(files(&dir), Vec::<String>::new());
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
    let _ = other.wait();
}

#[test]
fn recovery_reports_each_group_it_stopped() {
    let sb = Sandbox::new();
    let exec = sb.executor();
    let (mut child, pgid) = group_of_two();
    drop(record(
        &sb.cfg().agents_dir(),
        pgid,
        start_time(pgid).unwrap(),
    ));
    assert_eq!(
        exec.recover(),
        vec!["stopped 2 processes left by an interrupted task in ~/code/app".to_owned()]
    );
    assert_eq!(members(pgid), Vec::<i32>::new());
    let _ = child.wait();
}

#[tokio::test]
async fn a_finished_run_leaves_no_process_and_no_record() {
    let sb = Sandbox::new();
    let dir = sb.dir("usr7q/code/app");
    let pids = sb.side().join("pids");
    let script = sb.script(
        "spawner",
        &format!("#!/bin/sh\nsleep 30 &\necho $! > {}\n", pids.display()),
    );
    let exec = sb.executor();
    let (out, _) = run(
        &exec,
        task(
            "t1",
            "s1",
            agent(AgentKind::Command, &[&script]),
            "go",
            in_place(&dir),
        ),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
    let sleep: i32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = std::fs::read_to_string(format!("/proc/{sleep}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    });
    assert!(!alive, "the agent's child outlived the run");
    assert_eq!(files(&sb.cfg().agents_dir()), Vec::<String>::new());
}

const OWNER: &str = "BERTH_TEST_WATCHER_OWNER";

/// A process group whose leader has exited and been reaped, leaving a `sleep`: what a
/// number looks like to the watcher once a finished agent's group number is taken by
/// someone else's group (no leader's start time to tell them apart).
fn leaderless_group() -> i32 {
    let mut leader = Command::new("sh")
        .args(["-c", "sleep 30 &"])
        .process_group(0)
        .spawn()
        .unwrap();
    let pgid = leader.id() as i32;
    leader.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while members(pgid).len() != 1 {
        assert!(
            Instant::now() < deadline,
            "the group never had its one member"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    pgid
}

fn kill_group(pgid: i32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .status();
}

/// Not a test on its own: the owner of a watcher, told which groups to register
/// (`+`), which start times to tell it (`=PGID:START`) and which groups to unregister
/// afterwards (`-`); it writes its watcher's pid to
/// `BERTH_TEST_READY` and waits to be killed.
#[test]
fn watcher_owner() {
    let Ok(lines) = std::env::var(OWNER) else {
        return;
    };
    let watcher = Watcher::new();
    let pipe = watcher.pipe().unwrap();
    for word in lines.split_whitespace() {
        let (sign, rest) = word.split_at(1);
        let (pgid, start) = rest.split_once(':').unwrap_or((rest, ""));
        let pgid: i32 = pgid.parse().unwrap();
        let line = match sign {
            "+" => Line::watch(pgid),
            "=" => Line::confirm(pgid, start.parse().unwrap()),
            _ => Line::forget(pgid),
        };
        pipe.send(&line).unwrap();
    }
    let ready = std::env::var("BERTH_TEST_READY").unwrap();
    std::fs::write(ready, watcher.pid().unwrap().to_string()).unwrap();
    std::thread::sleep(Duration::from_secs(60));
    panic!("the parent should have killed this process");
}

/// A process leading its own group whose command name holds a newline, which cuts its
/// `/proc/<pid>/stat` line short.
fn oddly_named_leader(sb: &Sandbox) -> Child {
    let link = sb.dir("bin").join("sl\neep");
    std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
    Command::new(&link)
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Starts a watcher's owner that sends `lines` (see [`watcher_owner`]), SIGKILLs it
/// once they are sent, and waits until its watcher has finished.
fn owner_dies(sb: &Sandbox, lines: &str) {
    let ready = sb.side().join("ready");
    let mut owner = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name(module_path!(), "watcher_owner"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(OWNER, lines)
        .env("BERTH_TEST_READY", &ready)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let watcher: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&ready)
            .ok()
            .and_then(|t| t.parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the owner never got ready");
        std::thread::sleep(Duration::from_millis(10));
    };
    owner.kill().unwrap(); // SIGKILL: the pipe closes
    owner.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    // The watcher leads its own group of one: it is done once that group is empty.
    while !members(watcher).is_empty() {
        assert!(Instant::now() < deadline, "the watcher never finished");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes still in `groups` once they have had a moment (up to 5 s) to empty:
/// killed groups may take a moment, and none is waited for before it is read.
fn left_in(groups: &[i32]) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = || -> Vec<i32> { groups.iter().flat_map(|g| members(*g)).collect() };
    while !left().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    left()
}

/// Berth tells the watcher each leader's start time (`=`), read while the leader is its
/// child. A group whose number now leads a process with another start time (what a
/// reused pid looks like, made here by telling a wrong one) is someone else's and
/// survives; one whose leader still has the start time told is killed, as is one
/// registered but never confirmed (Berth died within the spawn).
#[test]
fn the_watcher_kills_by_the_start_time_berth_told_it() {
    let sb = Sandbox::new();
    let (mut told, told_pgid) = group_of_two();
    let (mut reused, reused_pgid) = group_of_two();
    let (mut unconfirmed, unconfirmed_pgid) = group_of_two();
    let start = |pgid| start_time(pgid).expect("a live leader's start time");
    owner_dies(
        &sb,
        &format!(
            "+{told_pgid} ={told_pgid}:{} +{reused_pgid} ={reused_pgid}:{} +{unconfirmed_pgid}",
            start(told_pgid),
            start(reused_pgid) + 1,
        ),
    );
    let state = (
        left_in(&[told_pgid, unconfirmed_pgid]),
        members(reused_pgid).len(),
    );
    for pgid in [told_pgid, reused_pgid, unconfirmed_pgid] {
        kill_group(pgid);
    }
    for child in [&mut told, &mut reused, &mut unconfirmed] {
        let _ = child.wait();
    }
    assert_eq!(
        state,
        (vec![], 2),
        "the confirmed and the unconfirmed groups die; the one with another start time is left alone"
    );
}

#[test]
fn when_its_owner_dies_the_watcher_kills_the_registered_groups_not_the_unregistered() {
    let sb = Sandbox::new();
    let (mut running, running_pgid) = group_of_two();
    let left = leaderless_group();
    let gone = leaderless_group();
    // Registered first: a watcher that choked on it would protect nothing after it.
    let mut odd = oddly_named_leader(&sb);
    let odd_pgid = odd.id() as i32;
    owner_dies(
        &sb,
        &format!("+{odd_pgid} +{running_pgid} +{gone} +{left} -{gone}"),
    );
    let state = (
        left_in(&[odd_pgid, running_pgid, left]),
        members(gone).len(),
    );
    for pgid in [odd_pgid, running_pgid, left, gone] {
        kill_group(pgid);
    }
    let _ = running.wait();
    let _ = odd.wait();
    assert_eq!(
        state,
        (vec![], 1),
        "registered groups die, the unregistered one is left alone"
    );
}

#[test]
fn a_watcher_that_died_is_started_again() {
    let watcher = Watcher::new();
    assert_eq!(watcher.pid(), None, "started before it was needed");
    let first_pipe = watcher.pipe().unwrap();
    let first = watcher.pid().unwrap();
    let _ = watcher.pipe().unwrap();
    assert_eq!(watcher.pid(), Some(first), "one watcher, not one per use");
    let _ = Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(5);
    let pipe = loop {
        let pipe = watcher.pipe().unwrap();
        if watcher.pid() != Some(first) {
            break pipe;
        }
        assert!(
            Instant::now() < deadline,
            "the dead watcher was not replaced"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        first_pipe.send(&Line::forget(1)).is_err(),
        "the dead watcher's pipe still takes lines"
    );
    pipe.send(&Line::forget(1)).unwrap();
}
