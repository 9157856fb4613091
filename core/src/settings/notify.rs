//! The `notify` key: where Berth tells you that a request waits or a long task ended
//! (a desktop notification, a signed webhook), and who answers from a chat platform.
//!
//! The user layer's alone: a project layer's `notify` would let a repository send your
//! events to an address of its choosing, so the trust gate drops it, trusted or not
//! ([`super::trust::gate`]). Core checks what is written; `berth serve` reads the
//! webhook's secret from the environment and sends.

/// The `long_task_secs` of a user layer that names none: a task that ran at least a
/// minute is worth a desktop notification when it ends.
pub const DEFAULT_LONG_TASK_SECS: u64 = 60;

/// The largest `long_task_secs`: a week, like the longest `ask.deadline_secs`.
pub const MAX_LONG_TASK_SECS: u64 = 7 * 86_400;

/// `notify.webhook`: where events are posted, and the environment variable holding
/// the secret they are signed with. Both are required: nothing is ever sent unsigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// An `http://` or `https://` URL, checked by [`check_webhook_url`]. It may hold
    /// a token (Discord's and Teams' do): it is never shown whole.
    pub url: String,
    /// The name of the environment variable `berth serve` reads the secret from.
    pub secret_env: String,
}

/// `notify.answerers`: who may answer a request from a chat platform, by the
/// platform's own user ids. Kept for the chat channels; nothing here reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answerers {
    /// Slack user ids (`U…`, `W…`).
    pub slack: Vec<String>,
    /// Lark open ids (`ou_…`).
    pub lark: Vec<String>,
}

/// The `notify` key of one layer, as written (absent keys `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NotifyLayer {
    pub desktop: Option<bool>,
    pub long_task_secs: Option<u64>,
    pub webhook: Option<Webhook>,
    pub slack: Option<String>,
    pub lark: Option<String>,
    pub answerers: Option<Answerers>,
}

impl NotifyLayer {
    /// Whether the layer sets nothing of `notify`.
    pub fn is_empty(&self) -> bool {
        *self == NotifyLayer::default()
    }
}

/// The notifications in force: the user layer's `notify` with its defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    /// Desktop notifications (the session bus on Linux, the notification center on
    /// macOS); on by default, off where there is no desktop to reach.
    pub desktop: bool,
    /// A finished task notifies on the desktop when it ran at least this long.
    pub long_task_secs: u64,
    pub webhook: Option<Webhook>,
    /// Your Slack user id, for the chat channels to mention you.
    pub slack: Option<String>,
    /// Your Lark open id, likewise.
    pub lark: Option<String>,
    pub answerers: Answerers,
}

impl Default for Notify {
    fn default() -> Notify {
        Notify {
            desktop: true,
            long_task_secs: DEFAULT_LONG_TASK_SECS,
            webhook: None,
            slack: None,
            lark: None,
            answerers: Answerers::default(),
        }
    }
}

impl Notify {
    /// Lays `layer` over what earlier layers set: each key it sets replaces the
    /// earlier value.
    pub fn apply(&mut self, layer: &NotifyLayer) {
        if let Some(on) = layer.desktop {
            self.desktop = on;
        }
        if let Some(secs) = layer.long_task_secs {
            self.long_task_secs = secs;
        }
        if let Some(hook) = &layer.webhook {
            self.webhook = Some(hook.clone());
        }
        if let Some(id) = &layer.slack {
            self.slack = Some(id.clone());
        }
        if let Some(id) = &layer.lark {
            self.lark = Some(id.clone());
        }
        if let Some(answerers) = &layer.answerers {
            self.answerers = answerers.clone();
        }
    }
}

/// How a usable webhook URL's events travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `https://`.
    Encrypted,
    /// `http://` to this machine.
    Loopback,
    /// `http://` to another machine: events cross the network in clear (a warning, not
    /// an error: a relay may sit on a trusted network).
    InClear,
}

