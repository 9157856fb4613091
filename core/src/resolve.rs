//! Resolution: where does a task run?
//!
//! One pure function, [`resolve`], decides for the server at claim time, for the
//! executor right before a run and for the browser's preview. It is generic over what
//! is known of the binding ([`BindingFacts`]), so the browser build, which has no real
//! paths, runs exactly the same precedence.

use crate::binding::{BindMode, BindingFacts, MachineId};
use crate::code::ErrorCode;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a task came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The `berth` CLI on the user's machine (control socket).
    Desktop,
    /// The browser UI.
    Web,
    /// A chat channel (Slack, Lark).
    Channel,
    /// A script using the control socket's API.
    Api,
}

impl Origin {
    /// Whether this surface may ever reach a local path.
    pub const fn may_reach_local_paths(self) -> bool {
        match self {
            Origin::Desktop | Origin::Api => true,
            Origin::Web | Origin::Channel => false,
        }
    }

    /// Parses the contract spelling.
    pub fn from_name(name: &str) -> Option<Origin> {
        [Origin::Desktop, Origin::Web, Origin::Channel, Origin::Api]
            .into_iter()
            .find(|o| o.as_str() == name)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Origin::Desktop => "desktop",
            Origin::Web => "web",
            Origin::Channel => "channel",
            Origin::Api => "api",
        }
    }
}

/// What kind of server the task is resolved for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// `berth serve` with its embedded executor, or a daemon attached to it.
    Local,
    /// The cloud build (`berth-server`): never a local path.
    Cloud,
}

impl Runtime {
    pub const fn as_str(self) -> &'static str {
        match self {
            Runtime::Local => "local",
            Runtime::Cloud => "cloud",
        }
    }

    /// Parses the contract spelling.
    pub fn from_name(name: &str) -> Option<Runtime> {
        [Runtime::Local, Runtime::Cloud]
            .into_iter()
            .find(|r| r.as_str() == name)
    }
}

/// A project's local-directory resource on one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectDir<D> {
    pub machine: MachineId,
    pub dir: D,
    pub mode: BindMode,
}

/// Everything resolution looks at.
#[derive(Debug)]
pub struct Request<'a, B: BindingFacts> {
    pub origin: Origin,
    pub runtime: Runtime,
    /// The session's explicit binding, if any.
    pub binding: Option<&'a B>,
    /// The directory resources of the session's project, if any.
    pub project_dirs: &'a [ProjectDir<B::Dir>],
    /// The machine asking to run the task; `None` when none asks (a server with no
    /// executor for the session): then no binding or project directory is its.
    pub claimer: Option<&'a MachineId>,
    /// Machines currently online (the claimer counts as online whether listed or not).
    pub online: &'a [MachineId],
}

/// Why a resolution came out the way it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// An unbound session from a surface that never reaches local paths.
    OriginNeverLocal { origin: Origin },
    /// An unbound session on the cloud runtime.
    CloudRuntime,
    /// A bound session, but the task came from a surface that may not use the binding.
    BoundOriginCannotBind { origin: Origin },
    /// A bound session on the cloud runtime.
    BoundInCloud,
    /// The session's own binding.
    SessionBinding,
    /// The session is bound on a machine that is offline.
    BoundMachineOffline { machine: MachineId },
    /// The session is bound on another machine, which is online.
    BoundElsewhere { machine: MachineId },
    /// The project has a directory on the claiming machine.
    ProjectDirectory,
    /// No binding and no project directory for this machine.
    NoDirectory,
}

impl Reason {
    /// The stable name of the reason, as serialized in its `reason` tag.
    pub const fn code(&self) -> &'static str {
        match self {
            Reason::OriginNeverLocal { .. } => "origin_never_local",
            Reason::CloudRuntime => "cloud_runtime",
            Reason::BoundOriginCannotBind { .. } => "bound_origin_cannot_bind",
            Reason::BoundInCloud => "bound_in_cloud",
            Reason::SessionBinding => "session_binding",
            Reason::BoundMachineOffline { .. } => "bound_machine_offline",
            Reason::BoundElsewhere { .. } => "bound_elsewhere",
            Reason::ProjectDirectory => "project_directory",
            Reason::NoDirectory => "no_directory",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::OriginNeverLocal { origin } => write!(
                f,
                "a task from the {} surface never runs in a local directory",
                origin.as_str()
            ),
            Reason::CloudRuntime => f.write_str("the cloud server never runs in a local directory"),
            Reason::BoundOriginCannotBind { origin } => write!(
                f,
                "the session is bound to a local directory, which a task from the {} surface may not use",
                origin.as_str()
            ),
            Reason::BoundInCloud => f.write_str(
                "the session is bound to a local directory, which the cloud server cannot reach",
            ),
            Reason::SessionBinding => f.write_str("the session is bound to this directory"),
            Reason::BoundMachineOffline { machine } => write!(
                f,
                "the session is bound on machine {machine}, which is offline; the task waits for it"
            ),
            Reason::BoundElsewhere { machine } => {
                write!(f, "the session is bound on machine {machine}, not this one")
            }
            Reason::ProjectDirectory => {
                f.write_str("the session's project has a directory on this machine")
            }
            Reason::NoDirectory => f.write_str(
                "the session has no binding and its project no directory here; the agent works in the session's scratch directory",
            ),
        }
    }
}

