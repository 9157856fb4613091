//! Approvals where the person is (issue 55): a request of a Slack channel session is
//! posted in its thread as a Block Kit message with **Allow**, **Deny** and **Always
//! for this session** (which asks to confirm first); a desktop session's goes to the
//! Slack user the user settings name (`notify.slack`), as a direct message with the same
//! buttons, so a phone can answer for an agent on the laptop.
//!
//! A click comes back to `POST /hooks/slack/actions` (Slack's interactivity URL), as a
//! `block_actions` payload: verified like the events (the signing secret over the exact
//! body, a five-minute window), a replay refused, acknowledged at once, and decided
//! through the one path of approvals ([`crate::scheduler::Scheduler::answer`], `via:
//! "slack"`): exactly once, audited. Only the user who started the thread (for a
//! direct message, the user it went to), or those the settings name
//! (`notify.answerers.slack`), may answer; anyone else is told "not yours" in a message
//! only they see. Once a request is decided, wherever that was, its message says who
//! decided what and when, and its buttons are gone.
//!
//! **Lark/Feishu** the same way: an interactive card in the chat (or, for a desktop
//! session, to the open id `notify.lark` names), its buttons' clicks arriving as
//! `card.action.trigger` callbacks on `POST /hooks/lark`, verified as the events are;
//! the callback's answer carries a toast and the card as it stands, and a decision made
//! elsewhere updates the card (`PATCH im/v1/messages/{id}`).
//!
//! What a message shows is the request stripped by the display rule (no home, no user
//! name), cut with a note past the platforms' limits; the agent's words are plain text,
//! never markup that could mention anyone.

use super::config::SlackConfig;
use super::crypto::{self, SignatureError};
use super::out::{OutError, Outbound};
use super::{Platform, Thread, header};
use crate::http::ApiError;
use crate::scheduler::TaskObserver;
use crate::store::TaskRow;
use axum::http::HeaderMap;
use berth_core::approval::{Approval, DecidedBy, Verdict};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

/// The buttons' `action_id`s.
pub const ALLOW: &str = "berth_allow";
pub const DENY: &str = "berth_deny";
pub const ALWAYS: &str = "berth_always";

/// A section's text is at most 3,000 characters on Slack: what is shown of a request's
/// input stops before that, with a note.
const MAX_SECTION_CHARS: usize = 2_800;

/// How many clicks are remembered to refuse a replay (a replay is only accepted inside
/// the signature's five-minute window, and clicks are rare).
const SEEN_CLICKS: usize = 4096;

/// What a button asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    Deny,
    /// Allow, and keep a rule of the session made of the request.
    Always,
}

/// An authenticated click on one of a request's buttons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Click {
    pub platform: Platform,
    /// Who clicked: Slack's user id, Lark's open id.
    pub user: String,
    /// The platform's id of the interaction (Slack's `trigger_id`, Lark's event id): a
    /// second delivery of it is a replay.
    pub trigger_id: String,
    pub action: Action,
    /// The request's full id (the button's value).
    pub approval: String,
    /// Where the message is, to update it and to answer in it: Slack's channel and
    /// message `ts`; Lark's chat and message id.
    pub channel: String,
    pub message_ts: String,
}

impl Action {
    /// The action a button's value names (`allow`, `deny`, `always`, or Slack's ids).
    fn named(name: &str) -> Option<Action> {
        match name {
            ALLOW | "allow" => Some(Action::Allow),
            DENY | "deny" => Some(Action::Deny),
            ALWAYS | "always" => Some(Action::Always),
            _ => None,
        }
    }
}

/// Cuts `text` to `max` characters, saying so.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push_str("\n… (cut: `berth approvals --json` has the whole request)");
    out
}

/// Text for a code block: Slack's control characters escaped (as everywhere: a
/// mention is never made from the agent's text), its fence never closed from inside.
fn code(text: &str) -> String {
    format!("```{}```", plain(text).replace("```", "`\u{200b}``"))
}

