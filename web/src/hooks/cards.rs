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
//! What a message shows is the request stripped by the display rule (no home, no user
//! name), cut with a note past Slack's limits.

use super::config::{ChannelConfig, SlackConfig};
use super::crypto::{self, SignatureError};
use super::{Thread, header};
use crate::http::ApiError;
use crate::net::HttpClient;
use crate::scheduler::TaskObserver;
use crate::store::{Store, TaskRow};
use axum::http::HeaderMap;
use berth_core::approval::{Approval, DecidedBy, Verdict};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The buttons' `action_id`s.
pub const ALLOW: &str = "berth_allow";
pub const DENY: &str = "berth_deny";
pub const ALWAYS: &str = "berth_always";

/// A section's text is at most 3,000 characters on Slack: what is shown of a request's
/// input stops before that, with a note.
const MAX_SECTION_CHARS: usize = 2_800;

/// How long one call to Slack may take, retries included.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

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
    /// The Slack user who clicked.
    pub user: String,
    /// Slack's id of the interaction: a second delivery of it is a replay.
    pub trigger_id: String,
    pub action: Action,
    /// The request's full id (the button's value).
    pub approval: String,
    /// Where the message is, to update it and to answer in it.
    pub channel: String,
    pub message_ts: String,
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

/// What became of a request, in one line: who decided what, how and when.
pub fn outcome_line(a: &Approval) -> String {
    let Some(d) = &a.decision else {
        return "waiting for an answer".to_owned();
    };
    let who = |w: &Option<String>| match w.as_deref() {
        // A Slack user id is shown as the user.
        Some(id) if id.starts_with('U') && id.chars().all(|c| c.is_ascii_alphanumeric()) => {
            format!("<@{id}>")
        }
        Some(name) => plain(name),
        None => "you".to_owned(),
    };
    let verdict = match d.decision {
        Verdict::Allow if d.always => "Allowed (always, for this session)",
        Verdict::Allow => "Allowed",
        Verdict::Deny => "Denied",
    };
    let via = d
        .via
        .as_deref()
        .map(|v| format!(" via {}", plain(v)))
        .unwrap_or_default();
    match d.by {
        DecidedBy::Human => format!("*{verdict}* by {}{via} at {}", who(&d.who), d.at),
        DecidedBy::Rule => format!("*{verdict}* by a rule of the session{via} at {}", d.at),
        DecidedBy::Policy => format!("*{verdict}* by the policy at {}", d.at),
        DecidedBy::Timeout => format!(
            "*Expired*: nobody answered in time, so it was denied at {}",
            d.at
        ),
        DecidedBy::Cancel => format!("*Closed*: the task ended at {} before an answer", d.at),
    }
}

