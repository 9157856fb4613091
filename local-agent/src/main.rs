//! `berth-full`: the whole command line and the local executor. `berth` (the lean
//! front, `src/bin/berth.rs`) answers `send`, the lists and `--version` itself and
//! `exec`s this binary, installed next to it, for everything else.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    berth_local_agent::front::quiet_on_closed_pipe();
    let cli = cli::Cli::parse();
    ExitCode::from(cli::run(cli))
}
