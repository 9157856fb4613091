//! Linux: starting an agent without copying Berth's address space.
//!
//! `fork` copies the page tables of the whole server (a multi-threaded process, with
//! its database mappings and thread stacks), write-protects every page of it (IPIs to
//! the other threads' CPUs), and the exec then tears the copy down again: about a
//! millisecond per agent, more than the agent's own start. `posix_spawn` avoids that
//! with `clone(CLONE_VM | CLONE_VFORK)`, but cannot do what Berth needs between the
//! clone and the exec. This does the same clone itself, and in the child exactly the
//! steps of the `fork` path in [`crate::agent::process`]:
//!
//! - signal handlers back to their defaults (SIGPIPE too, as `std` does), the mask
//!   emptied last;
//! - the pipes on 0, 1 and 2;
//! - `setsid` (its own session and process group);
//! - `PR_SET_PDEATHSIG(SIGKILL)`, then a check that Berth is still its parent;
//! - `fchdir` to the pinned directory's descriptor;
//! - its `+PGID` line to the group watcher;
//! - with a fence ([`crate::agent::fence`]): the read-only binds of its in-place layer if it
//!   has them (`crate::agent::fence::binds`), the capabilities dropped
//!   (`crate::agent::fence::caps`), `PR_SET_NO_NEW_PRIVS`, `landlock_restrict_self` and
//!   the seccomp filter, in that order (the filter last: it may refuse calls);
//! - every descriptor above 2 closed (`close_range`): one Berth inherited without
//!   close-on-exec would reach the agent, past the fence (the fork path leaves that to
//!   close-on-exec: `std` reports a failed exec through a descriptor of its own);
//! - `execve` of the program resolved beforehand, with exactly the given environment.
//!
//! The child runs on its own stack in the parent's memory while the parent's thread
//! waits (`CLONE_VFORK`), so it only makes system calls: nothing allocates, locks or
//! unwinds there. A step that fails stores its errno in memory the parent reads once
//! the clone returns, and the child exits 127 without running anything.
//!
//! The parent keeps a pidfd to wait for the exit (no `SIGCHLD` race, no pid reuse).

use crate::agent::fence::caps;
use rustix::process::{Pid, PidfdFlags, WaitIdOptions};
use std::ffi::{CString, OsStr, OsString, c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicI32, Ordering};

/// The child's stack: its few system calls need little; the kernel needs none.
const STACK: usize = 64 * 1024;

/// Whether the kernel has what this needs (pidfds: Linux 5.3). Checked once.
pub fn supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        std::env::var_os("BERTH_SPAWN_FORK").is_none()
            && rustix::process::pidfd_open(rustix::process::getpid(), PidfdFlags::empty()).is_ok()
    })
}

/// What to start, and where.
#[derive(Debug)]
pub struct Request<'a> {
    pub program: &'a str,
    pub args: &'a [String],
    pub env: &'a [(OsString, OsString)],
    /// The pinned directory.
    pub dir: BorrowedFd<'a>,
    /// The write end of the group watcher's pipe.
    pub watcher: BorrowedFd<'a>,
    /// A pipe for standard input (else `/dev/null`).
    pub stdin: bool,
    /// The fence to confine the agent in, prepared by [`crate::agent::fence::prepare`].
    pub fence: Option<&'a crate::agent::fence::Prepared>,
}

/// A started agent: its pid, a pidfd to wait on, and the parent's ends of its pipes.
#[derive(Debug)]
pub struct Spawned {
    pub pid: Pid,
    pub pidfd: OwnedFd,
    pub stdin: Option<OwnedFd>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// What `execvp` does with a name that has no slash: the first executable regular
/// file of that name along the agent's own `PATH` (else Berth's, else the default).
/// Empty entries (the working directory) are skipped: the agent's working directory
/// is not Berth's.
pub fn resolve(program: &str, env: &[(OsString, OsString)]) -> std::io::Result<CString> {
    let not_found = || std::io::Error::from(std::io::ErrorKind::NotFound);
    if program.is_empty() {
        return Err(not_found());
    }
    if program.contains('/') {
        return CString::new(program).map_err(|_| not_found());
    }
    let path: OsString = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let mut denied = false;
    for dir in path.as_bytes().split(|b| *b == b':') {
        if dir.is_empty() {
            continue;
        }
        let mut candidate = dir.to_vec();
        candidate.push(b'/');
        candidate.extend_from_slice(program.as_bytes());
        let candidate = std::path::PathBuf::from(OsStr::from_bytes(&candidate));
        let Ok(md) = std::fs::metadata(&candidate) else {
            continue;
        };
        if !md.is_file() {
            continue;
        }
        match rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK) {
            Ok(()) => {
                return CString::new(candidate.into_os_string().into_vec())
                    .map_err(|_| not_found());
            }
            Err(_) => denied = true,
        }
    }
    Err(if denied {
        std::io::Error::from(std::io::ErrorKind::PermissionDenied)
    } else {
        not_found()
    })
}

