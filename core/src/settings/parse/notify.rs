//! Reading the `notify` object ([`crate::settings::notify`]).

use super::{Reader, scoped};
use crate::quote::q;
use crate::settings::SettingsErrorKind;
use crate::settings::notify::{
    Answerers, MAX_LONG_TASK_SECS, Webhook, Wire, check_webhook_url, is_env_name, is_lark_id,
    is_slack_id,
};
use jsonc_parser::ast::{Object, Value};
use jsonc_parser::common::Ranged;

/// The keys of the `notify` object.
const NOTIFY_KEYS: [&str; 6] = [
    "desktop",
    "long_task_secs",
    "webhook",
    "slack",
    "lark",
    "answerers",
];
/// The keys of `notify.webhook`.
const WEBHOOK_KEYS: [&str; 2] = ["url", "secret_env"];
/// The keys of `notify.answerers`.
const ANSWERER_KEYS: [&str; 2] = ["slack", "lark"];

/// What a Slack user id must look like, for messages.
const SLACK_ID: &str = " is not a Slack user id (capital letters and digits, like \"U123ABC\")";
/// What a Lark open id must look like, for messages.
const LARK_ID: &str = " is not a Lark open id (\"ou_\" and letters or digits)";

impl Reader<'_> {
    /// `notify`: `desktop`, `long_task_secs`, `webhook`, `slack`, `lark`, `answerers`.
    pub(super) fn notify(&mut self, object: &Object<'_>) {
        for prop in self.props(object, "notify") {
            let name = prop.name.as_str();
            let key = scoped("notify", name);
            let value = &prop.value;
            match name {
                "desktop" => self.layer.notify.desktop = self.boolean(&key, value),
                "long_task_secs" => self.long_task_secs(&key, value),
                "webhook" => {
                    if let Some(object) = self.object(&key, value) {
                        self.layer.notify.webhook = self.webhook(object);
                    }
                }
                "slack" => self.layer.notify.slack = self.id(&key, value, is_slack_id, SLACK_ID),
                "lark" => self.layer.notify.lark = self.id(&key, value, is_lark_id, LARK_ID),
                "answerers" => {
                    if let Some(object) = self.object(&key, value) {
                        self.layer.notify.answerers = Some(self.answerers(object));
                    }
                }
                _ => self.unknown(prop, "notify", &NOTIFY_KEYS),
            }
        }
    }

    fn boolean(&mut self, key: &str, value: &Value<'_>) -> Option<bool> {
        match value {
            Value::BooleanLit(lit) => Some(lit.value),
            Value::StringLit(_)
            | Value::NumberLit(_)
            | Value::Object(_)
            | Value::Array(_)
            | Value::NullKeyword(_) => {
                self.wrong_type(key, "true or false", value);
                None
            }
        }
    }

    fn long_task_secs(&mut self, key: &str, value: &Value<'_>) {
        match value {
            Value::NumberLit(n) => match n.value.parse::<u64>() {
                Ok(v) if v <= MAX_LONG_TASK_SECS => self.layer.notify.long_task_secs = Some(v),
                Ok(_) | Err(_) => self.error(
                    SettingsErrorKind::InvalidValue,
                    value.range().start,
                    format!(
                        "{} must be a whole number of seconds from 0 to {MAX_LONG_TASK_SECS} (a week), found {}",
                        q(key),
                        n.value
                    ),
                ),
            },
            Value::StringLit(_)
            | Value::BooleanLit(_)
            | Value::Object(_)
            | Value::Array(_)
            | Value::NullKeyword(_) => self.wrong_type(key, "a number of seconds", value),
        }
    }

    /// `notify.webhook`: `url` and `secret_env`, both required (nothing is sent
    /// unsigned).
    fn webhook(&mut self, object: &Object<'_>) -> Option<Webhook> {
        let mut url = None;
        let mut secret_env = None;
        let mut ok = true;
        for prop in self.props(object, "notify.webhook") {
            let name = prop.name.as_str();
            let key = scoped("notify.webhook", name);
            let value = &prop.value;
            match name {
                "url" => match self.string(&key, value) {
                    Some(text) => match check_webhook_url(&text) {
                        Ok(wire) => {
                            if wire == Wire::InClear {
                                self.warn(
                                    value.range().start,
                                    format!(
                                        "{} is plain http to another machine: events cross the network unencrypted (signed, but readable); use https",
                                        q(&key)
                                    ),
                                );
                            }
                            url = Some(text);
                        }
                        Err(why) => {
                            ok = false;
                            self.error(
                                SettingsErrorKind::InvalidValue,
                                value.range().start,
                                format!("{}{why}", q(&key)),
                            );
                        }
                    },
                    None => ok = false,
                },
                "secret_env" => match self.string(&key, value) {
                    Some(name) if is_env_name(&name) => secret_env = Some(name),
                    Some(name) => {
                        ok = false;
                        self.error(
                            SettingsErrorKind::InvalidValue,
                            value.range().start,
                            format!(
                                "{} is {}, which is not the name of an environment variable (letters, digits and _, like \"BERTH_WEBHOOK_SECRET\")",
                                q(&key),
                                q(&name)
                            ),
                        );
                    }
                    None => ok = false,
                },
                _ => self.unknown(prop, "notify.webhook", &WEBHOOK_KEYS),
            }
        }
        // A key of the wrong type was reported already.
        if !ok {
            return None;
        }
        let missing = match (&url, &secret_env) {
            (Some(_), Some(_)) => None,
            (None, _) => Some("has no \"url\"; give the address events are posted to"),
            (Some(_), None) => Some(
                "has no \"secret_env\"; name the environment variable holding the signing secret (events are never sent unsigned)",
            ),
        };
        if let Some(missing) = missing {
            self.error(
                SettingsErrorKind::InvalidValue,
                object.range.start,
                format!("\"notify.webhook\" {missing}"),
            );
            return None;
        }
        Some(Webhook {
            url: url?,
            secret_env: secret_env?,
        })
    }

    /// One platform user id, checked by `valid` (`why` says what it must look like).
    fn id(
        &mut self,
        key: &str,
        value: &Value<'_>,
        valid: fn(&str) -> bool,
        why: &str,
    ) -> Option<String> {
        let text = self.string(key, value)?;
        if valid(&text) {
            Some(text)
        } else {
            self.error(
                SettingsErrorKind::InvalidValue,
                value.range().start,
                format!("{} ({}){why}", q(key), q(&text)),
            );
            None
        }
    }

    /// `notify.answerers`: `slack` and `lark`, arrays of the platforms' user ids.
    fn answerers(&mut self, object: &Object<'_>) -> Answerers {
        let mut out = Answerers::default();
        for prop in self.props(object, "notify.answerers") {
            let name = prop.name.as_str();
            let key = scoped("notify.answerers", name);
            let (valid, why, want): (fn(&str) -> bool, &str, &str) = match name {
                "slack" => (is_slack_id, SLACK_ID, "an array of Slack user ids"),
                "lark" => (is_lark_id, LARK_ID, "an array of Lark open ids"),
                _ => {
                    self.unknown(prop, "notify.answerers", &ANSWERER_KEYS);
                    continue;
                }
            };
            let ids = self.each_string(&key, &prop.value, want, |text| {
                if valid(text) {
                    Ok(text.to_owned())
                } else {
                    Err(format!(" ({}){why}", q(text)))
                }
            });
            match name {
                "slack" => out.slack = ids,
                _ => out.lark = ids,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::path::LocalPath;
    use crate::platform::Platform;
    use crate::settings::notify::{Answerers, NotifyLayer, Webhook};
    use crate::settings::{Diagnostic, SettingsError, SettingsErrorKind, Severity, parse};

    const FILE: &str = "~/.config/berth/settings.jsonc";

    fn read(text: &str) -> Result<crate::settings::Layer, SettingsError> {
        let dir = LocalPath::parse(Platform::Linux, "/home/u/.config/berth").unwrap();
        parse(FILE, &dir, text)
    }

    fn error(line: usize, column: usize, message: &str) -> SettingsError {
        SettingsError {
            kind: SettingsErrorKind::InvalidValue,
            file: FILE.to_owned(),
            line,
            column,
            message: message.to_owned(),
        }
    }

    #[test]
    fn every_key_is_read() {
        let layer = read(
            r#"{
  "notify": {
    "desktop": false,
    "long_task_secs": 120,
    "webhook": { "url": "https://ntfy.sh/berth", "secret_env": "BERTH_WEBHOOK_SECRET" },
    "slack": "U123ABC",
    "lark": "ou_abc1",
    "answerers": { "slack": ["U1", "W2"], "lark": ["ou_1"] },
  }
}"#,
        )
        .unwrap();
        assert_eq!(
            layer.notify,
            NotifyLayer {
                desktop: Some(false),
                long_task_secs: Some(120),
                webhook: Some(Webhook {
                    url: "https://ntfy.sh/berth".into(),
                    secret_env: "BERTH_WEBHOOK_SECRET".into(),
                }),
                slack: Some("U123ABC".into()),
                lark: Some("ou_abc1".into()),
                answerers: Some(Answerers {
                    slack: vec!["U1".into(), "W2".into()],
                    lark: vec!["ou_1".into()],
                }),
            }
        );
        assert_eq!(layer.warnings, vec![]);
        assert_eq!(layer.place("notify").line, 2);
    }

    /// Each mistake is an error at its value, naming the key and what it should be.
    #[test]
    fn mistakes_are_errors_at_their_place() {
        let cases = [
            (
                r#"{ "notify": { "webhook": { "url": "ftp://x", "secret_env": "S" } } }"#,
                error(
                    1,
                    35,
                    "\"notify.webhook.url\" must start with https:// (or http:// for a receiver on this machine)",
                ),
            ),
            (
                r#"{ "notify": { "webhook": { "url": "https://x" } } }"#,
                error(
                    1,
                    26,
                    "\"notify.webhook\" has no \"secret_env\"; name the environment variable holding the signing secret (events are never sent unsigned)",
                ),
            ),
            (
                r#"{ "notify": { "webhook": { "url": "https://x", "secret_env": "A=B" } } }"#,
                error(
                    1,
                    62,
                    "\"notify.webhook.secret_env\" is \"A=B\", which is not the name of an environment variable (letters, digits and _, like \"BERTH_WEBHOOK_SECRET\")",
                ),
            ),
            (
                r#"{ "notify": { "slack": "alice" } }"#,
                error(
                    1,
                    24,
                    "\"notify.slack\" (\"alice\") is not a Slack user id (capital letters and digits, like \"U123ABC\")",
                ),
            ),
            (
                r#"{ "notify": { "answerers": { "lark": ["ou_1", "bob"] } } }"#,
                error(
                    1,
                    47,
                    "\"notify.answerers.lark[1]\" (\"bob\") is not a Lark open id (\"ou_\" and letters or digits)",
                ),
            ),
            (
                r#"{ "notify": { "long_task_secs": 999999999 } }"#,
                error(
                    1,
                    33,
                    "\"notify.long_task_secs\" must be a whole number of seconds from 0 to 604800 (a week), found 999999999",
                ),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(read(text), Err(want), "{text}");
        }
        let wrong = read(r#"{ "notify": { "desktop": "yes" } }"#).unwrap_err();
        assert_eq!(
            (wrong.kind, wrong.message.as_str()),
            (
                SettingsErrorKind::WrongType,
                "\"notify.desktop\" must be true or false, found a string"
            )
        );
    }

    #[test]
    fn plain_http_elsewhere_and_unknown_keys_are_warnings() {
        let layer = read(
            r#"{ "notify": { "webhook": { "url": "http://relay.lan/x", "secret_env": "S", "sekret": 1 }, "destkop": true } }"#,
        )
        .unwrap();
        let warning = |column, message: &str| Diagnostic {
            severity: Severity::Warning,
            file: FILE.to_owned(),
            line: 1,
            column,
            message: message.to_owned(),
        };
        assert_eq!(
            layer.warnings,
            vec![
                warning(
                    35,
                    "\"notify.webhook.url\" is plain http to another machine: events cross the network unencrypted (signed, but readable); use https",
                ),
                warning(
                    76,
                    "unknown key \"notify.webhook.sekret\"; known keys in \"notify.webhook\": url, secret_env",
                ),
                warning(
                    91,
                    "unknown key \"notify.destkop\" (did you mean \"desktop\"?); known keys in \"notify\": desktop, long_task_secs, webhook, slack, lark, answerers",
                ),
            ]
        );
        assert!(layer.notify.webhook.is_some() && layer.notify.desktop.is_none());
    }
}
