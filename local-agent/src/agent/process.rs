//! Starting an agent process and stopping it with everything it started.
//!
//! Every child gets its own session and process group (so cancelling reaches its
//! grandchildren too), an explicit environment built from an allowlist, its working
//! directory set by `fchdir` to the pinned descriptor (the directory that was
//! validated, whatever its path leads to now), `PR_SET_PDEATHSIG(SIGKILL)` so it never
//! outlives Berth, and stdin at `/dev/null` unless the adapter writes to it. What the
//! agent starts in its group is covered too: its group is recorded and registered with
//! the executor's watcher (see [`crate::agent::groups`]) until [`AgentProcess::release`] has
//! seen the group gone.

use crate::agent::adapter::Invocation;
use crate::agent::groups::{self, Group, GroupRecord, Line, WatchPipe, Watcher};
use rustix::process::{Pid, Signal};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::process::{Child, Command};

/// The longest `BERTH_BRIEF` value: Linux caps one environment string at 128 KiB.
pub(crate) const MAX_ENV_BRIEF: usize = 96 * 1024;

/// An agent's output stream.
pub type Output = Box<dyn AsyncRead + Send + Unpin>;

/// Variables passed through from Berth's environment to every agent: the basics of a
/// login, and how to reach the network (proxies, and the CA bundles that a company
/// proxy's certificate needs). docs/agents.md lists them; keep the two in step.
const PASS: [&str; 23] = [
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
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
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
    #[error("cannot record the process group of {program:?}: {source}")]
    Record {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

impl SpawnError {
    /// The task's stable code: a program that is not there is `agent_not_found`.
    pub fn code(&self) -> berth_core::ErrorCode {
        match self {
            SpawnError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                berth_core::ErrorCode::AgentNotFound
            }
            SpawnError::Spawn { .. } => berth_core::ErrorCode::AgentStartFailed,
            SpawnError::Record { .. } => berth_core::ErrorCode::Internal,
        }
    }
}

/// The agent's process, as this side waits for it.
enum Leader {
    /// Started by `fork` (tokio's `Command`): macOS, and kernels without pidfds.
    Forked(Child),
    /// Started by [`crate::agent::spawn`]: a pidfd to wait on, and the exit once reaped.
    #[cfg(target_os = "linux")]
    Cloned {
        pid: u32,
        /// Taken by `Drop` to reap an agent nobody waited for.
        pidfd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
        exit: Option<Option<i32>>,
    },
}

impl Leader {
    fn id(&self) -> Option<u32> {
        match self {
            Leader::Forked(c) => c.id(),
            #[cfg(target_os = "linux")]
            Leader::Cloned { pid, exit, .. } => exit.is_none().then_some(*pid),
        }
    }

    /// Waits for the exit (once reaped, the same answer again).
    async fn wait(&mut self) -> std::io::Result<Option<i32>> {
        match self {
            Leader::Forked(c) => Ok(c.wait().await?.code()),
            #[cfg(target_os = "linux")]
            Leader::Cloned { pidfd, exit, .. } => {
                if let Some(code) = exit {
                    return Ok(*code);
                }
                let pidfd = pidfd
                    .as_ref()
                    .ok_or_else(|| std::io::Error::other("the agent's pidfd is gone"))?;
                loop {
                    let mut ready = pidfd.readable().await?;
                    use std::os::fd::AsFd;
                    if let Some(code) = crate::agent::spawn::try_reap(ready.get_inner().as_fd())? {
                        *exit = Some(code);
                        return Ok(code);
                    }
                    ready.clear_ready();
                }
            }
        }
    }
}

impl std::fmt::Debug for Leader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Leader({:?})", self.id())
    }
}

/// A running agent: the leader of its own process group.
pub struct AgentProcess {
    child: Leader,
    pgid: Option<Pid>,
    /// Whether the leader was waited for (its pgid may then be reused once empty).
    reaped: bool,
    record: Option<GroupRecord>,
    /// The pipe of the watcher the group registered with, to unregister it.
    watcher: Option<Arc<WatchPipe>>,
    pub stdout: Option<Output>,
    pub stderr: Option<Output>,
    /// The agent's stdin, kept open for its driver when the invocation asks
    /// ([`Invocation::stdin_pipe`]: ACP); closing it is the agent's EOF.
    pub stdin: Option<Input>,
}

