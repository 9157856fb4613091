//! Who may do what: the one place the server decides it.
//!
//! Every route of the API is classified here ([`classify`]) into an [`Action`]; the
//! rule table ([`decide`]) answers for a [`Caller`] and the caller's relation to the
//! session the request names. The [`enforce`] middleware, in front of every route of
//! every surface, resolves the session (or task) id *among the caller's own* first,
//! so another member's ids neither match nor make a prefix ambiguous, answers 404 for
//! what the caller may not see (ids do not leak), hands the handlers the full id it
//! resolved ([`NamedSession`], [`NamedTask`]; they never resolve the typed one again) and the caller's
//! [`Scope`] for lists, and records every change a member makes in the audit trail.
//!
//! On `berth serve` the user's own callers are [`Caller::Local`] (one user): nothing
//! changes for them. Its daemons' forwarded sockets are members, as on `berth-server`:
//! their own sessions, no settings.

use super::state::{Ctx, Surface};
use crate::http::ApiError;
use crate::store::{AuditEntry, StoreError};
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::Method;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berth_core::{SessionId, TaskId};

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The user's own shell (control socket) or the desktop's web listener.
    Local,
    /// A member of a team server: by their token (`via` `api`, or `web` by cookie), or
    /// their daemon's forwarded control socket (`via` `machine NAME`, never as admin).
    /// A daemon of `berth serve` is one too (its tokens are the first admin's): its
    /// token crosses the network, so it never gets the local user's powers.
    Member {
        name: berth_core::Member,
        admin: bool,
        via: String,
    },
}

impl Caller {
    /// A member's daemon, forwarding its machine's control socket.
    pub fn daemon(member: String, machine: &str) -> Caller {
        Caller::Member {
            name: member.into(),
            admin: false,
            via: format!("machine {machine}"),
        }
    }

    /// Whose it is, for the audit trail.
    pub fn who(&self) -> &str {
        match self {
            Caller::Local => "local",
            Caller::Member { name, .. } => name,
        }
    }

    fn via(&self, surface: Surface) -> String {
        match self {
            Caller::Local => surface.as_str().to_owned(),
            Caller::Member { via, .. } => via.clone(),
        }
    }

    /// The member's name, unless the caller sees everything (local, or an admin).
    pub fn scope(&self) -> Scope {
        match self {
            Caller::Member {
                name, admin: false, ..
            } => Scope(Some(name.clone())),
            Caller::Local | Caller::Member { admin: true, .. } => Scope(None),
        }
    }
}

/// Whose sessions a list shows: one member's, or all (`None`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scope(pub Option<berth_core::Member>);

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing anyone's: health, capabilities, `me`, checking a path.
    Open,
    /// The agent and project lists: the server's settings (an agent's command, a
    /// project's directory on the server's machine). A member reads them to pick an
    /// agent; a daemon's forwarded socket does not (`403 admin_only`): its token
    /// crossed the network, and the machine it runs on is not the server's.
    Settings,
    /// Lists of sessions and tasks, shown in the caller's [`Scope`].
    List,
    /// A new session, owned by the caller.
    Create,
    ReadSession,
    ReadTask,
    /// Make an agent run: a message.
    Send,
    /// Change where a session runs.
    Bind,
    /// Rename, archive or delete a session: its owner's alone, as making it run is.
    Change,
    Cancel,
    /// Answer a request of an agent's (`POST approvals/{id}`): the handler keeps a
    /// member to their own sessions', and an admin too.
    Approve,
    /// Daemon tokens: the handlers keep a member to their own.
    Tokens,
    /// Agents, projects, members, the audit trail: the server's settings.
    Admin,
}

/// The caller's relation to the session a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The request names no session.
    None,
    Own,
    Other,
}

/// The rule table's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Allow,
    /// 404, as if it did not exist.
    NotFound,
    /// 403 `owner_only`: an admin may see it, not make it run.
    OwnerOnly,
    /// 403 `admin_only`.
    AdminOnly,
}

