//! Undo: exactly the files a task changed put back to their content before it, through
//! the pinned directory; the plan journaled and synced first, and finished at the next
//! start if a Berth stops midway.

use super::error::{ChangesError, UndoError};
use super::shadow::Shadow;
use crate::dir::lock::abandoned;
use crate::dir::pin::PinnedDir;
use berth_core::TaskId;
use berth_core::api::Changes;
use berth_host::private;
use rustix::fs::{AtFlags, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// One file to put back: its content before the task (`None`: it did not exist),
/// and what the task left there (`None`: nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    pub path: String,
    /// (blob id, mode) before the task.
    pub before: Option<(String, String)>,
    /// Blob id after the task.
    pub after: Option<String>,
}

/// The undo plan, as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndoPlan {
    pub task_id: TaskId,
    pub dir: String,
    pub dev: u64,
    pub ino: u64,
    pub git_dir: PathBuf,
    pub files: Vec<Restore>,
}

/// What the files a task changed look like now against what it left.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub restores: Vec<Restore>,
    /// Files changed since the task (by the user or a later task).
    pub changed_since: Vec<String>,
    /// Every file is already as it was before the task (it was undone).
    pub already_undone: bool,
}

/// The undo of `task_id` in `dir`: what to restore and what changed since.
pub fn plan_undo(
    shadow: &Shadow,
    dir: &PinnedDir,
    task_id: &TaskId,
    changes: &Changes,
) -> Result<Plan, ChangesError> {
    let (before, after) = shadow
        .task_trees(task_id)
        .ok_or_else(|| ChangesError::RecordGone {
            task: task_id.to_string(),
            why: "pruned, or made on another machine",
        })?;
    let mut paths: Vec<String> = Vec::new();
    for f in &changes.files {
        if let Some(from) = &f.from {
            paths.push(from.clone());
        }
        paths.push(f.path.clone());
    }
    paths.sort();
    paths.dedup();
    let mut plan = Plan {
        already_undone: true,
        ..Plan::default()
    };
    for path in paths {
        let b = shadow.blob(&before, &path)?;
        let a = shadow.blob(&after, &path)?.map(|(oid, _)| oid);
        let now = current_blob(shadow, dir, &path)?;
        if now != a {
            plan.changed_since.push(path.clone());
        }
        if now != b.as_ref().map(|(oid, _)| oid.clone()) {
            plan.already_undone = false;
        }
        plan.restores.push(Restore {
            path,
            before: b,
            after: a,
        });
    }
    Ok(plan)
}

