//! Throughput (issue 7): many sessions × many messages at once with the `cat` agent:
//! tasks per second, and none lost.

use super::http::{Conn, Sse};
use super::{CAT_AGENT, Config, Goal, Row, new_session, post_message, progress, served, socket};
use anyhow::{Context as _, Result, anyhow};
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

/// How long one session's stream may stay silent before the run gives up on it.
const QUIET: Duration = Duration::from_secs(120);

/// Reads `session`'s stream until `expected` tasks have ended; returns when the last
/// one did, and how many ended.
fn watch(sock: PathBuf, session: String, expected: usize) -> (Option<Instant>, usize) {
    let Ok(mut sse) = Sse::open(&sock, &session, 0, QUIET) else {
        return (None, 0);
    };
    let mut ended = 0;
    while ended < expected {
        match sse.next_event() {
            Ok(Some(ev)) if ev.event == "task" => ended += 1,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return (None, ended),
        }
    }
    (Some(Instant::now()), ended)
}

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let (n_sessions, per) = (cfg.throughput_sessions, cfg.throughput_messages);
    let total = n_sessions * per;
    let b = served("bench-throughput");
    let sock = socket(&b);
    let mut conn = Conn::connect(&sock)?;
    let sessions = (0..n_sessions)
        .map(|i| new_session(&mut conn, CAT_AGENT, &format!("throughput {i}")))
        .collect::<Result<Vec<_>>>()?;

    // Every stream is open before the first message, so no task event is missed.
    let watchers: Vec<_> = sessions
        .iter()
        .map(|s| {
            let (sock, s) = (sock.clone(), s.clone());
            thread::spawn(move || watch(sock, s, per))
        })
        .collect();
    thread::sleep(Duration::from_millis(200));

    progress(format!(
        "throughput: submitting {n_sessions} × {per} = {total} messages over {} connections",
        cfg.submitters
    ));
    let start = Instant::now();
    let submitters: Vec<_> = (0..cfg.submitters)
        .map(|k| {
            let mine: Vec<String> = sessions
                .iter()
                .skip(k)
                .step_by(cfg.submitters)
                .cloned()
                .collect();
            let sock = sock.clone();
            thread::spawn(move || -> Result<usize> {
                let mut conn = Conn::connect(&sock)?;
                let mut sent = 0;
                for j in 0..per {
                    for s in &mine {
                        post_message(&mut conn, s, &format!("message {j} to {s}"))?;
                        sent += 1;
                    }
                }
                Ok(sent)
            })
        })
        .collect();
    let mut submitted = 0;
    for h in submitters {
        submitted += h.join().map_err(|_| anyhow!("a submitter panicked"))??;
    }
    let submit_s = start.elapsed().as_secs_f64();

    let mut last: Option<Instant> = None;
    let mut ended = 0;
    for h in watchers {
        let (at, n) = h.join().map_err(|_| anyhow!("a watcher panicked"))?;
        ended += n;
        last = match (last, at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    let elapsed = last
        .map(|t| t.duration_since(start).as_secs_f64())
        .context("no session finished its tasks")?;

    let tasks = conn.json("GET", "/api/v1/tasks", None)?;
    let tasks = tasks.as_array().context("task list is not an array")?;
    let ok = tasks.iter().filter(|t| t["status"] == "succeeded").count();
    let lost = total.saturating_sub(ok) as f64;
    progress(format!(
        "throughput: {ended}/{total} ended in {elapsed:.2} s, {ok} succeeded"
    ));

    Ok(vec![
        Row::new(
            "throughput",
            &format!("{n_sessions} sessions × {per} messages, `cat` agent"),
            ended as f64 / elapsed,
            "tasks/s",
            Some(Goal::AtLeast(200.0)),
        )
        .with_note(format!(
            "{ended} tasks ended in {elapsed:.2} s; all {submitted} accepted in {submit_s:.2} s"
        )),
        Row::new(
            "throughput",
            "lost (tasks not `succeeded`)",
            lost,
            "tasks",
            Some(Goal::AtMost(0.0)),
        ),
    ])
}