/// The rule table.
pub fn decide(action: Action, caller: &Caller, relation: Relation) -> Answer {
    let Caller::Member { admin, via, .. } = caller else {
        return Answer::Allow;
    };
    // A daemon acts for its member, never with an admin's rights.
    let daemon = via.starts_with("machine ");
    let admin = *admin && !daemon;
    match (action, relation) {
        (Action::Settings, _) if daemon => Answer::AdminOnly,
        (Action::Settings, _) => Answer::Allow,
        (Action::Approve, _) => Answer::Allow,
        (Action::Open | Action::List | Action::Create | Action::Tokens, _) | (_, Relation::Own) => {
            if action == Action::Admin && !admin {
                Answer::AdminOnly
            } else {
                Answer::Allow
            }
        }
        (Action::Admin, _) => {
            if admin {
                Answer::Allow
            } else {
                Answer::AdminOnly
            }
        }
        (Action::ReadSession | Action::ReadTask, Relation::Other) if admin => Answer::Allow,
        (Action::Send | Action::Bind | Action::Cancel | Action::Change, Relation::Other)
            if admin =>
        {
            Answer::OwnerOnly
        }
        (
            Action::ReadSession
            | Action::ReadTask
            | Action::Send
            | Action::Bind
            | Action::Cancel
            | Action::Change,
            Relation::Other | Relation::None,
        ) => Answer::NotFound,
    }
}

/// Which path segment of a route is the id it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    None,
    Session,
    Task,
}

/// A route's action, the id it names, and what the audit trail calls a change
/// through it (`None`: a read).
fn classify(method: &Method, route: &str) -> Option<(Action, Target, Option<&'static str>)> {
    use Action::*;
    let get = method == Method::GET || method == Method::HEAD;
    let post = method == Method::POST;
    let put = method == Method::PUT;
    let delete = method == Method::DELETE;
    let patch = method == Method::PATCH;
    Some(match route {
        "/api/v1/health" | "/api/v1/capabilities" | "/api/v1/me" if get => {
            (Open, Target::None, None)
        }
        "/api/v1/agents" | "/api/v1/projects" if get => (Settings, Target::None, None),
        "/api/v1/check" if post => (Open, Target::None, None),
        "/api/v1/sessions" | "/api/v1/tasks" if get => (List, Target::None, None),
        "/api/v1/sessions" if post => (Create, Target::None, Some("session.create")),
        "/api/v1/sessions/{id}" | "/api/v1/sessions/{id}/events" if get => {
            (ReadSession, Target::Session, None)
        }
        "/api/v1/sessions/{id}/messages" if post => (Send, Target::Session, Some("send")),
        "/api/v1/sessions/{id}/binding" if put => (Bind, Target::Session, Some("link")),
        "/api/v1/sessions/{id}/binding" if delete => (Bind, Target::Session, Some("unlink")),
        "/api/v1/sessions/{id}" if patch => (Change, Target::Session, Some("session.change")),
        "/api/v1/sessions/{id}" if delete => (Change, Target::Session, Some("session.delete")),
        "/api/v1/tasks/{id}" | "/api/v1/tasks/{id}/diff" if get => (ReadTask, Target::Task, None),
        "/api/v1/tasks/{id}/cancel" if post => (Cancel, Target::Task, Some("cancel")),
        "/api/v1/tasks/{id}/undone" if post => (Cancel, Target::Task, Some("undo")),
        "/api/v1/approvals" if get => (List, Target::None, None),
        "/api/v1/approvals/{id}" if post => (Approve, Target::None, Some("approval.answer")),
        "/api/v1/sessions/{id}/rules" | "/api/v1/sessions/{id}/usage" if get => {
            (ReadSession, Target::Session, None)
        }
        "/api/v1/usage" if get => (List, Target::None, None),
        "/api/v1/sessions/{id}/rules/{n}" if delete => {
            (Change, Target::Session, Some("rule.remove"))
        }
        "/api/v1/daemon/tokens" if get => (Tokens, Target::None, None),
        "/api/v1/daemon/tokens" if post => (Tokens, Target::None, Some("token.create")),
        "/api/v1/daemon/tokens/{name}" if delete => (Tokens, Target::None, Some("token.revoke")),
        "/api/v1/agents" if post => (Admin, Target::None, Some("agent.add")),
        "/api/v1/agents/{name}" if patch => (Admin, Target::None, Some("agent.edit")),
        "/api/v1/agents/{name}" if delete => (Admin, Target::None, Some("agent.remove")),
        "/api/v1/projects" if post => (Admin, Target::None, Some("project.add")),
        "/api/v1/projects/{name}/dir" if put => (Admin, Target::None, Some("project.dir")),
        "/api/v1/members" if get => (Admin, Target::None, None),
        "/api/v1/members" if post => (Admin, Target::None, Some("member.add")),
        "/api/v1/members/{name}" if delete => (Admin, Target::None, Some("member.remove")),
        "/api/v1/members/{name}/token" if post => (Admin, Target::None, Some("member.rotate")),
        "/api/v1/audit" if get => (Admin, Target::None, None),
        _ => return None,
    })
}