/// Escapes Slack's control characters in plain text (`&`, `<`, `>`).
fn plain(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The request as the message shows it: kind and title, the command, the paths and
/// the agent's input, each stripped by the display rule.
fn request_text(a: &Approval, display: &berth_core::Context) -> String {
    let strip = |t: &str| berth_core::display::redact_text(display, t).into_owned();
    let mut text = format!(
        "*The agent asks to {}:* {}",
        plain(&a.kind),
        plain(&strip(&a.title))
    );
    if let Some(cmd) = &a.command {
        text.push('\n');
        text.push_str(&code(&strip(cmd)));
    }
    if !a.paths.is_empty() {
        let paths: Vec<String> = a.paths.iter().map(|p| strip(p)).collect();
        text.push_str(&format!("\npaths: {}", plain(&paths.join(", "))));
    }
    let empty = a.input.is_null() || a.input.as_object().is_some_and(|o| o.is_empty());
    let input = (!empty)
        .then(|| serde_json::to_string_pretty(&a.input).ok())
        .flatten();
    if let Some(input) = input {
        text.push_str("\ninput:\n");
        text.push_str(&code(&strip(&input)));
    }
    cut(&text, MAX_SECTION_CHARS)
}

/// The request's line of facts: its short id, its deadline, and the CLI's answer.
fn facts(a: &Approval) -> String {
    let short = Approval::short_id(&a.id);
    format!(
        "request `{short}` · denied if unanswered at {} · or `berth approve {short}` / `berth deny {short}`",
        a.deadline
    )
}

/// The message of a request that waits: the request, its buttons.
pub fn request_message(a: &Approval, display: &berth_core::Context) -> (String, Value) {
    let fallback = format!("The agent asks to {}: {}", a.kind, a.title);
    let button = |text: &str, action: &str, style: Option<&str>| {
        let mut b = json!({
            "type": "button",
            "text": {"type": "plain_text", "text": text},
            "action_id": action,
            "value": a.id,
        });
        if let Some(style) = style {
            b["style"] = json!(style);
        }
        b
    };
    let mut always = button("Always for this session", ALWAYS, None);
    always["confirm"] = json!({
        "title": {"type": "plain_text", "text": "Always allow this?"},
        "text": {"type": "mrkdwn", "text": "This session will allow this same request from now on, without asking. `berth session rules` lists the rule and removes it."},
        "confirm": {"type": "plain_text", "text": "Always allow"},
        "deny": {"type": "plain_text", "text": "Cancel"},
    });
    let blocks = json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": request_text(a, display)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": facts(a)}]},
        {"type": "actions", "block_id": "berth_approval", "elements": [
            button("Allow", ALLOW, Some("primary")),
            button("Deny", DENY, Some("danger")),
            always,
        ]},
    ]);
    (fallback, blocks)
}

/// What became of a request, in one line: who decided what, how and when; `slack`:
/// in Slack's markup (bold, a user id as a mention), else plain text.
pub fn outcome_line(a: &Approval, slack: bool) -> String {
    let Some(d) = &a.decision else {
        return "waiting for an answer".to_owned();
    };
    let who = match d.who.as_deref() {
        // A Slack user id is shown as the user.
        Some(id)
            if slack && id.starts_with('U') && id.chars().all(|c| c.is_ascii_alphanumeric()) =>
        {
            format!("<@{id}>")
        }
        Some(name) if slack => plain(name),
        Some(name) => name.to_owned(),
        None => "you".to_owned(),
    };
    let verdict = match d.decision {
        Verdict::Allow if d.always => "Allowed (always, for this session)",
        Verdict::Allow => "Allowed",
        Verdict::Deny => "Denied",
    };
    let verdict = if slack {
        format!("*{verdict}*")
    } else {
        verdict.to_owned()
    };
    let via = d
        .via
        .as_deref()
        .map(|v| format!(" via {}", if slack { plain(v) } else { v.to_owned() }))
        .unwrap_or_default();
    let (expired, closed) = if slack {
        ("*Expired*", "*Closed*")
    } else {
        ("Expired", "Closed")
    };
    match d.by {
        DecidedBy::Human => format!("{verdict} by {who}{via} at {}", d.at),
        DecidedBy::Rule => format!("{verdict} by a rule of the session{via} at {}", d.at),
        DecidedBy::Policy => format!("{verdict} by the policy at {}", d.at),
        DecidedBy::Timeout => format!(
            "{expired}: nobody answered in time, so it was denied at {}",
            d.at
        ),
        DecidedBy::Cancel => format!("{closed}: the task ended at {} before an answer", d.at),
    }
}

