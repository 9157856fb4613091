//! `GET usage` and `GET sessions/{id}/usage`: token usage added up by the store.
//! Whose tasks count is [`super::access`]'s decision: a member's own sessions, all of
//! them for the local user and an admin.

use super::access::{NamedSession, Scope};
use super::state::Ctx;
use crate::http::{ApiError, QueryArgs};
use crate::store::UsageQuery;
use axum::Json;
use axum::extract::State;
use berth_core::usage::{BY_HINT, SINCE_HINT, UsageBy, UsageReport, UsageTotals};
use serde::Deserialize;

/// `GET usage?since=DATE&by=agent|session|day`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UsageArgs {
    #[serde(default)]
    pub since: Option<String>,
    #[serde(default)]
    pub by: Option<String>,
}

/// `since` as the store compares it, or the refusal.
pub fn since(s: &str) -> Result<String, ApiError> {
    berth_core::usage::since(s).ok_or_else(|| ApiError::BadValue {
        message: format!("since {s:?} is not a date"),
        hint: SINCE_HINT.to_owned(),
    })
}

/// `by`, or the refusal.
pub fn by(s: &str) -> Result<UsageBy, ApiError> {
    UsageBy::parse(s).ok_or_else(|| ApiError::BadValue {
        message: format!("by {s:?} is not a grouping of usage"),
        hint: BY_HINT.to_owned(),
    })
}

/// The caller's tasks' usage (an admin's and the local user's: everyone's), since a
/// time, grouped (by agent unless `by` says otherwise), and all of it.
pub(crate) async fn report(
    State(ctx): State<Ctx>,
    scope: Option<axum::Extension<Scope>>,
    QueryArgs(q): QueryArgs<UsageArgs>,
) -> Result<Json<UsageReport>, ApiError> {
    let since = q.since.as_deref().map(since).transpose()?;
    let by =
        q.by.as_deref()
            .map(by)
            .transpose()?
            .unwrap_or(UsageBy::Agent);
    let sums = ctx
        .app
        .store
        .usage(UsageQuery {
            owner: scope.and_then(|axum::Extension(s)| s.0),
            session: None,
            since: since.clone(),
            by: Some(by),
        })
        .await?;
    Ok(Json(UsageReport {
        since,
        by,
        groups: sums.groups,
        total: sums.total,
    }))
}

/// One session's tasks' usage, all of it.
pub(crate) async fn session(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
) -> Result<Json<UsageTotals>, ApiError> {
    let sums = ctx
        .app
        .store
        .usage(UsageQuery {
            session: Some(id),
            ..UsageQuery::default()
        })
        .await?;
    Ok(Json(sums.total))
}
