//! Starting an agent process and stopping it with everything it started.
//!
//! Every child gets its own session and process group (so cancelling reaches its
//! grandchildren too), an explicit environment built from an allowlist, its working
//! directory set by `fchdir` to the pinned descriptor (the directory that was
//! validated, whatever its path leads to now), `PR_SET_PDEATHSIG(SIGKILL)` so it never
//! outlives Berth, and stdin at `/dev/null` unless the adapter writes to it.

use crate::adapter::Invocation;
use rustix::process::{Pid, Signal};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// Variables passed through from Berth's environment to every agent.
const PASS: [&str; 12] = [
    "PATH",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
    "TMPDIR",
    "SHELL",
    "SSL_CERT_FILE",
];

/// Why the agent could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// A running agent: the leader of its own process group.
#[derive(Debug)]
pub struct AgentProcess {
    child: Child,
    pgid: Option<Pid>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// The environment of an agent: the allowlist (plus the adapter's credential
/// prefixes) from Berth's own environment, `HOME`, the settings' `env`, then Berth's
/// variables, which nothing can override.
pub fn agent_env(
    inv: &Invocation,
    home: Option<&std::path::Path>,
    settings_env: &std::collections::BTreeMap<String, String>,
    berth: &[(&str, String)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str().is_some_and(|k| {
                PASS.contains(&k) || inv.pass_prefixes.iter().any(|p| k.starts_with(p))
            })
        })
        .collect();
    if let Some(home) = home {
        env.push(("HOME".into(), home.into()));
    }
    env.extend(settings_env.iter().map(|(k, v)| (k.into(), v.into())));
    env.extend(berth.iter().map(|(k, v)| ((*k).into(), v.into())));
    env
}

/// Starts `inv` in the directory `dir` with exactly `env`.
pub async fn spawn(
    inv: &Invocation,
    dir: BorrowedFd<'_>,
    env: Vec<(OsString, OsString)>,
) -> Result<AgentProcess, SpawnError> {
    let mut cmd = Command::new(&inv.program);
    cmd.args(&inv.args)
        .env_clear()
        .envs(env)
        .stdin(if inv.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Must resolve to some directory; the child fchdirs to the pinned one before exec.
    cmd.current_dir("/");
    let raw_dir = dir.as_raw_fd();
    let parent = rustix::process::getpid();
    in_child(&mut cmd, raw_dir, parent);
    let mut child = cmd.spawn().map_err(|source| SpawnError::Spawn {
        program: inv.program.clone(),
        source,
    })?;
    let pgid = child.id().and_then(|id| Pid::from_raw(id as i32));
    if let (Some(bytes), Some(mut stdin)) = (inv.stdin.clone(), child.stdin.take()) {
        // Written off the caller's path, then closed: the agent sees EOF. An agent that
        // exits without reading is not an error of ours.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        });
    }
    Ok(AgentProcess {
        stdout: child.stdout.take(),
        stderr: child.stderr.take(),
        child,
        pgid,
    })
}

/// Sets up the child between fork and exec.
#[allow(unsafe_code)]
fn in_child(cmd: &mut Command, raw_dir: i32, parent: Pid) {
    // SAFETY: the closure runs in the forked child before exec, so it may only call
    // async-signal-safe functions: rustix's calls below are direct system calls that
    // neither allocate nor lock, and errors are built from raw errno values without
    // allocating. `raw_dir` is the pinned directory's descriptor, kept open by the
    // parent for the whole spawn (it is CLOEXEC, so it closes at exec).
    unsafe {
        cmd.pre_exec(move || {
            let os = |e: rustix::io::Errno| std::io::Error::from_raw_os_error(e.raw_os_error());
            rustix::process::setsid().map_err(os)?;
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(os)?;
            // The parent may have died before the death signal was armed.
            if rustix::process::getppid() != Some(parent) {
                return Err(os(rustix::io::Errno::SRCH));
            }
            rustix::process::fchdir(BorrowedFd::borrow_raw(raw_dir)).map_err(os)?;
            Ok(())
        });
    }
}

impl AgentProcess {
    /// The process group id (the agent's pid).
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw_nonzero).map(|p| p.get())
    }

    /// Waits for the agent to exit; its exit code (`None` if killed by a signal).
    pub async fn wait(&mut self) -> std::io::Result<Option<i32>> {
        let status = self.child.wait().await?;
        Ok(status.code())
    }

    /// Stops the agent's whole process group: SIGTERM, then SIGKILL after `grace`.
    pub async fn terminate(&mut self, grace: Duration) -> std::io::Result<Option<i32>> {
        if let Some(pgid) = self.pgid {
            let _ = rustix::process::kill_process_group(pgid, Signal::TERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => {
                // The leader is gone; stragglers in its group are not welcome either.
                if let Some(pgid) = self.pgid {
                    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
                }
                Ok(status?.code())
            }
            Err(_) => {
                if let Some(pgid) = self.pgid {
                    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
                }
                Ok(self.child.wait().await?.code())
            }
        }
    }
}
