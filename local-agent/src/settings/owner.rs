//! Who may have written a project layer: the rule that keeps other local users out of
//! the agent's brief.
//!
//! The project layer is searched at and above the bound directory; outside the home
//! that walk can reach a folder another user writes (`/tmp/shared/.berth` above a
//! binding `/tmp/shared/proj`). What they plant there must not reach the agent. As
//! git's `safe.directory` reasons for a repository, Berth reads a project layer
//! `D/.berth/settings.jsonc` only when nobody but the user (or root) can have written
//! it:
//!
//! - `D` and `D/.berth` (what each name reaches, links followed) are owned by the user
//!   or root, and are writable by no one else: neither group- nor world-writable,
//!   unless sticky (like `/tmp`). In a sticky folder others may add names but cannot
//!   rename or remove the user's, and what they add is theirs, which the owner rule
//!   refuses one step down.
//! - The layer file: the name, when it is a symbolic link, is owned by the user or
//!   root; the file it reaches (the very descriptor that is read) is owned by the user
//!   or root and neither group- nor world-writable.
//!
//! "The user" is the effective uid. Folders above `D` are not checked: whoever can
//! rename `D` can only swap in a folder that is theirs (refused above) or one of the
//! user's own. A layer that fails is not parsed (its folders fail before it is even
//! opened) and is reported as ignored, with the reason, as the single key
//! [`WHOLE_FILE`](berth_core::settings::trust::WHOLE_FILE): it never blocks a run,
//! and trust does not lift it (trust says what a layer may do; this is about who wrote
//! it).

use berth_core::display::display;
use berth_core::{Context, LocalPath, Platform};
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Why a project layer is not read: someone other than the user may have written it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Foreign {
    /// `path` (displayed) is owned by `uid`, neither the user nor root.
    Owner { path: String, uid: u32 },
    /// `path` (displayed) is writable by its group or by everyone (`mode`), and is not
    /// a sticky folder.
    Writable { path: String, mode: u32 },
}

impl Foreign {
    /// The message of the ignored layer: what was found, why it matters, the fix.
    pub fn message(&self) -> String {
        let rule = "a project layer is read only when it, its .berth folder and the folder holding that are owned by you or root and writable by no one else";
        match self {
            Foreign::Owner { path, uid } => format!(
                "the whole file is ignored: {path} is owned by uid {uid}, neither you nor root, so another user may have written it ({rule}; if it is yours: chown it)"
            ),
            Foreign::Writable { path, mode } => format!(
                "the whole file is ignored: {path} is writable by {} (mode {mode:04o}), so another user may have written it ({rule}; if that is not wanted: chmod go-w {path})",
                if mode & 0o002 != 0 {
                    "everyone"
                } else {
                    "its group"
                }
            ),
        }
    }
}

/// The effective uid: "the user" of the rule.
fn user() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn owned(uid: u32) -> bool {
    uid == user() || uid == 0
}

fn shown(ctx: &Context, path: &Path) -> String {
    path.to_str()
        .and_then(|p| LocalPath::parse(Platform::native(), p).ok())
        .map_or_else(|| path.display().to_string(), |p| display(ctx, &p))
}

/// Checks the owner and mode of a folder or file (`folder`: sticky lifts the write
/// rule).
fn judge(ctx: &Context, path: &Path, uid: u32, mode: u32, folder: bool) -> Option<Foreign> {
    if !owned(uid) {
        return Some(Foreign::Owner {
            path: shown(ctx, path),
            uid,
        });
    }
    let others_write = mode & 0o022 != 0;
    let sticky = folder && mode & 0o1000 != 0;
    (others_write && !sticky).then(|| Foreign::Writable {
        path: shown(ctx, path),
        mode: mode & 0o7777,
    })
}

/// The folders of the layer `file` (`D/.berth/settings.jsonc`) and the name `file`
/// itself, before anything is opened. `Err` when one cannot be looked at (the caller
/// reports it like any unreadable file).
pub fn check_before_reading(ctx: &Context, file: &Path) -> std::io::Result<Option<Foreign>> {
    let berth = file.parent().unwrap_or(file);
    let project = berth.parent().unwrap_or(berth);
    for dir in [project, berth] {
        let m = std::fs::metadata(dir)?;
        if let Some(why) = judge(ctx, dir, m.uid(), m.mode(), true) {
            return Ok(Some(why));
        }
    }
    let link = std::fs::symlink_metadata(file)?;
    if link.file_type().is_symlink() && !owned(link.uid()) {
        return Ok(Some(Foreign::Owner {
            path: shown(ctx, file),
            uid: link.uid(),
        }));
    }
    Ok(None)
}

/// The file read, by the owner and mode of the descriptor that was read.
pub fn check_read(ctx: &Context, file: &Path, read: &super::input::Bytes) -> Option<Foreign> {
    judge(ctx, file, read.uid, read.mode, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context::new(Platform::native())
    }

    /// The rule's table: owner (the user, root, another) × mode × folder or file.
    #[test]
    fn only_the_user_or_root_and_no_other_writer() {
        let me = user();
        let other = if me == 65534 { 65533 } else { 65534 };
        let p = Path::new("/x");
        let owner = Some(Foreign::Owner {
            path: "/x".into(),
            uid: other,
        });
        let writable = |mode| {
            Some(Foreign::Writable {
                path: "/x".into(),
                mode,
            })
        };
        let cases = [
            (me, 0o755, true, None),
            (0, 0o755, true, None),
            (0, 0o1777, true, None),
            (me, 0o1770, true, None),
            (other, 0o755, true, owner.clone()),
            (other, 0o644, false, owner),
            (me, 0o775, true, writable(0o775)),
            (me, 0o757, true, writable(0o757)),
            (0, 0o2775, true, writable(0o2775)),
            (me, 0o664, false, writable(0o664)),
            (me, 0o1666, false, writable(0o1666)),
            (me, 0o644, false, None),
        ];
        for (uid, mode, folder, want) in cases {
            assert_eq!(
                judge(&ctx(), p, uid, mode, folder),
                want,
                "{uid} {mode:o} {folder}"
            );
        }
    }
}
