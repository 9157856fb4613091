//! Linux: what changed in a bound directory since its last snapshot, from the kernel.
//!
//! Git's own scan `lstat`s every file: at 20,000 files that is most of a snapshot's
//! cost, paid even when nothing changed. So the process that records snapshots
//! (`berth serve`, `berth daemon`) keeps an inotify watch on each directory it has
//! snapshotted, and the next snapshot reads only the paths the kernel reported:
//! nothing at all when nothing changed, otherwise `check-ignore`, `update-index` and
//! `write-tree` on those paths alone.
//!
//! Whenever the events cannot be trusted to be complete, the watch is dropped and the
//! snapshot is git's full scan, as without a watch:
//! - the kernel's event queue overflowed, or a watch could not be added (the per-user
//!   limit);
//! - a directory was renamed (the watches under it would name the old path), or the
//!   directory itself was removed or moved;
//! - a `.gitignore` changed (what is ignored may have changed anywhere below it);
//! - a nested git repository exists (git records it as a link, not as files);
//! - another process moved the shadow repository on (its last tree is not ours);
//! - any git step failed.
//!
//! Directories git ignores (`target/`, `node_modules/`) are not watched. Changes the
//! kernel does not report — writes through a shared memory mapping, a network file
//! system's remote writes — are not seen until the next full scan.

use super::tree::Snapshot;
use super::{ChangesError, Limits, Shadow, WatchError};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::io::Errno;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};

/// Directories beyond this are not watched (the kernel's watch limit is per user and
/// shared with every editor and build tool): such a directory is scanned instead.
const MAX_DIRS: usize = 16_384;

/// Paths waiting for the next snapshot beyond this: a full scan is cheaper.
const MAX_PENDING: usize = 50_000;

/// Directories watched at once (one inotify descriptor each); the least recently
/// snapshotted is dropped first.
const MAX_WATCHES: usize = 32;

/// A directory that could not be watched is tried again after this many full scans.
const RETRY_AFTER: u32 = 16;

/// How a path's events since the last snapshot began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// It was created: it did not exist when the last snapshot was taken.
    Created,
    /// Anything else: it may have existed then.
    Other,
}

/// The watch on one directory.
struct Watch {
    fd: OwnedFd,
    root: PathBuf,
    /// Watch descriptor → the directory it watches, relative to the root.
    dirs: HashMap<i32, String>,
    /// Directories git ignores: not watched, not walked.
    ignored: HashSet<String>,
    /// Paths with events since the last snapshot.
    pending: BTreeMap<String, First>,
    /// Why the events can no longer be trusted.
    broken: Option<String>,
    /// The last snapshot taken with this watch in place.
    base: Option<Snapshot>,
}

enum Slot {
    Watching(Box<Watch>),
    /// Could not be watched; full scans since.
    Refused {
        reason: String,
        scans: u32,
    },
}

struct Registry {
    slots: HashMap<PathBuf, (Slot, u64)>,
    clock: u64,
    /// Full scans begun per directory, for tests and diagnostics.
    scans: HashMap<PathBuf, u64>,
    /// Directories a limit kept from being watched, and what the user is to be told
    /// (once: taken by [`notice`]).
    notices: HashMap<PathBuf, Option<String>>,
}

/// The most directories watched in one tree: [`MAX_DIRS`], or fewer with
/// `BERTH_WATCH_MAX_DIRS` (tests: a limit reached without a tree that large).
fn max_dirs() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("BERTH_WATCH_MAX_DIRS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(MAX_DIRS, |n: usize| n.min(MAX_DIRS))
    })
}

/// What the user is told when a limit keeps `dir` from being watched; `None` for
/// other reasons (a nested repository, a name that is not UTF-8: said nowhere, as the
/// snapshots stay exact and only slower).
fn limit_notice(e: &WatchError) -> Option<String> {
    let why = match e {
        WatchError::TooManyDirs(n) => format!("it has more than {n} directories"),
        WatchError::Watch {
            source: Errno::NOSPC,
            ..
        } => "the kernel's inotify watch limit is reached (fs.inotify.max_user_watches)".to_owned(),
        WatchError::Unavailable(Errno::MFILE | Errno::NFILE | Errno::NOSPC) => {
            "the kernel's inotify instance limit is reached (fs.inotify.max_user_instances)"
                .to_owned()
        }
        WatchError::Unavailable(_)
        | WatchError::Watch { .. }
        | WatchError::Read { .. }
        | WatchError::NotUtf8(_)
        | WatchError::Nested(_) => return None,
    };
    Some(format!(
        "not watching this directory for changes: {why}; each run reads the whole directory \
         instead (slower, as exact)"
    ))
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const MASK: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::EXCL_UNLINK);

fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_owned()
    } else {
        format!("{rel}/{name}")
    }
}

impl Watch {
    fn new(root: &Path, ignored: HashSet<String>) -> Result<Watch, WatchError> {
        let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(WatchError::Unavailable)?;
        let mut w = Watch {
            fd,
            root: root.to_owned(),
            dirs: HashMap::new(),
            ignored,
            pending: BTreeMap::new(),
            broken: None,
            base: None,
        };
        w.add_tree("", None)?;
        Ok(w)
    }

    /// Watches `rel` and every directory below it that git does not ignore (each
    /// watch added before its directory is read, so nothing created meanwhile is
    /// missed), collecting the files found into `files` if given.
    fn add_tree(
        &mut self,
        rel: &str,
        mut files: Option<&mut BTreeSet<String>>,
    ) -> Result<(), WatchError> {
        let mut stack = vec![rel.to_owned()];
        while let Some(dir) = stack.pop() {
            if self.dirs.len() >= max_dirs() {
                return Err(WatchError::TooManyDirs(max_dirs()));
            }
            let path = self.root.join(&dir);
            let wd = match inotify::add_watch(&self.fd, &path, MASK) {
                Ok(wd) => wd,
                // Gone again, or replaced by a file: its parent's events say so.
                Err(Errno::NOENT | Errno::NOTDIR) => continue,
                Err(source) => return Err(WatchError::Watch { path, source }),
            };
            self.dirs.insert(wd, dir.clone());
            let entries = match std::fs::read_dir(&path) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(WatchError::Read { path, source }),
            };
            for entry in entries {
                let entry = entry.map_err(|source| WatchError::Read {
                    path: path.clone(),
                    source,
                })?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    return Err(WatchError::NotUtf8(path));
                };
                if name == ".git" {
                    if dir.is_empty() {
                        continue;
                    }
                    return Err(WatchError::Nested(join(&dir, name)));
                }
                let child = join(&dir, name);
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    if !self.ignored.contains(&child) {
                        stack.push(child);
                    }
                } else if let Some(files) = files.as_deref_mut() {
                    files.insert(child);
                }
            }
        }
        Ok(())
    }

    fn note(&mut self, path: String, first: First) {
        self.pending.entry(path).or_insert(first);
        if self.pending.len() > MAX_PENDING {
            self.broken
                .get_or_insert_with(|| format!("more than {MAX_PENDING} paths changed"));
        }
    }

    fn drain(&mut self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 16 * 1024];
        // A name that is not UTF-8 cannot be given to git as a path here: `None` in
        // the inner option, and the events are no longer trusted.
        let mut events: Vec<(i32, ReadFlags, Option<Option<String>>)> = Vec::new();
        {
            let mut reader = inotify::Reader::new(&self.fd, &mut buf);
            loop {
                match reader.next() {
                    Ok(ev) => events.push((
                        ev.wd(),
                        ev.events(),
                        ev.file_name().map(|n| n.to_str().ok().map(str::to_owned)),
                    )),
                    Err(Errno::AGAIN) => break,
                    Err(Errno::INTR) => {}
                    Err(e) => {
                        self.broken = Some(format!("reading the kernel's events failed: {e}"));
                        break;
                    }
                }
            }
        }
        for (wd, flags, name) in events {
            self.event(wd, flags, name);
        }
    }

    fn event(&mut self, wd: i32, flags: ReadFlags, name: Option<Option<String>>) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.broken = Some("the kernel's event queue overflowed".to_owned());
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if flags.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            if dir.is_empty() {
                self.broken = Some("the directory itself was removed".to_owned());
            }
            return;
        }
        if flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF) {
            if dir.is_empty() {
                self.broken = Some("the directory itself was moved or removed".to_owned());
            } else if flags.contains(ReadFlags::MOVE_SELF) {
                self.broken = Some(format!("the directory {dir} was moved"));
            }
            return;
        }
        let Some(name) = name else {
            return;
        };
        let Some(name) = name else {
            self.broken = Some(format!("a file name that is not UTF-8 in {dir:?}"));
            return;
        };
        let path = join(&dir, &name);
        if dir.is_empty() && name == ".git" {
            return;
        }
        if name == ".git" {
            self.broken = Some(format!("a nested git repository at {path}"));
            return;
        }
        if flags.contains(ReadFlags::ISDIR) {
            if flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO) {
                self.broken = Some(format!("the directory {path} was renamed"));
            } else if flags.contains(ReadFlags::CREATE) {
                if !self.ignored.contains(&path) {
                    self.note(path, First::Created);
                }
            } else if flags.contains(ReadFlags::DELETE) {
                self.note(path, First::Other);
            }
            return;
        }
        if name == ".gitignore" {
            self.broken = Some(format!("{path} changed"));
            return;
        }
        let first = if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
            First::Created
        } else {
            First::Other
        };
        self.note(path, first);
    }

    /// After a snapshot: events queued while it read the directory may be older than
    /// what it read, so none of them can prove a path absent from it.
    fn settle(&mut self) {
        self.drain();
        for first in self.pending.values_mut() {
            *first = First::Other;
        }
    }

    /// The next snapshot from the pending paths alone.
    fn apply(
        &mut self,
        shadow: &Shadow,
        limits: &Limits,
        base: &Snapshot,
    ) -> Result<Snapshot, ChangesError> {
        if self.pending.is_empty() {
            return Ok(base.clone());
        }
        let pending = std::mem::take(&mut self.pending);
        let mut removed: Vec<String> = Vec::new();
        let mut files: BTreeSet<String> = BTreeSet::new();
        let mut dirs: Vec<String> = Vec::new();
        for (path, first) in pending {
            match std::fs::symlink_metadata(self.root.join(&path)) {
                Err(e)
                    if e.kind() == std::io::ErrorKind::NotFound
                        || e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) =>
                {
                    if first == First::Other {
                        removed.push(path);
                    }
                }
                Err(e) => return Err(e.into()),
                Ok(md) if md.is_dir() => {
                    if first == First::Other {
                        removed.push(path.clone());
                    }
                    dirs.push(path);
                }
                Ok(md) if md.is_file() || md.is_symlink() => {
                    files.insert(path);
                }
                // Sockets, fifos, devices: git does not record them.
                Ok(_) => removed.push(path),
            }
        }
        // Only paths that came and went (Berth's own write probe): nothing to record.
        if files.is_empty() && dirs.is_empty() && removed.is_empty() {
            return Ok(base.clone());
        }
        // New directories: those git ignores are left alone; the others are watched
        // and their files recorded.
        if !dirs.is_empty() {
            let ignored = check_ignore(shadow, dirs.iter())?;
            for dir in dirs {
                if ignored.contains(&dir) {
                    self.ignored.insert(dir);
                } else {
                    self.add_tree(&dir, Some(&mut files))?;
                }
            }
        }
        // Large files: those left out before stay out unless they changed; the
        // changed ones are weighed again. The exclude file must not hide a changed
        // file from the ignore check below.
        let gone = |p: &str| {
            removed.iter().any(|r| {
                p == r
                    || p.strip_prefix(r.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            })
        };
        let mut large: Vec<(String, u64, i64)> = base
            .large
            .iter()
            .filter(|(p, _, _)| !files.contains(p) && !gone(p))
            .cloned()
            .collect();
        shadow.write_excludes(&large)?;
        let ignored = check_ignore(shadow, files.iter())?;
        let mut add: Vec<&str> = Vec::new();
        let mut unrecord: Vec<&str> = removed.iter().map(String::as_str).collect();
        for path in &files {
            if ignored.contains(path) {
                continue;
            }
            match std::fs::symlink_metadata(self.root.join(path)) {
                Ok(md) if md.is_file() && md.len() > limits.max_file_bytes => {
                    large.push((path.clone(), md.len(), md.mtime()));
                    unrecord.push(path);
                }
                _ => add.push(path),
            }
        }
        large.sort();
        shadow.write_excludes(&large)?;
        if add.is_empty() && unrecord.is_empty() {
            // Only paths that came and went (Berth's own write probe, an editor's
            // swap file) or that git ignores: the index, so the tree, is as it was.
            return Ok(Snapshot {
                tree: base.tree.clone(),
                large,
                nested: shadow.nested(&[]),
            });
        }
        if !unrecord.is_empty() {
            feed(
                shadow,
                &[
                    "rm",
                    "--cached",
                    "-r",
                    "-q",
                    "--ignore-unmatch",
                    "--pathspec-from-file=-",
                    "--pathspec-file-nul",
                ],
                &unrecord,
                true,
            )?;
        }
        if !add.is_empty() {
            feed(
                shadow,
                &[
                    "update-index",
                    "--add",
                    "--remove",
                    "--replace",
                    "-z",
                    "--stdin",
                ],
                &add,
                false,
            )?;
        }
        let tree = shadow.write_tree()?;
        berth_host::private::write(shadow.git_dir.join("berth-last"), &tree)?;
        let nested = shadow.nested(&[]);
        Ok(Snapshot {
            tree,
            large,
            nested,
        })
    }
}

