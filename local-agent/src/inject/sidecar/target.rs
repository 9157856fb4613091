//! The one way Berth opens a file of the user's to write into it, and what stops it:
//! a regular file, never through a symlink, never a special file, and for Berth's own
//! text exactly one link, judged on the opened descriptor.

use crate::dir::fd::{at_parent, open_nofollow, read_all};
use rustix::fs::{AtFlags, FileType, OFlags, Stat};
use rustix::io::Errno;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// What a name in the directory turned out to be when Berth meant to write through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Obstacle {
    /// A regular file with other names: what Berth writes would appear under them too,
    /// wherever they are.
    HardLink { links: u64 },
    /// A symbolic link: Berth never follows one in the directory.
    Symlink,
    /// Anything else that is not what was expected (a FIFO, a socket, a device, a
    /// directory where a file was expected, a file where a directory was).
    Other { kind: &'static str },
}

impl fmt::Display for Obstacle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Obstacle::HardLink { links } => write!(f, "is a hard link ({links} links)"),
            Obstacle::Symlink => f.write_str("is a symbolic link"),
            Obstacle::Other { kind } => write!(f, "is a {kind}"),
        }
    }
}

/// The name of a file type, for messages.
pub(super) fn kind_of(mode: rustix::fs::RawMode) -> &'static str {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "file of an unknown type",
    }
}

/// Why Berth will not write into a file.
pub(super) enum Unwritable {
    Obstacle(Obstacle),
    Io(Errno),
}

/// What Berth opens a file of the user's for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    /// Adding Berth's text (the brief's block): only into a regular file with exactly
    /// one link, since every other name of the file would show the text too.
    Append,
    /// Cutting Berth's own block out again: any regular file. The exact block (its
    /// run's id in it) is only there if Berth wrote it, so cutting it out restores
    /// whatever name the file has.
    Restore,
}

/// Whether Berth may write into the file open as `fd` for `purpose`, judged on the
/// descriptor itself (the name may have changed since).
pub(super) fn writable_target(fd: &OwnedFd, purpose: Purpose) -> Result<Stat, Unwritable> {
    let st = rustix::fs::fstat(fd).map_err(Unwritable::Io)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile if st.st_nlink == 1 || purpose == Purpose::Restore => Ok(st),
        FileType::RegularFile => {
            // `nlink_t` is 64 bits on x86_64 Linux, 32 bits elsewhere.
            #[allow(clippy::useless_conversion)]
            let links = u64::from(st.st_nlink);
            Err(Unwritable::Obstacle(Obstacle::HardLink { links }))
        }
        FileType::Symlink => Err(Unwritable::Obstacle(Obstacle::Symlink)),
        FileType::Directory
        | FileType::Fifo
        | FileType::Socket
        | FileType::CharacterDevice
        | FileType::BlockDevice
        | FileType::Unknown => Err(Unwritable::Obstacle(Obstacle::Other {
            kind: kind_of(st.st_mode),
        })),
    }
}

/// The one way Berth opens a file of the user's to write into it: `name` in `dir`,
/// read-write (appending, for [`Purpose::Append`]), if it exists and Berth may write
/// into it for `purpose`: never following a symlink, never opening a special file (a
/// FIFO would block, a device would act), and verified on the opened descriptor.
/// `Ok(None)` when there is no such name.
pub(super) fn open_target(
    dir: BorrowedFd<'_>,
    name: &str,
    purpose: Purpose,
) -> Result<Option<(OwnedFd, Stat)>, Unwritable> {
    // A first look by name, so a FIFO or a device is never opened at all; what
    // decides is the descriptor's own `fstat` below.
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(Unwritable::Io(e)),
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            return Err(Unwritable::Obstacle(Obstacle::Symlink));
        }
        Ok(st) if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile => {
            return Err(Unwritable::Obstacle(Obstacle::Other {
                kind: kind_of(st.st_mode),
            }));
        }
        Ok(_) => {}
    }
    let flags = match purpose {
        Purpose::Append => OFlags::RDWR | OFlags::APPEND,
        Purpose::Restore => OFlags::RDWR,
    };
    let fd = match open_nofollow(dir, name, flags | OFlags::NONBLOCK | OFlags::NOCTTY) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => return Err(Unwritable::Obstacle(Obstacle::Symlink)),
        Err(Errno::ISDIR) => {
            return Err(Unwritable::Obstacle(Obstacle::Other { kind: "directory" }));
        }
        Err(e) => return Err(Unwritable::Io(e)),
    };
    let st = writable_target(&fd, purpose)?;
    Ok(Some((fd, st)))
}

/// Cuts `block` out of `file` again, in place, so the user's file keeps its inode,
/// mode and links. Never through a symlink or into a special file (reported).
pub(super) fn cut_block(
    dir: BorrowedFd<'_>,
    file: &str,
    block: &[u8],
    created: bool,
) -> Result<(), String> {
    let (parent, name) = match at_parent(dir, file) {
        Ok(x) => x,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let fd = match open_target(parent.as_fd(), name, Purpose::Restore) {
        Ok(Some((fd, _))) => fd,
        Ok(None) => return Ok(()),
        Err(Unwritable::Obstacle(obstacle)) => {
            return Err(format!(
                "{file} {obstacle} now; Berth does not write through it and leaves it as it is"
            ));
        }
        Err(Unwritable::Io(e)) => return Err(e.to_string()),
    };
    let content = read_all(&fd).map_err(|e| e.to_string())?;
    let Some(at) = find_last(&content, block) else {
        return Ok(());
    };
    let mut kept = Vec::with_capacity(content.len() - block.len());
    kept.extend_from_slice(&content[..at]);
    kept.extend_from_slice(&content[at + block.len()..]);
    if created && kept.is_empty() {
        return rustix::fs::unlinkat(&parent, name, AtFlags::empty()).map_err(|e| e.to_string());
    }
    let mut off = 0;
    while off < kept.len() {
        off += rustix::io::pwrite(&fd, &kept[off..], off as u64).map_err(|e| e.to_string())?;
    }
    rustix::fs::ftruncate(&fd, kept.len() as u64).map_err(|e| e.to_string())
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| &hay[i..i + needle.len()] == needle)
}