/// The write end of an agent's stdin.
pub type Input = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// The environment of an agent: the allowlist (plus the adapter's credential
/// prefixes) from Berth's own environment, `HOME`, the settings' `env`, then the
/// adapter's variables ([`Invocation::env`]) and Berth's, which nothing can override.
/// An adapter's variable whose value is a JSON object is laid over the object the
/// agent would have had in it otherwise ([`lay_over`]).
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
    for (k, ours) in &inv.env {
        let before = env
            .iter()
            .rev()
            .find(|(name, _)| name == k)
            .and_then(|(_, v)| v.to_str());
        let value = lay_over(before, ours);
        env.retain(|(name, _)| name != k);
        env.push(((*k).into(), value.into()));
    }
    env.extend(berth.iter().map(|(k, v)| ((*k).into(), v.into())));
    env
}

/// `ours`, a JSON object, laid over `before`, the value the variable had (the user's
/// own, e.g. opencode's `OPENCODE_PERMISSION`): `before`'s text is kept as written
/// and `ours`'s keys are appended, so that they win (a later duplicate key does, in
/// `JSON.parse`), except where `before` gives the key the string `"deny"`, which
/// stays. Without a `before` that is a JSON object, `ours` alone.
pub fn lay_over(before: Option<&str>, ours: &str) -> String {
    use serde_json::Value;
    let Some(before) = before.map(str::trim) else {
        return ours.to_owned();
    };
    let (Ok(Value::Object(theirs)), Ok(Value::Object(mine))) = (
        serde_json::from_str::<Value>(before),
        serde_json::from_str::<Value>(ours),
    ) else {
        return ours.to_owned();
    };
    let added: Vec<String> = mine
        .iter()
        .filter(|(k, _)| theirs.get(*k).and_then(Value::as_str) != Some("deny"))
        .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
        .collect();
    if added.is_empty() {
        return before.to_owned();
    }
    let open = before.strip_suffix('}').unwrap_or(before).trim_end();
    let sep = if theirs.is_empty() { "" } else { "," };
    format!("{open}{sep}{}}}", added.join(","))
}

