//! Approvals over the API: what waits for a person, and their answers.
//!
//! - `GET approvals[?all=true]`: the requests that wait (with `all`, recent decided
//!   ones too), in the caller's sessions (every session for the local user and, to
//!   read, an admin).
//! - `POST approvals/{id}` `{"decision": "allow"|"deny", "always", "reason", "via"}`:
//!   a person's answer. Only the session's owner answers: another member hears
//!   `unknown_approval` (404), an admin `owner_only` (403).
//! - `GET sessions/{id}/rules`, `DELETE sessions/{id}/rules/{n}`: the rules "always"
//!   made.

use super::access::{Caller, NamedSession, Scope};
use super::state::Ctx;
use crate::http::{ApiError, JsonBody, QueryArgs};
use crate::scheduler::HumanAnswer;
use crate::store::StoreError;
use axum::Json;
use axum::extract::{Path, State};
use berth_core::ErrorCode;
use berth_core::approval::{Approval, SessionRule, Verdict};
use serde::{Deserialize, Serialize};

/// `GET approvals?all=true`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ApprovalQuery {
    #[serde(default)]
    pub all: bool,
}

/// `GET approvals`' answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalList {
    pub approvals: Vec<Approval>,
}

/// `POST approvals/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    pub decision: Verdict,
    #[serde(default)]
    pub always: bool,
    #[serde(default)]
    pub reason: Option<String>,
    /// Where the person answered: `cli`, `chat`, … (`api` when absent).
    #[serde(default)]
    pub via: Option<String>,
}

/// `GET sessions/{id}/rules`' answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleList {
    pub rules: Vec<SessionRule>,
}

pub(crate) async fn list(
    State(ctx): State<Ctx>,
    scope: Option<axum::Extension<Scope>>,
    QueryArgs(q): QueryArgs<ApprovalQuery>,
) -> Result<Json<ApprovalList>, ApiError> {
    let owner = scope.and_then(|axum::Extension(s)| s.0);
    let approvals = ctx.app.store.approvals(owner, q.all).await?;
    Ok(Json(ApprovalList { approvals }))
}

/// The words a surface may name itself by (anything else is `api`).
fn via(claimed: Option<&str>) -> String {
    const KNOWN: [&str; 6] = ["cli", "chat", "api", "web", "slack", "lark"];
    claimed
        .filter(|v| KNOWN.contains(v))
        .unwrap_or("api")
        .to_owned()
}

pub(crate) async fn answer(
    State(ctx): State<Ctx>,
    caller: Option<axum::Extension<Caller>>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<AnswerRequest>,
) -> Result<Json<Approval>, ApiError> {
    let caller = caller.map_or(Caller::Local, |axum::Extension(c)| c);
    let (owner, who, admin) = match &caller {
        Caller::Local => (None, None, false),
        Caller::Member { name, admin, via } => (
            Some(name.clone()),
            Some(name.to_string()),
            *admin && !via.starts_with("machine "),
        ),
    };
    if req.reason.as_ref().is_some_and(|r| r.len() > 4096) {
        return Err(ApiError::BadRequest {
            message: "\"reason\" is longer than 4096 bytes".to_owned(),
        });
    }
    let human = HumanAnswer {
        verdict: req.decision,
        always: req.always,
        reason: req.reason.filter(|r| !r.trim().is_empty()),
        who,
        via: via(req.via.as_deref()),
    };
    match ctx.app.scheduler.answer(&id, owner.clone(), human).await {
        Ok(a) => Ok(Json(a)),
        // An admin reads every session, but answers only for their own: say so when
        // the request exists in another member's session.
        Err(StoreError::Approval {
            code: ErrorCode::UnknownApproval,
            message,
        }) if admin => {
            let theirs = ctx.app.store.approvals(None, true).await?;
            match theirs.iter().find(|a| a.id == id) {
                Some(a) => {
                    let s = ctx.app.store.session(&a.session_id).await?;
                    Err(ApiError::OwnerOnly {
                        owner: s.owner.unwrap_or_else(|| String::from("another member")),
                        what: "answer its agent's requests",
                    })
                }
                None => Err(StoreError::Approval {
                    code: ErrorCode::UnknownApproval,
                    message,
                }
                .into()),
            }
        }
        Err(e) => Err(e.into()),
    }
}

pub(crate) async fn rules(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
) -> Result<Json<RuleList>, ApiError> {
    Ok(Json(RuleList {
        rules: ctx.app.store.session_rules(&id).await?,
    }))
}

pub(crate) async fn remove_rule(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
    Path((_, n)): Path<(String, i64)>,
) -> Result<Json<SessionRule>, ApiError> {
    Ok(Json(ctx.app.store.remove_session_rule(&id, n).await?))
}