/// The message of a decided request: the request, and what became of it (no buttons).
pub fn decided_message(a: &Approval, display: &berth_core::Context) -> (String, Value) {
    let line = outcome_line(a);
    let blocks = json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": request_text(a, display)}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": format!("{line} · request `{}`", Approval::short_id(&a.id))}]},
    ]);
    (line.replace('*', ""), blocks)
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
    let act = match action["action_id"].as_str() {
        Some(ALLOW) => Action::Allow,
        Some(DENY) => Action::Deny,
        Some(ALWAYS) => Action::Always,
        _ => return Ok(None),
    };
    let need =
        |v: &Value, what: &str| text(v).ok_or_else(|| bad(format!("the click carries no {what}")));
    Ok(Some(Click {
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
    channel: String,
    ts: String,
}

/// Posts requests to Slack and keeps their messages current; attached to the
/// scheduler as a [`TaskObserver`].
#[derive(Debug, Clone)]
pub struct Cards {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    config: ChannelConfig,
    display: Arc<berth_core::Context>,
    http: HttpClient,
    /// Requests whose message is posted and still shows its buttons.
    posted: Mutex<HashMap<String, Posted>>,
    /// Clicks taken, oldest first: a second delivery of one is a replay.
    seen: Mutex<VecDeque<String>>,
}

/// Why a call to Slack failed.
#[derive(Debug, thiserror::Error)]
enum CardError {
    #[error(transparent)]
    Call(#[from] crate::net::client::CallError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("Slack refused {method}: {answer}")]
    Refused { method: &'static str, answer: Value },
}

impl Cards {
    /// `display`: whose home and name every message is stripped of.
    pub fn new(
        store: Store,
        config: ChannelConfig,
        display: Arc<berth_core::Context>,
        http: HttpClient,
    ) -> Cards {
        Cards {
            inner: Arc::new(Inner {
                store,
                config,
                display,
                http,
                posted: Mutex::new(HashMap::new()),
                seen: Mutex::new(VecDeque::new()),
            }),
        }
    }

    fn posted(&self) -> std::sync::MutexGuard<'_, HashMap<String, Posted>> {
        self.inner
            .posted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether request `id`'s message was posted here and shows its buttons still.
    pub fn tracked(&self, id: &str) -> bool {
        self.posted().contains_key(id)
    }

    /// Whether a click with this id was taken before (and remembers it if not).
    pub fn replayed(&self, trigger_id: &str) -> bool {
        let mut seen = self
            .inner
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if seen.iter().any(|t| t == trigger_id) {
            return true;
        }
        if seen.len() >= SEEN_CLICKS {
            seen.pop_front();
        }
        seen.push_back(trigger_id.to_owned());
        false
    }

    /// Calls Slack's Web API method with the bot token: its answer when `ok`.
    async fn call(&self, method: &'static str, body: &Value) -> Result<Value, CardError> {
        let Some(cfg) = &self.inner.config.slack else {
            return Ok(Value::Null);
        };
        let Some(token) = &cfg.bot_token else {
            return Ok(Value::Null);
        };
        let url = format!("{}/{method}", cfg.api_url);
        let answer = self
            .inner
            .http
            .post_json(&url, Some(token.expose()), body, CALL_TIMEOUT)
            .await?;
        if answer.get("ok").and_then(Value::as_bool) != Some(true) {
            return Err(CardError::Refused { method, answer });
        }
        Ok(answer)
    }

    /// Who may answer request `a` on Slack, and where its message goes: the thread of
    /// its channel session, or the direct message of the user the settings name.
    /// `None`: nowhere on Slack.
    async fn route(&self, a: &Approval) -> Result<Option<Route>, CardError> {
        if self.inner.config.slack.is_none() {
            return Ok(None);
        }
        let asks = &self.inner.config.asks;
        let mut allowed = asks.slack_answerers.clone();
        match self
            .inner
            .store
            .channel_thread(a.session_id.clone())
            .await?
        {
            Some(t) => match Thread::from_key(&t.platform, &t.thread_key) {
                Some(Thread::Slack { channel, thread_ts }) => {
                    allowed.extend(t.started_by);
                    Ok(Some(Route {
                        channel,
                        thread_ts: Some(thread_ts),
                        allowed,
                    }))
                }
                // A Lark conversation's requests are answered there.
                Some(Thread::Lark { .. }) | None => Ok(None),
            },
            None => Ok(asks.slack_user.clone().map(|user| {
                allowed.push(user.clone());
                Route {
                    channel: user,
                    thread_ts: None,
                    allowed,
                }
            })),
        }
    }

    /// Who may answer request `id` on Slack (`None`: it is not answered there).
    pub async fn answerers(&self, id: &str) -> Option<Vec<String>> {
        let a = self.inner.store.approval(id.to_owned(), None).await.ok()?;
        self.route(&a).await.ok().flatten().map(|r| r.allowed)
    }

    /// Posts a waiting request's message where it goes.
    async fn post(&self, a: Approval) -> Result<(), CardError> {
        let Some(route) = self.route(&a).await? else {
            return Ok(());
        };
        let (text, blocks) = request_message(&a, &self.inner.display);
        let mut body = json!({"channel": route.channel, "text": text, "blocks": blocks});
        if let Some(ts) = &route.thread_ts {
            body["thread_ts"] = json!(ts);
        }
        let answer = self.call("chat.postMessage", &body).await?;
        let (Some(channel), Some(ts)) = (answer["channel"].as_str(), answer["ts"].as_str()) else {
            return Ok(());
        };
        self.posted().insert(
            a.id.clone(),
            Posted {
                channel: channel.to_owned(),
                ts: ts.to_owned(),
            },
        );
        // Decided while the message was on its way: it says so at once.
        let now = self.inner.store.approval(a.id.clone(), None).await?;
        if now.decision.is_some() {
            self.decided(&now).await?;
        }
        Ok(())
    }

    /// Updates the message of a decided request, if one was posted and shows its
    /// buttons still.
    async fn decided(&self, a: &Approval) -> Result<(), CardError> {
        let Some(p) = self.posted().remove(&a.id) else {
            return Ok(());
        };
        self.update(&p.channel, &p.ts, a).await
    }

    /// Rewrites the message at `channel`/`ts` as request `a` stands now.
    pub async fn update_at(&self, channel: &str, ts: &str, a: &Approval) {
        self.posted().remove(&a.id);
        if let Err(e) = self.update(channel, ts, a).await {
            tracing::warn!(approval = %a.id, error = %e, "a request's Slack message could not be updated");
        }
    }

    async fn update(&self, channel: &str, ts: &str, a: &Approval) -> Result<(), CardError> {
        let (text, blocks) = decided_message(a, &self.inner.display);
        let body = json!({"channel": channel, "ts": ts, "text": text, "blocks": blocks});
        self.call("chat.update", &body).await.map(|_| ())
    }

    /// Tells `user` alone, in `channel`, why their click did nothing.
    pub async fn tell(&self, channel: &str, user: &str, text: &str) {
        let body = json!({"channel": channel, "user": user, "text": text});
        if let Err(e) = self.call("chat.postEphemeral", &body).await {
            tracing::warn!(error = %e, "a Slack user could not be told why their click did nothing");
        }
    }

    /// Request `id` as it stands (for a click on a request decided already).
    pub async fn approval(&self, id: &str) -> Option<Approval> {
        self.inner.store.approval(id.to_owned(), None).await.ok()
    }
}

/// Where a request's message goes, and who may answer it.
#[derive(Debug, Clone)]
struct Route {
    channel: String,
    thread_ts: Option<String>,
    allowed: Vec<String>,
}

impl TaskObserver for Cards {
    fn task_finished(&self, _task: &TaskRow) {}

    fn approval_asked(&self, a: &Approval) {
        if self.inner.config.slack.is_none() {
            return;
        }
        let (this, a) = (self.clone(), a.clone());
        tokio::spawn(async move {
            let id = a.id.clone();
            if let Err(e) = this.post(a).await {
                eprintln!("berth: request {id} could not be posted to Slack: {e}");
                tracing::error!(approval = %id, error = %e, "a request could not be posted to Slack");
            }
        });
    }

    fn approval_decided(&self, a: &Approval) {
        // Taken off at once: the message is updated once, here.
        let Some(p) = self.posted().remove(&a.id) else {
            return;
        };
        let (this, a) = (self.clone(), a.clone());
        tokio::spawn(async move {
            if let Err(e) = this.update(&p.channel, &p.ts, &a).await {
                tracing::warn!(approval = %a.id, error = %e, "a request's Slack message could not be updated");
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
        assert!(outcome_line(&a).starts_with("*Expired*"));
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
}
