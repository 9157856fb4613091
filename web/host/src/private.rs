//! Berth's own state is its user's alone: every directory Berth keeps is mode 0700 and
//! every file 0600, whatever the umask and whatever mode the directory it lives in had
//! (a `BERTH_HOME` that already existed as 0755, say). The home holds the database, the
//! web token, journals with copies of the user's files and the change record's
//! snapshots of them (a bound directory's `.env` included), so a mode bit too many
//! would hand another local user what the user's own directory kept from them.
//!
//! Every place that creates a directory or file of Berth's state goes through here:
//! modes are given at creation (not set afterwards, so nothing is ever readable for a
//! moment) and tightened on what an older version or another tool left wider.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of Berth's directories.
pub const DIR_MODE: u32 = 0o700;
/// The mode of Berth's files.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and its missing parents as 0700 directories. An existing `path`
/// that this user owns loses any group and other bits; parents that existed are left
/// as they are (they may be the user's own, like `~/.local/share`).
pub fn dir(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    tighten(path)
}

/// Removes the group and other bits of `path` (a file or directory) if it has any
/// and belongs to this user; another user's file is left to its owner.
pub fn tighten(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() || meta.mode() & 0o077 == 0 {
        return Ok(());
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Ok(());
    }
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode(meta.mode() & 0o7700 & !0o7000),
    )
}

/// [`tighten`] for `root` and everything below it (symbolic links are not followed).
pub fn tighten_tree(root: &Path) -> io::Result<()> {
    tighten(root)?;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            tighten(&path)?;
            if entry.file_type()?.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(())
}

/// Opens (creating it 0600 if missing) the file `path` for reading and writing, and
/// tightens an existing one.
pub fn open(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)?;
    tighten(path)?;
    Ok(file)
}

/// Writes `bytes` as the whole of the file `path` (created 0600), in place.
pub fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    f.write_all(bytes.as_ref())?;
    drop(f);
    tighten(path)
}

/// Writes `bytes` as the private file `path` (mode 0600), never seen half-written: a
/// temporary file beside it, synced, renamed into place, and the directory synced so
/// the rename survives a crash too.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::other("a file path without a directory"))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("a path without a file name"))?;
    let tmp = dir.join(format!(
        "{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    #[test]
    fn modes_whatever_was_there() {
        let root = std::env::temp_dir().join(format!("berth-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir(&root).unwrap();
        assert_eq!(mode(&root), 0o700);
        dir(&root.join("a/b")).unwrap();
        assert_eq!(
            (mode(&root.join("a")), mode(&root.join("a/b"))),
            (0o700, 0o700)
        );

        let f = root.join("f");
        std::fs::write(&f, "x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        open(&f).unwrap();
        assert_eq!(mode(&f), 0o600);
        write(root.join("g"), "y").unwrap();
        write_atomic(&root.join("h"), b"z").unwrap();
        assert_eq!(
            (mode(&root.join("g")), mode(&root.join("h"))),
            (0o600, 0o600)
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
