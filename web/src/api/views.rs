//! The documents each surface returns.

use super::state::Surface;
use crate::store::{SessionCols, SessionRow, TaskRow};
use berth_core::api::{Session, Task};
use berth_core::resolve::Origin;
use berth_core::{Context, LocalPath, SessionId};
use serde::Serialize;

/// A session as the web listener shows it: the contract's session document without
/// any real path (see the module docs of [`crate::api`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WebSession {
    pub id: SessionId,
    pub title: String,
    pub agent: String,
    pub origin: Origin,
    pub project: Option<String>,
    /// The display form of where the last run worked.
    pub work_dir: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    /// Archived: listed only when asked for (see `berth_core::api::Session`).
    pub archived: bool,
    /// What it waits for from a person (see `berth_core::api::Session`).
    pub needs: Option<berth_core::api::Needs>,
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
        Surface::Control => SessionDoc::Full(row.to_api()),
        Surface::Cloud => {
            let mut doc = row.to_api();
            doc.work_dir = shown_work_dir(
                ctx,
                row.work_dir_display.as_deref(),
                row.work_dir.as_deref(),
            )
            .map(std::borrow::Cow::into_owned);
            SessionDoc::Full(doc)
        }
        Surface::Web => web_session(ctx, row),
    }
}

/// Where a session's last run worked, as the surfaces without real paths show it: the
/// display form the machine that ran it made (a daemon strips its own home), else by
/// `ctx`, the context of the session's machine (see `super::redact`).
fn shown_work_dir<'a>(
    ctx: &Context,
    display: Option<&'a str>,
    work_dir: Option<&str>,
) -> Option<std::borrow::Cow<'a, str>> {
    match (display, work_dir) {
        (Some(shown), _) => Some(std::borrow::Cow::Borrowed(shown)),
        (None, Some(p)) => strip_path(ctx, p).map(std::borrow::Cow::Owned),
        (None, None) => None,
    }
}

/// Writes [`session_doc`]'s JSON for a listed session's borrowed columns, copying no
/// text on the way: the same bytes, field for field (a test holds the two together),
/// for the cost of writing them.
pub(crate) fn write_session_doc(
    surface: Surface,
    ctx: &Context,
    out: &mut Vec<u8>,
    s: &SessionCols<'_>,
) -> Result<(), serde_json::Error> {
    let shown = match surface {
        Surface::Control => s.work_dir.map(std::borrow::Cow::Borrowed),
        Surface::Cloud | Surface::Web => shown_work_dir(ctx, s.work_dir_display, s.work_dir),
    };
    let doc = SessionRef {
        id: s.id,
        title: s.title,
        agent: s.agent,
        origin: s.origin,
        project: s.project,
        work_dir: shown,
        created_at: s.created_at,
        updated_at: s.updated_at,
        archived: s.archived,
        needs: s.needs,
        #[cfg(feature = "local-binding")]
        binding: s.binding.map(|b| match surface {
            Surface::Control | Surface::Cloud => BindingDoc::Full(BindingRef {
                dir: b.dir,
                display: b.display,
                daemon: b.machine,
                daemon_name: b.machine_name,
                mode: b.mode,
                state: b.state,
            }),
            Surface::Web => BindingDoc::View(BindingViewRef {
                display: b.display,
                daemon: b.machine,
                daemon_name: b.machine_name,
                mode: b.mode,
                state: b.state,
            }),
        }),
    };
    serde_json::to_writer(out, &doc)
}

/// [`Session`] or [`WebSession`], borrowed (their fields in their order): they differ
/// only in the binding's form.
#[derive(Serialize)]
struct SessionRef<'a> {
    id: &'a str,
    title: &'a str,
    agent: &'a str,
    origin: Origin,
    project: Option<&'a str>,
    work_dir: Option<std::borrow::Cow<'a, str>>,
    created_at: &'a str,
    updated_at: &'a str,
    archived: bool,
    needs: Option<berth_core::api::Needs>,
    #[cfg(feature = "local-binding")]
    binding: Option<BindingDoc<'a>>,
}

/// A binding, borrowed, in the form the surface shows.
#[cfg(feature = "local-binding")]
#[derive(Serialize)]
#[serde(untagged)]
enum BindingDoc<'a> {
    /// The control socket's and `berth-server`'s.
    Full(BindingRef<'a>),
    /// The web listener's: no `dir`.
    View(BindingViewRef<'a>),
}

/// `berth_core::api::SessionBinding`, borrowed.
#[cfg(feature = "local-binding")]
#[derive(Serialize)]
struct BindingRef<'a> {
    dir: &'a str,
    display: &'a str,
    daemon: &'a str,
    daemon_name: &'a str,
    mode: berth_core::binding::BindMode,
    state: berth_core::binding::BindingState,
}

