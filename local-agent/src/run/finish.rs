//! After the agent: the directory rechecked, the sidecars undone through the pinned
//! descriptor (what the agent added in Berth's folders kept, the guarded paths put
//! back), a worktree's turn committed.

use super::state::{Place, Stop, blocking};
use crate::inject::sidecar::Sidecars;
use crate::run::worktree;
use berth_core::TaskId;

/// The line that tells what cleanup left in a folder Berth installed because the
/// agent wrote it (the change summary lists those files too, unless ignored).
pub(super) fn kept_note(kept: &[String]) -> Option<String> {
    const SHOWN: usize = 10;
    if kept.is_empty() {
        return None;
    }
    let mut list = kept[..kept.len().min(SHOWN)].join(", ");
    if kept.len() > SHOWN {
        list.push_str(&format!(" and {} more", kept.len() - SHOWN));
    }
    Some(format!(
        "kept {list}: not Berth's (written during the run inside a skill folder Berth installed); Berth removed only its own files"
    ))
}

/// Cleans up after the agent: re-checks the pin (a swap is reported, and cleanup goes
/// through the descriptor, so it touches only the directory Berth wrote in), undoes
/// the sidecars, commits a worktree turn. Returns the branch and any problems.
/// What [`finish`] leaves: the worktree's branch and its turn's changes, problems, what
/// cleanup kept because Berth did not write it (relative paths), and the guarded paths
/// it put back.
pub(super) type Finished = (
    Option<String>,
    (
        Option<berth_core::api::Changes>,
        Option<berth_core::patch::TaskDiff>,
    ),
    Vec<String>,
    Vec<String>,
    Vec<crate::inject::sidecar::guard::Restored>,
);

pub(super) async fn finish(
    place: Place,
    sidecars: Sidecars,
    task_id: &TaskId,
) -> Result<Finished, Stop> {
    // Nothing written to undo and no turn to commit: one `stat` (the recheck, which the
    // run also does on this thread before it starts), not worth a hand-off to a
    // blocking thread and back on the way to the task's end.
    if sidecars.is_empty() && place.worktree.is_none() {
        return Ok(wrap_up(place, sidecars, task_id));
    }
    let task_id = task_id.clone();
    blocking(move || wrap_up(place, sidecars, &task_id)).await
}

/// What [`finish`] does: checks the directory is still the one pinned, undoes the
/// sidecars, commits a worktree's turn.
fn wrap_up(place: Place, sidecars: Sidecars, task_id: &TaskId) -> Finished {
    let mut problems = Vec::new();
    if let Err(r) = place.pinned.recheck() {
        problems.push(r.message);
    }
    let (undone, cleaned) = sidecars.cleanup(&place.pinned);
    if let Err(e) = cleaned {
        problems.push(e.to_string());
    }
    let (kept, guarded) = (undone.kept, undone.guarded);
    let mut changes = None;
    let mut lines = None;
    let branch = place.worktree.as_ref().map(|wt| {
        match worktree::commit_turn(wt, task_id) {
            Ok(Some(commit)) => match worktree::commit_changes(wt, &commit) {
                Ok(c) => {
                    if !c.files.is_empty() {
                        match worktree::commit_patch(wt, &commit) {
                            Ok(p) => lines = Some(p),
                            Err(e) => problems.push(format!("cannot read the turn's lines: {e}")),
                        }
                    }
                    changes = Some(c);
                }
                Err(e) => problems.push(format!("cannot summarize the turn's commit: {e}")),
            },
            Ok(None) => changes = Some(berth_core::api::Changes::default()),
            Err(e) => {
                problems.push(format!("cannot commit the turn on {}: {e}", wt.branch));
            }
        }
        wt.branch.clone()
    });
    (branch, (changes, lines), problems, kept, guarded)
}