/// The blob id the file at `path` would have now (`None`: no regular file there).
fn current_blob(
    shadow: &Shadow,
    dir: &PinnedDir,
    path: &str,
) -> Result<Option<String>, ChangesError> {
    let bytes = match read_at(dir.fd(), path) {
        Ok(b) => b,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(None),
        Err(source) => {
            return Err(ChangesError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut child = shadow
        .command()
        .args(["hash-object", "--stdin", "--no-filters"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(&bytes)?;
    }
    let out = child.wait_with_output()?;
    Ok(Some(String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

fn read_at(dir: impl AsFd, path: &str) -> Result<Vec<u8>, Errno> {
    let (parent, name) = crate::dir::fd::at_parent(dir.as_fd(), path)?;
    let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Errno::NOENT);
    }
    let fd = crate::dir::fd::open_nofollow(&parent, name, OFlags::RDONLY)?;
    crate::dir::fd::read_all(&fd)
}

/// Opens the parent of `rel`, creating missing directories (without following
/// symlinks).
fn parent_creating(dir: impl AsFd, rel: &str) -> Result<(OwnedFd, String), Errno> {
    let mut comps: Vec<&str> = rel.split('/').filter(|c| !c.is_empty()).collect();
    let last = comps.pop().ok_or(Errno::INVAL)?.to_owned();
    if last == ".." || comps.contains(&"..") {
        return Err(Errno::INVAL);
    }
    let mut fd = rustix::io::dup(dir.as_fd())?;
    for comp in comps {
        match crate::dir::fd::open_nofollow(&fd, comp, OFlags::RDONLY | OFlags::DIRECTORY) {
            Ok(next) => fd = next,
            Err(Errno::NOENT) => {
                rustix::fs::mkdirat(&fd, comp, Mode::from_raw_mode(0o755))?;
                fd = crate::dir::fd::open_nofollow(&fd, comp, OFlags::RDONLY | OFlags::DIRECTORY)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok((fd, last))
}

/// Puts one file back: its content before the task, written beside it and renamed
/// over it (so a reader never sees half a file), or removed.
fn apply_one(git: &Shadow, dir: impl AsFd, r: &Restore) -> Result<(), UndoError> {
    let path = || r.path.clone();
    match &r.before {
        None => match crate::dir::fd::at_parent(dir.as_fd(), &r.path) {
            Ok((parent, name)) => match rustix::fs::unlinkat(&parent, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => Ok(()),
                Err(source) => Err(UndoError::Remove {
                    path: path(),
                    source,
                }),
            },
            Err(Errno::NOENT) => Ok(()),
            Err(source) => Err(UndoError::Reach {
                path: path(),
                source,
            }),
        },
        Some((oid, mode)) => {
            let bytes = git.blob_bytes(oid).map_err(|source| UndoError::Record {
                path: path(),
                source,
            })?;
            let (parent, name) =
                parent_creating(dir.as_fd(), &r.path).map_err(|source| UndoError::Reach {
                    path: path(),
                    source,
                })?;
            let tmp = format!(".{name}.berth-undo");
            let perm = if mode == "100755" { 0o755 } else { 0o644 };
            let fd = rustix::fs::openat(
                &parent,
                tmp.as_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC,
                Mode::from_raw_mode(perm),
            )
            .map_err(|source| UndoError::WriteBeside {
                path: path(),
                source,
            })?;
            crate::dir::fd::write_all(&fd, &bytes).map_err(|source| UndoError::Write {
                path: path(),
                source,
            })?;
            let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(perm));
            rustix::fs::fsync(&fd).map_err(|source| UndoError::Sync {
                path: path(),
                source,
            })?;
            drop(fd);
            rustix::fs::renameat(&parent, tmp.as_str(), &parent, name.as_str()).map_err(
                |source| UndoError::PutBack {
                    path: path(),
                    source,
                },
            )?;
            Ok(())
        }
    }
}

/// An undo journal held by this process until the undo is done.
#[derive(Debug)]
pub struct UndoJournal {
    path: PathBuf,
    _file: std::fs::File,
}

impl UndoJournal {
    /// Writes and syncs the plan (and the directory entry) before anything is touched.
    pub fn write(journal_dir: &Path, plan: &UndoPlan) -> Result<UndoJournal, UndoError> {
        let in_dir = |source: std::io::Error| UndoError::JournalDir {
            dir: journal_dir.to_owned(),
            source,
        };
        private::dir(journal_dir).map_err(in_dir)?;
        let path = journal_dir.join(format!(
            "{}-{}.undo",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        let text = serde_json::to_vec(plan).map_err(|e| in_dir(e.into()))?;
        let fd = rustix::fs::open(
            &path,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|source| UndoError::Journal {
            path: path.clone(),
            source,
        })?;
        let at = |source: Errno| UndoError::Journal {
            path: path.clone(),
            source,
        };
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).map_err(at)?;
        crate::dir::fd::write_all(&fd, &text).map_err(at)?;
        rustix::fs::fsync(&fd).map_err(at)?;
        std::fs::File::open(journal_dir)
            .and_then(|d| d.sync_all())
            .map_err(in_dir)?;
        Ok(UndoJournal {
            path,
            _file: std::fs::File::from(fd),
        })
    }

    /// The undo is complete: the journal goes.
    pub fn done(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Applies a journaled plan through the pinned directory. Idempotent: applying it
/// again (after a crash) finds the files already put back.
pub fn apply(plan: &UndoPlan, dir: impl AsFd) -> Result<(), UndoError> {
    let shadow = Shadow {
        git_dir: plan.git_dir.clone(),
        work_tree: PathBuf::from(&plan.dir),
    };
    let mut problems = Vec::new();
    for r in &plan.files {
        if let Err(e) = apply_one(&shadow, dir.as_fd(), r) {
            problems.push(e);
        }
    }
    match problems.len() {
        0 => Ok(()),
        1 => Err(problems.remove(0)),
        _ => Err(UndoError::Several(problems)),
    }
}

/// Test hook: after this many files of an undo, stop and wait to be killed (the
/// fault test SIGKILLs the process there). `N:FILE`: FILE is created when it waits.
pub const PAUSE_AFTER_ENV: &str = "BERTH_TEST_UNDO_PAUSE_AFTER";

/// Applies a plan, journaled (see the module's docs).
pub fn undo(journal_dir: &Path, plan: &UndoPlan, dir: &PinnedDir) -> Result<(), UndoError> {
    let journal = UndoJournal::write(journal_dir, plan)?;
    if let Some((n, marker)) = std::env::var(PAUSE_AFTER_ENV).ok().and_then(|v| {
        let (n, file) = v.split_once(':')?;
        Some((n.parse::<usize>().ok()?, PathBuf::from(file)))
    }) {
        let shadow = Shadow {
            git_dir: plan.git_dir.clone(),
            work_tree: PathBuf::from(&plan.dir),
        };
        for r in plan.files.iter().take(n) {
            apply_one(&shadow, dir.fd(), r)?;
        }
        let _ = private::write(&marker, "");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
    apply(plan, dir.fd())?;
    journal.done();
    Ok(())
}

/// Finishes every undo a Berth process left unfinished (journal files whose writer is
/// gone): the directory ends fully undone. One no longer the directory journaled is
/// left alone, its journal moved to `journal/unapplied/`. Returns the directories
/// finished.
pub fn replay_undos(journal_dir: &Path) -> Vec<String> {
    let mut done = Vec::new();
    for (file, _lock) in abandoned(journal_dir, "undo").files {
        let plan: Option<UndoPlan> = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(plan) = plan else {
            // Torn before its sync: nothing was touched.
            let _ = std::fs::remove_file(&file);
            continue;
        };
        let opened = rustix::fs::open(
            plan.dir.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let same = opened
            .as_ref()
            .ok()
            .and_then(|fd| rustix::fs::fstat(fd).ok())
            .is_some_and(|st| crate::dir::pin::dev_of(&st) == plan.dev && st.st_ino == plan.ino);
        match (opened, same) {
            (Ok(fd), true) => match apply(&plan, &fd) {
                Ok(()) => {
                    let _ = std::fs::remove_file(&file);
                    done.push(plan.dir.clone());
                }
                Err(e) => {
                    tracing::warn!(dir = %plan.dir, error = %e, "an unfinished undo could not be finished");
                    aside(journal_dir, &file);
                }
            },
            (Ok(_) | Err(_), _) => aside(journal_dir, &file),
        }
    }
    done
}

fn aside(journal_dir: &Path, file: &Path) {
    let dir = journal_dir.join("unapplied");
    let _ = private::dir(&dir);
    if let Some(name) = file.file_name() {
        let _ = std::fs::rename(file, dir.join(name));
    }
}
