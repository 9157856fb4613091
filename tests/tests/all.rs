//! Every end-to-end test but `audit.rs`, in one test binary: one link instead of one
//! per file. Each former test file is a module of `suite` (`suite::faults::…`).
//!
//! Run one file's tests with its path as the filter:
//! `cargo test -p berth-tests --test all -- suite::faults::`.
//!
//! `audit.rs` stays a test binary of its own: it turns the whole system's audit on for
//! its run, and no other test may run beside it meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

/// A throwaway PostgreSQL server for this binary (its one cluster, started on first
/// use), shared with the web crate's tests: `suite::postgres` and `suite::deployed`.
#[path = "../../web/tests/common/pg.rs"]
mod pg;
mod suite;
