//! One task per directory at a time, across tasks and across Berth processes.
//!
//! Two layers: a FIFO queue per canonical path inside this process (tokio's fair
//! mutex), then an OS `flock` on a file in a per-user lock directory that does not
//! depend on `BERTH_HOME`, so two Berth processes of one user (say, two homes) never
//! overlap in one directory. The lock file records the holder's pid and task id, so a
//! waiter can say who holds the directory. Waiting can be cancelled at any point; a
//! cancelled waiter holds nothing.

use berth_core::LocalPath;
use berth_core::wait::{Holder, directory_wait};
use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedMutexGuard, watch};

/// The holder of a directory whose change record's first snapshot is being taken
/// (at link time, before any task).
pub const FIRST_SNAPSHOT: &str = "first-snapshot";

/// What a waiter is told of `holder`, a task's id or [`FIRST_SNAPSHOT`], held in
/// the Berth process `process` (`None`: this one).
fn held_by<'a>(holder: &'a str, process: Option<&'a str>) -> Holder<'a> {
    if holder == FIRST_SNAPSHOT {
        Holder::FirstSnapshot { process }
    } else {
        Holder::Task {
            id: holder,
            process,
        }
    }
}

/// How often a waiter retries the OS lock held by another process.
const POLL: Duration = Duration::from_millis(10);

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("the lock directory {dir} cannot be used: {reason}")]
    LockDir { dir: PathBuf, reason: String },
    #[error("the lock file {file} cannot be used: {source}")]
    LockFile {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cancelled while waiting for the directory")]
    Cancelled,
}

#[derive(Debug, Default)]
struct Slot {
    queue: Arc<tokio::sync::Mutex<()>>,
    holder: Mutex<Option<String>>,
}

/// The per-directory locks of this process.
#[derive(Debug)]
pub struct DirLocks {
    dir: PathBuf,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
}

/// A held directory lock; dropping it releases both layers.
#[derive(Debug)]
pub struct DirLock {
    slot: Arc<Slot>,
    file: File,
    _queue: OwnedMutexGuard<()>,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Clear the record before the flock goes with the descriptor, so a waiter
        // never reads a holder that has left.
        let _ = self.file.set_len(0);
        if let Ok(mut h) = self.slot.holder.lock() {
            *h = None;
        }
    }
}

impl DirLocks {
    /// Uses (creating it 0700 if needed) the lock directory `dir`, which must be a real
    /// directory owned by the current user and writable by nobody else.
    pub fn new(dir: PathBuf) -> Result<DirLocks, LockError> {
        prepare_lock_dir(&dir)?;
        Ok(DirLocks {
            dir,
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// The lock directory in use.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the lock of `key` for `holder`: a task's id, or what else holds the
    /// directory (the CLI's undo: `undo-` and the task's short id), as waiters are told.
    /// While waiting, `on_wait` is called with a reason naming the holder (each time
    /// the holder changes). Returns `Cancelled` as soon as `cancel` turns true.
    pub async fn acquire(
        &self,
        key: &LocalPath,
        holder: &str,
        mut on_wait: impl FnMut(String),
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<DirLock, LockError> {
        let slot = self.slot(key);
        let guard = match slot.queue.clone().try_lock_owned() {
            Ok(g) => g,
            Err(_) => {
                let current = slot.holder.lock().map(|h| h.clone()).unwrap_or_default();
                on_wait(directory_wait(match &current {
                    Some(h) => held_by(h, None),
                    None => Holder::AnotherTask,
                }));
                tokio::select! {
                    g = slot.queue.clone().lock_owned() => g,
                    () = cancelled(cancel) => return Err(LockError::Cancelled),
                }
            }
        };
        let path = self.dir.join(lock_file_name(key));
        let mut file = open_lock_file(&path)?;
        let mut last_reason = None;
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(Errno::WOULDBLOCK | Errno::INTR) => {
                    let reason = describe_holder(&mut file);
                    if last_reason.as_ref() != Some(&reason) {
                        on_wait(reason.clone());
                        last_reason = Some(reason);
                    }
                    tokio::select! {
                        () = tokio::time::sleep(POLL) => {}
                        () = cancelled(cancel) => return Err(LockError::Cancelled),
                    }
                }
                Err(e) => {
                    return Err(LockError::LockFile {
                        file: path,
                        source: e.into(),
                    });
                }
            }
        }
        hold(slot, guard, file, path, holder)
    }

    /// Takes the lock of `key` for `holder` only if it is free at once, without
    /// waiting (callable from a blocking thread): `None` when a task of this process
    /// holds or waits for it, or another process holds it. [`DirLocks::acquire`] waits.
    pub fn try_acquire(&self, key: &LocalPath, holder: &str) -> Result<Option<DirLock>, LockError> {
        let slot = self.slot(key);
        let Ok(guard) = slot.queue.clone().try_lock_owned() else {
            return Ok(None);
        };
        let path = self.dir.join(lock_file_name(key));
        let file = open_lock_file(&path)?;
        match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => hold(slot, guard, file, path, holder).map(Some),
            Err(Errno::WOULDBLOCK | Errno::INTR) => Ok(None),
            Err(e) => Err(LockError::LockFile {
                file: path,
                source: e.into(),
            }),
        }
    }

    fn slot(&self, key: &LocalPath) -> Arc<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(key.as_str().to_owned()).or_default().clone()
    }
}

