//! `POST /hooks/lark`: Lark's (Feishu's) event subscription.
//!
//! Authentication, in order:
//! 1. With an encrypt key configured, a request carrying `X-Lark-Signature` must match
//!    hex(SHA-256(timestamp + nonce + encrypt key + raw body)), its timestamp within
//!    300 s of now. Events (not the URL challenge, which Lark sends unsigned) must be
//!    signed.
//! 2. An `{"encrypt": …}` body is decrypted (AES-256-CBC, key SHA-256(encrypt key)).
//! 3. With a verification token configured, the payload's token (`header.token` in
//!    schema 2.0, `token` otherwise) must match it, constant-time.
//!
//! A URL challenge is answered once it is authenticated by a signature or the token.
//! `im.message.receive_v1` text messages become tasks of the chat's channel session;
//! retries are dropped by `header.event_id` (schema 2.0) or `uuid` (1.0). A
//! `card.action.trigger` callback on a request's card is a click (see
//! [`super::cards`]), answered with a toast and the card as it stands.

use super::config::{ChannelConfig, LarkConfig};
use super::crypto::{self, SignatureError};
use super::{ChannelMessage, Intake, Platform, Thread, Webhook, header};
use crate::http::ApiError;
use crate::secret::same;
use axum::http::HeaderMap;
use serde_json::Value;

const TIMESTAMP: &str = "x-lark-request-timestamp";
const NONCE: &str = "x-lark-request-nonce";
const SIGNATURE: &str = "x-lark-signature";

/// The message event Berth takes in.
const MESSAGE_EVENT: &str = "im.message.receive_v1";

/// A click on an interactive card's button (a request's Allow, Deny, Always).
const CARD_ACTION: &str = "card.action.trigger";

fn refused(e: SignatureError) -> ApiError {
    tracing::warn!(reason = %e, "a Lark request was refused");
    ApiError::BadSignature {
        platform: "lark",
        reason: e.to_string(),
    }
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
    }
}

/// Checks the signature headers if present: `Ok(true)` when signed and valid.
fn signed(cfg: &LarkConfig, headers: &HeaderMap, body: &[u8], now: i64) -> Result<bool, ApiError> {
    let Some(key) = &cfg.encrypt_key else {
        return Ok(false);
    };
    let Some(sig) = header(headers, SIGNATURE) else {
        return Ok(false);
    };
    let ts = header(headers, TIMESTAMP)
        .ok_or_else(|| refused(SignatureError::MissingHeader("X-Lark-Request-Timestamp")))?;
    let nonce = header(headers, NONCE)
        .ok_or_else(|| refused(SignatureError::MissingHeader("X-Lark-Request-Nonce")))?;
    crypto::verify_lark(ts, nonce, sig, key.expose(), body, now).map_err(refused)?;
    Ok(true)
}

/// The plaintext payload: the body itself, or its decrypted `encrypt` field.
fn plaintext(cfg: &LarkConfig, body: &[u8]) -> Result<Value, ApiError> {
    let outer: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("not a Lark event: {e}")))?;
    let Some(data) = outer.get("encrypt") else {
        return Ok(outer);
    };
    let data = data
        .as_str()
        .ok_or_else(|| bad("`encrypt` must be a base64 string"))?;
    let key = cfg.encrypt_key.as_ref().ok_or_else(|| {
        bad("the payload is encrypted, but BERTH_LARK_ENCRYPT_KEY is not configured")
    })?;
    let inner = crypto::lark_decrypt(key.expose(), data)
        .map_err(|e| bad(format!("could not decrypt the payload: {e}")))?;
    serde_json::from_slice(&inner).map_err(|e| bad(format!("the decrypted payload: {e}")))
}

fn text_of<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// The channel message a schema 2.0 `im.message.receive_v1` event carries, or why
/// it carries none.
fn message(event_id: String, payload: &Value) -> Result<ChannelMessage, &'static str> {
    let event = payload.get("event").ok_or("no event")?;
    if let Some(kind) = text_of(event, &["sender", "sender_type"])
        && kind != "user"
    {
        return Err("not a user's message");
    }
    let msg = event.get("message").ok_or("no message")?;
    let chat_id = text_of(msg, &["chat_id"])
        .filter(|c| !c.is_empty())
        .ok_or("no chat_id")?;
    if text_of(msg, &["message_type"]) != Some("text") {
        return Err("not a text message");
    }
    let content: Value = text_of(msg, &["content"])
        .and_then(|c| serde_json::from_str(c).ok())
        .ok_or("content is not JSON")?;
    let text = strip_mentions(text_of(&content, &["text"]).ok_or("no text")?);
    if text.is_empty() {
        return Err("no text");
    }
    Ok(ChannelMessage {
        thread: Thread::Lark {
            chat_id: chat_id.to_owned(),
        },
        text,
        event_id,
        user: text_of(event, &["sender", "sender_id", "open_id"])
            .filter(|u| !u.is_empty())
            .map(str::to_owned),
    })
}

