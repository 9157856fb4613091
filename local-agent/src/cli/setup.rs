//! What the commands need before they talk to Berth: this home's directory, an async
//! runtime, and paths from the command line made absolute.

use super::error::CliError;
use berth_local_agent::ExecutorConfig;
use std::path::{Path, PathBuf};

/// This home's directory, as `--home`, `BERTH_HOME` or the platform default says.
pub(super) fn berth_home(home: Option<PathBuf>) -> Result<PathBuf, CliError> {
    ExecutorConfig::from_env(home)
        .map(|c| c.berth_home)
        .map_err(|e| CliError::new(e.to_string(), "pass --home DIR or set BERTH_HOME"))
}

/// A path from the command line, made absolute against the current directory (the
/// server cannot know the client's directory). `~` is the shell's business.
pub(super) fn absolute(path: &Path) -> Result<String, CliError> {
    let abs = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| {
                CliError::new(
                    format!("cannot read the current directory: {e}"),
                    "give an absolute path",
                )
            })?
            .join(path)
    };
    abs.into_os_string().into_string().map_err(|p| {
        CliError::usage(
            format!("{} is not valid UTF-8", PathBuf::from(p).display()),
            "Berth handles UTF-8 paths only; rename the directory",
        )
    })
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            CliError::new(
                format!("cannot start the async runtime: {e}"),
                "check the system's limits (ulimit -n)",
            )
        })
}
