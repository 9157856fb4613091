//! `berth`: the lean front of the command line (issue 17). It answers `berth send`,
//! the lists and `--version` itself, without a runtime, a command tree or a thread
//! ([`berth_local_agent::front::lean`]), and hands every other command line to the
//! full CLI, `berth-full`, installed next to it, by `exec`: the same process, the same
//! arguments, so what clap prints and does is unchanged.

use berth_local_agent::front::lean;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    berth_local_agent::front::quiet_on_closed_pipe();
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(code) = lean::main(&args) {
        return ExitCode::from(code);
    }
    ExitCode::from(exec_full(&args))
}

/// Replaces this process with `berth-full ARGS…`; returns only on failure, with the
/// exit code after saying why.
fn exec_full(args: &[OsString]) -> u8 {
    let here = std::env::current_exe();
    let full = here
        .as_ref()
        .map(|exe| exe.with_file_name(lean::FULL_BINARY));
    let err = match &full {
        Ok(full) => {
            let mut cmd = Command::new(full);
            if let Some(argv0) = args.first() {
                cmd.arg0(argv0);
            }
            cmd.args(args.iter().skip(1)).exec()
        }
        Err(e) => std::io::Error::new(e.kind(), format!("cannot find this program's path: {e}")),
    };
    let path = full
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| lean::FULL_BINARY.to_owned());
    eprintln!("error: cannot run {path}: {err}");
    eprintln!(
        "hint: `berth` runs this command through `{}`, installed next to it; build or install both (cargo build --release -p berth-local-agent, or cargo install --path local-agent)",
        lean::FULL_BINARY
    );
    1
}
