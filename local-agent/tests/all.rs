//! Every integration test of the local agent, in one test binary: one link of tokio,
//! hyper and the rest instead of one per file. Each former test file is a module of
//! `suite` (`suite::groups::…`), and the helpers of `common` are compiled once for all.
//!
//! Run one file's tests with its path as the filter:
//! `cargo test -p berth-local-agent --test all -- suite::fence::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

mod common;
mod suite;
