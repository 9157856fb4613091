//! The fence of Berth's own git: it may execute git alone, and write only where its
//! step says (see the module above).
//!
//! **Linux.** A Landlock ruleset that handles execution and every write right (not
//! reads: git reads the work tree, the repository and its libraries), with rules for
//! git's binary, its exec path (the helpers and the `git` it starts for submodules),
//! the binary's ELF interpreter, `/dev/null`, and each write directory. Landlock binds
//! a thread, not a process: each ruleset has a thread of its own that restricted
//! itself once (`PR_SET_NO_NEW_PRIVS`, `landlock_restrict_self`) and starts every git
//! of that fence, so the child inherits the fence from its first instruction while
//! Berth itself stays unconfined, and the start keeps `posix_spawn`'s speed (no `fork`
//! of the server, no thread made per step). A ruleset, and its thread, is built once
//! per set of write directories and kept while every path it was built on still leads
//! to the same file. Without Landlock (a kernel before 5.13, or one that has it off)
//! git runs behind its configuration wall alone.
//!
//! **macOS.** `sandbox-exec` with [`seatbelt_profile`]: every process exec denied
//! but git's, every file write denied but beneath the write directories and
//! `/dev/null`. Paths are parameters, never part of the profile's text. Like the
//! agents' profile, it is tested as text only.

use super::Writes;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;

/// The git Berth runs: the first `git` on `PATH`, what it runs of its own, and the ELF
/// interpreter that loads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub git: PathBuf,
    /// `git --exec-path`: its helpers, and the `git` it runs itself.
    pub exec_path: PathBuf,
    /// The loader named in git's ELF header (`PT_INTERP`), or a script's interpreter.
    pub interpreter: Option<PathBuf>,
}

/// The git found on `PATH` when first asked, or `None` (then `git` is looked up as
/// any program, and its start fails as it would have).
pub fn installed() -> Option<&'static Installed> {
    static INSTALLED: OnceLock<Option<Installed>> = OnceLock::new();
    INSTALLED.get_or_init(find).as_ref()
}

