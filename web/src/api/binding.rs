//! The binding routes (`local-binding` only): every directory is validated natively
//! by the executor before anything is stored, and its refusal code surfaces unchanged.

use super::access::NamedSession;
use super::daemons::Via;
use super::state::Ctx;
use super::views::{SessionDoc, session_doc};
use crate::executor::ValidatedDir;
use crate::http::{ApiError, JsonBody, refusal_status};
use crate::store::{ProjectDirRow, ProjectRow, StoredBinding};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use berth_core::api::{CheckReport, ErrorDetail, LinkRequest};
use berth_core::binding::{BindMode, BindingState};
use berth_core::{ErrorCode, Refusal};
use serde::{Deserialize, Serialize};

/// `POST check`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    pub dir: String,
}

/// `PUT projects/{name}/dir`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectDirRequest {
    pub dir: String,
    #[serde(default)]
    pub mode: Option<BindMode>,
}

/// The answer to `POST check`: the check report, plus the contract's `error` object
/// when refused (so clients reading either shape understand it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReply {
    #[serde(flatten)]
    pub report: CheckReport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// Runs the executor's native validation off the async threads.
async fn validate(ctx: &Ctx, dir: String) -> Result<Result<ValidatedDir, Refusal>, ApiError> {
    let exec = ctx
        .app
        .scheduler
        .executor()
        .cloned()
        .ok_or(ApiError::NoExecutor)?;
    tokio::task::spawn_blocking(move || exec.validate(&dir))
        .await
        .map_err(|e| ApiError::Internal(format!("validation failed: {e}")))
}

/// A validated binding, ready to store: on the machine of the daemon that forwarded
/// the request (validated there, natively), else on this server's executor.
pub(crate) async fn validated(
    ctx: &Ctx,
    via: Option<&Via>,
    dir: String,
    mode: BindMode,
) -> Result<StoredBinding, ApiError> {
    if let Some(via) = via {
        let v = via
            .validated
            .as_ref()
            .filter(|v| v.dir == dir)
            .ok_or_else(|| ApiError::BadRequest {
                message: format!(
                    "{dir} was not validated on machine {}: bind directories with the berth CLI \
                     on that machine, which validates them there",
                    via.name
                ),
            })?;
        return Ok(StoredBinding {
            dir: v.canonical.clone(),
            display: v.display.clone(),
            identity: Some(crate::executor::DirIdentity {
                dev: v.dev,
                ino: v.ino,
            }),
            machine: via.machine.clone(),
            machine_name: via.name.clone(),
            mode,
            state: BindingState::Ok,
        });
    }
    let v = validate(ctx, dir).await??;
    if mode == BindMode::InPlace
        && let Some(exec) = ctx.app.scheduler.executor()
    {
        exec.warm(&v);
    }
    let (machine, machine_name) = ctx
        .app
        .scheduler
        .executor()
        .map(|e| e.machine())
        .ok_or(ApiError::NoExecutor)?;
    Ok(StoredBinding {
        dir: v.canonical.as_str().to_owned(),
        display: v.display,
        identity: Some(v.identity),
        machine,
        machine_name,
        mode,
        state: BindingState::Ok,
    })
}

pub(crate) async fn check(
    State(ctx): State<Ctx>,
    via: Option<Extension<Via>>,
    JsonBody(req): JsonBody<CheckRequest>,
) -> Result<Response, ApiError> {
    if let Some(Extension(via)) = via {
        return Err(ApiError::BadRequest {
            message: format!(
                "{} is checked on machine {}, by its daemon, not by the server",
                req.dir, via.name
            ),
        });
    }
    Ok(match validate(&ctx, req.dir).await? {
        Ok(v) => Json(CheckReply {
            report: CheckReport::accepted(v.canonical.as_str().to_owned(), v.display),
            error: None,
        })
        .into_response(),
        Err(r) => (
            refusal_status(r.code),
            Json(CheckReply {
                report: CheckReport::refused(&r, None, None),
                error: Some(berth_core::api::ErrorBody::from(&r).error),
            }),
        )
            .into_response(),
    })
}

