//! `GET sessions/{id}/events`: the transcript as Server-Sent Events.
//!
//! Each event is written as `id: <seq>`, `event: <kind>`, `data: <json>` where the
//! JSON is `{seq, task_id, kind, at, payload}`. A client resumes with the
//! `Last-Event-ID` header (or `?after=N`) and misses nothing: the stream subscribes to
//! the session's live feed *before* reading the stored backlog, then skips anything
//! at or below the last `seq` it sent. A live event that is not the next `seq` (the
//! subscriber lagged) sends the stream back to the store to fill the gap.
//!
//! Between them come a message's pieces as the agent streams them: `event: delta`
//! with no `id` (they are never stored, so a reconnect neither asks for nor gets
//! them), data `{task_id, kind: "delta", payload}` where the payload is the agent's
//! `{"type": "delta", text, thought, part}`. A delta is sent only in its place right
//! after the stored event it followed; the whole message is stored (and sent) after
//! its last piece. Where the display rule applies (the web listener, the cloud API),
//! a piece is held back to the last whitespace, so a path or a name cut between two
//! pieces is still recognized and redacted.

use super::access::NamedSession;
use super::state::{Ctx, Surface};
use super::views::web_task;
use crate::http::ApiError;
use crate::http::QueryArgs;
use crate::store::Store;
use crate::transcript::{Delta, Live, TranscriptEvent};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use berth_core::{Context, SessionId};
use futures_util::Stream;
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// Events read from the store per query while catching up.
const PAGE: i64 = 500;

/// How often an idle stream sends a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Default, Deserialize)]
pub(crate) struct EventsQuery {
    after: Option<i64>,
    /// `false`: the stream ends after the events stored when it was asked for (what
    /// `berth session log` prints); by default it goes on with live ones.
    follow: Option<bool>,
}

struct Feed {
    store: Store,
    session: SessionId,
    last: i64,
    backlog: VecDeque<TranscriptEvent>,
    /// The store may hold events after `last` that are not in `backlog`.
    behind: bool,
    live: broadcast::Receiver<Arc<Live>>,
    /// The message being streamed on a redacting surface: what is held back.
    held: Option<Held>,
    surface: Surface,
    /// The display context of the session's machine (see `super::redact`).
    display: Arc<Context>,
    closing: tokio::sync::watch::Receiver<bool>,
    /// The server is shutting down and the last word (the `retry:` hint) was sent.
    ended: bool,
    /// Whether live events follow the stored ones (`?follow=false` ends after those).
    follow: bool,
    /// Counts the stream in `berth_sse_clients` while it lives.
    _client: crate::metrics::SseClient,
}

/// A message streamed on a surface where the display rule applies: the text not
/// sent yet (after the last whitespace), and how its pieces are counted in and out.
#[derive(Debug)]
struct Held {
    task_id: berth_core::TaskId,
    thought: bool,
    /// The `part` the next piece in must have.
    next_in: u64,
    /// The `part` the next piece out gets.
    next_out: u64,
    tail: String,
}

/// What a stream ended by a shutdown tells the client (`retry:`, in milliseconds):
/// reconnect soon, with `Last-Event-ID` — another replica, or this one started again,
/// carries on from there.
pub const RETRY_AFTER_SHUTDOWN: std::time::Duration = std::time::Duration::from_millis(500);

impl Feed {
    /// What this surface may show of an event's data, applied to it in place.
    fn strip(&self, data: &mut serde_json::Value) {
        match self.surface {
            Surface::Control => {}
            // On the web listener the display rule on every string, by the session's
            // machine (see `super::redact`).
            Surface::Web => berth_core::display::redact_json(&self.display, data),
            // The session's machine's home, wherever it lies, shows as `~` (see
            // `wire::Register::home`); no other machine's.
            Surface::Cloud => {
                berth_core::display::replace_homes_json(self.display.home.as_slice(), data);
            }
        }
    }
}

