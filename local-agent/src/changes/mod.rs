//! What an agent changed in a bound directory, and putting it back.
//!
//! Each bound directory gets a *shadow* git repository in Berth's state,
//! `$BERTH_HOME/snapshots/<hash of the path>.git`, used with `--work-tree` set to the
//! directory and its own index as a stat cache. Before an in-place run and after it
//! (both under the directory's lock) Berth records the directory's tree there; the
//! difference is the task's change summary, and the two trees stay under
//! `refs/berth/<task>/{before,after}` for `berth task diff` and `berth task undo`.
//! Nothing is ever written into the directory or its own `.git`: git reads the work
//! tree, and writes only in the shadow repository.
//!
//! - `.gitignore` files (and the user's global excludes) are respected, as git does.
//! - Files over the size cap are not recorded; they are listed as skipped.
//! - Changes outside the directory are not tracked.
//! - Old records are pruned by count and age ([`Limits`], the user settings'
//!   `snapshots`).
//!
//! Undo restores exactly the files a task changed to their content before it. Its
//! plan is written to `$BERTH_HOME/journal/*.undo` and synced before the first file is
//! touched; a Berth that stops mid-undo finishes it at the next start
//! ([`replay_undos`]), so the directory ends either untouched or fully undone.

mod bulk;
mod diff;
mod error;
mod index;
mod limits;
pub mod progress;
mod seed;
mod shadow;
mod snapshot;
mod tree;
mod undo;
#[cfg(target_os = "linux")]
pub mod watch;

pub use diff::{PATCH_ARGS, PATCH_READ, parse_diff};
pub use error::{ChangesError, UndoError, WatchError};
pub use limits::Limits;
pub use shadow::Shadow;
pub use tree::Snapshot;
pub use undo::{
    PAUSE_AFTER_ENV, Plan, Restore, UndoJournal, UndoPlan, apply, plan_undo, replay_undos, undo,
};

/// Where the shadow repositories live inside Berth's home.
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// Now, since the Unix epoch (zero if the clock is before it).
fn since_epoch() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
