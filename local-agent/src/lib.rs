//! Berth's local agent: the native executor that runs agents in a user's real
//! directory, safely, and the pieces it is made of.
//!
//! The server (`berth-web`) calls [`NativeExecutor`] through its `Executor` trait; the
//! CLI uses [`check::check`] for `berth check` and [`NativeExecutor::replay_leftovers`]
//! at startup. Everything here that touches a user's directory goes through a
//! [`pin::PinnedDir`], which only [`validate::validate`] hands out for user paths.
//! [`daemon`] runs the same executor for a remote server (`berth daemon`).

pub mod adapter;
pub mod brief;
pub mod changes;
pub mod check;
pub mod config;
pub mod daemon;
pub mod executor;
pub mod fence;
pub mod front;
pub mod groups;
pub mod journal;
pub mod lock;
pub mod pin;
pub mod process;
mod run_fence;
pub mod scratch;
pub mod settings;
pub mod sidecar;
#[cfg(target_os = "linux")]
pub mod spawn;
pub mod trust;
mod turn;
pub mod validate;
pub mod worktree;

pub use check::{check, check_with, project_layer};
pub use config::ExecutorConfig;
pub use executor::{ExecutorError, NativeExecutor};
pub use journal::{Journal, ReplayReport, replay_leftovers};
pub use pin::PinnedDir;
