//! The fence's in-place layer (docs/fence.md §3b, layer 2): `.git/hooks`, `.git/config`
//! and `.berth` inside a writable run directory made read-only *during* the run.
//!
//! Landlock cannot carve a hole into a writable directory: a right granted on the run's
//! directory holds for everything beneath it. This layer gives the agent a mount
//! namespace of its own in which each protected path that exists is bind-mounted onto
//! itself read-only, so a write there fails at once (`EROFS`) instead of being put back
//! after the run by the guard (`crate::inject::sidecar::guard`).
//!
//! - **Only adds.** Where the namespace cannot be made (Ubuntu 24.04 restricts
//!   unprivileged user namespaces), [`available`] says no once per process and runs
//!   go ahead with Landlock and the guard alone; every guarantee the issue names holds
//!   without it.
//! - **As the user.** A user other than root gets a user namespace mapping its own uid
//!   and gid to themselves (not to root): after the `execve` the agent has no
//!   capability anywhere, and the mounts, made in a less privileged namespace, are
//!   locked (`MNT_LOCKED`): they cannot be unmounted to uncover what lies beneath.
//!   Root gets the mount namespace alone, so it keeps its uid and access unchanged.
//! - **Not undone by the agent.** A Landlock-confined process can neither mount nor
//!   unmount (the fence is applied right after this, before the `execve`).
//! - **Not seen outside.** Every mount is made a slave first, so the binds never
//!   propagate back to the user's own namespace; they end with the agent's last process.
//! - **What it does not cover**, and the guard still does: protected paths that do not
//!   exist when the run starts (a repository without `.berth`), and renaming a parent
//!   (`.git` itself) aside to put another in its place. A bind that fails for one path
//!   (e.g. a submount beneath it) leaves that path to the guard.
//!
//! The child's part ([`Binds::apply`]) is system calls only, on values built here
//! before the clone, so it is safe between `clone`/`fork` and `execve`.

use super::NO_BINDS;
use berth_core::LocalPath;
use std::ffi::CString;
use std::sync::OnceLock;

/// The read-only binds of one run, ready for the child.
#[derive(Debug, Clone)]
pub struct Binds {
    /// Each protected path, with the flags its read-only remount must keep.
    paths: Vec<(CString, libc::c_ulong)>,
    /// The same paths as the run's directory names them (`.git/hooks`), for its event.
    names: Vec<String>,
    /// Whether the child makes a user namespace (any user but root).
    user_ns: bool,
    /// `"uid uid 1\n"` and `"gid gid 1\n"`, for the user namespace's maps.
    uid_map: CString,
    gid_map: CString,
}

impl Binds {
    /// The binds for `protect` (the protected paths of a writable run in `dir`): each
    /// one that exists as a directory or a regular file (never through a symlink), on
    /// a mount that is not read-only already. `None` when there is nothing to bind or
    /// the layer is unavailable here.
    pub fn new(dir: &LocalPath, protect: &[LocalPath]) -> Option<Binds> {
        let mut names = Vec::new();
        let paths: Vec<(CString, libc::c_ulong)> = protect
            .iter()
            .filter_map(|p| {
                let meta = std::fs::symlink_metadata(p.as_str()).ok()?;
                if !(meta.is_dir() || meta.is_file()) {
                    return None;
                }
                let flags = remount_flags(p.as_str())?;
                let path = CString::new(p.as_str()).ok()?;
                names.push(
                    std::path::Path::new(p.as_str())
                        .strip_prefix(dir.as_str())
                        .map_or_else(|_| p.to_string(), |r| r.display().to_string()),
                );
                Some((path, flags))
            })
            .collect();
        if paths.is_empty() || !available() {
            return None;
        }
        let (uid_map, gid_map) = maps();
        Some(Binds {
            paths,
            names,
            user_ns: rustix::process::geteuid().as_raw() != 0,
            uid_map,
            gid_map,
        })
    }

