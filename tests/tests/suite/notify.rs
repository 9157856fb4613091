//! Notifications end to end (issue 55): `berth serve` posts signed webhooks for a
//! request that waits, a task that finished and one that failed, with nothing of the
//! user's paths or name in them; a receiver that hangs never delays a task; a project
//! layer's `notify` sends nothing anywhere; and a desktop notification goes over the
//! session bus (a private one here, with `dbus-monitor` watching), or, without one,
//! nowhere, quietly.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::dbus::SessionBus;
use berth_tests::receiver::{Hit, Receiver};
use berth_tests::steps::{
    add_ask_peer, add_command_agent, new_session, s, send_detached, wait_final, waiting_approvals,
    write_script,
};
use berth_tests::{Berth, FAKE_USER, eventually};
use serde_json::{Value, json};
use std::path::PathBuf;

/// The webhook's signing secret, in `berth serve`'s environment.
const SECRET: &str = "test-secret-6d1e";
const SECRET_ENV: &str = "BERTH_TEST_WEBHOOK_SECRET";

/// A Berth whose user settings are `settings`, serving with the webhook's secret set,
/// and its directory `~/code/app` (holding `check.sh`).
fn serving(tag: &str, settings: &Value) -> (Berth, PathBuf) {
    let mut b = Berth::new(tag);
    std::fs::write(b.config.join("settings.jsonc"), settings.to_string()).unwrap();
    b.env(SECRET_ENV, SECRET);
    b.serve();
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    write_script(&app.join("check.sh"), "echo ran >> ran.txt\n");
    (b, app)
}

/// User settings posting to `url`, desktop off.
fn webhook_to(url: &str) -> Value {
    json!({ "notify": { "desktop": false, "webhook": { "url": url, "secret_env": SECRET_ENV } } })
}

/// HMAC-SHA256 of `timestamp.body` with the secret, as a receiver computes it (with
/// the `hmac` crate, not Berth's code).
fn expected_signature(timestamp: &str, body: &[u8]) -> String {
    let hex = berth_tests::steps::hmac_hex(SECRET.as_bytes(), &[timestamp.as_bytes(), b".", body]);
    format!("sha256={hex}")
}

/// What every receiver checks of every request: the signature over the timestamp and
/// the body, a fresh timestamp, the event named twice alike, JSON, and a body with
/// none of the user's paths or name.
fn check_hit(b: &Berth, app: &std::path::Path, hit: &Hit) -> Value {
    let ts = hit.header("x-berth-timestamp");
    assert_eq!(
        hit.header("x-berth-signature"),
        expected_signature(ts, &hit.body),
        "the signature verifies with the secret"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let ts: u64 = ts.parse().unwrap();
    assert!(
        now.abs_diff(ts) < 300,
        "a fresh timestamp: {ts} (now {now})"
    );
    assert_eq!(hit.header("content-type"), "application/json");
    let body = hit.json();
    assert_eq!(hit.header("x-berth-event"), body["event"], "{body}");
    assert_eq!(hit.header("x-berth-delivery"), body["id"], "{body}");
    assert!(
        body["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Berth: ")),
        "{body}"
    );
    let text = String::from_utf8_lossy(&hit.body);
    for private in [s(app), s(&b.user_home), s(b.root.path())] {
        assert!(!text.contains(private), "{private} in {text}");
    }
    assert!(
        !text.to_lowercase().contains(FAKE_USER),
        "the user's name in {text}"
    );
    body
}

/// The bodies of the hits of `event`.
fn of(hits: &[Hit], event: &str) -> Vec<Value> {
    hits.iter()
        .map(Hit::json)
        .filter(|b| b["event"] == event)
        .collect()
}