/// Everything the child reads, prepared by the parent (the child allocates nothing).
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    stdio: [RawFd; 3],
    dir: RawFd,
    watcher: RawFd,
    parent: libc::pid_t,
    /// The fence's Landlock ruleset, or -1 for no fence.
    ruleset: RawFd,
    /// `landlock_restrict_self`'s flags.
    restrict_flags: u32,
    /// The fence's seccomp program (set whenever `ruleset` is).
    fprog: *const libc::sock_fprog,
    /// The fence's read-only binds, or null.
    binds: *const crate::agent::fence::binds::Binds,
    /// The fence's capability step (applied only with a fence).
    caps: crate::agent::fence::caps::Drop,
    /// The errno of the step that failed; 0 if the exec happened.
    error: AtomicI32,
    /// The fence's step under way ([`FenceStep`]), so its failure is named.
    fence_step: AtomicI32,
}

/// The fence's steps in the child, as [`ChildArgs::fence_step`] records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum FenceStep {
    None = 0,
    NoNewPrivs = 1,
    Landlock = 2,
    Seccomp = 3,
    Binds = 4,
    Ambient = 5,
    Securebits = 6,
    Bounding = 7,
    Capset = 8,
}

impl FenceStep {
    fn from_raw(raw: i32) -> FenceStep {
        [
            FenceStep::NoNewPrivs,
            FenceStep::Landlock,
            FenceStep::Seccomp,
            FenceStep::Binds,
            FenceStep::Ambient,
            FenceStep::Securebits,
            FenceStep::Bounding,
            FenceStep::Capset,
        ]
        .into_iter()
        .find(|s| *s as i32 == raw)
        .unwrap_or(FenceStep::None)
    }

    fn call(self) -> &'static str {
        match self {
            FenceStep::None => "",
            FenceStep::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
            FenceStep::Landlock => "landlock_restrict_self",
            FenceStep::Seccomp => "prctl(PR_SET_SECCOMP)",
            FenceStep::Binds => "unshare (the mount namespace of the read-only binds)",
            FenceStep::Ambient => caps::Step::Ambient.call(),
            FenceStep::Securebits => caps::Step::Securebits.call(),
            FenceStep::Bounding => caps::Step::Bounding.call(),
            FenceStep::Capset => caps::Step::Capset.call(),
        }
    }

    /// The step of a failed capability call.
    fn of_caps(step: caps::Step) -> FenceStep {
        match step {
            caps::Step::Ambient => FenceStep::Ambient,
            caps::Step::Securebits => FenceStep::Securebits,
            caps::Step::Bounding => FenceStep::Bounding,
            caps::Step::Capset => FenceStep::Capset,
        }
    }
}