    /// The bound paths as the run's directory names them, e.g. `.git/hooks`.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// In the child, before the Landlock ruleset: the namespace, the slave
    /// propagation, then each bind. False only when the namespace cannot be made
    /// (errno left set); a path whose bind fails stays writable, and the guard's.
    ///
    /// # Safety
    /// Async-signal-safe: system calls only, on memory built before the fork. The
    /// caller must be single-threaded (a child of `clone`/`fork`, before `execve`).
    #[allow(unsafe_code)]
    pub unsafe fn apply(&self) -> bool {
        // SAFETY: see the function's contract.
        unsafe {
            if !enter(self.user_ns, &self.uid_map, &self.gid_map) {
                return false;
            }
            for (path, flags) in &self.paths {
                if libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ) == 0
                {
                    // The bind is made; a failed remount leaves it writable.
                    libc::mount(
                        std::ptr::null(),
                        path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | flags,
                        std::ptr::null(),
                    );
                }
            }
            *libc::__errno_location() = 0;
        }
        true
    }
}

/// The namespace: a mount namespace (in a user namespace of the user's own ids, for
/// anyone but root) whose mounts are all slaves of the user's. System calls only.
///
/// `berth serve` and `berth daemon` are not dumpable (`cli::conceal`), and a child
/// shares that state until its `execve` (its very memory, on the `CLONE_VM` path): its
/// `/proc/self/uid_map` is then root's, which a user's process may not write. So the
/// child is dumpable for the three writes only and not dumpable again right after:
/// Berth's memory is open to the user's own processes for those few system calls, never
/// to a fenced agent (Landlock refuses it ptrace access to anything outside its domain).
#[allow(unsafe_code)]
unsafe fn enter(user_ns: bool, uid_map: &CString, gid_map: &CString) -> bool {
    // SAFETY: system calls on NUL-terminated strings that outlive them.
    unsafe {
        let flags = libc::CLONE_NEWNS | if user_ns { libc::CLONE_NEWUSER } else { 0 };
        if libc::unshare(flags) != 0 {
            return false;
        }
        if user_ns {
            let dumpable = libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0);
            if dumpable == 0 {
                libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
            }
            let mapped = write_file(c"/proc/self/setgroups", c"deny")
                && write_file(c"/proc/self/uid_map", uid_map)
                && write_file(c"/proc/self/gid_map", gid_map);
            if dumpable == 0 {
                // Restored whatever the writes did; a success leaves errno alone.
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            }
            if !mapped {
                return false;
            }
        }
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ) == 0
    }
}

/// Writes `text` to `path` in one `write`. System calls only.
#[allow(unsafe_code)]
unsafe fn write_file(path: &std::ffi::CStr, text: &std::ffi::CStr) -> bool {
    // SAFETY: system calls on NUL-terminated strings that outlive them.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let bytes = text.to_bytes();
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        n == bytes.len() as isize
    }
}

/// The user's own ids, mapped to themselves.
fn maps() -> (CString, CString) {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    // Digits, spaces and a newline: never a NUL.
    let line = |id: u32| CString::new(format!("{id} {id} 1\n")).unwrap_or_default();
    (line(uid), line(gid))
}

/// The flags a read-only remount of `path`'s bind must keep (a namespace of a less
/// privileged user may not drop them), or `None` when its mount is read-only already
/// or cannot be asked.
fn remount_flags(path: &str) -> Option<libc::c_ulong> {
    let st = rustix::fs::statvfs(path).ok()?;
    let have = st.f_flag;
    if have.contains(rustix::fs::StatVfsMountFlags::RDONLY) {
        return None;
    }
    use rustix::fs::StatVfsMountFlags as F;
    let table: [(F, libc::c_ulong); 6] = [
        (F::NOSUID, libc::MS_NOSUID),
        (F::NODEV, libc::MS_NODEV),
        (F::NOEXEC, libc::MS_NOEXEC),
        (F::NOATIME, libc::MS_NOATIME),
        (F::NODIRATIME, libc::MS_NODIRATIME),
        (F::RELATIME, libc::MS_RELATIME),
    ];
    Some(
        table
            .iter()
            .filter(|(f, _)| have.contains(*f))
            .fold(0, |acc, (_, ms)| acc | ms),
    )
}

