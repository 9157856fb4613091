//! Shared helpers for Berth end-to-end tests.
