//! What every test suite of Berth needs and no shipped crate does, in one place:
//! [`TempDir`], a fresh directory removed when dropped, and [`http`], HTTP/1.1 by
//! hand (requests, answers, event streams; blocking, and async with `tokio`). The web
//! crate's tests, the end-to-end tests and the benchmarks (`berth-tests`) use them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

pub mod http;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh directory under the system temp dir (never the temp dir itself, which Berth
/// refuses to bind), in its canonical form, removed on drop. Its name is short (Unix
/// socket paths inside it are limited to 108 bytes) and unique to this process and
/// call: `b<tag>-<pid>-<n>`.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "b{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir.canonicalize().expect("canonical temp dir"))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