/// What a handler names as the target of a change it made (a new session's id, a
/// new member's or token's name), for the audit trail.
#[derive(Debug, Clone)]
pub struct AuditTarget(pub String);

/// The path with segment `index` replaced.
fn with_segment(path: &str, index: usize, value: &str) -> String {
    path.split('/')
        .enumerate()
        .map(|(i, s)| if i == index { value } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// The full id of the session a route names, as [`enforce`] resolved it among the
/// caller's own (among all for the local user and, for reading, an admin).
///
/// Handlers take the id from here, never from the route's `Path`: that holds what the
/// caller typed, and resolving it again across every member's ids would let another
/// member's make it ambiguous, and name them in the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedSession(pub SessionId);

/// The full id of the task a route names, as [`NamedSession`] is a session's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamedTask(pub TaskId);

/// The session row [`enforce`] read while resolving a session's route, for a handler
/// that would otherwise read it again (see [`super::handlers::session_display`]).
#[derive(Debug, Clone)]
pub(crate) struct SeenSession(pub std::sync::Arc<crate::store::SessionRow>);

/// What [`enforce`] resolved a route's id to.
#[derive(Debug, Clone)]
enum Resolved {
    Session(std::sync::Arc<crate::store::SessionRow>),
    Task(TaskId),
}

impl Resolved {
    fn as_str(&self) -> &str {
        match self {
            Resolved::Session(row) => row.id.as_str(),
            Resolved::Task(id) => id.as_str(),
        }
    }
}

/// The resolved id a handler takes, from the request's extensions.
fn named<T: Clone + Send + Sync + 'static>(parts: &Parts) -> Result<T, ApiError> {
    parts.extensions.get::<T>().cloned().ok_or_else(|| {
        ApiError::Internal(format!(
            "the id in {} was not resolved before its handler ran",
            parts.uri.path()
        ))
    })
}

impl<S: Send + Sync> FromRequestParts<S> for NamedSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        named(parts)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for NamedTask {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        named(parts)
    }
}

/// The full id `named` names uniquely among the sessions (or their tasks) of `owner`
/// (of everyone with `None`): another member's ids neither match nor make it ambiguous.
async fn resolve_owned(
    ctx: &Ctx,
    target: Target,
    named: &str,
    owner: Option<berth_core::Member>,
) -> Result<Resolved, StoreError> {
    match target {
        Target::Session => ctx
            .app
            .store
            .resolve_session_of(named, owner)
            .await
            .map(|s| Resolved::Session(std::sync::Arc::new(s))),
        Target::Task | Target::None => ctx
            .app
            .store
            .resolve_task_of(named, owner)
            .await
            .map(|t| Resolved::Task(t.id)),
    }
}