/// How a webhook URL's events travel, or what is wrong with it, for the settings'
/// error (the words follow the key's name).
///
/// A URL is `http://` or `https://` (any case), a host, an optional port and path; no
/// credentials before the host (`user:pass@`: put a token in the path or query, as
/// ntfy, Discord and Teams do), no spaces or control characters.
pub fn check_webhook_url(url: &str) -> Result<Wire, String> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let (rest, plain) = if lower.starts_with("https://") {
        (&url[8..], false)
    } else if lower.starts_with("http://") {
        (&url[7..], true)
    } else {
        return Err(" must start with https:// (or http:// for a receiver on this machine)".into());
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(" holds a space or a control character".into());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            " holds credentials before the host (user@…); put a token in the path or query instead"
                .into(),
        );
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        return Err(" names no host".into());
    }
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.starts_with("127.") || host == "::1";
    Ok(match (plain, loopback) {
        (false, _) => Wire::Encrypted,
        (true, true) => Wire::Loopback,
        (true, false) => Wire::InClear,
    })
}

/// Whether `name` can name an environment variable `berth serve` reads: letters,
/// digits and `_`, not starting with a digit.
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `id` looks like a Slack user id: capital letters and digits (`U123ABC`).
pub fn is_slack_id(id: &str) -> bool {
    (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Whether `id` looks like a Lark open id: `ou_` and letters or digits.
pub fn is_lark_id(id: &str) -> bool {
    id.strip_prefix("ou_").is_some_and(|rest| {
        (1..=64).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls() {
        let cases: [(&str, Result<Wire, &str>); 11] = [
            ("https://ntfy.sh/berth-alerts", Ok(Wire::Encrypted)),
            (
                "HTTPS://discord.com/api/webhooks/1/abc",
                Ok(Wire::Encrypted),
            ),
            ("http://127.0.0.1:9000/hook", Ok(Wire::Loopback)),
            ("http://localhost/hook", Ok(Wire::Loopback)),
            ("http://[::1]:8080", Ok(Wire::Loopback)),
            ("http://relay.lan/hook", Ok(Wire::InClear)),
            (
                "ftp://x/y",
                Err(" must start with https:// (or http:// for a receiver on this machine)"),
            ),
            ("https://", Err(" names no host")),
            ("https://:443/x", Err(" names no host")),
            (
                "https://me:pw@host/x",
                Err(
                    " holds credentials before the host (user@…); put a token in the path or query instead",
                ),
            ),
            (
                "https://host/a b",
                Err(" holds a space or a control character"),
            ),
        ];
        for (url, want) in cases {
            assert_eq!(check_webhook_url(url), want.map_err(str::to_owned), "{url}");
        }
    }

    #[test]
    fn ids_and_names() {
        assert!(is_slack_id("U123ABC") && is_slack_id("W0"));
        assert!(!is_slack_id("u123") && !is_slack_id("") && !is_slack_id("U 1"));
        assert!(is_lark_id("ou_7d8a6e6df76215") && !is_lark_id("ou_") && !is_lark_id("on_1"));
        assert!(!is_lark_id("ou_a-b"));
        assert!(is_env_name("BERTH_WEBHOOK_SECRET") && is_env_name("_X1"));
        assert!(!is_env_name("1X") && !is_env_name("A=B") && !is_env_name(""));
    }

    #[test]
    fn a_later_layer_replaces_what_it_sets() {
        let mut notify = Notify::default();
        notify.apply(&NotifyLayer {
            desktop: Some(false),
            slack: Some("U1".into()),
            ..NotifyLayer::default()
        });
        notify.apply(&NotifyLayer {
            long_task_secs: Some(5),
            ..NotifyLayer::default()
        });
        assert_eq!(
            notify,
            Notify {
                desktop: false,
                long_task_secs: 5,
                slack: Some("U1".into()),
                ..Notify::default()
            }
        );
    }
}
