//! A crash and a restart through [`Server`]: nothing accepted is lost, the running
//! task is `interrupted` (never re-run), the queued one runs after the restart.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use common::{TempDir, TestServer, add_agent, new_session, send};
use std::time::Duration;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_restart_interrupts_the_running_task_and_runs_the_queued_one() {
    let home = TempDir::new("w");
    let home_path = home.path().to_owned();
    let marker = home_path.join("after-crash");
    let cmd = format!(
        "if [ -e {} ]; then echo fine; else echo waiting; sleep 30; fi",
        marker.display()
    );

    // First life: one task running, one queued; then the process "dies" (the runtime
    // is dropped without a shutdown, killing the agent).
    let rt = runtime();
    let (session, first, second, t) = rt.block_on(async {
        let t = TestServer::start_in(home, 8).await;
        add_agent(&t, "gated", &cmd).await;
        let s = new_session(&t, "gated").await;
        let first = send(&t, &s, "one").await;
        let second = send(&t, &s, "two").await;
        // Wait until the agent's first line is in the transcript: it really runs.
        let store = t.server.state().store;
        for _ in 0..3000 {
            let events = store
                .events_after(s.parse().unwrap(), 0, 100)
                .await
                .unwrap();
            if events.iter().any(|e| e.kind == "agent") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (s, first, second, t)
    });
    let TestServer { home, server, .. } = t;
    drop(server);
    drop(rt);
    std::fs::write(&marker, "").unwrap();

    // Second life on the same home.
    let rt = runtime();
    rt.block_on(async {
        let t = TestServer::start_in(home, 8).await;
        assert_eq!(t.server.recovery().interrupted, vec![first.clone()]);
        let done = t.wait_task(&second).await;
        assert_eq!(done["status"], "succeeded");
        let r = t
            .call("GET", &format!("/api/v1/tasks?session={session}"), None)
            .await;
        let statuses: Vec<&str> = r
            .json
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, vec!["interrupted", "succeeded"]);
        let events = t
            .server
            .state()
            .store
            .events_after(session.parse().unwrap(), 0, 1000)
            .await
            .unwrap();
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(
            seqs,
            (1..=events.len() as i64).collect::<Vec<_>>(),
            "the transcript has no gaps"
        );
        let texts: Vec<&str> = events
            .iter()
            .filter(|e| e.kind == "agent")
            .filter_map(|e| e.payload["text"].as_str())
            .collect();
        assert_eq!(texts, vec!["waiting", "fine"]);
    });
}
