//! What Berth puts into the directory for a run, and takes out again:
//!
//! - [`brief`]: the agent's brief (the session's context), as an argument or a file;
//! - [`sidecar`]: the files written beside the user's own (`CLAUDE.md`, skills), each
//!   journaled before it is written and removed through the pinned descriptor, and the
//!   guard of `.git/hooks`, `.git/config` and `.berth`;
//! - [`journal`]: the durable record of each of those steps;
//! - [`recover`]: replaying the journals a crashed Berth left, at the next start.

pub mod brief;
pub mod journal;
pub mod recover;
pub mod sidecar;
