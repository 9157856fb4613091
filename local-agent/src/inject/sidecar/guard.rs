//! The guard: what a fenced agent must never leave written inside its own directory.
//!
//! Landlock's rights pass to everything beneath a directory, so an agent that may write
//! its directory may also write `.git/hooks` (code the user's next `git` runs),
//! `.git/config` (`core.hooksPath`, `core.fsmonitor`, aliases) and `.berth` (the
//! project layer of its own next run). The guard checks and restores them with plain
//! system calls (docs/fence.md §3b, layer 3):
//!
//! - before the agent starts, [`Snapshot::take`] reads the guarded paths (their bytes,
//!   modes and symlink targets, bounded) through the pinned directory, never following
//!   a symlink; the snapshot goes to `$BERTH_HOME/guard/`, out of the fenced agent's
//!   reach, and the run's journal names it, so a Berth that crashes restores at its next
//!   start;
//! - after the agent is gone, [`Snapshot::restore`] compares and puts back exactly what
//!   was there: a file the agent added is removed, a changed one rewritten as a fresh
//!   file (never through a link of the agent's), a removed one recreated. Each path put
//!   back is reported, and the run shows it as a denial by the fence.
//!
//! A `.git` that did not exist is not guarded whole (an agent may `git init`); a
//! `.berth` that did not exist is: the agent's new `.berth` is removed. Beyond these,
//! [`repos`] judges every git control file of every repository in the directory (the
//! top one and the nested ones the change record knows) by what it would make git
//! run, and puts back what the agent planted.

use crate::dir::fd::{at_parent, open_nofollow, read_all, sorted_names, write_all};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// The paths guarded, relative to the directory.
pub const GUARDED: [&str; 3] = [".git/config", ".git/hooks", ".berth"];

/// The most bytes a snapshot holds; a directory whose guarded paths hold more is not
/// guarded, and the run says so.
pub const MAX_BYTES: u64 = 4 << 20;
/// The most entries a snapshot holds.
pub const MAX_ENTRIES: usize = 2000;

/// What one guarded path was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "node", rename_all = "snake_case")]
pub enum Node {
    /// Nothing was there.
    Missing,
    Dir {
        mode: u32,
    },
    /// A regular file: its permission bits and its bytes, in hex.
    File {
        mode: u32,
        hex: String,
        /// Its inode, size, modification and change times (seconds, nanoseconds) as
        /// read, when its change time was older than the reading by more than a clock
        /// tick: a file found with the same stamps after the run is the same file
        /// unchanged (no one can set a change time back), and is not read again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stamp: Option<[i64; 6]>,
    },
    Symlink {
        target: String,
    },
    /// A FIFO, a socket or a device: never opened, left as it is while it stays one
    /// of its kind.
    Other {
        kind: String,
    },
}

/// The kind of a file that is neither a directory, a regular file nor a symlink.
fn other_kind(ft: FileType) -> &'static str {
    match ft {
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character_device",
        FileType::BlockDevice => "block_device",
        FileType::Unknown | FileType::RegularFile | FileType::Directory | FileType::Symlink => {
            "unknown"
        }
    }
}

/// One entry of a snapshot, relative to the directory; a directory comes before what
/// it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: String,
    pub node: Node,
}

/// The guarded paths of one directory, as they were before the agent ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The identity (device, inode) of `.git` when it was a directory.
    pub git: Option<(u64, u64)>,
    pub entries: Vec<Entry>,
    /// The directory's absolute path, against which the repositories' pointers are
    /// judged ([`repos`]); empty in a snapshot from before it was kept.
    #[serde(default)]
    pub root: String,
    /// Every git control file of the top repository and the nested ones known.
    #[serde(default)]
    pub repos: Vec<repos::Control>,
}

/// What the guard put back, relative to the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    pub path: String,
    /// `added`, `changed`, `removed` or `replaced` (what the agent did).
    pub what: &'static str,
    /// What git would have done with it (a repository's control file), if known.
    pub why: Option<String>,
}

