//! `POST /hooks/slack`: Slack's Events API.
//!
//! Every request is authenticated first (v0 signature over `v0:timestamp:body`, a
//! timestamp within 300 s of now either way, constant-time compare), and only then
//! read: `url_verification` echoes its challenge; an `event_callback` carrying a
//! user's `message` becomes a task of the thread's channel session. Bot messages and
//! message subtypes (edits, joins, the bot's own answers) are acknowledged and
//! ignored. Retries are dropped by `event_id`.

use super::config::{ChannelConfig, SlackConfig};
use super::crypto::{self, SignatureError};
use super::{ChannelMessage, Intake, Platform, Thread, Webhook, header};
use crate::http::ApiError;
use axum::http::HeaderMap;
use serde::Deserialize;

const TIMESTAMP: &str = "x-slack-request-timestamp";
const SIGNATURE: &str = "x-slack-signature";

/// The envelope of every Events API request.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Envelope {
    UrlVerification {
        challenge: String,
    },
    EventCallback {
        event_id: String,
        event: Event,
    },
    #[serde(other)]
    Other,
}

/// The part of an event Berth reads.
#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    bot_id: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    ts: Option<String>,
    #[serde(default)]
    thread_ts: Option<String>,
}

/// The channel message an event carries, or why it carries none.
fn message(event_id: String, e: Event) -> Result<ChannelMessage, &'static str> {
    if e.kind != "message" {
        return Err("not a message event");
    }
    if e.bot_id.is_some() {
        return Err("a bot's message");
    }
    if e.subtype.is_some() {
        return Err("a message subtype");
    }
    let channel = e.channel.filter(|c| !c.is_empty()).ok_or("no channel")?;
    // The conversation is stored as `channel:thread_ts`. Slack's channel ids hold no
    // ':'; one that did would read back as another conversation, and the answer would
    // go there.
    if channel.contains(':') {
        return Err("a channel id with ':'");
    }
    let ts = e.ts.filter(|t| !t.is_empty()).ok_or("no ts")?;
    let text = e.text.unwrap_or_default();
    if text.trim().is_empty() {
        return Err("no text");
    }
    Ok(ChannelMessage {
        thread: Thread::Slack {
            channel,
            thread_ts: e.thread_ts.filter(|t| !t.is_empty()).unwrap_or(ts),
        },
        text,
        event_id,
        user: e.user.filter(|u| !u.is_empty()),
    })
}

/// `POST /hooks/slack`, authenticated by the signing secret.
impl Webhook for SlackConfig {
    const PLATFORM: Platform = Platform::Slack;

    fn of(config: &ChannelConfig) -> Option<&SlackConfig> {
        config.slack.as_ref()
    }

    fn read(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Intake, ApiError> {
        let unsigned = |e: SignatureError| {
            tracing::warn!(reason = %e, "a Slack request was refused");
            ApiError::BadSignature {
                platform: "slack",
                reason: e.to_string(),
            }
        };
        let ts = header(headers, TIMESTAMP)
            .ok_or_else(|| unsigned(SignatureError::MissingHeader("X-Slack-Request-Timestamp")))?;
        let sig = header(headers, SIGNATURE)
            .ok_or_else(|| unsigned(SignatureError::MissingHeader("X-Slack-Signature")))?;
        crypto::verify_slack(self.signing_secret.expose().as_bytes(), ts, sig, body, now)
            .map_err(unsigned)?;
        let envelope: Envelope =
            serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
                message: format!("not a Slack Events API request: {e}"),
            })?;
        match envelope {
            Envelope::UrlVerification { challenge } => Ok(Intake::Challenge(challenge)),
            Envelope::Other => Ok(Intake::Ignored("not an event callback")),
            Envelope::EventCallback { event_id, event } => {
                if event_id.is_empty() {
                    return Err(ApiError::BadRequest {
                        message: "the event callback has an empty event_id".into(),
                    });
                }
                Ok(match message(event_id, event) {
                    Ok(m) => Intake::Message(m),
                    Err(why) => Intake::Ignored(why),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn event(v: Value) -> Event {
        serde_json::from_value(v).expect("event")
    }

    #[test]
    fn user_messages_become_channel_messages_in_their_thread() {
        let top = event(json!({"type": "message", "channel": "C1", "user": "U1",
            "text": "hi", "ts": "1.1"}));
        assert_eq!(
            message("Ev1".into(), top),
            Ok(ChannelMessage {
                thread: Thread::Slack {
                    channel: "C1".into(),
                    thread_ts: "1.1".into()
                },
                text: "hi".into(),
                event_id: "Ev1".into(),
                user: Some("U1".into()),
            })
        );
        let reply = event(json!({"type": "message", "channel": "C1", "text": "more",
            "ts": "2.2", "thread_ts": "1.1"}));
        assert_eq!(
            message("Ev2".into(), reply).map(|m| m.thread.key()),
            Ok("C1:1.1".into())
        );
    }

    #[test]
    fn bots_subtypes_and_empty_messages_are_ignored() {
        let cases = [
            (
                json!({"type": "message", "channel": "C1", "text": "x", "ts": "1", "bot_id": "B1"}),
                "a bot's message",
            ),
            (
                json!({"type": "message", "channel": "C1", "text": "x", "ts": "1",
                       "subtype": "message_changed"}),
                "a message subtype",
            ),
            (
                json!({"type": "message", "channel": "C1", "text": "  ", "ts": "1"}),
                "no text",
            ),
            (
                json!({"type": "app_mention", "channel": "C1", "text": "x", "ts": "1"}),
                "not a message event",
            ),
            (
                json!({"type": "message", "text": "x", "ts": "1"}),
                "no channel",
            ),
            (
                json!({"type": "message", "channel": "C1:X", "text": "x", "ts": "1"}),
                "a channel id with ':'",
            ),
        ];
        for (e, why) in cases {
            assert_eq!(message("Ev".into(), event(e)), Err(why));
        }
    }
}