fn render(feed: &Feed, ev: &TranscriptEvent) -> Event {
    let mut payload = ev.payload.clone();
    // Where the run worked, as the machine it ran on displays it (a daemon's).
    let shown = payload
        .get("work_dir_display")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    if ev.kind == "task"
        && let Some(task) = payload.get_mut("task")
        && let Ok(mut t) = serde_json::from_value::<berth_core::api::Task>(task.clone())
    {
        match (feed.surface, shown) {
            (Surface::Web | Surface::Cloud, Some(shown)) => t.work_dir = Some(shown),
            (surface, _) => web_task(surface, &feed.display, &mut t),
        }
        if let Ok(v) = serde_json::to_value(&t) {
            *task = v;
        }
    }
    let mut data = serde_json::json!({
        "seq": ev.seq,
        "task_id": ev.task_id,
        "kind": ev.kind,
        "at": ev.at,
        "payload": payload,
    });
    feed.strip(&mut data);
    Event::default()
        .id(ev.seq.to_string())
        .event(ev.kind.as_str())
        .data(data.to_string())
}

/// Piece `part` of a message streamed on a surface where the display rule applies:
/// what to send of it, up to the last whitespace of what is held, and its `part` as
/// sent. `None` when nothing is sent (no whitespace yet, or a piece was missed).
fn hold(
    held: &mut Option<Held>,
    task_id: &berth_core::TaskId,
    thought: bool,
    part: u64,
    text: &str,
) -> Option<(String, u64)> {
    let h = match held.take() {
        _ if part == 0 => Held {
            task_id: task_id.clone(),
            thought,
            next_in: 0,
            next_out: 0,
            tail: String::new(),
        },
        Some(h) if h.task_id == *task_id && h.thought == thought && h.next_in == part => h,
        // A piece missed: the whole message comes when stored.
        Some(_) | None => return None,
    };
    let h = held.insert(Held {
        next_in: part + 1,
        ..h
    });
    h.tail.push_str(text);
    let cut = h
        .tail
        .char_indices()
        .rfind(|(_, c)| c.is_whitespace())
        .map(|(i, c)| i + c.len_utf8())?;
    let rest = h.tail.split_off(cut);
    let ready = std::mem::replace(&mut h.tail, rest);
    h.next_out += 1;
    Some((ready, h.next_out - 1))
}

/// The delta `d` as the stream sends it, if it sends it (see the module's doc).
fn render_delta(feed: &mut Feed, d: &Delta) -> Option<Event> {
    if d.after != Some(feed.last) {
        return None;
    }
    let mut payload = d.payload.clone();
    if feed.surface != Surface::Control {
        let text = payload["text"].as_str().unwrap_or_default();
        let thought = payload["thought"].as_bool().unwrap_or(false);
        let part = payload["part"].as_u64().unwrap_or(0);
        let (text, part) = hold(&mut feed.held, &d.task_id, thought, part, text)?;
        payload["text"] = serde_json::Value::String(text);
        payload["part"] = serde_json::Value::from(part);
    }
    let mut data = serde_json::json!({
        "task_id": d.task_id,
        "kind": "delta",
        "payload": payload,
    });
    feed.strip(&mut data);
    Some(Event::default().event("delta").data(data.to_string()))
}

