//! `berth`: the command line and the local executor.

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    ExitCode::from(cli::run(cli))
}
