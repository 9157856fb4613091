//! Berth's one way to run `git`, for the change record's shadow repositories, the
//! sessions' worktrees and the CLI: a `git` that inherits nothing of the caller's
//! repository environment (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`), never prompts
//! for credentials and reads no standard input, and whose failure names the command
//! and what git said.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Why a `git` command failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git {args} failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("cannot run git: {0}")]
    Spawn(#[from] std::io::Error),
}

/// `git`, ready for its arguments (see the module's documentation).
pub fn command() -> Command {
    let mut c = Command::new("git");
    c.env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .stdin(Stdio::null());
    c
}

/// `git -C dir`.
pub fn in_dir(dir: &Path) -> Command {
    let mut c = command();
    c.arg("-C").arg(dir);
    c
}

/// Runs `cmd` with `args`: its standard output, or the failure.
pub fn run<I, S>(mut cmd: Command, args: I) -> Result<Vec<u8>, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = cmd.args(&args).output()?;
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    check(out, &shown)
}

/// [`run`], its output as text without the final newline.
pub fn text<I, S>(cmd: Command, args: I) -> Result<String, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = run(cmd, args)?;
    Ok(String::from_utf8_lossy(&out)
        .trim_end_matches('\n')
        .to_owned())
}

/// A finished `git`'s output (`args` as shown in the failure): its standard output if it
/// succeeded.
pub fn check(out: Output, args: &str) -> Result<Vec<u8>, GitError> {
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(failed(&out, args))
    }
}

/// The failure of a finished `git` (`args` as shown), for a caller that judges its exit
/// status itself.
pub fn failed(out: &Output, args: &str) -> GitError {
    GitError::Failed {
        args: args.to_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    }
}
