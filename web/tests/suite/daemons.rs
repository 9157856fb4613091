//! The daemon registry through its HTTP routes, in process, with a daemon played by
//! the test (the real `berth daemon` is exercised in `tests/tests/suite/daemons.rs`):
//! waiting for an offline machine, lost claims, restarts, cancels, decisions on a run's
//! requests, and tasks the server no longer expects.
#![cfg(feature = "local-binding")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_web::daemon::DaemonConfig;
use common::{TestServer, add_agent, request};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;

const WINDOW: Duration = Duration::from_millis(400);

/// A daemon played by the test: its token and machine id.
struct Fake {
    addr: SocketAddr,
    token: String,
    machine: String,
    instance: String,
}

impl Fake {
    async fn call(&self, method: &str, path: &str, body: Value) -> common::Reply {
        self.call_with(method, path, body, &[]).await
    }

    async fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Value,
        extra: &[(&str, &str)],
    ) -> common::Reply {
        let stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let bearer = format!("Bearer {}", self.token);
        let mut headers = vec![
            ("host", "server"),
            ("authorization", bearer.as_str()),
            ("x-berth-machine", self.machine.as_str()),
        ];
        headers.extend_from_slice(extra);
        request(stream, method, path, &headers, Some(body.to_string())).await
    }

    async fn register(&mut self, instance: &str) -> common::Reply {
        self.instance = instance.to_owned();
        let body = json!({"machine_id": self.machine, "name": "laptop-a",
                          "instance": instance, "version": "test"});
        self.call("POST", "/api/v1/daemon/register", body).await
    }

    async fn heartbeat(&self, running: &[&str]) -> Value {
        let body = json!({"instance": self.instance, "running": running});
        let r = self.call("POST", "/api/v1/daemon/heartbeat", body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.json
    }

    async fn claim(&self, wait_ms: u64) -> common::Reply {
        let body = json!({"instance": self.instance, "wait_ms": wait_ms});
        self.call("POST", "/api/v1/daemon/claim", body).await
    }
}

async fn setup() -> (TestServer, Fake, String) {
    setup_with(WINDOW).await
}

async fn setup_with(window: Duration) -> (TestServer, Fake, String) {
    let (t, addr) = TestServer::with_daemons(DaemonConfig {
        window,
        claim_wait: Duration::from_secs(2),
    })
    .await;
    let r = t
        .call("POST", "/api/v1/daemon/tokens", Some(json!({"name": "a"})))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let mut fake = Fake {
        addr,
        token: r.json["token"].as_str().unwrap().to_owned(),
        machine: "machine-a".into(),
        instance: String::new(),
    };
    assert_eq!(fake.register("one").await.status, 200);
    add_agent(&t, "sh", "cat").await;
    // A session bound on the daemon's machine, through its forwarded control API
    // with the directory it validated.
    let validated = json!({"dir": "/home/a/app", "canonical": "/home/a/app",
                           "display": "~/app", "dev": 7, "ino": 9})
    .to_string();
    let r = fake
        .call_with(
            "POST",
            "/api/v1/daemon/api/sessions",
            json!({"agent": "sh", "dir": "/home/a/app"}),
            &[("x-berth-validated", validated.as_str())],
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["binding"]["daemon"], "machine-a");
    assert_eq!(r.json["binding"]["daemon_name"], "laptop-a");
    let session = r.json["id"].as_str().unwrap().to_owned();
    (t, fake, session)
}

