//! Linux: the Landlock ruleset and the seccomp filter of a fenced agent.

use super::binds::Binds;
use super::{FenceError, Probe, seccomp};
use berth_core::LocalPath;
use berth_core::fence::{FencePolicy, Network, Reads, WriteKind};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use rustix::fs::{FileType, Mode, OFlags};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The newest ABI the `landlock` crate knows; the kernel gets what it has of it.
const LATEST: ABI = ABI::V10;

/// Devices every program needs to write (or drive, for terminals): (path, rights).
fn devices() -> [(&'static str, BitFlags<AccessFs>); 7] {
    let file = AccessFs::WriteFile | AccessFs::Truncate;
    let tty = AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    [
        ("/dev/null", file),
        ("/dev/zero", file),
        ("/dev/full", file),
        ("/dev/tty", tty),
        ("/dev/ptmx", tty),
        ("/dev/pts", tty),
        // POSIX shared memory (browsers, Python's multiprocessing): every right.
        ("/dev/shm", AccessFs::from_all(LATEST)),
    ]
}

/// The kernel's answer, without the test hook.
#[allow(unsafe_code)]
pub(super) fn kernel_probe() -> Probe {
    // SAFETY: `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` only
    // returns the ABI version (or -1: ENOSYS, EOPNOTSUPP); it touches no memory.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    // SAFETY: `PR_SET_SECCOMP` with filter mode and a NULL program never installs
    // anything: EFAULT means filters are supported, EINVAL that they are not.
    let seccomp = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            std::ptr::null::<libc::sock_fprog>(),
            0,
            0,
        ) != 0
            && *libc::__errno_location() == libc::EFAULT
    };
    Probe {
        landlock_abi: u32::try_from(abi).unwrap_or(0),
        seccomp: seccomp && seccomp::NATIVE.is_some(),
        seatbelt: false,
    }
}

/// A fence ready to apply: the Landlock ruleset's descriptor and the seccomp program,
/// built by [`prepare`], and the run's read-only binds. Apply it with any number of
/// spawns; it confines only the children, never the process that holds it.
pub struct Prepared {
    kernel: Arc<Kernel>,
    binds: Option<Binds>,
    /// `landlock_restrict_self`'s flags for this run ([`Prepared::log_denials`]).
    restrict_flags: u32,
}

/// The kernel objects of a fence, and what they were built on: shared by the runs that
/// reuse them ([`Prepared::reuse`]).
struct Kernel {
    ruleset: OwnedFd,
    filter: Vec<libc::sock_filter>,
    landlock_abi: u32,
    rules: usize,
    skipped_symlinks: usize,
    missing: Vec<PathBuf>,
    /// What the read rules the ruleset holds were made from (not their descriptors:
    /// a kept fence holds none open).
    reads: ReadStamp,
    /// Each write and device path, and the file its rule is on (`None`: it was missing
    /// and has none).
    targets: Vec<(PathBuf, Option<Identity>)>,
}

/// A file's device and inode.
type Identity = (u64, u64);

/// What `path` leads to now (symlinks followed, as the write rules open them).
fn identity(path: &Path) -> Option<Identity> {
    let st = rustix::fs::stat(path).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some((st.st_dev as u64, st.st_ino as u64))
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = &self.kernel;
        f.debug_struct("Prepared")
            .field("ruleset", &k.ruleset)
            .field("filter_len", &k.filter.len())
            .field("landlock_abi", &k.landlock_abi)
            .field("rules", &k.rules)
            .field("skipped_symlinks", &k.skipped_symlinks)
            .field("missing", &k.missing)
            .field("binds", &self.binds)
            .finish()
    }
}

