//! Reads (issues 4 and 7): listing many sessions, and one long transcript over SSE.

use super::http::{Conn, Sse};
use super::{
    Config, Goal, Row, ms_since, new_session, percentile_rows, post_message, progress, served,
    socket, succeeded,
};
use anyhow::{Context as _, Result, anyhow, ensure};
use serde_json::json;
use std::thread;
use std::time::{Duration, Instant};

/// The agent that prints the transcript's lines.
const LINES_AGENT: &str = "lines";

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let b = served("bench-reads");
    let sock = socket(&b);
    let mut rows = Vec::new();

    let n = cfg.list_sessions;
    progress(format!(
        "reads: creating {n} sessions over {} connections",
        cfg.submitters
    ));
    let t = Instant::now();
    let makers: Vec<_> = (0..cfg.submitters)
        .map(|k| {
            let sock = sock.clone();
            let count = (k..n).step_by(cfg.submitters).count();
            thread::spawn(move || -> Result<()> {
                let mut conn = Conn::connect(&sock)?;
                for i in 0..count {
                    new_session(&mut conn, super::CAT_AGENT, &format!("listed {k}-{i}"))?;
                }
                Ok(())
            })
        })
        .collect();
    for h in makers {
        h.join()
            .map_err(|_| anyhow!("a session maker panicked"))??;
    }
    let create_s = t.elapsed().as_secs_f64();
    rows.push(Row::new(
        "reads",
        &format!("create {n} sessions over the API"),
        n as f64 / create_s,
        "sessions/s",
        None,
    ));

    let mut conn = Conn::connect(&sock)?;
    let listed = conn.json("GET", "/api/v1/sessions", None)?;
    let count = listed.as_array().map_or(0, Vec::len);
    ensure!(count == n, "listed {count} sessions, expected {n}");
    let mut samples = Vec::new();
    let mut bytes = 0;
    for _ in 0..cfg.list_requests {
        let t = Instant::now();
        let (status, body) = conn.request("GET", "/api/v1/sessions", None)?;
        samples.push(ms_since(t));
        ensure!(status == 200, "GET sessions: HTTP {status}");
        bytes = body.len();
    }
    let mut list = percentile_rows(
        "reads",
        &format!("GET /api/v1/sessions, {n} sessions"),
        &samples,
        Some(Goal::AtMost(20.0)),
    );
    if let Some(first) = list.first_mut() {
        first.note = Some(format!("{} KB of JSON per answer", bytes / 1024));
    }
    rows.extend(list);

    rows.extend(transcript(cfg, &sock, &mut conn)?);
    Ok(rows)
}

/// One session whose agent prints `cfg.transcript_lines` lines; the time to receive
/// the whole stored transcript on a fresh SSE connection.
fn transcript(cfg: &Config, sock: &std::path::Path, conn: &mut Conn) -> Result<Vec<Row>> {
    let script = format!("cat >/dev/null; seq 1 {}", cfg.transcript_lines);
    conn.json(
        "POST",
        "/api/v1/agents",
        Some(&json!({"name": LINES_AGENT, "kind": "command", "command": ["sh", "-c", script]})),
    )?;
    let session = new_session(conn, LINES_AGENT, "long transcript")?;
    let mut live = Sse::open(sock, &session, 0, Duration::from_secs(120))?;
    let task = post_message(conn, &session, "print")?;
    let mut last_seq = 0;
    loop {
        let ev = live
            .next_event()?
            .context("the stream ended before the task did")?;
        last_seq = ev.seq().unwrap_or(last_seq);
        if ev.event == "task" {
            let doc = ev.json();
            if doc["task_id"] == task.as_str() {
                ensure!(succeeded(&doc["payload"]["task"]), "lines task: {doc}");
                break;
            }
        }
    }
    drop(live);
    progress(format!(
        "reads: transcript of {last_seq} events stored; reading it back"
    ));

    let mut samples = Vec::new();
    for _ in 0..cfg.transcript_reads {
        let t = Instant::now();
        let mut sse = Sse::open(sock, &session, 0, Duration::from_secs(60))?;
        let mut got = 0;
        loop {
            let ev = sse
                .next_event()?
                .context("the stream ended before the last event")?;
            got += 1;
            if ev.seq() == Some(last_seq) {
                break;
            }
        }
        samples.push(ms_since(t));
        ensure!(
            got == last_seq,
            "received {got} events, expected {last_seq}"
        );
    }
    let mut rows = percentile_rows(
        "reads",
        &format!("whole {last_seq}-event transcript over SSE, fresh connection"),
        &samples,
        None,
    );
    rows.truncate(1);
    if let Some(r) = rows.first_mut() {
        r.note = Some(format!(
            "{} printed lines; {} reads",
            cfg.transcript_lines, cfg.transcript_reads
        ));
    }
    Ok(rows)
}
