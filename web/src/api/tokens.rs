//! The daemon tokens of the control API: `POST|GET /api/v1/daemon/tokens` and
//! `DELETE /api/v1/daemon/tokens/{name}`. A member makes and sees their own tokens, an
//! admin (or the local user) anyone's; none of them is reachable through a daemon.

use super::access::{AuditTarget, Caller};
use super::daemons::Via;
use super::handlers::valid_name;
use super::state::Ctx;
use crate::daemon::wire::{self, CreatedToken, NewToken, TokenInfo};
use crate::http::{ApiError, JsonBody};
use crate::store::TokenChange;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

fn not_through_daemon(via: Option<&axum::Extension<Via>>) -> Result<(), ApiError> {
    match via {
        Some(_) => Err(ApiError::NoRoute {
            path: wire::TOKENS.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The member a token change is for, and whether the caller may make it: a member
/// for themselves, an admin for anyone (who must exist), the local user as asked.
async fn token_member(
    ctx: &Ctx,
    caller: Option<&axum::Extension<Caller>>,
    asked: Option<String>,
) -> Result<Option<String>, ApiError> {
    let member = match (caller.map(|axum::Extension(c)| c), asked) {
        (Some(Caller::Member { name, .. }), None) => return Ok(Some(name.to_string())),
        (Some(Caller::Member { name, admin, .. }), Some(m)) => {
            if m != name.as_str() && !*admin {
                return Err(ApiError::AdminOnly {
                    what: "make a daemon token for another member",
                });
            }
            m
        }
        (Some(Caller::Local) | None, asked) => match asked {
            None => return Ok(None),
            Some(m) => m,
        },
    };
    match ctx.app.store.member(member.clone()).await? {
        Some(_) => Ok(Some(member)),
        None => Err(ApiError::UnknownMember { name: member }),
    }
}

/// Whether a token is one the caller may see and revoke: their own, or any for an
/// admin or the local user.
fn token_visible(caller: Option<&axum::Extension<Caller>>, member: Option<&str>) -> bool {
    match caller.map(|axum::Extension(c)| c) {
        Some(Caller::Member {
            name, admin: false, ..
        }) => member == Some(name.as_str()),
        Some(Caller::Member { admin: true, .. } | Caller::Local) | None => true,
    }
}

pub(super) async fn create(
    State(ctx): State<Ctx>,
    via: Option<axum::Extension<Via>>,
    caller: Option<axum::Extension<Caller>>,
    JsonBody(req): JsonBody<NewToken>,
) -> Result<Response, ApiError> {
    not_through_daemon(via.as_ref())?;
    valid_name("the token", &req.name)?;
    let member = token_member(&ctx, caller.as_ref(), req.member.clone()).await?;
    match ctx
        .app
        .daemons
        .create_token(req.name.clone(), member)
        .await?
    {
        TokenChange::Done((row, token)) => {
            let mut resp = (
                StatusCode::CREATED,
                Json(CreatedToken {
                    name: row.name.clone(),
                    token,
                    created_at: row.created_at,
                }),
            )
                .into_response();
            resp.extensions_mut().insert(AuditTarget(row.name));
            Ok(resp)
        }
        TokenChange::Exists | TokenChange::OtherMachine(_) => {
            Err(ApiError::TokenExists { name: req.name })
        }
        TokenChange::Unknown => Err(ApiError::Internal("the new token was not stored".into())),
    }
}

pub(super) async fn list(
    State(ctx): State<Ctx>,
    via: Option<axum::Extension<Via>>,
    caller: Option<axum::Extension<Caller>>,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    not_through_daemon(via.as_ref())?;
    let mut tokens = ctx.app.daemons.token_infos().await?;
    tokens.retain(|t| token_visible(caller.as_ref(), t.member.as_deref()));
    Ok(Json(tokens))
}

pub(super) async fn revoke(
    State(ctx): State<Ctx>,
    via: Option<axum::Extension<Via>>,
    caller: Option<axum::Extension<Caller>>,
    Path(name): Path<String>,
) -> Result<Json<TokenInfo>, ApiError> {
    not_through_daemon(via.as_ref())?;
    let infos = ctx.app.daemons.token_infos().await?;
    let mine = infos
        .iter()
        .find(|t| t.name == name)
        .is_some_and(|t| token_visible(caller.as_ref(), t.member.as_deref()));
    if !mine {
        return Err(ApiError::UnknownToken { name });
    }
    match ctx.app.daemons.revoke_token(name.clone()).await? {
        TokenChange::Done(_) => ctx
            .app
            .daemons
            .token_infos()
            .await?
            .into_iter()
            .find(|t| t.name == name)
            .map(Json)
            .ok_or(ApiError::UnknownToken { name }),
        TokenChange::Unknown | TokenChange::Exists | TokenChange::OtherMachine(_) => {
            Err(ApiError::UnknownToken { name })
        }
    }
}