/// Starts `inv` in the directory `dir` with exactly `env`, its process group recorded
/// under `records` (with `shown`, the directory as the user knows it) and registered
/// with `watcher`; with a `fence`, the agent and everything it starts are confined in
/// it (applied in the child just before the exec, on both the clone and the fork path;
/// Berth itself stays unconfined).
pub async fn spawn_fenced(
    inv: &Invocation,
    dir: BorrowedFd<'_>,
    env: Vec<(OsString, OsString)>,
    records: &Path,
    shown: &str,
    watcher: &Watcher,
    fence: Option<&crate::agent::fence::Prepared>,
) -> Result<AgentProcess, SpawnError> {
    let raw_dir = dir.as_raw_fd();
    let parent = rustix::process::getpid();
    // Watched from before the exec: the agent cannot start anything unwatched. The
    // pipe is held until the spawn is done, so its descriptor stays valid in the child.
    let watcher = watcher.pipe().map_err(|source| SpawnError::Record {
        program: inv.program.clone(),
        source,
    })?;
    let spawn_error = |source| SpawnError::Spawn {
        program: inv.program.clone(),
        source,
    };
    #[cfg(target_os = "linux")]
    let started = if crate::agent::spawn::supported() {
        // SAFETY of the descriptor: the watcher's pipe is held (above) until the spawn
        // returns.
        #[allow(unsafe_code)]
        let watcher_fd = unsafe { BorrowedFd::borrow_raw(watcher.raw()) };
        let spawned = crate::agent::spawn::spawn(&crate::agent::spawn::Request {
            program: &inv.program,
            args: &inv.args,
            env: &env,
            dir,
            watcher: watcher_fd,
            stdin: inv.stdin.is_some() || inv.stdin_pipe,
            fence,
        })
        .map_err(spawn_error)?;
        let pipe = |fd| -> Result<Output, SpawnError> {
            Ok(Box::new(
                tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(spawn_error)?,
            ))
        };
        let mut kept = None;
        let stdin = match (spawned.stdin, inv.stdin.as_deref()) {
            (Some(fd), Some(bytes)) => {
                // Most prompts fit the pipe's buffer: written now by the system call
                // itself, and closed (EOF) at once; the rest, if any, below. (Tokio's
                // `try_write` on a pipe just registered knows no readiness yet: it
                // would leave the whole prompt until the reactor's next turn, after
                // whatever else is ready on this worker, while the agent waits.)
                rustix::io::ioctl_fionbio(&fd, true).map_err(|e| spawn_error(e.into()))?;
                let written = match rustix::io::write(&fd, bytes) {
                    Ok(n) => n,
                    Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => 0,
                    // The agent closed its stdin already (EPIPE): nothing to write; its
                    // output and exit tell the rest.
                    Err(_) => bytes.len(),
                };
                if written < bytes.len() {
                    let sender =
                        tokio::net::unix::pipe::Sender::from_owned_fd(fd).map_err(spawn_error)?;
                    Some((sender, written))
                } else {
                    None
                }
            }
            (Some(fd), None) => {
                let sender =
                    tokio::net::unix::pipe::Sender::from_owned_fd(fd).map_err(spawn_error)?;
                kept = Some(Box::new(sender) as Input);
                None
            }
            _ => None,
        };
        let pid = spawned.pid.as_raw_nonzero().get();
        Some((
            Leader::Cloned {
                pid: pid.unsigned_abs(),
                // SAFETY: an owned descriptor, open for the AsyncFd's whole life.
                #[allow(unsafe_code)]
                pidfd: Some(unsafe {
                    tokio::io::unix::AsyncFd::register_with_interest(
                        spawned.pidfd,
                        tokio::io::Interest::READABLE,
                    )
                    .map_err(|e| spawn_error(std::io::Error::other(e.to_string())))?
                }),
                exit: None,
            },
            stdin.map(|(s, written)| {
                (
                    Box::new(s) as Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
                    written,
                )
            }),
            pipe(spawned.stdout)?,
            pipe(spawned.stderr)?,
            kept,
        ))
    } else {
        None
    };
    #[cfg(not(target_os = "linux"))]
    let started = None;
    let (leader, stdin, stdout, stderr, kept) = match started {
        Some(s) => s,
        None => {
            // macOS: the agent runs inside the fence's Seatbelt profile, by
            // `sandbox-exec`, which executes it in place (same pid, same group).
            #[cfg(target_os = "macos")]
            let (program, args) = match fence {
                Some(f) => {
                    let w = f.wrap(&inv.program, &inv.args);
                    (w.program, w.args)
                }
                None => (inv.program.clone(), inv.args.clone()),
            };
            #[cfg(not(target_os = "macos"))]
            let (program, args) = (&inv.program, &inv.args);
            let mut cmd = Command::new(program);
            cmd.args(args)
                .env_clear()
                .envs(env)
                .stdin(if inv.stdin.is_some() || inv.stdin_pipe {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            // Must resolve to some directory; the child fchdirs to the pinned one
            // before exec.
            cmd.current_dir("/");
            in_child(
                &mut cmd,
                raw_dir,
                parent,
                watcher.raw(),
                fence.map(crate::agent::fence::Prepared::child_fence),
            );
            let mut child = cmd.spawn().map_err(spawn_error)?;
            let piped = child.stdin.take().map(|s| Box::new(s) as Input);
            let (stdin, kept) = if inv.stdin_pipe {
                (None, piped)
            } else {
                (piped.map(|s| (s, 0)), None)
            };
            let stdout = child.stdout.take().map(|s| Box::new(s) as Output);
            let stderr = child.stderr.take().map(|s| Box::new(s) as Output);
            match (stdout, stderr) {
                (Some(o), Some(e)) => (Leader::Forked(child), stdin, o, e, kept),
                _ => {
                    return Err(spawn_error(std::io::Error::other(
                        "the agent's output pipes are missing",
                    )));
                }
            }
        }
    };
    let pgid = leader.id().and_then(|id| Pid::from_raw(id as i32));
    if let (Some(bytes), Some((mut stdin, written))) = (inv.stdin.clone(), stdin) {
        // Written off the caller's path, then closed: the agent sees EOF. An agent that
        // exits without reading is not an error of ours. Started before the group's
        // record is written, so the agent need not wait for it.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes[written..]).await;
            let _ = stdin.shutdown().await;
        });
    }
    let mut proc = AgentProcess {
        stdout: Some(stdout),
        stderr: Some(stderr),
        stdin: kept,
        child: leader,
        pgid,
        reaped: false,
        record: None,
        watcher: Some(watcher),
    };
    if let Err(source) = proc.guard(records, shown).await {
        proc.release().await;
        return Err(SpawnError::Record {
            program: inv.program.clone(),
            source,
        });
    }
    Ok(proc)
}

