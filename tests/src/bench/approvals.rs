//! Approvals (issue 54): from an agent's `session/request_permission` reaching Berth
//! to the agent reading the decision, when the answer is given the instant the request
//! is listed (its `approval` event on the session's stream), over the API.
//!
//! The agent is this very binary (`berth-bench --acp-peer N`, [`peer`]): a scripted ACP
//! agent that asks N times in one prompt, each time timing from just before it writes
//! the request to just after it reads the answer, and reports the times as its final
//! text. The bench answers each request on the control socket as soon as the stream
//! shows it. So a sample holds the whole path: the runner reads the request, the store
//! records it and streams it, the answer is decided in the store, handed to the run,
//! and written back to the agent.

use super::http::{Conn, Sse};
use super::{Config, Goal, Row, new_session, percentile_rows, post_message, socket};
use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

const AGENT: &str = "ask-peer";

/// Requests whose samples are dropped: the first paths through the store.
const WARM_UP: usize = 5;

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.approval_requests;
    let b = super::served("bench-approvals");
    add_peer(&b, AGENT, WARM_UP + n)?;
    let sock = socket(&b);
    let mut conn = Conn::connect(&sock)?;
    let session = new_session(&mut conn, AGENT, "approvals")?;
    let mut sse = Sse::open(&sock, &session, 0, Duration::from_secs(120))?;
    let task = post_message(&mut conn, &session, "ask away")?;
    let mut answered = 0;
    let done = loop {
        let Some(ev) = sse.next_event()? else {
            bail!("the stream ended before the task did");
        };
        let doc = ev.json();
        match ev.event.as_str() {
            "approval" if doc["payload"]["decision"].is_null() => {
                let id = doc["payload"]["id"].as_str().context("an approval id")?;
                let a = conn.json(
                    "POST",
                    &format!("/api/v1/approvals/{id}"),
                    Some(&json!({"decision": "allow"})),
                )?;
                ensure!(a["decision"]["decision"] == "allow", "not allowed: {a}");
                answered += 1;
            }
            "task" if doc["task_id"] == task.as_str() => break doc["payload"]["task"].clone(),
            _ => {}
        }
    };
    ensure!(
        done["status"] == "succeeded" && answered == WARM_UP + n,
        "the peer's turn: {done} ({answered} answered)"
    );
    let report = parse_report(&last_text(&b, &session)?)?;
    let samples: Vec<f64> = report
        .iter()
        .skip(WARM_UP)
        .map(|(elapsed, _, _)| *elapsed as f64 / 1e3)
        .collect();
    ensure!(samples.len() == n, "{} samples, not {n}", samples.len());
    Ok(percentile_rows(
        "approvals",
        "request → decision at the agent, answered over the API at once (ms)",
        &samples,
        Some(Goal::AtMost(2.0)),
    ))
}

/// Registers this very binary as `name`, an ACP agent under `ask` that asks `n` times
/// in its one prompt ([`peer`]).
pub fn add_peer(b: &crate::Berth, name: &str, n: usize) -> Result<()> {
    let me = std::env::current_exe().context("the bench's own path")?;
    let me = me.to_str().context("a UTF-8 path")?;
    crate::steps::add_ask_agent(b, name, &[me, "--acp-peer", &n.to_string()]);
    Ok(())
}

/// The peer's report: per request, `elapsed:sent:answered` in µs (the time it took,
/// and the wall clock just before it wrote the request and just after it read the
/// decision).
fn parse_report(report: &str) -> Result<Vec<(u128, u128, u128)>> {
    report
        .split_whitespace()
        .map(|s| {
            let mut f = s.split(':').map(str::parse::<u128>);
            match (f.next(), f.next(), f.next()) {
                (Some(Ok(e)), Some(Ok(s)), Some(Ok(a))) => Ok((e, s, a)),
                _ => bail!("not elapsed:sent:answered: {s:?}"),
            }
        })
        .collect::<Result<_>>()
        .with_context(|| format!("the peer's report {report:?}"))
}

/// The report of the peer that asked `n` times in `b`'s one session, once its turn
/// is over.
pub fn peer_report(b: &crate::Berth, n: usize) -> Result<Vec<(u128, u128, u128)>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = b.json(&["session", "list", "--json"]);
        let sessions = list.as_array().cloned().unwrap_or_default();
        for s in &sessions {
            let Some(id) = s["id"].as_str() else { continue };
            if let Ok(report) = last_text(b, id).and_then(|t| parse_report(&t))
                && report.len() == n
            {
                return Ok(report);
            }
        }
        if Instant::now() > deadline {
            bail!("the peer reported no {n} times");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The agent's last text of the session (the peer's report).
fn last_text(b: &crate::Berth, session: &str) -> Result<String> {
    let out = b.run(&["session", "log", session, "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["kind"] == "agent" && v["payload"]["type"] == "text")
        .find_map(|v| v["payload"]["text"].as_str().map(str::to_owned))
        .context("the peer reported no times")
}

/// The wall clock, in µs since the epoch.
fn wall_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// `berth-bench --acp-peer N`: a scripted ACP agent on stdin and stdout that asks N
/// permissions in its one prompt and answers with what each took (see
/// [`parse_report`]).
pub fn peer(n: usize) -> Result<()> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    let send = |out: &mut std::io::StdoutLock<'_>, v: Value| -> Result<()> {
        out.write_all(v.to_string().as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()?;
        Ok(())
    };
    while let Some(line) = lines.next() {
        let m: Value = serde_json::from_str(&line?)?;
        let id = m["id"].clone();
        match m["method"].as_str() {
            Some("initialize") => send(
                &mut out,
                json!({"jsonrpc": "2.0", "id": id, "result": {"protocolVersion": 1, "agentCapabilities": {}}}),
            )?,
            Some("session/new") => send(
                &mut out,
                json!({"jsonrpc": "2.0", "id": id, "result": {"sessionId": "bench"}}),
            )?,
            Some("session/prompt") => {
                let mut times = Vec::with_capacity(n);
                for k in 0..n {
                    let rid = 10_000 + k;
                    let req = json!({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission",
                        "params": {"sessionId": "bench",
                            "toolCall": {"toolCallId": format!("c{k}"), "kind": "execute",
                                "title": "check", "rawInput": {"command": "sh ./check.sh"}},
                            "options": [{"optionId": "y", "name": "Allow", "kind": "allow_once"},
                                {"optionId": "n", "name": "Reject", "kind": "reject_once"}]}});
                    let t = Instant::now();
                    let sent = wall_us();
                    send(&mut out, req)?;
                    loop {
                        let Some(line) = lines.next() else {
                            bail!("Berth closed the pipe");
                        };
                        let a: Value = serde_json::from_str(&line?)?;
                        if a["id"] == rid && a.get("method").is_none() {
                            ensure!(
                                a["result"]["outcome"]["optionId"] == "y",
                                "not allowed: {a}"
                            );
                            break;
                        }
                    }
                    let elapsed = t.elapsed().as_micros();
                    times.push(format!("{elapsed}:{sent}:{}", wall_us()));
                }
                send(
                    &mut out,
                    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "bench",
                        "update": {"sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": times.join(" ")}}}}),
                )?;
                send(
                    &mut out,
                    json!({"jsonrpc": "2.0", "id": id, "result": {"stopReason": "end_turn"}}),
                )?;
            }
            Some(_) if !id.is_null() => send(
                &mut out,
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "not here"}}),
            )?,
            _ => {}
        }
    }
    Ok(())
}
