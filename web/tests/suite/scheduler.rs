//! The scheduler through the control socket with a real `sh -c` executor.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::api::TaskStatus;
use common::{TestServer, add_agent, new_session, send};
use std::time::Duration;

async fn rows(t: &TestServer, session: &str) -> Vec<berth_web::store::TaskRow> {
    t.server
        .state()
        .store
        .list_tasks(Some(session.to_owned()), None)
        .await
        .unwrap()
}

async fn wait_status(t: &TestServer, task: &str, want: &str) {
    for _ in 0..3000 {
        let r = t.call("GET", &format!("/api/v1/tasks/{task}"), None).await;
        if r.json["status"] == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {task} never became {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_one_session_run_one_at_a_time_in_order() {
    let t = TestServer::start(8).await;
    add_agent(&t, "slowcat", "sleep 0.05; cat").await;
    let s = new_session(&t, "slowcat").await;
    let ids = [
        send(&t, &s, "one").await,
        send(&t, &s, "two").await,
        send(&t, &s, "three").await,
    ];
    for id in &ids {
        assert_eq!(t.wait_task(id).await["status"], "succeeded");
    }
    let tasks = rows(&t, &s).await;
    let order: Vec<&str> = tasks.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(order, ids.iter().map(String::as_str).collect::<Vec<_>>());
    for pair in tasks.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(b.started_at >= a.finished_at, "{a:?} overlaps {b:?}");
    }
    // The agent's output, in order, in the transcript.
    let events = t
        .server
        .state()
        .store
        .events_after(s.parse().unwrap(), 0, 1000)
        .await
        .unwrap();
    let texts: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "agent")
        .filter_map(|e| e.payload["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["one", "two", "three"]);
}

/// Each task waits until both have started: run one at a time, they would never end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_two_sessions_run_in_parallel() {
    let t = TestServer::start(8).await;
    let gate = t.home.path().join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let g = gate.display();
    let cmd = format!(
        "touch {g}/$BERTH_SESSION_ID; while [ $(ls {g} | wc -l) -lt 2 ]; do sleep 0.01; done; echo done"
    );
    add_agent(&t, "gate", &cmd).await;
    let (a, b) = (new_session(&t, "gate").await, new_session(&t, "gate").await);
    let (ta, tb) = (send(&t, &a, "x").await, send(&t, &b, "y").await);
    assert_eq!(t.wait_task(&ta).await["status"], "succeeded");
    assert_eq!(t.wait_task(&tb).await["status"], "succeeded");
    let (ra, rb) = (&rows(&t, &a).await[0], &rows(&t, &b).await[0]);
    assert!(
        ra.started_at < rb.finished_at && rb.started_at < ra.finished_at,
        "{ra:?} {rb:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parallel_limit_holds() {
    let t = TestServer::start(1).await;
    add_agent(&t, "nap", "sleep 0.05; echo ok").await;
    let (a, b) = (new_session(&t, "nap").await, new_session(&t, "nap").await);
    let (ta, tb) = (send(&t, &a, "x").await, send(&t, &b, "y").await);
    t.wait_task(&ta).await;
    t.wait_task(&tb).await;
    let (ra, rb) = (&rows(&t, &a).await[0], &rows(&t, &b).await[0]);
    assert!(
        ra.finished_at <= rb.started_at || rb.finished_at <= ra.started_at,
        "{ra:?} {rb:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_task_and_drops_a_queued_one() {
    let t = TestServer::start(8).await;
    add_agent(&t, "sleeper", "echo started; sleep 30").await;
    let s = new_session(&t, "sleeper").await;
    let (t1, t2) = (send(&t, &s, "a").await, send(&t, &s, "b").await);
    wait_status(&t, &t1, "running").await;
    let r = t
        .call("POST", &format!("/api/v1/tasks/{}/cancel", &t2[..30]), None)
        .await;
    assert_eq!(
        (r.status, r.json["task"]["status"].as_str()),
        (200, Some("cancelled")),
        "{}",
        r.text
    );
    let r = t
        .call("POST", &format!("/api/v1/tasks/{t1}/cancel"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.wait_task(&t1).await["status"], "cancelled");
    let statuses: Vec<TaskStatus> = rows(&t, &s).await.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![TaskStatus::Cancelled, TaskStatus::Cancelled]);
    let r = t.call("POST", "/api/v1/tasks/ffff/cancel", None).await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (404, Some("unknown_task"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_interrupts_running_tasks_and_keeps_queued_ones() {
    let t = TestServer::start(8).await;
    add_agent(&t, "sleeper", "echo started; sleep 30").await;
    let s = new_session(&t, "sleeper").await;
    let (t1, _t2) = (send(&t, &s, "a").await, send(&t, &s, "b").await);
    wait_status(&t, &t1, "running").await;
    tokio::time::timeout(
        Duration::from_secs(10),
        t.server.shutdown_handle().shutdown(),
    )
    .await
    .expect("shutdown returns once the executor has");
    let statuses: Vec<TaskStatus> = rows(&t, &s).await.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![TaskStatus::Interrupted, TaskStatus::Queued]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_agent_fails_its_task_with_the_exit_code() {
    let t = TestServer::start(8).await;
    add_agent(&t, "bad", "exit 3").await;
    let s = new_session(&t, "bad").await;
    let id = send(&t, &s, "x").await;
    let task = t.wait_task(&id).await;
    assert_eq!(
        (task["status"].as_str(), task["exit_code"].as_i64()),
        (Some("failed"), Some(3))
    );
}

#[cfg(feature = "local-binding")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linking_runs_in_place_drops_the_resume_id_and_says_so() {
    let t = TestServer::start(8).await;
    add_agent(&t, "where", "echo \"resume=$BERTH_RESUME_ID\"; pwd").await;
    let s = new_session(&t, "where").await;
    let first = send(&t, &s, "x").await;
    t.wait_task(&first).await;
    let store = t.server.state().store;
    assert_eq!(
        store.resolve_session(&s).await.unwrap().resume_id,
        Some(format!("resume-{first}"))
    );

    let project = common::TempDir::new("w");
    let r = t
        .call(
            "PUT",
            &format!("/api/v1/sessions/{s}/binding"),
            Some(serde_json::json!({"dir": project.path()})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let dir = project.path().display().to_string();
    assert_eq!(r.json["binding"]["dir"], dir);
    assert_eq!(r.json["binding"]["daemon_name"], "testbox");
    assert_eq!(store.resolve_session(&s).await.unwrap().resume_id, None);

    let second = send(&t, &s, "y").await;
    let task = t.wait_task(&second).await;
    assert_eq!(task["work_dir"], dir);
    let events = store
        .events_after(s.parse().unwrap(), 0, 1000)
        .await
        .unwrap();
    let changed: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e.kind == "binding_changed")
        .map(|e| &e.payload)
        .collect();
    let display = r.json["binding"]["display"].clone();
    assert_eq!(
        changed,
        vec![&serde_json::json!({"from": null, "to": display})]
    );
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| e.payload["text"].as_str())
        .collect();
    // message x, agent output (resume empty, scratch), binding change, message y, output.
    assert_eq!(texts[1], "resume=");
    assert_eq!(&texts[4..], &["resume=", dir.as_str()]);

    let r = t
        .call("DELETE", &format!("/api/v1/sessions/{s}/binding"), None)
        .await;
    assert_eq!(
        (r.status, &r.json["binding"]),
        (200, &serde_json::Value::Null)
    );
    let last = store
        .events_after(s.parse().unwrap(), 0, 1000)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(
        (last.kind.as_str(), last.payload),
        (
            "binding_changed",
            serde_json::json!({"from": display, "to": null})
        )
    );
}

/// Finishes every task at once, without a process: the scheduler's own path, as fast
/// as it goes.
#[derive(Debug)]
struct Instant;

impl berth_web::executor::Executor for Instant {
    fn machine(&self) -> (berth_core::binding::MachineId, String) {
        (
            berth_core::binding::MachineId::parse("m-instant").unwrap(),
            "instant".into(),
        )
    }

    fn run(
        &self,
        _task: berth_web::executor::TaskSpec,
        _events: tokio::sync::mpsc::UnboundedSender<berth_web::executor::ExecEvent>,
        _cancel: tokio::sync::watch::Receiver<bool>,
    ) -> berth_web::executor::BoxFuture<'static, berth_web::executor::TaskOutcome> {
        Box::pin(async {
            berth_web::executor::TaskOutcome {
                status: TaskStatus::Succeeded,
                exit_code: Some(0),
                error: None,
                code: None,
                work_dir: None,
                work_dir_display: None,
                resume_id: None,
                branch: None,
                denials: Vec::new(),
                changes: None,
                fence: None,
                usage: None,
                diff: None,
            }
        })
    }

    #[cfg(feature = "local-binding")]
    fn validate(
        &self,
        dir: &str,
    ) -> Result<berth_web::executor::ValidatedDir, berth_core::Refusal> {
        Err(berth_core::Refusal::new(
            berth_core::ErrorCode::NotFound,
            format!("{dir}: this executor validates nothing"),
            "use another executor",
        ))
    }
}

/// A message sent the moment its session's previous task ended lands while that
/// session's worker is deciding whether to leave: it must start a new worker, not be
/// left queued. (It was, about once in a thousand, before the worker left its entry
/// under the lock where it saw no more work.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_as_the_last_task_ends_is_never_left_queued() {
    use berth_core::resolve::Origin;
    use berth_web::scheduler::{Scheduler, SchedulerConfig};
    let home = common::TempDir::new("w");
    let store = berth_web::store::Store::open(home.path()).await.unwrap();
    store
        .add_agent(berth_web::executor::AgentSpec {
            name: "a".into(),
            kind: berth_web::executor::AgentKind::Command,
            command: vec!["true".into()],
            permissions: None,
        })
        .await
        .unwrap();
    let session = store
        .create_session(berth_web::store::NewSessionRow {
            title: None,
            agent: Some("a".into()),
            origin: Origin::Desktop,
            project: None,
            binding: None,
            owner: None,
        })
        .await
        .unwrap()
        .id;
    let scheduler = Scheduler::start(
        store.clone(),
        Some(std::sync::Arc::new(Instant)),
        SchedulerConfig::default(),
    );
    let mut events = store.hub().subscribe(&session);
    for i in 0..1500 {
        let (task, _) = store
            .add_message(session.to_string(), Origin::Desktop, format!("m{i}"))
            .await
            .unwrap();
        scheduler.notify(&session);
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match events.recv().await {
                    Ok(ev)
                        if matches!(&*ev, berth_web::transcript::Live::Stored(ev)
                            if ev.kind == "task" && ev.task_id.as_ref() == Some(&task.id)) =>
                    {
                        break;
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(e) => panic!("the transcript closed: {e}"),
                }
            }
        })
        .await;
        assert!(
            ended.is_ok(),
            "message {i} was left {:?}",
            store.task(&task.id).await.unwrap().status
        );
    }
}