/// The next event to send, or `None` when the stream ends.
async fn next(mut feed: Feed) -> Option<(Result<Event, Infallible>, Feed)> {
    if feed.ended {
        return None;
    }
    loop {
        if let Some(ev) = feed.backlog.pop_front() {
            if ev.seq <= feed.last {
                continue;
            }
            feed.last = ev.seq;
            let out = render(&feed, &ev);
            return Some((Ok(out), feed));
        }
        if feed.behind {
            match feed
                .store
                .events_after(feed.session.clone(), feed.last, PAGE)
                .await
            {
                Ok(page) => {
                    feed.behind = page.len() as i64 == PAGE;
                    feed.backlog.extend(page);
                }
                Err(e) => {
                    tracing::error!(session = %feed.session, error = %e, "transcript read failed");
                    return None;
                }
            }
            continue;
        }
        if !feed.follow {
            return None;
        }
        let received = tokio::select! {
            r = feed.live.recv() => Some(r),
            _ = feed.closing.wait_for(|c| *c) => None,
        };
        let Some(received) = received else {
            feed.ended = true;
            let last = Event::default()
                .retry(RETRY_AFTER_SHUTDOWN)
                .comment("the server is shutting down; reconnect");
            return Some((Ok(last), feed));
        };
        let received = match received {
            Ok(live) => live,
            Err(broadcast::error::RecvError::Lagged(_)) => {
                feed.behind = true;
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        match &*received {
            // Another process stored events: read them.
            Live::Nudge(_) => feed.behind = true,
            Live::Stored(ev) if ev.seq <= feed.last => {}
            Live::Stored(ev) if ev.seq == feed.last + 1 => feed.backlog.push_back(ev.clone()),
            Live::Stored(_) => feed.behind = true,
            Live::Delta(d) => {
                if let Some(out) = render_delta(&mut feed, d) {
                    return Some((Ok(out), feed));
                }
            }
        }
    }
}

pub(crate) async fn events(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
    QueryArgs(q): QueryArgs<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let session = ctx.app.store.session(&id).await?;
    let display = super::redact::Displays::of(&ctx.app).of_row(&session);
    let header = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok());
    let after = header.or(q.after).unwrap_or(0).max(0);
    let mut feed = feed_from(&ctx, &display, session.id, after, None);
    feed.follow = q.follow.unwrap_or(true);
    Ok(Sse::new(futures_util::stream::unfold(feed, next))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// The session's events after `after`, then live, shown by `display` (the context of
/// the session's machine, see `super::redact`). When the caller holds the event right
/// after `after` (`first`, its `seq` is `after + 1`), the stream starts with it and
/// reads the store only if a live event shows a gap (one stored between that event
/// and this subscription, or by another process), never to fetch what it was handed.
/// Without `first`, or with an event that is not the next one, it reads the backlog
/// first.
pub(crate) fn stream_from(
    ctx: &Ctx,
    display: &Arc<Context>,
    session: SessionId,
    after: i64,
    first: Option<TranscriptEvent>,
) -> impl Stream<Item = Result<Event, Infallible>> + use<> {
    futures_util::stream::unfold(feed_from(ctx, display, session, after, first), next)
}

/// The feed behind [`stream_from`], following live events.
fn feed_from(
    ctx: &Ctx,
    display: &Arc<Context>,
    session: SessionId,
    after: i64,
    first: Option<TranscriptEvent>,
) -> Feed {
    // Subscribe first: whatever is stored after this point is also delivered live.
    let live = ctx.app.store.hub().subscribe(&session);
    let first = first.filter(|ev| ev.seq == after + 1 && ev.session_id == session);
    let behind = first.is_none();
    Feed {
        store: ctx.app.store.clone(),
        session,
        last: after,
        backlog: first.into_iter().collect(),
        behind,
        live,
        held: None,
        surface: ctx.surface,
        display: display.clone(),
        closing: ctx.app.closing.clone(),
        ended: false,
        follow: true,
        _client: ctx.app.metrics.sse_client(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A piece is sent up to its last whitespace, the rest held for the next; the
    /// pieces sent are counted anew; a missed piece stops the message's pieces.
    #[test]
    fn pieces_are_held_back_to_whole_words() {
        let task = berth_core::TaskId::parse("t-1").expect("an id");
        let mut held = None;
        let mut send = |part, text: &str| hold(&mut held, &task, false, part, text);
        assert_eq!(send(0, "see /home/al"), Some(("see ".to_owned(), 0)));
        assert_eq!(send(1, "ice-7f/x"), None);
        assert_eq!(send(2, " ok"), Some(("/home/alice-7f/x ".to_owned(), 1)));
        assert_eq!(send(4, "lost "), None);
        assert_eq!(send(5, "still lost "), None);
        assert_eq!(send(0, "anew "), Some(("anew ".to_owned(), 0)));
    }
}
