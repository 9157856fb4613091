//! The display rule on everything the web listener serves, each machine's paths by
//! that machine's home.
//!
//! Every JSON answer of the web listener's API (documents, lists, errors) and every
//! transcript event it streams has each string value passed through
//! [`berth_core::display::redact_text`] with a display [`Context`]: the home of the
//! machine the text came from shows as `~`, other users' homes as `/home/…`, and the
//! server user's account name as `…`. It is applied to the whole answer as a layer of
//! the web router, not per route, so a route added later cannot forget it. The control
//! socket keeps the real text.
//!
//! Which context: a path means something only on its machine. A session bound on a
//! laptop daemon to `/srv/berth/proj` names a directory of the laptop, and the server
//! user's home being `/srv/berth` does not make it `~/proj` there. So:
//!
//! - an answer about one session (its document, one of its tasks) carries a
//!   [`ShownBy`] response extension, set by its handler from [`Displays::session`]: the
//!   server's own context for work on the server's machine, else the context of the
//!   daemon's machine ([`Context::for_machine`]: its home as `~` where its daemon said
//!   it, no home rule where not; the server's name and other users' homes still
//!   masked). The layer applies the context it names;
//! - a list that mixes machines (sessions, tasks, projects) is shown item by item in
//!   its handler, each item by its own machine's context, and carries
//!   [`Displays::items`]: the layer then applies the masking alone (names and other
//!   users' homes, no home rule), never nothing;
//! - an answer without the extension (errors, agents, health, and any route added
//!   later) is shown by the server's own context, as before: the layer's default.
//!
//! A handler can therefore only choose *which machine's* rule applies, never whether
//! one does: every [`ShownBy`] is made here, from the server's context, and keeps its
//! account name. The event stream (`super::sse`) picks its session's context the same
//! way and applies it per event.
//!
//! Which machine a session's work runs on follows the scheduler's rule ([`runner`]):
//! the bound machine; unbound, the server's own for its own user's sessions, else one
//! of the owner's daemons, which is known only when the owner has one machine.
//!
//! One field is let through: `home` of `GET capabilities`, which the browser's binding
//! preview needs to apply the home rules to what the user types (it is never shown).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use berth_core::Context;
use std::collections::HashMap;
use std::sync::Arc;

/// The largest JSON answer the layer rewrites; the web listener serves nothing near
/// it (session lists are capped far below), and a larger one is refused rather than
/// served unredacted.
const MAX_JSON: usize = 64 * 1024 * 1024;

/// The route whose `home` the preview needs as it is.
const CAPABILITIES: &str = "/api/v1/capabilities";

/// The display context one answer is shown by: set by its handler as a response
/// extension, applied by [`redact_layer`]. Made only by [`Displays`], from the
/// server's context, so it always masks the server user's name.
#[derive(Debug, Clone)]
pub(crate) struct ShownBy(Arc<Context>);

