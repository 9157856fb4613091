//! Remote claim (issues 6 and 7): from a message accepted to its agent started on a
//! remote daemon's machine, for a daemon that long-polls (`berth daemon`) against one
//! that polls every second (`berth daemon --poll-ms 1000`), in the same run.
//!
//! The same long-polling claim is then timed against a server serving https (a CA made
//! for the run), and the daemon's event throughput is measured with its pooled,
//! kept-alive client against one connection per call (`--no-keep-alive`), over https.
//!
//! The agent is `date +%s%N`: the first thing it does is print the wall clock, so its
//! one line of output is the moment it started. Both daemons and the server run on
//! this machine, so that clock is the one the benchmark read just before posting the
//! message.

use super::http::{Conn, Sse};
use super::{Config, Goal, Row, percentile_rows, post_message, progress, quantile, socket};
use crate::Berth;
use anyhow::{Context as _, Result, bail, ensure};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Messages before the timed ones, per daemon.
const WARM_UP: usize = 3;

const AGENT: &str = "stamp";

fn now_ns() -> Result<u128> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos())
}

/// Starts a daemon for `server_url` in a fresh installation, with a token of its own,
/// and a session bound in a project directory on it; returns both.
fn daemon(srv: &Berth, url: &str, name: &str, extra: &[&str]) -> Result<(Berth, String)> {
    let token = srv.json(&["daemon", "token", "create", name, "--json"])["token"]
        .as_str()
        .map(str::to_owned)
        .context("token create printed no token")?;
    let mut d = Berth::new(&format!("bench-{name}"));
    d.env("BERTH_DAEMON_TOKEN", &token);
    let mut args = vec!["daemon", "--server", url, "--name", name];
    args.extend_from_slice(extra);
    d.start(&args);
    let id = session_on(&d, AGENT, name)?;
    Ok((d, id))
}

/// A session of `agent` bound in a project directory on the daemon `d`'s machine.
fn session_on(d: &Berth, agent: &str, name: &str) -> Result<String> {
    let dir = d.user_home.join("code/app");
    std::fs::create_dir_all(&dir)?;
    let dir = dir.to_str().context("utf-8 path")?.to_owned();
    let doc = d.json(&[
        "session", "new", "--agent", agent, "--dir", &dir, "--title", name, "--json",
    ]);
    let id = doc["id"].as_str().context("session without id")?.to_owned();
    ensure!(
        doc["binding"]["daemon_name"] == name,
        "the session is not bound on {name}: {doc}"
    );
    Ok(id)
}

/// Reads `sse` until `task`'s `task` event (60 s at most), passing each line of the
/// agent's text to `text`; fails unless the task succeeded.
fn until_task_ends(sse: &mut Sse, task: &str, mut text: impl FnMut(&str)) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // Keep-alives reset the stream's read timeout: a task that never ends fails
        // the benchmark instead of hanging it.
        ensure!(
            std::time::Instant::now() < deadline,
            "task {task} did not end within 60 s"
        );
        let Some(ev) = sse.next_event()? else {
            bail!("the stream ended before task {task} finished");
        };
        let doc = ev.json();
        if doc["task_id"].as_str() != Some(task) {
            continue;
        }
        if doc["kind"] == "agent" && doc["payload"]["type"] == "text" {
            text(doc["payload"]["text"].as_str().unwrap_or_default());
        }
        if ev.event == "task" {
            let status = &doc["payload"]["task"]["status"];
            ensure!(status == "succeeded", "task {task} ended {status}");
            return Ok(());
        }
    }
}

/// Posts `n` (+ warm-up) messages to `session` one after another; each sample is
/// the agent's own start time minus the time just before the message was posted.
fn measure(sock: &Path, conn: &mut Conn, session: &str, n: usize, what: &str) -> Result<Vec<f64>> {
    let mut sse = Sse::open(sock, session, 0, Duration::from_secs(60))?;
    let mut out = Vec::with_capacity(n);
    for i in 0..WARM_UP + n {
        let t0 = now_ns()?;
        let task = post_message(conn, session, "go")?;
        let mut started = None;
        until_task_ends(&mut sse, &task, |text| {
            started = text.trim().parse::<u128>().ok();
        })?;
        let started = started.with_context(|| format!("task {task} printed no time"))?;
        if i >= WARM_UP {
            out.push(started.saturating_sub(t0) as f64 / 1e6);
        }
        if (i + 1) % 100 == 0 {
            progress(format!("remote claim ({what}): {}/{}", i + 1, WARM_UP + n));
        }
    }
    Ok(out)
}

/// Lines the event-throughput agent prints.
const EVENT_LINES: usize = 3000;
const LINES_AGENT: &str = "lines";

/// The events of one task that prints [`EVENT_LINES`] lines, from the message posted
/// to its `task` event on the server's stream: events per second.
fn event_rate(sock: &Path, conn: &mut Conn, session: &str) -> Result<f64> {
    let mut sse = Sse::open(sock, session, 0, Duration::from_secs(120))?;
    let t0 = std::time::Instant::now();
    let task = post_message(conn, session, "go")?;
    let mut lines = 0usize;
    until_task_ends(&mut sse, &task, |_| lines += 1)?;
    ensure!(
        lines == EVENT_LINES,
        "{lines} of {EVENT_LINES} lines arrived"
    );
    Ok(lines as f64 / t0.elapsed().as_secs_f64())
}

