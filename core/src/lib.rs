//! Berth's shared core: the rules every surface applies the same way.
//!
//! Nothing here does I/O, spawns, or needs an async runtime, so the same code runs in
//! the server, in the native executor and in the browser (built to
//! `wasm32-unknown-unknown`). The refusal table, the privacy-stripped display and the
//! resolution order live here once; every other crate reads them from here.
//!
//! The `local-binding` feature (default on) adds the types that carry a real local
//! path bound to a session. Browser and cloud builds turn it off, so they cannot even
//! express a binding write.
#![forbid(unsafe_code)]

pub mod api;
pub mod approval;
pub mod binding;
pub mod code;
pub mod context;
pub mod display;
pub mod event;
pub mod exec;
pub mod fence;
pub mod git;
pub mod ids;
// A task's lines: never read in the browser, whose bundle has a size budget.
#[cfg(not(target_arch = "wasm32"))]
pub mod patch;
pub mod path;
pub mod platform;
pub mod policy;
pub mod quote;
pub mod resolve;
pub mod rules;
pub mod settings;
#[cfg(feature = "usage")]
pub mod usage;
pub mod wait;

pub use code::{ErrorCode, Refusal};
pub use context::Context;
pub use ids::{IdError, MachineId, Member, SessionId, TaskId};
pub use path::LocalPath;
pub use platform::Platform;
pub use policy::Permissions;

/// The control socket's file name inside Berth's home; its clients send it as their
/// `Host`.
pub const SOCKET_FILE: &str = "berth.sock";

/// Whether this build carries local-path bindings (`local-binding`).
pub const LOCAL_BINDING: bool = cfg!(feature = "local-binding");
