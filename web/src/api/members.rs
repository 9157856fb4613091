//! A team server's members (`berth-server` only): `POST|GET /api/v1/members`,
//! `DELETE /api/v1/members/{name}`, `POST /api/v1/members/{name}/token`,
//! `GET /api/v1/audit`, and `GET /api/v1/me` on every surface. Who may call them is
//! decided in [`super::access`]; these only do it.

use super::access::{AuditTarget, Caller};
use super::handlers::valid_name;
use super::state::Ctx;
use crate::http::{ApiError, JsonBody, QueryArgs};
use crate::secret::{new_token, token_hash};
use crate::store::{AuditRow, MemberChange, MemberRow};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};

/// `POST members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    pub name: String,
    #[serde(default)]
    pub admin: bool,
}

/// A member with their new API token: the only time it is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberToken {
    pub name: String,
    pub admin: bool,
    pub token: String,
}

/// `GET me`: who the server takes the caller for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Me {
    /// `null` on a single-user server (`berth serve`).
    pub member: Option<String>,
    pub admin: bool,
    pub via: String,
}

/// `GET audit?member=NAME`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuditQuery {
    pub member: Option<String>,
}

fn new_member_token() -> Result<String, ApiError> {
    new_token()
        .map(|t| format!("berthm_{t}"))
        .map_err(|e| ApiError::Internal(format!("cannot make a token: {e}")))
}

pub(crate) async fn me(caller: Option<Extension<Caller>>, State(ctx): State<Ctx>) -> Json<Me> {
    Json(match caller.map(|Extension(c)| c) {
        Some(Caller::Member { name, admin, via }) => Me {
            member: Some(name.to_string()),
            admin,
            via,
        },
        Some(Caller::Local) | None => Me {
            member: None,
            admin: true,
            via: ctx.surface.as_str().to_owned(),
        },
    })
}

pub(crate) async fn add(
    State(ctx): State<Ctx>,
    JsonBody(req): JsonBody<NewMember>,
) -> Result<Response, ApiError> {
    valid_name("the member", &req.name)?;
    let token = new_member_token()?;
    match ctx
        .app
        .store
        .add_member(req.name.clone(), req.admin, token_hash(&token))
        .await?
    {
        MemberChange::Done(row) => {
            let mut resp = (
                StatusCode::CREATED,
                Json(MemberToken {
                    name: row.name.clone(),
                    admin: row.admin,
                    token,
                }),
            )
                .into_response();
            resp.extensions_mut().insert(AuditTarget(row.name));
            Ok(resp)
        }
        MemberChange::Exists => Err(ApiError::MemberExists { name: req.name }),
        MemberChange::Unknown | MemberChange::Protected => {
            Err(ApiError::Internal("the new member was not stored".into()))
        }
    }
}

pub(crate) async fn list(State(ctx): State<Ctx>) -> Result<Json<Vec<MemberRow>>, ApiError> {
    Ok(Json(ctx.app.store.members().await?))
}

pub(crate) async fn remove(
    State(ctx): State<Ctx>,
    Path(name): Path<String>,
) -> Result<Json<MemberRow>, ApiError> {
    match ctx.app.daemons.remove_member(name.clone()).await? {
        MemberChange::Done(row) => Ok(Json(row)),
        MemberChange::Unknown | MemberChange::Exists => Err(ApiError::UnknownMember { name }),
        MemberChange::Protected => Err(ApiError::MemberProtected { name }),
    }
}

pub(crate) async fn rotate(
    State(ctx): State<Ctx>,
    Path(name): Path<String>,
) -> Result<Json<MemberToken>, ApiError> {
    let token = new_member_token()?;
    match ctx
        .app
        .store
        .rotate_member_token(name.clone(), token_hash(&token))
        .await?
    {
        MemberChange::Done(row) => Ok(Json(MemberToken {
            name: row.name,
            admin: row.admin,
            token,
        })),
        MemberChange::Unknown | MemberChange::Exists => Err(ApiError::UnknownMember { name }),
        MemberChange::Protected => Err(ApiError::MemberProtected { name }),
    }
}

pub(crate) async fn audit(
    State(ctx): State<Ctx>,
    QueryArgs(q): QueryArgs<AuditQuery>,
) -> Result<Json<Vec<AuditRow>>, ApiError> {
    Ok(Json(ctx.app.store.audit_trail(q.member).await?))
}