/// `berth serve --allow-daemons`, over https with a CA made for the run when `tls`;
/// its URL and the CA file.
fn server(name: &str, tls: bool) -> Result<(Berth, String, Option<std::path::PathBuf>)> {
    let mut srv = Berth::new(name);
    let ca = if tls {
        let pki = crate::tls::Pki::generate(&srv.root.path().join("pki"), name);
        srv.serve_tls(&pki, &["--allow-daemons"]);
        Some(pki.ca)
    } else {
        srv.serve_with(&["--allow-daemons"]);
        None
    };
    let (url, _) = srv.serve_info();
    srv.ok(&[
        "agent",
        "add",
        AGENT,
        "--kind",
        "command",
        "--command",
        "date",
        "+%s%N",
    ]);
    let lines = format!("cat >/dev/null; seq 1 {EVENT_LINES}");
    srv.ok(&[
        "agent",
        "add",
        LINES_AGENT,
        "--kind",
        "command",
        "--command",
        "sh",
        "-c",
        &lines,
    ]);
    Ok((srv, url, ca))
}

/// The TLS half: claim latency over https, and event throughput pooled against a
/// connection per call.
fn over_https(cfg: &Config) -> Result<(Vec<f64>, f64, f64)> {
    let (srv, url, ca) = server("bench-remote-tls", true)?;
    let ca = ca.context("no CA")?;
    let ca = ca.to_str().context("utf-8 path")?;
    let (long_d, long_session) = daemon(&srv, &url, "https-long", &["--ca-file", ca])?;
    let (fresh_d, fresh_session) = daemon(
        &srv,
        &url,
        "https-fresh",
        &["--ca-file", ca, "--no-keep-alive"],
    )?;
    let sock = socket(&srv);
    let mut conn = Conn::connect(&sock)?;
    let long = measure(
        &sock,
        &mut conn,
        &long_session,
        cfg.remote_messages,
        "https",
    )?;
    let _ = fresh_session;
    let pooled_lines = session_on(&long_d, LINES_AGENT, "https-long")?;
    let fresh_lines = session_on(&fresh_d, LINES_AGENT, "https-fresh")?;
    // Interleaved, so both see the same load; the median of three each.
    let (mut pooled, mut fresh) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        pooled.push(event_rate(&sock, &mut conn, &pooled_lines)?);
        fresh.push(event_rate(&sock, &mut conn, &fresh_lines)?);
    }
    let median = |v: &[f64]| quantile(v, 0.5).unwrap_or(f64::NAN);
    Ok((long, median(&pooled), median(&fresh)))
}

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let (srv, url, _) = server("bench-remote", false)?;
    let (_long, long_session) = daemon(&srv, &url, "long-poll", &[])?;
    let (_poll, poll_session) = daemon(&srv, &url, "poll-1s", &["--poll-ms", "1000"])?;
    let sock = socket(&srv);
    let mut conn = Conn::connect(&sock)?;
    let long = measure(
        &sock,
        &mut conn,
        &long_session,
        cfg.remote_messages,
        "long poll",
    )?;
    let poll = measure(
        &sock,
        &mut conn,
        &poll_session,
        cfg.poll_messages,
        "1 s polling",
    )?;

    let mut rows = percentile_rows(
        "remote claim",
        "long-polling daemon",
        &long,
        Some(Goal::AtMost(5.0)),
    );
    rows.extend(percentile_rows(
        "remote claim",
        "daemon polling every 1 s",
        &poll,
        None,
    ));
    let p50 = |v: &[f64]| quantile(v, 0.5).unwrap_or(f64::NAN);
    drop(conn);
    drop(srv);
    let (https, pooled, fresh) = over_https(cfg)?;
    rows.extend(percentile_rows(
        "remote claim",
        "long-polling daemon over https",
        &https,
        Some(Goal::AtMost(5.0)),
    ));
    rows.push(
        Row::new(
            "remote claim",
            "https p50 / http p50 (long poll)",
            p50(&https) / p50(&long),
            "x",
            None,
        )
        .with_note("what TLS adds to a claim: pooled connections keep the handshake out of it"),
    );
    rows.push(
        Row::new(
            "remote claim",
            "daemon events over https, pooled client",
            pooled,
            "events/s",
            None,
        )
        .with_note(format!(
            "one task printing {EVENT_LINES} lines, message to last event; median of 3"
        )),
    );
    rows.push(
        Row::new(
            "remote claim",
            "daemon events over https, a connection per call",
            fresh,
            "events/s",
            None,
        )
        .with_note(
            "the same daemon with --no-keep-alive: a TCP connect and TLS handshake per call",
        ),
    );
    rows.push(
        Row::new(
            "remote claim",
            "1 s polling p50 / long poll p50",
            p50(&poll) / p50(&long),
            "x",
            None,
        )
        .with_note("how much sooner a long-polling daemon starts the agent"),
    );
    Ok(rows)
}