/// Runs git with `paths` on its standard input, NUL-separated.
fn feed(
    shadow: &Shadow,
    args: &[&str],
    paths: &[&str],
    literal: bool,
) -> Result<Vec<u8>, ChangesError> {
    let mut cmd = shadow.command();
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if literal {
        cmd.env("GIT_LITERAL_PATHSPECS", "1");
    }
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        let mut input = Vec::new();
        for p in paths {
            input.extend_from_slice(p.as_bytes());
            input.push(0);
        }
        stdin.write_all(&input)?;
    }
    let out = child.wait_with_output()?;
    // check-ignore exits 1 when nothing is ignored.
    let ok = out.status.success()
        || (args.first() == Some(&"check-ignore") && out.status.code() == Some(1));
    if ok {
        Ok(out.stdout)
    } else {
        Err(crate::git::failed(&out, &args.join(" ")).into())
    }
}

/// Which of `paths` git ignores (tracked files never are).
fn check_ignore<'a>(
    shadow: &Shadow,
    paths: impl Iterator<Item = &'a String>,
) -> Result<HashSet<String>, ChangesError> {
    let paths: Vec<&str> = paths.map(String::as_str).collect();
    if paths.is_empty() {
        return Ok(HashSet::new());
    }
    let out = feed(shadow, &["check-ignore", "-z", "--stdin"], &paths, false)?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// The directories git ignores under the work tree, as `ls-files` collapses them.
fn ignored_dirs(shadow: &Shadow) -> Result<HashSet<String>, ChangesError> {
    let out = shadow.git_bytes([
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
        "--directory",
    ])?;
    Ok(out
        .split(|b| *b == 0)
        .filter_map(|p| p.strip_suffix(b"/"))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}

/// The next snapshot from the kernel's events, if the directory is watched and its
/// events can be trusted; `None` means a full scan is needed.
pub(super) fn incremental(shadow: &Shadow, limits: &Limits) -> Option<Snapshot> {
    // Taken out of the registry while git runs (the caller holds the directory's
    // lock, so no one else wants it meanwhile): other directories' snapshots go on.
    let mut w = {
        let mut guard = registry();
        let reg = guard.as_mut()?;
        match reg.slots.remove(&shadow.git_dir) {
            Some((Slot::Watching(w), _)) => w,
            Some(other) => {
                reg.slots.insert(shadow.git_dir.clone(), other);
                return None;
            }
            None => return None,
        }
    };
    let base = w.base.clone()?;
    let last = std::fs::read_to_string(shadow.git_dir.join("berth-last")).unwrap_or_default();
    let result = if last.trim() != base.tree {
        Err("the shadow repository was moved on by another process".to_owned())
    } else {
        w.drain();
        match w.broken.take() {
            Some(reason) => Err(reason),
            None => w.apply(shadow, limits, &base).map_err(|e| e.to_string()),
        }
    };
    match result {
        Ok(snap) => {
            w.settle();
            w.base = Some(snap.clone());
            let mut guard = registry();
            if let Some(reg) = guard.as_mut() {
                reg.clock += 1;
                let clock = reg.clock;
                reg.slots
                    .insert(shadow.git_dir.clone(), (Slot::Watching(w), clock));
            }
            Some(snap)
        }
        Err(reason) => {
            tracing::debug!(dir = %shadow.work_tree.display(), %reason, "full scan");
            None
        }
    }
}

/// Before a full scan: starts watching the directory (unless it could not be watched
/// lately), so that whatever changes from here on is seen by the next snapshot.
pub(super) fn begin(shadow: &Shadow) {
    {
        let mut guard = registry();
        let reg = guard.get_or_insert_with(|| Registry {
            slots: HashMap::new(),
            clock: 0,
            scans: HashMap::new(),
            notices: HashMap::new(),
        });
        *reg.scans.entry(shadow.git_dir.clone()).or_default() += 1;
        reg.clock += 1;
        let clock = reg.clock;
        if let Some((Slot::Refused { scans, .. }, used)) = reg.slots.get_mut(&shadow.git_dir) {
            *scans += 1;
            *used = clock;
            if *scans < RETRY_AFTER {
                return;
            }
        }
    }
    // The walk runs outside the registry's lock.
    let slot = match ignored_dirs(shadow)
        .and_then(|ignored| Ok(Watch::new(&shadow.work_tree, ignored)?))
    {
        Ok(w) => Slot::Watching(Box::new(w)),
        Err(e) => {
            let reason = e.to_string();
            tracing::debug!(dir = %shadow.work_tree.display(), %reason, "not watched");
            if let ChangesError::Watch(w) = &e
                && let Some(notice) = limit_notice(w)
                && let Some(reg) = registry().as_mut()
            {
                reg.notices
                    .entry(shadow.git_dir.clone())
                    .or_insert(Some(notice));
            }
            Slot::Refused { reason, scans: 0 }
        }
    };
    let mut guard = registry();
    let Some(reg) = guard.as_mut() else {
        return;
    };
    reg.clock += 1;
    let clock = reg.clock;
    reg.slots.insert(shadow.git_dir.clone(), (slot, clock));
    while reg.slots.len() > MAX_WATCHES {
        let Some(oldest) = reg
            .slots
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        reg.slots.remove(&oldest);
    }
}

/// After a full scan: the watch begun before it now has a base.
pub(super) fn established(shadow: &Shadow, snap: &Snapshot) {
    let mut guard = registry();
    let Some(reg) = guard.as_mut() else {
        return;
    };
    if let Some((Slot::Watching(w), _)) = reg.slots.get_mut(&shadow.git_dir) {
        w.settle();
        w.base = Some(snap.clone());
    }
}

/// Drops the watch on a directory (tests: to see the scan without one).
#[cfg(test)]
pub fn forget(git_dir: &Path) {
    if let Some(reg) = registry().as_mut() {
        reg.slots.remove(git_dir);
    }
}

/// What the user has yet to be told of why a directory is not watched (a limit was
/// reached): `Some` once per directory and process, then `None`.
pub fn notice(git_dir: &Path) -> Option<String> {
    registry()
        .as_mut()
        .and_then(|r| r.notices.get_mut(git_dir))
        .and_then(Option::take)
}

/// How many full scans of a directory this process began.
pub fn scans(git_dir: &Path) -> u64 {
    registry()
        .as_ref()
        .and_then(|r| r.scans.get(git_dir).copied())
        .unwrap_or(0)
}

/// Whether the directory is watched now, or why not (for tests and diagnostics).
pub fn state(git_dir: &Path) -> Result<(), String> {
    let guard = registry();
    match guard.as_ref().and_then(|r| r.slots.get(git_dir)) {
        Some((Slot::Watching(w), _)) if w.base.is_some() => Ok(()),
        Some((Slot::Watching(_), _)) => Err("no snapshot yet".to_owned()),
        Some((Slot::Refused { reason, .. }, _)) => Err(reason.clone()),
        None => Err("not watched".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Limits, Shadow, Snapshot};
    use std::path::Path;

    /// A small deterministic generator (xorshift): the same operations every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap_or(0)
        }
    }

    fn files_under(dir: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir.join(rel)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                files_under(dir, &path, out);
                out.push(format!("{path}/"));
            } else {
                out.push(path);
            }
        }
    }

    /// One random change to the directory, of the kinds an agent or a person makes.
    fn mutate(dir: &Path, rng: &mut Rng, step: usize) {
        let mut all = Vec::new();
        files_under(dir, "", &mut all);
        all.sort();
        // (.gitignore is left alone: a change to it is a full scan, tested apart.)
        let files: Vec<&String> = all
            .iter()
            .filter(|p| !p.ends_with('/') && *p != ".gitignore")
            .collect();
        let dirs: Vec<String> = std::iter::once(String::new())
            .chain(
                all.iter()
                    .filter_map(|p| p.strip_suffix('/').map(|d| format!("{d}/"))),
            )
            .filter(|d| !d.starts_with("target"))
            .collect();
        let in_dir = |rng: &mut Rng| dirs[rng.below(dirs.len())].clone();
        let pick = |rng: &mut Rng| {
            files
                .get(rng.below(files.len().max(1)))
                .map(|p| dir.join(p))
        };
        match rng.below(13) {
            0 | 1 => {
                let d = in_dir(rng);
                std::fs::write(
                    dir.join(format!("{d}new{step}.txt")),
                    format!("made at {step}\n"),
                )
                .unwrap();
            }
            2 | 3 => {
                if let Some(p) = pick(rng)
                    && std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
                {
                    let mut text = std::fs::read(&p).unwrap_or_default();
                    text.extend_from_slice(format!("edit {step}\n").as_bytes());
                    std::fs::write(&p, text).unwrap();
                }
            }
            4 => {
                if let Some(p) = pick(rng) {
                    let _ = std::fs::remove_file(p);
                }
            }
            5 => {
                if let Some(p) = pick(rng) {
                    let d = in_dir(rng);
                    let _ = std::fs::rename(p, dir.join(format!("{d}moved{step}.txt")));
                }
            }
            6 => {
                let d = in_dir(rng);
                let new = dir.join(format!("{d}sub{step}/deeper"));
                std::fs::create_dir_all(&new).unwrap();
                std::fs::write(new.join("a.txt"), "a\n").unwrap();
                std::fs::write(new.parent().unwrap().join("b.txt"), "b\n").unwrap();
            }
            7 => {
                let d = in_dir(rng);
                if !d.is_empty() {
                    let _ = std::fs::remove_dir_all(dir.join(&d));
                }
            }
            8 => {
                if let Some(p) = pick(rng) {
                    use std::os::unix::fs::PermissionsExt;
                    if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                        let _ =
                            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
                    }
                }
            }
            9 => {
                // A probe: made and removed between two snapshots.
                let p = dir.join(format!("in{}/.probe{step}", rng.below(3)));
                if std::fs::write(&p, "x").is_ok() {
                    std::fs::remove_file(&p).unwrap();
                }
                let d = in_dir(rng);
                let _ = std::os::unix::fs::symlink("in0/a.txt", dir.join(format!("{d}link{step}")));
            }
            10 => {
                // Ignored: a log file anywhere, and a build directory.
                let d = in_dir(rng);
                std::fs::write(dir.join(format!("{d}run{step}.log")), "log\n").unwrap();
                std::fs::create_dir_all(dir.join(format!("target/debug/b{step}"))).unwrap();
                std::fs::write(dir.join(format!("target/debug/b{step}/out")), "o\n").unwrap();
            }
            11 => {
                // Large, then small again.
                let d = in_dir(rng);
                let p = dir.join(format!("{d}big{}.bin", rng.below(2)));
                let size = if rng.below(2) == 0 { 200 } else { 5 };
                std::fs::write(p, vec![b'x'; size]).unwrap();
            }
            _ => {
                // A file replaced by a directory of the same name.
                if let Some(p) = pick(rng)
                    && std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
                {
                    std::fs::remove_file(&p).unwrap();
                    std::fs::create_dir_all(&p).unwrap();
                    std::fs::write(p.join("inside.txt"), "i\n").unwrap();
                }
            }
        }
    }

    fn large_paths(s: &Snapshot) -> Vec<String> {
        let mut v: Vec<String> = s.large.iter().map(|(p, _, _)| p.clone()).collect();
        v.sort();
        v
    }

    /// What a fresh shadow repository (no watch, a full scan) records.
    fn full_scan(root: &Path, dir: &Path, n: usize, limits: &Limits) -> Snapshot {
        let home = root.join(format!("fresh{n}"));
        let shadow = Shadow::open(&home, dir, (1, 2)).unwrap();
        let snap = shadow.snapshot(limits).unwrap();
        let _ = std::fs::remove_dir_all(home);
        snap
    }

    #[test]
    fn snapshots_from_events_match_full_scans() {
        let root = std::env::temp_dir().join(format!("berth-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("dir");
        for d in ["in0", "in1/deep", "in2"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join(".gitignore"), "*.log\n/target/\n").unwrap();
        for (i, d) in ["in0", "in1", "in1/deep", "in2", ""].iter().enumerate() {
            for j in 0..4 {
                let name = if d.is_empty() {
                    format!("top{j}.txt")
                } else {
                    format!("{d}/f{j}.txt")
                };
                std::fs::write(dir.join(name), format!("{i} {j}\n")).unwrap();
            }
        }
        std::fs::write(dir.join("in0/a.txt"), "a\n").unwrap();
        std::fs::create_dir_all(dir.join("target/debug")).unwrap();
        let limits = Limits {
            max_file_bytes: 100,
            ..Limits::default()
        };
        let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
        shadow.snapshot(&limits).unwrap();
        super::state(shadow.git_dir()).expect("watched after the first snapshot");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..40 {
            for step in 0..1 + rng.below(4) {
                mutate(&dir, &mut rng, round * 10 + step);
            }
            let got = if round % 2 == 0 {
                shadow.snapshot(&limits).unwrap()
            } else {
                shadow.snapshot_before(&limits).unwrap()
            };
            let want = full_scan(&root, &dir, round, &limits);
            assert_eq!(got.tree, want.tree, "round {round}: the tree");
            assert_eq!(
                large_paths(&got),
                large_paths(&want),
                "round {round}: the large files"
            );
        }
        // The events served every snapshot but the first.
        assert_eq!(super::scans(shadow.git_dir()), 1);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn what_events_cannot_prove_falls_back_to_a_full_scan() {
        let root =
            std::env::temp_dir().join(format!("berth-watch-fallback-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("dir");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/one.txt"), "1\n").unwrap();
        std::fs::write(dir.join("keep.log"), "kept\n").unwrap();
        std::fs::write(dir.join(".gitignore"), "*.log\n").unwrap();
        let limits = Limits::default();
        let shadow = Shadow::open(&root.join("home"), &dir, (1, 2)).unwrap();
        shadow.snapshot(&limits).unwrap();
        let check = |what: &str, n: usize| {
            let scans = super::scans(shadow.git_dir());
            let got = shadow.snapshot(&limits).unwrap();
            assert_eq!(
                super::scans(shadow.git_dir()),
                scans + 1,
                "{what}: a full scan"
            );
            let want = full_scan(&root, &dir, n, &limits);
            assert_eq!(got.tree, want.tree, "after {what}");
        };
        // A renamed directory: its watches would name the old path.
        std::fs::rename(dir.join("a"), dir.join("z")).unwrap();
        std::fs::write(dir.join("z/b/two.txt"), "2\n").unwrap();
        check("a directory rename", 1);
        super::state(shadow.git_dir()).expect("watched again after the scan");
        // A changed .gitignore: keep.log, never touched, is no longer ignored.
        std::fs::write(dir.join(".gitignore"), "*.tmp\n").unwrap();
        check("a changed .gitignore", 2);
        let listed = shadow.git(["ls-files", "keep.log"]).unwrap();
        assert_eq!(listed, "keep.log");
        // A nested repository: git records it as a link, so it is not watched.
        std::fs::create_dir_all(dir.join("z/inner/.git")).unwrap();
        check("a nested repository", 4);
        let why = super::state(shadow.git_dir()).expect_err("not watched");
        assert!(why.contains("nested git repository"), "{why}");
        // Watched again without it; then a file name that is not UTF-8 (which git
        // takes, and a path string here cannot carry).
        std::fs::remove_dir_all(dir.join("z/inner")).unwrap();
        super::forget(shadow.git_dir());
        check("the nested repository gone", 5);
        super::state(shadow.git_dir()).expect("watched again");
        {
            use std::os::unix::ffi::OsStrExt;
            let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
            std::fs::write(dir.join("z").join(name), "latin-1\n").unwrap();
        }
        check("a file name that is not UTF-8", 6);
        let _ = std::fs::remove_dir_all(&root);
    }
}
