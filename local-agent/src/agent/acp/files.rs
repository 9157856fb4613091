//! `fs/read_text_file` and `fs/write_text_file`, served beneath the run's pinned
//! directory: the path must be absolute and lexically inside the directory, and it is
//! then walked from the pinned descriptor one component at a time, never following a
//! symlink and never climbing with `..` (see [`crate::dir::fd`]). A write never goes
//! through a hard link (a file with more than one name may be one outside), and never
//! into what the fence protects inside the directory (`.git/hooks`, `.git/config`,
//! `.berth`). Berth writes here on the agent's behalf, outside its fence: these rules
//! are the fence for it.

use crate::dir::fd::open_nofollow;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use std::path::Path;

/// The largest file Berth reads for an agent.
pub const MAX_READ: u64 = 16 << 20;

/// Why a file request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("{path} is outside the run's directory {dir}")]
    Outside { path: String, dir: String },
    #[error("{path} is guarded: agents never change .git/hooks, .git/config or .berth")]
    Protected { path: String },
    #[error("{path} does not exist")]
    NotFound { path: String },
    #[error("{path} is refused: {why}")]
    Refused { path: String, why: String },
    #[error("the agent's policy is read-only: it may not write {path}")]
    ReadOnly { path: String },
}

impl FileError {
    /// Whether the refusal is Berth's (a denial), not the file's state.
    pub fn is_denial(&self) -> bool {
        !matches!(self, FileError::NotFound { .. })
    }
}

/// `path` relative to `work_dir`, or why not.
fn relative(work_dir: &Path, path: &str) -> Result<String, FileError> {
    let outside = || FileError::Outside {
        path: path.to_owned(),
        dir: work_dir.display().to_string(),
    };
    let p = Path::new(path);
    if !p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(outside());
    }
    let rel = p.strip_prefix(work_dir).map_err(|_| outside())?;
    let rel = rel
        .to_str()
        .ok_or_else(outside)?
        .trim_matches('/')
        .to_owned();
    if rel.is_empty() {
        return Err(outside());
    }
    Ok(rel)
}

/// Whether `rel` is (or is inside) a name the fence protects: those of
/// [`berth_core::fence::PROTECT_IN_DIR`], and any repository's `.git` (a git
/// directory, or the file that points at one) at any depth, where git finds the
/// configuration and hooks the user's next `git` obeys (the guard's rules for what the
/// agent's own tools write: [`crate::inject::sidecar::guard::repos`]). Compared
/// without ASCII case: on a case-insensitive file system (the Mac's) `.GIT/HOOKS` is
/// `.git/hooks`.
fn protected(rel: &str) -> bool {
    let comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    if comps.iter().any(|c| c.eq_ignore_ascii_case(".git")) {
        return true;
    }
    berth_core::fence::PROTECT_IN_DIR.iter().any(|pattern| {
        comps.len() >= pattern.len()
            && comps
                .iter()
                .zip(pattern.iter())
                .all(|(c, p)| c.eq_ignore_ascii_case(p))
    })
}

fn refused(path: &str, e: Errno) -> FileError {
    let why = match e {
        Errno::LOOP | Errno::NOTDIR => "a symlink on the way (Berth never follows one)".to_owned(),
        e => e.to_string(),
    };
    FileError::Refused {
        path: path.to_owned(),
        why,
    }
}

/// The directory that holds `rel`'s last component, walked from `dir`, the missing
/// ones made when `create` says so; with that last component.
fn parent<'r>(
    dir: BorrowedFd<'_>,
    rel: &'r str,
    create: bool,
) -> Result<(OwnedFd, &'r str), Errno> {
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let last = comps.pop().ok_or(Errno::INVAL)?;
    if last == "." || last == ".." || comps.iter().any(|c| *c == "." || *c == "..") {
        return Err(Errno::INVAL);
    }
    let mut fd = rustix::io::dup(dir)?;
    for comp in comps {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        fd = match open_nofollow(&fd, comp, flags) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&fd, comp, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e),
                }
                open_nofollow(&fd, comp, flags)?
            }
            other => other?,
        };
    }
    Ok((fd, last))
}

/// Writes `content` as the whole of `path` (made if missing, with the directories
/// above it).
pub fn write(
    dir: BorrowedFd<'_>,
    work_dir: &Path,
    path: &str,
    content: &str,
) -> Result<(), FileError> {
    let rel = relative(work_dir, path)?;
    if protected(&rel) {
        return Err(FileError::Protected {
            path: path.to_owned(),
        });
    }
    let (parent, name) = parent(dir, &rel, true).map_err(|e| refused(path, e))?;
    let fd = match open_nofollow(
        &parent,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
    ) {
        Ok(fd) => fd,
        Err(Errno::EXIST) => {
            let fd = open_nofollow(&parent, name, OFlags::WRONLY).map_err(|e| refused(path, e))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| refused(path, e))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                return Err(refused(path, Errno::ISDIR));
            }
            if st.st_nlink > 1 {
                return Err(FileError::Refused {
                    path: path.to_owned(),
                    why: "a hard link (its other name may be outside the directory)".to_owned(),
                });
            }
            rustix::fs::ftruncate(&fd, 0).map_err(|e| refused(path, e))?;
            fd
        }
        Err(e) => return Err(refused(path, e)),
    };
    crate::dir::fd::write_all(&fd, content.as_bytes()).map_err(|e| refused(path, e))
}

