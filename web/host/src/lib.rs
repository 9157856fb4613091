//! Berth's host helpers: the small pieces of I/O that both the server (`berth-web`)
//! and the runner (`berth-local-agent`'s in-place executor) need, so the runner does
//! not import the server to reach them.
//!
//! - [`private`]: Berth's own directories (0700) and files (0600);
//! - [`clock`]: timestamps as the contract writes them;
//! - [`peer`]: who is at the other end of one of Berth's sockets (a fenced agent is
//!   refused), and the seccomp filter count the fence relies on.
//!
//! `berth-web` re-exports these at its old paths (`berth_web::private`, `::clock`,
//! `::peer`).
#![forbid(unsafe_code)]

pub mod clock;
pub mod peer;
pub mod private;