/// Drops Lark's mention placeholders (`@_user_1`) from a group message.
fn strip_mentions(text: &str) -> String {
    text.split(' ')
        .filter(|w| !w.starts_with("@_user_") && !w.starts_with("@_all"))
        .collect::<Vec<_>>()
        .join(" ")
        .trim()
        .to_owned()
}

/// `POST /hooks/lark`, authenticated by the encrypt key or the verification token.
impl Webhook for LarkConfig {
    const PLATFORM: Platform = Platform::Lark;

    fn of(config: &ChannelConfig) -> Option<&LarkConfig> {
        config.lark.as_ref()
    }

    fn read(&self, headers: &HeaderMap, body: &[u8], now: i64) -> Result<Intake, ApiError> {
        let signed = signed(self, headers, body, now)?;
        let payload = plaintext(self, body)?;
        let schema2 = payload.get("schema").and_then(Value::as_str) == Some("2.0");
        let token = if schema2 {
            text_of(&payload, &["header", "token"])
        } else {
            text_of(&payload, &["token"])
        };
        let token_ok = match &self.verification_token {
            None => false,
            Some(expected) => {
                let given = token.unwrap_or_default();
                if !same(expected.expose().as_bytes(), given.as_bytes()) {
                    return Err(refused(SignatureError::TokenMismatch));
                }
                true
            }
        };
        if text_of(&payload, &["type"]) == Some("url_verification") {
            if !(signed || token_ok) {
                return Err(refused(SignatureError::MissingHeader("X-Lark-Signature")));
            }
            let challenge = text_of(&payload, &["challenge"])
                .ok_or_else(|| bad("the URL verification has no challenge"))?;
            return Ok(Intake::Challenge(challenge.to_owned()));
        }
        // With an encrypt key, Lark signs every event: an unsigned one is not Lark's.
        if self.encrypt_key.is_some() && !signed {
            return Err(refused(SignatureError::MissingHeader("X-Lark-Signature")));
        }
        let (event_id, kind) = if schema2 {
            (
                text_of(&payload, &["header", "event_id"]),
                text_of(&payload, &["header", "event_type"]),
            )
        } else {
            (
                text_of(&payload, &["uuid"]),
                text_of(&payload, &["event", "type"]),
            )
        };
        let event_id = event_id
            .filter(|e| !e.is_empty())
            .ok_or_else(|| bad("the event has no event id (header.event_id or uuid)"))?;
        if schema2 && kind == Some(CARD_ACTION) {
            return Ok(match super::cards::read_lark_click(event_id, &payload) {
                Some(click) => Intake::Click(click),
                None => Intake::Ignored("not a click on a request's button"),
            });
        }
        if !schema2 || kind != Some(MESSAGE_EVENT) {
            return Ok(Intake::Ignored("not im.message.receive_v1"));
        }
        Ok(match message(event_id.to_owned(), &payload) {
            Ok(m) => Intake::Message(m),
            Err(why) => Intake::Ignored(why),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(message: Value) -> Value {
        json!({"schema": "2.0",
               "header": {"event_id": "e1", "event_type": MESSAGE_EVENT},
               "event": {"sender": {"sender_type": "user"}, "message": message}})
    }

    #[test]
    fn text_messages_become_channel_messages_of_their_chat() {
        let p = event(json!({"chat_id": "oc_1", "message_type": "text",
                             "content": "{\"text\":\"@_user_1 hello there\"}"}));
        assert_eq!(
            message("e1".into(), &p),
            Ok(ChannelMessage {
                thread: Thread::Lark {
                    chat_id: "oc_1".into()
                },
                text: "hello there".into(),
                event_id: "e1".into(),
                user: None,
            })
        );
    }

    #[test]
    fn other_messages_are_ignored() {
        let cases = [
            (
                event(json!({"chat_id": "oc_1", "message_type": "image", "content": "{}"})),
                "not a text message",
            ),
            (
                event(json!({"message_type": "text", "content": "{\"text\":\"x\"}"})),
                "no chat_id",
            ),
            (
                event(json!({"chat_id": "oc_1", "message_type": "text", "content": "x"})),
                "content is not JSON",
            ),
            (
                event(json!({"chat_id": "oc_1", "message_type": "text",
                             "content": "{\"text\":\"@_user_1\"}"})),
                "no text",
            ),
        ];
        for (p, why) in cases {
            assert_eq!(message("e1".into(), &p), Err(why));
        }
    }
}