/// Both layers taken: records the holder (in the file, for other processes' waiters,
/// and in the slot, for this one's).
fn hold(
    slot: Arc<Slot>,
    guard: OwnedMutexGuard<()>,
    mut file: File,
    path: PathBuf,
    holder: &str,
) -> Result<DirLock, LockError> {
    let record = format!("{} {holder}\n", std::process::id());
    let written = file
        .set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(record.as_bytes()));
    if let Err(source) = written {
        return Err(LockError::LockFile { file: path, source });
    }
    if let Ok(mut h) = slot.holder.lock() {
        *h = Some(holder.to_owned());
    }
    Ok(DirLock {
        slot,
        file,
        _queue: guard,
    })
}

impl DirLocks {
    /// Whether another process (or another `DirLocks`) holds the OS lock of `key`
    /// right now. Takes and releases the lock when it is free.
    pub fn is_held_elsewhere(&self, key: &LocalPath) -> bool {
        let Ok(file) = open_lock_file(&self.dir.join(lock_file_name(key))) else {
            return false;
        };
        matches!(
            rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive),
            Err(Errno::WOULDBLOCK)
        )
    }
}

/// Resolves when `cancel` turns true; never, if its sender is gone.
pub(crate) async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The wait reason naming who holds the OS lock, from the record in its file.
fn describe_holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.read_to_string(&mut text));
    let mut words = text.split_whitespace();
    let me = std::process::id().to_string();
    directory_wait(match (words.next(), words.next()) {
        (Some(pid), Some(task)) if pid == me => held_by(task, None),
        (Some(pid), Some(task)) => held_by(task, Some(pid)),
        (Some(pid), None) => Holder::Process { pid },
        (None, _) => Holder::AnotherProcess,
    })
}

/// A file name for the lock of `key`: a readable tail plus a hash of the whole path.
fn lock_file_name(key: &LocalPath) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_str().bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let tail: String = key
        .file_name()
        .unwrap_or("root")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(32)
        .collect();
    format!("{tail}-{hash:016x}.lock")
}

fn open_lock_file(path: &Path) -> Result<File, LockError> {
    rustix::fs::open(
        path,
        OFlags::CREATE | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )
    .map(File::from)
    .map_err(|e| LockError::LockFile {
        file: path.to_owned(),
        source: e.into(),
    })
}

fn prepare_lock_dir(dir: &Path) -> Result<(), LockError> {
    let fail = |reason: String| LockError::LockDir {
        dir: dir.to_owned(),
        reason,
    };
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(e.to_string()))?;
    }
    match rustix::fs::mkdir(dir, Mode::RWXU) {
        Ok(()) | Err(Errno::EXIST) => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    let st = rustix::fs::lstat(dir).map_err(|e| fail(e.to_string()))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(fail(
            "it is not a directory (a symlink is not accepted)".to_owned(),
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me {
        return Err(fail(format!(
            "it belongs to uid {}, not to you (uid {me})",
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(fail(format!(
            "it is writable by other users (mode {:o}); run chmod 700 on it",
            st.st_mode & 0o777
        )));
    }
    Ok(())
}

/// Files a Berth process left in a directory of per-process records (journals, agent
/// groups), split by whether their writer is gone.
#[derive(Debug, Default)]
pub(crate) struct Abandoned {
    /// Files whose writer is gone, each with its lock now held by us, in name order.
    pub files: Vec<(PathBuf, File)>,
    /// Files a live Berth process still holds: never touched.
    pub in_use: Vec<PathBuf>,
}

/// Lists the `*.<ext>` files in `dir` and takes each one's flock: a writer holds it for
/// its whole life, so a lock we can take means the writer is gone.
pub(crate) fn abandoned(dir: &Path, ext: &str) -> Abandoned {
    let mut out = Abandoned::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    for file in files {
        let Ok(handle) = File::open(&file) else {
            continue;
        };
        if rustix::fs::flock(&handle, FlockOperation::NonBlockingLockExclusive).is_err() {
            out.in_use.push(file);
        } else {
            out.files.push((file, handle));
        }
    }
    out
}
