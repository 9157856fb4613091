//! Where the channels' secrets come from: the environment first, then the `channels`
//! map of the user settings. Never from a request.

use std::collections::BTreeMap;
use std::fmt;

/// Slack's Web API, unless `BERTH_SLACK_API_URL` says otherwise.
pub const SLACK_API_URL: &str = "https://slack.com/api";
/// Lark's (Feishu's) Open API, unless `BERTH_LARK_API_URL` says otherwise.
pub const LARK_API_URL: &str = "https://open.feishu.cn/open-apis";

/// A secret: compared and used, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Slack: present only when the signing secret is set (nothing unsigned is processed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackConfig {
    pub signing_secret: Secret,
    /// `None`: messages are taken in, but no answer is posted back.
    pub bot_token: Option<Secret>,
    pub api_url: String,
}

/// Lark: present only when the verification token or the encrypt key is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LarkConfig {
    pub verification_token: Option<Secret>,
    /// Set: payloads may be AES-256-CBC encrypted and events must be signed.
    pub encrypt_key: Option<Secret>,
    /// Both set: answers are posted back with a tenant access token.
    pub app: Option<(String, Secret)>,
    pub api_url: String,
}

/// The chat channels' configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelConfig {
    pub slack: Option<SlackConfig>,
    pub lark: Option<LarkConfig>,
    /// The agent of new channel sessions (`None`: the only registered agent).
    pub agent: Option<String>,
    /// On a team server, the member channel sessions belong to
    /// (`BERTH_CHANNEL_MEMBER`; `berth-server` defaults it to the first admin).
    pub member: Option<String>,
    /// Where requests of the `ask` policy go on the platforms, and who else may answer
    /// them (the user settings' `notify`; `berth serve` only).
    pub asks: AskRouting,
}

/// Requests on the chat platforms (issue 55): a desktop session's go to the user named
/// here as a direct message; the user who started a channel session's thread answers
/// its requests, and so do the answerers named here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AskRouting {
    /// `notify.slack`: a Slack user id (`U…`).
    pub slack_user: Option<String>,
    /// `notify.lark`: a Lark open id (`ou_…`).
    pub lark_user: Option<String>,
    /// `notify.answerers.slack`.
    pub slack_answerers: Vec<String>,
    /// `notify.answerers.lark`.
    pub lark_answerers: Vec<String>,
}

impl ChannelConfig {
    /// Reads `BERTH_SLACK_SIGNING_SECRET`, `BERTH_SLACK_BOT_TOKEN`,
    /// `BERTH_SLACK_API_URL`, `BERTH_LARK_VERIFICATION_TOKEN`, `BERTH_LARK_ENCRYPT_KEY`,
    /// `BERTH_LARK_APP_ID`, `BERTH_LARK_APP_SECRET`, `BERTH_LARK_API_URL` and
    /// `BERTH_CHANNEL_AGENT` from the environment; each one unset (or empty) falls back
    /// to `settings` (the user settings' `channels` map) under its lower-case name
    /// without `BERTH_`, e.g. `slack_signing_secret`.
    pub fn from_env(settings: &BTreeMap<String, String>) -> ChannelConfig {
        ChannelConfig::from_lookup(|name| std::env::var(name).ok(), settings)
    }

    /// [`ChannelConfig::from_env`] with another environment.
    pub fn from_lookup(
        env: impl Fn(&str) -> Option<String>,
        settings: &BTreeMap<String, String>,
    ) -> ChannelConfig {
        let get = |name: &str| -> Option<String> {
            let key = name
                .strip_prefix("BERTH_")
                .unwrap_or(name)
                .to_ascii_lowercase();
            env(name)
                .filter(|v| !v.trim().is_empty())
                .or_else(|| settings.get(&key).cloned())
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let slack = get("BERTH_SLACK_SIGNING_SECRET").map(|s| SlackConfig {
            signing_secret: Secret::new(s),
            bot_token: get("BERTH_SLACK_BOT_TOKEN").map(Secret::new),
            api_url: base_url(get("BERTH_SLACK_API_URL"), SLACK_API_URL),
        });
        let verification_token = get("BERTH_LARK_VERIFICATION_TOKEN").map(Secret::new);
        let encrypt_key = get("BERTH_LARK_ENCRYPT_KEY").map(Secret::new);
        let lark = (verification_token.is_some() || encrypt_key.is_some()).then(|| LarkConfig {
            verification_token,
            encrypt_key,
            app: get("BERTH_LARK_APP_ID")
                .zip(get("BERTH_LARK_APP_SECRET"))
                .map(|(id, secret)| (id, Secret::new(secret))),
            api_url: base_url(get("BERTH_LARK_API_URL"), LARK_API_URL),
        });
        ChannelConfig {
            slack,
            lark,
            agent: get("BERTH_CHANNEL_AGENT"),
            member: get("BERTH_CHANNEL_MEMBER"),
            asks: AskRouting::default(),
        }
    }

    /// What an operator should know at startup: answers that cannot be posted back.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(s) = &self.slack {
            if s.bot_token.is_none() {
                out.push(
                    "Slack: BERTH_SLACK_BOT_TOKEN is not set; messages are taken in but no \
                     answer is posted back"
                        .to_owned(),
                );
            } else if let Err(e) = http_base(&s.api_url) {
                out.push(format!("Slack: BERTH_SLACK_API_URL: {e}"));
            }
        }
        if let Some(l) = &self.lark {
            if l.app.is_none() {
                out.push(
                    "Lark: BERTH_LARK_APP_ID and BERTH_LARK_APP_SECRET are not both set; \
                     messages are taken in but no answer is posted back"
                        .to_owned(),
                );
            } else if let Err(e) = http_base(&l.api_url) {
                out.push(format!("Lark: BERTH_LARK_API_URL: {e}"));
            }
        }
        out
    }
}

