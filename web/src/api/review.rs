//! `GET tasks/{id}/diff`: the lines a task changed, as the machine it ran on sent them
//! with its end ([`berth_core::patch`]), for whoever may read the task. Unified text by
//! default, JSON per file with `?format=json`. On the web listener the text goes
//! through the display rule like every answer ([`super::redact`]); undo stays with the
//! machine that ran it.

use super::access::NamedTask;
use super::handlers::session_display;
use super::redact::Displays;
use super::state::{Ctx, Surface};
use crate::http::{ApiError, QueryArgs};
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use berth_core::patch::{DiffDoc, whole_command};
use serde::Deserialize;

/// `?format=`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DiffFormat {
    /// Git's unified text, with a line where anything was cut.
    #[default]
    Unified,
    /// [`DiffDoc`].
    Json,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct DiffQuery {
    #[serde(default)]
    pub format: DiffFormat,
}

pub(crate) async fn task_diff(
    State(ctx): State<Ctx>,
    NamedTask(id): NamedTask,
    QueryArgs(q): QueryArgs<DiffQuery>,
) -> Result<Response, ApiError> {
    let row = ctx.app.store.task(&id).await?;
    let shown = session_display(&ctx, &row.session_id).await?;
    let diff = ctx.app.store.task_diff(&id).await?.unwrap_or_default();
    // The control socket keeps the real text; the web listener's layer and
    // `berth-server`'s answers show it by the machine it came from.
    let strip = ctx.surface != Surface::Control;
    let answer = match q.format {
        DiffFormat::Json => {
            let mut doc = serde_json::to_value(DiffDoc::new(id.as_str(), diff))
                .map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
            if strip {
                berth_core::display::redact_json(&shown, &mut doc);
            }
            Json(doc).into_response()
        }
        DiffFormat::Unified => {
            let text = diff.unified(&whole_command(id.as_str()));
            let text = if strip {
                berth_core::display::redact_text(&shown, &text).into_owned()
            } else {
                text
            };
            ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
        }
    };
    Ok((Displays::shown_by(shown), answer).into_response())
}
