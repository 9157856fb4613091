//! What every handler shares: the server's state ([`AppState`]), the surface a request
//! came in on ([`Surface`]), and the two as a router's state ([`Ctx`]).

use crate::scheduler::Scheduler;
use crate::store::Store;
use berth_core::Context;
use berth_core::resolve::Origin;
use std::sync::Arc;

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// The Unix control socket: the whole API, binding included.
    Control,
    /// The loopback web listener: read-only, no real paths.
    Web,
    /// `berth-server`'s listener: the whole API of a build without executor.
    Cloud,
}

impl Surface {
    /// The `surface` value of `GET capabilities`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Surface::Control => "control",
            Surface::Web => "web",
            Surface::Cloud => "cloud",
        }
    }

    /// The origin of the messages this surface accepts.
    pub const fn origin(self) -> Origin {
        match self {
            Surface::Control => Origin::Desktop,
            Surface::Web => Origin::Web,
            Surface::Cloud => Origin::Api,
        }
    }
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub scheduler: Scheduler,
    /// Whose home the display forms strip (the server user's).
    pub display: Arc<Context>,
    /// Turns `true` when the server shuts down: live event streams end.
    pub closing: tokio::sync::watch::Receiver<bool>,
    /// Turns `true` first when the server shuts down: `/readyz` answers 503 and daemon
    /// calls are turned away (see `ShutdownHandle::shutdown`).
    pub draining: tokio::sync::watch::Receiver<bool>,
    /// The chat webhooks' state.
    pub channels: Arc<crate::hooks::Channels>,
    /// Remote daemons: tokens, and the machines online.
    pub daemons: crate::daemon::Daemons,
    /// Outgoing requests: to the leader, from a server that does not lead.
    pub http: crate::net::HttpClient,
    /// What `--metrics-listen` serves ([`crate::metrics`]).
    pub metrics: crate::metrics::Metrics,
}

/// A router's state: the shared state and the surface it serves.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub app: AppState,
    pub surface: Surface,
}
