//! Berth's server: the API, the store, the scheduler and the web UI.
//!
//! Built with `local-binding` it is embedded in `berth serve`; without it, it is the
//! cloud server `berth-server`, which cannot express a local path.

pub mod admin;
pub mod api;
pub mod backoff;
pub mod clock;
pub mod daemon;
pub mod executor;
pub mod hooks;
pub mod http;
pub mod log;
pub mod metrics;
pub mod net;
pub mod peer;
pub mod private;
pub mod probe;
pub mod scheduler;
pub mod secret;
pub mod server;
pub mod store;
pub mod transcript;
pub mod ui;
