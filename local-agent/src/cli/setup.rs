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
/// server cannot know the client's directory). A leading `~` or `~/` is the user's
/// home (`HOME`), as `berth check` reads it: the shell leaves it alone in quotes and
/// after `--dir=`, and `~/~/code/app does not exist` helps nobody.
pub(super) fn absolute(path: &Path) -> Result<String, CliError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let path = expand_tilde(path, home.as_deref())?;
    let abs = if path.is_absolute() {
        path
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

/// `path` with a leading `~` (alone, or before a separator) replaced by `home`. Other
/// paths are returned as they are. `~name/…` (another user's home) is refused: Berth
/// does not look users up, and reading it as a relative path would name a directory
/// called `~name` in the current one.
fn expand_tilde(path: &Path, home: Option<&Path>) -> Result<PathBuf, CliError> {
    let Some(text) = path.to_str() else {
        return Ok(path.to_owned());
    };
    let rest = match text.strip_prefix('~') {
        None => return Ok(path.to_owned()),
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.trim_start_matches('/'),
        Some(_) => {
            return Err(CliError::usage(
                format!("{text}: Berth expands `~` and `~/…` only, not another user's `~name`"),
                "give the full path, e.g. /home/NAME/…",
            ));
        }
    };
    let home = home.filter(|h| h.is_absolute()).ok_or_else(|| {
        CliError::usage(
            format!("{text}: `~` needs HOME, which is not set to an absolute path"),
            "set HOME, or give the full path",
        )
    })?;
    Ok(if rest.is_empty() {
        home.to_owned()
    } else {
        home.join(rest)
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

#[cfg(test)]
mod tests {
    use super::expand_tilde;
    use std::path::{Path, PathBuf};

    #[test]
    fn a_leading_tilde_is_the_home_and_nothing_else_is_touched() {
        let home = Some(Path::new("/home/alice"));
        let cases = [
            ("~", "/home/alice"),
            ("~/", "/home/alice"),
            ("~/code/app", "/home/alice/code/app"),
            ("~//code", "/home/alice/code"),
            ("code/~/x", "code/~/x"),
            ("/srv/~", "/srv/~"),
            ("./~", "./~"),
        ];
        for (input, want) in cases {
            let got = expand_tilde(Path::new(input), home).unwrap();
            assert_eq!(got, PathBuf::from(want), "{input}");
        }
        let err = expand_tilde(Path::new("~bob/x"), home).unwrap_err();
        assert!(err.message.contains("~bob/x"), "{}", err.message);
        let err = expand_tilde(Path::new("~/x"), None).unwrap_err();
        assert!(err.message.contains("HOME"), "{}", err.message);
        assert!(expand_tilde(Path::new("~/x"), Some(Path::new("rel"))).is_err());
    }
}
