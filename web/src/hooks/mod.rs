//! Chat channels: Slack's and Lark's webhooks, and the answers posted back.
//!
//! `POST /hooks/slack` and `POST /hooks/lark` are served on the web listener of
//! `berth serve` and on `berth-server`'s listener, outside the token and `Host` guard:
//! they are authenticated by the platforms' signatures instead, with secrets from
//! the environment or the user settings ([`ChannelConfig`]), never from the request. A
//! platform without its secret answers 404 `channel_not_configured` and processes
//! nothing.
//!
//! A conversation (a Slack thread, a Lark chat) maps to one session with origin
//! `channel`. What comes in is a [`ChannelMessage`], which has no path field: a
//! channel session is created unbound, cannot be linked (`origin_cannot_bind`), and
//! runs in scratch; a message that names a directory is only a prompt. When a channel
//! session's task ends, the [`Replier`] (a [`TaskObserver`] on the scheduler) posts
//! the agent's final answer back to the conversation.

pub mod cards;
pub mod config;
pub mod crypto;
mod lark;
pub mod out;
mod reply;
mod slack;

pub use cards::Cards;
pub use config::{AskRouting, ChannelConfig, LarkConfig, Secret, SlackConfig};
pub use out::{OutError, Outbound};
pub use reply::{Replier, final_answer};

use crate::http::{ApiError, BODY_LIMIT};
use crate::scheduler::Scheduler;
use crate::store::{ChannelIntake, NewChannelMessage, Store};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;
use std::sync::Arc;

/// A chat platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    Slack,
    Lark,
}

impl Platform {
    pub const fn as_str(self) -> &'static str {
        match self {
            Platform::Slack => "slack",
            Platform::Lark => "lark",
        }
    }
}

/// A conversation on a platform: where a message came from and where the answer goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Thread {
    /// A Slack thread: its channel and the `ts` of its first message.
    Slack { channel: String, thread_ts: String },
    /// A Lark chat.
    Lark { chat_id: String },
}

impl Thread {
    pub const fn platform(&self) -> Platform {
        match self {
            Thread::Slack { .. } => Platform::Slack,
            Thread::Lark { .. } => Platform::Lark,
        }
    }

    /// The stored key: `channel:thread_ts` for Slack (channel ids hold no `:`), the
    /// chat id for Lark.
    pub fn key(&self) -> String {
        match self {
            Thread::Slack { channel, thread_ts } => format!("{channel}:{thread_ts}"),
            Thread::Lark { chat_id } => chat_id.clone(),
        }
    }

    /// The thread a stored platform and key name.
    pub fn from_key(platform: &str, key: &str) -> Option<Thread> {
        match platform {
            "slack" => key.split_once(':').map(|(c, ts)| Thread::Slack {
                channel: c.to_owned(),
                thread_ts: ts.to_owned(),
            }),
            "lark" => Some(Thread::Lark {
                chat_id: key.to_owned(),
            }),
            _ => None,
        }
    }
}

/// A chat message taken in from a webhook. By construction it carries no path and no
/// binding, only text for the agent: nothing a channel says can reach a local
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelMessage {
    pub thread: Thread,
    pub text: String,
    /// The platform's id of the delivery, to drop its retries.
    pub event_id: String,
    /// Who wrote it (Slack's user id, Lark's open id), if the platform said.
    pub user: Option<String>,
}

/// What an authenticated webhook request asks of Berth, read without acting on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intake {
    /// A URL verification: answered with its challenge.
    Challenge(String),
    /// Acknowledged without a task, and why.
    Ignored(&'static str),
    /// A message for its conversation's session.
    Message(ChannelMessage),
    /// A click on a request's button (Lark's card callbacks come with its events).
    Click(cards::Click),
}