impl Prepared {
    /// The fence of `policy` (the very policy this one was prepared for: the caller
    /// knows, [`prepare`] does not check) without building it again, when nothing it
    /// was built on changed: the same read rules (no directory they were found in has
    /// changed, as for [`READS`]), and each write and device path still leading to the
    /// file its rule is on, or still missing. Its binds are made again (they follow
    /// what the directory holds now). `None` when anything changed: build it anew.
    ///
    /// A rule is on a file, not a name: a write path replaced since (renamed away, a
    /// new directory or symlink in its place) would keep the rule on the old file,
    /// which may now lie anywhere. The check above refuses the reuse then.
    pub fn reuse(&self, policy: &FencePolicy) -> Option<Prepared> {
        let k = &self.kernel;
        if super::probe().landlock_abi != k.landlock_abi {
            return None;
        }
        if !k.reads.still(&policy.read_deny, &policy.reads) {
            return None;
        }
        if k.targets.iter().any(|(path, id)| identity(path) != *id) {
            return None;
        }
        Some(Prepared {
            kernel: k.clone(),
            binds: binds_of(policy),
            restrict_flags: 0,
        })
    }

    /// The kernel's Landlock ABI this fence was built on.
    pub fn landlock_abi(&self) -> u32 {
        self.kernel.landlock_abi
    }

    /// How many Landlock rules the ruleset holds.
    pub fn rules(&self) -> usize {
        self.kernel.rules
    }

    /// Symlinks met while decomposing reads: they get no rule of their own.
    pub fn skipped_symlinks(&self) -> usize {
        self.kernel.skipped_symlinks
    }

    /// Write paths that did not exist, so got no rule.
    pub fn missing(&self) -> &[PathBuf] {
        &self.kernel.missing
    }

    /// The seccomp program's length, in instructions.
    pub fn filter_len(&self) -> usize {
        self.kernel.filter.len()
    }

    /// The read-only binds of the protected paths ([`super::binds`]), if any are
    /// made for this run.
    pub fn binds(&self) -> Option<&Binds> {
        self.binds.as_ref()
    }

    /// Whether the kernel logs this run's denials to its audit (for an
    /// [`super::audit::Listener`]): `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`, where the
    /// ABI has it.
    pub fn log_denials(&mut self, on: bool) {
        self.restrict_flags = if on && self.kernel.landlock_abi >= super::audit::FIRST_ABI {
            super::audit::LOG_NEW_EXEC_ON
        } else {
            0
        };
    }

    /// `landlock_restrict_self`'s flags for this run.
    pub(crate) fn restrict_flags(&self) -> u32 {
        self.restrict_flags
    }

    pub(crate) fn ruleset_fd(&self) -> RawFd {
        self.kernel.ruleset.as_raw_fd()
    }

    pub(crate) fn filter(&self) -> &[libc::sock_filter] {
        &self.kernel.filter
    }

    /// What the fork path's child applies: owned, so it can move into the closure
    /// that runs after `fork` (allocated here, before it).
    pub(crate) fn child_fence(&self) -> ChildFence {
        ChildFence {
            ruleset: self.ruleset_fd(),
            filter: self.kernel.filter.clone(),
            binds: self.binds.clone(),
            caps: super::caps::Drop::of_this_process(),
            restrict_flags: self.restrict_flags,
        }
    }
}

/// The fence as the fork path's child applies it (see [`ChildFence::apply`]).
pub struct ChildFence {
    /// Borrowed from the [`Prepared`], which the caller keeps for the whole spawn.
    ruleset: RawFd,
    filter: Vec<libc::sock_filter>,
    binds: Option<Binds>,
    caps: super::caps::Drop,
    restrict_flags: u32,
}

impl std::fmt::Debug for ChildFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildFence")
            .field("ruleset", &self.ruleset)
            .field("filter_len", &self.filter.len())
            .field("binds", &self.binds)
            .field("caps", &self.caps)
            .finish()
    }
}