/// Which machine runs a session's work, as far as the server can tell (the
/// scheduler's rule, `scheduler::run_one`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runner<'a> {
    /// The server's own machine, by its embedded executor.
    Here,
    /// The machine the session is bound to.
    Bound(&'a str),
    /// Whichever of this member's machines is free at each turn.
    OwnersMachines(&'a str),
}

/// Where a session bound to `bound` (a machine id), owned by `owner`, runs, on a
/// server whose own executor's machine is `here`: the bound machine; unbound, the
/// server's own machine for a session of its own user (no owner) when it has an
/// executor, else the owner's daemons.
fn runner<'a>(bound: Option<&'a str>, owner: Option<&'a str>, here: Option<&str>) -> Runner<'a> {
    match (bound, here) {
        (Some(m), Some(h)) if m == h => Runner::Here,
        (Some(m), _) => Runner::Bound(m),
        (None, Some(_)) if owner.is_none() => Runner::Here,
        (None, _) => Runner::OwnersMachines(crate::store::owner_name(owner)),
    }
}

/// Each machine's display context, as this process knows the machines now: what a
/// handler picks a session's context from.
#[derive(Debug, Clone)]
pub(crate) struct Displays {
    /// The server user's: its home as `~`.
    server: Arc<Context>,
    /// The server's own executor's machine id, if it has one (`berth serve`).
    here: Option<String>,
    /// Every registered machine by id: its owner's name and its context.
    machines: HashMap<String, (String, Arc<Context>)>,
    /// No home rule, names and other users' homes masked: for a machine whose home is
    /// not known, and for answers shown item by item.
    masking: Arc<Context>,
}

impl Displays {
    pub(crate) fn of(app: &super::state::AppState) -> Displays {
        let server = app.display.clone();
        let machines = app
            .daemons
            .homes()
            .into_iter()
            .map(|m| {
                let owner = crate::store::owner_name(m.member.as_deref()).to_owned();
                let ctx = Arc::new(server.for_machine(m.home));
                (m.machine.as_str().to_owned(), (owner, ctx))
            })
            .collect();
        Displays {
            masking: Arc::new(server.for_machine(None)),
            here: app
                .scheduler
                .executor()
                .map(|e| e.machine().0.as_str().to_owned()),
            machines,
            server,
        }
    }

    /// The context of a session's text: its machine's (see [`runner`]).
    pub(crate) fn session(&self, bound: Option<&str>, owner: Option<&str>) -> Arc<Context> {
        match runner(bound, owner, self.here.as_deref()) {
            Runner::Here => self.server.clone(),
            Runner::Bound(m) => self.machine(m),
            Runner::OwnersMachines(owner) => {
                let mut theirs = self.machines.values().filter(|(o, _)| o == owner);
                match (theirs.next(), theirs.next()) {
                    (Some((_, ctx)), None) => ctx.clone(),
                    (Some(_), Some(_)) | (None, _) => self.masking.clone(),
                }
            }
        }
    }

    /// [`Displays::session`] of a stored session.
    pub(crate) fn of_row(&self, row: &crate::store::SessionRow) -> Arc<Context> {
        let bound = row.binding.as_ref().map(|b| b.machine.as_str());
        self.session(bound, row.owner.as_deref())
    }

    /// The context of one machine's paths (a project's directory there).
    pub(crate) fn machine(&self, id: &str) -> Arc<Context> {
        if self.here.as_deref() == Some(id) {
            return self.server.clone();
        }
        self.machines
            .get(id)
            .map_or_else(|| self.masking.clone(), |(_, ctx)| ctx.clone())
    }

    /// The extension of an answer about one session, shown by `ctx` (one of this
    /// value's contexts).
    pub(crate) fn shown_by(ctx: Arc<Context>) -> axum::Extension<ShownBy> {
        axum::Extension(ShownBy(ctx))
    }

    /// The extension of a list its handler showed item by item: the layer masks names
    /// and other users' homes alone.
    pub(crate) fn items(&self) -> axum::Extension<ShownBy> {
        axum::Extension(ShownBy(self.masking.clone()))
    }
}

/// The JSON document written into `out` from `start` on, with every string redacted
/// by `ctx` (an item of a list, shown by its own machine's context).
pub(crate) fn redact_written(
    ctx: &Context,
    out: &mut Vec<u8>,
    start: usize,
) -> Result<(), serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_slice(&out[start..])?;
    berth_core::display::redact_json(ctx, &mut value);
    out.truncate(start);
    serde_json::to_writer(out, &value)
}

/// The layer: runs the request, then redacts its answer by the context its handler
/// named, else the server's.
pub(crate) async fn redact_layer(
    State(ctx): State<Arc<Context>>,
    req: Request,
    next: Next,
) -> Response {
    let keep_home = req.uri().path() == CAPABILITIES;
    let res = next.run(req).await;
    let ctx = match res.extensions().get::<ShownBy>() {
        Some(ShownBy(shown)) => shown.clone(),
        None => ctx,
    };
    redact_answer(&ctx, res, keep_home).await
}