fn cstring(b: &[u8]) -> std::io::Result<CString> {
    CString::new(b).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an argument or variable contains a NUL byte",
        )
    })
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// Starts the agent as described in the module's documentation.
///
/// Call it from a thread that outlives the agent (an async worker, not a blocking-pool
/// thread): `PR_SET_PDEATHSIG` fires when the thread that created the child exits.
#[allow(unsafe_code)]
pub fn spawn(req: &Request<'_>) -> std::io::Result<Spawned> {
    let path = resolve(req.program, req.env)?;
    let argv: Vec<CString> = std::iter::once(req.program.as_bytes())
        .chain(req.args.iter().map(|a| a.as_bytes()))
        .map(cstring)
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = req
        .env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(&kv)
        })
        .collect::<Result<_, _>>()?;
    let argv_ptrs: Vec<*const libc::c_char> = argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp_ptrs: Vec<*const libc::c_char> = envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();

    let (stdin_child, stdin_parent) = if req.stdin {
        let (r, w) = pipe()?;
        (r, Some(w))
    } else {
        let null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        (null, None)
    };
    let (stdout_parent, stdout_child) = pipe()?;
    let (stderr_parent, stderr_child) = pipe()?;

    // Built here: the child only passes its address to the kernel.
    let fprog = req.fence.map(|f| libc::sock_fprog {
        len: f.filter().len() as u16,
        filter: f.filter().as_ptr().cast_mut(),
    });
    let args = ChildArgs {
        path: path.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        stdio: [
            stdin_child.as_raw_fd(),
            stdout_child.as_raw_fd(),
            stderr_child.as_raw_fd(),
        ],
        dir: req.dir.as_raw_fd(),
        watcher: req.watcher.as_raw_fd(),
        parent: rustix::process::getpid().as_raw_nonzero().get(),
        ruleset: req
            .fence
            .map_or(-1, crate::agent::fence::Prepared::ruleset_fd),
        restrict_flags: req
            .fence
            .map_or(0, crate::agent::fence::Prepared::restrict_flags),
        fprog: fprog.as_ref().map_or(std::ptr::null(), std::ptr::from_ref),
        binds: req
            .fence
            .and_then(crate::agent::fence::Prepared::binds)
            .map_or(std::ptr::null(), std::ptr::from_ref),
        caps: caps::Drop::of_this_process(),
        error: AtomicI32::new(0),
        fence_step: AtomicI32::new(FenceStep::None as i32),
    };
    let mut stack = vec![0u8; STACK];

    // SAFETY: `child` runs on `stack` (alive until this function returns; the parent
    // thread is suspended until the child execs or exits, CLONE_VFORK) and reads only
    // `args` and the C strings, the fence's descriptor (held by `req.fence`) and the
    // seccomp program (`fprog`, pointing into `req.fence`) it points to, all alive here. Every signal is blocked
    // around the clone so no handler of Berth's runs on the child's stack; the child
    // resets the handlers before it unblocks them. `clone` returns the pid, or -1.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = stack.as_mut_ptr().add(STACK);
        let top = top.sub(top as usize % 16);
        let pid = libc::clone(
            child,
            top.cast::<c_void>(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(&args).cast_mut().cast::<c_void>(),
        );
        let err = std::io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(err);
        }
        pid
    };
    drop(stack);
    drop((stdin_child, stdout_child, stderr_child));
    let pid = Pid::from_raw(pid).ok_or_else(|| std::io::Error::other("clone returned pid 0"))?;
    let failed = args.error.load(Ordering::SeqCst);
    if failed != 0 {
        // It exited without running anything: reap it, and say why.
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        let err = std::io::Error::from_raw_os_error(failed);
        let step = FenceStep::from_raw(args.fence_step.load(Ordering::SeqCst));
        return Err(if step == FenceStep::None {
            err
        } else {
            std::io::Error::new(
                err.kind(),
                format!("the fence could not be applied: {}: {err}", step.call()),
            )
        });
    }
    let pidfd = match rustix::process::pidfd_open(pid, PidfdFlags::NONBLOCK) {
        Ok(fd) => fd,
        Err(e) => {
            // Not ours to leave running unwatched.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            return Err(e.into());
        }
    };
    Ok(Spawned {
        pid,
        pidfd,
        stdin: stdin_parent,
        stdout: stdout_parent,
        stderr: stderr_parent,
    })
}

/// The exit of a child started by [`spawn`], once it has exited: its exit code, or
/// `None` if a signal ended it. `Ok(None)` while it runs. Reaps it.
pub fn try_reap(pidfd: BorrowedFd<'_>) -> std::io::Result<Option<Option<i32>>> {
    let status = rustix::process::waitid(
        rustix::process::WaitId::PidFd(pidfd),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
    )?;
    Ok(status.map(|s| s.exit_status()))
}

