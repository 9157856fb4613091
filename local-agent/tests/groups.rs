//! The records of agents' process groups: a group left by a Berth that is gone is
//! stopped at the next start; a live Berth's group, a group that is gone and a pgid
//! that now leads another process are left alone; a finished run leaves nothing.

mod common;

use berth_core::api::TaskStatus;
use berth_local_agent::groups::{
    Group, GroupRecord, StopReport, members, start_time, stop_leftovers,
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
        stop_leftovers(&dir),
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

    assert_eq!(stop_leftovers(&dir), StopReport::default());
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
    let pids = sb.root.join("pids");
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
