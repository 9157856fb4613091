//! Why a record, a watch or an undo could not be made.

use rustix::io::Errno;
use std::path::PathBuf;

/// Why a record could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("cannot run git: {0}")]
    Spawn(#[from] std::io::Error),
    /// The task's two trees are no longer in the shadow repository.
    #[error("the record of task {task} is gone ({why})")]
    RecordGone { task: String, why: &'static str },
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: Errno },
    #[error("the directory was replaced during the run")]
    Replaced,
    #[error("the directory cannot be read after the run: {0}")]
    Unreadable(Errno),
    #[error(transparent)]
    Watch(#[from] WatchError),
    /// Seeded from a repository's index, the content before the run of these files
    /// is not in the repository's objects any more (or is not what its id says).
    #[error("the content before the run of {} is not in the repository's objects (was it pruned?)", .0.join(", "))]
    Lost(Vec<String>),
}

/// Why a directory cannot be watched (its snapshots then scan it whole).
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("inotify is not available: {0}")]
    Unavailable(Errno),
    #[error("more than {0} directories")]
    TooManyDirs(usize),
    #[error("cannot watch {}: {source}", path.display())]
    Watch { path: PathBuf, source: Errno },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a file name that is not UTF-8 in {}", .0.display())]
    NotUtf8(PathBuf),
    #[error("a nested git repository at {0}")]
    Nested(String),
}

/// Why an undo stopped. Each names the file and what failed there.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    #[error("cannot remove {path}: {source}")]
    Remove { path: String, source: Errno },
    #[error("cannot reach {path}: {source}")]
    Reach { path: String, source: Errno },
    #[error("cannot read the record of {path}: {source}")]
    Record { path: String, source: ChangesError },
    #[error("cannot write beside {path}: {source}")]
    WriteBeside { path: String, source: Errno },
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: Errno },
    #[error("cannot sync {path}: {source}")]
    Sync { path: String, source: Errno },
    #[error("cannot put {path} back: {source}")]
    PutBack { path: String, source: Errno },
    #[error("cannot write the undo journal {}: {source}", path.display())]
    Journal { path: PathBuf, source: Errno },
    #[error("cannot write the undo journal in {}: {source}", dir.display())]
    JournalDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Several(Vec<UndoError>),
}