/// Sets up the child between fork and exec; the fence, if any, last.
#[allow(unsafe_code)]
fn in_child(
    cmd: &mut Command,
    raw_dir: i32,
    parent: Pid,
    watcher: i32,
    fence: Option<crate::agent::fence::ChildFence>,
) {
    // SAFETY: the closure runs in the forked child before exec, so it may only call
    // async-signal-safe functions: rustix's calls below are direct system calls that
    // neither allocate nor lock, and errors are built from raw errno values without
    // allocating. `raw_dir` is the pinned directory's descriptor, kept open by the
    // parent for the whole spawn (it is CLOEXEC, so it closes at exec); so is
    // `watcher`, the write end of the watcher's pipe, and the line is formatted on the
    // stack. The fence's program was copied before the fork (`fence`, moved into the
    // closure) and its ruleset descriptor is held open by the caller's `Prepared` for
    // the whole spawn; applying it is three system calls.
    unsafe {
        cmd.pre_exec(move || {
            let os = |e: rustix::io::Errno| std::io::Error::from_raw_os_error(e.raw_os_error());
            rustix::process::setsid().map_err(os)?;
            // Linux: the kernel kills the agent when Berth dies. macOS has no such
            // signal: there the watcher (see `groups`) alone stops the agent's group
            // when Berth's end of its pipe closes; the `+PGID` below registers the
            // group before the exec either way.
            #[cfg(target_os = "linux")]
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(os)?;
            // The parent may have died before the death signal was armed.
            if rustix::process::getppid() != Some(parent) {
                return Err(os(rustix::io::Errno::SRCH));
            }
            rustix::process::fchdir(BorrowedFd::borrow_raw(raw_dir)).map_err(os)?;
            let line = Line::watch(rustix::process::getpid().as_raw_nonzero().get());
            let bytes = line.as_bytes();
            // One write of fewer than PIPE_BUF bytes: atomic beside other children's.
            let written = rustix::io::write(BorrowedFd::borrow_raw(watcher), bytes);
            if written.map_err(os)? != bytes.len() {
                return Err(os(rustix::io::Errno::PIPE));
            }
            if let Some(fence) = &fence {
                fence.apply()?;
            }
            Ok(())
        });
    }
}

impl std::fmt::Debug for AgentProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentProcess")
            .field("child", &self.child)
            .field("pgid", &self.pgid)
            .field("reaped", &self.reaped)
            .finish_non_exhaustive()
    }
}

impl AgentProcess {
    /// Records the group durably (the watcher already knows it).
    async fn guard(&mut self, records: &Path, shown: &str) -> std::io::Result<()> {
        let pgid = self
            .pgid()
            .ok_or_else(|| std::io::Error::other("the agent has no pid"))?;
        let start = groups::start_time(pgid)
            .ok_or_else(|| std::io::Error::other("the agent's start time is unreadable"))?;
        // The watcher learns the start time from Berth, which reads it while the leader
        // is its unreaped child (see `groups`). A watcher that cannot be told is dead:
        // the record below still covers the group.
        #[cfg(target_os = "linux")]
        if let Some(watcher) = &self.watcher
            && let Err(e) = watcher.send(&Line::confirm(pgid, start))
        {
            tracing::warn!(pgid, error = %e, "could not tell the watcher an agent's start time");
        }
        let group = Group {
            pgid,
            start,
            dir: shown.to_owned(),
        };
        // A few small local file operations, on this thread: no hand-off to another
        // while the agent starts.
        self.record = Some(GroupRecord::create(records, &group)?);
        Ok(())
    }

