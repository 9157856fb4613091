//! `berth`: the command line and the local executor.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    quiet_on_closed_pipe();
    let cli = cli::Cli::parse();
    ExitCode::from(cli::run(cli))
}

/// A reader that stops early (`berth chat --json | head`) is not an error: Rust ignores
/// SIGPIPE, so `println!` panics on the closed pipe; exit quietly as the signal would
/// (128 + SIGPIPE) instead of printing a panic. Every other panic is reported as usual.
fn quiet_on_closed_pipe() {
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
