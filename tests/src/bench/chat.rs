//! Approvals in Slack (issue 55): from an agent's request reaching Berth to its
//! message posted in the Slack thread, and from a signed click to the agent reading
//! the decision. Slack is a fake on loopback over https (a throwaway CA in
//! `BERTH_CA_FILE`: TLS included), answering the Web API as Slack does.
//!
//! The agent is this very binary (`berth-bench --acp-peer N`, see
//! [`super::approvals::peer`]), in a channel session made by a signed Slack message: it
//! asks N times in its one prompt and reports, for each request, the wall clock (µs)
//! just before it wrote it and just after it read the decision. The fake notes the
//! wall clock when each request's message arrives; the bench notes it just before it
//! sends each click. Both ends run on this machine's one clock.

use super::{Config, Goal, Row, percentile_rows};
use crate::steps::slack_sign;
use crate::tls::{HttpsFake, Pki};
use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const AGENT: &str = "ask-peer";
const SECRET: &str = "bench-signing-secret";

/// Requests whose samples are dropped: the first connections and paths.
const WARM_UP: usize = 5;

/// The wall clock, in µs since the epoch.
fn wall_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// A request's message, as the fake Slack received it.
struct Card {
    at_us: u128,
    approval: String,
    ts: String,
}

/// POSTs `body` to `path` on the web listener at `addr`, signed as Slack signs.
fn signed_post(addr: &str, path: &str, kind: &str, body: &str) -> Result<u16> {
    use std::io::{BufRead, BufReader, Read, Write};
    let ts = (wall_us() / 1_000_000).to_string();
    let sig = slack_sign(SECRET, &ts, body.as_bytes());
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {kind}\r\n\
         X-Slack-Request-Timestamp: {ts}\r\nX-Slack-Signature: {sig}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status)?;
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    status
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("an HTTP status line")
}

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.approval_requests;
    let root = crate::TempDir::new("bench-chat-pki");
    let pki = Pki::generate(&root.path().join("pki"), "slack");
    let cards: Arc<Mutex<Vec<Card>>> = Arc::default();
    let seen = cards.clone();
    let fake = HttpsFake::start(&pki, move |r| {
        let at_us = wall_us();
        let body: Value = serde_json::from_str(&r.body).unwrap_or_default();
        match r.path.as_str() {
            "/slack/chat.postMessage" => {
                let approval = body["blocks"][2]["elements"][0]["value"].as_str();
                let mut cards = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let ts = format!("{}.0", cards.len() + 1);
                if let Some(approval) = approval {
                    cards.push(Card {
                        at_us,
                        approval: approval.to_owned(),
                        ts: ts.clone(),
                    });
                }
                json!({"ok": true, "channel": "C1", "ts": ts})
            }
            _ => json!({"ok": true}),
        }
        .to_string()
    });
    let api = format!("{}/slack", fake.url());
    let ca = pki.ca.to_string_lossy().into_owned();
    let b = super::served_with(
        "bench-chat",
        &[
            ("BERTH_CA_FILE", &ca),
            ("BERTH_SLACK_SIGNING_SECRET", SECRET),
            ("BERTH_SLACK_BOT_TOKEN", "xoxb-bench"),
            ("BERTH_SLACK_API_URL", &api),
            ("BERTH_CHANNEL_AGENT", AGENT),
        ],
    );
    super::approvals::add_peer(&b, AGENT, WARM_UP + n)?;
    let (url, _) = b.serve_info();
    let addr = url.trim_start_matches("http://").to_owned();
    let event = json!({"type": "event_callback", "event_id": "EvBench", "event_time": 1,
        "team_id": "T1", "event": {"type": "message", "channel": "C1", "user": "U0BENCH",
        "text": "ask away", "ts": "1.1", "channel_type": "channel"}})
    .to_string();
    ensure!(
        signed_post(&addr, "/hooks/slack", "application/json", &event)? == 200,
        "the Slack message was not taken in"
    );
    let mut clicked = Vec::with_capacity(WARM_UP + n);
    for k in 0..WARM_UP + n {
        let deadline = Instant::now() + Duration::from_secs(60);
        let (approval, ts) = loop {
            if let Some(c) = cards
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(k)
            {
                break (c.approval.clone(), c.ts.clone());
            }
            if Instant::now() > deadline {
                bail!("request {k}'s message never reached Slack");
            }
            std::thread::sleep(Duration::from_micros(100));
        };
        let payload = json!({"type": "block_actions", "user": {"id": "U0BENCH"},
            "trigger_id": format!("tr-{k}"),
            "container": {"type": "message", "message_ts": ts, "channel_id": "C1"},
            "actions": [{"action_id": "berth_allow", "value": approval, "type": "button"}]});
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        clicked.push(wall_us());
        let code = signed_post(
            &addr,
            "/hooks/slack/actions",
            "application/x-www-form-urlencoded",
            &body,
        )?;
        ensure!(code == 200, "a click was answered {code}");
    }
    // The peer's report: `elapsed:sent:answered` (µs) per request.
    let report = super::approvals::peer_report(&b, WARM_UP + n)?;
    let cards = cards
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut posted = Vec::with_capacity(n);
    let mut decided = Vec::with_capacity(n);
    for (k, (_, sent, answered)) in report.iter().enumerate().skip(WARM_UP) {
        posted.push(cards[k].at_us.saturating_sub(*sent) as f64 / 1e3);
        decided.push(answered.saturating_sub(clicked[k]) as f64 / 1e3);
    }
    let mut rows = percentile_rows(
        "chat",
        "request → its message posted in the Slack thread (https) (ms)",
        &posted,
        Some(Goal::AtMost(20.0)),
    );
    rows.extend(percentile_rows(
        "chat",
        "signed click → decision at the agent (ms)",
        &decided,
        Some(Goal::AtMost(20.0)),
    ));
    Ok(rows)
}