/// The child between the clone and the exec. Only system calls; see [`spawn`].
#[allow(unsafe_code)]
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the parent's `ChildArgs`, alive while the parent is suspended.
    let a = unsafe { &*arg.cast::<ChildArgs>() };
    let fail = |a: &ChildArgs| -> c_int {
        // SAFETY: reading errno, storing it, and `_exit` (no atexit handlers, no
        // unwinding) are all async-signal-safe.
        unsafe {
            let errno = *libc::__errno_location();
            a.error
                .store(if errno == 0 { libc::EIO } else { errno }, Ordering::SeqCst);
            libc::_exit(127)
        }
    };
    // SAFETY: each call below is a thin wrapper of one system call, async-signal-safe,
    // on values prepared by the parent.
    unsafe {
        for sig in 1..=64 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if handled || sig == libc::SIGPIPE {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        for (target, &fd) in a.stdio.iter().enumerate() {
            let target = target as c_int;
            if fd == target {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return fail(a);
                }
            } else if libc::dup2(fd, target) < 0 {
                return fail(a);
            }
        }
        if libc::setsid() < 0 {
            return fail(a);
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return fail(a);
        }
        // Berth may have died before the death signal was armed.
        if libc::getppid() != a.parent {
            *libc::__errno_location() = libc::ESRCH;
            return fail(a);
        }
        if libc::fchdir(a.dir) != 0 {
            return fail(a);
        }
        let line = crate::agent::groups::Line::watch(libc::getpid());
        let bytes = line.as_bytes();
        // One write of fewer than PIPE_BUF bytes: atomic beside other children's.
        let written = libc::write(a.watcher, bytes.as_ptr().cast::<c_void>(), bytes.len());
        if written != bytes.len() as isize {
            if written >= 0 {
                *libc::__errno_location() = libc::EPIPE;
            }
            return fail(a);
        }
        if a.ruleset >= 0 {
            let step = |s: FenceStep| a.fence_step.store(s as i32, Ordering::SeqCst);
            // The binds' contract holds: this child is single-threaded, and `binds`
            // points into `req.fence`, alive for the whole spawn.
            if !a.binds.is_null() {
                step(FenceStep::Binds);
                if !(*a.binds).apply() {
                    return fail(a);
                }
            }
            // After the binds (which may need CAP_SYS_ADMIN), before anything that
            // confines: an agent of root holds no capability.
            if let Err(s) = a.caps.apply() {
                step(FenceStep::of_caps(s));
                return fail(a);
            }
            step(FenceStep::NoNewPrivs);
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return fail(a);
            }
            step(FenceStep::Landlock);
            if libc::syscall(
                libc::SYS_landlock_restrict_self,
                a.ruleset,
                a.restrict_flags,
            ) != 0
            {
                return fail(a);
            }
            step(FenceStep::Seccomp);
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                a.fprog,
                0,
                0,
            ) != 0
            {
                return fail(a);
            }
            step(FenceStep::None);
        }
        // Nothing but stdio reaches the agent: a descriptor Berth inherited without
        // close-on-exec (from whatever started it) would be a way past the fence,
        // which checks paths when they are opened, not descriptors already open.
        // (Every descriptor of Berth's own is close-on-exec.) `close_range` exists
        // wherever Landlock does (Linux 5.9 and 5.13).
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(a.path, a.argv, a.envp);
        fail(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn read_all(fd: OwnedFd) -> String {
        let mut out = String::new();
        std::fs::File::from(fd).read_to_string(&mut out).unwrap();
        out
    }

    fn reap(pidfd: &OwnedFd) -> Option<i32> {
        use std::os::fd::AsFd;
        loop {
            if let Some(code) = try_reap(pidfd.as_fd()).unwrap() {
                return code;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Everything the fork path does, checked from inside the agent.
    #[test]
    fn a_cloned_agent_starts_as_the_fork_path_would() {
        let root = std::env::temp_dir().join(format!("berth-spawn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("linked")).unwrap();
        let pinned = rustix::fs::open(
            root.join("linked"),
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        // Swapped after pinning: the agent must work in the directory pinned, not in
        // whatever the path names now.
        std::fs::rename(root.join("linked"), root.join("moved")).unwrap();
        std::fs::create_dir_all(root.join("linked")).unwrap();
        let (watch_r, watch_w) = pipe().unwrap();
        let script = "pwd -P; echo \"only=$ONLY home=${HOME-unset}\"; \
            read -r line; echo \"stdin=$line\"; \
            set -- $(cut -d' ' -f5,6 /proc/$$/stat); echo \"pgid=$1 sid=$2 pid=$$\"; \
            while read -r k v; do case $k in SigBlk:|SigIgn:) printf '%s\t%s\n' \"$k\" \"$v\";; esac; done < /proc/$$/status; \
            echo oops >&2";
        let args = vec!["-c".to_owned(), script.to_owned()];
        let env = vec![
            (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
            (OsString::from("ONLY"), OsString::from("this")),
        ];
        let spawned = spawn(&Request {
            program: "sh",
            args: &args,
            env: &env,
            dir: std::os::fd::AsFd::as_fd(&pinned),
            watcher: std::os::fd::AsFd::as_fd(&watch_w),
            stdin: true,
            fence: None,
        })
        .unwrap();
        std::fs::File::from(spawned.stdin.unwrap())
            .write_all(b"hello\n")
            .unwrap();
        let out = read_all(spawned.stdout);
        let err = read_all(spawned.stderr);
        assert_eq!(reap(&spawned.pidfd), Some(0), "{out}{err}");
        let pid = spawned.pid.as_raw_nonzero().get();
        let lines: Vec<&str> = out.lines().collect();
        let moved = std::fs::canonicalize(root.join("moved")).unwrap();
        assert_eq!(lines[0], moved.to_str().unwrap(), "the pinned directory");
        assert_eq!(
            lines[1], "only=this home=unset",
            "exactly the given environment"
        );
        assert_eq!(lines[2], "stdin=hello");
        assert_eq!(
            lines[3],
            format!("pgid={pid} sid={pid} pid={pid}"),
            "its own session"
        );
        // No signal blocked, SIGPIPE (13) not ignored: Berth's own settings stay home.
        // The shell reads its own status with builtins: while it waits for a child
        // (a `grep`), dash blocks every signal for a moment around `sigsuspend`, and a
        // child reading the status then sees that instead.
        assert_eq!(lines[4], "SigBlk:\t0000000000000000");
        let ignored = u64::from_str_radix(lines[5].trim_start_matches("SigIgn:\t"), 16).unwrap();
        assert_eq!(
            ignored & (1 << 12),
            0,
            "SIGPIPE is not ignored: {}",
            lines[5]
        );
        assert_eq!(err, "oops\n");
        // Registered with the group watcher before the exec.
        drop(watch_w);
        assert_eq!(read_all(watch_r), format!("+{pid}\n"));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn an_agent_that_cannot_start_runs_nothing() {
        let dir = rustix::fs::open(
            "/",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let (watch_r, watch_w) = pipe().unwrap();
        let env = vec![(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
        let start = |program: &str| {
            spawn(&Request {
                program,
                args: &[],
                env: &env,
                dir: std::os::fd::AsFd::as_fd(&dir),
                watcher: std::os::fd::AsFd::as_fd(&watch_w),
                stdin: false,
                fence: None,
            })
        };
        let missing = start("no-such-agent-anywhere").unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        // Found, but the exec fails in the child (not an executable format): its errno
        // comes back, and the child is reaped.
        let bad = std::env::temp_dir().join(format!("berth-spawn-bad-{}", std::process::id()));
        std::fs::write(&bad, b"\x7fELF not really").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let err = start(bad.to_str().unwrap()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{err}");
        let _ = std::fs::remove_file(&bad);
        drop(watch_w);
        // The failed exec had registered its group (it was about to run), as the fork
        // path does: the watcher forgets a group it finds empty. The name that was
        // not found never got that far.
        let seen = read_all(watch_r);
        assert!(
            seen.starts_with('+') && seen.ends_with('\n') && seen.lines().count() == 1,
            "{seen:?}"
        );
    }

    #[test]
    fn names_resolve_along_the_agents_path() {
        let env = vec![(
            OsString::from("PATH"),
            OsString::from("/nonexistent::/usr/bin:/bin"),
        )];
        let sh = resolve("sh", &env).unwrap();
        assert!(sh.to_bytes().ends_with(b"/sh"), "{sh:?}");
        assert_eq!(
            resolve("no-such-agent-here", &env).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        assert_eq!(resolve("/bin/sh", &env).unwrap().to_bytes(), b"/bin/sh");
        // A directory of that name is not a program.
        let env = vec![(OsString::from("PATH"), OsString::from("/"))];
        assert_eq!(
            resolve("usr", &env).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }
}