/// `berth_core::binding::BindingView`, borrowed.
#[cfg(feature = "local-binding")]
#[derive(Serialize)]
struct BindingViewRef<'a> {
    display: &'a str,
    daemon: &'a str,
    daemon_name: &'a str,
    mode: berth_core::binding::BindMode,
    state: berth_core::binding::BindingState,
}

/// The web listener's session: display forms only.
fn web_session(ctx: &Context, row: &SessionRow) -> SessionDoc {
    SessionDoc::Web(WebSession {
        id: row.id.clone(),
        title: row.title.clone(),
        agent: row.agent.clone(),
        origin: row.origin,
        project: row.project.clone(),
        work_dir: shown_work_dir(
            ctx,
            row.work_dir_display.as_deref(),
            row.work_dir.as_deref(),
        )
        .map(std::borrow::Cow::into_owned),
        created_at: row.created_at.clone(),
        updated_at: row.updated_at.clone(),
        archived: row.archived_at.is_some(),
        needs: row.needs,
        #[cfg(feature = "local-binding")]
        binding: row.binding_view(),
    })
}

pub(crate) fn task_doc(surface: Surface, ctx: &Context, row: &TaskRow) -> Task {
    let mut task = row.to_api();
    if matches!(surface, Surface::Web | Surface::Cloud)
        && let Some(display) = &row.work_dir_display
    {
        task.work_dir = Some(display.clone());
        return task;
    }
    web_task(surface, ctx, &mut task);
    task
}

/// Outside the control socket (the web listener, `berth-server`'s listener) a task's
/// `work_dir` is its display form.
pub(crate) fn web_task(surface: Surface, ctx: &Context, task: &mut Task) {
    match surface {
        Surface::Control => {}
        Surface::Web | Surface::Cloud => {
            task.work_dir = task.work_dir.as_deref().and_then(|p| strip_path(ctx, p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoredBinding;
    use berth_core::Platform;

    fn rows() -> Vec<SessionRow> {
        let plain = SessionRow {
            id: SessionId::parse("0192f3a1-7c2e-7d10-9a4b-5c6d7e8f9a0b").unwrap(),
            title: "fix \"the\" build\n\tnow ✓".into(),
            agent: "claude".into(),
            origin: Origin::Desktop,
            project: None,
            created_at: "2026-12-01T20:38:24.123Z".into(),
            updated_at: "2026-12-01T20:39:00.000Z".into(),
            binding: None,
            binding_rev: 3,
            work_dir: None,
            work_dir_display: None,
            resume_id: Some("r-1".into()),
            owner: Some("ann".into()),
            archived_at: None,
            needs: None,
        };
        let mut worked = plain.clone();
        worked.origin = Origin::Channel;
        worked.project = Some("app".into());
        worked.work_dir = Some("/home/ann/code/app".into());
        let mut shown = worked.clone();
        shown.work_dir_display = Some("~/code/app (on laptop)".into());
        let mut odd = worked.clone();
        odd.work_dir = Some("not a path".into());
        let mut bound = worked.clone();
        bound.binding = Some(StoredBinding {
            dir: "/home/ann/code/app".into(),
            display: "~/code/app".into(),
            identity: None,
            machine: berth_core::binding::MachineId::parse("m-1").unwrap(),
            machine_name: "ann's laptop".into(),
            mode: berth_core::binding::BindMode::Worktree,
            state: berth_core::binding::BindingState::MachineOffline,
        });
        let mut archived = bound.clone();
        archived.archived_at = Some("2026-12-02T08:00:00.000Z".into());
        let mut asking = plain.clone();
        asking.needs = Some(berth_core::api::Needs::Approval);
        vec![plain, worked, shown, odd, bound, archived, asking]
    }

    #[test]
    fn a_listed_document_is_byte_for_byte_the_typed_one() {
        let ctx = Context::new(Platform::Linux)
            .with_home(LocalPath::parse(Platform::Linux, "/home/ann").unwrap());
        for row in rows() {
            for surface in [Surface::Control, Surface::Cloud, Surface::Web] {
                let typed = serde_json::to_vec(&session_doc(surface, &ctx, &row)).unwrap();
                let mut listed = Vec::new();
                write_session_doc(surface, &ctx, &mut listed, &SessionCols::of(&row)).unwrap();
                assert_eq!(
                    String::from_utf8(listed).unwrap(),
                    String::from_utf8(typed).unwrap(),
                    "{surface:?} {row:?}"
                );
            }
        }
    }
}
