//! Every integration test of the web crate, in one test binary: one link of tokio, axum
//! and rustls instead of one per file. Each former test file is a module of `suite`
//! (`suite::store::…`), and the helpers of `common` are compiled once for all.
//!
//! Run one file's tests with its path as the filter:
//! `cargo test -p berth-web --test all -- suite::hooks::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

mod common;
mod suite;
