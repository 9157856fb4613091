//! The documents each surface returns.

use super::Surface;
use crate::store::{SessionRow, TaskRow};
use berth_core::api::{Session, Task};
use berth_core::resolve::Origin;
use berth_core::{Context, LocalPath};
use serde::Serialize;

/// A session as the web listener shows it: the contract's session document without
/// any real path (see the module docs of [`crate::api`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebSession {
    pub id: String,
    pub title: String,
    pub agent: String,
    pub origin: Origin,
    pub project: Option<String>,
    /// The display form of where the last run worked.
    pub work_dir: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// The binding's read view: display, machine, mode, state; never `dir`.
    #[cfg(feature = "local-binding")]
    pub binding: Option<berth_core::binding::BindingView>,
}

/// The privacy-stripped form of a path the server recorded; a text that is not an
/// absolute path is not shown at all.
pub fn strip_path(ctx: &Context, path: &str) -> Option<String> {
    LocalPath::parse(ctx.platform, path)
        .ok()
        .map(|p| berth_core::display::display(ctx, &p))
}

/// A session document for `surface`.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum SessionDoc {
    Full(Session),
    Web(WebSession),
}

pub(crate) fn session_doc(surface: Surface, ctx: &Context, row: &SessionRow) -> SessionDoc {
    match surface {
        Surface::Control | Surface::Cloud => SessionDoc::Full(row.to_api()),
        Surface::Web => SessionDoc::Web(WebSession {
            id: row.id.clone(),
            title: row.title.clone(),
            agent: row.agent.clone(),
            origin: row.origin,
            project: row.project.clone(),
            work_dir: row
                .work_dir_display
                .clone()
                .or_else(|| row.work_dir.as_deref().and_then(|p| strip_path(ctx, p))),
            created_at: row.created_at.clone(),
            updated_at: row.updated_at.clone(),
            #[cfg(feature = "local-binding")]
            binding: row.binding_view(),
        }),
    }
}

pub(crate) fn task_doc(surface: Surface, ctx: &Context, row: &TaskRow) -> Task {
    let mut task = row.to_api();
    if surface == Surface::Web
        && let Some(display) = &row.work_dir_display
    {
        task.work_dir = Some(display.clone());
        return task;
    }
    web_task(surface, ctx, &mut task);
    task
}

/// On the web listener a task's `work_dir` is its display form.
pub(crate) fn web_task(surface: Surface, ctx: &Context, task: &mut Task) {
    match surface {
        Surface::Control | Surface::Cloud => {}
        Surface::Web => task.work_dir = task.work_dir.as_deref().and_then(|p| strip_path(ctx, p)),
    }
}