pub(crate) async fn link(
    State(ctx): State<Ctx>,
    via: Option<Extension<Via>>,
    NamedSession(id): NamedSession,
    JsonBody(req): JsonBody<LinkRequest>,
) -> Result<Json<SessionDoc>, ApiError> {
    let session = ctx.app.store.session(&id).await?;
    if !session.origin.may_reach_local_paths() {
        return Err(Refusal::new(
            ErrorCode::OriginCannotBind,
            format!(
                "session {} came from a {} surface, which never reaches a local directory",
                session.id,
                session.origin.as_str()
            ),
            "create a session with `berth session new --dir PATH` to work in a directory",
        )
        .into());
    }
    let via = via.map(|Extension(v)| v);
    let binding = validated(&ctx, via.as_ref(), req.dir, req.mode.unwrap_or_default()).await?;
    // The same path holding another directory (replaced since) is a change: linking
    // again is how the user accepts the new directory.
    let unchanged = session.binding.as_ref().is_some_and(|b| {
        b.dir == binding.dir
            && b.mode == binding.mode
            && b.machine == binding.machine
            && b.identity == binding.identity
    });
    let row = if unchanged
        && session
            .binding
            .as_ref()
            .is_some_and(|b| b.state == BindingState::Ok)
    {
        session
    } else {
        ctx.app.store.set_binding(session.id, Some(binding)).await?
    };
    Ok(Json(session_doc(ctx.surface, &ctx.app.display, &row)))
}

pub(crate) async fn unlink(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
) -> Result<Json<SessionDoc>, ApiError> {
    let session = ctx.app.store.session(&id).await?;
    let row = if session.binding.is_none() {
        session
    } else {
        ctx.app.store.set_binding(session.id, None).await?
    };
    Ok(Json(session_doc(ctx.surface, &ctx.app.display, &row)))
}

pub(crate) async fn set_project_dir(
    State(ctx): State<Ctx>,
    via: Option<Extension<Via>>,
    Path(name): Path<String>,
    JsonBody(req): JsonBody<ProjectDirRequest>,
) -> Result<(StatusCode, Json<ProjectRow>), ApiError> {
    let via = via.map(|Extension(v)| v);
    let b = validated(&ctx, via.as_ref(), req.dir, req.mode.unwrap_or_default()).await?;
    let row = ctx
        .app
        .store
        .set_project_dir(
            name,
            ProjectDirRow {
                machine: b.machine,
                dir: b.dir,
                display: b.display,
                mode: b.mode,
            },
        )
        .await?;
    Ok((StatusCode::OK, Json(row)))
}

/// A look at the directories bound on this server's own machine, for the web
/// listener's session documents: the state recorded is what the last run found, and a
/// directory deleted or replaced since shows only at the next run, unless looked at.
#[derive(Clone)]
pub(crate) struct Look {
    exec: std::sync::Arc<dyn crate::executor::Executor>,
    here: berth_core::binding::MachineId,
}

impl Look {
    /// The look of this server's executor; `None` without one.
    pub(crate) fn of(ctx: &Ctx) -> Option<Look> {
        let exec = ctx.app.scheduler.executor()?.clone();
        let here = exec.machine().0;
        Some(Look { exec, here })
    }

    /// The state to show of a binding of `dir` on `machine`, recorded as `recorded`:
    /// `missing` or `changed` when its directory on this machine is gone or replaced
    /// now. A binding on another machine is shown as recorded (its path means nothing
    /// here). Blocking: one `stat` and a path resolution.
    pub(crate) fn state(
        &self,
        machine: &str,
        dir: &str,
        identity: Option<crate::executor::DirIdentity>,
        recorded: BindingState,
    ) -> BindingState {
        match recorded {
            BindingState::Missing | BindingState::Changed | BindingState::MachineOffline => {
                recorded
            }
            BindingState::Ok | BindingState::WaitingLock if machine == self.here.as_str() => {
                self.exec.look(dir, identity).unwrap_or(recorded)
            }
            BindingState::Ok | BindingState::WaitingLock => recorded,
        }
    }
}
