//! JSON-RPC 2.0 as ACP frames it: one JSON object a line on the agent's stdin and
//! stdout. Berth's own thin layer (not the `agent-client-protocol` crate, which would
//! switch the whole workspace's `serde_json` to insertion order, add about thirty
//! crates, and drop a malformed line without a word): [`classify`] reads one line
//! into a [`Message`], whatever the agent sent; [`request`], [`notification`],
//! [`result`] and [`error`] write one.

use serde_json::{Value, json};

/// The longest line Berth reads from an agent (a `session/update` with a whole file's
/// diff can be large); a longer one is an error event, and the rest of it is skipped.
pub const MAX_LINE: usize = 16 << 20;

/// JSON-RPC's own error codes.
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL: i64 = -32603;
/// ACP's "resource not found".
pub const NOT_FOUND: i64 = -32002;

/// One line from the agent.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// The answer to one of Berth's requests.
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
    /// A request of the agent's (it waits for Berth's answer).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification of the agent's (`session/update`).
    Notification { method: String, params: Value },
    /// Anything else: not JSON, not an object, not JSON-RPC. Why, for the error event.
    Invalid(String),
}

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (JSON-RPC error {})", self.message, self.code)
    }
}

/// What one line is. Never fails: a line that is not JSON-RPC is [`Message::Invalid`].
pub fn classify(line: &str) -> Message {
    let line = line.trim();
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Message::Invalid(format!("not JSON ({e}): {}", clip(line))),
    };
    let Some(obj) = v.as_object() else {
        return Message::Invalid(format!("not a JSON-RPC object: {}", clip(line)));
    };
    let id = obj.get("id").filter(|id| id.is_number() || id.is_string());
    let method = obj.get("method").and_then(Value::as_str);
    let params = obj.get("params").cloned().unwrap_or(Value::Null);
    match (id, method) {
        (Some(id), Some(m)) => Message::Request {
            id: id.clone(),
            method: m.to_owned(),
            params,
        },
        (None, Some(m)) => Message::Notification {
            method: m.to_owned(),
            params,
        },
        (Some(id), None) => {
            let outcome = match (obj.get("result"), obj.get("error")) {
                (_, Some(e)) if !e.is_null() => Err(RpcError {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(INTERNAL),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("an error without a message")
                        .to_owned(),
                }),
                (Some(r), _) => Ok(r.clone()),
                (None, _) => {
                    return Message::Invalid(format!(
                        "an answer with neither result nor error: {}",
                        clip(line)
                    ));
                }
            };
            Message::Response {
                id: id.clone(),
                outcome,
            }
        }
        (None, None) => {
            Message::Invalid(format!("neither a request nor an answer: {}", clip(line)))
        }
    }
}

/// The outcome when `msg` answers Berth's request `id`; otherwise the message, to
/// handle while Berth waits.
pub fn answer_to(msg: Message, id: &Value) -> Result<Result<Value, RpcError>, Message> {
    match msg {
        Message::Response { id: got, outcome } if got == *id => Ok(outcome),
        m @ (Message::Response { .. }
        | Message::Request { .. }
        | Message::Notification { .. }
        | Message::Invalid(_)) => Err(m),
    }
}

/// The first 200 bytes of `line`, for a message.
fn clip(line: &str) -> &str {
    crate::agent::adapter::cut(line, 200)
}

/// A request's line (with its newline).
pub fn request(id: i64, method: &str, params: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
}

/// A notification's line.
pub fn notification(method: &str, params: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "method": method, "params": params}))
}

/// The line answering the agent's request `id` with `value`.
pub fn result(id: &Value, value: Value) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "result": value}))
}

/// The line answering the agent's request `id` with an error.
pub fn error(id: &Value, code: i64, message: &str) -> Vec<u8> {
    line(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

fn line(v: Value) -> Vec<u8> {
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_classified_and_none_panics() {
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":3,"result":{"a":1}}"#),
            Message::Response {
                id: json!(3),
                outcome: Ok(json!({"a": 1}))
            }
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32000,"message":"no"}}"#),
            Message::Response {
                id: json!("x"),
                outcome: Err(RpcError {
                    code: -32000,
                    message: "no".into()
                })
            }
        );
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":0,"method":"fs/read_text_file","params":{}}"#),
            Message::Request { .. }
        ));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","method":"session/update","params":{}}"#),
            Message::Notification { .. }
        ));
        // A null result is a result (`session/load` answers null).
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            Message::Response {
                id: json!(1),
                outcome: Ok(Value::Null)
            }
        );
        for bad in [
            "",
            "garbage",
            "[1,2]",
            "{}",
            r#"{"id":1}"#,
            r#"{"id":{"x":1},"result":1}"#,
            "\u{0}\u{ffff}",
        ] {
            assert!(matches!(classify(bad), Message::Invalid(_)), "{bad:?}");
        }
    }

    #[test]
    fn written_lines_are_one_json_object_each() {
        let l = request(7, "session/prompt", json!({"prompt": "a\nb"}));
        assert_eq!(l.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(
            classify(std::str::from_utf8(&l).unwrap()),
            Message::Request {
                id: json!(7),
                method: "session/prompt".into(),
                params: json!({"prompt": "a\nb"})
            }
        );
    }
}