impl ChildFence {
    /// Confines the calling process: the read-only binds (if any), the capabilities
    /// dropped ([`super::caps`]), then `PR_SET_NO_NEW_PRIVS`, the Landlock ruleset,
    /// the seccomp filter.
    /// Async-signal-safe (system calls only, no allocation), for the child between
    /// `fork` and `exec`.
    #[allow(unsafe_code)]
    pub(crate) fn apply(&self) -> std::io::Result<()> {
        let prog = libc::sock_fprog {
            len: self.filter.len() as u16,
            filter: self.filter.as_ptr().cast_mut(),
        };
        // SAFETY: each call is one system call on values that live until it returns:
        // the ruleset's descriptor is kept open by the parent's `Prepared` across the
        // fork (the child's copy closes at exec, CLOEXEC), and `prog` points into
        // `self.filter`. `last_os_error` reads errno without allocating. The binds'
        // and the capability step's contracts hold: this is the forked child,
        // single-threaded, before its exec.
        unsafe {
            if let Some(binds) = &self.binds
                && !binds.apply()
            {
                return Err(std::io::Error::last_os_error());
            }
            if self.caps.apply().is_err() {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    self.ruleset,
                    self.restrict_flags,
                ) != 0
                || libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &raw const prog,
                    0,
                    0,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// Builds the fence of `policy` (see the module's documentation for the sets). Blocking
/// file I/O: one `open(O_PATH)` and `fstat` per rule, and a directory read per
/// ancestor of a hidden path.
///
/// Berth's `_sockets` need no rule here: on Linux they refuse a fenced peer themselves
/// ([`super::peer_is_fenced`]).
pub fn prepare(policy: &FencePolicy, _sockets: &[LocalPath]) -> Result<Prepared, FenceError> {
    let probe = super::probe();
    if probe.landlock_abi == 0 {
        return Err(FenceError::Unavailable {
            reason: "the kernel has no Landlock (not built, or not enabled at boot)".into(),
        });
    }
    let arch = match (probe.seccomp, seccomp::NATIVE) {
        (true, Some(arch)) => arch,
        (false, _) => {
            return Err(FenceError::Unavailable {
                reason: "the kernel cannot install seccomp filters".into(),
            });
        }
        (true, None) => {
            return Err(FenceError::Unavailable {
                reason: format!(
                    "no seccomp filter is written for {}",
                    std::env::consts::ARCH
                ),
            });
        }
    };
    let ruleset_error = |e: landlock::RulesetError| FenceError::Ruleset {
        source: Box::new(e),
    };
    let mut attr = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(LATEST))
        .map_err(ruleset_error)?;
    if policy.network == Network::Off {
        attr = attr
            .handle_access(AccessNet::from_all(LATEST))
            .map_err(ruleset_error)?;
    }
    let attr = attr.scope(Scope::from_all(LATEST)).map_err(ruleset_error)?;
    let mut b = Builder {
        ruleset: attr.create().map_err(ruleset_error)?,
        rules: 0,
        skipped_symlinks: 0,
        missing: Vec::new(),
        targets: Vec::new(),
    };

    // Names everywhere; contents everywhere but the holes (or, in the strict mode,
    // beneath each root but the holes): the rules of the last run with the same holes
    // and roots while no directory it listed and no root has changed, else anew.
    let reads = read_rules(&policy.read_deny, &policy.reads)?;
    // The read rules are many, on descriptors whose type is known: added by the
    // system call itself, without the crate's `fstat` of each (the crate adds a rule
    // the kernel refused, and says why).
    let raw = Option::<OwnedFd>::from(b.ruleset.try_clone().map_err(|e| FenceError::Open {
        path: PathBuf::from("/"),
        what: "the fence's Landlock ruleset",
        source: e,
    })?);
    let handled =
        AccessFs::from_all(LATEST) & AccessFs::from_all(ABI::from(probe.landlock_abi as i32));
    for (fd, access) in &reads.rules {
        let access = *access & handled;
        let added = raw
            .as_ref()
            .is_some_and(|r| access.is_empty() || add_rule_raw(r, fd, access));
        if added {
            b.rules += usize::from(!access.is_empty());
        } else {
            b.add_fd(fd, access, Path::new("/"))?;
        }
    }
    drop(raw);
    b.skipped_symlinks += reads.skipped_symlinks;

    for (path, kind) in &policy.write {
        let path = Path::new(path.as_str());
        let access = match kind {
            WriteKind::Subtree => AccessFs::from_all(LATEST),
            WriteKind::File => {
                AccessFs::from_read(LATEST) | AccessFs::WriteFile | AccessFs::Truncate
            }
        };
        if b.add(path, access, Follow::Yes)? == Added::Missing {
            // The run's own directory and tmp must exist: a run fenced without them
            // would fail in confusing ways.
            let what = if path == Path::new(policy.dir.as_str()) {
                Some("the run's directory")
            } else if path == Path::new(policy.tmp.as_str()) {
                Some("the task's temporary directory")
            } else {
                None
            };
            match what {
                Some(what) => {
                    return Err(FenceError::Missing {
                        path: path.to_owned(),
                        what,
                    });
                }
                None => b.missing.push(path.to_owned()),
            }
        }
    }
    for (dev, access) in devices() {
        b.add(Path::new(dev), access, Follow::Yes)?;
    }

    let (rules, skipped_symlinks, missing, targets) =
        (b.rules, b.skipped_symlinks, b.missing, b.targets);
    let ruleset: Option<OwnedFd> = b.ruleset.into();
    let ruleset = ruleset.ok_or_else(|| FenceError::Unavailable {
        reason: "the kernel gave no Landlock ruleset".into(),
    })?;
    Ok(Prepared {
        kernel: Arc::new(Kernel {
            ruleset,
            filter: seccomp::program(arch, policy.network),
            landlock_abi: probe.landlock_abi,
            rules,
            skipped_symlinks,
            missing,
            reads: reads.stamp.clone(),
            targets,
        }),
        binds: binds_of(policy),
        restrict_flags: 0,
    })
}

/// The read-only binds of `policy`'s protected paths, for a writable directory.
fn binds_of(policy: &FencePolicy) -> Option<Binds> {
    if policy.dir_writable() {
        Binds::new(&policy.dir, &policy.protect)
    } else {
        None
    }
}

/// `landlock_add_rule(2)`'s `struct landlock_path_beneath_attr` (packed, as in
/// `<linux/landlock.h>`).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Adds the rule `access` beneath `fd` to the ruleset `ruleset`; whether the kernel
/// took it. `access` must lie within what the ruleset handles (else the kernel
/// refuses it, and the caller adds it through the crate, which says why).
#[allow(unsafe_code)]
fn add_rule_raw(ruleset: &OwnedFd, fd: &OwnedFd, access: BitFlags<AccessFs>) -> bool {
    /// `LANDLOCK_RULE_PATH_BENEATH`.
    const PATH_BENEATH: libc::c_int = 1;
    let attr = PathBeneathAttr {
        allowed_access: access.bits(),
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: one system call; `attr` lives until it returns, and both descriptors
    // are open (borrowed).
    unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            PATH_BENEATH,
            &raw const attr,
            0u32,
        ) == 0
    }
}

/// The read rules of the decomposition (`/`'s names, then contents everywhere but the
/// holes; in the strict mode, contents beneath each root but the holes), as opened
/// descriptors, and the directories listed to find them.
#[derive(Debug)]
struct ReadRules {
    stamp: ReadStamp,
    rules: Vec<(OwnedFd, BitFlags<AccessFs>)>,
    skipped_symlinks: usize,
}

/// What a decomposition was made from: whether it still holds.
#[derive(Debug, Clone)]
struct ReadStamp {
    /// The policy's `read_deny` and `reads`, the key: rules made for one read scope
    /// are a hole (everywhere's, reused for strict) or a breakage in another.
    read_deny: Vec<LocalPath>,
    reads: Reads,
    /// Each directory that was listed, with what its `stat` said: an entry created,
    /// removed or renamed in it changes its modification and change times.
    listed: Vec<(PathBuf, Option<[i64; 6]>)>,
    /// Each strict root as given, and the file it led to (`None`: missing): a root
    /// that appeared, went, or leads elsewhere since (a symlink retargeted, a
    /// directory renamed away and another put in its place) needs rules anew.
    roots: Vec<(PathBuf, Option<Identity>)>,
}

impl ReadStamp {
    /// Whether these are still the read rules of `read_deny` and `reads`: the same
    /// holes and roots, no directory listed to find them changed since, and each root
    /// still leading to the file its rule is on.
    fn still(&self, read_deny: &[LocalPath], reads: &Reads) -> bool {
        self.read_deny == read_deny
            && self.reads == *reads
            && self.listed.iter().all(|(p, stamp)| dir_stamp(p) == *stamp)
            && self.roots.iter().all(|(p, id)| identity(p) == *id)
    }
}

/// The last decomposition, reused while its holes are the same and no directory it
/// listed has changed. A stale reuse could only deny more (a rule is on an inode that
/// was readable when it was opened); the listed directories' times catch entries
/// added, removed or replaced, so a new `~/.foo` is readable from the next run on.
static READS: std::sync::Mutex<Option<std::sync::Arc<ReadRules>>> = std::sync::Mutex::new(None);

/// What a listed directory's `stat` says: device, inode, modification and change
/// times (seconds, nanoseconds).
fn dir_stamp(path: &Path) -> Option<[i64; 6]> {
    let st = rustix::fs::lstat(path).ok()?;
    #[allow(clippy::unnecessary_cast)]
    Some([
        st.st_dev as i64,
        st.st_ino as i64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ])
}

/// The decomposition for `read_deny` and `reads` (see [`READS`]). The holes' canonical
/// forms are reused with it: a symlink on the way to a hole lies in a listed
/// directory, whose times change when it is replaced.
///
/// Everywhere: `/`'s names, and contents beneath `/` but the holes. Strict: contents
/// beneath each root that exists, but the holes — no names of `/` or of the home (a
/// sibling project's name is not listable), as Landlock does not restrict the lookup
/// of a path, only opening what it leads to. Each root is taken in its canonical form
/// (`/bin` → `/usr/bin` on a merged-`/usr` system, `~/.cargo` wherever a link puts
/// it): a rule is on the file a path leads to, and [`open_rule`] never follows links.
fn read_rules(
    read_deny: &[LocalPath],
    reads: &Reads,
) -> Result<std::sync::Arc<ReadRules>, FenceError> {
    let mut cache = READS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(r) = cache.as_ref()
        && r.stamp.still(read_deny, reads)
    {
        return Ok(r.clone());
    }
    let holes = &holes(read_deny);
    let mut out = ReadRules {
        stamp: ReadStamp {
            read_deny: read_deny.to_vec(),
            reads: reads.clone(),
            listed: Vec::new(),
            roots: Vec::new(),
        },
        rules: Vec::new(),
        skipped_symlinks: 0,
    };
    // Stamped before listing: a change made while listing shows at the next run.
    match reads {
        Reads::Everywhere => {
            if let Some(rule) = open_rule(
                Path::new("/"),
                AccessFs::ReadDir.into(),
                Follow::No,
                &mut out.skipped_symlinks,
            )? {
                out.rules.push(rule);
            }
            read_except(Path::new("/"), holes, &mut out)?;
        }
        Reads::Only(roots) => {
            let mut done: Vec<PathBuf> = Vec::new();
            for root in roots {
                let root = Path::new(root.as_str());
                out.stamp.roots.push((root.to_owned(), identity(root)));
                let Ok(real) = std::fs::canonicalize(root) else {
                    continue;
                };
                // Beneath a root already decomposed (with the same holes): covered.
                // Beneath a hole (a settings' `read_deny` over a system directory):
                // hidden, as everywhere.
                if done.iter().any(|d| real.starts_with(d))
                    || holes.iter().any(|h| real.starts_with(h))
                {
                    continue;
                }
                read_except(&real, holes, &mut out)?;
                done.push(real);
            }
        }
    }
    let out = std::sync::Arc::new(out);
    *cache = Some(out.clone());
    Ok(out)
}

/// Opens `path` for a rule (`O_PATH`) with `access`, narrowed to file rights when it
/// is not a directory; `None` when it is missing or a symlink (then counted).
fn open_rule(
    path: &Path,
    access: BitFlags<AccessFs>,
    follow: Follow,
    skipped_symlinks: &mut usize,
) -> Result<Option<(OwnedFd, BitFlags<AccessFs>)>, FenceError> {
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if follow == Follow::No {
        flags |= OFlags::NOFOLLOW;
    }
    let open_error = |source: std::io::Error| FenceError::Open {
        path: path.to_owned(),
        what: "a path of the fence",
        source,
    };
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(open_error(e.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| open_error(e.into()))?;
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Symlink => {
            *skipped_symlinks += 1;
            Ok(None)
        }
        FileType::Directory => Ok(Some((fd, access))),
        FileType::RegularFile
        | FileType::Fifo
        | FileType::CharacterDevice
        | FileType::BlockDevice
        | FileType::Socket
        | FileType::Unknown => Ok(Some((fd, access & AccessFs::from_file(LATEST)))),
    }
}

/// Read rights beneath `root` except beneath the `holes`: a path with no hole beneath
/// it gets one rule; one with a hole beneath it none, and each of its entries is
/// handled the same way. Symlinks are never followed. What cannot be listed or opened
/// gets no rule (the fence only ever denies more).
fn read_except(root: &Path, holes: &[PathBuf], out: &mut ReadRules) -> Result<(), FenceError> {
    if holes.iter().any(|h| h == root) {
        return Ok(());
    }
    if !holes.iter().any(|h| h.starts_with(root)) {
        return match open_rule(
            root,
            AccessFs::from_read(LATEST),
            Follow::No,
            &mut out.skipped_symlinks,
        ) {
            Ok(Some(rule)) => {
                out.rules.push(rule);
                Ok(())
            }
            Ok(None) | Err(FenceError::Open { .. }) => Ok(()),
            Err(e) => Err(e),
        };
    }
    out.stamp.listed.push((root.to_owned(), dir_stamp(root)));
    let Ok(entries) = std::fs::read_dir(root) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            out.skipped_symlinks += 1;
            continue;
        }
        read_except(&entry.path(), holes, out)?;
    }
    Ok(())
}