#[test]
fn webhooks_are_signed_private_and_sent_for_requests_and_ended_tasks() {
    let hook = Receiver::start();
    let (b, app) = serving("notify-webhook", &webhook_to(&hook.url));
    // Its start-up lines name the receiver's host, never the URL's path (a token).
    let banner = format!(
        "webhook         events signed and posted to {}\n",
        hook.url.trim_end_matches("/hook/TOKEN-7f3a")
    );
    eventually(30, || b.serve_log().contains(&banner).then_some(()))
        .unwrap_or_else(|| panic!("{}", b.serve_log()));
    assert!(!b.serve_log().contains("TOKEN-7f3a"), "{}", b.serve_log());
    add_ask_peer(&b, "asker");
    add_command_agent(&b, "broken", "echo oops >&2; exit 3");

    // A request waits: `approval_requested`, naming its kind and how to answer, never
    // the command (it may name paths).
    let asker = new_session(&b, "asker", Some(&app));
    let t1 = send_detached(&b, &asker, &format!("run: sh ./check.sh {}", s(&app)));
    let waiting = waiting_approvals(&b, 1);
    let hits = hook.wait_for(30, |h| !of(h, "approval_requested").is_empty());
    let asked = &of(&hits, "approval_requested")[0];
    let id = waiting[0]["id"].as_str().unwrap();
    let short = format!("{}-1", &t1[..8]);
    assert_eq!(
        (&asked["session"], &asked["task"], &asked["approval"]),
        (
            &json!({ "id": asker }),
            &json!({ "id": t1, "status": "waiting_approval" }),
            &json!({
                "id": id,
                "short_id": short,
                "kind": "execute",
                "deadline": waiting[0]["deadline"],
                "answer": format!("berth approve {short}"),
            }),
        ),
        "{asked}"
    );
    assert!(!asked.to_string().contains("check.sh"), "{asked}");

    // Approved, it finishes: `task_finished`, with how long it ran and where, as
    // displayed.
    b.ok(&["approve", &short]);
    assert_eq!(wait_final(&b, &asker, &t1)["status"], "succeeded");
    let hits = hook.wait_for(30, |h| !of(h, "task_finished").is_empty());
    let finished = &of(&hits, "task_finished")[0];
    assert_eq!(finished["task"]["id"], t1, "{finished}");
    assert_eq!(finished["task"]["status"], "succeeded", "{finished}");
    assert_eq!(finished["task"]["dir"], "~/code/app", "{finished}");
    assert!(finished["task"]["duration_ms"].is_u64(), "{finished}");

    // A failing agent: `task_failed`, with its stable code and no message.
    let broken = new_session(&b, "broken", Some(&app));
    let t2 = send_detached(&b, &broken, "go");
    let failed_task = wait_final(&b, &broken, &t2);
    assert_eq!(failed_task["status"], "failed", "{failed_task}");
    let hits = hook.wait_for(30, |h| !of(h, "task_failed").is_empty());
    let failed = &of(&hits, "task_failed")[0];
    assert_eq!(
        (&failed["task"]["id"], &failed["task"]["error_code"]),
        (&json!(t2), &failed_task["error_code"]),
        "{failed}"
    );
    assert!(!failed.to_string().contains("oops"), "{failed}");

    // Every request: signed, fresh, private; one each, nothing else.
    let events: Vec<Value> = hits
        .iter()
        .map(|h| check_hit(&b, &app, h)["event"].clone())
        .collect();
    assert_eq!(
        events,
        ["approval_requested", "task_finished", "task_failed"],
        "{hits:?}"
    );
}

