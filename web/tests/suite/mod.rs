//! The web crate's integration tests, one module per former test file.

mod api;
mod cloud;
mod daemons;
mod health;
mod hooks;
mod restart;
mod scheduler;
mod store;
