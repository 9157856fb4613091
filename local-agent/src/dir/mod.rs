//! The user's directory, before anything touches it, in this order:
//!
//! 1. [`validate`]: the refusal rules, symlinks resolved twice, a read/write probe;
//! 2. [`pin`]: the directory held by a descriptor, so a swap after the check is refused
//!    and every later step reaches it through that descriptor;
//! 3. [`lock`]: one run per directory, across processes;
//!
//! and [`fd`], the descriptor-relative I/O every later step reaches it with (walking
//! beneath the pinned descriptor, never following a symlink).

pub mod fd;
pub mod lock;
pub mod pin;
pub mod validate;
