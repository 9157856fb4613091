//! The remote-daemon protocol: what `berth daemon` and the server say to each other.
//!
//! Every call is HTTP/1.1 JSON under [`PREFIX`] on the server's listener
//! (`berth serve --allow-daemons`, or `berth-server`), authenticated by
//! `Authorization: Bearer <daemon token>` **and** [`MACHINE_HEADER`] naming the daemon's
//! machine id. A token is bound to the first machine that registers with it; the same
//! token from another machine, a revoked token or an unknown one answers 401
//! (`unauthorized`) and nothing is claimed.
//!
//! | call | body | answer |
//! |---|---|---|
//! | `POST register` | [`Register`] | [`Registered`] |
//! | `POST heartbeat` | [`Heartbeat`] | [`HeartbeatReply`] |
//! | `POST claim` | [`ClaimRequest`] | 200 [`ClaimedTask`], or 204 after the wait |
//! | `POST tasks/{id}/events` | [`EventBatch`] | [`EventsReply`] |
//! | `POST tasks/{id}/finish` | [`FinishRequest`] | [`FinishReply`] |
//! | `POST leave` | [`Leave`] | `{}` |
//! | `ANY api/{rest}` | the control API's own | the control API's own |
//!
//! - **claim** is a long poll: the server answers the moment a task resolves to this
//!   machine, or with 204 after `wait_ms` (capped by the server's claim wait).
//! - **events** are numbered per task from 0 by the daemon; a batch says the number of
//!   its first event. The server keeps those it has not seen and answers how many it
//!   holds in all, so a batch resent after a lost answer is never stored twice and the
//!   daemon drops what was acknowledged. `cancel: true` asks the daemon to stop the
//!   agent.
//! - **decisions** on the requests a run put to a person ([`WireEvent::Approval`]:
//!   a person's answer, a session rule's, the deadline's) are kept by the server for
//!   the machine running the task and handed over once, on the daemon's next
//!   exchange: `answers` in [`EventsReply`] (that task's) or in [`HeartbeatReply`]
//!   (any of the machine's). A waiting task sends an empty batch every heartbeat
//!   period, so a decision arrives within about one period. The daemon hands each to
//!   its executor; one for a task or request it no longer runs is dropped. A reply
//!   lost on its way loses its decisions: those runs meet their deadline (a denial as
//!   timed out, never an allow). The field is additive: an older daemon ignores it,
//!   and its runs meet their deadline as before; an older server sends none.
//! - **finish** carries the number of events sent; the server answers 409
//!   (`events_missing`) until it holds them all, so nothing is lost behind the outcome.
//!   A finish repeated after a lost answer is acknowledged again.
//! - A task the server no longer expects (it ended `interrupted` after the daemon
//!   missed its heartbeat window, or was cancelled) answers 409 `task_gone`: the daemon
//!   stops the agent and drops its events.
//! - **leave** is a daemon stopping cleanly, after reporting its tasks: its machine is
//!   offline at once (its sessions' tasks wait) rather than at the end of the window.
//! - **api/{rest}** forwards the daemon's control socket: the CLI on that machine works
//!   through it as against `berth serve`. A request that carries a directory
//!   (`PUT sessions/{id}/binding`, `POST sessions` with `dir`, `PUT projects/{n}/dir`)
//!   is validated natively on the daemon first and carries the result in
//!   [`VALIDATED_HEADER`] ([`Validated`]); the directory is then bound on the daemon's
//!   machine. The server never validates another machine's path itself.

use crate::executor::{AgentSpec, ExecEvent, Placement, SessionFacts, TaskOutcome, TaskSpec};
use berth_core::api::TaskStatus;
use berth_core::event::AgentEvent;
use berth_core::{MachineId, SessionId, TaskId};
use serde::{Deserialize, Serialize};

/// Where the daemon routes live.
pub const PREFIX: &str = "/api/v1/daemon";
/// The daemon's machine id, on every call.
pub const MACHINE_HEADER: &str = "x-berth-machine";
/// A directory validated on the daemon, on forwarded binding requests.
pub const VALIDATED_HEADER: &str = "x-berth-validated";

/// `POST register`: a daemon (re)starting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Register {
    /// The machine id, created once and kept in the daemon's `BERTH_HOME`.
    pub machine_id: MachineId,
    /// Its human name (`--name`, default the host name).
    pub name: String,
    /// A fresh id per daemon process: tasks claimed by an earlier process of the same
    /// machine end `interrupted` when a new one registers.
    pub instance: String,
    pub version: String,
    /// The daemon user's home directory. Wherever the server may show display forms
    /// only (the web listener, a member's view), this machine's paths, and its home in
    /// an agent's text, show as `~/…` by it: the server's own home rule cannot know
    /// another machine's home, wherever it lies. Optional: an older daemon sends none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
}

