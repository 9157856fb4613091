//! Per-session scratch directories: `$BERTH_HOME/scratch/<session>/`, kept across
//! turns so agents can resume there.

use berth_core::SessionId;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Creates (0700) or reuses the scratch directory of `session`, a name already
/// checked to be one safe path component.
pub fn ensure(berth_home: &Path, session: &SessionId) -> std::io::Result<PathBuf> {
    let dir = berth_home.join("scratch").join(session);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    Ok(dir)
}

/// Removes the scratch directory of `session` (a deleted session's); `false` when
/// there was none.
pub fn remove(berth_home: &Path, session: &SessionId) -> std::io::Result<bool> {
    match std::fs::remove_dir_all(berth_home.join("scratch").join(session)) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