fn base_url(value: Option<String>, default: &str) -> String {
    value
        .unwrap_or_else(|| default.to_owned())
        .trim_end_matches('/')
        .to_owned()
}

/// Checks that an API base URL is plain HTTP, the only scheme Berth can reach.
/// Whether `url` is an API base Berth can post to: `https://` (verified against the
/// system's roots and `BERTH_CA_FILE`), or `http://` (a local proxy or a test fake).
pub(crate) fn http_base(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") || lower.starts_with("http://") {
        Ok(())
    } else {
        Err(format!(
            "{url} is not an https:// URL; answers will not be posted"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn environment_wins_and_settings_fill_in() {
        let env = map(&[
            ("BERTH_SLACK_SIGNING_SECRET", "env-secret"),
            ("BERTH_SLACK_API_URL", "http://127.0.0.1:9/api/"),
            ("BERTH_CHANNEL_AGENT", " "),
        ]);
        let settings = map(&[
            ("slack_signing_secret", "settings-secret"),
            ("slack_bot_token", "xoxb-1"),
            ("lark_encrypt_key", "k"),
            ("channel_agent", "claude"),
        ]);
        let c = ChannelConfig::from_lookup(|n| env.get(n).cloned(), &settings);
        assert_eq!(
            c,
            ChannelConfig {
                slack: Some(SlackConfig {
                    signing_secret: Secret::new("env-secret"),
                    bot_token: Some(Secret::new("xoxb-1")),
                    api_url: "http://127.0.0.1:9/api".into(),
                }),
                lark: Some(LarkConfig {
                    verification_token: None,
                    encrypt_key: Some(Secret::new("k")),
                    app: None,
                    api_url: LARK_API_URL.into(),
                }),
                agent: Some("claude".into()),
                member: None,
                asks: Default::default(),
            }
        );
        assert_eq!(
            c.warnings(),
            vec![
                "Lark: BERTH_LARK_APP_ID and BERTH_LARK_APP_SECRET are not both set; messages \
                 are taken in but no answer is posted back"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn nothing_set_configures_nothing() {
        let c = ChannelConfig::from_lookup(|_| None, &BTreeMap::new());
        assert_eq!(c, ChannelConfig::default());
        assert!(c.warnings().is_empty());
    }

    #[test]
    fn the_default_https_api_urls_need_no_warning() {
        let settings = map(&[("slack_signing_secret", "s"), ("slack_bot_token", "t")]);
        let c = ChannelConfig::from_lookup(|_| None, &settings);
        assert_eq!(
            c.slack.as_ref().map(|s| s.api_url.as_str()),
            Some(SLACK_API_URL)
        );
        assert_eq!(c.warnings(), Vec::<String>::new());
        let settings = map(&[
            ("slack_signing_secret", "s"),
            ("slack_bot_token", "t"),
            ("slack_api_url", "ftp://x"),
        ]);
        let w = ChannelConfig::from_lookup(|_| None, &settings).warnings();
        assert_eq!(
            w,
            [
                "Slack: BERTH_SLACK_API_URL: ftp://x is not an https:// URL; answers will not be posted"
            ]
        );
    }

    #[test]
    fn secrets_do_not_print() {
        assert_eq!(format!("{:?}", Secret::new("xoxb-hidden")), "Secret(..)");
    }
}