/// Where a task runs, with the reason inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resolution<D> {
    /// In the directory itself, on `machine`.
    InPlace {
        dir: D,
        machine: MachineId,
        why: Reason,
    },
    /// In a per-session git worktree of `dir`, on `machine`.
    Worktree {
        dir: D,
        machine: MachineId,
        why: Reason,
    },
    /// In the session's scratch directory, on whichever machine claims it.
    Scratch { why: Reason },
    /// Not yet: the bound machine is offline.
    Wait {
        machine: MachineId,
        code: ErrorCode,
        why: Reason,
    },
    /// Never from here.
    Refuse { code: ErrorCode, why: Reason },
}

impl<D> Resolution<D> {
    /// The stable name of the outcome, as serialized in its `kind` tag.
    pub const fn kind(&self) -> &'static str {
        match self {
            Resolution::InPlace { .. } => "in_place",
            Resolution::Worktree { .. } => "worktree",
            Resolution::Scratch { .. } => "scratch",
            Resolution::Wait { .. } => "wait",
            Resolution::Refuse { .. } => "refuse",
        }
    }

    /// The reason, whatever the outcome.
    pub fn why(&self) -> &Reason {
        match self {
            Resolution::InPlace { why, .. }
            | Resolution::Worktree { why, .. }
            | Resolution::Scratch { why }
            | Resolution::Wait { why, .. }
            | Resolution::Refuse { why, .. } => why,
        }
    }
}

fn placed<D>(dir: D, machine: MachineId, mode: BindMode, why: Reason) -> Resolution<D> {
    match mode {
        BindMode::InPlace => Resolution::InPlace { dir, machine, why },
        BindMode::Worktree => Resolution::Worktree { dir, machine, why },
    }
}

/// Decides where a task runs, in docs/architecture.md's order:
///
/// 1. a web or channel origin, or the cloud runtime, never reaches a local path: a bound
///    session refuses (`origin_cannot_bind`), an unbound one runs in scratch;
/// 2. the session's binding runs on the bound machine only: another online machine is
///    refused (`daemon_mismatch`), and a bound machine that is offline means wait
///    (`daemon_offline`), never a fallback;
/// 3. a project directory for the claiming machine;
/// 4. otherwise scratch.
pub fn resolve<B: BindingFacts>(req: &Request<'_, B>) -> Resolution<B::Dir> {
    let local = req.origin.may_reach_local_paths() && req.runtime == Runtime::Local;
    if !local {
        let bound = req.binding.is_some();
        // The origin is named first when both forbid a local path: it is the surface
        // the user acted on.
        let why = match (req.origin.may_reach_local_paths(), bound) {
            (false, true) => Reason::BoundOriginCannotBind { origin: req.origin },
            (false, false) => Reason::OriginNeverLocal { origin: req.origin },
            (true, true) => Reason::BoundInCloud,
            (true, false) => Reason::CloudRuntime,
        };
        return if bound {
            Resolution::Refuse {
                code: ErrorCode::OriginCannotBind,
                why,
            }
        } else {
            Resolution::Scratch { why }
        };
    }
    if let Some(binding) = req.binding {
        let machine = binding.machine();
        if Some(machine) == req.claimer {
            return placed(
                binding.dir(),
                machine.clone(),
                binding.mode(),
                Reason::SessionBinding,
            );
        }
        return if req.online.contains(machine) {
            Resolution::Refuse {
                code: ErrorCode::DaemonMismatch,
                why: Reason::BoundElsewhere {
                    machine: machine.clone(),
                },
            }
        } else {
            Resolution::Wait {
                machine: machine.clone(),
                code: ErrorCode::DaemonOffline,
                why: Reason::BoundMachineOffline {
                    machine: machine.clone(),
                },
            }
        };
    }
    if let Some(pd) = req
        .project_dirs
        .iter()
        .find(|pd| Some(&pd.machine) == req.claimer)
    {
        return placed(
            pd.dir.clone(),
            pd.machine.clone(),
            pd.mode,
            Reason::ProjectDirectory,
        );
    }
    Resolution::Scratch {
        why: Reason::NoDirectory,
    }
}

#[cfg(test)]
mod tests;
