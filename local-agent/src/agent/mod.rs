//! The agent: how Berth starts one and keeps it in hand.
//!
//! - [`adapter`]: each kind's command line, environment and output (Claude Code, Codex,
//!   a plain command, an ACP agent), parsed into transcript events;
//! - [`acp`]: the Agent Client Protocol's client, which drives an ACP agent's turn over
//!   its stdin and stdout;
//! - [`ask`]: requests the `ask` policy puts to a person, sent to the server and
//!   waited for;
//! - [`fence`]: the kernel's confinement of the agent (Landlock and seccomp on Linux,
//!   with read-only binds where a mount namespace is allowed; Seatbelt on macOS);
//! - [`spawn`] (Linux) and [`process`]: starting it in the pinned directory, fenced,
//!   in a process group of its own, and streaming its output;
//! - [`turn`]: one agent process from spawn to exit, its output parsed into events;
//! - [`groups`]: the watcher that stops every process the agent started, even if Berth
//!   dies.

pub mod acp;
pub mod adapter;
pub mod ask;
pub mod fence;
pub mod groups;
pub mod process;
#[cfg(target_os = "linux")]
pub mod spawn;
pub(crate) mod turn;
