//! What goes out to the chat platforms: their configuration, the pooled client (TLS,
//! keep-alive), Lark's tenant access token, and whose home and name no text may show.
//! One per server, shared by the answers posted back ([`super::reply`]) and the
//! requests' messages ([`super::cards`]).

use super::config::ChannelConfig;
use crate::net::HttpClient;
use crate::net::client::CallError;
use crate::store::{Store, StoreError};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long one call to a platform may take, retries included.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The chat platforms' side of the server.
#[derive(Debug)]
pub struct Outbound {
    pub store: Store,
    pub config: ChannelConfig,
    /// Whose home and name every text sent must never show (the display rule).
    pub display: Arc<berth_core::Context>,
    http: HttpClient,
    lark: LarkAuth,
}

/// Why a call to a platform gave nothing.
#[derive(Debug, thiserror::Error)]
pub enum OutError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Call(#[from] CallError),
    #[error(transparent)]
    Lark(#[from] LarkAuthError),
    #[error("{platform} refused {method}: {answer}")]
    Refused {
        platform: &'static str,
        method: &'static str,
        answer: Value,
    },
}

impl Outbound {
    pub fn new(
        store: Store,
        config: ChannelConfig,
        display: Arc<berth_core::Context>,
        http: HttpClient,
    ) -> Outbound {
        Outbound {
            store,
            config,
            display,
            http,
            lark: LarkAuth::default(),
        }
    }

    /// Calls Slack's Web API `method` with the bot token: its answer when `ok`;
    /// `None` without Slack or its bot token.
    pub async fn slack(
        &self,
        method: &'static str,
        body: &Value,
    ) -> Result<Option<Value>, OutError> {
        let Some((cfg, token)) = self
            .config
            .slack
            .as_ref()
            .and_then(|c| c.bot_token.as_ref().map(|t| (c, t)))
        else {
            return Ok(None);
        };
        let url = format!("{}/{method}", cfg.api_url);
        let answer = self
            .http
            .post_json(&url, Some(token.expose()), body, CALL_TIMEOUT)
            .await?;
        if answer.get("ok").and_then(Value::as_bool) != Some(true) {
            return Err(OutError::Refused {
                platform: "slack",
                method,
                answer,
            });
        }
        Ok(Some(answer))
    }

    /// Calls Lark's Open API (`path` under the API's URL; `name` in errors) with the
    /// tenant token: its answer when `code` is 0; `None` without Lark or the app's
    /// credentials. A refusal drops the token (fetched again next time).
    pub async fn lark(
        &self,
        method: hyper::Method,
        name: &'static str,
        path: &str,
        body: &Value,
    ) -> Result<Option<Value>, OutError> {
        let Some((cfg, (id, secret))) = self
            .config
            .lark
            .as_ref()
            .and_then(|c| c.app.as_ref().map(|a| (c, a)))
        else {
            return Ok(None);
        };
        let token = self
            .lark
            .token(&self.http, &cfg.api_url, id, secret.expose())
            .await?;
        let url = format!("{}/{path}", cfg.api_url);
        let answer = self
            .http
            .json_call(method, &url, Some(&token), body, CALL_TIMEOUT)
            .await?;
        if answer.get("code").and_then(Value::as_i64) != Some(0) {
            self.lark.forget().await;
            return Err(OutError::Refused {
                platform: "lark",
                method: name,
                answer,
            });
        }
        Ok(Some(answer))
    }
}

/// Lark's tenant access token, fetched when needed and kept until five minutes before
/// it expires; shared by what posts to Lark (answers, requests' cards).
#[derive(Debug, Default)]
struct LarkAuth {
    cached: tokio::sync::Mutex<Option<(String, Instant)>>,
}

/// Why Lark gave no tenant access token.
#[derive(Debug, thiserror::Error)]
pub enum LarkAuthError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("lark refused the app's credentials: {0}")]
    Refused(serde_json::Value),
}

impl LarkAuth {
    /// The token of app `id` (`secret`), from the cache or from Lark.
    async fn token(
        &self,
        http: &HttpClient,
        api_url: &str,
        id: &str,
        secret: &str,
    ) -> Result<String, LarkAuthError> {
        let mut cached = self.cached.lock().await;
        if let Some((token, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let url = format!("{api_url}/auth/v3/tenant_access_token/internal");
        let answer = http
            .post_json(
                &url,
                None,
                &json!({ "app_id": id, "app_secret": secret }),
                CALL_TIMEOUT,
            )
            .await?;
        let token = answer
            .get("tenant_access_token")
            .and_then(serde_json::Value::as_str)
            .filter(|_| answer.get("code").and_then(serde_json::Value::as_i64) == Some(0));
        let Some(token) = token else {
            return Err(LarkAuthError::Refused(answer));
        };
        let expire = answer
            .get("expire")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        // Fetch a new one five minutes before it expires.
        let until = Instant::now() + Duration::from_secs(expire.saturating_sub(300));
        *cached = Some((token.to_owned(), until));
        Ok(token.to_owned())
    }

    /// Drops the kept token (Lark refused a call with it).
    async fn forget(&self) {
        *self.cached.lock().await = None;
    }
}
