//! What both `berth` executables share: the CLI's errors, its human output, and the
//! lean client that answers the most frequent commands without the full CLI (issue 17).
//!
//! `berth` is the lean front ([`lean`]); everything it does not answer itself it hands
//! to `berth-full` (the whole CLI: `serve`, `daemon`, `chat`, …) with `exec`. Both print
//! through [`render`] and report through [`error::CliError`], so a command's output is
//! the same whichever of them ran it.

pub mod error;
pub mod interrupt;
pub mod lean;
pub mod live;
pub mod render;
pub mod wire;

/// A reader that stops early (`berth chat --json | head`) is not an error: Rust ignores
/// SIGPIPE, so `println!` panics on the closed pipe; exit quietly as the signal would
/// (128 + SIGPIPE) instead of printing a panic. Every other panic is reported as usual.
pub fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to stdout") && text.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