/// Reads `path` as text, from 1-based `line` and at most `limit` lines when given.
pub fn read(
    dir: BorrowedFd<'_>,
    work_dir: &Path,
    path: &str,
    line: Option<u64>,
    limit: Option<u64>,
) -> Result<String, FileError> {
    let rel = relative(work_dir, path)?;
    let not_found = || FileError::NotFound {
        path: path.to_owned(),
    };
    let (parent, name) = parent(dir, &rel, false).map_err(|e| match e {
        Errno::NOENT => not_found(),
        e => refused(path, e),
    })?;
    let fd = open_nofollow(&parent, name, OFlags::RDONLY).map_err(|e| match e {
        Errno::NOENT => not_found(),
        e => refused(path, e),
    })?;
    let st = rustix::fs::fstat(fd.as_fd()).map_err(|e| refused(path, e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(refused(path, Errno::ISDIR));
    }
    if u64::try_from(st.st_size).unwrap_or(u64::MAX) > MAX_READ {
        return Err(FileError::Refused {
            path: path.to_owned(),
            why: format!("larger than {} MiB", MAX_READ >> 20),
        });
    }
    let bytes = crate::dir::fd::read_all(&fd).map_err(|e| refused(path, e))?;
    let text = String::from_utf8_lossy(&bytes);
    let skip = usize::try_from(line.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
    let take = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    if skip == 0 && take == usize::MAX {
        return Ok(text.into_owned());
    }
    Ok(text.split_inclusive('\n').skip(skip).take(take).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    use berth_test_support::TempDir;

    fn setup() -> (TempDir, OwnedFd, std::path::PathBuf) {
        let root = TempDir::new("acp-files");
        let app = root.path().join("app");
        std::fs::create_dir_all(app.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.path().join("other")).unwrap();
        let fd = rustix::fs::open(&app, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        (root, fd, app)
    }

    #[test]
    fn writes_and_reads_stay_beneath_the_directory() {
        let (root, fd, app) = setup();
        let at = |p: &str| app.join(p).display().to_string();
        write(fd.as_fd(), &app, &at("src/new.txt"), "one\ntwo\nthree\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(app.join("src/new.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );
        assert_eq!(
            read(fd.as_fd(), &app, &at("src/new.txt"), Some(2), Some(1)).unwrap(),
            "two\n"
        );
        write(fd.as_fd(), &app, &at("src/new.txt"), "x").unwrap();
        assert_eq!(
            read(fd.as_fd(), &app, &at("src/new.txt"), None, None).unwrap(),
            "x"
        );
        assert!(matches!(
            read(fd.as_fd(), &app, &at("missing"), None, None),
            Err(FileError::NotFound { .. })
        ));

        // Out of the directory: by name, by `..`, through a symlink, through a hard link.
        let other = root.path().join("other");
        std::os::unix::fs::symlink(&other, app.join("link")).unwrap();
        std::fs::write(other.join("victim"), "keep").unwrap();
        std::fs::hard_link(other.join("victim"), app.join("hard")).unwrap();
        for (p, what) in [
            ("/etc/x".to_owned(), "outside"),
            (format!("{}/../other/x", app.display()), "outside"),
            (other.join("x").display().to_string(), "outside"),
            (at("link/x"), "refused"),
            (at("link"), "refused"),
            (at("hard"), "refused"),
            (at(".git/hooks/pre-commit"), "protected"),
            (at(".git/config"), "protected"),
            (at(".berth/settings.jsonc"), "protected"),
            (at(".GIT/Hooks/pre-commit"), "protected"),
            (at("vendor/lib/.git/config"), "protected"),
            (at("sub/.git"), "protected"),
            (at("a/.git/commondir"), "protected"),
            (at(".git/info/attributes"), "protected"),
            ("relative.txt".to_owned(), "outside"),
            (app.display().to_string(), "outside"),
        ] {
            let err = write(fd.as_fd(), &app, &p, "evil").unwrap_err();
            let got = match err {
                FileError::Outside { .. } => "outside",
                FileError::Protected { .. } => "protected",
                FileError::Refused { .. } => "refused",
                FileError::NotFound { .. } | FileError::ReadOnly { .. } => "other",
            };
            assert_eq!(got, what, "{p}: {err}");
            assert!(err.is_denial());
        }
        assert!(read(fd.as_fd(), &app, &at("link/victim"), None, None).is_err());
        assert_eq!(
            std::fs::read_to_string(other.join("victim")).unwrap(),
            "keep"
        );
        assert!(!other.join("x").exists());
        assert!(!app.join(".git/hooks/pre-commit").exists());
        assert!(!app.join(".berth").exists());
    }
}