/// The answer to `register`: the timings the daemon keeps to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    pub machine_id: MachineId,
    pub name: String,
    /// How often to send a heartbeat.
    pub heartbeat_ms: u64,
    /// A machine with no heartbeat (or claim) for this long is offline: its running
    /// tasks end `interrupted`, its sessions' tasks wait (`waiting_daemon`).
    pub window_ms: u64,
    /// The longest a claim is held open.
    pub claim_wait_ms: u64,
    /// Whether the server can bind directories at all (false: the cloud build).
    pub local_binding: bool,
    /// Whether the server takes claims' numbers ([`ClaimRequest::seq`],
    /// [`Heartbeat::claimed_through`]); an older server says nothing, and is sent none.
    #[serde(default)]
    pub claim_numbers: bool,
}

/// `POST heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub instance: String,
    /// Tasks claimed by this process and not yet acknowledged finished.
    #[serde(default)]
    pub running: Vec<TaskId>,
    /// The number ([`ClaimRequest::seq`]) of the last claim whose answer this process
    /// had handled when it listed `running`: a task it received by then is listed until
    /// its finish is acknowledged. A task handed out by a later claim and missing from
    /// `running` is not lost: the heartbeat may have been written before its answer
    /// arrived (a heartbeat can travel for seconds: retried connects, a replica that
    /// forwards it). Sent only to a server that takes claim numbers
    /// ([`Registered::claim_numbers`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_through: Option<u64>,
}

/// The answer to `heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HeartbeatReply {
    /// Running tasks the daemon must stop (cancelled by a user).
    #[serde(default)]
    pub cancel: Vec<TaskId>,
    /// Decisions for requests the machine's runs wait on, handed over once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<WireAnswer>,
}

/// A decision on a request a run put to a person ([`WireEvent::Approval`]), for the
/// daemon to hand to the run that waits on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireAnswer {
    pub task_id: TaskId,
    /// The request's id, as the run announced it.
    pub id: String,
    pub answer: berth_core::approval::Answer,
}

/// `POST leave`: this process stops; its machine is offline from now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leave {
    pub instance: String,
}

/// `POST claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    pub instance: String,
    /// How long to hold the claim open; `0` answers at once (a polling daemon).
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// This claim's number in the daemon process, from 1 up, one claim at a time (see
    /// [`Heartbeat::claimed_through`]). Sent only to a server that takes claim numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

/// Where a claimed task runs, on the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WirePlacement {
    Scratch,
    /// The bound directory, and its (device, inode) at link time when known.
    InPlace {
        dir: String,
        #[serde(default)]
        dev: Option<u64>,
        #[serde(default)]
        ino: Option<u64>,
    },
    Worktree {
        dir: String,
        #[serde(default)]
        dev: Option<u64>,
        #[serde(default)]
        ino: Option<u64>,
    },
}

/// A claimed task, as the daemon's executor needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedTask {
    pub task_id: TaskId,
    pub session_id: SessionId,
    pub title: String,
    /// The privacy-stripped bound directory, for the brief.
    pub display: Option<String>,
    pub agent: AgentSpec,
    pub prompt: String,
    pub placement: WirePlacement,
    pub resume_id: Option<String>,
}

impl ClaimedTask {
    /// The wire form of a task the scheduler resolved to a daemon.
    pub fn from_spec(spec: &TaskSpec) -> ClaimedTask {
        let placement = match &spec.placement {
            Placement::Scratch => WirePlacement::Scratch,
            #[cfg(feature = "local-binding")]
            Placement::InPlace { dir, identity } => WirePlacement::InPlace {
                dir: dir.as_str().to_owned(),
                dev: identity.map(|i| i.dev),
                ino: identity.map(|i| i.ino),
            },
            #[cfg(feature = "local-binding")]
            Placement::Worktree { dir, identity } => WirePlacement::Worktree {
                dir: dir.as_str().to_owned(),
                dev: identity.map(|i| i.dev),
                ino: identity.map(|i| i.ino),
            },
        };
        ClaimedTask {
            task_id: spec.task_id.clone(),
            session_id: spec.session.id.clone(),
            title: spec.session.title.clone(),
            display: spec.session.display.clone(),
            agent: spec.agent.clone(),
            prompt: spec.prompt.clone(),
            placement,
            resume_id: spec.resume_id.clone(),
        }
    }