/// Authenticates one webhook request of `platform` with `config`'s secrets, at `now`
/// (seconds since the epoch), and reads what it asks: everything a handler does before
/// it touches the store, as a pure function of the request's headers and exact body
/// bytes (so it can be tested and fuzzed without a server). A platform without its
/// secret is `channel_not_configured`; a request that is not authentic is
/// `bad_signature`; an authentic one that cannot be read is `bad_request`.
pub fn read_request(
    platform: Platform,
    config: &ChannelConfig,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<Intake, ApiError> {
    match platform {
        Platform::Slack => configured::<SlackConfig>(config)?.read(headers, body, now),
        Platform::Lark => configured::<LarkConfig>(config)?.read(headers, body, now),
    }
}

/// What differs between the platforms' webhooks, implemented by each platform's
/// secrets; [`receive`] is the rest.
trait Webhook: Sized {
    const PLATFORM: Platform;

    /// The platform's secrets in `config`, if it has them.
    fn of(config: &ChannelConfig) -> Option<&Self>;

    /// Authenticates a request with these secrets (at `now`, seconds since the epoch)
    /// and reads what it asks, acting on nothing.
    fn read(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Intake, ApiError>;
}

/// The platform's secrets, or `channel_not_configured`.
fn configured<W: Webhook>(config: &ChannelConfig) -> Result<&W, ApiError> {
    W::of(config).ok_or(ApiError::ChannelNotConfigured {
        platform: W::PLATFORM.as_str(),
    })
}

/// `POST /hooks/{platform}`: nothing is read from an unconfigured platform; a
/// configured one's request is authenticated and read from its exact body bytes, then
/// answered.
async fn receive<W: Webhook>(
    State(ch): State<Arc<Channels>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let secrets = configured::<W>(ch.config())?;
    let body = raw_body(body).await?;
    let intake = secrets.read(&headers, &body, crate::clock::now_secs())?;
    ch.answer(intake).await
}

/// `POST /hooks/slack/actions`: Slack's interactivity requests, authenticated by the
/// signing secret like the events; a click on a request's button is acted on (see
/// [`Channels::click`]), anything else acknowledged. Always answered at once: Slack
/// shows an error to a user whose click is not acknowledged within 3 s.
async fn slack_click(
    State(ch): State<Arc<Channels>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let secrets = configured::<SlackConfig>(ch.config())?;
    let body = raw_body(body).await?;
    if let Some(click) = cards::read_click(secrets, &headers, &body, crate::clock::now_secs())? {
        ch.click(click).await;
    }
    Ok(Json(serde_json::json!({})))
}

/// What the webhook handlers share.
#[derive(Debug)]
pub struct Channels {
    store: Store,
    scheduler: Scheduler,
    config: ChannelConfig,
    /// The requests' messages (see [`cards`]).
    cards: Cards,
}

impl Channels {
    pub fn new(
        store: Store,
        scheduler: Scheduler,
        config: ChannelConfig,
        cards: Cards,
    ) -> Channels {
        Channels {
            store,
            scheduler,
            config,
            cards,
        }
    }

    /// A click on a request's button (see [`cards`]): a replay does nothing; a user who
    /// may not answer is told so, alone; anyone else's answer is decided through the
    /// one path of approvals (`via: "slack"` or `"lark"`), and the message then says how
    /// it stands (the decision, or why the click changed nothing: decided already,
    /// expired). Takes milliseconds: the platform hears back at once. Slack's messages
    /// follow (its answer to a click is ignored); Lark's answer is returned (a toast,
    /// and the card as it stands).
    pub async fn click(&self, click: cards::Click) -> Value {
        use crate::scheduler::HumanAnswer;
        let lark = click.platform == Platform::Lark;
        if self.cards.replayed(click.platform, &click.trigger_id) {
            tracing::warn!(platform = click.platform.as_str(), trigger = %click.trigger_id,
                "a replayed click was ignored");
            return serde_json::json!({});
        }
        let Some(allowed) = self.cards.answerers(&click.approval, click.platform).await else {
            let why = "Berth knows no such request here.".to_owned();
            return self.refuse(&click, why);
        };
        if !allowed.contains(&click.user) {
            let who = allowed
                .iter()
                .map(|u| if lark { u.clone() } else { format!("<@{u}>") })
                .collect::<Vec<_>>()
                .join(", ");
            return self.refuse(
                &click,
                format!("Not yours: only {who} may answer this request."),
            );
        }
        let verdict = match click.action {
            cards::Action::Deny => berth_core::approval::Verdict::Deny,
            cards::Action::Allow | cards::Action::Always => berth_core::approval::Verdict::Allow,
        };
        let human = HumanAnswer {
            verdict,
            always: click.action == cards::Action::Always,
            reason: None,
            who: Some(click.user.clone()),
            via: click.platform.as_str().to_owned(),
        };
        // A message this server posted is updated by the decision itself (an observer
        // of decisions), Lark's by this answer; a Slack message posted before a
        // restart, here, where it was clicked.
        if lark {
            self.cards.untrack(&click.approval, Platform::Lark);
        }
        let tracked = self.cards.tracked(&click.approval, click.platform);
        let answered = self.scheduler.answer(&click.approval, None, human).await;
        if lark {
            return match answered {
                Ok(a) => self
                    .cards
                    .lark_reply(("success", cards::outcome_line(&a, false)), Some(&a)),
                Err(e) => {
                    let now = self.cards.approval(&click.approval).await;
                    self.cards
                        .lark_reply(("warning", format!("Nothing changed: {e}")), now.as_ref())
                }
            };
        }
        let cards = self.cards.clone();
        tokio::spawn(async move {
            match answered {
                Ok(_) if tracked => {}
                Ok(a) => cards.update_at(&click.channel, &click.message_ts, &a).await,
                Err(e) => {
                    let now = cards.approval(&click.approval).await;
                    if let Some(a) = now.as_ref().filter(|a| a.decision.is_some()) {
                        cards.update_at(&click.channel, &click.message_ts, a).await;
                    }
                    cards
                        .tell(
                            &click.channel,
                            &click.user,
                            &format!("Nothing changed: {e}"),
                        )
                        .await;
                }
            }
        });
        serde_json::json!({})
    }

    /// A click that changes nothing: Slack tells the user alone (a message only they
    /// see); Lark's answer is a toast.
    fn refuse(&self, click: &cards::Click, text: String) -> Value {
        if click.platform == Platform::Lark {
            return self.cards.lark_reply(("error", text), None);
        }
        let (cards, channel, user) = (
            self.cards.clone(),
            click.channel.clone(),
            click.user.clone(),
        );
        tokio::spawn(async move { cards.tell(&channel, &user, &text).await });
        serde_json::json!({})
    }

    pub fn config(&self) -> &ChannelConfig {
        &self.config
    }

    /// [`Channels::take_in`], answered the way both platforms expect: `duplicate` for
    /// a retried delivery, else the session and task it became.
    pub async fn take_in_reply(
        &self,
        msg: ChannelMessage,
    ) -> Result<axum::Json<serde_json::Value>, ApiError> {
        Ok(axum::Json(match self.take_in(msg).await? {
            ChannelIntake::Duplicate => serde_json::json!({ "ok": true, "duplicate": true }),
            ChannelIntake::Queued {
                session_id, task, ..
            } => serde_json::json!({ "ok": true, "session": session_id, "task": task.id }),
        }))
    }

    /// Answers an intake: its challenge, the reason it is ignored, or (for a message)
    /// [`Channels::take_in_reply`].
    pub async fn answer(&self, intake: Intake) -> Result<axum::Json<serde_json::Value>, ApiError> {
        match intake {
            Intake::Challenge(challenge) => {
                Ok(axum::Json(serde_json::json!({ "challenge": challenge })))
            }
            Intake::Ignored(why) => Ok(axum::Json(
                serde_json::json!({ "ok": true, "ignored": why }),
            )),
            Intake::Message(msg) => self.take_in_reply(msg).await,
            Intake::Click(click) => Ok(axum::Json(self.click(click).await)),
        }
    }

    /// Stores a message as a task of its conversation's session (origin `channel`),
    /// creating the session on the first message, and wakes the scheduler. A retried
    /// delivery stores nothing.
    pub async fn take_in(&self, msg: ChannelMessage) -> Result<ChannelIntake, ApiError> {
        let platform = msg.thread.platform();
        let excerpt: String = msg.text.chars().take(60).collect();
        let intake = self
            .store
            .channel_intake(NewChannelMessage {
                platform: platform.as_str(),
                thread_key: msg.thread.key(),
                event_id: msg.event_id.clone(),
                text: msg.text,
                agent: self.config.agent.clone(),
                owner: self.config.member.clone(),
                title: format!("{}: {}", platform.as_str(), excerpt.trim()),
                user: msg.user.clone(),
            })
            .await
            .inspect_err(|e| {
                tracing::warn!(platform = platform.as_str(), error = %e,
                    "a channel message could not be taken in");
            })?;
        match &intake {
            ChannelIntake::Duplicate => {
                tracing::info!(platform = platform.as_str(), event = %msg.event_id,
                    "a retried delivery was ignored");
            }
            ChannelIntake::Queued {
                session_id, task, ..
            } => {
                tracing::info!(platform = platform.as_str(), session = %session_id,
                    task = %task.id, "a channel message was queued");
                self.scheduler.notify(session_id);
            }
        }
        Ok(intake)
    }
}

/// The webhook routes. They carry no guard of their own: each handler authenticates
/// its request by the platform's signature before acting on it.
pub fn hooks_router(channels: Arc<Channels>) -> Router {
    Router::new()
        .route(
            "/hooks/slack",
            post(receive::<SlackConfig>).fallback(method_not_allowed),
        )
        .route(
            "/hooks/lark",
            post(receive::<LarkConfig>).fallback(method_not_allowed),
        )
        .route(
            "/hooks/slack/actions",
            post(slack_click).fallback(method_not_allowed),
        )
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(channels)
}

async fn method_not_allowed(method: axum::http::Method) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
    }
}

/// Reads the raw body (signatures cover its exact bytes), at most [`BODY_LIMIT`].
async fn raw_body(body: Body) -> Result<Bytes, ApiError> {
    match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            Err(ApiError::PayloadTooLarge { limit: BODY_LIMIT })
        }
        Err(e) => Err(ApiError::BadRequest {
            message: format!("could not read the request body: {e}"),
        }),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_keys_round_trip() {
        for t in [
            Thread::Slack {
                channel: "C024BE91L".into(),
                thread_ts: "1700000000.000100".into(),
            },
            Thread::Lark {
                chat_id: "oc_5ad11d72b830411d72b836c20".into(),
            },
        ] {
            assert_eq!(Thread::from_key(t.platform().as_str(), &t.key()), Some(t));
        }
        assert_eq!(Thread::from_key("irc", "x"), None);
    }
}