/// Whether this machine lets Berth make the namespace: tried once per process in a
/// forked child that makes it and exits. Off under the test hook [`NO_BINDS`].
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if std::env::var(super::PROBE_ENV).is_ok_and(|v| v == NO_BINDS) {
            return false;
        }
        let user_ns = rustix::process::geteuid().as_raw() != 0;
        let (uid_map, gid_map) = maps();
        try_in_child(|| {
            // SAFETY: in the forked child, single-threaded, before `_exit`.
            #[allow(unsafe_code)]
            unsafe {
                enter(user_ns, &uid_map, &gid_map)
            }
        })
    })
}

/// Runs `f` in a forked child and says whether it returned true. `f` must make only
/// system calls (the parent may have other threads).
#[allow(unsafe_code)]
fn try_in_child(f: impl FnOnce() -> bool) -> bool {
    // SAFETY: the child runs `f` (system calls only, per the contract) and `_exit`s
    // without unwinding or running destructors; the parent waits for it.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            libc::_exit(if f() { 0 } else { 1 });
        }
        let mut status = 0;
        if libc::waitpid(pid, &mut status, 0) != pid {
            return false;
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_core::Platform;

    fn local(p: &std::path::Path) -> LocalPath {
        LocalPath::parse(Platform::native(), p.to_str().unwrap()).unwrap()
    }

    /// A bind over a directory and a file, applied in a forked child that then tries
    /// to write beneath both and beside them; the parent's view stays writable.
    #[test]
    fn protected_paths_are_read_only_in_the_childs_namespace_only() {
        if !available() {
            eprintln!("skipped: this machine refuses the namespace");
            return;
        }
        let dir = std::env::temp_dir().join(format!("berth-binds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n").unwrap();
        let protect = [
            local(&dir.join(".git/hooks")),
            local(&dir.join(".git/config")),
            local(&dir.join(".berth")), // absent: no bind
        ];
        let binds = Binds::new(&local(&dir), &protect).expect("two paths to bind");
        assert_eq!(binds.names(), [".git/hooks", ".git/config"]);
        let hook = CString::new(dir.join(".git/hooks/pre-commit").to_str().unwrap()).unwrap();
        let config = CString::new(dir.join(".git/config").to_str().unwrap()).unwrap();
        let beside = CString::new(dir.join("beside.txt").to_str().unwrap()).unwrap();
        let creat = |p: &CString| {
            // SAFETY: a system call on a C string.
            #[allow(unsafe_code)]
            unsafe {
                libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644) >= 0
            }
        };
        let errno = || {
            // SAFETY: reads errno.
            #[allow(unsafe_code)]
            unsafe {
                *libc::__errno_location()
            }
        };
        // SAFETY: `apply` in the forked child, single-threaded there.
        #[allow(unsafe_code)]
        let refused = try_in_child(|| unsafe {
            binds.apply()
                && !creat(&hook)
                && errno() == libc::EROFS
                && !creat(&config)
                && errno() == libc::EROFS
                && creat(&beside)
        });
        assert!(refused, "in the child, the hooks and config are read-only");
        assert!(dir.join("beside.txt").exists());
        // The parent's namespace never saw the binds.
        std::fs::write(dir.join(".git/hooks/pre-commit"), "ok").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn nothing_to_bind_is_no_binds() {
        let dir = std::env::temp_dir().join(format!("berth-binds-none-{}", std::process::id()));
        assert!(Binds::new(&local(&dir), &[local(&dir.join(".git/hooks"))]).is_none());
        assert!(Binds::new(&local(&dir), &[]).is_none());
    }
}
