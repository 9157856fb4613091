//! The local agent's integration tests, one module per former test file.

mod agents;
mod daemon_parts;
mod fence;
mod groups;
mod journal;
mod places;
mod processes;
mod validate;