/// The message of a decided request: the request, and what became of it (no buttons).
pub fn decided_message(a: &Approval, display: &berth_core::Context) -> (String, Value) {
    let line = outcome_line(a, true);
    let blocks = json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": request_text(a, display)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": format!("{line} · request `{}`", Approval::short_id(&a.id))}]},
    ]);
    (line.replace('*', ""), blocks)
}

/// The request in plain text (Lark shows it as such: no markup, no mention can be made
/// of the agent's words), stripped by the display rule and cut.
fn request_plain(a: &Approval, display: &berth_core::Context) -> String {
    let strip = |t: &str| berth_core::display::redact_text(display, t).into_owned();
    let mut text = format!("{}: {}", a.kind, strip(&a.title));
    if let Some(cmd) = &a.command {
        text.push_str(&format!("\n$ {}", strip(cmd)));
    }
    if !a.paths.is_empty() {
        let paths: Vec<String> = a.paths.iter().map(|p| strip(p)).collect();
        text.push_str(&format!("\npaths: {}", paths.join(", ")));
    }
    let empty = a.input.is_null() || a.input.as_object().is_some_and(|o| o.is_empty());
    if let Some(input) = (!empty)
        .then(|| serde_json::to_string_pretty(&a.input).ok())
        .flatten()
    {
        text.push_str("\ninput:\n");
        text.push_str(&strip(&input));
    }
    cut(&text, MAX_SECTION_CHARS)
}

fn lark_text(content: impl Into<String>) -> Value {
    json!({"tag": "plain_text", "content": content.into()})
}

/// A Lark card's button for `action` on request `a`.
fn lark_button(a: &Approval, text: &str, action: &str, kind: &str) -> Value {
    json!({"tag": "button", "text": lark_text(text), "type": kind,
           "value": {"berth": action, "approval": a.id}})
}

/// The request's line of facts, in plain text.
fn facts_plain(a: &Approval) -> String {
    let short = Approval::short_id(&a.id);
    format!(
        "request {short} · denied if unanswered at {} · or berth approve {short} / berth deny {short}",
        a.deadline
    )
}

/// The Lark card of a request that waits: the request, its buttons.
pub fn lark_request_card(a: &Approval, display: &berth_core::Context) -> Value {
    let mut always = lark_button(a, "Always for this session", "always", "default");
    always["confirm"] = json!({
        "title": lark_text("Always allow this?"),
        "text": lark_text("This session will allow this same request from now on, without asking. `berth session rules` lists the rule and removes it."),
    });
    json!({
        "config": {"wide_screen_mode": true, "update_multi": true},
        "header": {"template": "orange", "title": lark_text(format!("The agent asks to {}", a.kind))},
        "elements": [
            {"tag": "div", "text": lark_text(request_plain(a, display))},
            {"tag": "note", "elements": [lark_text(facts_plain(a))]},
            {"tag": "action", "actions": [
                lark_button(a, "Allow", "allow", "primary"),
                lark_button(a, "Deny", "deny", "danger"),
                always,
            ]},
        ],
    })
}

/// The Lark card of a decided request: what became of it, no buttons.
pub fn lark_decided_card(a: &Approval, display: &berth_core::Context) -> Value {
    let template = match a.decision.as_ref().map(|d| (d.decision, d.by)) {
        Some((Verdict::Allow, _)) => "green",
        Some((Verdict::Deny, DecidedBy::Human)) => "red",
        Some((Verdict::Deny, _)) | None => "grey",
    };
    json!({
        "config": {"wide_screen_mode": true, "update_multi": true},
        "header": {"template": template, "title": lark_text(outcome_line(a, false))},
        "elements": [
            {"tag": "div", "text": lark_text(request_plain(a, display))},
            {"tag": "note", "elements": [lark_text(format!("request {}", Approval::short_id(&a.id)))]},
        ],
    })
}

