//! Skill folders: read whole before anything is written, and removed again entry by
//! entry, a file only while it holds Berth's bytes, a directory only when empty.

use super::target::{Obstacle, kind_of};
use super::{SidecarError, remove_empty_dir};
use crate::dir::fd::{at_parent, open_nofollow, read_all, sorted_names};
use crate::inject::journal::Copied;
use rustix::fs::{AtFlags, FileType, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

pub(super) enum DirError {
    Missing,
    Blocked(Obstacle),
    Io(Errno),
}

/// Opens the directory `name` in `parent`, never through a symlink.
pub(super) fn open_dir(parent: &OwnedFd, name: &str) -> Result<OwnedFd, DirError> {
    match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => return Err(DirError::Missing),
        Err(e) => return Err(DirError::Io(e)),
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {}
            FileType::Symlink => return Err(DirError::Blocked(Obstacle::Symlink)),
            FileType::RegularFile
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => {
                return Err(DirError::Blocked(Obstacle::Other {
                    kind: kind_of(st.st_mode),
                }));
            }
        },
    }
    match open_nofollow(parent, name, OFlags::RDONLY | OFlags::DIRECTORY) {
        Ok(fd) => Ok(fd),
        Err(Errno::NOENT) => Err(DirError::Missing),
        Err(Errno::LOOP) => Err(DirError::Blocked(Obstacle::Symlink)),
        Err(Errno::NOTDIR) => Err(DirError::Blocked(Obstacle::Other { kind: "file" })),
        Err(e) => Err(DirError::Io(e)),
    }
}

/// Everything in the skill folder `source`, read before anything is written: each
/// directory before what it holds, names in order, each file with its bytes.
/// Symlinks in a skill are not copied (they could point anywhere), nor names that are
/// not UTF-8.
pub(super) fn read_skill(source: &Path) -> Result<Vec<(Copied, Vec<u8>)>, SidecarError> {
    let rerr = |e: std::io::Error| SidecarError::ReadSkill {
        source_dir: source.to_owned(),
        source: e,
    };
    let mut out = Vec::new();
    let mut stack = vec![(source.to_owned(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let mut entries: Vec<(String, std::fs::DirEntry)> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(rerr)? {
            let entry = entry.map_err(rerr)?;
            if let Some(name) = entry.file_name().to_str().map(str::to_owned) {
                entries.push((name, entry));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (name, entry) in entries {
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let kind = entry.file_type().map_err(rerr)?;
            if kind.is_dir() {
                out.push((Copied::Dir { path: rel.clone() }, Vec::new()));
                subdirs.push((entry.path(), rel));
            } else if kind.is_file() {
                let bytes = std::fs::read(entry.path()).map_err(rerr)?;
                out.push((
                    Copied::File {
                        path: rel,
                        len: bytes.len() as u64,
                        sha256: sha256(&bytes),
                    },
                    bytes,
                ));
            }
        }
        // Depth-first in name order; a directory's own record came first above.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(out)
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Removes what Berth copied into the skill folder `path`: each file it created while
/// it still holds Berth's bytes, then each directory if empty, the folder last.
/// Whatever else is in the folder afterwards is added to `kept`.
pub(super) fn remove_copied(
    dir: BorrowedFd<'_>,
    path: &str,
    entries: &[Copied],
    kept: &mut Vec<String>,
) -> Result<(), Errno> {
    let (parent, name) = match at_parent(dir, path) {
        Ok(x) => x,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
        Err(e) => return Err(e),
    };
    let root = match open_nofollow(&parent, name, OFlags::RDONLY | OFlags::DIRECTORY) {
        Ok(fd) => fd,
        // Gone, or no longer the folder Berth made (a link or a file now): not Berth's.
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries.iter().rev() {
        let rel = match entry {
            Copied::Dir { path } | Copied::File { path, .. } => path,
        };
        let (at, last) = match at_parent(root.as_fd(), rel) {
            Ok(x) => x,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => continue,
            Err(e) => return Err(e),
        };
        match entry {
            Copied::Dir { .. } => remove_empty_dir(&at, last)?,
            Copied::File { len, sha256, .. } => {
                if holds(&at, last, *len, sha256)? {
                    match rustix::fs::unlinkat(&at, last, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    remove_empty_dir(&parent, name)?;
    // What is left is not Berth's: say so.
    match open_nofollow(&parent, name, OFlags::RDONLY | OFlags::DIRECTORY) {
        Ok(fd) => list_files(&fd, path, kept),
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether `name` in `at` is still the regular file Berth wrote: one link, `len`
/// bytes with the SHA-256 `digest`.
fn holds(at: &OwnedFd, name: &str, len: u64, digest: &str) -> Result<bool, Errno> {
    let fd = match open_nofollow(at, name, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::LOOP | Errno::NXIO) => return Ok(false),
        Err(e) => return Err(e),
    };
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_nlink != 1
        || st.st_size as u64 != len
    {
        return Ok(false);
    }
    Ok(sha256(&read_all(&fd)?) == digest)
}

/// Adds every entry under `fd` that is not a directory (a directory only when empty)
/// to `out`, as `prefix/…`.
fn list_files(fd: &OwnedFd, prefix: &str, out: &mut Vec<String>) -> Result<(), Errno> {
    let names = sorted_names(fd)?;
    if names.is_empty() {
        out.push(format!("{prefix}/"));
    }
    for n in names {
        let rel = format!("{prefix}/{n}");
        match open_nofollow(fd, &n, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(sub) => list_files(&sub, &rel, out)?,
            Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) => out.push(rel),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
