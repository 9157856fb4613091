//! Native validation: everything the lexical rules cannot know.
//!
//! Order (docs/architecture.md): lexical rules → exists, is a directory → canonicalize → the
//! refusal table again on the canonical form → pin (open without following) → owned by
//! the current user → read/write probe. Nothing is written into a directory before it
//! has passed every rule; the probe is the only write, and it is removed at once.

use crate::dir::pin::{PinnedDir, path_changed};
use berth_core::display::display;
use berth_core::{Context, ErrorCode, LocalPath, Platform, Refusal, rules};
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::io::ErrorKind;

/// Validates `input` for running in place and pins it.
///
/// `input` must be absolute (a leading `~` is expanded against the context's home).
pub fn validate(ctx: &Context, input: &str) -> Result<PinnedDir, Refusal> {
    let lexical = rules::check_str(ctx, input)?;
    let shown = display(ctx, &lexical);
    let meta = std::fs::metadata(lexical.as_str()).map_err(|e| unreachable_dir(&shown, &e))?;
    if !meta.is_dir() {
        return Err(Refusal::new(
            ErrorCode::NotADirectory,
            format!("{shown} is not a directory"),
            "give the project directory, not a file inside it",
        ));
    }
    let real = std::fs::canonicalize(lexical.as_str()).map_err(|e| unreachable_dir(&shown, &e))?;
    let canonical = real
        .to_str()
        .and_then(|s| LocalPath::parse(Platform::native(), s).ok())
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::PathInvalid,
                format!("{shown} resolves to a path that is not valid UTF-8"),
                "rename the directory so its path is valid UTF-8",
            )
        })?;
    let canon_shown = display(ctx, &canonical);
    if canonical != lexical {
        rules::check(ctx, &canonical).map_err(|r| {
            Refusal::new(
                r.code,
                format!("{shown} resolves to {canon_shown}; {}", r.message),
                r.hint,
            )
        })?;
    }
    let pinned =
        PinnedDir::open(canonical, canon_shown.clone()).map_err(|_| path_changed(&canon_shown))?;
    confirm_pinned_path(&pinned)?;
    let me = rustix::process::geteuid().as_raw();
    if pinned.owner() != me {
        return Err(Refusal::new(
            ErrorCode::NotOwner,
            format!(
                "{canon_shown} belongs to another user (uid {}), not to you (uid {me})",
                pinned.owner()
            ),
            "bind a directory you own; agents run with your rights",
        ));
    }
    probe(&pinned)?;
    Ok(pinned)
}

/// macOS: the descriptor's own path (`fcntl(F_GETPATH)`) must be the canonical path,
/// so a component swapped for a symlink between canonicalizing and opening is caught.
#[cfg(target_os = "macos")]
fn confirm_pinned_path(pinned: &PinnedDir) -> Result<(), Refusal> {
    match rustix::fs::getpath(pinned.fd()) {
        Ok(path) if path.to_bytes() == pinned.canonical().as_str().as_bytes() => Ok(()),
        Ok(_) => Err(path_changed(pinned.display())),
        Err(_) => Ok(()),
    }
}

/// Linux: the descriptor's own path must be the canonical path, so a component
/// swapped for a symlink between canonicalizing and opening is caught.
#[cfg(not(target_os = "macos"))]
fn confirm_pinned_path(pinned: &PinnedDir) -> Result<(), Refusal> {
    if !cfg!(target_os = "linux") {
        return Ok(());
    }
    let link = format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&pinned.fd())
    );
    match std::fs::read_link(&link) {
        Ok(target) if target.as_os_str() == pinned.canonical().as_str() => Ok(()),
        Ok(_) => Err(path_changed(pinned.display())),
        // Without /proc mounted there is nothing to compare with; the pin stands.
        Err(_) => Ok(()),
    }
}

/// Creates a probe file exclusively (never following a link), writes, reads back and
/// removes it.
fn probe(pinned: &PinnedDir) -> Result<(), Refusal> {
    let name = format!(".berth-probe-{}", uuid::Uuid::now_v7().simple());
    let not_writable = |what: &str, e: Errno| {
        Refusal::new(
            ErrorCode::NotWritable,
            format!(
                "{} is not writable: {what} a probe file failed: {e}",
                pinned.display()
            ),
            "make the directory writable for your user (check permissions, read-only mounts and immutable flags)",
        )
    };
    let fd = rustix::fs::openat(
        pinned.fd(),
        name.as_str(),
        OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )
    .map_err(|e| not_writable("creating", e))?;
    let payload = name.as_bytes();
    let outcome = (|| {
        let written = rustix::io::write(&fd, payload).map_err(|e| not_writable("writing", e))?;
        let mut back = vec![0u8; payload.len()];
        let read = rustix::io::pread(&fd, &mut back, 0).map_err(|e| not_writable("reading", e))?;
        if written != payload.len() || read != payload.len() || back != payload {
            return Err(not_writable("reading back", Errno::IO));
        }
        Ok(())
    })();
    let removed = rustix::fs::unlinkat(pinned.fd(), name.as_str(), AtFlags::empty())
        .map_err(|e| not_writable("removing", e));
    outcome.and(removed)
}

fn unreachable_dir(shown: &str, e: &std::io::Error) -> Refusal {
    if e.raw_os_error() == Some(Errno::LOOP.raw_os_error()) {
        return Refusal::new(
            ErrorCode::PathInvalid,
            format!("{shown} is a loop of symbolic links that never reaches a directory"),
            "fix the links so the path leads to a directory",
        );
    }
    let kind = e.kind();
    if kind == ErrorKind::NotFound {
        Refusal::new(
            ErrorCode::NotFound,
            format!("{shown} does not exist"),
            "check the path, or create the directory first",
        )
    } else if kind == ErrorKind::NotADirectory {
        Refusal::new(
            ErrorCode::NotFound,
            format!("{shown} does not exist: a component of the path is a file"),
            "check the path",
        )
    } else {
        Refusal::new(
            ErrorCode::NotFound,
            format!("{shown} cannot be reached: {e}"),
            "check the path and its permissions",
        )
    }
}