/// A click on a request card's button, from an authenticated `card.action.trigger`
/// callback (schema 2.0) whose event id is `event_id`; `None` for another card's.
pub fn read_lark_click(event_id: &str, payload: &Value) -> Option<Click> {
    let e = payload.get("event")?;
    let value = &e["action"]["value"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    Some(Click {
        platform: Platform::Lark,
        action: Action::named(value["berth"].as_str()?)?,
        approval: text(&value["approval"])?,
        user: text(&e["operator"]["open_id"])?,
        trigger_id: event_id.to_owned(),
        channel: text(&e["context"]["open_chat_id"]).unwrap_or_default(),
        message_ts: text(&e["context"]["open_message_id"]).unwrap_or_default(),
    })
}

/// Reads an interactivity request: authenticated first (the signing secret over the
/// exact body, within the window), then read. `Ok(None)`: authentic, but not a click
/// on a request's button (another kind of interaction, or another app's button).
pub fn read_click(
    cfg: &SlackConfig,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<Option<Click>, ApiError> {
    let unsigned = |e: SignatureError| {
        tracing::warn!(reason = %e, "a Slack click was refused");
        ApiError::BadSignature {
            platform: "slack",
            reason: e.to_string(),
        }
    };
    let ts = header(headers, "x-slack-request-timestamp")
        .ok_or_else(|| unsigned(SignatureError::MissingHeader("X-Slack-Request-Timestamp")))?;
    let sig = header(headers, "x-slack-signature")
        .ok_or_else(|| unsigned(SignatureError::MissingHeader("X-Slack-Signature")))?;
    crypto::verify_slack(cfg.signing_secret.expose().as_bytes(), ts, sig, body, now)
        .map_err(unsigned)?;
    let bad = |m: String| ApiError::BadRequest { message: m };
    let payload = form_urlencoded::parse(body)
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| bad("an interactivity request carries a `payload` field".into()))?;
    let p: Value = serde_json::from_str(&payload)
        .map_err(|e| bad(format!("the interactivity payload is not JSON: {e}")))?;
    if p["type"] != "block_actions" {
        return Ok(None);
    }
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let Some(action) = p["actions"].as_array().and_then(|a| a.first()) else {
        return Ok(None);
    };
    let Some(act) = action["action_id"].as_str().and_then(Action::named) else {
        return Ok(None);
    };
    let need =
        |v: &Value, what: &str| text(v).ok_or_else(|| bad(format!("the click carries no {what}")));
    Ok(Some(Click {
        platform: Platform::Slack,
        user: need(&p["user"]["id"], "user")?,
        trigger_id: need(&p["trigger_id"], "trigger_id")?,
        action: act,
        approval: need(&action["value"], "request id")?,
        channel: text(&p["container"]["channel_id"])
            .or_else(|| text(&p["channel"]["id"]))
            .ok_or_else(|| bad("the click carries no channel".into()))?,
        message_ts: need(&p["container"]["message_ts"], "message")?,
    }))
}

/// Where a request's message went.
#[derive(Debug, Clone)]
struct Posted {
    platform: Platform,
    /// Slack's channel; Lark's chat or open id.
    channel: String,
    /// Slack's message `ts`; Lark's message id.
    ts: String,
}

/// Where a request's message goes, and who may answer it there.
#[derive(Debug, Clone)]
struct Route {
    platform: Platform,
    /// Slack's channel (or a user id: a direct message); Lark's chat id or open id.
    channel: String,
    /// Slack: the thread; Lark: how `channel` names the receiver.
    thread_ts: Option<String>,
    lark_receiver: &'static str,
    allowed: Vec<String>,
}

/// Posts requests to the chat platforms and keeps their messages current; attached to
/// the scheduler as a [`TaskObserver`].
#[derive(Debug, Clone)]
pub struct Cards {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    out: Arc<Outbound>,
    /// Requests whose messages are posted and still show their buttons.
    posted: Mutex<HashMap<String, Vec<Posted>>>,
    /// Clicks taken, oldest first: a second delivery of one is a replay.
    seen: Mutex<VecDeque<String>>,
}

impl Cards {
    /// Messages go out through `out`.
    pub fn new(out: Arc<Outbound>) -> Cards {
        Cards {
            inner: Arc::new(Inner {
                out,
                posted: Mutex::new(HashMap::new()),
                seen: Mutex::new(VecDeque::new()),
            }),
        }
    }

    fn posted(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Posted>>> {
        self.inner
            .posted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether request `id`'s message on `platform` was posted here and shows its
    /// buttons still.
    pub fn tracked(&self, id: &str, platform: Platform) -> bool {
        self.posted()
            .get(id)
            .is_some_and(|ps| ps.iter().any(|p| p.platform == platform))
    }

    /// Forgets request `id`'s message on `platform` (the click's answer updates it).
    pub fn untrack(&self, id: &str, platform: Platform) {
        if let Some(ps) = self.posted().get_mut(id) {
            ps.retain(|p| p.platform != platform);
        }
    }

    /// Whether a click with this id was taken before (and remembers it if not).
    pub fn replayed(&self, platform: Platform, trigger_id: &str) -> bool {
        let key = format!("{}:{trigger_id}", platform.as_str());
        let mut seen = self
            .inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if seen.iter().any(|t| *t == key) {
            return true;
        }
        if seen.len() >= SEEN_CLICKS {
            seen.pop_front();
        }
        seen.push_back(key);
        false
    }

    /// Where request `a`'s messages go, and who may answer each: the thread (or chat)
    /// of its channel session, or the direct messages of the users the settings name.
    async fn routes(&self, a: &Approval) -> Result<Vec<Route>, OutError> {
        let cfg = &self.inner.out.config;
        let asks = &cfg.asks;
        let route = |platform, channel: String, thread_ts, lark_receiver, allowed| Route {
            platform,
            channel,
            thread_ts,
            lark_receiver,
            allowed,
        };
        match self
            .inner
            .out
            .store
            .channel_thread(a.session_id.clone())
            .await?
        {
            Some(t) => {
                let started = t.started_by.clone();
                Ok(match Thread::from_key(&t.platform, &t.thread_key) {
                    Some(Thread::Slack { channel, thread_ts }) if cfg.slack.is_some() => {
                        let mut allowed = asks.slack_answerers.clone();
                        allowed.extend(started);
                        vec![route(
                            Platform::Slack,
                            channel,
                            Some(thread_ts),
                            "",
                            allowed,
                        )]
                    }
                    Some(Thread::Lark { chat_id }) if cfg.lark.is_some() => {
                        let mut allowed = asks.lark_answerers.clone();
                        allowed.extend(started);
                        vec![route(Platform::Lark, chat_id, None, "chat_id", allowed)]
                    }
                    Some(Thread::Slack { .. } | Thread::Lark { .. }) | None => Vec::new(),
                })
            }
            None => {
                let mut out = Vec::new();
                if let (Some(_), Some(user)) = (&cfg.slack, &asks.slack_user) {
                    let mut allowed = asks.slack_answerers.clone();
                    allowed.push(user.clone());
                    out.push(route(Platform::Slack, user.clone(), None, "", allowed));
                }
                if let (Some(_), Some(user)) = (&cfg.lark, &asks.lark_user) {
                    let mut allowed = asks.lark_answerers.clone();
                    allowed.push(user.clone());
                    out.push(route(
                        Platform::Lark,
                        user.clone(),
                        None,
                        "open_id",
                        allowed,
                    ));
                }
                Ok(out)
            }
        }
    }

    /// Who may answer request `id` on `platform` (`None`: it is not answered there).
    pub async fn answerers(&self, id: &str, platform: Platform) -> Option<Vec<String>> {
        let a = self
            .inner
            .out
            .store
            .approval(id.to_owned(), None)
            .await
            .ok()?;
        self.routes(&a)
            .await
            .ok()?
            .into_iter()
            .find(|r| r.platform == platform)
            .map(|r| r.allowed)
    }

    /// Posts a waiting request's messages where they go.
    async fn post(&self, a: Approval) -> Result<(), OutError> {
        for route in self.routes(&a).await? {
            let posted = match route.platform {
                Platform::Slack => {
                    let (text, blocks) = request_message(&a, &self.inner.out.display);
                    let mut body =
                        json!({"channel": route.channel, "text": text, "blocks": blocks});
                    if let Some(ts) = &route.thread_ts {
                        body["thread_ts"] = json!(ts);
                    }
                    let answer = self
                        .inner
                        .out
                        .slack("chat.postMessage", &body)
                        .await?
                        .unwrap_or_default();
                    answer["channel"]
                        .as_str()
                        .zip(answer["ts"].as_str())
                        .map(|(c, ts)| (c.to_owned(), ts.to_owned()))
                }
                Platform::Lark => {
                    let card = lark_request_card(&a, &self.inner.out.display);
                    let body = json!({"receive_id": route.channel, "msg_type": "interactive",
                                      "content": card.to_string()});
                    let path = format!("im/v1/messages?receive_id_type={}", route.lark_receiver);
                    let answer = self
                        .inner
                        .out
                        .lark(hyper::Method::POST, "im/v1/messages", &path, &body)
                        .await?
                        .unwrap_or_default();
                    answer["data"]["message_id"]
                        .as_str()
                        .map(|m| (route.channel.clone(), m.to_owned()))
                }
            };
            if let Some((channel, ts)) = posted {
                self.posted().entry(a.id.clone()).or_default().push(Posted {
                    platform: route.platform,
                    channel,
                    ts,
                });
            }
        }
        // Decided while the messages were on their way: they say so at once.
        let now = self.inner.out.store.approval(a.id.clone(), None).await?;
        if now.decision.is_some() {
            let posted = self.posted().remove(&a.id).unwrap_or_default();
            for p in posted {
                self.update(&p, &now).await?;
            }
        }
        Ok(())
    }

    /// Rewrites a posted message as request `a` stands now.
    async fn update(&self, p: &Posted, a: &Approval) -> Result<(), OutError> {
        match p.platform {
            Platform::Slack => {
                let (text, blocks) = decided_message(a, &self.inner.out.display);
                let body =
                    json!({"channel": p.channel, "ts": p.ts, "text": text, "blocks": blocks});
                self.inner.out.slack("chat.update", &body).await.map(|_| ())
            }
            Platform::Lark => {
                let card = lark_decided_card(a, &self.inner.out.display);
                let path = format!("im/v1/messages/{}", p.ts);
                let body = json!({"content": card.to_string()});
                self.inner
                    .out
                    .lark(
                        hyper::Method::PATCH,
                        "im/v1/messages (update)",
                        &path,
                        &body,
                    )
                    .await
                    .map(|_| ())
            }
        }
    }

    /// Rewrites the Slack message at `channel`/`ts` as request `a` stands now.
    pub async fn update_at(&self, channel: &str, ts: &str, a: &Approval) {
        self.untrack(&a.id, Platform::Slack);
        let p = Posted {
            platform: Platform::Slack,
            channel: channel.to_owned(),
            ts: ts.to_owned(),
        };
        if let Err(e) = self.update(&p, a).await {
            tracing::warn!(approval = %a.id, error = %e, "a request's Slack message could not be updated");
        }
    }

    /// Tells `user` alone, in Slack's `channel`, why their click did nothing.
    pub async fn tell(&self, channel: &str, user: &str, text: &str) {
        let body = json!({"channel": channel, "user": user, "text": text});
        if let Err(e) = self.inner.out.slack("chat.postEphemeral", &body).await {
            tracing::warn!(error = %e, "a Slack user could not be told why their click did nothing");
        }
    }

    /// Request `id` as it stands (for a click on a request decided already).
    pub async fn approval(&self, id: &str) -> Option<Approval> {
        self.inner
            .out
            .store
            .approval(id.to_owned(), None)
            .await
            .ok()
    }

    /// The answer to a Lark click: a toast, and the card as the request stands (its
    /// message is not updated again: the answer does it).
    pub fn lark_reply(&self, toast: (&str, String), now: Option<&Approval>) -> Value {
        let mut reply = json!({"toast": {"type": toast.0, "content": toast.1}});
        if let Some(a) = now.filter(|a| a.decision.is_some()) {
            self.untrack(&a.id, Platform::Lark);
            reply["card"] =
                json!({"type": "raw", "data": lark_decided_card(a, &self.inner.out.display)});
        }
        reply
    }
}

impl TaskObserver for Cards {
    fn task_finished(&self, _task: &TaskRow) {}

    fn approval_asked(&self, a: &Approval) {
        if self.inner.out.config.slack.is_none() && self.inner.out.config.lark.is_none() {
            return;
        }
        let (this, a) = (self.clone(), a.clone());
        tokio::spawn(async move {
            let id = a.id.clone();
            if let Err(e) = this.post(a).await {
                eprintln!("berth: request {id} could not be posted to its chat: {e}");
                tracing::error!(approval = %id, error = %e, "a request could not be posted to its chat");
            }
        });
    }

    fn approval_decided(&self, a: &Approval) {
        // Taken off at once: each message is updated once, here.
        let Some(posted) = self.posted().remove(&a.id) else {
            return;
        };
        let (this, a) = (self.clone(), a.clone());
        tokio::spawn(async move {
            for p in posted {
                if let Err(e) = this.update(&p, &a).await {
                    tracing::warn!(approval = %a.id, error = %e, "a request's message could not be updated");
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::approval::Decision;
    use berth_core::{SessionId, TaskId};

    fn req() -> Approval {
        Approval {
            id: "3f9c0a12-aaaa-bbbb-cccc-123456789abc-2".into(),
            task_id: TaskId::parse("3f9c0a12-aaaa-bbbb-cccc-123456789abc").unwrap(),
            session_id: SessionId::parse("s1").unwrap(),
            kind: "execute".into(),
            title: "run the checks".into(),
            command: Some("sh /home/ann/code/app/check.sh ``` <@here>".into()),
            paths: vec!["/home/ann/code/app".into()],
            input: json!({"command": "x".repeat(5000)}),
            options: vec![],
            asked_at: "2026-01-01T00:00:00.000Z".into(),
            deadline: "2026-01-01T00:10:00.000Z".into(),
            decision: None,
        }
    }

    fn ann() -> berth_core::Context {
        let mut ctx = berth_core::Context::new(berth_core::Platform::Linux);
        ctx.home = berth_core::LocalPath::parse(berth_core::Platform::Linux, "/home/ann").ok();
        ctx
    }

    #[test]
    fn a_request_shows_stripped_cut_and_with_its_three_buttons() {
        let (fallback, blocks) = request_message(&req(), &ann());
        assert_eq!(fallback, "The agent asks to execute: run the checks");
        let text = blocks[0]["text"]["text"].as_str().unwrap();
        assert!(!text.contains("/home/ann"), "{text}");
        assert!(text.contains("~/code/app/check.sh"), "{text}");
        assert!(
            text.contains("&lt;@here&gt;") && !text.contains("<@here>"),
            "{text}"
        );
        assert!(text.chars().count() < 3000, "within Slack's limit");
        assert!(text.contains("berth approvals --json` has the whole request"));
        let buttons = blocks[2]["elements"].as_array().unwrap();
        let ids: Vec<&str> = buttons
            .iter()
            .map(|b| b["action_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [ALLOW, DENY, ALWAYS]);
        assert!(buttons.iter().all(|b| b["value"] == req().id));
        assert!(buttons[2]["confirm"].is_object(), "always asks first");
        assert!(
            blocks[1]["elements"][0]["text"]
                .as_str()
                .unwrap()
                .contains("berth approve 3f9c0a12-2")
        );
    }

    #[test]
    fn a_decided_request_says_who_what_and_when_without_buttons() {
        let mut a = req();
        a.decision = Some(Decision {
            decision: Verdict::Allow,
            by: DecidedBy::Human,
            who: Some("U0ANN".into()),
            via: Some("slack".into()),
            at: "2026-01-01T00:00:05.000Z".into(),
            reason: None,
            always: false,
        });
        let (text, blocks) = decided_message(&a, &ann());
        assert_eq!(
            text,
            "Allowed by <@U0ANN> via slack at 2026-01-01T00:00:05.000Z"
        );
        assert_eq!(blocks.as_array().unwrap().len(), 2, "no actions block");
        a.decision.as_mut().unwrap().by = DecidedBy::Timeout;
        assert!(outcome_line(&a, true).starts_with("*Expired*"));
        assert!(outcome_line(&a, false).starts_with("Expired: "));
    }

    fn signed(body: &str, secret: &str, ts: i64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-slack-request-timestamp", ts.to_string().parse().unwrap());
        h.insert(
            "x-slack-signature",
            crypto::slack_signature(secret.as_bytes(), &ts.to_string(), body.as_bytes())
                .parse()
                .unwrap(),
        );
        h
    }

    fn cfg() -> SlackConfig {
        SlackConfig {
            signing_secret: super::super::config::Secret::new("s3cret"),
            bot_token: None,
            api_url: "http://127.0.0.1:9".into(),
        }
    }

    fn form(payload: &Value) -> String {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish()
    }

    #[test]
    fn clicks_are_read_only_when_signed_and_fresh() {
        let payload = json!({"type": "block_actions", "user": {"id": "U1"},
            "trigger_id": "tr1", "container": {"message_ts": "9.9", "channel_id": "C1"},
            "actions": [{"action_id": ALLOW, "value": "t-1", "action_ts": "1"}]});
        let body = form(&payload);
        let now = 1_700_000_000;
        let click = read_click(&cfg(), &signed(&body, "s3cret", now), body.as_bytes(), now)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                click.user.as_str(),
                click.action,
                click.approval.as_str(),
                click.channel.as_str()
            ),
            ("U1", Action::Allow, "t-1", "C1")
        );
        // Forged: another secret; stale: six minutes old; altered after signing.
        assert!(read_click(&cfg(), &signed(&body, "other", now), body.as_bytes(), now).is_err());
        assert!(
            read_click(
                &cfg(),
                &signed(&body, "s3cret", now - 360),
                body.as_bytes(),
                now
            )
            .is_err()
        );
        let altered = body.replace("U1", "U2");
        assert!(
            read_click(
                &cfg(),
                &signed(&body, "s3cret", now),
                altered.as_bytes(),
                now
            )
            .is_err()
        );
        // Another app's button, or another kind of interaction: nothing.
        let other = form(&json!({"type": "block_actions", "user": {"id": "U1"},
            "trigger_id": "tr2", "container": {"message_ts": "9.9", "channel_id": "C1"},
            "actions": [{"action_id": "something_else", "value": "x"}]}));
        assert_eq!(
            read_click(
                &cfg(),
                &signed(&other, "s3cret", now),
                other.as_bytes(),
                now
            )
            .unwrap(),
            None
        );
        let shortcut = form(&json!({"type": "shortcut", "trigger_id": "tr3"}));
        assert_eq!(
            read_click(
                &cfg(),
                &signed(&shortcut, "s3cret", now),
                shortcut.as_bytes(),
                now
            )
            .unwrap(),
            None
        );
    }

    #[test]
    fn a_lark_card_shows_plain_text_and_its_clicks_name_the_request() {
        let card = lark_request_card(&req(), &ann());
        let text = card["elements"][0]["text"].clone();
        assert_eq!(
            text["tag"], "plain_text",
            "no markup made of the agent's words"
        );
        assert!(!text["content"].as_str().unwrap().contains("/home/ann"));
        let actions: Vec<&str> = card["elements"][2]["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["value"]["berth"].as_str().unwrap())
            .collect();
        assert_eq!(actions, ["allow", "deny", "always"]);
        let payload = json!({"schema": "2.0", "event": {
            "operator": {"open_id": "ou_1"}, "token": "c-1",
            "action": {"tag": "button", "value": {"berth": "always", "approval": "t-1"}},
            "context": {"open_message_id": "om_1", "open_chat_id": "oc_1"}}});
        let click = read_lark_click("ev-1", &payload).unwrap();
        assert_eq!(
            (
                click.platform,
                click.user.as_str(),
                click.action,
                click.approval.as_str()
            ),
            (Platform::Lark, "ou_1", Action::Always, "t-1")
        );
        // Another card's button: not a click on a request.
        let other = json!({"event": {"operator": {"open_id": "ou_1"},
            "action": {"value": {"something": "else"}}}});
        assert_eq!(read_lark_click("ev-2", &other), None);
    }
}