/// A receiver that takes the first event's request and never answers: the tasks
/// after it finish all the same, while it still holds that connection; let go, the
/// event is tried again (the same delivery), and the queued ones follow.
#[test]
fn a_receiver_that_hangs_never_delays_a_task() {
    let hook = Receiver::holding_first();
    let (b, app) = serving("notify-hang", &webhook_to(&hook.url));
    add_command_agent(&b, "ok", "echo done");
    let session = new_session(&b, "ok", Some(&app));
    let t1 = send_detached(&b, &session, "one");
    wait_final(&b, &session, &t1);
    eventually(30, || hook.holding().then_some(())).expect("the receiver holds t1's event");

    let later: Vec<String> = ["two", "three"]
        .iter()
        .map(|m| {
            let t = send_detached(&b, &session, m);
            assert_eq!(wait_final(&b, &session, &t)["status"], "succeeded");
            t
        })
        .collect();
    // The proof is in the order: the receiver has still seen one request, so the
    // first attempt at t1's event had not ended (it would take 10 s to time out, or
    // the release), and yet t2 and t3 ran and finished. Had the scheduler waited on
    // the delivery, they could not have started before it ended, with a second request.
    assert!(
        hook.holding() && hook.hits().len() == 1,
        "the tasks finished while the receiver still held the first event unanswered: {:?}",
        hook.hits()
    );

    hook.release();
    let finished_ids = |hits: &[Hit]| -> Vec<String> {
        of(hits, "task_finished")
            .iter()
            .map(|b| b["task"]["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let hits = hook.wait_for(60, |h| finished_ids(h).len() >= 4);
    assert_eq!(
        finished_ids(&hits),
        [t1.as_str(), &t1, &later[0], &later[1]],
        "t1's event again, then the queued ones, in order"
    );
    assert_eq!(
        hits[0].header("x-berth-delivery"),
        hits[1].header("x-berth-delivery"),
        "a retry is the same delivery"
    );
    for hit in &hits {
        check_hit(&b, &app, hit);
    }
}

/// A repository's `.berth/settings.jsonc` naming a webhook (and the user's own secret's
/// variable) sends nothing there, untrusted or trusted, and says it is ignored; the
/// user's own webhook is the proof that events were sent meanwhile.
#[test]
fn a_project_layers_notify_never_sends_anything() {
    let mine = Receiver::start();
    let theirs = Receiver::start();
    let (b, app) = serving("notify-project", &webhook_to(&mine.url));
    std::fs::create_dir_all(app.join(".berth")).unwrap();
    std::fs::write(
        app.join(".berth/settings.jsonc"),
        json!({ "notify": { "webhook": { "url": theirs.url, "secret_env": SECRET_ENV }, "desktop": true } })
            .to_string(),
    )
    .unwrap();
    add_command_agent(&b, "ok", "echo done");
    let session = new_session(&b, "ok", Some(&app));
    let mut tasks = Vec::new();
    for trusted in [false, true] {
        if trusted {
            b.ok(&["trust", s(&app)]);
        }
        let check = b.json(&["check", s(&app), "--json"]);
        let notify = check["project_layer"]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == "notify")
            .unwrap_or_else(|| panic!("no verdict on notify: {check}"));
        assert_eq!(
            notify["verdict"], "user_layer_only",
            "trusted {trusted}: {notify}"
        );
        let t = send_detached(&b, &session, "go");
        assert_eq!(wait_final(&b, &session, &t)["status"], "succeeded");
        tasks.push(t);
    }
    let hits = mine.wait_for(30, |h| of(h, "task_finished").len() >= 2);
    let sent: Vec<Value> = of(&hits, "task_finished")
        .iter()
        .map(|b| b["task"]["id"].clone())
        .collect();
    assert_eq!(sent, [json!(tasks[0]), json!(tasks[1])]);
    assert_eq!(
        theirs.hits(),
        [],
        "nothing ever goes to the project's address"
    );
}

/// A request that waits and a task that ran at least `long_task_secs` (0 here) show
/// on the desktop: a `Notify` call on the session bus with their summaries.
#[test]
fn a_desktop_notification_goes_over_the_session_bus() {
    let mut b = Berth::new("notify-desktop");
    let bus = SessionBus::start(b.root.path());
    std::fs::write(
        b.config.join("settings.jsonc"),
        json!({ "notify": { "long_task_secs": 0 } }).to_string(),
    )
    .unwrap();
    b.env("DBUS_SESSION_BUS_ADDRESS", &bus.address);
    b.serve();
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    write_script(&app.join("check.sh"), "echo ran >> ran.txt\n");
    add_ask_peer(&b, "asker");
    let session = new_session(&b, "asker", Some(&app));
    let t = send_detached(&b, &session, "run: sh ./check.sh");
    waiting_approvals(&b, 1);
    let short = format!("{}-1", &t[..8]);
    let calls = eventually(30, || {
        let calls = bus.notify_calls();
        (!calls.is_empty()).then_some(calls)
    })
    .unwrap_or_else(|| panic!("no Notify call: {}\n{}", bus.seen(), b.serve_log()));
    let asked = &calls[0];
    assert!(
        asked.contains("interface=org.freedesktop.Notifications; member=Notify"),
        "{asked}"
    );
    for part in [
        "string \"Berth\"".to_owned(),
        "string \"Berth: the agent asks to execute\"".to_owned(),
        format!("sh ./check.sh\nberth approve {short}"),
    ] {
        assert!(asked.contains(&part), "{part} in {asked}");
    }
    b.ok(&["approve", &short]);
    assert_eq!(wait_final(&b, &session, &t)["status"], "succeeded");
    let calls = eventually(30, || {
        let calls = bus.notify_calls();
        (calls.len() >= 2).then_some(calls)
    })
    .unwrap_or_else(|| panic!("no second Notify call: {}", bus.seen()));
    assert!(
        calls[1].contains("string \"Berth: a task finished after ")
            && calls[1].contains("~/code/app"),
        "{}",
        calls[1]
    );
    assert!(!bus.seen().contains(FAKE_USER), "{}", bus.seen());
}

/// Without a session bus the desktop is off, said once at debug level, never as an
/// error; with `"desktop": false` nothing reaches a bus that is there.
#[test]
fn without_a_bus_or_when_turned_off_the_desktop_gets_nothing() {
    let mut b = Berth::new("notify-nobus");
    std::fs::write(
        b.config.join("settings.jsonc"),
        json!({ "notify": { "long_task_secs": 0 } }).to_string(),
    )
    .unwrap();
    b.env("BERTH_LOG", "debug");
    b.serve();
    add_command_agent(&b, "ok", "echo done");
    let session = new_session(&b, "ok", None);
    let t = send_detached(&b, &session, "go");
    assert_eq!(wait_final(&b, &session, &t)["status"], "succeeded");
    let log = b.serve_log();
    assert!(
        log.contains(
            "desktop notifications are off: no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
        ),
        "{log}"
    );
    assert!(
        !log.lines()
            .any(|l| l.contains("WARN") || l.contains("ERROR") || l.starts_with("warning")),
        "{log}"
    );

    // Turned off, with a bus there: the webhook's event comes (the task ended and was
    // told to every notifier), the bus never hears of it.
    let hook = Receiver::start();
    let bus = SessionBus::start(b.root.path());
    let mut off = Berth::new("notify-off");
    let mut settings = webhook_to(&hook.url);
    settings["notify"]["long_task_secs"] = json!(0);
    std::fs::write(off.config.join("settings.jsonc"), settings.to_string()).unwrap();
    off.env(SECRET_ENV, SECRET);
    off.env("DBUS_SESSION_BUS_ADDRESS", &bus.address);
    off.serve();
    add_command_agent(&off, "ok", "echo done");
    let session = new_session(&off, "ok", None);
    let t = send_detached(&off, &session, "go");
    assert_eq!(wait_final(&off, &session, &t)["status"], "succeeded");
    hook.wait_for(30, |h| !of(h, "task_finished").is_empty());
    assert_eq!(bus.notify_calls(), Vec::<String>::new(), "{}", bus.seen());
}
