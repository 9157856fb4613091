//! Where a task runs: the bound directory validated and pinned (the same directory
//! the user linked, or refused), a worktree of it, or the session's scratch.

use super::state::{Inner, Place, Stop};
use crate::dir::pin::{PinnedDir, pin_owned};
use crate::dir::validate;
use crate::inject::brief::WorkMode;
use crate::run::{scratch, worktree};
use berth_core::exec::{DirIdentity, Placement, TaskSpec};
use berth_core::{Context, ErrorCode, LocalPath};

/// A binding stores the canonical path it was validated as, and the directory's
/// (device, inode). If that path now resolves elsewhere (replaced by a symlink, or a
/// parent was) or names another directory (one put in its place), it is not the
/// directory the user linked: refuse rather than run there.
fn same_as_linked(
    ctx: &Context,
    pinned: &PinnedDir,
    linked: &LocalPath,
    identity: Option<DirIdentity>,
) -> Result<(), Stop> {
    let same_inode = identity.is_none_or(|id| pinned.identity() == (id.dev, id.ino));
    if pinned.canonical() == linked && same_inode {
        Ok(())
    } else {
        let shown = berth_core::display::display(ctx, linked);
        Err(Stop::Refused(crate::dir::pin::path_changed(&shown)))
    }
}

/// Validates a linked directory. A binding's directory that is no longer at its path
/// (renamed away, moved, deleted) is reported as `path_changed`, the code of a swap:
/// the path no longer leads to the directory that was linked.
fn validate_linked(
    ctx: &Context,
    dir: &LocalPath,
    identity: Option<DirIdentity>,
) -> Result<PinnedDir, Stop> {
    match validate::validate(ctx, dir.as_str()) {
        Err(r) if r.code == ErrorCode::NotFound && identity.is_some() => Err(Stop::Refused(
            crate::dir::pin::path_changed(&berth_core::display::display(ctx, dir)),
        )),
        other => Ok(other?),
    }
}

pub(super) fn place(inner: &Inner, task: &TaskSpec) -> Result<Place, Stop> {
    let ctx = &inner.ctx;
    match &task.placement {
        Placement::InPlace { dir, identity } => {
            let pinned = validate_linked(ctx, dir, *identity)?;
            same_as_linked(ctx, &pinned, dir, *identity)?;
            Ok(Place {
                bound: Some(pinned.canonical().clone()),
                pinned,
                mode: WorkMode::InPlace,
                worktree: None,
            })
        }
        Placement::Worktree { dir, identity } => {
            // A session id is one plain component (its type's rule): it names the
            // session's worktree and scratch directories as it is.
            let session = &task.session.id;
            let bound = validate_linked(ctx, dir, *identity)?;
            same_as_linked(ctx, &bound, dir, *identity)?;
            let wt = worktree::ensure(bound.path(), &inner.cfg.berth_home, session).map_err(
                |e| match e.refusal(bound.display()) {
                    Some(r) => Stop::Refused(r),
                    None => Stop::Failed(ErrorCode::PrepareFailed, e.to_string()),
                },
            )?;
            Ok(Place {
                pinned: pin_owned(ctx, &wt.work_dir)?,
                bound: Some(bound.canonical().clone()),
                mode: WorkMode::Worktree,
                worktree: Some(wt),
            })
        }
        Placement::Scratch => {
            let session = &task.session.id;
            let dir = scratch::ensure(&inner.cfg.berth_home, session).map_err(|e| {
                Stop::Failed(
                    ErrorCode::PrepareFailed,
                    format!("cannot create the scratch directory: {e}"),
                )
            })?;
            Ok(Place {
                pinned: pin_owned(ctx, &dir)?,
                bound: None,
                mode: WorkMode::Scratch,
                worktree: None,
            })
        }
    }
}