    /// Ends the run's hold on its group: kills whatever is left in it, waits until it
    /// is gone, unregisters it from the watcher and deletes the record. Call once the
    /// agent is done (its output read); kills the agent too if it is still running. A
    /// group that would not go stays registered and recorded.
    pub async fn release(mut self) {
        if !self.reaped {
            if let Some(pgid) = self.pgid {
                let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
            }
            let _ = self.wait().await;
        }
        let start = self.record.as_ref().map(GroupRecord::start);
        let gone = match self.pgid() {
            // The leader was reaped: its pgid is ours only while the group has members
            // or no other process took the number.
            Some(pgid)
                if start.is_some_and(|s| groups::start_time(pgid).is_none_or(|t| t == s)) =>
            {
                // Most often the group went with its leader: known at once, without a
                // hand-off to a blocking thread that polls.
                if let Some(id) = Pid::from_raw(pgid) {
                    let _ = rustix::process::kill_process_group(id, Signal::KILL);
                }
                groups::members(pgid).is_empty()
                    || tokio::task::spawn_blocking(move || groups::kill_and_wait(pgid))
                        .await
                        .unwrap_or(false)
            }
            Some(_) | None => true,
        };
        if let (Some(watcher), Some(pgid), true) = (self.watcher.take(), self.pgid(), gone)
            && let Err(e) = watcher.send(&Line::forget(pgid))
        {
            // A watcher that died knows nothing to kill; one that stopped reading may
            // kill this number's group, checked by its leader's start time.
            tracing::warn!(pgid, error = %e, "the process-group watcher was not told a group is gone");
        }
        if let Some(record) = self.record.take()
            && gone
        {
            record.remove();
        }
    }

    /// The process group id (the agent's pid).
    pub fn pgid(&self) -> Option<i32> {
        self.pgid.map(Pid::as_raw_nonzero).map(|p| p.get())
    }

    /// Waits for the agent to exit; its exit code (`None` if killed by a signal).
    pub async fn wait(&mut self) -> std::io::Result<Option<i32>> {
        let code = self.child.wait().await?;
        self.reaped = true;
        Ok(code)
    }

    /// Stops the agent's whole process group: SIGTERM, then SIGKILL after `grace`.
    pub async fn terminate(&mut self, grace: Duration) -> std::io::Result<Option<i32>> {
        if let Some(pgid) = self.pgid {
            let _ = rustix::process::kill_process_group(pgid, Signal::TERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => {
                self.reaped = true;
                // The leader is gone; stragglers in its group are not welcome either.
                if let Some(pgid) = self.pgid {
                    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
                }
                status
            }
            Err(_) => {
                if let Some(pgid) = self.pgid {
                    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
                }
                let code = self.child.wait().await?;
                self.reaped = true;
                Ok(code)
            }
        }
    }
}

impl Drop for AgentProcess {
    /// A run dropped midway takes its whole group down, not only the leader.
    fn drop(&mut self) {
        if !self.reaped
            && let Some(pgid) = self.pgid
        {
            let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
        }
        // A cloned leader nobody waited for is reaped once it is gone (tokio does the
        // same for its own children).
        #[cfg(target_os = "linux")]
        if let Leader::Cloned {
            pidfd, exit: None, ..
        } = &mut self.child
            && let Some(fd) = pidfd.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                use std::os::fd::AsFd;
                while let Ok(mut ready) = fd.readable().await {
                    match crate::agent::spawn::try_reap(ready.get_inner().as_fd()) {
                        Ok(None) => ready.clear_ready(),
                        Ok(Some(_)) | Err(_) => break,
                    }
                }
            });
        }
    }
}