fn find() -> Option<Installed> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    let git = std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("git"))
        .find(|p| is_executable(p))?;
    // `--exec-path` reads no repository and no configuration.
    let out = Command::new(&git)
        .arg("--exec-path")
        .current_dir("/")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_EXEC_PATH")
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let exec_path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !exec_path.is_absolute() {
        return None;
    }
    let interpreter = std::fs::read(&git).ok().and_then(|b| interpreter_of(&b));
    Some(Installed {
        git,
        exec_path,
        interpreter,
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The program that loads `binary`: an ELF file's `PT_INTERP` (32 or 64 bits, little
/// endian), or a script's `#!` interpreter. `None` for a static binary or an unknown
/// format.
pub(crate) fn interpreter_of(binary: &[u8]) -> Option<PathBuf> {
    if let Some(rest) = binary.strip_prefix(b"#!") {
        let line = rest.split(|b| *b == b'\n').next()?;
        let line = String::from_utf8_lossy(line);
        return line.split_whitespace().next().map(PathBuf::from);
    }
    if binary.get(..4)? != b"\x7fELF" || *binary.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(binary.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(binary.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(binary.get(o..o + 8)?.try_into().ok()?));
    let wide = match binary.get(4)? {
        2 => true,
        1 => false,
        _ => return None,
    };
    let (phoff, entsize, count) = if wide {
        (
            usize::try_from(u64_at(0x20)?).ok()?,
            u16_at(0x36)?,
            u16_at(0x38)?,
        )
    } else {
        (
            usize::try_from(u32_at(0x1c)?).ok()?,
            u16_at(0x2a)?,
            u16_at(0x2c)?,
        )
    };
    for i in 0..usize::from(count) {
        let h = phoff.checked_add(i.checked_mul(usize::from(entsize))?)?;
        /// `PT_INTERP`.
        const INTERP: u32 = 3;
        if u32_at(h)? != INTERP {
            continue;
        }
        let (off, len) = if wide {
            (u64_at(h + 8)?, u64_at(h + 32)?)
        } else {
            (u64::from(u32_at(h + 4)?), u64::from(u32_at(h + 16)?))
        };
        let off = usize::try_from(off).ok()?;
        let name = binary.get(off..off.checked_add(usize::try_from(len).ok()?)?)?;
        let name = name.split(|b| *b == 0).next()?;
        return Some(PathBuf::from(String::from_utf8_lossy(name).into_owned()));
    }
    None
}

/// The Seatbelt profile of a git step (macOS): the text, and its parameters' names in
/// the order the caller gives `-D NAME=value`. `writes` paths become `WRITE_0…`.
pub fn seatbelt_profile(writes: usize) -> String {
    let mut p = String::from(
        "(version 1)\n(allow default)\n(deny process-exec*)\n\
         (allow process-exec (literal (param \"GIT\")) (literal (param \"REAL_GIT\")) \
         (literal \"/usr/bin/xcrun\") (subpath (param \"EXEC_PATH\")))\n\
         (deny file-write*)\n(allow file-write* (literal \"/dev/null\")",
    );
    for i in 0..writes {
        p.push_str(&format!(" (subpath (param \"WRITE_{i}\"))"));
    }
    p.push_str(")\n");
    p
}

/// On macOS, `sandbox-exec` and its options to run git inside the step's profile; `None`
/// elsewhere, or where `sandbox-exec` is missing.
#[cfg_attr(not(target_os = "macos"), allow(unused_variables))]
pub(super) fn seatbelt_wrap(i: &Installed, writes: &Writes) -> Option<(PathBuf, Vec<OsString>)> {
    #[cfg(target_os = "macos")]
    {
        let sandbox = Path::new(crate::agent::fence::seatbelt::SANDBOX_EXEC);
        if !sandbox.is_file() {
            return None;
        }
        // Apple's /usr/bin/git runs the developer tools' git: `<exec path>/../../bin/git`.
        let real = i
            .exec_path
            .parent()
            .and_then(Path::parent)
            .map_or_else(|| i.git.clone(), |usr| usr.join("bin").join("git"));
        let mut args: Vec<OsString> =
            vec!["-p".into(), seatbelt_profile(writes.paths().len()).into()];
        let mut param = |name: String, value: &Path| {
            args.push("-D".into());
            let mut kv = OsString::from(format!("{name}="));
            kv.push(value.as_os_str());
            args.push(kv);
        };
        param("GIT".into(), &i.git);
        param("REAL_GIT".into(), &real);
        param("EXEC_PATH".into(), &i.exec_path);
        for (n, p) in writes.paths().iter().enumerate() {
            param(format!("WRITE_{n}"), p);
        }
        Some((sandbox.to_owned(), args))
    }
    #[cfg(not(target_os = "macos"))]
    None
}

/// Starts `cmd` inside the fence of `writes` (Linux: see the module's documentation;
/// elsewhere the command as built, `sandbox-exec` included on macOS).
pub(super) fn spawn(mut cmd: Command, writes: &Writes) -> std::io::Result<Child> {
    #[cfg(target_os = "linux")]
    if let Some(spawner) = linux::spawner(writes) {
        return spawner.spawn(cmd);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = writes;
    cmd.spawn()
}

#[cfg(target_os = "linux")]
mod linux {
    use super::{Installed, Writes, installed};
    use landlock::{
        ABI, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
        RulesetAttr, RulesetCreatedAttr,
    };
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command};
    use std::sync::{Arc, Mutex, PoisonError, mpsc};

    /// The rights the ruleset handles: executing, and every kind of write.
    fn handled() -> BitFlags<AccessFs> {
        AccessFs::from_write(ABI::V4) | AccessFs::Execute
    }

    /// A file's device and inode, following symlinks as the rules' opens do.
    fn identity(path: &Path) -> Option<(u64, u64)> {
        let st = rustix::fs::stat(path).ok()?;
        #[allow(clippy::unnecessary_cast)]
        Some((st.st_dev as u64, st.st_ino as u64))
    }

    struct Built {
        writes: Writes,
        spawner: Arc<Spawner>,
        /// Every path a rule is on, and the file it led to.
        targets: Vec<(PathBuf, Option<(u64, u64)>)>,
    }

    /// What a spawner's thread is handed: a command, and where its start goes.
    type Job = (Command, mpsc::SyncSender<std::io::Result<Child>>);

    /// The thread that starts the gits of one ruleset: it restricted itself once,
    /// before its first start, and ends when its ruleset is dropped from [`BUILT`].
    pub(in crate::git) struct Spawner {
        jobs: Mutex<mpsc::Sender<Job>>,
    }

    impl Spawner {
        fn start(ruleset: OwnedFd) -> std::io::Result<Spawner> {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("git-fence".into())
                .spawn(move || {
                    let restricted = restrict_this_thread(&ruleset);
                    drop(ruleset);
                    for (mut cmd, reply) in rx {
                        let started = match &restricted {
                            Ok(()) => cmd.spawn(),
                            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
                        };
                        // The caller waits for it (unless it panicked meanwhile).
                        let _ = reply.send(started);
                    }
                })?;
            Ok(Spawner {
                jobs: Mutex::new(tx),
            })
        }

        /// Starts `cmd` from this fence's thread.
        pub(in crate::git) fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
            let (reply, started) = mpsc::sync_channel(1);
            let sent = self
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .send((cmd, reply));
            if sent.is_err() {
                return Err(std::io::Error::other("the thread starting git has ended"));
            }
            started
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("the thread starting git ended")))
        }
    }

    /// The rulesets built so far (a handful: the shadow store, a worktree or two, none).
    static BUILT: Mutex<Vec<Built>> = Mutex::new(Vec::new());
    const KEPT: usize = 8;

    /// The spawner of `writes`' ruleset, built or kept; `None` where the kernel has
    /// no Landlock or no git was found (said once in the debug log).
    pub(super) fn spawner(writes: &Writes) -> Option<Arc<Spawner>> {
        if crate::agent::fence::probe().landlock_abi == 0 {
            return None;
        }
        let installed = installed()?;
        let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = built.iter().position(|b| b.writes == *writes) {
            if built[i].targets.iter().all(|(p, id)| identity(p) == *id) {
                return Some(built[i].spawner.clone());
            }
            built.remove(i);
        }
        let made = build(installed, writes).and_then(|(ruleset, targets)| {
            Spawner::start(ruleset)
                .map(|s| (s, targets))
                .map_err(|e| format!("cannot start its thread: {e}"))
        });
        match made {
            Ok((spawner, targets)) => {
                let spawner = Arc::new(spawner);
                if built.len() >= KEPT {
                    built.remove(0);
                }
                built.push(Built {
                    writes: writes.clone(),
                    spawner: spawner.clone(),
                    targets,
                });
                Some(spawner)
            }
            Err(e) => {
                tracing::warn!(error = %e, "git's fence could not be built; git runs behind its configuration alone");
                None
            }
        }
    }

    type Targets = Vec<(PathBuf, Option<(u64, u64)>)>;

    fn build(i: &Installed, writes: &Writes) -> Result<(OwnedFd, Targets), String> {
        let e = |e: landlock::RulesetError| e.to_string();
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(handled())
            .map_err(e)?
            .create()
            .map_err(e)?;
        let mut targets = Vec::new();
        let exec = BitFlags::from(AccessFs::Execute);
        let file_write = AccessFs::WriteFile | AccessFs::Truncate;
        let mut rules: Vec<(PathBuf, BitFlags<AccessFs>)> = vec![
            (i.git.clone(), exec),
            (i.exec_path.clone(), exec),
            (PathBuf::from("/dev/null"), file_write),
        ];
        if let Some(interp) = &i.interpreter {
            rules.push((interp.clone(), exec));
        }
        for p in writes.paths() {
            rules.push((p.clone(), AccessFs::from_write(ABI::V4)));
        }
        for (path, access) in rules {
            let id = identity(&path);
            targets.push((path.clone(), id));
            let Ok(fd) = PathFd::new(&path) else {
                // Missing: nothing beneath it can be written or run.
                continue;
            };
            let access = if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                access
            } else {
                access & AccessFs::from_file(ABI::V4)
            };
            (&mut ruleset)
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|err| format!("{}: {err}", path.display()))?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        fd.map(|fd| (fd, targets))
            .ok_or_else(|| "the kernel gave no Landlock ruleset".to_owned())
    }

    /// Confines the calling thread (never the process) to `ruleset`, for the gits it
    /// starts.
    #[allow(unsafe_code)]
    fn restrict_this_thread(ruleset: &OwnedFd) -> std::io::Result<()> {
        // SAFETY: two system calls on plain values: `PR_SET_NO_NEW_PRIVS` and
        // `landlock_restrict_self` each bind the calling thread only (Landlock's and
        // no_new_privs' scope is the task); the descriptor is open (borrowed).
        let failed = unsafe {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0
        };
        if failed {
            return Err(std::io::Error::other(format!(
                "git's fence could not be applied: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }
}