    /// The task for the daemon's executor. A directory placement must parse as an
    /// absolute path of this platform; a build without `local-binding` accepts only
    /// scratch.
    pub fn into_spec(self) -> Result<TaskSpec, berth_core::Refusal> {
        let placement = match self.placement {
            WirePlacement::Scratch => Placement::Scratch,
            #[cfg(feature = "local-binding")]
            WirePlacement::InPlace { dir, dev, ino } => Placement::InPlace {
                dir: berth_core::LocalPath::parse(berth_core::Platform::native(), &dir)?,
                identity: identity(dev, ino),
            },
            #[cfg(feature = "local-binding")]
            WirePlacement::Worktree { dir, dev, ino } => Placement::Worktree {
                dir: berth_core::LocalPath::parse(berth_core::Platform::native(), &dir)?,
                identity: identity(dev, ino),
            },
            #[cfg(not(feature = "local-binding"))]
            WirePlacement::InPlace { dir, .. } | WirePlacement::Worktree { dir, .. } => {
                return Err(berth_core::Refusal::new(
                    berth_core::ErrorCode::OriginCannotBind,
                    format!("this build cannot run in the local directory {dir}"),
                    "run tasks bound to a directory with `berth daemon` from the full build",
                ));
            }
        };
        Ok(TaskSpec {
            task_id: self.task_id,
            session: SessionFacts {
                id: self.session_id,
                title: self.title,
                display: self.display,
            },
            agent: self.agent,
            prompt: self.prompt,
            placement,
            resume_id: self.resume_id,
        })
    }
}

#[cfg(feature = "local-binding")]
fn identity(dev: Option<u64>, ino: Option<u64>) -> Option<crate::executor::DirIdentity> {
    Some(crate::executor::DirIdentity {
        dev: dev?,
        ino: ino?,
    })
}

/// One event of a running task, as sent by the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WireEvent {
    Status {
        status: TaskStatus,
        #[serde(default)]
        wait_reason: Option<String>,
    },
    Agent {
        event: AgentEvent,
    },
    /// A request the `ask` policy puts to a person.
    Approval {
        request: berth_core::approval::ApprovalRequest,
    },
}

impl From<ExecEvent> for WireEvent {
    fn from(e: ExecEvent) -> WireEvent {
        match e {
            ExecEvent::Status {
                status,
                wait_reason,
            } => WireEvent::Status {
                status,
                wait_reason,
            },
            ExecEvent::Agent(event) => WireEvent::Agent { event },
            ExecEvent::Approval(request) => WireEvent::Approval { request },
        }
    }
}

impl From<WireEvent> for ExecEvent {
    fn from(e: WireEvent) -> ExecEvent {
        match e {
            WireEvent::Status {
                status,
                wait_reason,
            } => ExecEvent::Status {
                status,
                wait_reason,
            },
            WireEvent::Agent { event } => ExecEvent::Agent(event),
            WireEvent::Approval { request } => ExecEvent::Approval(request),
        }
    }
}

/// `POST tasks/{id}/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventBatch {
    /// The number of `events[0]` (events count from 0 per task).
    pub first: u64,
    pub events: Vec<WireEvent>,
}

/// The answer to `events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct EventsReply {
    /// How many events of the task the server holds (the next number it expects).
    pub received: u64,
    /// Stop the agent: the task was cancelled.
    pub cancel: bool,
    /// Decisions for requests this task waits on, handed over once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<WireAnswer>,
}

/// `POST tasks/{id}/finish`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinishRequest {
    /// How many events the daemon sent for the task in all.
    pub events: u64,
    /// How it ended: the executor's own outcome, as JSON.
    pub outcome: TaskOutcome,
}

/// The answer to `finish`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishReply {
    /// The task's status as recorded.
    pub status: TaskStatus,
}

/// [`VALIDATED_HEADER`]: a directory the daemon validated natively.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validated {
    /// The directory exactly as the request names it.
    pub dir: String,
    pub canonical: String,
    /// Privacy-stripped for the daemon's user.
    pub display: String,
    pub dev: u64,
    pub ino: u64,
}

/// `POST tokens` (control socket, or `berth-server` with its bearer token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    pub name: String,
    /// On `berth-server`: the member it is for (default: the caller; only an admin
    /// names another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// A daemon token as listed: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub name: String,
    /// The machine that registered with it, once one has.
    pub machine_id: Option<MachineId>,
    pub machine_name: Option<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
    /// Whether that machine is online now (heartbeat within the window).
    pub online: bool,
    pub last_seen: Option<String>,
    /// The member it belongs to (`berth-server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// The answer to `POST tokens`: the only time the token is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedToken {
    pub name: String,
    pub token: String,
    pub created_at: String,
}

/// The token routes, on the control socket (and `berth-server`'s guarded listener):
/// `POST` creates ([`NewToken`] → [`CreatedToken`]), `GET` lists ([`TokenInfo`]s),
/// `DELETE tokens/{name}` revokes. Never reachable through a daemon.
pub const TOKENS: &str = "/api/v1/daemon/tokens";
