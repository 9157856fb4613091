//! Mending what was made by mistake, or is done with (issue 52): a session renamed,
//! archived or deleted (its owner's alone, see [`super::access`]), an agent edited or
//! removed (an admin's). Contract extensions: `PATCH|DELETE sessions/{id}`,
//! `PATCH|DELETE agents/{name}`.

use super::access::NamedSession;
use super::redact::Displays;
use super::state::Ctx;
use super::views::session_doc;
use crate::executor::AgentSpec;
use crate::http::{ApiError, JsonBody};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// `PATCH sessions/{id}`: a new title, archived or back. Contract extension.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionPatch {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub archived: Option<bool>,
}

pub(crate) async fn patch_session(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
    JsonBody(req): JsonBody<SessionPatch>,
) -> Result<Response, ApiError> {
    let row = ctx
        .app
        .store
        .change_session(
            id,
            crate::store::SessionChange {
                title: req.title,
                archived: req.archived,
            },
        )
        .await?;
    let shown = Displays::of(&ctx.app).of_row(&row);
    let doc = session_doc(ctx.surface, &shown, &row);
    Ok((Displays::shown_by(shown), Json(doc)).into_response())
}

/// The answer to `DELETE sessions/{id}`: the session as it was, and what went with it.
#[derive(Debug, Clone, Serialize)]
pub struct DeletedReply {
    pub session: super::views::SessionDoc,
    /// The ids of its tasks, deleted with it (their change records stay on the
    /// machines that ran them until `berth session delete` or pruning removes them).
    pub tasks: Vec<berth_core::TaskId>,
    /// How many transcript events went.
    pub events: i64,
}

/// `DELETE sessions/{id}`: refused while a task of it is queued or running
/// (`session_busy`). Contract extension.
pub(crate) async fn delete_session(
    State(ctx): State<Ctx>,
    NamedSession(id): NamedSession,
) -> Result<Response, ApiError> {
    let row = ctx.app.store.session(&id).await?;
    let shown = Displays::of(&ctx.app).of_row(&row);
    let session = session_doc(ctx.surface, &shown, &row);
    let deleted = ctx.app.store.delete_session(id).await?;
    let reply = DeletedReply {
        session,
        tasks: deleted.tasks,
        events: deleted.events,
    };
    Ok((Displays::shown_by(shown), Json(reply)).into_response())
}

/// `PATCH agents/{name}`: a new command or permissions (`null`: the default again).
/// Contract extension.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentPatch {
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Absent: unchanged; `null`: back to the user settings' default.
    #[serde(default, with = "double_option")]
    pub permissions: Option<Option<berth_core::Permissions>>,
}

/// An absent field and a `null` one, told apart.
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer, T: Serialize>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        v.as_ref().and_then(Option::as_ref).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

pub(crate) async fn edit_agent(
    State(ctx): State<Ctx>,
    axum::extract::Path(name): axum::extract::Path<String>,
    JsonBody(req): JsonBody<AgentPatch>,
) -> Result<Json<AgentSpec>, ApiError> {
    let spec = ctx
        .app
        .store
        .edit_agent(crate::store::AgentEdit {
            name,
            command: req.command,
            permissions: req.permissions,
        })
        .await?;
    Ok(Json(spec))
}

/// `DELETE agents/{name}`: refused while sessions name it (`agent_in_use`).
pub(crate) async fn remove_agent(
    State(ctx): State<Ctx>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Result<Json<AgentSpec>, ApiError> {
    Ok(Json(ctx.app.store.remove_agent(name).await?))
}
