//! The CLI's errors: what went wrong and what to do, plus the exit code.

use berth_core::ErrorCode;
use berth_core::api::ErrorBody;
use hyper::StatusCode;
use serde::Deserialize;
use serde_json::Value;
use std::fmt;
use std::path::Path;

/// An error shown as `error: <message>` and `hint: <hint>` on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub message: String,
    pub hint: String,
    /// The stable code, when the error came from a rule, the server or one of the
    /// CLI's own checks. A code the server answered that this build does not know (a
    /// server of another version) is `None`, and kept at the end of `message`.
    pub code: Option<ErrorCode>,
    /// 1 for a refused or failed operation, 2 for bad usage.
    pub exit: u8,
}

impl CliError {
    pub fn new(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            hint: hint.into(),
            code: None,
            exit: 1,
        }
    }

    /// Bad usage (exit 2).
    pub fn usage(message: impl Into<String>, hint: impl Into<String>) -> CliError {
        CliError {
            exit: 2,
            ..CliError::new(message, hint)
        }
    }

    /// No server answers on this home's control socket.
    pub fn not_running(home: &Path) -> CliError {
        CliError {
            code: Some(ErrorCode::NotRunning),
            ..CliError::new(
                "berth is not running",
                format!(
                    "start it with `berth serve` (it serves {}; pass the same --home or BERTH_HOME)",
                    home.display()
                ),
            )
        }
    }

    /// The control socket `socket` of `home` could not be connected to: nothing
    /// listens there (not running), or something else stood in the way.
    pub fn unreachable(home: &Path, socket: &Path, e: &std::io::Error) -> CliError {
        use std::io::ErrorKind;
        if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) {
            CliError::not_running(home)
        } else {
            CliError::new(
                format!("cannot reach berth at {}: {e}", socket.display()),
                "check that `berth serve` runs with the same --home / BERTH_HOME",
            )
        }
    }

    /// A whole answer of the server: the JSON document of a 2xx (`null` when empty),
    /// else the error its body carries.
    pub fn answer(status: StatusCode, bytes: &[u8]) -> Result<Value, CliError> {
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(bytes).map_err(|e| {
                CliError::new(
                    format!("berth answered {status} with a body that is not JSON: {e}"),
                    "check that the socket belongs to a Berth server of the same version",
                )
            })?
        };
        if status.is_success() {
            Ok(value)
        } else {
            Err(CliError::from_body(status, &value))
        }
    }

    /// From the server's `{"error": {code, message, hint}}` body.
    pub fn from_body(status: StatusCode, body: &Value) -> CliError {
        let (code, message, hint) = match ErrorBody::deserialize(body) {
            Ok(body) => {
                let (code, message, hint) = body.error.decoded();
                (code, Some(message), Some(hint))
            }
            Err(_) => (None, None, None),
        };
        CliError {
            message: message.unwrap_or_else(|| format!("berth answered {status}")),
            hint: hint.unwrap_or_else(|| String::from("see `berth serve`'s output")),
            exit: if status == StatusCode::BAD_REQUEST && code == Some(ErrorCode::BadRequest) {
                2
            } else {
                1
            },
            code,
        }
    }

    /// A refusal by a rule, with its stable code.
    pub fn from_refusal(r: berth_core::Refusal) -> CliError {
        CliError {
            code: Some(r.code),
            ..CliError::new(r.message, r.hint)
        }
    }

    /// Prints the error as every `berth` command does (`error:` and `hint:` on
    /// stderr, and the JSON document on stdout for `--json`); returns the exit code.
    pub fn report(&self, json: bool) -> u8 {
        if json {
            println!("{}", self.to_json());
        }
        // Messages name paths and carry the server's text: shown, never acted on.
        eprintln!("error: {}", super::render::escape_lines(&self.message));
        eprintln!("hint: {}", super::render::escape_lines(&self.hint));
        self.exit
    }

    /// The error as one JSON document, for `--json` (`code` is `null` when none).
    pub fn to_json(&self) -> Value {
        serde_json::json!({"error": {"code": self.code, "message": self.message, "hint": self.hint}})
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_body_is_decoded_and_an_unknown_code_kept_in_the_message() {
        let known =
            serde_json::json!({"error": {"code": "bad_request", "message": "m", "hint": "h"}});
        let e = CliError::from_body(StatusCode::BAD_REQUEST, &known);
        assert_eq!(
            (e.code, e.message.as_str(), e.hint.as_str(), e.exit),
            (Some(ErrorCode::BadRequest), "m", "h", 2)
        );
        let newer =
            serde_json::json!({"error": {"code": "from_the_future", "message": "m", "hint": "h"}});
        let e = CliError::from_body(StatusCode::CONFLICT, &newer);
        assert_eq!(
            (e.code, e.message.as_str(), e.exit),
            (None, "m [from_the_future]", 1)
        );
        assert_eq!(e.to_json()["error"]["code"], Value::Null);
        let e = CliError::from_body(StatusCode::BAD_GATEWAY, &Value::Null);
        assert_eq!(
            (e.code, e.message.as_str()),
            (None, "berth answered 502 Bad Gateway")
        );
        let e = CliError::not_running(Path::new("/h"));
        assert_eq!(e.to_json()["error"]["code"], "not_running");
    }
}
