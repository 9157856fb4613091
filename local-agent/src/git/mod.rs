//! Berth's one way to run `git`: for the change record's shadow repositories, the
//! sessions' worktrees and the CLI.
//!
//! A repository is input from outside the user's shell: a fenced agent may have written
//! its configuration (a nested repository's `.git/config`, a `commondir` pointing at a
//! config of its own), and git runs the programs a configuration names. So every git
//! Berth runs stands behind two walls, either of which holds alone:
//!
//! - **its configuration**: no system or global file (`GIT_CONFIG_NOSYSTEM`,
//!   `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_ATTR_NOSYSTEM`), none of the caller's `GIT_*`
//!   variables, and core's [`berth_core::git::OVERRIDES`] on its command line, which
//!   outrank every file a repository has and reach the gits it starts itself;
//! - **a fence of its own** ([`fence`]): on Linux a Landlock domain in which it may
//!   execute git alone (its binary, its exec path, its loader) and write only where
//!   the step says ([`Writes`]); on macOS a Seatbelt profile of the same. A program a
//!   repository names then fails to start (`EACCES`), whatever key named it.
//!
//! It never prompts for credentials and reads no standard input, and its failure names
//! the command and what git said. The few values of the user's own configuration
//! Berth honours (the global excludes file, the name and e-mail for a worktree's
//! commits) are read by [`user`], through the same walls.

mod fence;
mod user;

pub use fence::{Installed, installed, seatbelt_profile};
pub use user::{UserGit, user};

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

/// Why a `git` command failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("git {args} failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("cannot run git: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Where a git step may write, besides `/dev/null`: nowhere (a diff, a `rev-parse`), or
/// beneath these directories (the shadow store; a worktree and its repository's git
/// directory). Everything else it may only read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Writes {
    Nothing,
    Beneath(Vec<PathBuf>),
}

impl Writes {
    /// Beneath `dir` alone.
    pub fn beneath(dir: impl Into<PathBuf>) -> Writes {
        Writes::Beneath(vec![dir.into()])
    }

    pub(crate) fn paths(&self) -> &[PathBuf] {
        match self {
            Writes::Nothing => &[],
            Writes::Beneath(p) => p,
        }
    }
}

/// One `git` to run, behind the walls of the module's documentation. Built like a
/// [`std::process::Command`]; [`Git::spawn`] and [`Git::output`] start it in its fence.
#[derive(Debug)]
pub struct Git {
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    stdin: Option<Stdio>,
    stdout: Option<Stdio>,
    stderr: Option<Stdio>,
    writes: Writes,
    /// Reads the user's global configuration (only for [`user`]'s `git config`).
    global: bool,
    /// Tests only: start it without its fence, to prove each wall alone.
    #[cfg(test)]
    unfenced: bool,
}

/// `git` that may write only as `writes` says, ready for its arguments.
pub fn command(writes: Writes) -> Git {
    let mut args = Vec::with_capacity(2 * berth_core::git::OVERRIDES.len() + 8);
    for (k, v) in berth_core::git::OVERRIDES {
        args.push(OsString::from("-c"));
        args.push(OsString::from(format!("{k}={v}")));
    }
    Git {
        args,
        env: Vec::new(),
        cwd: None,
        stdin: None,
        stdout: None,
        stderr: None,
        writes,
        global: false,
        #[cfg(test)]
        unfenced: false,
    }
}

/// `git -C dir`, that may write only as `writes` says.
pub fn in_dir(dir: &Path, writes: Writes) -> Git {
    let mut c = command(writes);
    c.arg("-C").arg(dir);
    c
}