/// Why a snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("{path} holds more than the guard keeps ({limit})")]
    TooLarge { path: String, limit: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

fn read_err(path: &str, e: Errno) -> GuardError {
    GuardError::Read {
        path: path.to_owned(),
        source: e.into(),
    }
}

struct Budget {
    bytes: u64,
    entries: usize,
}

impl Budget {
    /// Counts one entry and `bytes` more bytes.
    fn take(&mut self, path: &str, bytes: u64) -> Result<(), GuardError> {
        self.entries += 1;
        self.more(path, bytes)
    }

    /// Counts `bytes` more bytes of the entry last counted.
    fn more(&mut self, path: &str, bytes: u64) -> Result<(), GuardError> {
        self.bytes += bytes;
        if self.entries > MAX_ENTRIES {
            return Err(GuardError::TooLarge {
                path: path.to_owned(),
                limit: format!("{MAX_ENTRIES} entries"),
            });
        }
        if self.bytes > MAX_BYTES {
            return Err(GuardError::TooLarge {
                path: path.to_owned(),
                limit: format!("{} MiB", MAX_BYTES >> 20),
            });
        }
        Ok(())
    }
}

/// Sets the permission bits of `name` in `parent` (the umask does not apply).
fn set_mode(parent: &OwnedFd, name: &str, mode: u32) -> Result<(), Errno> {
    rustix::fs::chmodat(
        parent,
        name,
        Mode::from_raw_mode(mode as _),
        AtFlags::empty(),
    )
}

/// A change this close to a reading may be followed by another in the same clock
/// tick, with the same change time: such a file is compared by its bytes.
const RACY_NS: i128 = 100_000_000;

/// Now, in nanoseconds since the epoch.
fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// A file's inode, size, modification and change times.
#[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
fn stamp_of(st: &rustix::fs::Stat) -> [i64; 6] {
    [
        st.st_ino as i64,
        st.st_size as i64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ]
}

/// The permission bits of `st` (`st_mode` is a `u16` on macOS).
#[allow(clippy::unnecessary_cast)]
fn perm(st: &rustix::fs::Stat) -> u32 {
    st.st_mode as u32 & 0o7777
}

/// Opens the directory `rel` (components under `dir`), never through a symlink.
fn open_dir(dir: BorrowedFd<'_>, rel: &str) -> Result<OwnedFd, Errno> {
    if rel.is_empty() {
        return rustix::io::dup(dir);
    }
    let (parent, last) = at_parent(dir, rel)?;
    open_nofollow(&parent, last, OFlags::RDONLY | OFlags::DIRECTORY)
}

/// The parent directory of `rel` and its last component.
fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// What is at `name` in `parent`, without following it, and (for a regular file)
/// its bytes, bounded by `budget`. Without a budget (what the agent left, listed only
/// to be compared and removed), a file's bytes are not read.
fn node_at(
    parent: &OwnedFd,
    name: &str,
    rel: &str,
    mut budget: Option<&mut Budget>,
) -> Result<Node, GuardError> {
    let mut take = |bytes: u64| match budget.as_deref_mut() {
        Some(b) => b.take(rel, bytes),
        None => Ok(()),
    };
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(Node::Missing),
        Err(e) => return Err(read_err(rel, e)),
    };
    let mode = perm(&st);
    match FileType::from_raw_mode(st.st_mode as _) {
        FileType::Directory => {
            take(0)?;
            Ok(Node::Dir { mode })
        }
        FileType::RegularFile => {
            take(st.st_size as u64)?;
            let Some(budget) = budget else {
                return Ok(Node::File {
                    mode,
                    hex: String::new(),
                    stamp: None,
                });
            };
            if let Some(hex) = seen::bytes(&st) {
                return Ok(Node::File {
                    mode,
                    hex,
                    stamp: Some(stamp_of(&st)),
                });
            }
            let fd = open_nofollow(parent, name, OFlags::RDONLY).map_err(|e| read_err(rel, e))?;
            let read_at = now_ns();
            let bytes = read_all(&fd).map_err(|e| read_err(rel, e))?;
            // It grew between the stat and the read: count what was read.
            budget.more(rel, (bytes.len() as u64).saturating_sub(st.st_size as u64))?;
            // The stamps of what was read (the descriptor's), unless it changed within
            // a clock tick of the reading: then only its bytes can tell.
            let stamp = rustix::fs::fstat(&fd)
                .ok()
                .filter(|now| stamp_of(now) == stamp_of(&st) && bytes.len() as i64 == now.st_size)
                .map(|now| stamp_of(&now))
                .filter(|s| {
                    let changed = i128::from(s[4]) * 1_000_000_000 + i128::from(s[5]);
                    read_at - changed > RACY_NS
                });
            let hex = to_hex(&bytes);
            if stamp.is_some() {
                seen::keep(&st, &hex);
            }
            Ok(Node::File { mode, hex, stamp })
        }
        FileType::Symlink => {
            take(0)?;
            let target =
                rustix::fs::readlinkat(parent, name, Vec::new()).map_err(|e| read_err(rel, e))?;
            Ok(Node::Symlink {
                target: target.to_string_lossy().into_owned(),
            })
        }
        // A FIFO, a socket or a device in a guarded place is never opened.
        ft @ (FileType::Fifo
        | FileType::Socket
        | FileType::CharacterDevice
        | FileType::BlockDevice
        | FileType::Unknown) => {
            take(0)?;
            Ok(Node::Other {
                kind: other_kind(ft).to_owned(),
            })
        }
    }
}