/// The full id `named` names among everyone's, and its session's owner: for an admin,
/// who reads every session.
async fn resolve_any(
    ctx: &Ctx,
    target: Target,
    named: &str,
) -> Result<(Resolved, Option<String>), StoreError> {
    match target {
        Target::Session => ctx
            .app
            .store
            .resolve_session_of(named, None)
            .await
            .map(|s| {
                let owner = s.owner.clone();
                (Resolved::Session(std::sync::Arc::new(s)), owner)
            }),
        Target::Task | Target::None => {
            let t = ctx.app.store.resolve_task_of(named, None).await?;
            let s = ctx.app.store.session(&t.session_id).await?;
            Ok((Resolved::Task(t.id), s.owner))
        }
    }
}

/// The middleware: decides, resolves, scopes and audits (see the module's docs).
pub(crate) async fn enforce(State(ctx): State<Ctx>, mut req: Request, next: Next) -> Response {
    let caller = req
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or(Caller::Local);
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    let Some((action, target, audit)) = classify(req.method(), &route) else {
        if caller == Caller::Local {
            return next.run(req).await;
        }
        return ApiError::NoRoute {
            path: req.uri().path().to_owned(),
        }
        .into_response();
    };
    // `/api/v1/{sessions|tasks}/{id}...`: the id is the fifth segment.
    const ID: usize = 4;
    let path = req.uri().path().to_owned();
    let named = path.split('/').nth(ID).unwrap_or("").to_owned();
    let mut relation = Relation::None;
    let mut resolved = None;
    match (target, &caller) {
        (Target::None, _) => {}
        // The user's own shell: every id is theirs.
        (Target::Session | Target::Task, Caller::Local) => {
            match resolve_owned(&ctx, target, &named, None).await {
                Ok(id) => resolved = Some(id),
                Err(e) => return ApiError::from(e).into_response(),
            }
        }
        (Target::Session | Target::Task, Caller::Member { name, .. }) => {
            match resolve_owned(&ctx, target, &named, Some(name.clone())).await {
                Ok(id) => {
                    relation = Relation::Own;
                    resolved = Some(id);
                }
                Err(e @ (StoreError::UnknownSession { .. } | StoreError::UnknownTask { .. })) => {
                    relation = Relation::Other;
                    // Only an admin learns whether it exists at all.
                    let sees_all = decide(action, &caller, Relation::Other) != Answer::NotFound;
                    let other = if sees_all {
                        resolve_any(&ctx, target, &named).await
                    } else {
                        Err(e)
                    };
                    match other {
                        Ok((id, owner)) => {
                            if decide(action, &caller, relation) == Answer::OwnerOnly {
                                return ApiError::OwnerOnly {
                                    owner: owner.unwrap_or_else(|| String::from("another member")),
                                    what: if action == Action::Cancel {
                                        "cancel its tasks"
                                    } else if action == Action::Bind {
                                        "change its directory"
                                    } else if action == Action::Change {
                                        "rename, archive or delete it"
                                    } else {
                                        "send to it"
                                    },
                                }
                                .into_response();
                            }
                            resolved = Some(id);
                        }
                        Err(e) => return ApiError::from(e).into_response(),
                    }
                }
                Err(e) => return ApiError::from(e).into_response(),
            }
        }
    }
    match decide(action, &caller, relation) {
        Answer::Allow => {}
        Answer::NotFound => {
            return ApiError::from(match target {
                Target::Task => crate::store::StoreError::UnknownTask { prefix: named },
                Target::Session | Target::None => {
                    crate::store::StoreError::UnknownSession { prefix: named }
                }
            })
            .into_response();
        }
        Answer::OwnerOnly => {
            return ApiError::OwnerOnly {
                owner: String::from("its owner"),
                what: "make it run",
            }
            .into_response();
        }
        Answer::AdminOnly => {
            return ApiError::AdminOnly {
                what: "change or read this server's settings, members and audit trail",
            }
            .into_response();
        }
    }
    if let Some(id) = &resolved {
        match id {
            Resolved::Session(row) => {
                req.extensions_mut().insert(NamedSession(row.id.clone()));
                req.extensions_mut().insert(SeenSession(row.clone()));
            }
            Resolved::Task(t) => {
                req.extensions_mut().insert(NamedTask(t.clone()));
            }
        }
        let rewritten = with_segment(&path, ID, id.as_str());
        let uri = match req.uri().query() {
            Some(q) => format!("{rewritten}?{q}"),
            None => rewritten,
        };
        if let Ok(uri) = uri.parse() {
            *req.uri_mut() = uri;
        }
    }
    req.extensions_mut().insert(caller.scope());
    req.extensions_mut().insert(caller.clone());
    let resp = next.run(req).await;
    // A team server's trail; `berth serve` keeps its daemons' changes only (the
    // user's own callers are local).
    if let Some(what) = audit
        && caller != Caller::Local
        && resp.status().is_success()
    {
        let target = resp
            .extensions()
            .get::<AuditTarget>()
            .map(|t| t.0.clone())
            .or_else(|| resolved.map(|r| r.as_str().to_owned()))
            .or_else(|| {
                // `/api/v1/{daemon/tokens|members|projects}/{name}`.
                route
                    .split('/')
                    .position(|s| s == "{name}")
                    .and_then(|i| path.split('/').nth(i).map(str::to_owned))
            });
        if let Err(e) = ctx
            .app
            .store
            .audit(AuditEntry {
                member: caller.who().to_owned(),
                action: what.to_owned(),
                target,
                via: caller.via(ctx.surface),
            })
            .await
        {
            tracing::error!(error = %e, "the audit trail could not be written");
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every route the API serves (method, template), and what each caller gets.
    const ROUTES: &[(&str, &str)] = &[
        ("GET", "/api/v1/health"),
        ("GET", "/api/v1/capabilities"),
        ("GET", "/api/v1/me"),
        ("GET", "/api/v1/sessions"),
        ("POST", "/api/v1/sessions"),
        ("GET", "/api/v1/sessions/{id}"),
        ("GET", "/api/v1/sessions/{id}/events"),
        ("POST", "/api/v1/sessions/{id}/messages"),
        ("PUT", "/api/v1/sessions/{id}/binding"),
        ("DELETE", "/api/v1/sessions/{id}/binding"),
        ("PATCH", "/api/v1/sessions/{id}"),
        ("DELETE", "/api/v1/sessions/{id}"),
        ("GET", "/api/v1/tasks"),
        ("GET", "/api/v1/tasks/{id}"),
        ("POST", "/api/v1/tasks/{id}/cancel"),
        ("POST", "/api/v1/tasks/{id}/undone"),
        ("GET", "/api/v1/agents"),
        ("POST", "/api/v1/agents"),
        ("PATCH", "/api/v1/agents/{name}"),
        ("DELETE", "/api/v1/agents/{name}"),
        ("GET", "/api/v1/projects"),
        ("POST", "/api/v1/projects"),
        ("PUT", "/api/v1/projects/{name}/dir"),
        ("POST", "/api/v1/check"),
        ("GET", "/api/v1/daemon/tokens"),
        ("POST", "/api/v1/daemon/tokens"),
        ("DELETE", "/api/v1/daemon/tokens/{name}"),
        ("GET", "/api/v1/members"),
        ("POST", "/api/v1/members"),
        ("DELETE", "/api/v1/members/{name}"),
        ("POST", "/api/v1/members/{name}/token"),
        ("GET", "/api/v1/audit"),
    ];

    fn member(name: &str, admin: bool) -> Caller {
        Caller::Member {
            name: name.into(),
            admin,
            via: "api".into(),
        }
    }

    /// Route × (owner, other member, admin, daemon of owner, daemon of other).
    #[test]
    fn the_rule_table() {
        use Answer::{AdminOnly as Adm, Allow as A, NotFound as N, OwnerOnly as O};
        let owner = member("ann", false);
        let other = member("bob", false);
        let admin = member("root", true);
        let owners_daemon = Caller::daemon("ann".into(), "laptop-a");
        // A daemon of an admin is no admin.
        let admins_daemon = Caller::daemon("root".into(), "laptop-r");
        let expected: &[[Answer; 5]] = &[
            // owner, other, admin, daemon of owner, daemon of other (the admin's)
            [A, A, A, A, A],         // health
            [A, A, A, A, A],         // capabilities
            [A, A, A, A, A],         // me
            [A, A, A, A, A],         // list sessions (scoped)
            [A, A, A, A, A],         // create session (owned by the caller)
            [A, N, A, A, N],         // read session
            [A, N, A, A, N],         // events
            [A, N, O, A, N],         // send
            [A, N, O, A, N],         // link
            [A, N, O, A, N],         // unlink
            [A, N, O, A, N],         // rename or archive a session
            [A, N, O, A, N],         // delete a session
            [A, A, A, A, A],         // list tasks (scoped)
            [A, N, A, A, N],         // read task
            [A, N, O, A, N],         // cancel
            [A, N, O, A, N],         // record an undo
            [A, A, A, Adm, Adm],     // list agents
            [Adm, Adm, A, Adm, Adm], // add agent
            [Adm, Adm, A, Adm, Adm], // edit agent
            [Adm, Adm, A, Adm, Adm], // remove agent
            [A, A, A, Adm, Adm],     // list projects
            [Adm, Adm, A, Adm, Adm], // add project
            [Adm, Adm, A, Adm, Adm], // project dir
            [A, A, A, A, A],         // check
            [A, A, A, A, A],         // list tokens (scoped by the handler)
            [A, A, A, A, A],         // create token (own, or an admin's any)
            [A, A, A, A, A],         // revoke token (own, or an admin's any)
            [Adm, Adm, A, Adm, Adm], // list members
            [Adm, Adm, A, Adm, Adm], // add member
            [Adm, Adm, A, Adm, Adm], // remove member
            [Adm, Adm, A, Adm, Adm], // rotate a member's token
            [Adm, Adm, A, Adm, Adm], // audit
        ];
        assert_eq!(ROUTES.len(), expected.len());
        for ((method, route), want) in ROUTES.iter().zip(expected) {
            let method: Method = method.parse().unwrap();
            let (action, target, _) =
                classify(&method, route).unwrap_or_else(|| panic!("{method} {route} unclassified"));
            let named = target != Target::None;
            let rel = |own: bool| match (named, own) {
                (false, _) => Relation::None,
                (true, true) => Relation::Own,
                (true, false) => Relation::Other,
            };
            let got = [
                decide(action, &owner, rel(true)),
                decide(action, &other, rel(false)),
                decide(action, &admin, rel(false)),
                decide(action, &owners_daemon, rel(true)),
                decide(action, &admins_daemon, rel(false)),
            ];
            assert_eq!(&got, want, "{method} {route}");
            // The user's own shell may do everything.
            assert_eq!(decide(action, &Caller::Local, rel(false)), Answer::Allow);
        }
    }

    #[test]
    fn unknown_routes_are_unclassified_and_ids_are_rewritten_in_place() {
        assert_eq!(classify(&Method::PATCH, "/api/v1/tasks/{id}"), None);
        assert_eq!(classify(&Method::GET, "/api/v1/nothing"), None);
        assert_eq!(
            with_segment("/api/v1/sessions/ab12/messages", 4, "ab12-full"),
            "/api/v1/sessions/ab12-full/messages"
        );
    }
}