impl Git {
    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Git {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(&mut self, args: I) -> &mut Git
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets one variable for git (after the module's own are set: a caller may set
    /// `GIT_ALTERNATE_OBJECT_DIRECTORIES` or `GIT_LITERAL_PATHSPECS`, never undo the
    /// walls: the configuration variables are set last).
    pub fn env(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Git {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Git {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    pub fn stdin(&mut self, s: Stdio) -> &mut Git {
        self.stdin = Some(s);
        self
    }

    pub fn stdout(&mut self, s: Stdio) -> &mut Git {
        self.stdout = Some(s);
        self
    }

    pub fn stderr(&mut self, s: Stdio) -> &mut Git {
        self.stderr = Some(s);
        self
    }

    /// Reads the user's global configuration too (`~/.gitconfig`, `~/.config/git/config`):
    /// only for reading values with `git config`, never for a step that acts.
    pub(crate) fn with_global_config(&mut self) -> &mut Git {
        self.global = true;
        self
    }

    /// The arguments as shown in a failure (without the module's own `-c` overrides).
    fn shown(&self) -> String {
        self.args[2 * berth_core::git::OVERRIDES.len()..]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The process as it will be started: the program (git, or `sandbox-exec` around
    /// it), its arguments and its whole environment.
    fn build(&mut self) -> std::process::Command {
        let installed = installed();
        let git: OsString =
            installed.map_or_else(|| OsString::from("git"), |i| i.git.clone().into());
        let mut c = match installed.and_then(|i| fence::seatbelt_wrap(i, &self.writes)) {
            Some((program, pre)) => {
                let mut c = std::process::Command::new(program);
                c.args(pre).arg("--").arg(&git);
                c
            }
            None => std::process::Command::new(&git),
        };
        c.args(&self.args);
        // None of the caller's git variables: they carry configuration
        // (GIT_CONFIG_PARAMETERS, GIT_CONFIG_COUNT), programs (GIT_SSH_COMMAND,
        // GIT_EXTERNAL_DIFF, GIT_EDITOR), redirections (GIT_DIR, GIT_INDEX_FILE) and
        // trace files (GIT_TRACE*).
        for (k, _) in std::env::vars_os() {
            if k.as_encoded_bytes()
                .starts_with(berth_core::git::ENV_PREFIX.as_bytes())
            {
                c.env_remove(k);
            }
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_PROTOCOL_FROM_USER", "0");
        if !self.global {
            c.env("GIT_CONFIG_GLOBAL", "/dev/null");
        }
        if let Some(dir) = &self.cwd {
            c.current_dir(dir);
        }
        c.stdin(self.stdin.take().unwrap_or_else(Stdio::null));
        if let Some(s) = self.stdout.take() {
            c.stdout(s);
        }
        if let Some(s) = self.stderr.take() {
            c.stderr(s);
        }
        c
    }

    /// Starts git in its fence.
    pub fn spawn(&mut self) -> std::io::Result<Child> {
        let cmd = self.build();
        #[cfg(test)]
        if self.unfenced {
            let mut cmd = cmd;
            return cmd.spawn();
        }
        fence::spawn(cmd, &self.writes)
    }

    /// Tests only: no fence, the configuration wall alone.
    #[cfg(test)]
    pub(crate) fn without_fence(&mut self) -> &mut Git {
        self.unfenced = true;
        self
    }

    /// Runs git in its fence to its end, its standard output and error collected.
    pub fn output(&mut self) -> std::io::Result<Output> {
        if self.stdout.is_none() {
            self.stdout = Some(Stdio::piped());
        }
        if self.stderr.is_none() {
            self.stderr = Some(Stdio::piped());
        }
        self.spawn()?.wait_with_output()
    }
}

/// Runs `cmd` with `args`: its standard output, or the failure.
pub fn run<I, S>(mut cmd: Git, args: I) -> Result<Vec<u8>, GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    cmd.args(args);
    let out = cmd.output()?;
    check(out, &cmd.shown())
}

/// [`run`], reading at most `cap` bytes of its output: past them git is stopped and
/// `true` says there was more (a stopped git is not a failure).
pub fn run_capped<I, S>(mut cmd: Git, args: I, cap: usize) -> Result<(Vec<u8>, bool), GitError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    use std::io::Read;
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    let shown = cmd.shown();
    let mut child = cmd.spawn()?;
    let mut out = Vec::new();
    let more = match child.stdout.take() {
        Some(stdout) => {
            let mut limited = stdout.take(cap as u64 + 1);
            limited.read_to_end(&mut out)?;
            out.len() > cap
        }
        None => false,
    };
    if more {
        out.truncate(cap);
        let _ = child.kill();
        let _ = child.wait();
        return Ok((out, true));
    }
    let rest = child.wait_with_output()?;
    check(
        Output {
            stdout: out,
            ..rest
        },
        &shown,
    )
    .map(|out| (out, false))
}

/// [`run`], its output as text without the final newline.
pub fn text<I, S>(cmd: Git, args: I) -> Result<String, GitError>
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

#[cfg(test)]
mod tests;
