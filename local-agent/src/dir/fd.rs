//! Descriptor-relative I/O beneath a pinned directory: every path is walked one
//! component at a time from a descriptor, never following a symlink and never
//! climbing out with `..`, so a link or a swap inside the directory cannot redirect a
//! read or a write elsewhere.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// Opens the parent of `rel` (components separated by `/`), walking without
/// following symlinks; returns it with the last component.
pub fn at_parent<'r>(dir: BorrowedFd<'_>, rel: &'r str) -> Result<(OwnedFd, &'r str), Errno> {
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let last = comps.pop().ok_or(Errno::INVAL)?;
    if last == ".." || comps.contains(&"..") {
        return Err(Errno::INVAL);
    }
    let mut fd = rustix::io::dup(dir)?;
    for comp in comps {
        fd = open_nofollow(&fd, comp, OFlags::RDONLY | OFlags::DIRECTORY)?;
    }
    Ok((fd, last))
}

/// The names in the directory `fd`, sorted, without `.` and `..`.
pub fn sorted_names(fd: &OwnedFd) -> Result<Vec<String>, Errno> {
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(fd)? {
        let entry = entry?;
        let n = entry.file_name().to_string_lossy().into_owned();
        if n != "." && n != ".." {
            names.push(n);
        }
    }
    names.sort();
    Ok(names)
}

pub fn open_nofollow(dir: impl AsFd, name: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
}

pub fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        let n = rustix::io::write(fd, bytes)?;
        bytes = &bytes[n..];
    }
    Ok(())
}

pub fn read_all(fd: &OwnedFd) -> Result<Vec<u8>, Errno> {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = rustix::io::pread(fd, &mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}
