//! Berth's server: the API, the store, the scheduler and the web UI.
//!
//! Built with `local-binding` it is embedded in `berth serve`; without it, it is the
//! cloud server `berth-server`, which cannot express a local path.

pub mod admin;
pub mod api;
pub mod backoff;
pub mod daemon;
pub mod executor;
pub mod hooks;
pub mod http;
pub mod log;
pub mod metrics;
pub mod net;
pub mod peer;
pub mod probe;
pub mod scheduler;
pub mod secret;
pub mod server;
pub mod store;
pub mod transcript;
pub mod ui;

// Host helpers shared with the runner live in `berth-host` (web/host); re-exported at
// their old paths so the server's code and the tests name them as before.
pub use berth_host::{clock, private};