/// The guarded files read before, in this process, with settled stamps (see
/// [`Node::File`]): a file found again with the same device, inode, size and times is
/// the same bytes, so the next run's snapshot does not read it again, as the check
/// after a run does not. A process-wide memory, bounded.
mod seen {
    use super::stamp_of;
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};

    /// The most bytes of hex kept; past it, the memory starts again.
    const MAX_HEX: usize = 16 << 20;

    type Key = (u64, [i64; 6]);

    static SEEN: Mutex<Option<(HashMap<Key, String>, usize)>> = Mutex::new(None);

    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    fn key(st: &rustix::fs::Stat) -> Key {
        (st.st_dev as u64, stamp_of(st))
    }

    /// The bytes (in hex) of the file `st` describes, if it was read with these stamps.
    pub(super) fn bytes(st: &rustix::fs::Stat) -> Option<String> {
        let seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
        seen.as_ref()?.0.get(&key(st)).cloned()
    }

    /// Keeps what a file `st` describes held when it was read.
    pub(super) fn keep(st: &rustix::fs::Stat, hex: &str) {
        let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
        let (map, size) = seen.get_or_insert_with(Default::default);
        if *size + hex.len() > MAX_HEX {
            map.clear();
            *size = 0;
        }
        if hex.len() <= MAX_HEX && map.insert(key(st), hex.to_owned()).is_none() {
            *size += hex.len();
        }
    }
}

/// Every entry at and beneath `rel`, a directory before what it holds (see
/// [`node_at`] for `budget`).
fn walk(
    dir: BorrowedFd<'_>,
    rel: &str,
    budget: Option<&mut Budget>,
    out: &mut Vec<Entry>,
) -> Result<(), GuardError> {
    let (parent_rel, name) = split(rel);
    let parent = match open_dir(dir, parent_rel) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => {
            out.push(Entry {
                path: rel.to_owned(),
                node: Node::Missing,
            });
            return Ok(());
        }
        Err(e) => return Err(read_err(parent_rel, e)),
    };
    walk_in(&parent, name, rel, budget, out)
}

