//! Berth's local agent: the native executor that runs agents in a user's real
//! directory, safely, and the pieces it is made of.
//!
//! The server (`berth-web`) calls [`NativeExecutor`] through its `Executor` trait,
//! implemented in `serve.rs` (the runner's own folders name no server type: they take
//! the contract's types from `berth_core::exec` and host helpers from `berth-host`); the
//! CLI uses [`check`] for `berth check` and [`NativeExecutor::replay_leftovers`] at
//! startup. The parts, in the order a run meets them:
//!
//! - [`dir`]: the user's directory validated, pinned and locked; everything that
//!   touches it goes through a [`PinnedDir`], which only [`dir::validate`] hands out
//!   for user paths;
//! - [`settings`]: the layered settings and the trust they need;
//! - [`inject`]: the brief and the sidecar files, journaled, and recovery after a crash;
//! - [`agent`]: the adapters, the fence, the spawn and the process groups;
//! - [`changes`]: the change record of each run (shadow repository, snapshots, diff,
//!   undo, the watcher);
//! - [`run`]: the executor, which puts the parts together in that order;
//! - [`git`]: the one way Berth runs `git`;
//! - [`daemon`]: the same executor for a remote server (`berth daemon`);
//! - [`notify`]: `berth serve`'s desktop notifications and signed webhooks;
//! - [`front`] and `cli`: the `berth` command line.

pub mod agent;
pub mod changes;
pub mod check;
pub mod config;
pub mod daemon;
pub mod dir;
pub mod front;
pub mod git;
pub mod inject;
pub mod notify;
pub mod run;
mod serve;
pub mod settings;

pub use check::{check, check_with, project_layer};
pub use config::ExecutorConfig;
pub use dir::pin::PinnedDir;
pub use inject::journal::Journal;
pub use inject::recover::{ReplayReport, replay_leftovers};
pub use run::{ExecutorError, NativeExecutor};
