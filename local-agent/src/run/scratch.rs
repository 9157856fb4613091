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
