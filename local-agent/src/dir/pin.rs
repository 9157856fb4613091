//! A directory held open by descriptor, and the check that its path still names it.
//!
//! Validation ends with a [`PinnedDir`]: an open `O_DIRECTORY` descriptor, the
//! directory's (device, inode), its canonical path and display. Only this crate's
//! validator (and the executor, for the directories Berth itself owns) can build one,
//! so a function taking a `PinnedDir` cannot be handed an unchecked path. Before the
//! agent starts and before cleanup, [`PinnedDir::recheck`] makes sure the path still
//! leads to the same directory; a swap is a refusal (`path_changed`), never a run
//! somewhere else.

use berth_core::exec::ValidatedDir;
use berth_core::{ErrorCode, LocalPath, Refusal};
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// A validated directory, held open. See the module documentation.
#[derive(Debug)]
pub struct PinnedDir {
    fd: OwnedFd,
    dev: u64,
    ino: u64,
    uid: u32,
    canonical: LocalPath,
    display: String,
}

impl PinnedDir {
    /// Opens `canonical` without following a final symlink and records its identity.
    /// Crate-private: callers outside get a `PinnedDir` only from the validator.
    pub(crate) fn open(canonical: LocalPath, display: String) -> rustix::io::Result<PinnedDir> {
        let fd = rustix::fs::open(
            canonical.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd)?;
        Ok(PinnedDir {
            fd,
            dev: dev_of(&st),
            ino: st.st_ino,
            uid: st.st_uid,
            canonical,
            display,
        })
    }

    /// The directory's descriptor: every file Berth writes inside is reached from it.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The canonical (symlink-free) path, as validated.
    pub fn canonical(&self) -> &LocalPath {
        &self.canonical
    }

    /// The canonical path as a native path.
    pub fn path(&self) -> &Path {
        Path::new(self.canonical.as_str())
    }

    /// The privacy-stripped display form.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// (device, inode) when pinned.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }

    pub(crate) fn owner(&self) -> u32 {
        self.uid
    }

    /// The server's view of the validated directory.
    pub fn to_validated(&self) -> ValidatedDir {
        ValidatedDir {
            canonical: self.canonical.clone(),
            display: self.display.clone(),
            identity: berth_core::exec::DirIdentity {
                dev: self.dev,
                ino: self.ino,
            },
        }
    }

    /// Whether the canonical path still names the pinned directory: not renamed away,
    /// not replaced by a symlink or by another directory.
    pub fn recheck(&self) -> Result<(), Refusal> {
        let now = rustix::fs::statat(CWD, self.canonical.as_str(), AtFlags::SYMLINK_NOFOLLOW);
        match now {
            Ok(st)
                if FileType::from_raw_mode(st.st_mode) == FileType::Directory
                    && dev_of(&st) == self.dev
                    && st.st_ino == self.ino =>
            {
                Ok(())
            }
            Ok(_) | Err(_) => Err(path_changed(&self.display)),
        }
    }
}

/// The refusal for a directory that is no longer the one validated.
/// A `stat`'s device number as Berth stores and compares it. `dev_t` is `u64` on
/// Linux and an `i32` on macOS, where it is never negative.
pub fn dev_of(st: &rustix::fs::Stat) -> u64 {
    device(st.st_dev)
}

#[cfg(target_os = "macos")]
fn device(dev: i32) -> u64 {
    u64::from(dev.cast_unsigned())
}

#[cfg(not(target_os = "macos"))]
fn device(dev: u64) -> u64 {
    dev
}

pub fn path_changed(display: &str) -> Refusal {
    Refusal::new(
        ErrorCode::PathChanged,
        format!("{display} changed since it was checked: the path now leads elsewhere or nowhere"),
        "check what happened to the directory, then link the session to it again",
    )
}

/// Pins a directory Berth itself made (a scratch directory, a worktree): no refusal
/// table (they live under Berth's own state by design), but the same identity checks.
pub(crate) fn pin_owned(ctx: &berth_core::Context, path: &Path) -> Result<PinnedDir, Refusal> {
    let shown = path.display().to_string();
    let real = std::fs::canonicalize(path).map_err(|e| {
        Refusal::new(
            ErrorCode::NotFound,
            format!("{shown} cannot be used: {e}"),
            "check Berth's home directory",
        )
    })?;
    let canonical = real
        .to_str()
        .and_then(|s| LocalPath::parse(berth_core::Platform::native(), s).ok())
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::PathInvalid,
                format!("{shown} is not a valid UTF-8 path"),
                "choose a Berth home whose path is valid UTF-8",
            )
        })?;
    let display = berth_core::display::display(ctx, &canonical);
    PinnedDir::open(canonical, display.clone()).map_err(|_| path_changed(&display))
}