/// The paths to hide: each `read_deny` path, and its canonical form when that differs
/// (a hidden path that is, or lies under, a symlink hides what it leads to).
fn holes(read_deny: &[LocalPath]) -> Vec<PathBuf> {
    let mut holes: Vec<PathBuf> = Vec::new();
    for p in read_deny {
        let p = PathBuf::from(p.as_str());
        if let Ok(real) = std::fs::canonicalize(&p)
            && real != p
            && !holes.contains(&real)
        {
            holes.push(real);
        }
        if !holes.contains(&p) {
            holes.push(p);
        }
    }
    holes
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Follow {
    Yes,
    No,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Added {
    Rule,
    Symlink,
    Missing,
}

struct Builder {
    ruleset: RulesetCreated,
    rules: usize,
    skipped_symlinks: usize,
    missing: Vec<PathBuf>,
    /// The paths added by [`Builder::add`], and the file each rule is on.
    targets: Vec<(PathBuf, Option<Identity>)>,
}

impl Builder {
    /// One rule on an opened path: `access` beneath it (already narrowed to file
    /// rights for a file). `path` names it in errors.
    fn add_fd(
        &mut self,
        fd: &OwnedFd,
        access: BitFlags<AccessFs>,
        path: &Path,
    ) -> Result<(), FenceError> {
        if access.is_empty() {
            return Ok(());
        }
        (&mut self.ruleset)
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| FenceError::Rule {
                path: path.to_owned(),
                source: Box::new(e),
            })?;
        self.rules += 1;
        Ok(())
    }

    /// One rule: `access` beneath `path` (file rights only, for a file).
    fn add(
        &mut self,
        path: impl AsRef<Path>,
        access: BitFlags<AccessFs>,
        follow: Follow,
    ) -> Result<Added, FenceError> {
        let path = path.as_ref();
        let symlinks = self.skipped_symlinks;
        match open_rule(path, access, follow, &mut self.skipped_symlinks)? {
            Some((fd, access)) => {
                self.add_fd(&fd, access, path)?;
                let st = rustix::fs::fstat(&fd).map_err(|e| FenceError::Open {
                    path: path.to_owned(),
                    what: "a path of the fence",
                    source: e.into(),
                })?;
                #[allow(clippy::unnecessary_cast)]
                let id = (st.st_dev as u64, st.st_ino as u64);
                self.targets.push((path.to_owned(), Some(id)));
                Ok(Added::Rule)
            }
            None if self.skipped_symlinks > symlinks => {
                self.targets.push((path.to_owned(), None));
                Ok(Added::Symlink)
            }
            None => {
                self.targets.push((path.to_owned(), None));
                Ok(Added::Missing)
            }
        }
    }
}