async fn post(t: &TestServer, session: &str, text: &str) -> String {
    let r = t
        .call(
            "POST",
            &format!("/api/v1/sessions/{session}/messages"),
            Some(json!({"text": text})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.json["task"]["id"].as_str().unwrap().to_owned()
}

async fn task(t: &TestServer, id: &str) -> Value {
    t.call("GET", &format!("/api/v1/tasks/{id}"), None)
        .await
        .json
}

async fn until(t: &TestServer, id: &str, status: &str) -> Value {
    for _ in 0..300 {
        let doc = task(t, id).await;
        if doc["status"] == status {
            return doc;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("task {id} never became {status}: {}", task(t, id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_machines_tasks_wait_and_run_in_order_when_it_returns() {
    let (t, mut fake, session) = setup().await;
    // No heartbeat: the machine goes offline, and its bindings show it.
    tokio::time::sleep(WINDOW * 2).await;
    let s = t
        .call("GET", &format!("/api/v1/sessions/{session}"), None)
        .await;
    assert_eq!(s.json["binding"]["state"], "machine_offline", "{}", s.text);
    let first = post(&t, &session, "one").await;
    let second = post(&t, &session, "two").await;
    let waiting = until(&t, &first, "waiting_daemon").await;
    assert!(
        waiting["wait_reason"]
            .as_str()
            .unwrap()
            .contains("laptop-a"),
        "{waiting}"
    );
    // An offline machine's calls are refused until it registers again.
    assert_eq!(fake.claim(0).await.status, 401);
    assert_eq!(fake.register("two").await.status, 200);
    let r = fake.claim(2000).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["task_id"], first.as_str(), "in order");
    assert_eq!(
        r.json["placement"],
        json!({"kind": "in_place", "dir": "/home/a/app", "dev": 7, "ino": 9})
    );
    // The daemon's user is not the server's: where it worked is shown in the form
    // the daemon stripped, or not at all.
    let finish = json!({"events": 0, "outcome": {"status": "succeeded", "exit_code": 0,
                        "work_dir": "/home/bob/app", "work_dir_display": "~/app"}});
    let r = fake
        .call(
            "POST",
            &format!("/api/v1/daemon/tasks/{first}/finish"),
            finish,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = fake.claim(2000).await;
    assert_eq!(r.json["task_id"], second.as_str(), "{}", r.text);
    let finish =
        json!({"events": 0, "outcome": {"status": "succeeded", "work_dir": "/home/bob/app"}});
    fake.call(
        "POST",
        &format!("/api/v1/daemon/tasks/{second}/finish"),
        finish,
    )
    .await;
    until(&t, &second, "succeeded").await;
    let web = |path: String| {
        let addr = fake.addr;
        async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let sep = if path.contains('?') { '&' } else { '?' };
            let path = format!("{path}{sep}token=web-token");
            let host = addr.to_string();
            request(stream, "GET", &path, &[("host", host.as_str())], None).await
        }
    };
    let r = web(format!("/api/v1/tasks/{first}")).await;
    assert_eq!(r.json["work_dir"], "~/app", "{}", r.text);
    let r = web(format!("/api/v1/tasks/{second}")).await;
    assert_eq!(
        r.json["work_dir"], "a directory on machine laptop-a",
        "{}",
        r.text
    );
    let r = web(format!("/api/v1/sessions/{session}")).await;
    assert!(!r.text.contains("bob"), "{}", r.text);
    let r = t.call("GET", &format!("/api/v1/tasks/{first}"), None).await;
    assert_eq!(
        r.json["work_dir"], "/home/bob/app",
        "the control socket keeps the real path"
    );
    let s = t
        .call("GET", &format!("/api/v1/sessions/{session}"), None)
        .await;
    assert_eq!(s.json["binding"]["state"], "ok", "{}", s.text);
}

/// A heartbeat written before a claim's answer reached the daemon can arrive long
/// after it (retried connects, a replica forwarding it): with numbered claims, a list
/// that predates the claim does not make its task lost; one written after the answer
/// was handled does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_older_than_a_claims_answer_does_not_lose_its_task() {
    let (t, fake, session) = setup().await;
    let id = post(&t, &session, "one").await;
    let body = json!({"instance": fake.instance, "wait_ms": 2000, "seq": 7});
    let r = fake.call("POST", "/api/v1/daemon/claim", body).await;
    assert_eq!(r.json["task_id"], id.as_str(), "{}", r.text);
    let beat = |through: u64| json!({"instance": fake.instance, "running": [], "claimed_through": through});
    // Well past the window, heartbeats that say they were written when claim 6 was
    // the last handled: the task stays with the daemon.
    for _ in 0..8 {
        let r = fake.call("POST", "/api/v1/daemon/heartbeat", beat(6)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        tokio::time::sleep(WINDOW / 4).await;
    }
    assert_eq!(fake.claim(0).await.status, 204, "not handed out again");
    let events = json!({"first": 0, "events": [{"type": "status", "status": "running"}]});
    let r = fake
        .call("POST", &format!("/api/v1/daemon/tasks/{id}/events"), events)
        .await;
    assert_eq!(r.json["received"], 1, "{}", r.text);
    // A heartbeat written after claim 7 was handled, without the task: it never
    // reached the daemon's runs, and it ran (events came), so it is interrupted.
    let r = fake.call("POST", "/api/v1/daemon/heartbeat", beat(7)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let done = until(&t, &id, "interrupted").await;
    assert!(
        done["error"].as_str().unwrap().contains("lost the task"),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_claims_go_back_in_line_and_a_restart_interrupts_what_ran() {
    let (t, mut fake, session) = setup().await;
    let id = post(&t, &session, "one").await;
    let r = fake.claim(2000).await;
    assert_eq!(r.json["task_id"], id.as_str(), "{}", r.text);
    // The claim's answer never reached the daemon: its heartbeats do not list the
    // task. Past the window it goes back in line, and is handed out again.
    for _ in 0..6 {
        fake.heartbeat(&[]).await;
        tokio::time::sleep(WINDOW / 4).await;
    }
    let r = fake.claim(2000).await;
    assert_eq!(
        r.json["task_id"],
        id.as_str(),
        "handed out again: {}",
        r.text
    );
    let events = json!({"first": 0, "events": [{"type": "status", "status": "running"}]});
    let r = fake
        .call("POST", &format!("/api/v1/daemon/tasks/{id}/events"), events)
        .await;
    assert_eq!(r.json["received"], 1, "{}", r.text);
    until(&t, &id, "running").await;
    // The daemon restarts: what its earlier process ran is interrupted, at once.
    assert_eq!(fake.register("after-restart").await.status, 200);
    let done = until(&t, &id, "interrupted").await;
    assert!(
        done["error"].as_str().unwrap().contains("restarted"),
        "{done}"
    );
    // Its old process still reporting is told the task is gone.
    let r = fake
        .call(
            "POST",
            &format!("/api/v1/daemon/tasks/{id}/events"),
            json!({"first": 1, "events": []}),
        )
        .await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (409, Some("task_gone"))
    );
    // A heartbeat listing a task the server no longer expects is told to stop it.
    let hb = fake.heartbeat(&[id.as_str(), "not-a-task"]).await;
    assert_eq!(hb["cancel"], json!([id, "not-a-task"]), "{hb}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_daemon_and_an_unclaimed_task_is_cancelled_at_once() {
    let (t, fake, session) = setup().await;
    let id = post(&t, &session, "one").await;
    let queued = post(&t, &session, "two").await;
    let r = fake.claim(2000).await;
    assert_eq!(r.json["task_id"], id.as_str());
    let r = t
        .call("POST", &format!("/api/v1/tasks/{id}/cancel"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let hb = fake.heartbeat(&[id.as_str()]).await;
    assert_eq!(hb["cancel"], json!([id]), "{hb}");
    let r = fake
        .call(
            "POST",
            &format!("/api/v1/daemon/tasks/{id}/events"),
            json!({"first": 0, "events": []}),
        )
        .await;
    assert_eq!(r.json["cancel"], true, "{}", r.text);
    let finish = json!({"events": 0, "outcome": {"status": "cancelled"}});
    fake.call("POST", &format!("/api/v1/daemon/tasks/{id}/finish"), finish)
        .await;
    until(&t, &id, "cancelled").await;
    // The next task was queued for the machine but not claimed: cancelled at once.
    let r = t
        .call("POST", &format!("/api/v1/tasks/{queued}/cancel"), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    until(&t, &queued, "cancelled").await;
    assert_eq!(fake.claim(0).await.status, 204, "nothing left to claim");
    // And a token the server never made claims nothing.
    let stranger = Fake {
        token: "berthd_nope".into(),
        ..fake
    };
    let r = stranger.claim(0).await;
    assert_eq!(
        (r.status, r.json["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
}

/// Decisions on a daemon run's requests (issue 54): a person's answer is kept for the
/// machine and handed over once, on its next heartbeat; a request nobody answers is
/// denied at its deadline by the server, and the decision goes on the task's next
/// events reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_reach_the_daemon_once_and_the_deadline_is_kept() {
    let (t, fake, session) = setup_with(Duration::from_secs(5)).await;
    let id = post(&t, &session, "one").await;
    assert_eq!(fake.claim(2000).await.json["task_id"], id.as_str());
    let path = format!("/api/v1/daemon/tasks/{id}/events");
    let events = |first: u64, asked: Option<(&str, u64)>| {
        let events: Vec<Value> = asked
            .into_iter()
            .map(|(req, secs)| {
                json!({"type": "approval", "request": {"id": req, "kind": "execute",
                       "title": "sh ./check.sh", "command": "sh ./check.sh",
                       "deadline_secs": secs}})
            })
            .collect();
        fake.call("POST", &path, json!({"first": first, "events": events}))
    };

    // A person's answer: on the next heartbeat, once.
    let first = format!("{id}-1");
    let r = events(0, Some((&first, 600))).await;
    assert_eq!(
        r.json,
        json!({"received": 1, "cancel": false}),
        "{}",
        r.text
    );
    until(&t, &id, "waiting_approval").await;
    let r = t
        .call(
            "POST",
            &format!("/api/v1/approvals/{first}"),
            Some(json!({"decision": "allow"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let hb = fake.heartbeat(&[id.as_str()]).await;
    assert_eq!(
        hb,
        json!({"cancel": [], "answers": [{"task_id": id, "id": first,
               "answer": {"verdict": "allow", "by": "human", "always": false}}]})
    );
    assert_eq!(fake.heartbeat(&[id.as_str()]).await, json!({"cancel": []}));

    // Nobody answers: the server's deadline denies it, on the task's next reply.
    let second = format!("{id}-2");
    let r = events(1, Some((&second, 1))).await;
    assert_eq!(r.json["received"], 2, "{}", r.text);
    let mut answers = Value::Null;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = events(2, None).await;
        if !r.json["answers"].is_null() {
            answers = r.json["answers"].clone();
            break;
        }
    }
    assert_eq!(answers[0]["id"], second.as_str(), "{answers}");
    assert_eq!(
        (
            &answers[0]["answer"]["verdict"],
            &answers[0]["answer"]["by"]
        ),
        (&json!("deny"), &json!("timeout")),
        "{answers}"
    );
    let finish = json!({"events": 2, "outcome": {"status": "succeeded"}});
    fake.call("POST", &format!("/api/v1/daemon/tasks/{id}/finish"), finish)
        .await;
    let done = until(&t, &id, "succeeded").await;
    let by: Vec<&Value> = done["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["decision"]["by"])
        .collect();
    assert_eq!(by, [&json!("human"), &json!("timeout")], "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_that_leaves_is_offline_at_once_not_after_the_window() {
    let (t, fake, session) = setup_with(Duration::from_secs(60)).await;
    let r = fake
        .call(
            "POST",
            "/api/v1/daemon/leave",
            json!({"instance": fake.instance}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let s = t
        .call("GET", &format!("/api/v1/sessions/{session}"), None)
        .await;
    assert_eq!(s.json["binding"]["state"], "machine_offline", "{}", s.text);
    // Well inside the 60 s window, a new message waits for the machine.
    let id = post(&t, &session, "after leaving").await;
    let waiting = until(&t, &id, "waiting_daemon").await;
    assert!(
        waiting["wait_reason"]
            .as_str()
            .unwrap()
            .contains("laptop-a"),
        "{waiting}"
    );
    assert_eq!(
        fake.claim(0).await.status,
        401,
        "it registers again to come back"
    );
}
