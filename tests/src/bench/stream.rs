//! Text as it comes (issue 56): from a piece of a message an ACP agent writes to an
//! SSE client reading it. The agent is the scripted peer (`peers/stream_peer.py`,
//! `stamps: N`): it writes N message chunks a few milliseconds apart, each carrying the
//! wall clock (ns) it read just before writing it. Two clients follow the session
//! meanwhile, one on the web listener (TCP on loopback, the browser's way, the display
//! rule applied) and one on the control socket (the CLI's); each notes the wall clock
//! as each piece arrives. One clock, one machine.

use super::{Config, Goal, Row, percentile_rows};
use anyhow::{Context as _, Result, ensure};
use std::time::Duration;

const AGENT: &str = "streamer";

/// Pieces whose samples are dropped: the first connections and paths.
const WARM_UP: usize = 5;

/// The wall clock, in ns since the epoch.
fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The stamps (`@<ns>`) a piece of text carries.
fn stamps(text: &str) -> impl Iterator<Item = u128> + '_ {
    text.split('@')
        .skip(1)
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
}

/// Reads `next` until task `task` ends: each stamp's latency (ms) at its arrival.
fn latencies(
    task: &str,
    mut next: impl FnMut() -> std::io::Result<Option<berth_test_support::http::SseEvent>>,
) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    while let Some(ev) = next().context("reading the event stream")? {
        let at = wall_ns();
        let doc = ev.json();
        if doc["task_id"].as_str() != Some(task) {
            continue;
        }
        match ev.event.as_str() {
            "delta" => {
                let text = doc["payload"]["text"].as_str().unwrap_or_default();
                out.extend(stamps(text).map(|s| at.saturating_sub(s) as f64 / 1e6));
            }
            "task" => return Ok(out),
            _ => {}
        }
    }
    anyhow::bail!("the event stream ended before task {task} finished")
}

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let n = cfg.stream_chunks;
    let b = super::served("bench-stream");
    crate::steps::add_stream_peer(&b, AGENT, "edit");
    let sock = super::socket(&b);
    let mut conn = super::http::Conn::connect(&sock)?;
    let session = super::new_session(&mut conn, AGENT, "stream")?;
    let timeout = Duration::from_secs(120);
    let mut web = crate::steps::web_events(&b, &session, true, timeout);
    let mut control = super::http::Sse::open(&sock, &session, 0, timeout)?;
    let task = super::post_message(&mut conn, &session, &format!("gap-ms: 5\nstamps: {n}"))?;
    let (web, control) = std::thread::scope(|s| {
        let t = task.as_str();
        let web = s.spawn(move || latencies(t, || web.next_event()));
        let control =
            s.spawn(move || latencies(t, || control.next_event().map_err(std::io::Error::other)));
        (web.join(), control.join())
    });
    let web = web.map_err(|_| anyhow::anyhow!("the web client panicked"))??;
    let control = control.map_err(|_| anyhow::anyhow!("the control client panicked"))??;
    for (what, got) in [("web listener", &web), ("control socket", &control)] {
        ensure!(
            got.len() == n,
            "the {what}'s client got {} of {n} pieces",
            got.len()
        );
    }
    let mut rows = percentile_rows(
        "stream",
        "chunk written → SSE client, web listener",
        web.get(WARM_UP.min(n)..).unwrap_or_default(),
        Some(Goal::AtMost(5.0)),
    );
    rows.extend(percentile_rows(
        "stream",
        "chunk written → SSE client, control socket",
        control.get(WARM_UP.min(n)..).unwrap_or_default(),
        Some(Goal::AtMost(5.0)),
    ));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_read_from_pieces() {
        let got: Vec<u128> = stamps("@12 @34 ").collect();
        assert_eq!(got, [12, 34]);
        assert_eq!(stamps("no stamp").count(), 0);
    }
}