/// [`walk`] from `name` in `parent` (shown as `rel`): each directory's entries are
/// read through the descriptor just opened for it, never by its path again.
fn walk_in(
    parent: &OwnedFd,
    name: &str,
    rel: &str,
    mut budget: Option<&mut Budget>,
    out: &mut Vec<Entry>,
) -> Result<(), GuardError> {
    let node = node_at(parent, name, rel, budget.as_deref_mut())?;
    let is_dir = matches!(node, Node::Dir { .. });
    out.push(Entry {
        path: rel.to_owned(),
        node,
    });
    if is_dir {
        let fd = open_nofollow(parent, name, OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(|e| read_err(rel, e))?;
        for child in sorted_names(&fd).map_err(|e| read_err(rel, e))? {
            walk_in(
                &fd,
                &child,
                &format!("{rel}/{child}"),
                budget.as_deref_mut(),
                out,
            )?;
        }
    }
    Ok(())
}

/// The identity of `.git` when it is a directory.
fn git_identity(dir: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let st = rustix::fs::statat(dir, ".git", AtFlags::SYMLINK_NOFOLLOW).ok()?;
    (FileType::from_raw_mode(st.st_mode as _) == FileType::Directory)
        .then(|| (crate::dir::pin::dev_of(&st), st.st_ino as u64))
}

impl Snapshot {
    /// The guarded paths of the directory `dir` (whose absolute path is `root`), and
    /// the control files of its repositories (the top one and those `nested`, work
    /// trees relative to it), as they are now.
    pub fn take(dir: impl AsFd, root: &str, nested: &[String]) -> Result<Snapshot, GuardError> {
        let dir = dir.as_fd();
        let git = git_identity(dir);
        let mut budget = Budget {
            bytes: 0,
            entries: 0,
        };
        let mut entries = Vec::new();
        for rel in GUARDED {
            // A `.git` that is not a directory (a worktree's or submodule's pointer
            // file, or none) has no hooks or config here to guard.
            if rel.starts_with(".git/") && git.is_none() {
                continue;
            }
            walk(dir, rel, Some(&mut budget), &mut entries)?;
        }
        let repos = repos::take(dir, root, nested)?;
        Ok(Snapshot {
            git,
            entries,
            root: root.to_owned(),
            repos,
        })
    }

    /// Puts the guarded paths of `dir` back as they were, and says what the agent had
    /// done to them. Idempotent: a second call finds nothing to do. What could not be
    /// put back is an error, with the paths that were.
    pub fn restore(&self, dir: impl AsFd) -> Result<Vec<Restored>, (Vec<Restored>, String)> {
        let dir = dir.as_fd();
        let mut done = Vec::new();
        let mut problems = Vec::new();
        if let Some(was) = self.git
            && git_identity(dir) != Some(was)
        {
            // The agent moved or replaced `.git` itself: what is there now still gets
            // the guarded files put back, so no hook of the agent's stays in it.
            done.push(Restored {
                path: ".git".to_owned(),
                what: "replaced",
                why: None,
            });
            if git_identity(dir).is_none() {
                problems.push(".git is no longer a directory; Berth cannot put it back".to_owned());
            }
        }
        let roots: Vec<&str> = GUARDED
            .iter()
            .copied()
            .filter(|r| self.entries.iter().any(|e| e.path == *r))
            .collect();
        for root in roots {
            let want: Vec<&Entry> = self
                .entries
                .iter()
                .filter(|e| e.path == root || e.path.starts_with(&format!("{root}/")))
                .collect();
            if let Err(e) = restore_root(dir, root, &want, &mut done) {
                problems.push(format!("{root}: {e}"));
            }
        }
        // The repositories' control files (those known before the run: the change
        // record adds the nested ones it finds after it, see `repos::check`).
        if !self.root.is_empty() {
            let (put, failed) = repos::check(dir, &self.root, &self.repos, &[]);
            for r in put {
                if !done.iter().any(|d| d.path == r.path) {
                    done.push(r);
                }
            }
            problems.extend(failed);
        }
        if problems.is_empty() {
            Ok(done)
        } else {
            Err((done, problems.join("; ")))
        }
    }

    /// Writes the snapshot to `file` (0600, replacing nothing), for the journal.
    pub fn save(&self, file: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        berth_host::private::write(file, &text)
    }

    /// Reads a snapshot [`Snapshot::save`] wrote.
    pub fn load(file: &Path) -> std::io::Result<Snapshot> {
        let text = std::fs::read(file)?;
        serde_json::from_slice(&text).map_err(std::io::Error::other)
    }
}

/// Puts one guarded root back: removes what was not there, then recreates or rewrites
/// what differs, a directory before what it holds.
fn restore_root(
    dir: BorrowedFd<'_>,
    root: &str,
    want: &[&Entry],
    done: &mut Vec<Restored>,
) -> Result<(), Errno> {
    let wanted = |rel: &str| want.iter().find(|e| e.path == rel).map(|e| &e.node);
    // The root's parent (the directory itself or `.git`): if it is gone, there is
    // nothing of the agent's to remove and nowhere to put things back.
    let (parent_rel, _) = split(root);
    if let Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) = open_dir(dir, parent_rel) {
        return Ok(());
    }
    // First what is there now and should not be (or is of another kind).
    let mut now = Vec::new();
    let _ = walk(dir, root, None, &mut now);
    for entry in now.iter().rev() {
        let keep = match (&entry.node, wanted(&entry.path)) {
            (Node::Missing, _) => true,
            (Node::Dir { .. }, Some(Node::Dir { .. })) => true,
            (Node::File { .. }, Some(Node::File { .. })) => true,
            (Node::Symlink { target }, Some(Node::Symlink { target: t })) => target == t,
            (Node::Other { kind }, Some(Node::Other { kind: k })) => kind == k,
            (
                Node::Dir { .. } | Node::File { .. } | Node::Symlink { .. } | Node::Other { .. },
                _,
            ) => false,
        };
        if keep {
            continue;
        }
        let (p, name) = split(&entry.path);
        let parent = open_dir(dir, p)?;
        let flags = if matches!(entry.node, Node::Dir { .. }) {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        remove_tree(&parent, name, flags)?;
        done.push(Restored {
            path: entry.path.clone(),
            what: if wanted(&entry.path).is_some_and(|n| *n != Node::Missing) {
                "replaced"
            } else {
                "added"
            },
            why: None,
        });
    }
    // Then what should be there, in order. Each directory is opened once, by its path
    // from the directory, for the entries in it.
    let mut opened: Option<(String, OwnedFd)> = None;
    for entry in want {
        let (p, name) = split(&entry.path);
        if opened.as_ref().is_none_or(|(at, _)| at != p) {
            opened = match open_dir(dir, p) {
                Ok(fd) => Some((p.to_owned(), fd)),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
        }
        let Some((_, parent)) = opened.as_ref() else {
            continue;
        };
        let noted = |what: &'static str, done: &mut Vec<Restored>| {
            if !done.iter().any(|d| d.path == entry.path) {
                done.push(Restored {
                    path: entry.path.clone(),
                    what,
                    why: None,
                });
            }
        };
        match &entry.node {
            Node::Missing => {}
            // Kept above while it stayed of its kind; one the agent removed or
            // replaced cannot be made again by Berth.
            Node::Other { kind } => {
                match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if other_kind(FileType::from_raw_mode(st.st_mode as _)) == kind => {}
                    Ok(_) | Err(Errno::NOENT) => {
                        noted("removed", done);
                        return Err(Errno::NOTSUP);
                    }
                    Err(e) => return Err(e),
                }
            }
            Node::Dir { mode } => {
                match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => {
                        if perm(&st) != *mode {
                            set_mode(parent, name, *mode)?;
                            noted("changed", done);
                        }
                    }
                    Err(Errno::NOENT) => {
                        rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(*mode as _))?;
                        set_mode(parent, name, *mode)?;
                        noted("removed", done);
                    }
                    Err(e) => return Err(e),
                }
            }
            Node::File { mode, hex, stamp } => {
                // Stamped and found with the same stamps: the same file, unchanged.
                if let Some(stamp) = stamp
                    && let Ok(st) = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                    && FileType::from_raw_mode(st.st_mode as _) == FileType::RegularFile
                    && stamp_of(&st) == *stamp
                    && perm(&st) == *mode
                    && st.st_nlink == 1
                {
                    continue;
                }
                let bytes = from_hex(hex).ok_or(Errno::INVAL)?;
                let same = match open_nofollow(parent, name, OFlags::RDONLY) {
                    Ok(fd) => {
                        let st = rustix::fs::fstat(&fd)?;
                        Some(perm(&st) == *mode && st.st_nlink == 1 && read_all(&fd)? == bytes)
                    }
                    Err(Errno::NOENT) => None,
                    Err(e) => return Err(e),
                };
                match same {
                    Some(true) => continue,
                    // Changed (or now hard-linked elsewhere): a fresh file in its
                    // place, so nothing is written through a name of the agent's.
                    Some(false) => {
                        rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
                        noted("changed", done);
                    }
                    None => noted("removed", done),
                }
                let fd = rustix::fs::openat(
                    parent,
                    name,
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(*mode as _),
                )?;
                write_all(&fd, &bytes)?;
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode as _))?;
                let _ = rustix::fs::fsync(&fd);
            }
            Node::Symlink { target } => {
                match rustix::fs::readlinkat(parent, name, Vec::new()) {
                    Ok(t) if t.to_string_lossy() == *target => continue,
                    Ok(_) => {
                        rustix::fs::unlinkat(parent, name, AtFlags::empty())?;
                        noted("changed", done);
                    }
                    Err(Errno::NOENT) => noted("removed", done),
                    Err(e) => return Err(e),
                }
                rustix::fs::symlinkat(target.as_str(), parent, name)?;
            }
        }
    }
    Ok(())
}