/// Rewrites a JSON answer with every string redacted, and a plain text answer (a
/// task's diff) as free text; other answers (the UI's assets, the event stream, which
/// redacts per event) pass unchanged.
async fn redact_answer(ctx: &Context, res: Response, keep_home: bool) -> Response {
    let kind = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let is_json = kind.starts_with("application/json");
    if kind.starts_with("text/plain") {
        let (mut parts, body) = res.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, MAX_JSON).await else {
            return withheld(parts);
        };
        let text = String::from_utf8_lossy(&bytes);
        let shown = berth_core::display::redact_text(ctx, &text).into_owned();
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(shown));
    }
    if !is_json {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_JSON).await else {
        return withheld(parts);
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return withheld(parts);
    };
    let home = keep_home.then(|| value.get("home").cloned()).flatten();
    berth_core::display::redact_json(ctx, &mut value);
    if let (Some(home), Some(obj)) = (home, value.as_object_mut()) {
        obj.insert("home".to_owned(), home);
    }
    let Ok(out) = serde_json::to_vec(&value) else {
        return withheld(parts);
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
}

/// An answer that could not be checked is not served.
fn withheld(mut parts: axum::http::response::Parts) -> Response {
    parts.status = axum::http::StatusCode::INTERNAL_SERVER_ERROR;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let code = berth_core::ErrorCode::Internal;
    let body = berth_core::api::ErrorBody::new(
        code,
        "the answer could not be checked for private paths, so it was not sent",
        code.hint().unwrap_or_default(),
    );
    let text = serde_json::to_string(&body).unwrap_or_default();
    Response::from_parts(parts, Body::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_work_runs_where_the_scheduler_sends_it() {
        let here = Some("desk");
        // (bound, owner, here, runner)
        let cases = [
            (None, None, here, Runner::Here),
            (Some("desk"), None, here, Runner::Here),
            (Some("laptop"), None, here, Runner::Bound("laptop")),
            (Some("laptop"), Some("admin"), here, Runner::Bound("laptop")),
            (None, Some("admin"), here, Runner::OwnersMachines("admin")),
            (None, Some("ann"), None, Runner::OwnersMachines("ann")),
            // No executor of its own (`berth-server`): the first admin's machines.
            (None, None, None, Runner::OwnersMachines("admin")),
            (Some("laptop"), None, None, Runner::Bound("laptop")),
        ];
        for (bound, owner, here, want) in cases {
            assert_eq!(
                runner(bound, owner, here),
                want,
                "{bound:?} {owner:?} {here:?}"
            );
        }
    }

    #[test]
    fn each_sessions_text_shows_by_its_machines_home_or_raw() {
        use berth_core::{LocalPath, Platform};
        let path = |p: &str| LocalPath::parse(Platform::Linux, p).unwrap();
        let server = Arc::new(Context::new(Platform::Linux).with_home(path("/srv/sam")));
        let machine = |home: Option<&str>| Arc::new(server.for_machine(home.map(path)));
        let displays = Displays {
            masking: machine(None),
            here: Some("desk".into()),
            machines: HashMap::from([
                (
                    "laptop".into(),
                    ("admin".into(), machine(Some("/home/alice"))),
                ),
                ("old".into(), ("admin".into(), machine(None))),
                ("ann-1".into(), ("ann".into(), machine(Some("/Users/ann")))),
            ]),
            server: server.clone(),
        };
        let text = "cwd=/srv/sam/proj /home/alice/app /Users/ann/x";
        // (bound, owner, shown)
        let cases = [
            (None, None, "cwd=~/proj /home/…/app /Users/…/x"),
            (Some("desk"), None, "cwd=~/proj /home/…/app /Users/…/x"),
            (Some("laptop"), None, "cwd=/srv/…/proj ~/app /Users/…/x"),
            (Some("old"), None, "cwd=/srv/…/proj /home/…/app /Users/…/x"),
            (Some("gone"), None, "cwd=/srv/…/proj /home/…/app /Users/…/x"),
            // One machine of the owner's: its home; two: not known which, raw.
            (None, Some("ann"), "cwd=/srv/…/proj /home/…/app ~/x"),
            (
                None,
                Some("admin"),
                "cwd=/srv/…/proj /home/…/app /Users/…/x",
            ),
        ];
        for (bound, owner, want) in cases {
            let ctx = displays.session(bound, owner);
            let shown = berth_core::display::redact_text(&ctx, text);
            assert_eq!(shown, want, "{bound:?} {owner:?}");
        }
        assert_eq!(displays.machine("desk"), server);
    }
}