/// Removes `name` in `parent` and, for a directory, everything in it, never following
/// a symlink.
fn remove_tree(parent: &OwnedFd, name: &str, flags: AtFlags) -> Result<(), Errno> {
    if flags.contains(AtFlags::REMOVEDIR) {
        match open_nofollow(parent, name, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(fd) => {
                for child in sorted_names(&fd)? {
                    let st = rustix::fs::statat(&fd, child.as_str(), AtFlags::SYMLINK_NOFOLLOW)?;
                    let f = if FileType::from_raw_mode(st.st_mode as _) == FileType::Directory {
                        AtFlags::REMOVEDIR
                    } else {
                        AtFlags::empty()
                    };
                    remove_tree(&fd, &child, f)?;
                }
            }
            Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    match rustix::fs::unlinkat(parent, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A file's bytes as a snapshot keeps them: lowercase hex, two digits a byte (the
/// `hex` crate's text, made by table: a message in a repository encodes every guarded
/// file twice, and a char-by-char encoder was most of the guard's time).
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0xf)]);
    }
    // Only ASCII digits and letters were pushed.
    String::from_utf8(out).unwrap_or_default()
}

/// The bytes [`to_hex`] wrote (either case); `None` for an odd length or a character
/// that is not a hex digit.
pub(crate) fn from_hex(text: &str) -> Option<Vec<u8>> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 2);
    for pair in text.chunks_exact(2) {
        out.push(digit(pair[0])? << 4 | digit(pair[1])?);
    }
    Some(out)
}

pub mod repos;

#[cfg(test)]
mod tests;
